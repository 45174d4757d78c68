//! The id of the device cookie: a random id a browser keeps for 30 days after it signs in, so
//! that its later sign-ins at the same account are not delayed by other people's failures there
//! (see [`super::sign_in`]). The server keeps only its SHA-256; the cookie is the surface's.

use base64::Engine as _;
use rand::RngCore as _;
use sha2::{Digest as _, Sha256};

/// How long a device (and an address) that signed in to an account stays known to it, and how
/// long the browser keeps the cookie.
pub const KNOWN_FOR_MS: i64 = 30 * 24 * 60 * 60 * 1000;

/// Random bytes in an id.
const ID_BYTES: usize = 32;

/// A fresh device id (32 random bytes, base64url).
pub fn new_id() -> String {
    let mut bytes = [0u8; ID_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `id` has the shape [`new_id`] gives (anything else in a cookie is ignored).
pub fn well_formed(id: &str) -> bool {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(id)
        .is_ok_and(|bytes| bytes.len() == ID_BYTES)
}

/// Lowercase hex SHA-256 of an id: the only form in which the server keeps it.
pub fn hash(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fresh_well_formed_and_kept_hashed() {
        let id = new_id();
        assert_ne!(id, new_id());
        assert!(well_formed(&id));
        for bad in ["short", "", "!!!"] {
            assert!(!well_formed(bad), "{bad}");
        }
        assert_eq!(hash(&id).len(), 64);
        assert_ne!(hash(&id), id);
    }
}
