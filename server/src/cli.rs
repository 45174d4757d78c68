//! The `aperture` command line (CONTRACT §10).

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use aperture_types::dto::{CreateTokenRequest, CreateUserRequest};

use crate::auth::password::Passwords;
use crate::startup::Application;
use aperture_core::config::Config;
use aperture_core::config::Durability;
use aperture_core::journal::Journal;
use aperture_core::users::Bootstrap;
use aperture_core::{Store, clock, tenants};

/// Aperture: the authorization layer between AI agents and their tools.
#[derive(Debug, Parser)]
#[command(name = "aperture", version, about)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct GlobalArgs {
    /// Folder for local state (the SQLite database by default).
    #[arg(
        long,
        env = "APERTURE_DATA_DIR",
        default_value = "./data",
        global = true
    )]
    data_dir: PathBuf,
    /// `sqlite://path` or `postgres://…`; default: SQLite in the data folder.
    #[arg(long, env = "APERTURE_DATABASE_URL", global = true)]
    database_url: Option<String>,
    /// SQLite commits: `normal` survives a crash of the process, `full` also a power loss
    /// (one more fsync per commit; commits are grouped). PostgreSQL follows its own
    /// `synchronous_commit`.
    #[arg(
        long,
        env = "APERTURE_JOURNAL_SYNC",
        default_value = "normal",
        global = true
    )]
    journal_sync: Durability,
    /// What enforces policies' rate buckets: `none` (policies with one are refused) or
    /// `database` (per-minute counters in the database the nodes share).
    #[arg(
        long,
        env = "APERTURE_RATE_LIMITER",
        default_value = "none",
        global = true
    )]
    rate_limiter: aperture_core::config::RateLimiter,
    /// Folder the journal's signed checkpoints are appended to, a file per tenant (default:
    /// `<data dir>/checkpoints`). Outside the database: `journal verify` checks it too.
    #[arg(long, env = "APERTURE_CHECKPOINT_DIR", global = true)]
    checkpoint_dir: Option<PathBuf>,
    /// The key(s) upstream credentials are encrypted with (64 hex digits; when rotating, the
    /// new one first, comma-separated). Default: the key file `<data dir>/secrets.key`, made on
    /// first use. Every node sharing a database needs the same.
    #[arg(
        long,
        env = "APERTURE_SECRETS_KEY",
        global = true,
        hide_env_values = true
    )]
    secrets_key: Option<String>,
    /// A JWKS file of public keys to publish beside this node's own (keys that signed before a
    /// rotation, another node's); default `<data dir>/keys/published.jwks`, which `aperture keys
    /// rotate` appends the outgoing key to.
    #[arg(long, env = "APERTURE_PUBLISHED_KEYS", global = true)]
    published_keys: Option<PathBuf>,
}

impl GlobalArgs {
    /// The journal an operator command records into, signed with this node's key (the
    /// environment's `APERTURE_SIGNING_KEY`, else the data folder's newest key file).
    async fn journal(&self, store: &Store) -> anyhow::Result<Journal> {
        let signing_key = std::env::var("APERTURE_SIGNING_KEY").ok();
        let keys = aperture_core::keys::KeyRing::load(
            store,
            &self.data_dir,
            signing_key.as_deref(),
            &self.published_keys(),
        )
        .await?;
        Ok(Journal::new(store.clone(), keys))
    }

    /// The published-keys file in use.
    fn published_keys(&self) -> PathBuf {
        self.published_keys
            .clone()
            .unwrap_or_else(|| aperture_core::keys::default_published_file(&self.data_dir))
    }
}

/// Boolean settings take `1/0`, `true/false`, `yes/no`, `on/off` (CONTRACT §8), as a flag
/// (`--secure-cookies`) or from the environment.
fn boolish() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}

impl GlobalArgs {
    /// The keys upstream credentials are sealed with.
    fn secrets(&self) -> anyhow::Result<std::sync::Arc<aperture_core::secrets::SecretBox>> {
        Ok(std::sync::Arc::new(
            aperture_core::secrets::SecretBox::load(&self.data_dir, self.secrets_key.as_deref())?,
        ))
    }

    fn checkpoint_dir(&self) -> PathBuf {
        self.checkpoint_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("checkpoints"))
    }

    /// What the deployment can enforce, for policy validation at the command line.
    fn capabilities(&self) -> engine::validate::RuntimeCapabilities {
        let mut config = Config::new(&self.data_dir);
        config.rate_limiter = self.rate_limiter;
        config.capabilities()
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway, the API and the dashboard.
    Serve(Box<ServeArgs>),
    /// Apply database migrations and exit.
    Migrate,
    /// Operator commands for users.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Operator commands for API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// The tamper-evident journal.
    Journal {
        #[command(subcommand)]
        command: JournalCommand,
    },
    /// Evidence bundles of sessions.
    Evidence {
        #[command(subcommand)]
        command: EvidenceCommand,
    },
    /// Receipts.
    Receipt {
        #[command(subcommand)]
        command: ReceiptCommand,
    },
    /// Signing keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Upstream MCP servers.
    Upstream {
        #[command(subcommand)]
        command: UpstreamCommand,
    },
    /// Policies.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// A stdio MCP server for clients that cannot add `_meta`: lists through the gateway and
    /// adds the echo to every call; re-lists before the lease ends and when the tools change.
    Bridge {
        /// The gateway (`https://host` or its `/mcp` URL).
        #[arg(long)]
        url: String,
        /// File holding the API token (scope agent_tool_exposure:run).
        #[arg(long)]
        token_file: PathBuf,
    },
    /// A witness of one tenant's journal: checks each new checkpoint's signature and its
    /// consistency with the last one seen, then cosigns it (exits non-zero when it refuses).
    Witness {
        /// The gateway (`https://host`).
        #[arg(long)]
        url: String,
        /// The tenant whose journal is witnessed.
        #[arg(long)]
        tenant: String,
        /// File holding the API token (scope agent_tool_exposure:witness).
        #[arg(long)]
        token_file: PathBuf,
        /// The witness's key file (made on first use).
        #[arg(long)]
        key_file: PathBuf,
        /// The witness's name, for a new key file.
        #[arg(long, default_value = "aperture-witness")]
        name: String,
        /// Where the witness keeps the log key it pinned and the last tree it saw.
        #[arg(long)]
        state: PathBuf,
        /// One round, then exit.
        #[arg(long)]
        once: bool,
        /// Seconds between rounds.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        interval_seconds: u64,
    },
}

