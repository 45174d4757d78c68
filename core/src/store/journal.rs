//! Journal records: append at the head of a tenant's chain, read back in order or filtered.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{DbKind, Store};

/// The head of a tenant's chain: last `seq` and its record hash.
pub async fn head(store: &Store, tenant_id: &str) -> Result<Option<(i64, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT seq, record_hash FROM journal WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1",
    )
    .bind(tenant_id)
    .fetch_optional(store.pool())
    .await
}

/// [`head`] inside a transaction.
pub async fn head_in(
    conn: &mut sqlx::AnyConnection,
    tenant_id: &str,
) -> Result<Option<(i64, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT seq, record_hash FROM journal WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1",
    )
    .bind(tenant_id)
    .fetch_optional(conn)
    .await
}

/// A record to append.
#[derive(Debug)]
pub struct NewRecord<'a> {
    /// Tenant.
    pub tenant_id: &'a str,
    /// Position.
    pub seq: i64,
    /// `rcp_…`
    pub receipt_id: &'a str,
    /// Receipt kind.
    pub kind: &'a str,
    /// Receipt decision.
    pub decision: &'a str,
    /// Reason code.
    pub reason: &'a str,
    /// Tool, when there is one.
    pub tool: Option<&'a str>,
    /// Session, when there is one.
    pub session_id: Option<&'a str>,
    /// Actor.
    pub actor_id: &'a str,
    /// Epoch ms.
    pub issued_at: i64,
    /// Signed receipt JSON.
    pub receipt: &'a str,
    /// Disclosures JSON.
    pub disclosures: &'a str,
    /// Hash of the signed receipt.
    pub record_hash: &'a str,
}

