//! Configuration, from the command line and `APERTURE_*` environment variables.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything `aperture serve` needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address (`APERTURE_ADDR`, default 127.0.0.1:3000; port 0 picks a free port).
    pub addr: SocketAddr,
    /// `sqlite://…` or `postgres://…` (`APERTURE_DATABASE_URL`).
    pub database_url: String,
    /// How durable a SQLite commit is (`APERTURE_JOURNAL_SYNC=normal|full`).
    pub durability: Durability,
    /// Folder with the built dashboard (`pkg/` inside) (`APERTURE_SITE_ROOT`).
    pub site_root: PathBuf,
    /// Set cookies `Secure` with the `__Host-` prefix (`APERTURE_SECURE_COOKIES`, or an https
    /// `APERTURE_PUBLIC_URL`).
    pub secure_cookies: bool,
    /// Creates user `admin` on a database without users (`APERTURE_BOOTSTRAP_ADMIN_PASSWORD`).
    pub bootstrap_admin_password: Option<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// `APERTURE_HEADER_READ_TIMEOUT_SECONDS`: how long a connection has to send a whole
    /// request head (HTTP/1.1, its first one and each one after), or its first request (a
    /// connection that sends nothing, or HTTP/2); then it is closed (the server's `listener`).
    pub header_read_timeout: std::time::Duration,
    /// `APERTURE_BODY_READ_TIMEOUT_SECONDS`: how long a request body has to arrive, from its
    /// head on; a slower one is answered 408 (gRPC `deadline_exceeded`) (the server's `deadline`).
    /// Streams (gRPC streaming calls) are not bodies that end, and are not timed.
    pub body_read_timeout: std::time::Duration,
    /// Folder for local state: the SQLite database by default, signing keys (`APERTURE_DATA_DIR`).
    pub data_dir: PathBuf,
    /// Hex Ed25519 seed that signs receipts (`APERTURE_SIGNING_KEY`); default: a key file in
    /// `<data_dir>/keys`, created on first start.
    pub signing_key: Option<String>,
    /// A JWKS file of extra public keys to publish beside the node's own
    /// (`APERTURE_PUBLISHED_KEYS`; default `<data_dir>/keys/published.jwks`, which `aperture
    /// keys rotate` appends the outgoing key to).
    pub published_keys: PathBuf,
    /// Tenant admins may register stdio upstreams over the API (`APERTURE_ALLOW_STDIO_UPSTREAMS=1`).
    pub allow_stdio_upstreams: bool,
    /// Upstream URLs may resolve to loopback, private or link-local addresses
    /// (`APERTURE_ALLOW_PRIVATE_UPSTREAMS=1`).
    pub allow_private_upstreams: bool,
    /// How long a parked invocation waits for an approver before it expires
    /// (`APERTURE_PARKED_EXPIRY_SECONDS`, default 24 hours).
    pub parked_expiry: std::time::Duration,
    /// How long an idempotency key de-duplicates (`APERTURE_IDEMPOTENCY_RETENTION_HOURS`).
    pub idempotency_retention: std::time::Duration,
    /// The limiter that enforces policies' `rate_bucket`s (`APERTURE_RATE_LIMITER`): `none`
    /// (rate buckets are refused when a policy is written) or `database` (counted in the
    /// database every node shares).
    pub rate_limiter: RateLimiter,
    /// What checks a rule's `max_cost_cents` (`APERTURE_SPEND_GATE`): `none` (a capped rule's
    /// calls are refused, `spend_gate_unavailable`) or `catalog` (each call's price is the
    /// tool's `price_cents` descriptor as granted, checked before the upstream is contacted).
    pub spend_gate: SpendGate,
    /// The model server hosted agents use (`APERTURE_MODEL_BASE_URL`, `APERTURE_MODEL_API_KEY`,
    /// `APERTURE_MODEL`, `APERTURE_MODEL_TIMEOUT_SECONDS`); `None`: turns are refused.
    pub model: Option<ModelConfig>,
    /// `APERTURE_CHECKPOINT_INTERVAL_SECONDS`: how often a grown journal tree is checkpointed.
    pub checkpoint_interval: std::time::Duration,
    /// `APERTURE_CHECKPOINT_DIR`: the sink checkpoints are appended to (`<data dir>/checkpoints`).
    pub checkpoint_dir: PathBuf,
    /// `APERTURE_LOG_ORIGIN_HOST`: the host in new logs' origins (default: the listen address).
    pub log_origin_host: Option<String>,
    /// `APERTURE_PUBLIC_CHECKPOINTS`: the latest checkpoints are served without a token.
    pub public_checkpoints: bool,
    /// `APERTURE_PUBLIC_URL`: where people and clients reach this server; its origin is the
    /// server's own for `/mcp`'s `Origin` check. Default: the listen address over http, as
    /// bound ([`Config::own_origin`]).
    pub public_url: Option<String>,
    /// `APERTURE_ALLOWED_ORIGINS`: other origins whose pages may call `/mcp` (a browser sends
    /// `Origin`; anything else is refused, against DNS rebinding).
    pub allowed_origins: Vec<String>,
    /// `APERTURE_TRUSTED_PROXIES`: peers (addresses and CIDR ranges) whose `X-Forwarded-For`
    /// names the client; nobody else's is believed.
    pub trusted_proxies: Vec<Cidr>,
    /// `APERTURE_SECRETS_KEY`: the key(s) upstream credentials are encrypted with at rest
    /// ([`crate::secrets`]); default: the key file `<data dir>/secrets.key`.
    pub secrets_key: Option<String>,
    /// Whether this node makes signed checkpoints of the journal's trees (always, in `serve`;
    /// the gateway benchmark turns it off to measure what checkpoints cost).
    pub checkpointer: bool,
    /// `APERTURE_METRICS_TOKEN`: the bearer token `GET /metrics` answers (the operator's, not a
    /// tenant's); without it the endpoint is off and nothing is recorded.
    pub metrics_token: Option<String>,
    /// `APERTURE_TOOLS_PAGE_SIZE`: most tools one `tools/list` page carries; a longer listing
    /// ends with `nextCursor`.
    pub tools_page_size: usize,
    /// `APERTURE_WEBHOOK_RETRY_SECONDS`: the waits after each failed webhook attempt
    /// (default [`DEFAULT_WEBHOOK_RETRY_SECONDS`]); when they are used up, the
    /// delivery has failed.
    pub webhook_retry: Vec<std::time::Duration>,
    /// `APERTURE_READ_CACHE_MIB`: what the read cache of tokens, grants and tools may weigh
    /// (`crate::store::cache`), in bytes.
    pub read_cache_bytes: usize,
}

