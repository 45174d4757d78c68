//! Upstream MCP servers: how Aperture reaches the tools it governs.
//!
//! An upstream is described by an [`UpstreamSpec`]: a local process speaking MCP over stdio, or
//! a remote server speaking streamable HTTP. The [`Connector`] opens a [`Connection`] to it with
//! the official Rust MCP SDK (`rmcp`): the `initialize` handshake, every page of `tools/list`,
//! and `tools/call` under a deadline (a call that misses it is cancelled upstream). [`import()`]
//! turns a listing into tool descriptors with canonical names (CONTRACT §11), and
//! [`check_url`] is the SSRF guard for URLs registered over the API.
//!
//! This module speaks MCP and nothing else: policies, sessions and the journal are decided
//! elsewhere. A registry of live connections per upstream id (in `AppState`) builds on
//! [`Connection`] (which is `Sync`, so one connection serves concurrent calls) and its
//! [`Connection::tools_changed`] signal; authorization pins [`UpstreamSpec::fingerprint`] and
//! execution compares it (`target_drift`).
//!
//! Secrets: header values and `env` values are write-only. `UpstreamSpec`'s `Debug` hides them,
//! and the text of every [`UpstreamError`] is scrubbed of them (and of the URL's query and
//! user info) when it is made, so an error may be logged as it is.

mod answer;
mod connector;
mod guard;
mod http;
mod import;
mod registry;

pub(crate) use connector::CALL_TAG;
pub use connector::{
    AskFn, AskRefusal, CallHooks, Connection, Connector, LogFn, LogLevel, MAX_WAIT, Offers,
    Progress, ProgressFn, RawTool, StatelessRound, UnattributedFn, UpstreamAsk, UpstreamLog,
    check_result_size, tls_config,
};
pub(crate) use guard::resolve;
pub use guard::{address_class, check_url};
pub use import::{
    ImportReport, ImportedItem, ItemKind, RefusedItem, SkipReason, SkippedTool, import,
    import_items,
};
pub use registry::{CredentialsRequest, ResourceUpdated, Upstreams, list, list_unchecked};

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use upstream_reqwest::Url;
use upstream_reqwest::header::{HeaderName, HeaderValue};

/// Headers the MCP transport sets itself; an upstream's configured headers may not override them.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "host",
    "content-length",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// How to reach an upstream MCP server.
///
/// `Debug` shows the command, the endpoint and the *names* of `env` variables and headers,
/// never their values.
#[derive(Clone, PartialEq, Eq)]
pub enum UpstreamSpec {
    /// A local process speaking MCP over its stdin and stdout.
    Stdio {
        /// The program and its arguments (no shell is involved).
        command: Vec<String>,
        /// Environment of the process. Apart from these, it inherits only a few basics
        /// (`PATH`, `HOME`, locale), never the gateway's own environment. Write-only: values may
        /// be credentials.
        env: BTreeMap<String, String>,
    },
    /// A remote server speaking MCP over streamable HTTP.
    StreamableHttp {
        /// The MCP endpoint, `http://…` or `https://…`.
        url: String,
        /// Sent with every request (`Authorization`, API keys). Write-only.
        headers: BTreeMap<String, String>,
    },
}