/// Takes the advisory lock of each of `tenants`' chains (PostgreSQL), held until the
/// transaction on `conn` ends: writers on several nodes take turns at a chain's head instead of
/// racing for its positions ([`insert_batch`] takes the same locks). `tenants` sorted by their
/// bytes, so that every writer takes them in one order (the statement's `COLLATE "C"`).
pub async fn lock_heads(
    conn: &mut sqlx::AnyConnection,
    tenants: &[&str],
) -> Result<(), sqlx::Error> {
    for tenant in tenants {
        sqlx::query(&format!("SELECT count({LOCK}) FROM (SELECT $1 AS t) AS s"))
            .bind(*tenant)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The store's read generation ([`super::cache`]) as `conn` sees it. Inside a write
/// transaction the counter cannot move before it commits: on PostgreSQL the row is
/// share-locked, so a change's trigger waits for the commit (and a change already in flight is
/// waited for and read); SQLite's `BEGIN IMMEDIATE` holds the only write lock already.
pub async fn read_generation(
    conn: &mut sqlx::AnyConnection,
    kind: DbKind,
) -> Result<i64, sqlx::Error> {
    let (generation,): (i64,) = sqlx::query_as(match kind {
        DbKind::Sqlite => "SELECT generation FROM read_generation WHERE id = 1",
        DbKind::Postgres => "SELECT generation FROM read_generation WHERE id = 1 FOR SHARE",
    })
    .fetch_one(conn)
    .await?;
    Ok(generation)
}

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Binds `r`'s columns in [`COLUMNS`] order.
fn bind_record<'q>(query: AnyQuery<'q>, r: &NewRecord<'q>) -> AnyQuery<'q> {
    query
        .bind(r.tenant_id)
        .bind(r.seq)
        .bind(r.receipt_id)
        .bind(r.kind)
        .bind(r.decision)
        .bind(r.reason)
        .bind(r.tool)
        .bind(r.session_id)
        .bind(r.actor_id)
        .bind(r.issued_at)
        .bind(r.receipt)
        .bind(r.disclosures)
        .bind(r.record_hash)
}

/// Most records [`insert_batch`] writes in its one statement.
pub const ONE_STATEMENT: usize = 64;

/// Row counts of [`insert_batch`]'s statements: a batch takes the smallest that holds it and
/// binds its remaining rows as NULL (skipped by the statement), so that a connection caches
/// seven statements, not one per batch length.
const PADDED: [usize; 7] = [1, 2, 4, 8, 16, 32, ONE_STATEMENT];

/// What [`insert_batch`] did: all of the rows or none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchInsert {
    /// Every row is in and committed.
    Inserted,
    /// Nothing was inserted: the store's read generation is not the one given.
    GenerationMoved,
    /// Nothing was inserted: a position (or receipt id) is taken; another writer appended
    /// first.
    PositionTaken,
}

/// Inserts up to [`ONE_STATEMENT`] `rows` in one statement outside any transaction — one
/// round trip to the database (for SQLite one hand-off to its connection's thread) instead of
/// `BEGIN`, the inserts and `COMMIT`. A statement is atomic by itself: a taken position fails
/// it as a whole, and with `generation` it inserts only if the store's read generation still
/// stands there (SQLite holds the write lock before the statement reads the counter; PostgreSQL
/// share-locks the counter's row until the statement commits, see [`read_generation`]).
/// More than [`ONE_STATEMENT`] rows is refused ([`sqlx::Error::Protocol`]) and nothing is
/// written.
pub async fn insert_batch(
    conn: &mut sqlx::AnyConnection,
    kind: DbKind,
    rows: &[NewRecord<'_>],
    generation: Option<i64>,
) -> Result<BatchInsert, sqlx::Error> {
    let Some(i) = PADDED.iter().position(|n| *n >= rows.len()) else {
        return Err(sqlx::Error::Protocol(format!(
            "{} journal rows in one statement (at most {ONE_STATEMENT})",
            rows.len()
        )));
    };
    if rows.is_empty() {
        return Ok(BatchInsert::Inserted);
    }
    let mut query = sqlx::query(&batch_sql(kind)[i]);
    for r in rows {
        query = bind_record(query, r);
    }
    for _ in rows.len()..PADDED[i] {
        query = bind_padding(query);
    }
    query = query.bind(generation).bind(generation);
    match query.execute(conn).await {
        Ok(done) if done.rows_affected() == u64::try_from(rows.len()).unwrap_or(u64::MAX) => {
            Ok(BatchInsert::Inserted)
        }
        // The condition held for every row or for none: no row means the generation moved.
        Ok(_) => Ok(BatchInsert::GenerationMoved),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(BatchInsert::PositionTaken),
        Err(e) => Err(e),
    }
}

/// The statement of [`insert_batch`] for `rows` rows: a `VALUES` list whose NULL rows are
/// padding, then the generation (twice: `NULL` when no record depends on it). On PostgreSQL
/// the statement first takes the advisory lock of each tenant's chain it writes ([`lock_heads`],
/// held until it commits), so that writers on several nodes take turns at a chain: a writer
/// whose heads another node has moved meanwhile finds its positions taken at once (the other's
/// rows are committed when it gets the lock) instead of racing it again and again.
fn insert_batch_sql(kind: DbKind, rows: usize) -> String {
    let mut values = String::from("VALUES ");
    push_placeholders(&mut values, kind, rows);
    let (first, second) = (rows * PER_ROW + 1, rows * PER_ROW + 2);
    match kind {
        DbKind::Sqlite => format!(
            "INSERT INTO journal ({COLUMNS}) SELECT * FROM ({values}) AS v \
             WHERE v.column1 IS NOT NULL AND (? IS NULL OR \
             (SELECT generation FROM read_generation WHERE id = 1) = ?)"
        ),
        // The locks are taken before any row is inserted (their one row is read before the
        // rows to insert are) and before the read generation's row is share-locked (its read
        // joins them too), in the order `lock_heads` takes them: byte order of the tenant ids.
        DbKind::Postgres => format!(
            "WITH v AS ({values}), \
             locked AS (SELECT count({LOCK}) AS n FROM \
             (SELECT DISTINCT column1 COLLATE \"C\" AS t FROM v \
             WHERE column1 IS NOT NULL ORDER BY t) AS s) \
             INSERT INTO journal ({COLUMNS}) SELECT v.* FROM locked, v \
             WHERE locked.n >= 0 AND v.column1 IS NOT NULL AND (${first}::BIGINT IS NULL OR \
             (SELECT g.generation FROM read_generation AS g, locked AS l \
             WHERE g.id = 1 AND l.n >= 0 FOR SHARE OF g) = ${second})"
        ),
    }
}

/// The advisory lock of the chain of tenant `s.t` ([`lock_heads`]). A fixed seed keeps these
/// keys apart from other users of advisory locks as far as a 64-bit hash does; a collision
/// merely serializes two chains.
const LOCK: &str = "pg_advisory_xact_lock(hashtextextended(s.t, 7470))";

fn bind_padding(query: AnyQuery<'_>) -> AnyQuery<'_> {
    query
        .bind(None::<&str>)
        .bind(None::<i64>)
        .bind(None::<&str>)
        .bind(None::<&str>)
        .bind(None::<&str>)
        .bind(None::<&str>)
        .bind(None::<&str>)
        .bind(None::<&str>)
        .bind(None::<&str>)
        .bind(None::<i64>)
        .bind(None::<&str>)
        .bind(None::<&str>)
        .bind(None::<&str>)
}

/// Columns of a journal row, in insert order.
const COLUMNS: &str = "tenant_id, seq, receipt_id, kind, decision, reason, tool, session_id, \
    actor_id, issued_at, receipt, disclosures, record_hash";
/// Parameters per row.
const PER_ROW: usize = 13;

/// `rows` parenthesized rows of [`PER_ROW`] parameters each. SQLite gets anonymous `?`
/// parameters: for numbered ones (`$1`, `?1`) sqlx asks SQLite each parameter's name when
/// binding, and SQLite finds a name by walking the statement's list of names — quadratic in
/// the parameters of a 64-row insert (832), which the profile showed as 2 % of all samples.
fn push_placeholders(sql: &mut String, kind: DbKind, rows: usize) {
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..PER_ROW {
            if column > 0 {
                sql.push_str(", ");
            }
            match kind {
                DbKind::Sqlite => sql.push('?'),
                DbKind::Postgres => sql.push_str(&format!("${}", row * PER_ROW + column + 1)),
            }
        }
        sql.push(')');
    }
}

/// SQLite: the journal's one-statement inserts ([`insert_batch`]) on a connection of their own
/// that runs them on the calling thread (rusqlite). sqlx runs every statement of a SQLite
/// connection on a thread of that connection's own and hands the answer back: two thread
/// wake-ups a statement, which on this project's 2-core machines cost ~70 µs when the threads
/// were idle — more than the insert itself (~40 µs), twice a call (`docs/benchmarks.md`).
///
/// The connection never waits for SQLite's write lock (its busy timeout is zero): a statement
/// that finds the lock taken (or fails otherwise) has written nothing, and the writer runs it
/// through sqlx instead, which waits as every connection of the store does. Everything but
/// these inserts goes through sqlx. Only with [`super::Durability::Crash`] (no sync at a
/// commit): a commit that syncs the WAL to disk would hold the calling thread for that long.
/// The connection checkpoints by itself only past [`super::WRITER_AUTOCHECKPOINT`] pages, as
/// the writer's sqlx connection does, which the background checkpoints keep it from reaching.
pub struct Direct {
    path: std::path::PathBuf,
    /// The connection: opened at the first insert, dropped after a failure and opened again
    /// [`Direct::RETRY_AFTER`] later. In a mutex so that the writer stays `Sync` (rusqlite's
    /// connection is not); never contended.
    conn: std::sync::Mutex<Option<rusqlite::Connection>>,
    /// When opening the connection or an insert last failed (not for a lock held elsewhere).
    failed_at: std::sync::Mutex<Option<std::time::Instant>>,
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct").field("path", &self.path).finish()
    }
}

impl Direct {
    /// How long after a failure inserts go through sqlx before the connection is opened again.
    const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

    /// For the store's SQLite file when its commits are not synced ([`Store::sqlite_file`]);
    /// none for PostgreSQL, an in-memory database or [`super::Durability::PowerLoss`].
    pub fn for_store(store: &Store) -> Option<Self> {
        if store.durability() != super::Durability::Crash {
            return None;
        }
        Some(Self {
            path: store.sqlite_file()?.to_owned(),
            conn: std::sync::Mutex::new(None),
            failed_at: std::sync::Mutex::new(None),
        })
    }

    /// [`insert_batch`] on this thread: `None` when it did not run to a decision (the write
    /// lock taken, the connection failing or not open): nothing was written, and the caller
    /// inserts through sqlx.
    pub fn insert_batch(
        &self,
        rows: &[NewRecord<'_>],
        generation: Option<i64>,
    ) -> Option<BatchInsert> {
        let i = PADDED.iter().position(|n| *n >= rows.len())?;
        if rows.is_empty() {
            return Some(BatchInsert::Inserted);
        }
        let mut slot = crate::sync::lock(&self.conn);
        if slot.is_none() {
            *slot = self.open();
        }
        let conn = slot.as_ref()?;
        match run_insert(
            conn,
            &batch_sql(DbKind::Sqlite)[i],
            rows,
            PADDED[i],
            generation,
        ) {
            Ok(done) => Some(done),
            Err(e) if is_busy(&e) => None,
            Err(e) => {
                // Nothing was written (the statement is atomic); sqlx runs it and reports
                // what it finds. The next inserts go through sqlx for a while.
                self.failed(&e, "inserting");
                *slot = None;
                None
            }
        }
    }

    fn open(&self) -> Option<rusqlite::Connection> {
        if crate::sync::lock(&self.failed_at).is_some_and(|at| at.elapsed() < Self::RETRY_AFTER) {
            return None;
        }
        match open_direct(&self.path) {
            Ok(conn) => Some(conn),
            Err(e) => {
                self.failed(&e, "opening");
                None
            }
        }
    }

    fn failed(&self, e: &rusqlite::Error, doing: &str) {
        tracing::warn!(
            error = %e,
            path = %self.path.display(),
            "journal: {doing} on the writer's direct connection failed; through sqlx for {} s",
            Self::RETRY_AFTER.as_secs()
        );
        *crate::sync::lock(&self.failed_at) = Some(std::time::Instant::now());
    }
}

/// A connection to the journal's (existing) database file, set up as the store's are with
/// [`super::Durability::Crash`] but with no busy timeout.
fn open_direct(path: &std::path::Path) -> rusqlite::Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::ZERO)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::InvalidParameterName(format!(
            "journal_mode is {mode}, not wal"
        )));
    }
    conn.execute_batch(&format!(
        "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = {};",
        super::WRITER_AUTOCHECKPOINT
    ))?;
    conn.set_prepared_statement_cache_capacity(PADDED.len());
    Ok(conn)
}

