//! Persistence with sqlx: SQLite by default, PostgreSQL when several nodes share state.
//!
//! Both backends run the same SQL through sqlx's `Any` driver (numbered `$n` parameters, which
//! SQLite understands too; timestamps as epoch milliseconds; JSON as text). Where a backend needs
//! its own statement (`FOR UPDATE SKIP LOCKED`), [`Store::kind`] tells which one is connected.
//! SQL lives in small named functions per domain, in the submodules.

pub mod agents;
pub mod cache;
pub mod catalog;
pub mod checkpoints;
pub mod client_answers;
pub mod exposure;
pub mod idempotency;
pub mod invocations;
pub mod items;
pub mod journal;
pub mod keys;
pub mod mcp_sessions;
pub mod policies;
pub mod rate_buckets;
pub mod sessions;
pub mod settings;
pub mod subscriptions;
pub mod tenants;
pub mod tokens;
pub mod upstreams;
pub mod users;
pub mod webhooks;

pub use crate::clock::{now_ms, parse_rfc3339, rfc3339};

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    /// Embedded, one node.
    Sqlite,
    /// Shared by several nodes.
    Postgres,
}

/// The connection pool and the backend it reaches.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    kind: DbKind,
    /// How durable a SQLite commit is (for connections made outside the pool).
    durability: Durability,
    /// SQLite: the database's file (none for an in-memory database), which the journal's
    /// writer also opens itself ([`journal::Direct`]).
    sqlite_file: Option<PathBuf>,
    /// What calls read, while the store's `read_generation` says it is current.
    cache: std::sync::Arc<cache::ReadCache>,
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

pub use crate::config::Durability;

/// What every SQLite connection runs first.
fn sqlite_pragmas(durability: Durability) -> &'static str {
    match durability {
        Durability::Crash => {
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
             PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON;"
        }
        Durability::PowerLoss => {
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
             PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON;"
        }
    }
}

/// WAL pages (of 4 KiB) after which the journal writer's connection checkpoints by itself
/// (SQLite's default is 1,000).
pub const WRITER_AUTOCHECKPOINT: u32 = 20_000;

/// A passive checkpoint of a SQLite database's WAL on `conn`: copies committed pages into the
/// database file without waiting for or blocking writers or readers.
pub async fn checkpoint(conn: &mut sqlx::AnyConnection) -> Result<(), sqlx::Error> {
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").await?;
    Ok(())
}

