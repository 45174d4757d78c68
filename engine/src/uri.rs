//! Resource URIs as the gateway matches and forwards them: normalised (RFC 3986 §6.2.2), with
//! the spellings that could walk out of what a rule names refused, and matched against URI
//! templates (RFC 6570, the expressions MCP servers use).
//!
//! Normalisation: the scheme and the host are lower-cased, percent-encodings of unreserved
//! characters are decoded and every other percent-encoding is written with upper-case hex
//! digits. Refused: anything but printable ASCII, a fragment, user information, a malformed
//! percent-encoding, an encoded `/` or `\` (`%2F`, `%5C`) or a `\`, and a `.` or `..` path
//! segment however it is spelled (`%2e%2E`). Two spellings of one resource normalise to the
//! same text, so a rule written for one holds for the other; the normalised URI is what is
//! matched and what is forwarded.

use std::fmt;

/// At most this many bytes in a URI (normalised or not).
pub const MAX_URI_BYTES: usize = 2048;

/// Why a URI is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UriError {
    /// Empty, or over [`MAX_URI_BYTES`].
    Length,
    /// No `scheme:` (RFC 3986 §3.1).
    Scheme,
    /// A character a URI cannot hold (non-ASCII, a control character, a space, `\`).
    Character,
    /// `%` not followed by two hex digits.
    PercentEncoding,
    /// An encoded `/` or `\`, which would make one segment look like two.
    EncodedSeparator,
    /// A `.` or `..` segment (however encoded).
    DotSegment,
    /// `#…`: a fragment names part of a representation, not a resource.
    Fragment,
    /// `user@host`: credentials do not belong in a resource's name.
    UserInfo,
}

impl fmt::Display for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UriError::Length => "a URI is 1 to 2048 bytes",
            UriError::Scheme => "a URI starts with a scheme (`scheme:`)",
            UriError::Character => "a URI holds printable ASCII only, without spaces or `\\`",
            UriError::PercentEncoding => "`%` must be followed by two hex digits",
            UriError::EncodedSeparator => "an encoded `/` or `\\` is refused",
            UriError::DotSegment => "`.` and `..` path segments are refused",
            UriError::Fragment => "a fragment (`#…`) is refused",
            UriError::UserInfo => "user information (`user@host`) is refused",
        })
    }
}

impl std::error::Error for UriError {}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `text` with its percent-encodings normalised: unreserved characters decoded, the rest in
/// upper-case hex; encoded separators refused.
fn normalise_percent(text: &str, out: &mut String) -> Result<(), UriError> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(UriError::PercentEncoding);
            };
            let decoded = hi * 16 + lo;
            if decoded == b'/' || decoded == b'\\' {
                return Err(UriError::EncodedSeparator);
            }
            if is_unreserved(decoded) {
                out.push(char::from(decoded));
            } else {
                out.push('%');
                out.push(char::from(b"0123456789ABCDEF"[usize::from(hi)]));
                out.push(char::from(b"0123456789ABCDEF"[usize::from(lo)]));
            }
            i += 3;
        } else {
            out.push(char::from(b));
            i += 1;
        }
    }
    Ok(())
}