/// [`insert_batch_sql`] of `kind` for each of [`PADDED`], made once.
fn batch_sql(kind: DbKind) -> &'static [String] {
    static SQL: std::sync::OnceLock<[Vec<String>; 2]> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        [DbKind::Sqlite, DbKind::Postgres]
            .map(|kind| PADDED.iter().map(|n| insert_batch_sql(kind, *n)).collect())
    });
    &sql[usize::from(kind == DbKind::Postgres)]
}

/// Runs `sql` (for `padded` rows) with `rows` and the padding bound as [`insert_batch`] binds
/// them.
fn run_insert(
    conn: &rusqlite::Connection,
    sql: &str,
    rows: &[NewRecord<'_>],
    padded: usize,
    generation: Option<i64>,
) -> rusqlite::Result<BatchInsert> {
    use rusqlite::types::Null;
    let mut statement = conn.prepare_cached(sql)?;
    let mut at = 0;
    let mut bind = |value: &dyn rusqlite::ToSql| {
        at += 1;
        statement.raw_bind_parameter(at, value)
    };
    for r in rows {
        bind(&r.tenant_id)?;
        bind(&r.seq)?;
        bind(&r.receipt_id)?;
        bind(&r.kind)?;
        bind(&r.decision)?;
        bind(&r.reason)?;
        bind(&r.tool)?;
        bind(&r.session_id)?;
        bind(&r.actor_id)?;
        bind(&r.issued_at)?;
        bind(&r.receipt)?;
        bind(&r.disclosures)?;
        bind(&r.record_hash)?;
    }
    for _ in rows.len() * PER_ROW..padded * PER_ROW {
        bind(&Null)?;
    }
    bind(&generation)?;
    bind(&generation)?;
    match statement.raw_execute() {
        Ok(changed) if changed == rows.len() => Ok(BatchInsert::Inserted),
        Ok(_) => Ok(BatchInsert::GenerationMoved),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
        {
            Ok(BatchInsert::PositionTaken)
        }
        Err(e) => Err(e),
    }
}

/// Whether SQLite refused `e` for a lock another connection holds (nothing was written).
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Inserts any number of `rows` inside the caller's transaction, [`ONE_STATEMENT`] at a time
/// with [`insert_batch`]; `Ok(false)` when any position was already taken (the caller rolls the
/// transaction back: another writer appended first).
pub async fn insert_many_in(
    conn: &mut sqlx::AnyConnection,
    kind: DbKind,
    rows: &[NewRecord<'_>],
) -> Result<bool, sqlx::Error> {
    for chunk in rows.chunks(ONE_STATEMENT) {
        match insert_batch(&mut *conn, kind, chunk, None).await? {
            BatchInsert::Inserted => {}
            BatchInsert::PositionTaken | BatchInsert::GenerationMoved => return Ok(false),
        }
    }
    Ok(true)
}

/// A stored record.
#[derive(Debug, Clone)]
pub struct RecordRow {
    /// Position.
    pub seq: i64,
    /// Signed receipt JSON.
    pub receipt: String,
    /// Disclosures JSON.
    pub disclosures: String,
    /// Stored record hash.
    pub record_hash: String,
    /// The row's copies of receipt members (what filters and counts read), unchecked.
    pub columns: engine::receipt::RowColumns,
    /// Its copy in `journal_facets` ([`page`] only).
    pub facets: Facets,
}

/// What `journal_facets` (migration 0024) holds for a record, as [`page`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Facets {
    /// Not read (every read but [`page`]).
    Unread,
    /// Not copied yet: the record is after the tenant's indexed prefix.
    NotYet,
    /// Missing: the record is within the tenant's indexed prefix, yet has no row there.
    Missing,
    /// Copied, every column equal to the journal row's own (so it says what the row says).
    Same,
    /// Copied, and some column differs from the journal row's: the copy, unchecked (its
    /// `receipt_id` is the journal row's: the facets have none).
    Copied(Box<engine::receipt::RowColumns>),
}

/// The columns [`from_row`] reads.
const SELECT: &str = "SELECT tenant_id, seq, receipt_id, kind, decision, reason, tool, \
    session_id, actor_id, issued_at, receipt, disclosures, record_hash FROM journal";

fn from_row(row: &AnyRow) -> Result<RecordRow, sqlx::Error> {
    let seq = row.try_get("seq")?;
    Ok(RecordRow {
        seq,
        receipt: row.try_get("receipt")?,
        disclosures: row.try_get("disclosures")?,
        record_hash: row.try_get("record_hash")?,
        columns: row_columns(
            row,
            row.try_get("tenant_id")?,
            seq,
            row.try_get("receipt_id")?,
        )?,
        facets: Facets::Unread,
    })
}

/// A record's columns that filters and counts read ([`FACET_COLUMNS`], by those names) from
/// `row`, with its key and receipt id as given.
fn row_columns(
    row: &AnyRow,
    tenant_id: String,
    seq: i64,
    receipt_id: String,
) -> Result<engine::receipt::RowColumns, sqlx::Error> {
    Ok(engine::receipt::RowColumns {
        tenant_id,
        seq,
        receipt_id,
        kind: row.try_get("kind")?,
        decision: row.try_get("decision")?,
        reason: row.try_get("reason")?,
        tool: row.try_get("tool")?,
        session_id: row.try_get("session_id")?,
        actor_id: row.try_get("actor_id")?,
        issued_at: super::rfc3339(row.try_get("issued_at")?),
    })
}

/// The journal's columns that `journal_facets` copies ([`index_facets`]), but `tenant_id` and
/// `seq` (its key, which the join matches).
const FACET_COLUMNS: [&str; 7] = [
    "kind",
    "decision",
    "reason",
    "tool",
    "session_id",
    "actor_id",
    "issued_at",
];

/// A page of the journal as [`page`] reads it: each record's columns but `tenant_id` (the
/// statement's own parameter, which the stored one equals byte for byte), and of its copy in
/// `journal_facets` only its position and whether the database found every copied column equal
/// to the journal's (`f_same`, 1 or 0; SQL's `=` on text is byte equality under both stores'
/// default collations). Equal copies are what a healthy journal holds, so the columns are read
/// from the database once, not twice (the background verifier reads every record, and each
/// value read through sqlx is copied and converted a few times); a copy that differs is read
/// again whole ([`facets_of`]) so that its report can name the column.
fn page_select() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let same = FACET_COLUMNS
            .map(|c| format!("(f.{c} = j.{c} OR (f.{c} IS NULL AND j.{c} IS NULL))"))
            .join(" AND ");
        format!(
            "SELECT j.seq, j.receipt_id, j.kind, j.decision, j.reason, j.tool, j.session_id, \
             j.actor_id, j.issued_at, j.receipt, j.disclosures, j.record_hash, f.seq AS f_seq, \
             CAST(CASE WHEN {same} THEN 1 ELSE 0 END AS BIGINT) AS f_same, \
             (SELECT COALESCE(MAX(seq), 0) FROM journal_facets WHERE tenant_id = $1) \
             AS f_indexed \
             FROM journal j LEFT JOIN journal_facets f ON f.tenant_id = j.tenant_id AND f.seq = j.seq \
             WHERE j.tenant_id = $1 AND j.seq > $2 ORDER BY j.seq LIMIT $3"
        )
    })
}

