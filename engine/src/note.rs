//! Signed checkpoints of the journal's Merkle trees (CONTRACT §13): C2SP `tlog-checkpoint`
//! bodies in C2SP `signed-note`s, Ed25519 note signatures (type `0x01`) by the journal's key,
//! and witnesses' `tlog-cosignature`s (Ed25519 `cosignature/v1`, type `0x04`).
//!
//! A note is its text (newline-terminated lines), a blank line, and one line per signature:
//! `— <key name> <base64(4-byte key id ‖ signature)>`. A key id is the first four bytes of
//! `SHA-256(<key name> ‖ 0x0A ‖ <type> ‖ <32-byte public key>)`; a verifier key is written
//! `<key name>+<8 hex digits of the key id>+<base64(<type> ‖ public key)>`.
//!
//! A checkpoint's text is its origin line (`<host>/aperture/<tenant>`), the tree size in
//! decimal and the root hash in standard base64; the journal's key name is the origin.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::merkle::Hash;
use crate::receipt::Signer;

/// Signature type of Ed25519 note signatures.
pub const ED25519: u8 = 0x01;
/// Signature type of Ed25519 `cosignature/v1` cosignatures.
pub const COSIGNATURE_V1: u8 = 0x04;
/// Most signature lines a note may carry before it is refused.
pub const MAX_SIGNATURES: usize = 100;

/// The em dash and space that begin a signature line.
const DASH: &str = "\u{2014} ";

/// Why a note, checkpoint, key or signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// The text is not a signed note or checkpoint.
    #[error("malformed: {0}")]
    Malformed(String),
    /// A verifier key that cannot be read.
    #[error("bad verifier key: {0}")]
    BadKey(String),
    /// No signature line of the expected name and key id.
    #[error("no signature by {0}")]
    NotSigned(String),
    /// A signature line of the expected key that does not verify.
    #[error("the signature by {0} does not verify")]
    BadSignature(String),
}

fn malformed(what: impl Into<String>) -> NoteError {
    NoteError::Malformed(what.into())
}

/// A key name: non-empty, no whitespace, no `+`.
pub fn valid_key_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+')
}

/// The key id of `key` under `name` for signature type `kind`.
pub fn key_id(name: &str, kind: u8, key: &VerifyingKey) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([b'\n', kind]);
    h.update(key.as_bytes());
    let digest = h.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// A public key with the name and signature type it verifies under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    /// Key name (for the journal's key: the checkpoint's origin).
    pub name: String,
    /// [`ED25519`] or [`COSIGNATURE_V1`].
    pub kind: u8,
    /// The Ed25519 public key.
    pub key: VerifyingKey,
}

impl VerifierKey {
    /// `key` under `name` for signatures of type `kind`.
    pub fn new(name: &str, kind: u8, key: VerifyingKey) -> Result<Self, NoteError> {
        if !valid_key_name(name) {
            return Err(NoteError::BadKey(format!("key name {name:?}")));
        }
        Ok(Self {
            name: name.to_owned(),
            kind,
            key,
        })
    }

    /// Its key id.
    pub fn id(&self) -> [u8; 4] {
        key_id(&self.name, self.kind, &self.key)
    }

    /// Reads `<name>+<hex key id>+<base64(type ‖ key)>`, checking that the id is the key's.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let text = text.trim();
        // The name holds no `+`; the base64 key may.
        let mut parts = text.splitn(3, '+');
        let (Some(name), Some(id), Some(material)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(NoteError::BadKey("expected <name>+<key id>+<key>".into()));
        };
        let bytes = STANDARD
            .decode(material)
            .map_err(|_| NoteError::BadKey("the key is not base64".into()))?;
        let (&kind, raw) = bytes
            .split_first()
            .ok_or_else(|| NoteError::BadKey("empty key".into()))?;
        if kind != ED25519 && kind != COSIGNATURE_V1 {
            return Err(NoteError::BadKey(format!(
                "signature type {kind:#04x} is not Ed25519 (0x01) or cosignature/v1 (0x04)"
            )));
        }
        let raw: [u8; 32] = raw
            .try_into()
            .map_err(|_| NoteError::BadKey("an Ed25519 key is 32 bytes".into()))?;
        let key = VerifyingKey::from_bytes(&raw)
            .map_err(|_| NoteError::BadKey("not an Ed25519 public key".into()))?;
        let key = Self::new(name, kind, key)?;
        if id.len() != 8 || hex::encode(key.id()) != id.to_ascii_lowercase() {
            return Err(NoteError::BadKey(
                "the key id does not match the key".into(),
            ));
        }
        Ok(key)
    }
}

