//! An experiment, not used by the engine: RFC 8785 (JCS) bytes written straight from a
//! `serde_json::Value`, to measure what `engine::canonical` (which uses
//! `serde_json_canonicalizer`) could gain. The benchmark checks that it produces exactly the
//! bytes `engine::canonical::to_canonical_bytes` produces, on every input it is timed on.
//!
//! Same rules as `serde_json_canonicalizer`: numbers are IEEE doubles printed the ECMAScript
//! way (`ryu-js`), strings use JSON's minimal escapes (what `serde_json` writes), object keys
//! are sorted by their UTF-16 code units.

use std::cmp::Ordering;

use serde_json::Value;

/// The JCS bytes of `value`.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(value, &mut out);
    out
}

/// `sha256:` + SHA-256 of the JCS bytes of `value` (the engine's `hash_of`).
pub fn hash(value: &Value) -> String {
    engine::canonical::sha256_tagged(&to_vec(value))
}

fn utf16_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

fn write_str(s: &str, out: &mut Vec<u8>) {
    // serde_json escapes exactly what JCS escapes (`"`, `\`, and U+0000–U+001F, with the short
    // forms \b \f \n \r \t and lowercase \u00xx otherwise); writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            // Every serde_json number is finite; JCS reads each as a double.
            let f = n.as_f64().unwrap_or(f64::NAN);
            let mut buf = ryu_js::Buffer::new();
            out.extend_from_slice(buf.format_finite(f).as_bytes());
        }
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| utf16_cmp(a.0, b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(k, out);
                out.push(b':');
                write(v, out);
            }
            out.push(b'}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::canonical::to_canonical_bytes;
    use serde_json::json;

    fn same(v: &Value) {
        assert_eq!(
            String::from_utf8(to_vec(v)).unwrap(),
            String::from_utf8(to_canonical_bytes(v).unwrap()).unwrap(),
            "{v}"
        );
    }

    #[test]
    #[allow(clippy::excessive_precision)] // RFC 8785's own example number
    fn matches_the_engine_on_edge_cases() {
        same(&json!(null));
        same(&json!({"b": 1.0, "a": [1e0, "x", null, true], "c": {"z": 0.5, "y": -0.0}}));
        // RFC 8785 §3.2.3 sorting example (UTF-16 order differs from UTF-8 order here).
        same(&json!({
            "\u{20ac}": "Euro Sign", "\r": "Carriage Return", "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One", "\u{1f600}": "Emoji: Grinning Face", "\u{0080}": "Control", "\u{00f6}": "Latin Small Letter O With Diaeresis"
        }));
        same(
            &json!({"numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001, 1e21, 1e-7, 9007199254740993u64, u64::MAX, i64::MIN, -1, 0]}),
        );
        same(
            &json!({"string": "\u{20ac}$\u{000f}\u{000a}A'\u{0042}\u{0022}\u{005c}\\\"/\u{7f}\u{1f}"}),
        );
        same(&json!({"nested": {"z": [{"b": 1, "a": {"d": [], "c": {}}}], "": ""}}));
    }

    #[test]
    fn matches_the_engine_on_the_benchmark_catalog() {
        for tool in crate::catalog() {
            same(&serde_json::to_value(&tool).unwrap());
            same(&tool.input_schema);
        }
    }
}