impl Store {
    /// Connects to `url` (`sqlite://path` or `postgres://…`). A SQLite file and its folder are
    /// created when missing; every SQLite connection runs in WAL mode, and a committed write
    /// survives a crash of the process ([`Durability::Crash`]).
    #[tracing::instrument(skip_all)]
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        Self::connect_with(url, Durability::default()).await
    }

    /// [`Store::connect`] with the given durability of SQLite commits.
    #[tracing::instrument(skip_all)]
    pub async fn connect_with(url: &str, durability: Durability) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let kind = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            DbKind::Postgres
        } else if url.starts_with("sqlite:") {
            DbKind::Sqlite
        } else {
            anyhow::bail!("unsupported database URL (use sqlite://… or postgres://…)");
        };
        let url = match kind {
            DbKind::Sqlite => prepare_sqlite_url(url)?,
            DbKind::Postgres => url.to_owned(),
        };
        let sqlite_file = sqlite_file(kind, &url)?;
        let options = AnyConnectOptions::from_str(&url).context("parsing the database URL")?;
        let pool = AnyPoolOptions::new()
            .max_connections(match kind {
                DbKind::Sqlite => 8,
                DbKind::Postgres => 16,
            })
            .acquire_timeout(Duration::from_secs(10))
            // A pooled PostgreSQL connection is pinged before it is handed out (the server may
            // have restarted). A SQLite connection is a handle on a file in this process:
            // nothing to ping, and the ping would be one more hand-off to its worker thread
            // before every statement.
            .test_before_acquire(kind == DbKind::Postgres)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if kind == DbKind::Sqlite {
                        conn.execute(sqlite_pragmas(durability)).await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .context("connecting to the database")?;
        Ok(Self {
            pool,
            kind,
            durability,
            sqlite_file,
            cache: std::sync::Arc::default(),
        })
    }

    /// SQLite: the database's file, unless the database is in memory.
    pub fn sqlite_file(&self) -> Option<&Path> {
        self.sqlite_file.as_deref()
    }

    /// How durable a committed SQLite write is.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// A transaction that will write: on SQLite it takes the write lock at once (`BEGIN
    /// IMMEDIATE`), so a read at its start cannot be invalidated by another writer before its
    /// first write (which SQLite would report as busy at once, not after the busy timeout).
    pub async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.kind {
            DbKind::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            DbKind::Postgres => self.pool.begin().await,
        }
    }

    /// A connection of its own, outside the pool, set up as the pool's are: for a task that
    /// writes all the time (the journal's writer), so that SQLite's page cache stays warm
    /// between its transactions instead of being read again by whichever pooled connection
    /// comes next.
    pub async fn connect_one(&self) -> Result<sqlx::AnyConnection, sqlx::Error> {
        use sqlx::ConnectOptions as _;
        let mut conn = self.pool.connect_options().connect().await?;
        if self.kind == DbKind::Sqlite {
            conn.execute(sqlite_pragmas(self.durability)).await?;
        }
        Ok(conn)
    }

    /// [`Store::connect_one`] for the journal's writer: on SQLite it checkpoints the WAL by
    /// itself only past [`WRITER_AUTOCHECKPOINT`] pages, as the journal checkpoints in the
    /// background ([`checkpoint`]).
    pub async fn connect_writer(&self) -> Result<sqlx::AnyConnection, sqlx::Error> {
        let mut conn = self.connect_one().await?;
        if self.kind == DbKind::Sqlite {
            let pragma = format!("PRAGMA wal_autocheckpoint = {WRITER_AUTOCHECKPOINT}");
            conn.execute(pragma.as_str()).await?;
        }
        Ok(conn)
    }

    /// [`Store::begin_write`] on a connection of its own ([`Store::connect_one`]).
    pub async fn begin_write_on<'c>(
        &self,
        conn: &'c mut sqlx::AnyConnection,
    ) -> Result<sqlx::Transaction<'c, sqlx::Any>, sqlx::Error> {
        use sqlx::Connection as _;
        match self.kind {
            DbKind::Sqlite => conn.begin_with("BEGIN IMMEDIATE").await,
            DbKind::Postgres => conn.begin().await,
        }
    }

    /// Applies the migrations of this backend that have not run yet.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        let migrator = match self.kind {
            DbKind::Sqlite => &SQLITE_MIGRATIONS,
            DbKind::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator
            .run(&self.pool)
            .await
            .context("running database migrations")?;
        Ok(())
    }

    /// The versions of this build's migrations that the database has not applied (successfully):
    /// empty when its schema is this build's.
    pub async fn pending_migrations(&self) -> Result<Vec<i64>, sqlx::Error> {
        let migrator = match self.kind {
            DbKind::Sqlite => &SQLITE_MIGRATIONS,
            DbKind::Postgres => &POSTGRES_MIGRATIONS,
        };
        let applied: Vec<(i64,)> =
            sqlx::query_as("SELECT version FROM _sqlx_migrations WHERE success = TRUE")
                .fetch_all(&self.pool)
                .await?;
        Ok(migrator
            .iter()
            .map(|m| m.version)
            .filter(|v| !applied.iter().any(|(a,)| a == v))
            .collect())
    }

    /// The pool, for the domain modules.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The read cache of calls (see [`cache`]).
    pub fn cache(&self) -> &cache::ReadCache {
        &self.cache
    }

    /// Which backend is connected.
    pub fn kind(&self) -> DbKind {
        self.kind
    }

    /// Closes every connection (tests drop their databases afterwards).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Creates `dir` (and missing parents) readable by the owner only (0700 on Unix): the data