/// `uri` normalised (RFC 3986 §6.2.2), or why it is refused.
pub fn normalize(uri: &str) -> Result<String, UriError> {
    if uri.is_empty() || uri.len() > MAX_URI_BYTES {
        return Err(UriError::Length);
    }
    if !uri.bytes().all(|b| b.is_ascii_graphic()) || uri.contains('\\') {
        return Err(UriError::Character);
    }
    if uri.contains('#') {
        return Err(UriError::Fragment);
    }
    let (scheme, rest) = uri.split_once(':').ok_or(UriError::Scheme)?;
    let mut chars = scheme.bytes();
    let scheme_ok = chars.next().is_some_and(|b| b.is_ascii_alphabetic())
        && chars.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return Err(UriError::Scheme);
    }
    let mut out = String::with_capacity(uri.len());
    out.push_str(&scheme.to_ascii_lowercase());
    out.push(':');
    let (hierarchical, query) = match rest.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (rest, None),
    };
    let path = match hierarchical.strip_prefix("//") {
        Some(after) => {
            let end = after.find('/').unwrap_or(after.len());
            let (authority, path) = after.split_at(end);
            if authority.contains('@') {
                return Err(UriError::UserInfo);
            }
            out.push_str("//");
            let mut host = String::with_capacity(authority.len());
            normalise_percent(authority, &mut host)?;
            out.push_str(&host.to_ascii_lowercase());
            path
        }
        None => hierarchical,
    };
    let mut normalised_path = String::with_capacity(path.len());
    normalise_percent(path, &mut normalised_path)?;
    if normalised_path
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(UriError::DotSegment);
    }
    out.push_str(&normalised_path);
    if let Some(query) = query {
        out.push('?');
        normalise_percent(query, &mut out)?;
    }
    if out.len() > MAX_URI_BYTES {
        return Err(UriError::Length);
    }
    Ok(out)
}

/// One piece of a URI template: literal text, or an expression and how much it may match.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece<'t> {
    Literal(&'t str),
    /// `{var}`: one path segment's worth (no `/`, `?`, `#`).
    Simple,
    /// `{+var}`: reserved expansion, `/` included (no `?`, `#`).
    Reserved,
    /// `{/var}`: `/` and a segment, or nothing.
    Path,
    /// `{?a,b}` and `{&a}`: a query (or its continuation), or nothing; the rest of the URI.
    Query,
}

/// The pieces of `template`; `None` when it holds an expression this matcher does not know
/// (such a template matches nothing: fail closed).
fn pieces(template: &str) -> Option<Vec<Piece<'_>>> {
    let mut out = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        let start = rest.find('{').unwrap_or(rest.len());
        let literal = &rest[..start];
        if literal.contains('}') {
            return None;
        }
        if !literal.is_empty() {
            out.push(Piece::Literal(literal));
        }
        if start == rest.len() {
            break;
        }
        let end = rest[start..].find('}')? + start;
        let expression = &rest[start + 1..end];
        let (operator, names) = match expression.chars().next()? {
            c @ ('+' | '/' | '?' | '&') => (Some(c), &expression[1..]),
            _ => (None, expression),
        };
        let valid_names = !names.is_empty()
            && names.split(',').all(|n| {
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
        if !valid_names {
            return None;
        }
        out.push(match operator {
            None => Piece::Simple,
            Some('+') => Piece::Reserved,
            Some('/') => Piece::Path,
            _ => Piece::Query,
        });
        rest = &rest[end + 1..];
    }
    Some(out)
}

/// Whether `uri` (normalised) is an expansion of `template`.
pub fn template_matches(template: &str, uri: &str) -> bool {
    match pieces(template) {
        Some(pieces) => matches_from(&pieces, uri),
        None => false,
    }
}