/// Tools in one `tools/list` page unless `APERTURE_TOOLS_PAGE_SIZE` says otherwise: a catalog
/// of this size or less is one page, as clients that do not page expect.
pub const DEFAULT_TOOLS_PAGE_SIZE: usize = 1_000;

/// How long a parked invocation waits for an approver unless `APERTURE_PARKED_EXPIRY_HOURS`
/// says otherwise.
pub const DEFAULT_PARKED_EXPIRY: Duration = Duration::from_secs(24 * 60 * 60);

/// Default of `APERTURE_IDEMPOTENCY_RETENTION_HOURS`.
pub const DEFAULT_IDEMPOTENCY_RETENTION: Duration = Duration::from_secs(24 * 3_600);

/// Default of `APERTURE_CHECKPOINT_INTERVAL_SECONDS`.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// Seconds to wait after each failed webhook attempt before the next (the Standard Webhooks
/// specification's suggested schedule): eight attempts over about a day and a half, then the
/// delivery is `failed`. Default of `APERTURE_WEBHOOK_RETRY_SECONDS`.
pub const DEFAULT_WEBHOOK_RETRY_SECONDS: [u64; 7] = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];

/// What the read cache may weigh unless `APERTURE_READ_CACHE_MIB` says otherwise: 256 MiB.
pub const DEFAULT_READ_CACHE_BYTES: usize = 256 * 1024 * 1024;

/// Longest wait for one model completion unless `APERTURE_MODEL_TIMEOUT_SECONDS` says
/// otherwise.
pub const DEFAULT_MODEL_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the model server hosted agents use is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelConfig {
    /// Base URL, e.g. `http://127.0.0.1:8080/v1` (`APERTURE_MODEL_BASE_URL`).
    pub base_url: String,
    /// Bearer key, when the server wants one (`APERTURE_MODEL_API_KEY`).
    pub api_key: Option<String>,
    /// Model name (`APERTURE_MODEL`).
    pub model: String,
    /// Longest wait for one completion (`APERTURE_MODEL_TIMEOUT_SECONDS`, default 120).
    pub timeout: Duration,
}

/// The folder of a data directory that holds the signing keys.
pub fn keys_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("keys")
}

/// Where the extra published keys are when `APERTURE_PUBLISHED_KEYS` names no file.
pub fn default_published_file(data_dir: &Path) -> PathBuf {
    keys_dir(data_dir).join("published.jwks")
}

