//! Canonical JSON (RFC 8785, JCS) and the hashes built on it (CONTRACT §3).
//!
//! Equal JSON values have equal canonical bytes whatever their key order or number spelling
//! (`1.0`, `1`, `1e0`), so hashes computed by the server, the dashboard (wasm) and a client that
//! re-serializes `tools/list` agree.
//!
//! Two writers produce the same bytes:
//! - [`to_canonical_bytes`] takes any `Serialize` value and uses the maintained
//!   `serde_json_canonicalizer` crate (receipts, manifest documents: small, typed values);
//! - [`write_value`] writes a `serde_json::Value` directly (numbers with `ryu-js`, keys in UTF-16
//!   order, JSON's minimal string escapes) into a byte sink, which may be a SHA-256 state, so the
//!   hot hashes (`args_hash` on every call, `schemaHash` and the definition hash of every tool in
//!   a manifest) allocate nothing per value. A property test checks the two agree on arbitrary
//!   JSON, including non-ASCII keys whose UTF-16 order differs from their UTF-8 order.
//!
//! Signed JSON given as text is read with [`parse_strict`], which refuses an object naming a
//! member twice (see there why).

use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
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
    tagged(Sha256::digest(bytes).as_slice())
}

fn tagged(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(7 + 2 * digest.len());
    s.push_str("sha256:");
    for b in digest {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
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
    Ok(hash_value(effective_arguments))
}

/// `args_hash` of an argument object, without wrapping it in a `Value`.
pub fn args_hash_of_map(effective_arguments: &Map<String, Value>) -> String {
    let mut h = HashSink::new();
    write_map(effective_arguments, &mut h);
    h.finish()
}

/// `sha256:` + SHA-256 of the canonical bytes of a JSON value. A `Value` always has a
/// canonical form (its numbers are finite), so this cannot fail.
pub fn hash_value(value: &Value) -> String {
    let mut h = HashSink::new();
    write_value(value, &mut h);
    h.finish()
}

/// The canonical bytes of a JSON value (the same bytes [`to_canonical_bytes`] gives).
pub fn value_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_value(value, &mut out);
    out
}

