//! Canonical JSON (RFC 8785, JCS) and the hashes built on it (CONTRACT §3).
//!
//! Equal JSON values have equal canonical bytes whatever their key order or number spelling
//! (`1.0`, `1`, `1e0`), so hashes computed by the server, the dashboard (wasm) and a client that
//! re-serializes `tools/list` agree.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot canonicalize: {0}")]
pub struct CanonicalError(pub String);

/// The RFC 8785 bytes of `value`.
pub fn to_canonical_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| CanonicalError(e.to_string()))
}

/// The RFC 8785 text of `value`.
pub fn to_canonical_string<T: Serialize>(value: &T) -> Result<String, CanonicalError> {
    serde_json_canonicalizer::to_string(value).map_err(|e| CanonicalError(e.to_string()))
}

/// `sha256:` + 64 lowercase hex digits of SHA-256 over `bytes`.
pub fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `sha256:` + SHA-256 of the canonical bytes of `value`.
pub fn hash_of<T: Serialize>(value: &T) -> Result<String, CanonicalError> {
    Ok(sha256_tagged(&to_canonical_bytes(value)?))
}

/// The `prev_hash` of the first record of a journal.
pub const ZERO_HASH: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// `args_hash`: the hash of the *effective* arguments (after server-fixed arguments are merged).
pub fn args_hash(effective_arguments: &Value) -> Result<String, CanonicalError> {
    hash_of(effective_arguments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn rfc8785_examples() {
        let v: Value = serde_json::from_str(
            r#"{"b": 1.0, "a": [1e0, "x", null, true], "c": {"z": 0.5, "y": -0}}"#,
        )
        .unwrap();
        assert_eq!(
            to_canonical_string(&v).unwrap(),
            r#"{"a":[1,"x",null,true],"b":1,"c":{"y":0,"z":0.5}}"#
        );
        assert_eq!(
            to_canonical_string(&json!("\u{20ac}\n")).unwrap(),
            "\"\u{20ac}\\n\""
        );
    }

    #[test]
    fn hashes_are_tagged_lowercase_hex() {
        let h = hash_of(&json!({})).unwrap();
        assert_eq!(
            h,
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(ZERO_HASH.len(), h.len());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1_000_000i64..1_000_000).prop_map(|n| json!(n)),
            "[a-z\u{e9}\u{1f600} ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,6}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Serializes objects with keys in reverse order and integers as `n.0`, to prove that the
    /// hash does not depend on how the JSON was spelled.
    fn respell(v: &Value) -> String {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.reverse();
                let parts: Vec<String> = keys
                    .into_iter()
                    .map(|k| format!("{} : {}", serde_json::to_string(k).unwrap(), respell(&m[k])))
                    .collect();
                format!("{{ {} }}", parts.join(" , "))
            }
            Value::Array(a) => format!("[{}]", a.iter().map(respell).collect::<Vec<_>>().join(",")),
            Value::Number(n) if n.is_i64() => format!("{}.0", n),
            other => other.to_string(),
        }
    }

    proptest! {
        #[test]
        fn equal_json_hashes_equal_in_any_spelling(v in arb_json()) {
            let respelled: Value = serde_json::from_str(&respell(&v)).unwrap();
            prop_assert_eq!(hash_of(&v).unwrap(), hash_of(&respelled).unwrap());
        }

        #[test]
        fn different_json_hashes_differ(a in arb_json(), b in arb_json()) {
            prop_assume!(a != b);
            prop_assert_ne!(hash_of(&a).unwrap(), hash_of(&b).unwrap());
        }
    }
}