impl UpstreamSpec {
    /// Checks what can be checked without connecting: a non-empty command without NUL bytes;
    /// an `http(s)` URL with a host and without user info (credentials go in headers); header
    /// names and values HTTP accepts, none of them one the transport sets itself. Errors name
    /// the offending variable or header, never its value.
    pub fn validate(&self) -> Result<(), UpstreamError> {
        let invalid = |reason: String| Err(UpstreamError::InvalidSpec { reason });
        match self {
            Self::Stdio { command, env } => {
                match command.first() {
                    None => return invalid("the command is empty".into()),
                    Some(program) if program.is_empty() => {
                        return invalid("the program name is empty".into());
                    }
                    Some(_) => {}
                }
                if command.iter().any(|arg| arg.contains('\0')) {
                    return invalid("the command contains a NUL byte".into());
                }
                for (key, value) in env {
                    if key.is_empty() || key.contains(['=', '\0']) {
                        return invalid(format!("`{key}` is not an environment variable name"));
                    }
                    if value.contains('\0') {
                        return invalid(format!("the value of `{key}` contains a NUL byte"));
                    }
                }
                Ok(())
            }
            Self::StreamableHttp { url, headers } => {
                let parsed = Url::parse(url).map_err(|e| UpstreamError::InvalidSpec {
                    reason: format!("the URL does not parse: {e}"),
                })?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return invalid(format!(
                        "the URL scheme is `{}`, not http or https",
                        parsed.scheme()
                    ));
                }
                if parsed.host_str().is_none_or(str::is_empty) {
                    return invalid("the URL has no host".into());
                }
                if !parsed.username().is_empty() || parsed.password().is_some() {
                    return invalid("the URL carries credentials; send them as a header".into());
                }
                for (name, value) in headers {
                    let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                        UpstreamError::InvalidSpec {
                            reason: format!("`{name}` is not an HTTP header name"),
                        }
                    })?;
                    if RESERVED_HEADERS.contains(&header.as_str()) {
                        return invalid(format!("the header `{name}` is set by the transport"));
                    }
                    if HeaderValue::from_str(value).is_err() {
                        return invalid(format!("the value of the header `{name}` is not valid"));
                    }
                }
                Ok(())
            }
        }
    }

    /// The normalized endpoint, safe to show: for HTTP `scheme://host:port/path` (scheme and
    /// host lowercased, the port explicit; query, fragment and user info dropped, since they
    /// may carry credentials), for stdio `stdio:` and the command as a JSON array.
    pub fn endpoint(&self) -> String {
        match self {
            Self::Stdio { command, .. } => {
                format!("stdio:{}", serde_json::Value::from(command.clone()))
            }
            Self::StreamableHttp { url, .. } => {
                normalized_url(url).unwrap_or_else(|| "invalid-url".to_owned())
            }
        }
    }

    /// `sha256:` of the normalized endpoint ([`Self::endpoint`]): what authorization pins and
    /// execution compares (`target_drift`). Credentials (headers, `env`) are not part of it, so
    /// rotating a key is not drift; an unparsable URL is hashed as written.
    pub fn fingerprint(&self) -> String {
        let endpoint = match self {
            Self::StreamableHttp { url, .. } if normalized_url(url).is_none() => {
                format!("invalid-url:{url}")
            }
            _ => self.endpoint(),
        };
        engine::canonical::sha256_tagged(endpoint.as_bytes())
    }
}

/// `scheme://host:port/path` of an `http(s)` URL.
fn normalized_url(url: &str) -> Option<String> {
    let parsed = Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    let port = parsed.port_or_known_default()?;
    Some(format!(
        "{}://{}:{}{}",
        parsed.scheme(),
        host.to_ascii_lowercase(),
        port,
        parsed.path()
    ))
}

impl fmt::Debug for UpstreamSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdio { command, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
            Self::StreamableHttp { headers, .. } => f
                .debug_struct("StreamableHttp")
                .field("endpoint", &self.endpoint())
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// What talking to an upstream can fail with. Every text is safe to log (see the module docs);
/// none of it is for the agent, which sees only the reason code ([`Self::reason_code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The spec cannot work (empty command, a URL that is not http(s), a reserved header…).
    /// Registration answers 400 `invalid_argument`.
    #[error("invalid upstream: {reason}")]
    InvalidSpec {
        /// What is wrong, naming fields but never secret values.
        reason: String,
    },
    /// The SSRF guard refused the URL (CONTRACT §11). Registration answers 400
    /// `invalid_argument`; at call time, `upstream_error`.
    #[error("upstream URL refused: {reason}")]
    UrlRefused {
        /// Why (scheme, unresolvable host, the class of address it resolves to).
        reason: String,
    },
    /// The process did not start, or the server could not be reached or refused the
    /// `initialize` handshake. Calls answer `upstream_error`.
    #[error("cannot connect to the upstream: {reason}")]
    Connect {
        /// What failed.
        reason: String,
    },
    /// A request could not be delivered or its answer never came back: the process exited, an
    /// HTTP request failed, the connection was closed. [`Connection::is_closed`] tells whether
    /// to reconnect. Calls answer `upstream_error`.
    #[error("upstream transport failed: {reason}")]
    Transport {
        /// What failed.
        reason: String,
    },
    /// The upstream answered something MCP does not allow here (a malformed result, endless
    /// pagination, a request for client input Aperture does not relay). Calls answer
    /// `upstream_error`.
    #[error("upstream protocol error: {reason}")]
    Protocol {
        /// What was wrong.
        reason: String,
    },
    /// No answer within the deadline. A call is cancelled upstream
    /// (`notifications/cancelled`). Calls answer `execution_timeout`.
    #[error("the upstream did not answer within {} ms", .after.as_millis())]
    Timeout {
        /// The deadline that passed.
        after: Duration,
    },
    /// The upstream answered `tools/call` with a JSON-RPC error (unknown tool, invalid
    /// arguments, an internal failure). Its message is the upstream's: for the journal's
    /// disclosures, never the caller. Calls answer `upstream_error`. (A tool result with
    /// `isError: true` is not an error here: it is a result.)
    #[error("the upstream answered with JSON-RPC error {code}: {message}")]
    Tool {
        /// The JSON-RPC error code.
        code: i32,
        /// The upstream's message.
        message: String,
    },
    /// The serialized result is larger than the limit; none of it may reach the journal or the
    /// client. Calls answer `result_too_large`.
    #[error("the upstream result is {bytes} bytes, over the limit of {limit}")]
    ResultTooLarge {
        /// Size of the compact JSON serialization of the result.
        bytes: usize,
        /// The limit it exceeded.
        limit: usize,
    },
}