/// directory holds the database, key files and spools.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Creates the SQLite database file empty and owner-only (0600) before SQLite does (SQLite
/// gives its `-wal` and `-shm` files the database file's mode); an existing one that others may
/// read is made owner-only, with its `-wal` and `-shm`.
fn private_database_file(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        if !path.exists() {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .or_else(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        std::fs::File::open(path)
                    } else {
                        Err(e)
                    }
                })
                .with_context(|| format!("creating {}", path.display()))?;
        }
        for suffix in ["", "-wal", "-shm"] {
            let file = PathBuf::from(format!("{}{suffix}", path.display()));
            if let Ok(meta) = std::fs::metadata(&file)
                && meta.permissions().mode() & 0o077 != 0
            {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                    .with_context(|| format!("making {} owner-only", file.display()))?;
                tracing::info!(file = %file.display(), "made the database file owner-only (0600)");
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Adds `mode=rwc` (create when missing) and creates the parent folder of the file.
fn prepare_sqlite_url(url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or_default();
    let path = rest.split('?').next().unwrap_or_default();
    if !path.is_empty()
        && path != ":memory:"
        && let Some(parent) = Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        create_private_dir(parent).with_context(|| format!("creating {}", parent.display()))?;
        private_database_file(Path::new(path))?;
    }
    Ok(if url.contains("mode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    })
}

/// The file of a SQLite database `url` (as [`prepare_sqlite_url`] left it), as sqlx opens it,
/// for another connection to open the same way; none for PostgreSQL, an in-memory database,
/// and a URL with any option but `mode=rw` or `mode=rwc` (another VFS, read-only, immutable: a
/// connection opened by file name alone would not open it as sqlx does).
fn sqlite_file(kind: DbKind, url: &str) -> anyhow::Result<Option<PathBuf>> {
    if kind != DbKind::Sqlite {
        return Ok(None);
    }
    let plain = url
        .split_once('?')
        .is_none_or(|(_, query)| query.split('&').all(|o| o == "mode=rw" || o == "mode=rwc"));
    let options =
        sqlx::sqlite::SqliteConnectOptions::from_str(url).context("parsing the database URL")?;
    let file = options.get_filename();
    // sqlx names an in-memory database `file:sqlx-in-memory-…`.
    let in_memory = file.as_os_str() == ":memory:" || file.to_string_lossy().starts_with("file:");
    Ok((plain && !in_memory).then(|| file.to_owned()))
}

/// A JSON array of strings as stored in a text column.
fn decode_string_list(text: &str) -> Result<Vec<String>, sqlx::Error> {
    serde_json::from_str(text).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        let ms = 1_796_000_000_123;
        let text = rfc3339(ms);
        assert!(text.ends_with('Z'), "{text}");
        assert_eq!(parse_rfc3339(&text), Some(ms));
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    /// The journal's direct connection opens the store's SQLite file by name only where sqlx
    /// opens it as a plain file, read-write.
    #[test]
    fn the_sqlite_file_is_named_only_for_a_plain_file_url() {
        let file = |url: &str| sqlite_file(DbKind::Sqlite, url).unwrap();
        assert_eq!(
            file("sqlite:///var/lib/aperture/a.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/aperture/a.db"))
        );
        assert_eq!(file("sqlite://a.db?mode=rw"), Some(PathBuf::from("a.db")));
        assert_eq!(file("sqlite:///x/a.db?mode=rwc&vfs=unix-none"), None);
        assert_eq!(file("sqlite:///x/a.db?mode=ro"), None);
        assert_eq!(file("sqlite:///x/a.db?immutable=true&mode=rwc"), None);
        assert_eq!(file("sqlite::memory:?mode=rwc"), None);
        assert_eq!(file("sqlite:%3Amemory%3A?mode=rwc"), None);
        assert_eq!(file("sqlite://shared?mode=memory"), None);
        assert_eq!(
            sqlite_file(DbKind::Postgres, "postgres://h/db").unwrap(),
            None
        );
    }

    #[test]
    fn sqlite_urls_create_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/nested/a.db", dir.path().display());
        let prepared = prepare_sqlite_url(&url).unwrap();
        assert!(prepared.ends_with("?mode=rwc"));
        assert!(dir.path().join("nested").is_dir());
        assert_eq!(
            prepare_sqlite_url("sqlite::memory:").unwrap(),
            "sqlite::memory:?mode=rwc"
        );
    }
}
