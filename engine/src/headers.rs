//! The 2026-07-28 HTTP transport's request headers that mirror the body (SEP-2243): how a
//! value travels in a header, and the `Mcp-Param-*` headers a tool's `x-mcp-header` parameters
//! put on its calls.
//!
//! A value travels as it is, or — when it is not header-safe — as `=?base64?<Base64>?=`
//! (standard alphabet, padded). Anything else that merely looks like that wrapper (no closing
//! `?=`, say) is a literal value. A wrapper around text that is not canonical Base64 of UTF-8
//! is malformed, never read as a literal.
//!
//! A tool's input schema marks a parameter for a header with `x-mcp-header: "<Name>"` on a
//! property reached from the root through `properties` alone; its primitive value (a string,
//! a number, a boolean) is then sent as `Mcp-Param-<Name>` too, and the header and the
//! argument must agree: a header without the argument, the argument without the header, or
//! the two differing is a mismatch (the transport answers HTTP 400 with -32020). Intermediaries
//! route on these headers, so an argument that says one thing and a header another must not
//! both pass.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

/// The prefix of the parameter headers' names (compared lowercased).
pub const PARAM_PREFIX: &str = "mcp-param-";

const WRAP_START: &str = "=?base64?";
const WRAP_END: &str = "?=";

/// A header value as sent: the text itself, or what a `=?base64?…?=` wrapper holds; `None`
/// when the wrapper holds no canonical Base64 of UTF-8 text.
pub fn decode(value: &str) -> Option<String> {
    let Some(encoded) = value
        .strip_prefix(WRAP_START)
        .and_then(|v| v.strip_suffix(WRAP_END))
    else {
        return Some(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The `Mcp-Param-*` headers of one request: each name's suffix, lowercased (header names are
/// case-insensitive), to every value it came with (`None` for one that is not visible ASCII).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamHeaders(BTreeMap<String, Vec<Option<String>>>);

impl ParamHeaders {
    /// Adds one header, if its name has the `Mcp-Param-` prefix (any case).
    pub fn add(&mut self, name: &str, value: Option<&str>) {
        let lower = name.to_ascii_lowercase();
        if let Some(suffix) = lower.strip_prefix(PARAM_PREFIX) {
            self.0
                .entry(suffix.to_owned())
                .or_default()
                .push(value.map(|v| v.trim_matches([' ', '\t']).to_owned()));
        }
    }

    /// The one value sent as `Mcp-Param-<suffix>`; an error when it came twice (these headers
    /// are singletons: two could be resolved differently by two hops) or is not text.
    fn one(&self, suffix: &str) -> Result<Option<&str>, String> {
        match self.0.get(&suffix.to_ascii_lowercase()).map(Vec::as_slice) {
            None | Some([]) => Ok(None),
            Some([Some(value)]) => Ok(Some(value.as_str())),
            Some([None]) => Err(format!(
                "the Mcp-Param-{suffix} header is not visible ASCII"
            )),
            Some(_) => Err(format!("the Mcp-Param-{suffix} header is sent twice")),
        }
    }
}

/// The parameters `input_schema` marks for headers: each property's path from the root and
/// the header's name suffix. Annotations that are not a non-empty string are not headers.
pub fn annotated(input_schema: &Value) -> Vec<(Vec<&str>, &str)> {
    fn walk<'a>(
        properties: Option<&'a Value>,
        path: &mut Vec<&'a str>,
        out: &mut Vec<(Vec<&'a str>, &'a str)>,
    ) {
        let Some(Value::Object(properties)) = properties else {
            return;
        };
        for (name, schema) in properties {
            path.push(name);
            if let Some(Value::String(header)) = schema.get("x-mcp-header")
                && !header.is_empty()
            {
                out.push((path.clone(), header.as_str()));
            }
            walk(schema.get("properties"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(input_schema.get("properties"), &mut Vec::new(), &mut out);
    out
}

/// The text form a primitive argument takes in its header; `None` for anything else.
fn as_header_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Checks a `tools/call`'s `Mcp-Param-*` headers against its `arguments`, for the tool whose
/// (advertised) `input_schema` is given: `Err` says what does not agree.
pub fn check(
    input_schema: &Value,
    arguments: Option<&Value>,
    headers: &ParamHeaders,
) -> Result<(), String> {
    for (path, header) in annotated(input_schema) {
        let sent = headers.one(header)?;
        let argument = arguments
            .and_then(|a| path.iter().try_fold(a, |v, key| v.get(key)))
            .filter(|v| !v.is_null())
            .and_then(as_header_text);
        let property = path.join(".");
        match (sent, argument) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(format!(
                    "the Mcp-Param-{header} header is sent but arguments.{property} is not"
                ));
            }
            (None, Some(_)) => {
                return Err(format!(
                    "arguments.{property} needs the Mcp-Param-{header} header"
                ));
            }
            (Some(raw), Some(expected)) => {
                let Some(decoded) = decode(raw) else {
                    return Err(format!(
                        "the Mcp-Param-{header} header's =?base64?…?= value is not valid Base64 of UTF-8"
                    ));
                };
                if decoded != expected {
                    return Err(format!(
                        "the Mcp-Param-{header} header does not mirror arguments.{property}"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "note": {"type": "string"},
                "options": {"type": "object", "properties": {
                    "dry": {"type": "boolean", "x-mcp-header": "Dry"}
                }}
            }
        })
    }

    fn headers(pairs: &[(&str, &str)]) -> ParamHeaders {
        let mut h = ParamHeaders::default();
        for (name, value) in pairs {
            h.add(name, Some(value));
        }
        h
    }

    #[test]
    fn values_travel_plain_or_wrapped_in_canonical_base64() {
        assert_eq!(decode("Hello").as_deref(), Some("Hello"));
        assert_eq!(decode("=?base64?SGVsbG8=?=").as_deref(), Some("Hello"));
        // Without its closing `?=` the wrapper is literal text.
        assert_eq!(
            decode("=?base64?SGVsbG8=").as_deref(),
            Some("=?base64?SGVsbG8=")
        );
        // Padding left out, characters outside the alphabet: malformed.
        assert_eq!(decode("=?base64?SGVsbG8?="), None);
        assert_eq!(decode("=?base64?SGVs!!!bG8=?="), None);
        // Not UTF-8.
        assert_eq!(decode("=?base64?/w==?="), None);
    }

    #[test]
    fn only_annotated_properties_on_the_properties_chain_are_headers() {
        let s = schema();
        let found = annotated(&s);
        assert_eq!(
            found,
            vec![(vec!["options", "dry"], "Dry"), (vec!["region"], "Region")]
        );
        let off_chain = json!({"properties": {"list": {"items": {"x-mcp-header": "X"}}}});
        assert!(annotated(&off_chain).is_empty());
    }

    #[test]
    fn headers_and_arguments_must_agree() {
        let s = schema();
        let args = json!({"region": "eu-west", "options": {"dry": true}});
        let ok = headers(&[("Mcp-Param-Region", "eu-west"), ("mcp-param-dry", "true")]);
        assert_eq!(check(&s, Some(&args), &ok), Ok(()));
        // Names are case-insensitive; surrounding whitespace is not part of the value.
        let loud = headers(&[
            ("MCP-PARAM-REGION", "  eu-west "),
            ("Mcp-Param-Dry", "true"),
        ]);
        assert_eq!(check(&s, Some(&args), &loud), Ok(()));
        let wrapped = headers(&[
            ("Mcp-Param-Region", "=?base64?ZXUtd2VzdA==?="),
            ("Mcp-Param-Dry", "true"),
        ]);
        assert_eq!(check(&s, Some(&args), &wrapped), Ok(()));
        // Nothing annotated is sent, nothing is needed.
        assert_eq!(
            check(&s, Some(&json!({"note": "x"})), &ParamHeaders::default()),
            Ok(())
        );
    }

    #[test]
    fn a_header_that_says_something_else_is_refused() {
        let s = schema();
        let args = json!({"region": "eu-west"});
        for (sent, why) in [
            (vec![], "needs the Mcp-Param-Region header"),
            (vec![("Mcp-Param-Region", "us-east")], "does not mirror"),
            (
                vec![("Mcp-Param-Region", "=?base64?ZXUtd2VzdA?=")],
                "not valid Base64",
            ),
            (
                vec![
                    ("Mcp-Param-Region", "eu-west"),
                    ("mcp-param-region", "eu-west"),
                ],
                "sent twice",
            ),
            (
                vec![("Mcp-Param-Region", "eu-west"), ("Mcp-Param-Dry", "false")],
                "is sent but arguments.options.dry is not",
            ),
        ] {
            let err = check(&s, Some(&args), &headers(&sent)).unwrap_err();
            assert!(err.contains(why), "{sent:?}: {err}");
        }
        let mut unreadable = ParamHeaders::default();
        unreadable.add("Mcp-Param-Region", None);
        let err = check(&s, Some(&args), &unreadable).unwrap_err();
        assert!(err.contains("not visible ASCII"), "{err}");
    }
}