impl UpstreamError {
    /// The decision reason code (CONTRACT §5) a call that failed this way is answered with.
    pub fn reason_code(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "execution_timeout",
            Self::ResultTooLarge { .. } => "result_too_large",
            _ => "upstream_error",
        }
    }
}

/// Removes what must never appear in an error text: the values of headers and `env`
/// variables, and the URL's query and user info (the URL is replaced by its endpoint). Values
/// shorter than [`Scrubber::MIN_SECRET_CHARS`] are left alone: they are no credentials, and
/// replacing them would garble the text.
#[derive(Debug, Clone, Default)]
struct Scrubber {
    /// The URL as configured and its safe endpoint.
    url: Option<(String, String)>,
    /// Longest first, so a secret containing another is replaced whole.
    secrets: Vec<String>,
}

impl Scrubber {
    const MIN_SECRET_CHARS: usize = 8;
    /// Error texts longer than this are cut (an upstream may put a whole page in one).
    const MAX_TEXT_CHARS: usize = 1024;

    fn for_spec(spec: &UpstreamSpec) -> Self {
        let mut secrets = Vec::new();
        let mut url_pair = None;
        match spec {
            UpstreamSpec::Stdio { env, .. } => secrets.extend(env.values().cloned()),
            UpstreamSpec::StreamableHttp { url, headers } => {
                for value in headers.values() {
                    secrets.push(value.clone());
                    // `Bearer <token>`: the token alone may be echoed too.
                    secrets.extend(value.split_whitespace().map(str::to_owned));
                }
                if let Ok(parsed) = Url::parse(url) {
                    secrets.extend(parsed.query().map(str::to_owned));
                    secrets.extend(parsed.query_pairs().map(|(_, v)| v.into_owned()));
                    secrets.extend(parsed.password().map(str::to_owned));
                    url_pair = Some((url.clone(), spec.endpoint()));
                }
            }
        }
        secrets.retain(|s| s.chars().count() >= Self::MIN_SECRET_CHARS);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self {
            url: url_pair,
            secrets,
        }
    }