impl std::fmt::Display for VerifierKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut material = vec![self.kind];
        material.extend_from_slice(self.key.as_bytes());
        write!(
            f,
            "{}+{}+{}",
            self.name,
            hex::encode(self.id()),
            STANDARD.encode(material)
        )
    }
}

/// One signature line of a note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// Key name.
    pub name: String,
    /// Key id.
    pub id: [u8; 4],
    /// What follows the key id: for Ed25519 the 64-byte signature; for a cosignature the
    /// 8-byte timestamp and the signature.
    pub signature: Vec<u8>,
}

impl NoteSignature {
    /// The line, without its newline.
    pub fn line(&self) -> String {
        let mut bytes = self.id.to_vec();
        bytes.extend_from_slice(&self.signature);
        format!("{DASH}{} {}", self.name, STANDARD.encode(bytes))
    }

    /// Reads a line (without its newline).
    pub fn parse(line: &str) -> Result<Self, NoteError> {
        let rest = line
            .strip_prefix(DASH)
            .ok_or_else(|| malformed("a signature line starts with an em dash and a space"))?;
        let (name, encoded) = rest
            .split_once(' ')
            .ok_or_else(|| malformed("a signature line is a name and a signature"))?;
        if !valid_key_name(name) {
            return Err(malformed(format!("key name {name:?}")));
        }
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|_| malformed("the signature is not base64"))?;
        if bytes.len() < 5 {
            return Err(malformed("the signature is too short"));
        }
        Ok(Self {
            name: name.to_owned(),
            id: [bytes[0], bytes[1], bytes[2], bytes[3]],
            signature: bytes[4..].to_vec(),
        })
    }
}

/// A signed note: its text (ending in a newline) and its signature lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The signed text, with its final newline.
    pub text: String,
    /// Every signature line, in order.
    pub signatures: Vec<NoteSignature>,
}