#[derive(Debug, Subcommand)]
enum UpstreamCommand {
    /// Register an upstream and import its tools: `--url <u>` or `--stdio -- <command…>`
    /// (the operator's way to add stdio upstreams).
    Add {
        /// Tenant (created when missing).
        #[arg(long)]
        tenant: String,
        /// Upstream name, `[a-z0-9-]{1,32}`.
        #[arg(long)]
        name: String,
        /// Streamable HTTP endpoint.
        #[arg(long, conflicts_with = "stdio")]
        url: Option<String>,
        /// Run the command after `--` and speak MCP over its stdin/stdout.
        #[arg(long, requires = "command")]
        stdio: bool,
        /// `KEY=VALUE` for the process's environment (repeatable).
        #[arg(long = "env")]
        env: Vec<String>,
        /// `Name: value` sent with every HTTP request (repeatable).
        #[arg(long = "header")]
        headers: Vec<String>,
        /// The command (after `--`).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Replace an upstream's credentials, the whole set: `--header 'Name: value'` (repeatable)
    /// for an HTTP upstream, `--env KEY=VALUE` (repeatable) for a stdio one; none clears them.
    /// Journaled (names only, never values); grants pinned to the old credentials become
    /// `target_drift` and a fresh list re-pins.
    Credentials {
        /// Tenant.
        #[arg(long)]
        tenant: String,
        /// Upstream name.
        #[arg(long)]
        name: String,
        /// `KEY=VALUE` for a stdio upstream's environment (repeatable).
        #[arg(long = "env", conflicts_with = "headers")]
        env: Vec<String>,
        /// `Name: value` for an HTTP upstream (repeatable).
        #[arg(long = "header")]
        headers: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum JournalCommand {
    /// Remove the disclosures (arguments, rule reasons, what admin changes touched) of records
    /// older than N days, keeping their receipts and digests, so verify still passes. The purge
    /// is journaled first in each tenant's journal.
    PurgeDisclosures {
        /// Records issued more than this many days ago lose their disclosures.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=36_500))]
        older_than_days: u64,
        /// Only this tenant (default: every tenant).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Check every chain, signature and stored column; exit 0 only when all verify.
    Verify {
        /// A JWKS file of the keys you trust (fetched earlier from
        /// `/.well-known/aperture/keys`): then nothing the database says about keys is
        /// trusted, and a key in the database that is not among them is reported.
        #[arg(long, value_name = "JWKS")]
        trusted_keys: Option<PathBuf>,
        /// A witness's cosigner key (note verifier format, `name+id+key`); repeatable. The
        /// newest checkpoint of each tenant must carry `--quorum` of their cosignatures.
        #[arg(long = "witness", value_name = "VKEY")]
        witnesses: Vec<String>,
        /// How many of the `--witness` keys must have cosigned (default: all of them).
        #[arg(long, requires = "witnesses")]
        quorum: Option<usize>,
        /// A witness's state file (what `aperture witness --state` keeps); repeatable. Its
        /// tenant must still have at least the records the witness cosigned, hashing to the
        /// root it saw, under the log it followed: a tenant erased or rolled back fails.
        #[arg(long = "witness-state", value_name = "FILE")]
        witness_states: Vec<PathBuf>,
        /// `<tenant>:<size>`: the tenant must have at least `size` records (a size you noted
        /// earlier, from a checkpoint or this command's output); repeatable.
        #[arg(long = "expect", value_name = "TENANT:SIZE")]
        expect: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum EvidenceCommand {
    /// Check an evidence bundle offline (no database, no network): the signatures of its
    /// receipts, manifests and checkpoint, and each receipt's inclusion in the checkpoint.
    Verify {
        /// The bundle (`GET /sessions/{id}/evidence`), or `-`.
        file: String,
        /// A JWKS file of keys you pinned; otherwise the bundle's own keys are used (and the
        /// output says so).
        #[arg(long, value_name = "JWKS")]
        trusted_keys: Option<PathBuf>,
        /// A witness's cosigner key (note verifier format); repeatable.
        #[arg(long = "witness", value_name = "VKEY")]
        witnesses: Vec<String>,
        /// How many of the `--witness` keys must have cosigned (default: all of them).
        #[arg(long, requires = "witnesses")]
        quorum: Option<usize>,
    },
}

#[derive(Debug, Subcommand)]
enum ReceiptCommand {
    /// Check one receipt's signature (a file, or - for stdin). Offline with `--keys` or
    /// `--trusted-keys`; otherwise against the keys of an existing local database.
    Verify {
        /// Path of a receipt JSON file, or `-`.
        file: String,
        /// The keys to verify with: a JWKS file, or the URL of one
        /// (`https://gateway/.well-known/aperture/keys`).
        #[arg(long, value_name = "JWKS_FILE_OR_URL", conflicts_with = "trusted_keys")]
        keys: Option<String>,
        /// A JWKS file of keys you pinned.
        #[arg(long, value_name = "JWKS")]
        trusted_keys: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a new signing key; it signs from the next start on, old keys stay published.
    Rotate,
    /// Encrypt every stored upstream credential under a new key. With the key file
    /// (`<data dir>/secrets.key`) a new key is made there (the previous one kept for values a
    /// running node seals meanwhile); with APERTURE_SECRETS_KEY, put the new key first in it
    /// (`new,old`) on every node, then run this.
    RotateSecrets,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "APERTURE_ADDR", default_value = "127.0.0.1:3000")]
    addr: SocketAddr,
    /// Folder with the built dashboard (`pkg/` inside).
    #[arg(long, env = "APERTURE_SITE_ROOT", default_value = "target/site")]
    site_root: PathBuf,
    /// Mark cookies `Secure` and use the `__Host-` prefix (set when served over TLS).
    #[arg(long, env = "APERTURE_SECURE_COOKIES", value_parser = boolish())]
    secure_cookies: bool,
    /// Create user `admin` (every scope, tenant `default`) on a database with no user.
    #[arg(
        long,
        env = "APERTURE_BOOTSTRAP_ADMIN_PASSWORD",
        hide_env_values = true
    )]
    bootstrap_admin_password: Option<String>,
    /// Hex Ed25519 seed that signs receipts (nodes sharing a database must share it); default:
    /// the newest key file in <data-dir>/keys, created on first start.
    #[arg(long, env = "APERTURE_SIGNING_KEY", hide_env_values = true)]
    signing_key: Option<String>,
    /// Let tenant admins register stdio upstreams over the API (they run commands on this host).
    #[arg(long, env = "APERTURE_ALLOW_STDIO_UPSTREAMS", value_parser = boolish())]
    allow_stdio_upstreams: bool,
    /// Let upstream URLs resolve to loopback, private or link-local addresses.
    #[arg(long, env = "APERTURE_ALLOW_PRIVATE_UPSTREAMS", value_parser = boolish())]
    allow_private_upstreams: bool,
    /// Most tools one `tools/list` page carries (a longer listing ends with `nextCursor`).
    #[arg(long, env = "APERTURE_TOOLS_PAGE_SIZE", default_value_t = aperture_core::config::DEFAULT_TOOLS_PAGE_SIZE as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    tools_page_size: u64,
    /// Seconds to wait after each failed webhook attempt, comma-separated (after the last,
    /// the delivery has failed).
    #[arg(long, env = "APERTURE_WEBHOOK_RETRY_SECONDS", default_value = "5,300,1800,7200,18000,36000,36000",
          value_parser = aperture_core::webhooks::parse_retry)]
    webhook_retry_seconds: std::vec::Vec<std::time::Duration>,
    /// MiB the read cache (tokens, grants, tools) may take; least recently used entries go
    /// first.
    #[arg(long, env = "APERTURE_READ_CACHE_MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    read_cache_mib: u64,
    /// Seconds a parked invocation waits for an approver before it expires.
    #[arg(long, env = "APERTURE_PARKED_EXPIRY_SECONDS", default_value_t = 86_400,
          value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    parked_expiry_seconds: u64,
    /// Hours an `idempotency_key` de-duplicates calls of a tool whose rule requires one.
    #[arg(long, env = "APERTURE_IDEMPOTENCY_RETENTION_HOURS", default_value_t = 24,
          value_parser = clap::value_parser!(u64).range(1..=8_760))]
    idempotency_retention_hours: u64,
    /// What checks rules' `max_cost_cents`: `none` (capped calls are refused) or `catalog`
    /// (the tools' `price_cents` descriptors).
    #[arg(long, env = "APERTURE_SPEND_GATE", default_value = "none")]
    spend_gate: aperture_core::config::SpendGate,
    /// Base URL of the OpenAI-compatible model server hosted agents use
    /// (`http://127.0.0.1:8080/v1`); hosted agents cannot run turns without it.
    #[arg(long, env = "APERTURE_MODEL_BASE_URL")]
    model_base_url: Option<String>,
    /// The model's API key, when the server wants one.
    #[arg(long, env = "APERTURE_MODEL_API_KEY", hide_env_values = true)]
    model_api_key: Option<String>,
    /// The model name requests carry.
    #[arg(long, env = "APERTURE_MODEL", requires = "model_base_url")]
    model: Option<String>,
    /// Seconds between checkpoints of a grown journal tree (also every 1,000 records and at
    /// shutdown).
    #[arg(long, env = "APERTURE_CHECKPOINT_INTERVAL_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    checkpoint_interval_seconds: u64,
    /// The host in a new log's origin (`<host>/aperture/<tenant>`); default: the listen
    /// address. Fixed per tenant at its first checkpoint.
    #[arg(long, env = "APERTURE_LOG_ORIGIN_HOST")]
    log_origin_host: Option<String>,
    /// Serve the latest checkpoints without a token.
    #[arg(long, env = "APERTURE_PUBLIC_CHECKPOINTS", value_parser = boolish())]
    public_checkpoints: bool,
    /// The bearer token `GET /metrics` answers (the operator's Prometheus, never a tenant);
    /// without it `/metrics` is off. At least 16 characters.
    #[arg(long, env = "APERTURE_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// Where people and clients reach this server (`https://gateway.example`); its origin is
    /// the one browsers may call `/mcp` from. Default: the listen address over http.
    #[arg(long, env = "APERTURE_PUBLIC_URL")]
    public_url: Option<String>,
    /// Other origins whose pages may call `/mcp`, comma-separated.
    #[arg(long, env = "APERTURE_ALLOWED_ORIGINS", value_delimiter = ',')]
    allowed_origins: Vec<String>,
    /// Proxies (addresses and CIDR ranges, comma-separated) whose `X-Forwarded-For` names the
    /// client, for the sign-in limits per address. Nobody else's header is believed.
    #[arg(long, env = "APERTURE_TRUSTED_PROXIES", value_delimiter = ',')]
    trusted_proxies: Vec<String>,
    /// Seconds a connection has to send a whole request head (and its first request); then it
    /// is closed.
    #[arg(long, env = "APERTURE_HEADER_READ_TIMEOUT_SECONDS",
          default_value_t = aperture_core::config::DEFAULT_HEADER_READ_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_read_timeout_seconds: u64,
    /// Seconds a request body has to arrive, from its head on; a slower one is answered 408.
    #[arg(long, env = "APERTURE_BODY_READ_TIMEOUT_SECONDS",
          default_value_t = aperture_core::config::DEFAULT_BODY_READ_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    body_read_timeout_seconds: u64,
    /// Longest wait for one model completion, in seconds.
    #[arg(long, env = "APERTURE_MODEL_TIMEOUT_SECONDS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    model_timeout_seconds: u64,
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Create a dashboard user (password from a prompt, or from stdin with --password-stdin).
    CreateUser {
        /// Tenant (created when missing).
        #[arg(long)]
        tenant: String,
        /// Sign-in name.
        #[arg(long)]
        username: String,
        /// A scope to grant; repeat for more.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Read the password from standard input instead of prompting.
        #[arg(long)]
        password_stdin: bool,
        /// An environment the user may open sessions in (`*`: every one); repeat for more.
        /// Default: the tenant's default environment.
        #[arg(long = "environment")]
        environments: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Validate a policy document (CONTRACT §11) and store it as the next version of the
    /// policy its `name` names.
    Apply {
        /// The document (JSON); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: String,
        /// Tenant (created when missing).
        #[arg(long, default_value = "default")]
        tenant: String,
        /// Only validate; print the problems with their field paths.
        #[arg(long)]
        dry_run: bool,
        /// Also make it the policy of new sessions in this environment.
        #[arg(long)]
        activate: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create an API token; the secret is printed once, alone on the last line.
    Create {
        /// Tenant (created when missing).
        #[arg(long)]
        tenant: String,
        /// Actor of the calls made with the token.
        #[arg(long)]
        actor: String,
        /// A scope to grant; repeat for more.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// A label.
        #[arg(long)]
        name: Option<String>,
        /// Expiry, RFC 3339.
        #[arg(long)]
        expires_at: Option<String>,
        /// An environment the token may open sessions in (`*`: every one); repeat for more.
        /// Default: the tenant's default environment.
        #[arg(long = "environment")]
        environments: Vec<String>,
    },
}

impl GlobalArgs {
    fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| Config::new(&self.data_dir).database_url)
    }

    async fn store(&self) -> anyhow::Result<Store> {
        Store::connect_with(&self.database_url(), self.journal_sync).await
    }
}

