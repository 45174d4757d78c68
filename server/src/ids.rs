//! Random identifiers and secrets (CONTRACT §2): a type prefix and at least 128 random bits.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use rand::rngs::OsRng;

/// `<prefix>_` followed by 32 lowercase hex characters (128 bits).
pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    OsRng.fill_bytes(&mut bytes);
    format!("{prefix}_{}", hex::encode(bytes))
}

/// An API token secret: `apt_` and 43 base64url characters (256 bits).
pub fn new_token_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    format!("apt_{}", URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let id = new_id("tok");
        assert_eq!(id.len(), 4 + 32);
        assert!(id.starts_with("tok_"));
        let secret = new_token_secret();
        assert!(secret.starts_with("apt_"));
        assert_eq!(secret.len(), 4 + 43);
        assert!(
            secret[4..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_ne!(new_token_secret(), secret);
    }
}