impl Note {
    /// Reads a whole note.
    pub fn parse(note: &str) -> Result<Self, NoteError> {
        let at = note
            .find("\n\n")
            .ok_or_else(|| malformed("a note is its text, a blank line and signatures"))?;
        let (text, rest) = (&note[..=at], &note[at + 2..]);
        check_text(text)?;
        let lines = rest
            .strip_suffix('\n')
            .ok_or_else(|| malformed("a note ends with a newline"))?;
        let signatures = lines
            .split('\n')
            .map(NoteSignature::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if signatures.len() > MAX_SIGNATURES {
            return Err(malformed("too many signatures"));
        }
        Ok(Self {
            text: text.to_owned(),
            signatures,
        })
    }

    /// Text, blank line, signature lines.
    pub fn render(&self) -> String {
        let mut out = self.text.clone();
        out.push('\n');
        for s in &self.signatures {
            out.push_str(&s.line());
            out.push('\n');
        }
        out
    }

    /// `text` signed with Ed25519 by `signer` under `name`.
    pub fn sign(text: &str, name: &str, signer: &Signer) -> Result<Self, NoteError> {
        check_text(text)?;
        let mut note = Self {
            text: text.to_owned(),
            signatures: Vec::new(),
        };
        note.add_signature(name, signer)?;
        Ok(note)
    }

    /// Adds an Ed25519 signature by `signer` under `name` (a key being rotated out signs once
    /// more beside the new one).
    pub fn add_signature(&mut self, name: &str, signer: &Signer) -> Result<(), NoteError> {
        let key = VerifierKey::new(name, ED25519, signer.verifying_key())?;
        self.signatures.push(NoteSignature {
            name: name.to_owned(),
            id: key.id(),
            signature: signer.sign_raw(self.text.as_bytes()).to_vec(),
        });
        Ok(())
    }

    /// The signature lines of `key`'s name and id.
    fn by<'a>(&'a self, key: &'a VerifierKey) -> impl Iterator<Item = &'a NoteSignature> {
        let id = key.id();
        self.signatures
            .iter()
            .filter(move |s| s.name == key.name && s.id == id)
    }

    /// Checks the Ed25519 signature of `key` ([`ED25519`]) over the text.
    pub fn verify(&self, key: &VerifierKey) -> Result<(), NoteError> {
        if key.kind != ED25519 {
            return Err(NoteError::BadKey("not a note signing key (0x01)".into()));
        }
        let mut found = false;
        for s in self.by(key) {
            found = true;
            if verify_raw(&key.key, self.text.as_bytes(), &s.signature) {
                return Ok(());
            }
        }
        Err(if found {
            NoteError::BadSignature(key.name.clone())
        } else {
            NoteError::NotSigned(key.name.clone())
        })
    }

    /// Checks `key`'s cosignature ([`COSIGNATURE_V1`]) over the text and returns its
    /// timestamp (seconds since the epoch).
    pub fn verify_cosignature(&self, key: &VerifierKey) -> Result<u64, NoteError> {
        if key.kind != COSIGNATURE_V1 {
            return Err(NoteError::BadKey("not a cosigner key (0x04)".into()));
        }
        let mut found = false;
        for s in self.by(key) {
            found = true;
            if let Some(time) = check_cosignature(&self.text, &key.key, &s.signature) {
                return Ok(time);
            }
        }
        Err(if found {
            NoteError::BadSignature(key.name.clone())
        } else {
            NoteError::NotSigned(key.name.clone())
        })
    }
}

fn check_text(text: &str) -> Result<(), NoteError> {
    if text.is_empty() || !text.ends_with('\n') {
        return Err(malformed("a note's text ends with a newline"));
    }
    if text.chars().any(|c| c.is_control() && c != '\n') {
        return Err(malformed("a note's text has no control characters"));
    }
    Ok(())
}

fn verify_raw(key: &VerifyingKey, message: &[u8], signature: &[u8]) -> bool {
    let Ok(signature) = <[u8; 64]>::try_from(signature) else {
        return false;
    };
    key.verify_strict(message, &Signature::from_bytes(&signature))
        .is_ok()
}

/// The message a `cosignature/v1` signs: its header and time lines, then the checkpoint text.
pub fn cosigned_message(text: &str, time: u64) -> String {
    format!("cosignature/v1\ntime {time}\n{text}")
}

fn check_cosignature(text: &str, key: &VerifyingKey, signature: &[u8]) -> Option<u64> {
    if signature.len() != 8 + 64 {
        return None;
    }
    let time = u64::from_be_bytes(signature[..8].try_into().ok()?);
    if time > i64::MAX as u64 {
        return None;
    }
    verify_raw(
        key,
        cosigned_message(text, time).as_bytes(),
        &signature[8..],
    )
    .then_some(time)
}

/// A witness's cosignature line of checkpoint `text` at `time`, signed by `signer` under
/// `name`.
pub fn cosign(
    text: &str,
    name: &str,
    signer: &Signer,
    time: u64,
) -> Result<NoteSignature, NoteError> {
    check_text(text)?;
    let key = VerifierKey::new(name, COSIGNATURE_V1, signer.verifying_key())?;
    let mut signature = time.to_be_bytes().to_vec();
    signature.extend_from_slice(&signer.sign_raw(cosigned_message(text, time).as_bytes()));
    Ok(NoteSignature {
        name: name.to_owned(),
        id: key.id(),
        signature,
    })
}

/// The body of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's origin, `<host>/aperture/<tenant>`.
    pub origin: String,
    /// Leaves in the tree.
    pub size: u64,
    /// The tree's root hash.
    pub root: Hash,
}

