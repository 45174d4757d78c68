//! Tamper-evident `requestState` for multi round-trip requests (SEP-2322).
//!
//! A stateless server keeps a multi-round flow's progress in the `requestState` it hands the
//! client, which echoes it back verbatim on its retry. The client is not trusted with it: the
//! state is sealed with HMAC-SHA-256 under a key drawn at start-up, so an altered (or foreign)
//! state fails to open and the retry is refused (`input-required-result-tampered-state`).
//!
//! A sealed state is `<payload>.<tag>`, both base64url without padding: the payload is the state
//! as JSON, the tag is the HMAC of the payload's base64 text. The state is integrity protected,
//! not secret; rmcp's own codec (feature `request-state`) is not used so that rmcp is built with
//! the same features as for the rest of the workspace.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256's block size, which HMAC pads its key to.
const BLOCK_SIZE: usize = 64;

/// Seals and opens request states under one secret key.
pub struct RequestStateSeal {
    key: [u8; 32],
}

/// A request state that was not sealed by this server, or was altered since.
#[derive(Debug, PartialEq, Eq)]
pub struct TamperedState;

impl RequestStateSeal {
    /// A seal with a key from the operating system's random source: states sealed before a
    /// restart no longer open, which is right for a test server.
    pub fn random() -> Self {
        let mut key = [0; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        Self { key }
    }

    /// `state`, sealed for a round trip through the client.
    pub fn seal(&self, state: &Value) -> String {
        let payload = URL_SAFE_NO_PAD.encode(state.to_string());
        let tag = URL_SAFE_NO_PAD.encode(hmac_sha256(&self.key, payload.as_bytes()));
        format!("{payload}.{tag}")
    }

    /// The state `sealed` holds, if this seal sealed it and it is unaltered.
    pub fn open(&self, sealed: &str) -> Result<Value, TamperedState> {
        let (payload, tag) = sealed.split_once('.').ok_or(TamperedState)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| TamperedState)?;
        let expected = hmac_sha256(&self.key, payload.as_bytes());
        if !constant_time_eq(&tag, &expected) {
            return Err(TamperedState);
        }
        let json = URL_SAFE_NO_PAD.decode(payload).map_err(|_| TamperedState)?;
        serde_json::from_slice(&json).map_err(|_| TamperedState)
    }
}

/// HMAC-SHA-256 (RFC 2104) of `message` under a key no longer than a block.
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let mut inner_pad = [0x36; BLOCK_SIZE];
    let mut outer_pad = [0x5c; BLOCK_SIZE];
    for (index, byte) in key.iter().enumerate() {
        inner_pad[index] ^= byte;
        outer_pad[index] ^= byte;
    }
    let inner = Sha256::new()
        .chain_update(inner_pad)
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(outer_pad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// Whether `a` equals `b`, in a time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hmac_matches_rfc_4231_test_case_2() {
        // RFC 4231 §4.3: key "Jefe" (zero-padded to the block, as HMAC does).
        let mut key = [0; 32];
        key[..4].copy_from_slice(b"Jefe");
        let tag = hmac_sha256(&key, b"what do ya want for nothing?");
        let hex: String = tag.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_sealed_state_opens_to_itself() {
        let seal = RequestStateSeal::random();
        let state = json!({"tool": "multi_round", "round": 2});
        assert_eq!(seal.open(&seal.seal(&state)), Ok(state));
    }

    #[test]
    fn an_altered_state_does_not_open() {
        let seal = RequestStateSeal::random();
        let sealed = seal.seal(&json!({"round": 1}));
        assert_eq!(seal.open(&format!("{sealed}-TAMPERED")), Err(TamperedState));
        let forged = URL_SAFE_NO_PAD.encode(json!({"round": 9}).to_string());
        let (_, tag) = sealed.split_once('.').unwrap_or_default();
        assert_eq!(seal.open(&format!("{forged}.{tag}")), Err(TamperedState));
        assert_eq!(seal.open("not a sealed state"), Err(TamperedState));
    }

    #[test]
    fn another_server_s_state_does_not_open() {
        let sealed = RequestStateSeal::random().seal(&json!({"round": 1}));
        assert_eq!(RequestStateSeal::random().open(&sealed), Err(TamperedState));
    }
}