/// An address or a CIDR range (`APERTURE_TRUSTED_PROXIES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `203.0.113.7`, `10.0.0.0/8`, `::1`, `fd00::/8`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p.parse::<u8>().ok()?)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().ok()?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Self { network, prefix })
    }

    /// `ip` is in this range (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// An IPv4-mapped IPv6 address as its IPv4 address; any other address as it is.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// How long a request head may take to arrive unless `APERTURE_HEADER_READ_TIMEOUT_SECONDS`
/// says otherwise (hyper's own default).
pub const DEFAULT_HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a request body may take to arrive unless `APERTURE_BODY_READ_TIMEOUT_SECONDS` says
/// otherwise: the default body limit (1 MiB) at 17 KB/s.
pub const DEFAULT_BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How durable a committed SQLite write is (`APERTURE_JOURNAL_SYNC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Durability {
    /// `normal`: WAL with `synchronous = NORMAL`: a commit survives a crash of the process
    /// (the operating system still has it), not necessarily a power loss.
    #[default]
    #[value(name = "normal")]
    Crash,
    /// `full`: `synchronous = FULL`: the WAL is synced at every commit, so a commit survives a
    /// power loss too.
    #[value(name = "full")]
    PowerLoss,
}

/// Which spend gate checks `max_cost_cents`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SpendGate {
    /// None: calls under a capped rule are refused.
    #[default]
    None,
    /// Prices from the tool descriptors (`PUT /tools/{name}` `price_cents`, server-owned).
    #[value(alias = "descriptor")]
    Catalog,
}

/// Which limiter enforces rate buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RateLimiter {
    /// None: a policy with a rate bucket is refused at write time.
    #[default]
    None,
    /// Per-minute counters in the shared database (SQLite or the nodes' PostgreSQL).
    #[value(alias = "postgres")]
    Database,
}

impl Config {
    /// What this deployment can enforce, for policy validation.
    pub fn capabilities(&self) -> engine::validate::RuntimeCapabilities {
        engine::validate::RuntimeCapabilities {
            shared_rate_limiter: self.rate_limiter != RateLimiter::None,
            ..engine::validate::RuntimeCapabilities::default()
        }
    }
}

impl Config {
    /// The server's own origin (`scheme://host[:port]`): that of `public_url`, else the listen
    /// address over http.
    pub fn own_origin(&self) -> String {
        self.public_url
            .as_deref()
            .and_then(origin_of)
            .unwrap_or_else(|| format!("http://{}", self.addr))
    }

    /// Whether a request's `Host` (its authority) names this server, against DNS rebinding. On
    /// a loopback listener: `localhost`, `127.0.0.1` or `[::1]` with the listening port, or the
    /// authority of `public_url`; a page a rebinding attack serves names its own host there. A
    /// server listening on another address accepts any (its proxy or network decides who
    /// reaches it), and so does a request without one (no browser sends that).
    pub fn accepts_host(&self, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return true;
        };
        if !self.addr.ip().is_loopback() {
            return true;
        }
        // Every `/mcp` request comes here: compared in place, nothing allocated.
        let host = host.trim();
        let own_port = host.rsplit_once(':').is_some_and(|(name, port)| {
            port.parse() == Ok(self.addr.port())
                && LOOPBACK_HOSTS.iter().any(|n| n.eq_ignore_ascii_case(name))
        });
        own_port
            || self
                .public_authority()
                .is_some_and(|a| a.eq_ignore_ascii_case(host))
    }

    /// The authority (`host[:port]`, the default port left out) of `public_url`.
    fn public_authority(&self) -> Option<String> {
        let origin = origin_of(self.public_url.as_deref()?)?;
        origin
            .split_once("://")
            .map(|(_, authority)| authority.to_owned())
    }

    /// Whether a page of `origin` may call the MCP endpoint: the server's own origin, one of
    /// `allowed_origins`, or, on a loopback listener, a loopback origin (`localhost`,
    /// `127.0.0.1`, `[::1]`) with the listening port (never another port's: another program of
    /// the same machine).
    pub fn accepts_origin(&self, origin: &str) -> bool {
        let Some(origin) = origin_of(origin) else {
            return false;
        };
        if origin == self.own_origin() || self.allowed_origins.contains(&origin) {
            return true;
        }
        let port = self.addr.port();
        self.addr.ip().is_loopback()
            && LOOPBACK_HOSTS
                .iter()
                .any(|name| origin == format!("http://{name}:{port}"))
    }

    /// Where clients reach this server, without a trailing `/`: `public_url` (path kept, query
    /// and fragment dropped), else the listen address over http. Every absolute URL the server
    /// writes (RFC 9728 metadata, `WWW-Authenticate`, links) starts with it; a request's `Host`
    /// header never does.
    pub fn public_base(&self) -> String {
        match self.public_url.as_deref() {
            Some(url) => {
                let url = url.split(['?', '#']).next().unwrap_or(url);
                url.trim_end_matches('/').to_owned()
            }
            None => format!("http://{}", self.addr),
        }
    }

    /// The host of a new log's origin (`<host>/aperture/<tenant>`): `APERTURE_LOG_ORIGIN_HOST`,
    /// else the authority of `public_url`, else the listen address.
    pub fn log_origin_host(&self) -> String {
        if let Some(host) = &self.log_origin_host {
            return host.clone();
        }
        self.public_authority()
            .unwrap_or_else(|| self.addr.to_string())
    }

    /// Defaults for a data folder: SQLite in `<data_dir>/aperture.db`, the site in `target/site`.
    pub fn new(data_dir: &std::path::Path) -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
            database_url: format!("sqlite://{}", data_dir.join("aperture.db").display()),
            durability: Durability::default(),
            site_root: PathBuf::from("target/site"),
            secure_cookies: false,
            bootstrap_admin_password: None,
            max_body_bytes: 1024 * 1024,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            data_dir: data_dir.to_path_buf(),
            signing_key: None,
            published_keys: default_published_file(data_dir),
            allow_stdio_upstreams: false,
            allow_private_upstreams: false,
            parked_expiry: DEFAULT_PARKED_EXPIRY,
            idempotency_retention: DEFAULT_IDEMPOTENCY_RETENTION,
            rate_limiter: RateLimiter::None,
            spend_gate: SpendGate::None,
            model: None,
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            checkpoint_dir: data_dir.join("checkpoints"),
            log_origin_host: None,
            public_url: None,
            allowed_origins: Vec::new(),
            trusted_proxies: Vec::new(),
            secrets_key: None,
            checkpointer: true,
            public_checkpoints: false,
            metrics_token: None,
            tools_page_size: DEFAULT_TOOLS_PAGE_SIZE,
            webhook_retry: DEFAULT_WEBHOOK_RETRY_SECONDS
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
            read_cache_bytes: DEFAULT_READ_CACHE_BYTES,
        }
    }
}