/// Where canonical bytes go.
pub trait Sink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Canonical bytes collected to be hashed at once (the writer emits many tiny pieces; appending
/// them to a buffer and hashing whole blocks once is faster than feeding the hash each piece).
#[derive(Default)]
pub struct HashSink(Vec<u8>);

impl HashSink {
    /// A fresh hash.
    pub fn new() -> Self {
        Self(Vec::with_capacity(1024))
    }

    /// `sha256:` + the hex digest.
    pub fn finish(self) -> String {
        sha256_tagged(&self.0)
    }
}

impl Sink for HashSink {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

/// One member of an object written by [`write_fields`].
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    /// Left out of the object.
    Absent,
    /// `null`.
    Null,
    /// A string.
    Str(&'a str),
    /// Any JSON value.
    Json(&'a Value),
    /// A non-negative integer (below 2^53 it prints as its digits, as JCS does).
    U64(u64),
}

impl<'a> Field<'a> {
    /// A string, or absent.
    pub fn str_or_absent(s: Option<&'a str>) -> Self {
        s.map_or(Self::Absent, Self::Str)
    }

    /// A value, or absent.
    pub fn json_or_absent(v: Option<&'a Value>) -> Self {
        v.map_or(Self::Absent, Self::Json)
    }

    /// A string, or `null`.
    pub fn str_or_null(s: Option<&'a str>) -> Self {
        s.map_or(Self::Null, Self::Str)
    }

    /// A value, or `null`.
    pub fn json_or_null(v: Option<&'a Value>) -> Self {
        v.map_or(Self::Null, Self::Json)
    }
}

/// Writes the object made of `fields`, which must be given in canonical key order (UTF-16 code
/// units; a debug assertion checks it). Absent fields are left out.
pub fn write_fields(fields: &[(&str, Field<'_>)], out: &mut impl Sink) {
    write_fields_noting(fields, out, |_, _| {});
}

/// [`write_fields`] into a buffer, also returning where member `mark` of `fields` begins in
/// `out`. For a member that is [`Field::Absent`], that is where `,` and the member would be
/// inserted to make the object with it: right after the members before it, of which at least
/// one must be present for that splice to be the canonical object.
pub fn write_fields_at(fields: &[(&str, Field<'_>)], mark: usize, out: &mut Vec<u8>) -> usize {
    let mut at = None;
    write_fields_noting(fields, out, |i, out: &mut Vec<u8>| {
        if i == mark {
            at = Some(out.len());
        }
    });
    at.unwrap_or(out.len())
}

/// [`write_fields`], calling `before(i, out)` before member `i` of `fields` (present or not).
fn write_fields_noting<S: Sink>(
    fields: &[(&str, Field<'_>)],
    out: &mut S,
    mut before: impl FnMut(usize, &mut S),
) {
    debug_assert!(
        fields
            .windows(2)
            .all(|w| utf16_cmp(w[0].0, w[1].0) == Ordering::Less),
        "fields out of canonical order"
    );
    out.put(b"{");
    let mut first = true;
    for (i, (key, value)) in fields.iter().enumerate() {
        before(i, out);
        if matches!(value, Field::Absent) {
            continue;
        }
        if !first {
            out.put(b",");
        }
        first = false;
        write_str(key, out);
        out.put(b":");
        match value {
            Field::Absent => {}
            Field::Null => out.put(b"null"),
            Field::Str(s) => write_str(s, out),
            Field::Json(v) => write_value(v, out),
            Field::U64(u) => write_number(&serde_json::Number::from(*u), out),
        }
    }
    out.put(b"}");
}

/// Writes the canonical bytes of `value` into `out`.
pub fn write_value(value: &Value, out: &mut impl Sink) {
    match value {
        Value::Null => out.put(b"null"),
        Value::Bool(true) => out.put(b"true"),
        Value::Bool(false) => out.put(b"false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_value(item, out);
            }
            out.put(b"]");
        }
        Value::Object(map) => write_map(map, out),
    }
}

/// The largest integer every double represents exactly (2^53).
const EXACT_INTEGER: u64 = 1 << 53;

fn write_number(n: &serde_json::Number, out: &mut impl Sink) {
    // JCS reads every number as an IEEE double and prints it the ECMAScript way. Integers below
    // 2^53 print as their digits (ECMAScript switches to exponents only from 1e21).
    if let Some(u) = n.as_u64().filter(|u| *u <= EXACT_INTEGER) {
        write_integer(u, false, out);
    } else if let Some(i) = n
        .as_i64()
        .filter(|i| *i < 0 && i.unsigned_abs() <= EXACT_INTEGER)
    {
        write_integer(i.unsigned_abs(), true, out);
    } else {
        // serde_json numbers are finite, so `as_f64` always answers.
        let f = n.as_f64().unwrap_or(0.0);
        let mut buf = ryu_js::Buffer::new();
        out.put(buf.format_finite(f).as_bytes());
    }
}

fn write_integer(mut u: u64, negative: bool, out: &mut impl Sink) {
    let mut digits = [0u8; 21];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789"[(u % 10) as usize];
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if negative {
        at -= 1;
        digits[at] = b'-';
    }
    out.put(&digits[at..]);
}

fn write_map(map: &Map<String, Value>, out: &mut impl Sink) {
    out.put(b"{");
    // serde_json's map is ordered by UTF-8 bytes (unless its `preserve_order` feature is on),
    // which is UTF-16 order unless keys mix characters above U+FFFF with ones in
    // U+E000–U+FFFF; sort only when the order differs.
    let ordered = (map_is_sorted() && map.keys().all(|k| k.is_ascii())) || {
        let mut keys = map.keys();
        let mut prev = keys.next();
        keys.all(|k| {
            let ok = prev.is_none_or(|p| utf16_cmp(p, k) == Ordering::Less);
            prev = Some(k);
            ok
        })
    };
    if ordered {
        for (i, (k, v)) in map.iter().enumerate() {
            if i > 0 {
                out.put(b",");
            }
            write_str(k, out);
            out.put(b":");
            write_value(v, out);
        }
    } else {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| utf16_cmp(a.0, b.0));
        for (i, (k, v)) in entries.into_iter().enumerate() {
            if i > 0 {
                out.put(b",");
            }
            write_str(k, out);
            out.put(b":");
            write_value(v, out);
        }
    }
    out.put(b"}");
}

/// Whether `serde_json::Map` iterates in key order (it does, unless some crate in the build
/// turned on serde_json's `preserve_order` feature).
fn map_is_sorted() -> bool {
    static SORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SORTED.get_or_init(|| {
        let mut m = Map::new();
        m.insert("b".to_owned(), Value::Null);
        m.insert("a".to_owned(), Value::Null);
        m.keys().next().is_some_and(|k| k == "a")
    })
}

fn utf16_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// JSON's minimal escaping, as RFC 8785 requires: `"` and `\` escaped, U+0000–U+001F as
/// `\b \t \n \f \r` or `\u00xx` (lowercase hex), everything else as is.
pub fn write_str(s: &str, out: &mut impl Sink) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.put(b"\"");
    let bytes = s.as_bytes();
    // Most strings need no escape: find out without branching per byte (vectorizes).
    let needs_escape = |b: &u8| (*b < 0x20) | (*b == b'"') | (*b == b'\\');
    if bytes
        .chunks(32)
        .all(|chunk| !chunk.iter().fold(false, |acc, b| acc | needs_escape(b)))
    {
        out.put(bytes);
        out.put(b"\"");
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        if start < i {
            out.put(&bytes[start..i]);
        }
        if short.is_empty() {
            out.put(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        } else {
            out.put(short);
        }
        start = i + 1;
    }
    if start < bytes.len() {
        out.put(&bytes[start..]);
    }
    out.put(b"\"");
}

/// Why [`parse_strict`] refused a text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrictJsonError {
    /// An object names the same member twice (after unescaping: `"a"` and `"\u0061"` are the
    /// same name).
    #[error("duplicate member {name:?} at {pointer} (line {line}, column {column})")]
    Duplicate {
        /// The member's name.
        name: String,
        /// Where its second occurrence is, as a JSON Pointer (RFC 6901).
        pointer: String,
        /// The line of the text where it was found (from 1).
        line: usize,
        /// The column of the text where it was found (from 1).
        column: usize,
    },
    /// Not one JSON value.
    #[error("{0}")]
    Syntax(String),
}

/// Parses one JSON value like `serde_json::from_str`, but refuses any object, at any depth, that
/// names a member twice. RFC 8259 leaves the meaning of such an object open and parsers differ
/// (serde_json keeps the last, others the first), so a signed object carrying a second
/// `"decision"` could verify here while another reader sees the other value. Everything that
/// verifies signed JSON given as text reads it with this.
pub fn parse_strict(text: &str) -> Result<Value, StrictJsonError> {
    let mut path = Vec::new();
    let mut duplicate = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = Strict {
        path: &mut path,
        duplicate: &mut duplicate,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    parsed.map_err(|e| match duplicate {
        Some((name, pointer)) => StrictJsonError::Duplicate {
            name,
            pointer,
            line: e.line(),
            column: e.column(),
        },
        None => StrictJsonError::Syntax(e.to_string()),
    })
}

/// A step of the path to the value being read.
enum Step {
    Member(String),
    Element(usize),
}

/// The JSON Pointer of member `name` of the object at `path`.
fn pointer(path: &[Step], name: &str) -> String {
    let mut out = String::new();
    let escaped = |s: &str| s.replace('~', "~0").replace('/', "~1");
    for step in path {
        out.push('/');
        match step {
            Step::Member(m) => out.push_str(&escaped(m)),
            Step::Element(i) => out.push_str(&i.to_string()),
        }
    }
    out.push('/');
    out.push_str(&escaped(name));
    out
}

/// Reads one value, keeping the path to it (for the error) and the duplicate found (which the
/// deserializer's error cannot carry as data).
struct Strict<'p> {
    path: &'p mut Vec<Step>,
    duplicate: &'p mut Option<(String, String)>,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let Strict { path, duplicate } = self;
        let mut items = Vec::new();
        loop {
            path.push(Step::Element(items.len()));
            let item = seq.next_element_seed(Strict {
                path: &mut *path,
                duplicate: &mut *duplicate,
            })?;
            path.pop();
            match item {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Strict { path, duplicate } = self;
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if members.contains_key(&name) {
                let message = format!("duplicate member {name:?}");
                *duplicate = Some((name.clone(), pointer(path, &name)));
                return Err(de::Error::custom(message));
            }
            path.push(Step::Member(name.clone()));
            let value = map.next_value_seed(Strict {
                path: &mut *path,
                duplicate: &mut *duplicate,
            })?;
            path.pop();
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

/// The `schemaHash` of the advertised tool (a manifest's `AdvertisedTool`) made of these parts,
/// written field by field in canonical key order (as `serde` names them) straight into the hash.
pub fn advertised_schema_hash(
    name: &str,
    title: Option<&str>,
    description: Option<&str>,
    input_schema: &Value,
    output_schema: Option<&Value>,
    annotations: Option<&Value>,
) -> String {
    let mut h = HashSink::new();
    write_fields(
        &[
            ("annotations", Field::json_or_absent(annotations)),
            ("description", Field::str_or_absent(description)),
            ("inputSchema", Field::Json(input_schema)),
            ("name", Field::Str(name)),
            ("outputSchema", Field::json_or_absent(output_schema)),
            ("title", Field::str_or_absent(title)),
        ],
        &mut h,
    );
    h.finish()
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

    /// Any JSON, with the values that make canonicalization hard: doubles, integers beyond 2^53,
    /// control characters, quotes, and keys whose UTF-16 order differs from their UTF-8 order.
    fn arb_hard_json() -> impl Strategy<Value = Value> {
        let text = "[a-z\"\\\u{0}-\u{1f}\u{7f}\u{e9}\u{2028}\u{e000}\u{fffd}\u{ffff}\u{10000}\u{1f600}]{0,6}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 32, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(text, inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The direct writer gives the RFC's own examples.
    #[test]
    #[allow(clippy::excessive_precision, clippy::unreadable_literal)] // RFC 8785's numbers
    fn value_writer_on_rfc8785_examples() {
        let same = |v: Value| {
            assert_eq!(
                String::from_utf8(value_bytes(&v)).unwrap(),
                to_canonical_string(&v).unwrap(),
                "{v}"
            );
        };
        same(json!({
            "\u{20ac}": "Euro Sign", "\r": "Carriage Return", "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One", "\u{1f600}": "Emoji: Grinning Face", "\u{0080}": "Control", "\u{00f6}": "Latin Small Letter O With Diaeresis"
        }));
        same(
            json!({"numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001, 1e21, 1e-7, 9007199254740992u64, 9007199254740993u64, u64::MAX, i64::MIN, -9007199254740992i64, -1, 0, -0.0]}),
        );
        // Long strings, escapes past the first chunks of the fast scan.
        for at in [0, 31, 32, 33, 70, 99] {
            for c in ['"', '\\', '\n', '\u{1}', '\u{7f}', '\u{e9}'] {
                let mut text: Vec<char> = "abcdefghij".repeat(10).chars().collect();
                text[at] = c;
                same(json!({ "k": text.into_iter().collect::<String>() }));
            }
        }
        same(
            json!({"string": "\u{20ac}$\u{000f}\u{000a}A'\u{0042}\u{0022}\u{005c}\\\"/\u{7f}\u{1f}"}),
        );
        assert_eq!(
            String::from_utf8(value_bytes(&json!({"\u{1f600}": 1, "\u{e000}": 2}))).unwrap(),
            "{\"\u{1f600}\":1,\"\u{e000}\":2}",
            "keys are ordered by UTF-16 code units (U+1F600 is D83D DE00), not by code points"
        );
    }

    /// `write_fields` writes what the equivalent object would give.
    #[test]
    fn fields_are_written_like_the_object() {
        let (a, b) = (json!([1, "x"]), json!({"z": 1, "y": null}));
        let mut out = Vec::new();
        write_fields(
            &[
                ("alpha", Field::Json(&a)),
                ("beta", Field::Absent),
                ("delta", Field::Null),
                ("gamma", Field::Json(&b)),
                ("omega", Field::Str("\"\n")),
            ],
            &mut out,
        );
        assert_eq!(
            out,
            value_bytes(&json!({"gamma": b, "alpha": a, "omega": "\"\n", "delta": null}))
        );
    }

    #[test]
    fn strict_parsing_refuses_a_member_named_twice_at_any_depth() {
        let duplicate = |text: &str| match parse_strict(text) {
            Err(StrictJsonError::Duplicate { name, pointer, .. }) => (name, pointer),
            other => panic!("{text}: {other:?}"),
        };
        // Depth 0, 1 and 3 (through an array).
        assert_eq!(duplicate(r#"{"a":1,"a":1}"#), ("a".into(), "/a".into()));
        assert_eq!(
            duplicate(r#"{"x":{"a":1,"b":2,"a":3}}"#),
            ("a".into(), "/x/a".into())
        );
        assert_eq!(
            duplicate(r#"{"x":[{"y":{"a":true,"a":false}}]}"#),
            ("a".into(), "/x/0/y/a".into())
        );
        assert_eq!(
            duplicate(r#"[0, {"a":1}, {"b":{"c":[{"d":1,"d":{}}]}}]"#),
            ("d".into(), "/2/b/c/0/d".into())
        );
        // Escaped-equal names are the same name.
        assert_eq!(
            duplicate(r#"{"a":1,"\u0061":2}"#),
            ("a".into(), "/a".into())
        );
        assert_eq!(
            duplicate(r#"{"d\u00e9cision":1,"décision":2}"#),
            ("décision".into(), "/décision".into())
        );
        // Pointer escaping (RFC 6901).
        assert_eq!(
            duplicate(r#"{"a/b~c":{"k":1,"k":2}}"#),
            ("k".into(), "/a~1b~0c/k".into())
        );
        // The error says where, in the text too.
        let e = parse_strict("{\n\"a\": 1,\n\"a\": 2}").unwrap_err();
        assert!(
            matches!(e, StrictJsonError::Duplicate { line: 3, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string().contains(r#"duplicate member "a" at /a"#),
            "{e}"
        );

        // The same name in sibling or nested objects is fine.
        let text = r#"{"x":{"a":1},"y":{"a":1},"z":[{"a":1},{"a":2}],"a":{"a":{"a":null}}}"#;
        assert_eq!(
            parse_strict(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        // Not JSON, or more than one value, or nested past serde_json's limit (no stack
        // overflow on a hostile text).
        let deep = "[".repeat(100_000);
        for text in [
            "",
            "{",
            r#"{"a":1}x"#,
            r#"{"a":1} {}"#,
            "[1,]",
            "NaN",
            &deep,
        ] {
            assert!(
                matches!(parse_strict(text), Err(StrictJsonError::Syntax(_))),
                "{}",
                &text[..text.len().min(20)]
            );
        }
    }

    proptest! {
        /// Strict parsing reads any JSON without a repeated member as `serde_json` does.
        #[test]
        fn strict_parsing_reads_what_serde_json_reads(v in arb_hard_json()) {
            for text in [v.to_string(), serde_json::to_string_pretty(&v).unwrap()] {
                prop_assert_eq!(parse_strict(&text).unwrap(), v.clone());
            }
        }

        /// The direct writer and `serde_json_canonicalizer` produce the same bytes, and the
        /// streamed hash equals the hash of those bytes.
        #[test]
        fn value_writer_matches_the_canonicalizer_crate(v in arb_hard_json()) {
            let expected = to_canonical_bytes(&v).unwrap();
            prop_assert_eq!(String::from_utf8(value_bytes(&v)).unwrap(), String::from_utf8(expected.clone()).unwrap());
            prop_assert_eq!(hash_value(&v), sha256_tagged(&expected));
            if let Value::Object(m) = &v {
                prop_assert_eq!(args_hash_of_map(m), sha256_tagged(&expected));
            }
        }

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