impl Checkpoint {
    /// The note text: origin, size, base64 root, each on its line.
    pub fn text(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            STANDARD.encode(self.root)
        )
    }

    /// Reads a note text (extension lines after the root are allowed and ignored).
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        check_text(text)?;
        let mut lines = text[..text.len() - 1].split('\n');
        let origin = lines
            .next()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| malformed("a checkpoint starts with its origin"))?;
        let size_text = lines
            .next()
            .ok_or_else(|| malformed("a checkpoint's second line is its size"))?;
        let size: u64 = size_text
            .parse()
            .ok()
            .filter(|_| size_text == "0" || !size_text.starts_with('0'))
            .filter(|_| size_text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| malformed("the tree size is a decimal number"))?;
        let root: Hash = lines
            .next()
            .and_then(|r| STANDARD.decode(r).ok())
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| malformed("a checkpoint's third line is a base64 SHA-256 hash"))?;
        if lines.any(str::is_empty) {
            return Err(malformed("a checkpoint has no empty lines"));
        }
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle;

    fn signer(n: u8) -> Signer {
        Signer::from_seed(&[n; 32])
    }

    fn checkpoint() -> Checkpoint {
        let leaves: Vec<_> = (0..5u8).map(|i| merkle::leaf_hash(&[i])).collect();
        Checkpoint {
            origin: "gw.example/aperture/acme".into(),
            size: 5,
            root: merkle::root_of(&leaves),
        }
    }

    #[test]
    fn a_signed_checkpoint_verifies_and_round_trips() {
        let c = checkpoint();
        let note = Note::sign(&c.text(), &c.origin, &signer(1)).unwrap();
        let text = note.render();
        assert!(text.starts_with("gw.example/aperture/acme\n5\n"));
        let line = text.lines().last().unwrap();
        assert!(line.starts_with("\u{2014} gw.example/aperture/acme "));
        let read = Note::parse(&text).unwrap();
        assert_eq!(read, note);
        assert_eq!(Checkpoint::parse(&read.text).unwrap(), c);
        let key = VerifierKey::new(&c.origin, ED25519, signer(1).verifying_key()).unwrap();
        read.verify(&key).unwrap();
        // The published form reads back as the same key.
        assert_eq!(VerifierKey::parse(&key.to_string()).unwrap(), key);
        // Key id: SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key)[:4], computed here by hand.
        let mut h = Sha256::new();
        h.update(b"gw.example/aperture/acme\n\x01");
        h.update(signer(1).verifying_key().as_bytes());
        assert_eq!(key.id(), h.finalize()[..4]);
    }

    #[test]
    fn an_edited_line_or_another_key_does_not_verify() {
        let c = checkpoint();
        let text = Note::sign(&c.text(), &c.origin, &signer(1))
            .unwrap()
            .render();
        let key = VerifierKey::new(&c.origin, ED25519, signer(1).verifying_key()).unwrap();
        let edited = text.replacen("\n5\n", "\n4\n", 1);
        assert_eq!(
            Note::parse(&edited).unwrap().verify(&key),
            Err(NoteError::BadSignature(c.origin.clone()))
        );
        let other = VerifierKey::new(&c.origin, ED25519, signer(2).verifying_key()).unwrap();
        assert_eq!(
            Note::parse(&text).unwrap().verify(&other),
            Err(NoteError::NotSigned(c.origin.clone()))
        );
        // The same key under another name has another id: not signed by it.
        let renamed = VerifierKey::new("elsewhere", ED25519, signer(1).verifying_key()).unwrap();
        assert!(Note::parse(&text).unwrap().verify(&renamed).is_err());
    }

    #[test]
    fn a_rotation_signs_with_both_keys() {
        let c = checkpoint();
        let mut note = Note::sign(&c.text(), &c.origin, &signer(2)).unwrap();
        note.add_signature(&c.origin, &signer(1)).unwrap();
        let read = Note::parse(&note.render()).unwrap();
        for n in [1, 2] {
            let key = VerifierKey::new(&c.origin, ED25519, signer(n).verifying_key()).unwrap();
            read.verify(&key).unwrap();
        }
    }

    #[test]
    fn cosignatures_verify_with_their_time_and_only_for_their_text() {
        let c = checkpoint();
        let mut note = Note::sign(&c.text(), &c.origin, &signer(1)).unwrap();
        let line = cosign(&note.text, "witness.example/w1", &signer(7), 1_679_315_147).unwrap();
        assert_eq!(line.signature.len(), 72);
        note.signatures.push(line);
        let read = Note::parse(&note.render()).unwrap();
        let key = VerifierKey::new(
            "witness.example/w1",
            COSIGNATURE_V1,
            signer(7).verifying_key(),
        )
        .unwrap();
        assert_eq!(read.verify_cosignature(&key), Ok(1_679_315_147));
        assert_eq!(VerifierKey::parse(&key.to_string()).unwrap(), key);
        // Against the specification's message: header, time line, then the checkpoint text.
        let message = format!("cosignature/v1\ntime 1679315147\n{}", c.text());
        let sig: [u8; 64] = read.signatures[1].signature[8..].try_into().unwrap();
        key.key
            .verify_strict(message.as_bytes(), &Signature::from_bytes(&sig))
            .unwrap();
        // The cosignature does not carry over to another tree size.
        let mut other = read.clone();
        other.text = Checkpoint { size: 6, ..c }.text();
        assert!(other.verify_cosignature(&key).is_err());
        // A note key is not a cosigner key.
        let as_note =
            VerifierKey::new("witness.example/w1", ED25519, signer(7).verifying_key()).unwrap();
        assert!(read.verify_cosignature(&as_note).is_err());
    }

    #[test]
    fn verifier_keys_whose_base64_holds_a_plus_read_back() {
        let mut seen = 0;
        for n in 0..=255u8 {
            let key =
                VerifierKey::new("w.example/x", COSIGNATURE_V1, signer(n).verifying_key()).unwrap();
            let text = key.to_string();
            if text
                .rsplit('+')
                .next()
                .is_some_and(|_| text.matches('+').count() > 2)
            {
                seen += 1;
            }
            assert_eq!(VerifierKey::parse(&text).unwrap(), key, "{text}");
        }
        assert!(seen > 0, "some keys have a `+` in their base64");
    }

    #[test]
    fn malformed_notes_keys_and_checkpoints_are_refused() {
        for bad in [
            "",
            "no blank line\n",
            "text\n\n",
            "text\n\n\u{2014} name AAAA\n",
            "text\n\n- name AAAAAAAAAAAAAAAA\n",
            "te\u{7}xt\n\n\u{2014} name AAAAAAAAAAAAAAAA\n",
            "text\n\n\u{2014} name AAAAAAAAAAAAAAAA",
        ] {
            assert!(Note::parse(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "o\n05\nAAAA\n",
            "o\n5\n",
            "\n5\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
            "o\n+5\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
            "o\n5\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "o\n5\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n",
        ] {
            assert!(Checkpoint::parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            Checkpoint::parse("o\n0\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\next\n").is_ok()
        );
        let key = VerifierKey::new("w", COSIGNATURE_V1, signer(3).verifying_key()).unwrap();
        let text = key.to_string();
        let wrong_id = format!("w+00000000+{}", text.rsplit('+').next().unwrap());
        for bad in [
            "w",
            "w+abc",
            wrong_id.as_str(),
            "w+00000000+AQ==",
            "w x+00000000+AQ==",
        ] {
            assert!(VerifierKey::parse(bad).is_err(), "{bad:?}");
        }
        assert!(VerifierKey::new("has space", ED25519, signer(3).verifying_key()).is_err());
    }
}