/// Parses the command line and runs it.
pub async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(&cli.global, *args).await,
        Command::Migrate => {
            let store = cli.global.store().await?;
            store.migrate().await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Admin {
            command:
                AdminCommand::CreateUser {
                    tenant,
                    username,
                    scopes,
                    password_stdin,
                    environments,
                },
        } => {
            let password = read_password(password_stdin)?;
            let (store, journal) = operator_store(&cli.global, &tenant).await?;
            let passwords = tokio::task::spawn_blocking(|| Passwords::new(1)).await??;
            let request = CreateUserRequest {
                username,
                password,
                scopes,
                environments: (!environments.is_empty()).then_some(environments),
            };
            let user = aperture_core::users::create_unchecked(
                &store,
                &journal,
                &passwords,
                &tenant,
                &aperture_core::journal::Author::operator(),
                &request,
            )
            .await
            .map_err(|e| anyhow::anyhow!(e.into_app_error()))?;
            println!(
                "created user {} in tenant {tenant} with scopes {}",
                user.username,
                user.scopes.join(" ")
            );
            Ok(())
        }
        Command::Policy {
            command:
                PolicyCommand::Apply {
                    file,
                    tenant,
                    dry_run,
                    activate,
                },
        } => policy_apply(&cli.global, &file, &tenant, dry_run, activate).await,
        Command::Witness {
            url,
            tenant,
            token_file,
            key_file,
            name,
            state,
            once,
            interval_seconds,
        } => {
            let token = std::fs::read_to_string(&token_file)
                .with_context(|| format!("reading {}", token_file.display()))?;
            let token = token.trim().to_owned();
            anyhow::ensure!(!token.is_empty(), "{} is empty", token_file.display());
            crate::witness::run(
                crate::witness::Options {
                    url,
                    tenant,
                    token,
                    key_file,
                    name,
                    state,
                    interval: std::time::Duration::from_secs(interval_seconds),
                },
                once,
            )
            .await
        }
        Command::Bridge { url, token_file } => {
            let token = std::fs::read_to_string(&token_file)
                .with_context(|| format!("reading {}", token_file.display()))?;
            let token = token.trim();
            anyhow::ensure!(!token.is_empty(), "{} is empty", token_file.display());
            crate::bridge::run(&url, token).await
        }
        Command::Upstream {
            command:
                UpstreamCommand::Add {
                    tenant,
                    name,
                    url,
                    stdio,
                    env,
                    headers,
                    command,
                },
        } => {
            upstream_add(
                &cli.global,
                &tenant,
                name,
                url,
                stdio,
                env,
                headers,
                command,
            )
            .await
        }
        Command::Upstream {
            command:
                UpstreamCommand::Credentials {
                    tenant,
                    name,
                    env,
                    headers,
                },
        } => upstream_credentials(&cli.global, &tenant, &name, env, headers).await,
        Command::Journal {
            command:
                JournalCommand::PurgeDisclosures {
                    older_than_days,
                    tenant,
                },
        } => purge_disclosures(&cli.global, older_than_days, tenant.as_deref()).await,
        Command::Journal {
            command:
                JournalCommand::Verify {
                    trusted_keys,
                    witnesses,
                    quorum,
                    witness_states,
                    expect,
                },
        } => {
            let expected = expectations(&witness_states, &expect)?;
            journal_verify(
                &cli.global,
                trusted_keys.as_deref(),
                &witnesses,
                quorum,
                &expected,
            )
            .await
        }
        Command::Evidence {
            command:
                EvidenceCommand::Verify {
                    file,
                    trusted_keys,
                    witnesses,
                    quorum,
                },
        } => evidence_verify(&file, trusted_keys.as_deref(), &witnesses, quorum),
        Command::Receipt {
            command:
                ReceiptCommand::Verify {
                    file,
                    keys,
                    trusted_keys,
                },
        } => receipt_verify(&cli.global, &file, keys.as_deref(), trusted_keys.as_deref()).await,
        Command::Keys {
            command: KeysCommand::Rotate,
        } => {
            let store = cli.global.store().await?;
            store.migrate().await?;
            let configured = std::env::var("APERTURE_SIGNING_KEY").ok();
            let published = cli.global.published_keys();
            let kid = aperture_core::keys::KeyRing::rotate(
                &store,
                &cli.global.data_dir,
                configured.as_deref(),
                &published,
            )
            .await?;
            println!(
                "created signing key {kid}; it signs after the next restart; the outgoing key is published from {}",
                published.display()
            );
            Ok(())
        }
        Command::Keys {
            command: KeysCommand::RotateSecrets,
        } => {
            let store = cli.global.store().await?;
            store.migrate().await?;
            let secrets = cli.global.secrets()?;
            secrets.begin_rotation(None)?;
            let upstreams = aperture_core::upstream::Upstreams::new(true, false, secrets.clone());
            let sealed = upstreams.reseal_all(&store).await?;
            let webhooks = aperture_core::webhooks::Webhooks::new(
                secrets.clone(),
                false,
                Vec::new(),
                String::new(),
            )?;
            let hooks = webhooks.reseal_all(&store).await?;
            println!("re-encrypted {hooks} webhook signing secrets");
            match secrets.file() {
                Some(file) => println!(
                    "re-encrypted {sealed} upstream credential sets under the new key {} in {}",
                    secrets.current_id(),
                    file.display()
                ),
                None => println!(
                    "re-encrypted {sealed} upstream credential sets under key {} (the first of \
                     APERTURE_SECRETS_KEY); the others can go from it now",
                    secrets.current_id()
                ),
            }
            Ok(())
        }
        Command::Token {
            command:
                TokenCommand::Create {
                    tenant,
                    actor,
                    scopes,
                    name,
                    expires_at,
                    environments,
                },
        } => {
            let (store, journal) = operator_store(&cli.global, &tenant).await?;
            let request = CreateTokenRequest {
                actor_id: actor,
                scopes,
                name,
                expires_at,
                environments: (!environments.is_empty()).then_some(environments),
            };
            let created = aperture_core::tokens::create_unchecked(
                &store,
                &journal,
                &tenant,
                &aperture_core::journal::Author::operator(),
                &request,
            )
            .await
            .map_err(|e| anyhow::anyhow!(e.into_app_error()))?;
            println!(
                "created token {} for actor {} in tenant {tenant} with scopes {}",
                created.token.id,
                created.token.actor_id,
                created.token.scopes.join(" ")
            );
            println!("the secret is shown once; store it now:");
            println!("{}", created.secret);
            Ok(())
        }
    }
}