fn from_page_row(tenant_id: &str, row: &AnyRow) -> Result<RecordRow, sqlx::Error> {
    let seq = row.try_get("seq")?;
    let columns = row_columns(row, tenant_id.to_owned(), seq, row.try_get("receipt_id")?)?;
    let indexed: i64 = row.try_get("f_indexed")?;
    let facets = match (
        row.try_get::<Option<i64>, _>("f_seq")?,
        row.try_get("f_same")?,
    ) {
        (Some(_), 1i64) => Facets::Same,
        // Read again whole by `page`.
        (Some(_), _) => Facets::Unread,
        (None, _) if seq <= indexed => Facets::Missing,
        (None, _) => Facets::NotYet,
    };
    Ok(RecordRow {
        seq,
        receipt: row.try_get("receipt")?,
        disclosures: row.try_get("disclosures")?,
        record_hash: row.try_get("record_hash")?,
        columns,
        facets,
    })
}

/// The copy in `journal_facets` of `tenant_id`'s record `seq`, whole (`None`: there is none).
async fn facets_of(
    store: &Store,
    tenant_id: &str,
    seq: i64,
) -> Result<Option<engine::receipt::RowColumns>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "SELECT tenant_id, seq, {} FROM journal_facets WHERE tenant_id = $1 AND seq = $2",
        FACET_COLUMNS.join(", ")
    ))
    .bind(tenant_id)
    .bind(seq)
    .fetch_optional(store.pool())
    .await?;
    row.map(|row| {
        // The facets have no receipt id: the journal row's, which the caller sets.
        row_columns(
            &row,
            row.try_get("tenant_id")?,
            row.try_get("seq")?,
            String::new(),
        )
    })
    .transpose()
}

