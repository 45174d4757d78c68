//! Random identifiers and secrets (CONTRACT §2): a type prefix and at least 128 random bits
//! (receipt ids also lead with the time, so that they sort in the order they were made).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use rand::rngs::OsRng;

/// `<prefix>_`, 12 lowercase hex characters of the time in milliseconds since the Unix epoch,
/// then 32 of randomness (128 bits, as [`new_id`]): ids made later sort later (to the
/// millisecond). For receipts: every journal record's id goes into a unique index, and random
/// ids put each insert on a random page of it — in a batch of 16 records, 16 pages written
/// to the WAL for a few dozen bytes each, about half of all the journal's writes.
pub fn new_ordered_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut bytes = [0u8; 16];
    // Not a secret (a receipt id is public): the thread's CSPRNG, without a system call.
    rand::thread_rng().fill_bytes(&mut bytes);
    format!(
        "{prefix}_{:012x}{}",
        millis & 0xffff_ffff_ffff,
        hex::encode(bytes)
    )
}

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

    #[test]
    fn ordered_ids_sort_by_time_and_keep_128_random_bits() {
        let first = new_ordered_id("rcp");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = new_ordered_id("rcp");
        assert!(first < second, "{first} then {second}");
        for id in [&first, &second] {
            assert!(id.starts_with("rcp_"));
            assert_eq!(id.len(), 4 + 12 + 32);
            assert!(
                id[4..]
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
        }
        // Same millisecond or not, the random part differs.
        assert_ne!(first[16..], new_ordered_id("rcp")[16..]);
    }
}
