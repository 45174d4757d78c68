//! `canonicalize`: arbitrary bytes as JSON through RFC 8785 canonicalization (CONTRACT §3).
//!
//! Invariants, for any input serde_json accepts:
//! - `to_canonical_bytes` succeeds (every serde_json value has a canonical form) and never panics;
//! - the canonical bytes are UTF-8 JSON that parses back to a value equal to the input, where
//!   numbers are compared as the IEEE doubles JCS is defined over (`1.0` and `1` are one number);
//! - canonicalization is idempotent: canonicalizing the re-parsed value gives the same bytes;
//! - `hash_of` is stable across the round trip and equals `sha256_tagged` of the bytes.
#![no_main]

use engine::canonical::{hash_of, sha256_tagged, to_canonical_bytes, to_canonical_string};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Equality of JSON values with numbers compared as doubles (JCS serializes every number as
/// the shortest text of its IEEE 754 double, so `1.0` becomes `1` and `1e2` becomes `100`).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            // `-0` and `0` are one number (and `==` on f64 says so).
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let bytes = match to_canonical_bytes(&value) {
        Ok(bytes) => bytes,
        Err(e) => panic!("a serde_json value has no canonical form: {e}"),
    };
    let text = std::str::from_utf8(&bytes).expect("canonical bytes are UTF-8");
    assert_eq!(
        to_canonical_string(&value).expect("canonical text"),
        text,
        "to_canonical_string and to_canonical_bytes disagree"
    );
    let reparsed: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => panic!("canonical bytes are not JSON ({e}): {text}"),
    };
    assert!(
        same_json(&value, &reparsed),
        "canonical form changed the value: {value} -> {text}"
    );
    let again = to_canonical_bytes(&reparsed).expect("re-parsed value canonicalizes");
    assert_eq!(
        again,
        bytes,
        "canonicalization is not idempotent: {text} -> {}",
        String::from_utf8_lossy(&again)
    );
    let hash = hash_of(&value).expect("hash of the input");
    assert_eq!(hash, sha256_tagged(&bytes));
    assert_eq!(
        hash,
        hash_of(&reparsed).expect("hash of the round trip"),
        "hash changed across the round trip of {text}"
    );
});