fn matches_from(pieces: &[Piece<'_>], uri: &str) -> bool {
    let Some((first, rest)) = pieces.split_first() else {
        return uri.is_empty();
    };
    match first {
        Piece::Literal(text) => uri
            .strip_prefix(text)
            .is_some_and(|after| matches_from(rest, after)),
        // Expands to nothing, or (last) to the query or its continuation.
        Piece::Query => {
            matches_from(rest, uri)
                || (rest.is_empty() && (uri.starts_with('?') || uri.starts_with('&')))
        }
        // Expands to nothing, or to `/` and one non-empty segment.
        Piece::Path => {
            matches_from(rest, uri)
                || uri.strip_prefix('/').is_some_and(|after| {
                    let limit = after.find(['/', '?', '#']).unwrap_or(after.len());
                    (1..=limit).any(|n| matches_from(rest, &after[n..]))
                })
        }
        // At least one character: of one segment, or (reserved) of a path.
        Piece::Simple | Piece::Reserved => {
            let stops: &[char] = match first {
                Piece::Simple => &['/', '?', '#'],
                _ => &['?', '#'],
            };
            let limit = uri.find(stops).unwrap_or(uri.len());
            (1..=limit).any(|n| matches_from(rest, &uri[n..]))
        }
    }
}

/// `template` expanded with `vars` (RFC 6570 level 2: `{var}`, `{+var}`, and `{/var}`, each of
/// one variable), or `None` when a variable has no value or the template uses another kind of
/// expression (fail closed). `{var}` encodes every character but the unreserved ones; `{+var}`
/// keeps reserved characters too.
pub fn expand(template: &str, vars: &std::collections::BTreeMap<String, String>) -> Option<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let literal = &rest[..start];
        if literal.contains('}') {
            return None;
        }
        out.push_str(literal);
        let end = rest[start..].find('}')? + start;
        let expression = &rest[start + 1..end];
        let (operator, name) = match expression.chars().next()? {
            c @ ('+' | '/') => (Some(c), &expression[1..]),
            _ => (None, expression),
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return None;
        }
        let value = vars.get(name)?;
        if operator == Some('/') {
            out.push('/');
        }
        for b in value.bytes() {
            let keep =
                is_unreserved(b) || (operator == Some('+') && b"!#$&'()*+,/:;=?@[]".contains(&b));
            if keep {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        rest = &rest[end + 1..];
    }
    if rest.contains('}') {
        return None;
    }
    out.push_str(rest);
    Some(out)
}

/// The literal text a template's expansions all start with (up to its first expression).
pub fn template_prefix(template: &str) -> &str {
    template.split('{').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spellings_of_one_resource_normalise_alike() {
        let same = [
            "test://template/123/data",
            "TEST://Template/123/data",
            "test://template/%31%32%33/data",
            "test://template/123/%64ata",
        ];
        for s in same {
            assert_eq!(normalize(s).unwrap(), "test://template/123/data", "{s}");
        }
        assert_eq!(normalize("file:///a/b%20c").unwrap(), "file:///a/b%20c");
        assert_eq!(normalize("file:///a/b%3a").unwrap(), "file:///a/b%3A");
        assert_eq!(normalize("urn:Example:AbC").unwrap(), "urn:Example:AbC");
        assert_eq!(normalize("test://h/p?q=%7e").unwrap(), "test://h/p?q=~");
        // The path keeps its case: only the scheme and host are case-insensitive.
        assert_eq!(normalize("test://H/P").unwrap(), "test://h/P");
    }

    #[test]
    fn spellings_that_walk_out_are_refused() {
        for (uri, why) in [
            ("test://h/a/../secret", UriError::DotSegment),
            ("test://h/a/./b", UriError::DotSegment),
            ("test://h/a/%2e%2E/secret", UriError::DotSegment),
            ("test://h/a/%2E/b", UriError::DotSegment),
            ("test://h/..", UriError::DotSegment),
            ("test://h/a%2Fb", UriError::EncodedSeparator),
            ("test://h/a%2fb", UriError::EncodedSeparator),
            ("test://h/a%5cb", UriError::EncodedSeparator),
            ("test://h/a\\b", UriError::Character),
            ("test://h/a b", UriError::Character),
            ("test://h/é", UriError::Character),
            ("test://h/a#frag", UriError::Fragment),
            ("test://user@h/a", UriError::UserInfo),
            ("test://h/%zz", UriError::PercentEncoding),
            ("test://h/%2", UriError::PercentEncoding),
            ("no-scheme", UriError::Scheme),
            ("1x://h", UriError::Scheme),
            ("", UriError::Length),
        ] {
            assert_eq!(normalize(uri), Err(why), "{uri}");
        }
        assert_eq!(
            normalize(&format!("test://h/{}", "a".repeat(MAX_URI_BYTES))),
            Err(UriError::Length)
        );
        // Dots inside a segment are ordinary.
        assert!(normalize("test://h/a..b/.c").is_ok());
    }

    #[test]
    fn templates_match_their_expansions_only() {
        let t = "test://template/{id}/data";
        assert!(template_matches(t, "test://template/123/data"));
        assert!(!template_matches(t, "test://template/1/2/data"));
        assert!(!template_matches(t, "test://template//data"));
        assert!(!template_matches(t, "test://template/123/data/more"));
        assert!(!template_matches(t, "test://other/123/data"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(!template_matches("file:///{+path}", "file:///"));
        assert!(template_matches("test://s{/seg}", "test://s"));
        assert!(template_matches("test://s{/seg}", "test://s/x"));
        assert!(!template_matches("test://s{/seg}", "test://s/x/y"));
        assert!(template_matches(
            "test://q/{id}{?a,b}",
            "test://q/1?a=2&b=3"
        ));
        assert!(template_matches("test://q/{id}{?a,b}", "test://q/1"));
        assert!(template_matches("test://a/{x}-{y}", "test://a/1-2"));
        // Unknown or malformed expressions match nothing.
        assert!(!template_matches("test://x/{#frag}", "test://x/y"));
        assert!(!template_matches("test://x/{id", "test://x/y"));
        assert!(!template_matches("test://x/{}", "test://x/y"));
        assert!(!template_matches("test://x/id}", "test://x/id}"));
        assert_eq!(template_prefix(t), "test://template/");
    }

    #[test]
    fn templates_expand_with_encoded_values_and_fail_closed() {
        let vars = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let t = "test://template/{id}/data";
        assert_eq!(
            expand(t, &vars(&[("id", "123")])).as_deref(),
            Some("test://template/123/data")
        );
        // A value cannot add a segment, or walk out.
        assert_eq!(
            expand(t, &vars(&[("id", "../x")])).as_deref(),
            Some("test://template/..%2Fx/data")
        );
        assert!(normalize(&expand(t, &vars(&[("id", "../x")])).unwrap()).is_err());
        assert_eq!(
            expand("file:///{+path}", &vars(&[("path", "a/b c")])).as_deref(),
            Some("file:///a/b%20c")
        );
        assert_eq!(
            expand("test://s{/seg}", &vars(&[("seg", "x")])).as_deref(),
            Some("test://s/x")
        );
        assert_eq!(expand(t, &vars(&[])), None);
        assert_eq!(expand("test://q{?a}", &vars(&[("a", "1")])), None);
        // What it expands to, it matches.
        let uri = expand(t, &vars(&[("id", "abc")])).unwrap();
        assert!(template_matches(t, &uri));
    }

    proptest! {
        #[test]
        fn normalising_is_idempotent_and_never_yields_a_dot_segment(raw in "[a-zA-Z0-9%./:?=&~_-]{0,40}") {
            let uri = format!("test://h/{raw}");
            if let Ok(once) = normalize(&uri) {
                prop_assert_eq!(normalize(&once), Ok(once.clone()));
                let path = once.split('?').next().unwrap_or_default();
                prop_assert!(path.split('/').all(|s| s != "." && s != ".."));
                prop_assert!(!once.to_ascii_lowercase().contains("%2f"));
            }
        }

        #[test]
        fn a_percent_encoded_unreserved_character_is_the_character(c in "[a-zA-Z0-9._~-]") {
            let b = c.as_bytes()[0];
            let encoded = format!("test://h/x{}y", format_args!("%{b:02X}"));
            let lower = format!("test://h/x{}y", format_args!("%{b:02x}"));
            let plain = format!("test://h/x{c}y");
            prop_assert_eq!(normalize(&encoded), normalize(&plain));
            prop_assert_eq!(normalize(&lower), normalize(&plain));
        }
    }
}