/// The names of this machine a browser uses for a loopback listener.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The origin (`scheme://host[:port]`, lowercase, the default port left out) of an absolute
/// URL or an `Origin` header value; `None` when it is not one (`null`, a path, garbage).
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if !matches!(scheme.as_str(), "http" | "https") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?.to_ascii_lowercase();
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    // The default port is no part of an origin as browsers send it.
    let authority = match authority.rsplit_once(':') {
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && matches!((scheme.as_str(), port), ("http", "80") | ("https", "443")) =>
        {
            host.to_owned()
        }
        _ => authority,
    };
    Some(format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening_on(addr: &str) -> Config {
        let mut config = Config::new(std::path::Path::new("/nonexistent"));
        config.addr = addr.parse().expect("an address");
        config
    }

    #[test]
    fn a_loopback_listener_answers_only_to_its_own_names() {
        let config = listening_on("127.0.0.1:4100");
        for host in [
            "localhost:4100",
            "127.0.0.1:4100",
            "[::1]:4100",
            "LocalHost:4100",
        ] {
            assert!(config.accepts_host(Some(host)), "{host}");
        }
        for host in ["evil.example:4100", "localhost", "localhost:4101", ""] {
            assert!(!config.accepts_host(Some(host)), "{host}");
        }
        assert!(config.accepts_host(None), "no Host: no browser sent it");
        assert!(config.accepts_origin("http://localhost:4100"));
        assert!(!config.accepts_origin("http://localhost:4101"));
        assert!(!config.accepts_origin("https://localhost:4100"));
        assert!(!config.accepts_origin("null"));

        let mut public = listening_on("127.0.0.1:4100");
        public.public_url = Some("https://gateway.example/edge".into());
        assert!(public.accepts_host(Some("gateway.example")));
        assert!(public.accepts_origin("https://gateway.example"));
        assert!(!public.accepts_host(Some("gateway.example:4100")));
    }

    #[test]
    fn a_listener_on_another_address_leaves_host_to_its_network() {
        let config = listening_on("0.0.0.0:4100");
        assert!(config.accepts_host(Some("gateway.internal")));
        assert!(!config.accepts_origin("http://localhost:4100"));
        assert!(config.accepts_origin("http://0.0.0.0:4100"));
    }
}