/// Tenants that have a journal.
pub async fn tenants(store: &Store) -> Result<Vec<String>, sqlx::Error> {
    // One index seek per tenant (a loose index scan), where `SELECT DISTINCT` read every
    // record's index entry: the checkpointer and the background verifier ask often.
    let rows: Vec<(String,)> = sqlx::query_as(
        "WITH RECURSIVE t(id) AS (SELECT MIN(tenant_id) FROM journal \
         UNION ALL SELECT (SELECT MIN(tenant_id) FROM journal WHERE tenant_id > t.id) \
         FROM t WHERE t.id IS NOT NULL) SELECT id FROM t WHERE id IS NOT NULL",
    )
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

/// Tenants with rows in `journal_facets` and no record in `journal`. The journal's writer
/// copies only records it finds in `journal`, and nothing deletes records, so there are none
/// unless someone wrote them there.
pub async fn tenants_with_facets_only(store: &Store) -> Result<Vec<String>, sqlx::Error> {
    // One index seek per tenant of journal_facets, as in `tenants`.
    let rows: Vec<(String,)> = sqlx::query_as(
        "WITH RECURSIVE t(id) AS (SELECT MIN(tenant_id) FROM journal_facets \
         UNION ALL SELECT (SELECT MIN(tenant_id) FROM journal_facets WHERE tenant_id > t.id) \
         FROM t WHERE t.id IS NOT NULL) SELECT id FROM t WHERE id IS NOT NULL \
         AND NOT EXISTS (SELECT 1 FROM journal j WHERE j.tenant_id = t.id)",
    )
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

/// The positions of `tenant_id`'s rows in `journal_facets` after `after_seq` (or below 1, where
/// no record can be) that have no record in `journal`: the first `limit` in order, and how many
/// there are in all. A record is committed to `journal` before it is copied, and both are read
/// in one statement, so records appended meanwhile are not among them.
pub async fn unrecorded_facets(
    store: &Store,
    tenant_id: &str,
    after_seq: i64,
    limit: i64,
) -> Result<(Vec<i64>, i64), sqlx::Error> {
    const UNRECORDED: &str = "FROM journal_facets f WHERE f.tenant_id = $1 \
        AND (f.seq > $2 OR f.seq < 1) \
        AND NOT EXISTS (SELECT 1 FROM journal j WHERE j.tenant_id = f.tenant_id AND j.seq = f.seq)";
    let first: Vec<(i64,)> = sqlx::query_as(&format!(
        "SELECT f.seq {UNRECORDED} ORDER BY f.seq LIMIT $3"
    ))
    .bind(tenant_id)
    .bind(after_seq)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    let first: Vec<i64> = first.into_iter().map(|(s,)| s).collect();
    let found = i64::try_from(first.len()).unwrap_or(i64::MAX);
    if found < limit {
        return Ok((first, found));
    }
    let (all,): (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) {UNRECORDED}"))
        .bind(tenant_id)
        .bind(after_seq)
        .fetch_one(store.pool())
        .await?;
    Ok((first, all))
}

/// Up to `limit` records of a tenant after `after_seq`, in order, each with its copy in
/// `journal_facets` ([`RecordRow::facets`]).
pub async fn page(
    store: &Store,
    tenant_id: &str,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<RecordRow>, sqlx::Error> {
    let rows = sqlx::query(page_select())
        .bind(tenant_id)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(store.pool())
        .await?;
    let mut page = rows
        .iter()
        .map(|row| from_page_row(tenant_id, row))
        .collect::<Result<Vec<_>, _>>()?;
    for record in &mut page {
        if record.facets == Facets::Unread {
            // A copy that differs from the row (or went away since): read it whole.
            record.facets = match facets_of(store, tenant_id, record.seq).await? {
                Some(mut copy) => {
                    copy.receipt_id.clone_from(&record.columns.receipt_id);
                    Facets::Copied(Box::new(copy))
                }
                None => Facets::Missing,
            };
        }
    }
    Ok(page)
}

/// One record by receipt id, within a tenant.
pub async fn by_receipt_id(
    store: &Store,
    tenant_id: &str,
    receipt_id: &str,
) -> Result<Option<RecordRow>, sqlx::Error> {
    let row = sqlx::query(&format!(
        "{SELECT} WHERE tenant_id = $1 AND receipt_id = $2"
    ))
    .bind(tenant_id)
    .bind(receipt_id)
    .fetch_optional(store.pool())
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// Up to `limit` records of a session after `after_seq`, oldest first.
pub async fn of_session(
    store: &Store,
    tenant_id: &str,
    session_id: &str,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<RecordRow>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "{SELECT} WHERE tenant_id = $1 AND seq IN ({}) ORDER BY seq LIMIT $4",
        faceted("session_id = $2 AND seq > $3", "seq", "$4")
    ))
    .bind(tenant_id)
    .bind(session_id)
    .bind(after_seq)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    rows.iter().map(from_row).collect()
}

/// The highest `seq` of `$1`'s records in `journal_facets`: every record up to it is there,
/// every one after it only in `journal` (migration 0024).
const INDEXED_UP_TO: &str =
    "(SELECT COALESCE(MAX(seq), 0) FROM journal_facets WHERE tenant_id = $1)";

/// The `seq`s of tenant `$1`'s records matching `condition` (over the facet columns, which
/// both tables have), at most `limit` of them in `order` (`seq` or `seq DESC`): the first ones
/// of the indexed prefix in `journal_facets` and the first ones after it in `journal`, for the
/// caller to order and limit again. Both halves read in one statement, so a record indexed
/// meanwhile is counted once.
fn faceted(condition: &str, order: &str, limit: &str) -> String {
    format!(
        "SELECT seq FROM (SELECT seq FROM journal_facets WHERE tenant_id = $1 AND {condition} \
           ORDER BY {order} LIMIT {limit}) AS indexed \
         UNION ALL \
         SELECT seq FROM (SELECT seq FROM journal WHERE tenant_id = $1 AND seq > {INDEXED_UP_TO} \
           AND {condition} ORDER BY {order} LIMIT {limit}) AS unindexed"
    )
}

/// `columns` of tenant `$1`'s records matching `condition`, from the indexed prefix in
/// `journal_facets` and the records after it in `journal` (for counting).
fn faceted_rows(columns: &str, condition: &str) -> String {
    format!(
        "SELECT {columns} FROM journal_facets WHERE tenant_id = $1 AND {condition} \
         UNION ALL \
         SELECT {columns} FROM journal WHERE tenant_id = $1 AND seq > {INDEXED_UP_TO} \
           AND {condition}"
    )
}

/// Copies up to `limit` of `tenant_id`'s records that `journal_facets` does not have yet, in
/// `seq` order after the highest it has (so it always holds a prefix of the chain); how many.
/// The journal's writer calls it between batches, off the call path.
pub async fn index_facets(
    conn: &mut sqlx::AnyConnection,
    tenant_id: &str,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(&format!(
        "INSERT INTO journal_facets \
           (tenant_id, seq, kind, decision, reason, tool, session_id, actor_id, issued_at) \
         SELECT tenant_id, seq, kind, decision, reason, tool, session_id, actor_id, issued_at \
         FROM journal WHERE tenant_id = $1 AND seq > {INDEXED_UP_TO} ORDER BY seq LIMIT $2 \
         ON CONFLICT (tenant_id, seq) DO NOTHING"
    ))
    .bind(tenant_id)
    .bind(limit)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Filters of `GET /receipts` (CONTRACT §8). All optional; they combine with AND.
#[derive(Debug, Default, Clone)]
pub struct ReceiptFilter {
    /// `decision`
    pub decision: Option<String>,
    /// `reason`
    pub reason: Option<String>,
    /// `tool`
    pub tool: Option<String>,
    /// `session_id`
    pub session_id: Option<String>,
    /// `actor_id`
    pub actor_id: Option<String>,
    /// Epoch ms, inclusive.
    pub since: Option<i64>,
    /// Epoch ms, exclusive.
    pub until: Option<i64>,
    /// Only records before this `seq` (the cursor; newest first).
    pub before_seq: Option<i64>,
    /// Only records of no session, of no session that exists, or of a session in one of these
    /// environments (`None`: every one): a confined reader's own
    /// ([`crate::principal::Principal::confined_to`]).
    pub environments: Option<Vec<String>>,
}

/// Decision receipts of `tenant_id` issued in `[since, until)` (epoch ms) after position
/// `after_seq`, oldest first, at most `limit`: `(seq, receipt, disclosures)`.
pub async fn decision_page(
    store: &Store,
    tenant_id: &str,
    since: i64,
    until: i64,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<(i64, String, String)>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT seq, receipt, disclosures FROM journal WHERE tenant_id = $1 AND seq IN ({}) \
         ORDER BY seq LIMIT $5",
        faceted(
            "seq > $2 AND kind = 'decision' AND issued_at >= $3 AND issued_at < $4",
            "seq",
            "$5"
        )
    ))
    .bind(tenant_id)
    .bind(after_seq)
    .bind(since)
    .bind(until)
    .bind(limit)
    .fetch_all(store.pool())
    .await
}

/// Newest-first page of a tenant's records matching `filter`.
pub async fn search(
    store: &Store,
    tenant_id: &str,
    filter: &ReceiptFilter,
    limit: i64,
) -> Result<Vec<RecordRow>, sqlx::Error> {
    let mut condition = "TRUE".to_owned();
    let mut texts: Vec<&str> = Vec::new();
    let mut n = 1;
    for (column, value) in [
        ("decision", &filter.decision),
        ("reason", &filter.reason),
        ("tool", &filter.tool),
        ("session_id", &filter.session_id),
        ("actor_id", &filter.actor_id),
    ] {
        if let Some(v) = value {
            n += 1;
            condition.push_str(&format!(" AND {column} = ${n}"));
            texts.push(v);
        }
    }
    let mut numbers: Vec<i64> = Vec::new();
    for (clause, value) in [
        ("issued_at >=", filter.since),
        ("issued_at <", filter.until),
        ("seq <", filter.before_seq),
    ] {
        if let Some(v) = value {
            n += 1;
            condition.push_str(&format!(" AND {clause} ${n}"));
            numbers.push(v);
        }
    }
    if let Some(environments) = &filter.environments {
        condition.push_str(" AND ");
        condition.push_str(&super::exposure::not_of_other_environments(
            "session_id",
            n + 1,
            environments.len(),
        ));
        n += environments.len();
    }
    let limit_param = format!("${}", n + 1);
    let sql = format!(
        "{SELECT} WHERE tenant_id = $1 AND seq IN ({}) ORDER BY seq DESC LIMIT {limit_param}",
        faceted(&condition, "seq DESC", &limit_param)
    );
    let mut query = sqlx::query(&sql).bind(tenant_id);
    for t in texts {
        query = query.bind(t);
    }
    for v in numbers {
        query = query.bind(v);
    }
    for e in filter.environments.iter().flatten() {
        query = query.bind(e.as_str());
    }
    let rows = query.bind(limit).fetch_all(store.pool()).await?;
    rows.iter().map(from_row).collect()
}

/// `condition`, confined to `environments` (bound from parameter `$first` on) when given.
fn confined(condition: &str, environments: Option<&[String]>, first: usize) -> String {
    match environments {
        None => condition.to_owned(),
        Some(e) => format!(
            "{condition} AND {}",
            super::exposure::not_of_other_environments("session_id", first, e.len())
        ),
    }
}

/// Call decisions (`kind = 'decision'`) of a tenant since `since_ms`, counted per bucket of
/// `bucket_ms` (bucket = `issued_at / bucket_ms`) and decision; only of `environments` when
/// given (a confined reader's overview).
pub async fn decision_counts(
    store: &Store,
    tenant_id: &str,
    since_ms: i64,
    bucket_ms: i64,
    environments: Option<&[String]>,
) -> Result<Vec<(i64, String, i64)>, sqlx::Error> {
    let sql = format!(
        "SELECT issued_at / $3 AS bucket, decision, COUNT(*) FROM ({}) AS d GROUP BY 1, 2",
        faceted_rows(
            "issued_at, decision",
            &confined("issued_at >= $2 AND kind = 'decision'", environments, 4)
        )
    );
    let mut query = sqlx::query_as(&sql)
        .bind(tenant_id)
        .bind(since_ms)
        .bind(bucket_ms);
    for e in environments.into_iter().flatten() {
        query = query.bind(e.as_str());
    }
    query.fetch_all(store.pool()).await
}

/// The most frequent reasons of denials since `since_ms`, most frequent first.
pub async fn top_deny_reasons(
    store: &Store,
    tenant_id: &str,
    since_ms: i64,
    limit: i64,
    environments: Option<&[String]>,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let sql = format!(
        // `'' || reason` keeps SQLite from walking the reason index to avoid a sort: the time
        // index covers this query (migrations 0010, 0024) and reads only the period's records.
        "SELECT r, COUNT(*) AS n FROM ({}) AS d GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $3",
        faceted_rows(
            "'' || reason AS r",
            &confined("decision = 'deny' AND issued_at >= $2", environments, 4)
        )
    );
    let mut query = sqlx::query_as(&sql)
        .bind(tenant_id)
        .bind(since_ms)
        .bind(limit);
    for e in environments.into_iter().flatten() {
        query = query.bind(e.as_str());
    }
    query.fetch_all(store.pool()).await
}

/// `(receipt, disclosures)` of a tenant's admin records whose disclosures name `action`.
pub async fn admin_actions(
    store: &Store,
    tenant_id: &str,
    action: &str,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT receipt, disclosures FROM journal WHERE tenant_id = $1 AND kind = 'admin' \
         AND disclosures LIKE $2 ORDER BY seq",
    )
    .bind(tenant_id)
    .bind(format!("%\"action\":\"{action}\"%"))
    .fetch_all(store.pool())
    .await
}