    fn scrub(&self, text: impl fmt::Display) -> String {
        let mut text = text.to_string();
        if let Some((url, endpoint)) = &self.url {
            text = text.replace(url.as_str(), endpoint);
        }
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "<redacted>");
        }
        if let Some((cut, _)) = text.char_indices().nth(Self::MAX_TEXT_CHARS) {
            text.truncate(cut);
            text.push('…');
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(url: &str, headers: &[(&str, &str)]) -> UpstreamSpec {
        UpstreamSpec::StreamableHttp {
            url: url.into(),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn stdio(command: &[&str], env: &[(&str, &str)]) -> UpstreamSpec {
        UpstreamSpec::Stdio {
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn endpoints_are_normalized_and_fingerprints_ignore_credentials() {
        let a = http("HTTPS://MCP.Example.com/mcp?token=abcdefgh1234#x", &[]);
        assert_eq!(a.endpoint(), "https://mcp.example.com:443/mcp");
        let b = http(
            "https://mcp.example.com:443/mcp",
            &[("authorization", "Bearer s3cret-s3cret")],
        );
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert!(a.fingerprint().starts_with("sha256:"));
        assert_eq!(a.fingerprint().len(), "sha256:".len() + 64);
        // Another port, path or host is another target.
        for other in [
            "https://mcp.example.com:8443/mcp",
            "https://mcp.example.com/other",
            "https://mcp.example.org/mcp",
            "http://mcp.example.com/mcp",
        ] {
            assert_ne!(http(other, &[]).fingerprint(), a.fingerprint(), "{other}");
        }
        assert_eq!(
            http("http://[::1]:8080", &[]).endpoint(),
            "http://[::1]:8080/"
        );

        let s = stdio(&["npx", "-y", "server x"], &[("API_KEY", "k-123456789")]);
        assert_eq!(s.endpoint(), r#"stdio:["npx","-y","server x"]"#);
        assert_eq!(
            s.fingerprint(),
            stdio(&["npx", "-y", "server x"], &[]).fingerprint()
        );
        // Arguments are not joined with spaces, so their boundaries count.
        assert_ne!(
            s.fingerprint(),
            stdio(&["npx", "-y server", "x"], &[]).fingerprint()
        );
    }

    #[test]
    fn validation_names_fields_and_never_values() {
        assert!(
            http("https://h.example/mcp", &[("Authorization", "Bearer x")])
                .validate()
                .is_ok()
        );
        assert!(stdio(&["server"], &[("KEY", "v")]).validate().is_ok());
        let refused = [
            stdio(&[], &[]),
            stdio(&[""], &[]),
            stdio(&["a\0b"], &[]),
            stdio(&["s"], &[("A=B", "v")]),
            http("ftp://h.example/", &[]),
            http("not a url", &[]),
            http("https://user:pw@h.example/", &[]),
            http("https://h.example/", &[("mcp-session-id", "x")]),
            http("https://h.example/", &[("bad header", "x")]),
            http("https://h.example/", &[("x-key", "line\nbreak-s3cret")]),
        ];
        for spec in refused {
            let err = spec.validate().unwrap_err();
            assert!(matches!(err, UpstreamError::InvalidSpec { .. }), "{spec:?}");
            assert!(!err.to_string().contains("s3cret"));
        }
    }

    #[test]
    fn debug_hides_secret_values() {
        let spec = http(
            "https://h.example/mcp?key=query-s3cret",
            &[("authorization", "Bearer header-s3cret")],
        );
        let shown = format!("{spec:?}");
        assert!(shown.contains("authorization"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
        let shown = format!("{:?}", stdio(&["srv"], &[("TOKEN", "env-s3cret")]));
        assert!(
            shown.contains("TOKEN") && !shown.contains("env-s3cret"),
            "{shown}"
        );
    }

    #[test]
    fn scrubbing_removes_secrets_and_the_query() {
        let spec = http(
            "https://h.example/mcp?key=query-s3cret-value",
            &[("authorization", "Bearer token-s3cret-value"), ("x-n", "1")],
        );
        let scrubber = Scrubber::for_spec(&spec);
        let text = scrubber.scrub(
            "POST https://h.example/mcp?key=query-s3cret-value failed; server said \
             token-s3cret-value is invalid (query-s3cret-value), code 1",
        );
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("https://h.example:443/mcp failed"), "{text}");
        assert!(text.ends_with("code 1"), "{text}");
        let env = stdio(&["srv"], &[("TOKEN", "env-s3cret-value")]);
        let text = Scrubber::for_spec(&env).scrub("bad token env-s3cret-value");
        assert_eq!(text, "bad token <redacted>");
        let long = Scrubber::default().scrub("x".repeat(5000));
        assert_eq!(long.chars().count(), Scrubber::MAX_TEXT_CHARS + 1);
    }

    #[test]
    fn reason_codes() {
        assert_eq!(
            UpstreamError::Timeout {
                after: Duration::from_millis(5)
            }
            .reason_code(),
            "execution_timeout"
        );
        assert_eq!(
            UpstreamError::ResultTooLarge { bytes: 2, limit: 1 }.reason_code(),
            "result_too_large"
        );
        assert_eq!(
            UpstreamError::Tool {
                code: -32602,
                message: "x".into()
            }
            .reason_code(),
            "upstream_error"
        );
    }
}