async fn serve(global: &GlobalArgs, args: ServeArgs) -> anyhow::Result<()> {
    let mut config = Config::new(&global.data_dir);
    config.addr = args.addr;
    config.database_url = global.database_url();
    config.durability = global.journal_sync;
    config.rate_limiter = global.rate_limiter;
    config.site_root = args.site_root;
    config.secure_cookies = args.secure_cookies;
    config.bootstrap_admin_password = args.bootstrap_admin_password;
    config.signing_key = args.signing_key;
    config.published_keys = global.published_keys();
    config.allow_stdio_upstreams = args.allow_stdio_upstreams;
    config.allow_private_upstreams = args.allow_private_upstreams;
    config.parked_expiry = std::time::Duration::from_secs(args.parked_expiry_seconds);
    config.header_read_timeout = std::time::Duration::from_secs(args.header_read_timeout_seconds);
    config.body_read_timeout = std::time::Duration::from_secs(args.body_read_timeout_seconds);
    config.tools_page_size = usize::try_from(args.tools_page_size)
        .unwrap_or(aperture_core::config::DEFAULT_TOOLS_PAGE_SIZE);
    config.idempotency_retention =
        std::time::Duration::from_secs(args.idempotency_retention_hours * 3_600);
    config.webhook_retry = args.webhook_retry_seconds;
    config.read_cache_bytes = usize::try_from(args.read_cache_mib)
        .unwrap_or(usize::MAX / (1024 * 1024))
        .saturating_mul(1024 * 1024);
    config.spend_gate = args.spend_gate;
    config.checkpoint_interval = std::time::Duration::from_secs(args.checkpoint_interval_seconds);
    config.checkpoint_dir = global.checkpoint_dir();
    config.log_origin_host = args.log_origin_host;
    config.public_checkpoints = args.public_checkpoints;
    config.metrics_token = match args.metrics_token.map(|t| t.trim().to_owned()) {
        Some(t) if t.is_empty() => None,
        Some(t) => {
            anyhow::ensure!(
                t.len() >= 16,
                "APERTURE_METRICS_TOKEN must be at least 16 characters (it guards every tenant's metrics)"
            );
            Some(t)
        }
        None => None,
    };
    if let Some(url) = &args.public_url {
        anyhow::ensure!(
            aperture_core::config::origin_of(url).is_some(),
            "APERTURE_PUBLIC_URL must be an http(s) URL, such as https://gateway.example"
        );
    }
    config.public_url = args.public_url;
    config.allowed_origins = args
        .allowed_origins
        .iter()
        .map(|o| o.trim())
        .filter(|o| !o.is_empty())
        .map(|o| {
            aperture_core::config::origin_of(o).ok_or_else(|| {
                anyhow::anyhow!("APERTURE_ALLOWED_ORIGINS: {o:?} is not an http(s) origin")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    config.secrets_key = global.secrets_key.clone();
    config.trusted_proxies = args
        .trusted_proxies
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .map(|p| {
            crate::auth::client::Cidr::parse(p).ok_or_else(|| {
                anyhow::anyhow!("APERTURE_TRUSTED_PROXIES: {p:?} is not an address or a CIDR range")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    config.model = args
        .model_base_url
        .map(|base_url| aperture_core::config::ModelConfig {
            base_url,
            api_key: args.model_api_key,
            model: args.model.unwrap_or_else(|| "default".into()),
            timeout: std::time::Duration::from_secs(args.model_timeout_seconds),
        });
    let app = Application::build(config).await?;
    if *app.bootstrap() == Bootstrap::NeedsAdmin {
        println!(
            "No user exists yet. Create the first admin with\n  \
             aperture admin create-user --tenant default --username admin --scope agent_tool_exposure:admin\n\
             or restart with APERTURE_BOOTSTRAP_ADMIN_PASSWORD set."
        );
    }
    println!("Aperture listening on http://127.0.0.1:{}", app.port());
    app.run_until_stopped().await
}

/// `aperture policy apply`: the same validation and storage as `PUT /policies/{id}`, by the
/// operator (journaled as `operator`).
async fn policy_apply(
    global: &GlobalArgs,
    file: &str,
    tenant: &str,
    dry_run: bool,
    activate: Option<String>,
) -> anyhow::Result<()> {
    let text = read_input(file)?;
    let document: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{file} is not JSON"))?;
    let Some(id) = document
        .get("name")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
    else {
        anyhow::bail!("name: required (the policy id the document is stored under)");
    };
    if dry_run {
        return match aperture_core::policies::check(&id, document, &global.capabilities()) {
            Ok(_) => {
                println!("{id}: valid");
                Ok(())
            }
            Err(errors) => {
                for e in &errors {
                    eprintln!("{}: {}", e.path, e.message);
                }
                anyhow::bail!("{id}: {} problem(s)", errors.len())
            }
        };
    }
    let (store, journal) = operator_store(global, tenant).await?;
    let operator = crate::auth::Principal {
        tenant_id: tenant.to_owned(),
        actor_id: "operator".to_owned(),
        scopes: engine::scope::ScopeSet::parse([engine::scope::ADMIN])
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        kind: crate::auth::principal::PrincipalKind::Operator,
        read_at: None,
        environments: vec![engine::environment::ANY_ENVIRONMENT.to_owned()],
    };
    let fail = |e: aperture_core::error::ServiceError| {
        let e = e.into_app_error();
        let fields = e
            .details
            .map(|d| {
                d.fields
                    .iter()
                    .map(|f| format!("\n  {}: {}", f.path, f.message))
                    .collect::<String>()
            })
            .unwrap_or_default();
        anyhow::anyhow!("{}{fields}", e.message)
    };
    let saved = aperture_core::policies::put(
        &store,
        &journal,
        &operator,
        &id,
        document,
        &global.capabilities(),
    )
    .await
    .map_err(fail)?;
    println!("{id}: version {} stored", saved.version);
    if let Some(environment) = activate {
        aperture_core::policies::activate(
            &store,
            &journal,
            &operator,
            &id,
            &aperture_types::dto::ActivateRequest {
                environment: Some(environment.clone()),
            },
        )
        .await
        .map_err(fail)?;
        println!("{id}: active in {environment}");
    }
    Ok(())
}

/// Connects, migrates, makes sure the tenant exists and opens the journal (operator commands
/// are journaled like any other change).
async fn operator_store(global: &GlobalArgs, tenant: &str) -> anyhow::Result<(Store, Journal)> {
    anyhow::ensure!(
        engine::environment::is_name(tenant),
        "tenant ids are 1–64 characters of a-z, 0-9, _ and -"
    );
    let store = global.store().await?;
    store.migrate().await?;
    tenants::ensure(&store, tenant)
        .await
        .map_err(|e| anyhow::anyhow!(e.into_app_error()))?;
    let journal = global.journal(&store).await?;
    Ok((store, journal))
}

fn read_password(from_stdin: bool) -> anyhow::Result<String> {
    if from_stdin {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the password from stdin")?;
        Ok(text.trim_end_matches(['\r', '\n']).to_owned())
    } else {
        let first = rpassword::prompt_password("Password: ").context("reading the password")?;
        let second = rpassword::prompt_password("Repeat: ").context("reading the password")?;
        anyhow::ensure!(first == second, "the passwords differ");
        Ok(first)
    }
}

/// The text of `file`, or of standard input for `-`.
fn read_input(file: &str) -> anyhow::Result<String> {
    if file == "-" {
        let mut t = String::new();
        std::io::stdin().read_to_string(&mut t)?;
        Ok(t)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {file}"))
    }
}

/// A JWKS document (`{"keys": [...]}`) from a file, every key usable.
fn read_jwks(path: &std::path::Path) -> anyhow::Result<engine::receipt::JwkSet> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_jwks(&text).with_context(|| format!("reading keys from {}", path.display()))
}

fn parse_jwks(text: &str) -> anyhow::Result<engine::receipt::JwkSet> {
    let set: engine::receipt::JwkSet =
        serde_json::from_str(text).context("not a JWKS document ({\"keys\": [...]})")?;
    for key in &set.keys {
        engine::receipt::verifying_key_from_jwk(key)
            .map_err(|e| anyhow::anyhow!("key {}: {e}", key.kid))?;
    }
    Ok(set)
}

/// A JWKS document from a file or an `http(s)://` URL.
async fn load_jwks(source: &str) -> anyhow::Result<engine::receipt::JwkSet> {
    if !(source.starts_with("https://") || source.starts_with("http://")) {
        return read_jwks(std::path::Path::new(source));
    }
    let tls = aperture_core::upstream::tls_config(source.starts_with("https:"))?;
    let client = upstream_reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(std::time::Duration::from_secs(30))
        .build()?;
    let response = client
        .get(source)
        .send()
        .await
        .with_context(|| format!("fetching {source}"))?;
    anyhow::ensure!(
        response.status().is_success(),
        "fetching {source}: {}",
        response.status()
    );
    let text = response.text().await?;
    parse_jwks(&text).with_context(|| format!("reading keys from {source}"))
}

/// The keys of the database that are not among `trusted` (same id and key), by id.
fn untrusted(stored: &engine::receipt::JwkSet, trusted: &engine::receipt::JwkSet) -> Vec<String> {
    stored
        .keys
        .iter()
        .filter(|k| !trusted.keys.iter().any(|t| t.kid == k.kid && t.x == k.x))
        .map(|k| k.kid.clone())
        .collect()
}

/// `aperture journal purge-disclosures`: retention for what callers never see.
async fn purge_disclosures(
    global: &GlobalArgs,
    older_than_days: u64,
    tenant: Option<&str>,
) -> anyhow::Result<()> {
    let store = global.store().await?;
    store.migrate().await?;
    let tenants = match tenant {
        Some(t) => vec![t.to_owned()],
        None => tenants::with_journal(&store)
            .await
            .map_err(|e| anyhow::anyhow!(e.into_app_error()))?,
    };
    let journal = global.journal(&store).await?;
    let days = i64::try_from(older_than_days).unwrap_or(36_500);
    let cutoff = clock::now_ms() - days * 86_400_000;
    for tenant in tenants {
        let purged = aperture_core::journal::purge_disclosures(
            &store,
            &journal,
            &tenant,
            &aperture_core::journal::Author::operator(),
            cutoff,
        )
        .await?;
        println!(
            "tenant {tenant}: removed the disclosures of {purged} records issued before {}",
            clock::rfc3339(cutoff)
        );
    }
    Ok(())
}

/// `--witness` keys and `--quorum` (default: all of them).
fn witness_keys(
    witnesses: &[String],
    quorum: Option<usize>,
) -> anyhow::Result<(Vec<engine::note::VerifierKey>, usize)> {
    let witnesses = witnesses
        .iter()
        .map(|w| {
            let key =
                engine::note::VerifierKey::parse(w).with_context(|| format!("--witness {w}"))?;
            anyhow::ensure!(
                key.kind == engine::note::COSIGNATURE_V1,
                "--witness {w}: not a cosigner key (signature type 0x04)"
            );
            Ok(key)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let quorum = quorum.unwrap_or(witnesses.len());
    anyhow::ensure!(
        quorum <= witnesses.len(),
        "--quorum {quorum} is more than the {} witnesses given",
        witnesses.len()
    );
    Ok((witnesses, quorum))
}

/// `aperture evidence verify`: offline, nothing but the file (and pinned keys).
fn evidence_verify(
    file: &str,
    trusted_keys: Option<&std::path::Path>,
    witnesses: &[String],
    quorum: Option<usize>,
) -> anyhow::Result<()> {
    let text = read_input(file)?;
    let (witnesses, quorum) = witness_keys(witnesses, quorum)?;
    let trusted = trusted_keys.map(read_jwks).transpose()?;
    if let Some(t) = &trusted {
        let bundle: serde_json::Value =
            serde_json::from_str(&text).context("the bundle is not JSON")?;
        let stored: engine::receipt::JwkSet =
            serde_json::from_value(bundle.get("keys").cloned().unwrap_or_default())
                .unwrap_or_default();
        for kid in untrusted(&stored, t) {
            println!("key {kid} is in the bundle but not among the trusted keys");
        }
    }
    let verified = engine::evidence::verify(&text, trusted.as_ref(), &witnesses, quorum)
        .map_err(|e| anyhow::anyhow!("the evidence does not verify: {e}"))?;
    println!("{verified}");
    Ok(())
}

/// The trees seen outside the database that `journal verify` must find held: each witness
/// state file's, and each `--expect <tenant>:<size>`.
fn expectations(
    states: &[PathBuf],
    expect: &[String],
) -> anyhow::Result<Vec<aperture_core::journal::audit::Expected>> {
    let mut expected = Vec::new();
    for path in states {
        let state = crate::witness::State::read(path)
            .with_context(|| format!("--witness-state {}", path.display()))?;
        let tenant = state.tenant().with_context(|| {
            format!(
                "--witness-state {}: the origin {} names no tenant (`<host>/aperture/<tenant>`)",
                path.display(),
                state.origin
            )
        })?;
        anyhow::ensure!(
            state.tree_size > 0,
            "--witness-state {}: the witness has seen no records",
            path.display()
        );
        expected.push(aperture_core::journal::audit::Expected {
            tenant_id: tenant.to_owned(),
            size: state.tree_size,
            root: Some(
                state
                    .root_hash()
                    .with_context(|| format!("--witness-state {}: root", path.display()))?,
            ),
            origin: Some(state.origin.clone()),
            from: format!(
                "the witness state {} ({} records)",
                path.display(),
                state.tree_size
            ),
        });
    }
    for item in expect {
        let parsed = item
            .rsplit_once(':')
            .and_then(|(tenant, size)| Some((tenant, size.parse::<u64>().ok()?)))
            .filter(|(tenant, size)| engine::environment::is_name(tenant) && *size > 0);
        let Some((tenant, size)) = parsed else {
            anyhow::bail!("--expect {item}: not <tenant>:<size> with a size of at least 1");
        };
        expected.push(aperture_core::journal::audit::Expected {
            tenant_id: tenant.to_owned(),
            size,
            root: None,
            origin: None,
            from: format!("--expect {item}"),
        });
    }
    Ok(expected)
}

async fn journal_verify(
    global: &GlobalArgs,
    trusted_keys: Option<&std::path::Path>,
    witnesses: &[String],
    quorum: Option<usize>,
    expected: &[aperture_core::journal::audit::Expected],
) -> anyhow::Result<()> {
    let (witnesses, quorum) = witness_keys(witnesses, quorum)?;
    let store = global.store().await?;
    store.migrate().await?;
    let stored = aperture_core::keys::published(&store).await?;
    let mut ok = true;
    let keys = match trusted_keys {
        Some(path) => {
            let trusted = read_jwks(path)?;
            println!(
                "trusting the {} keys of {} only",
                trusted.keys.len(),
                path.display()
            );
            for kid in untrusted(&stored, &trusted) {
                ok = false;
                println!("key {kid} is in the database but not among the trusted keys");
            }
            trusted
        }
        None => {
            println!(
                "trusted the {} keys stored in the database (whoever can write the database can \
                 add one: pin them with --trusted-keys)",
                stored.keys.len()
            );
            stored
        }
    };
    let reports = aperture_core::journal::verify_with(&store, &keys).await?;
    for r in &reports {
        match &r.error {
            None => println!("tenant {}: verified {} records", r.tenant_id, r.verified),
            Some(e) => {
                ok = false;
                println!(
                    "tenant {}: verified up to record {}; record {}: {}",
                    r.tenant_id, r.verified, e.seq, e.problem
                );
            }
        }
    }
    if reports.is_empty() {
        println!("the journal is empty");
    }
    let sink = global.checkpoint_dir();
    for r in aperture_core::journal::audit::verify_checkpoints(
        &store,
        &keys,
        Some(&sink),
        &witnesses,
        quorum,
        expected,
    )
    .await?
    {
        if r.matched > 0 {
            println!(
                "tenant {}: {} signed checkpoints (database and {}) match the journal, the \
                 largest of {} records",
                r.tenant_id,
                r.matched,
                sink.display(),
                r.largest
            );
        }
        for held in &r.held {
            println!("tenant {}: {held}", r.tenant_id);
        }
        for problem in &r.problems {
            ok = false;
            println!("tenant {}: {problem}", r.tenant_id);
        }
    }
    anyhow::ensure!(ok, "the journal does not verify");
    Ok(())
}

/// The local database's published keys, if the database exists (never creates one).
async fn local_keys(global: &GlobalArgs) -> anyhow::Result<engine::receipt::JwkSet> {
    let url = global.database_url();
    if let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let path = rest.split('?').next().unwrap_or_default();
        anyhow::ensure!(
            std::path::Path::new(path).is_file(),
            "no database at {path}: give the keys with --keys <jwks file or URL> or \
             --trusted-keys <jwks file>"
        );
    }
    let store = global.store().await?;
    let keys = aperture_core::keys::published(&store).await?;
    store.close().await;
    Ok(keys)
}

async fn receipt_verify(
    global: &GlobalArgs,
    file: &str,
    keys: Option<&str>,
    trusted_keys: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let text = read_input(file)?;
    // A member named twice is refused: another reader could see the other value.
    let value = engine::canonical::parse_strict(&text).context("the receipt is not JSON")?;
    // A bare receipt, `{"receipt": …}`, or a tool result carrying `_meta.receipt`.
    let receipt = value
        .pointer("/_meta/receipt")
        .or_else(|| value.get("receipt"))
        .unwrap_or(&value);
    let (keys, source) = match (keys, trusted_keys) {
        (Some(source), _) => (load_jwks(source).await?, format!("the keys of {source}")),
        (None, Some(path)) => (
            read_jwks(path)?,
            format!("the trusted keys of {}", path.display()),
        ),
        (None, None) => (
            local_keys(global).await?,
            "the keys stored in the local database".to_owned(),
        ),
    };
    engine::receipt::verify_receipt_json(receipt, &keys.keys)
        .map_err(|e| anyhow::anyhow!("the receipt does not verify: {e}"))?;
    println!(
        "the receipt verifies (key {}, checked against {source})",
        receipt
            .get("key_id")
            .and_then(|k| k.as_str())
            .unwrap_or("?")
    );
    Ok(())
}

/// `NAME<sep>VALUE` options (`--env`, `--header`) as a map.
fn pairs(
    items: Vec<String>,
    sep: char,
    what: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    items
        .into_iter()
        .map(|i| {
            i.split_once(sep)
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| anyhow::anyhow!("{what} must look like NAME{sep}VALUE"))
        })
        .collect()
}

/// `aperture upstream credentials`: the operator's way, which may also set a stdio upstream's
/// environment.
async fn upstream_credentials(
    global: &GlobalArgs,
    tenant: &str,
    name: &str,
    env: Vec<String>,
    headers: Vec<String>,
) -> anyhow::Result<()> {
    let (store, journal) = operator_store(global, tenant).await?;
    let row = aperture_core::upstream::list_unchecked(&store, tenant)
        .await
        .map_err(|e| anyhow::anyhow!(e.into_app_error()))?
        .into_iter()
        .find(|u| u.name == name)
        .ok_or_else(|| anyhow::anyhow!("tenant {tenant} has no upstream called {name}"))?;
    let request = if row.transport == "stdio" {
        anyhow::ensure!(
            headers.is_empty(),
            "{name} is a stdio upstream: give --env, not --header"
        );
        aperture_core::upstream::CredentialsRequest {
            headers: None,
            env: Some(pairs(env, '=', "--env")?),
        }
    } else {
        anyhow::ensure!(
            env.is_empty(),
            "{name} is an HTTP upstream: give --header, not --env"
        );
        aperture_core::upstream::CredentialsRequest {
            headers: Some(pairs(headers, ':', "--header")?),
            env: None,
        }
    };
    let upstreams = aperture_core::upstream::Upstreams::new(true, false, global.secrets()?);
    let view = upstreams
        .set_credentials_unchecked(
            &store,
            &journal,
            tenant,
            &aperture_core::journal::Author::operator(),
            &row.id,
            &request,
        )
        .await
        .map_err(|e| anyhow::anyhow!(e.into_app_error()))?;
    println!(
        "replaced the credentials of upstream {} ({}); grants made before are target_drift until listed again",
        view.name, view.id
    );
    Ok(())
}

#[expect(
    clippy::too_many_arguments,
    reason = "one parameter per command-line option"
)]
async fn upstream_add(
    global: &GlobalArgs,
    tenant: &str,
    name: String,
    url: Option<String>,
    stdio: bool,
    env: Vec<String>,
    headers: Vec<String>,
    command: Vec<String>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !stdio || headers.is_empty(),
        "--header is for --url upstreams; a --stdio upstream takes its credentials in --env"
    );
    anyhow::ensure!(
        stdio || env.is_empty(),
        "--env is for --stdio upstreams; a --url upstream takes its credentials in --header"
    );
    let request = if stdio {
        aperture_types::dto::RegisterUpstreamRequest {
            name,
            transport: "stdio".into(),
            command: Some(command),
            env: Some(pairs(env, '=', "--env")?),
            url: None,
            headers: None,
        }
    } else {
        let url =
            url.ok_or_else(|| anyhow::anyhow!("give --url <endpoint> or --stdio -- <command…>"))?;
        aperture_types::dto::RegisterUpstreamRequest {
            name,
            transport: "streamable_http".into(),
            command: None,
            env: None,
            url: Some(url),
            headers: Some(pairs(headers, ':', "--header")?),
        }
    };
    let (store, journal) = operator_store(global, tenant).await?;
    // The same spellings as `serve --allow-private-upstreams` takes (CONTRACT §14).
    let allow_private = std::env::var("APERTURE_ALLOW_PRIVATE_UPSTREAMS").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on" | "y"
        )
    });
    let upstreams = aperture_core::upstream::Upstreams::new(true, allow_private, global.secrets()?);
    let result = upstreams
        .register_unchecked(
            &store,
            &journal,
            tenant,
            &aperture_core::journal::Author::operator(),
            &request,
        )
        .await;
    upstreams.close_all().await;
    let (view, report) = result.map_err(|e| anyhow::anyhow!(e.into_app_error()))?;
    println!(
        "registered upstream {} ({}) with {} tools",
        view.name, view.id, report.tools
    );
    for s in &report.skipped {
        println!("  skipped {:?}: {}", s.raw_name, s.reason);
    }
    println!(
        "tools arrive with risk `unknown`, hidden by the default policy until described (PUT /tools/{{name}})"
    );
    Ok(())
}