/// Replaces the disclosures of a tenant's records issued before `cutoff_ms` with `marker`,
/// except the records of `keep_action` (purges themselves); returns how many changed.
pub async fn purge_disclosures(
    store: &Store,
    tenant_id: &str,
    cutoff_ms: i64,
    marker: &str,
    keep_action: &str,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(&format!(
        "UPDATE journal SET disclosures = $2 WHERE tenant_id = $1 AND seq IN ({}) \
         AND disclosures <> $2 AND disclosures NOT LIKE $4",
        faceted_rows("seq", "issued_at < $3")
    ))
    .bind(tenant_id)
    .bind(marker)
    .bind(cutoff_ms)
    .bind(format!("%\"action\":\"{keep_action}\"%"))
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use rusqlite::types::Value;

    /// The journal's direct connection commits as the store's connections do with
    /// `Durability::Crash` (WAL, `synchronous = NORMAL`, foreign keys on), checkpoints by
    /// itself as the writer's sqlx connection does, and never waits for a lock.
    #[test]
    fn the_direct_connection_is_set_up_as_the_store_s() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        rusqlite::Connection::open(&path).unwrap();
        let conn = super::open_direct(&path).unwrap();
        let pragma = |name: &str| -> Value {
            conn.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
                .unwrap()
        };
        assert_eq!(pragma("journal_mode"), Value::Text("wal".into()));
        assert_eq!(pragma("synchronous"), Value::Integer(1), "NORMAL");
        assert_eq!(pragma("foreign_keys"), Value::Integer(1));
        assert_eq!(pragma("busy_timeout"), Value::Integer(0));
        assert_eq!(
            pragma("wal_autocheckpoint"),
            Value::Integer(super::super::WRITER_AUTOCHECKPOINT.into())
        );
        // A file that is not there is not made: the journal's database is the store's.
        assert!(super::open_direct(&dir.path().join("missing.db")).is_err());
    }
}
