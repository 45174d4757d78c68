//! The journal's Merkle trees (tiles), signed checkpoints, witnesses and their cosignatures
//! (migration 0013).

use super::{Store, now_ms};

/// A tenant's log: its origin and how many records its stored tree holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    /// `<host>/aperture/<tenant>`, fixed at the first checkpoint.
    pub origin: String,
    /// Records in the stored tree.
    pub tree_size: i64,
}

/// The log of `tenant`, if it has one yet.
pub async fn log(store: &Store, tenant: &str) -> Result<Option<Log>, sqlx::Error> {
    let row: Option<(String, i64)> =
        sqlx::query_as("SELECT origin, tree_size FROM journal_logs WHERE tenant_id = $1")
            .bind(tenant)
            .fetch_optional(store.pool())
            .await?;
    Ok(row.map(|(origin, tree_size)| Log { origin, tree_size }))
}

/// Tenants that have a log.
pub async fn logged_tenants(store: &Store) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT tenant_id FROM journal_logs ORDER BY tenant_id")
            .fetch_all(store.pool())
            .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

/// One tile's hashes, concatenated (empty when it does not exist).
pub async fn tile(
    store: &Store,
    tenant: &str,
    level: u32,
    idx: u64,
) -> Result<Vec<u8>, sqlx::Error> {
    let row: Option<(Vec<u8>,)> = sqlx::query_as(
        "SELECT hashes FROM journal_tiles WHERE tenant_id = $1 AND level = $2 AND idx = $3",
    )
    .bind(tenant)
    .bind(i64::from(level))
    .bind(i64::try_from(idx).unwrap_or(i64::MAX))
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(|(h,)| h).unwrap_or_default())
}

/// Grows the stored tree of `tenant` from `from` to `to` records: writes `tiles` (level, index,
/// hashes), moves the log's size and stores `checkpoint` (a signed note of the tree of `to`
/// records, made at epoch ms), in one transaction, only if the log still holds `from` records
/// (another node may have grown it first: [`Grown::Raced`], nothing written). A log that does
/// not exist yet is created with `origin` when `from` is 0.
pub async fn grow(
    store: &Store,
    tenant: &str,
    origin: &str,
    from: i64,
    to: i64,
    tiles: &[(u32, u64, Vec<u8>)],
    checkpoint: Option<(&str, i64)>,
) -> Result<Grown, sqlx::Error> {
    let mut tx = store.begin_write().await?;
    let moved = if from == 0 {
        sqlx::query(
            "INSERT INTO journal_logs (tenant_id, origin, tree_size, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id) DO NOTHING",
        )
        .bind(tenant)
        .bind(origin)
        .bind(to)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?
        .rows_affected()
    } else {
        sqlx::query(
            "UPDATE journal_logs SET tree_size = $1 WHERE tenant_id = $2 AND tree_size = $3",
        )
        .bind(to)
        .bind(tenant)
        .bind(from)
        .execute(&mut *tx)
        .await?
        .rows_affected()
    };
    if moved != 1 {
        tx.rollback().await?;
        return Ok(Grown::Raced);
    }
    for (level, idx, hashes) in tiles {
        sqlx::query(
            "INSERT INTO journal_tiles (tenant_id, level, idx, hashes) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant_id, level, idx) DO UPDATE SET hashes = excluded.hashes",
        )
        .bind(tenant)
        .bind(i64::from(*level))
        .bind(i64::try_from(*idx).unwrap_or(i64::MAX))
        .bind(hashes.as_slice())
        .execute(&mut *tx)
        .await?;
    }
    let stored = match checkpoint {
        Some((note, made_at)) => insert_on(&mut tx, tenant, to, note, made_at).await?,
        None => false,
    };
    tx.commit().await?;
    Ok(Grown::Grown {
        checkpoint_stored: stored,
    })
}

/// What [`grow`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grown {
    /// The log no longer held `from` records: nothing was written.
    Raced,
    /// The tree grew; with the checkpoint stored, unless one of that size existed already.
    Grown {
        /// Whether the checkpoint given was stored.
        checkpoint_stored: bool,
    },
}

/// The signed receipt texts (the tree's leaves) of records `after + 1 ..= after + limit`.
pub async fn leaves(
    store: &Store,
    tenant: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT seq, receipt FROM journal WHERE tenant_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    )
    .bind(tenant)
    .bind(after)
    .bind(limit)
    .fetch_all(store.pool())
    .await
}

/// A stored checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// Records it covers.
    pub tree_size: i64,
    /// The signed note.
    pub note: String,
    /// Epoch ms.
    pub made_at: i64,
}

/// A `(tree_size, note, made_at)` row.
fn stored((tree_size, note, made_at): (i64, String, i64)) -> StoredCheckpoint {
    StoredCheckpoint {
        tree_size,
        note,
        made_at,
    }
}

/// Stores a checkpoint made at epoch ms `made_at`; `false` when one of that size exists
/// already (made by another node).
pub async fn insert(
    store: &Store,
    tenant: &str,
    tree_size: i64,
    note: &str,
    made_at: i64,
) -> Result<bool, sqlx::Error> {
    let mut conn = store.pool().acquire().await?;
    insert_on(&mut conn, tenant, tree_size, note, made_at).await
}

async fn insert_on(
    conn: &mut sqlx::AnyConnection,
    tenant: &str,
    tree_size: i64,
    note: &str,
    made_at: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO journal_checkpoints (tenant_id, tree_size, note, made_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, tree_size) DO NOTHING",
    )
    .bind(tenant)
    .bind(tree_size)
    .bind(note)
    .bind(made_at)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The newest checkpoint of `tenant`.
pub async fn latest(store: &Store, tenant: &str) -> Result<Option<StoredCheckpoint>, sqlx::Error> {
    let row: Option<(i64, String, i64)> = sqlx::query_as(
        "SELECT tree_size, note, made_at FROM journal_checkpoints WHERE tenant_id = $1 \
         ORDER BY tree_size DESC LIMIT 1",
    )
    .bind(tenant)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(stored))
}

/// The checkpoint of `tenant` at `tree_size`.
pub async fn at(
    store: &Store,
    tenant: &str,
    tree_size: i64,
) -> Result<Option<StoredCheckpoint>, sqlx::Error> {
    let row: Option<(i64, String, i64)> = sqlx::query_as(
        "SELECT tree_size, note, made_at FROM journal_checkpoints WHERE tenant_id = $1 \
         AND tree_size = $2",
    )
    .bind(tenant)
    .bind(tree_size)
    .fetch_optional(store.pool())
    .await?;
    Ok(row.map(stored))
}

/// Checkpoints of `tenant`, newest first, before `before` (a tree size) when given.
pub async fn list(
    store: &Store,
    tenant: &str,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<StoredCheckpoint>, sqlx::Error> {
    let rows: Vec<(i64, String, i64)> = sqlx::query_as(
        "SELECT tree_size, note, made_at FROM journal_checkpoints WHERE tenant_id = $1 \
         AND tree_size < $2 ORDER BY tree_size DESC LIMIT $3",
    )
    .bind(tenant)
    .bind(before.unwrap_or(i64::MAX))
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(stored).collect())
}

/// A registered witness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witness {
    /// Its name (the key name of its cosignatures).
    pub name: String,
    /// Its cosigner key in the note verifier format.
    pub vkey: String,
    /// Epoch ms.
    pub created_at: i64,
}

/// Registers a witness; `false` when the name is taken.
pub async fn add_witness(
    store: &Store,
    tenant: &str,
    name: &str,
    vkey: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "INSERT INTO journal_witnesses (tenant_id, name, vkey, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (tenant_id, name) DO NOTHING",
    )
    .bind(tenant)
    .bind(name)
    .bind(vkey)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The tenant's witnesses, by name.
pub async fn witnesses(store: &Store, tenant: &str) -> Result<Vec<Witness>, sqlx::Error> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT name, vkey, created_at FROM journal_witnesses WHERE tenant_id = $1 ORDER BY name",
    )
    .bind(tenant)
    .fetch_all(store.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(name, vkey, created_at)| Witness {
            name,
            vkey,
            created_at,
        })
        .collect())
}

/// Removes a witness (its cosignatures stay); `false` when there was none of that name.
pub async fn remove_witness(store: &Store, tenant: &str, name: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM journal_witnesses WHERE tenant_id = $1 AND name = $2")
        .bind(tenant)
        .bind(name)
        .execute(store.pool())
        .await?;
    Ok(done.rows_affected() == 1)
}

/// A witness's cosignature of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cosignature {
    /// The witness's name.
    pub witness: String,
    /// The signature line.
    pub line: String,
    /// Its timestamp (seconds).
    pub signed_at: i64,
}

/// Stores a cosignature (a newer one of the same witness and checkpoint replaces it).
pub async fn add_cosignature(
    store: &Store,
    tenant: &str,
    tree_size: i64,
    c: &Cosignature,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO journal_cosignatures (tenant_id, tree_size, witness, line, signed_at, received_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id, tree_size, witness) \
         DO UPDATE SET line = excluded.line, signed_at = excluded.signed_at, received_at = excluded.received_at",
    )
    .bind(tenant)
    .bind(tree_size)
    .bind(&c.witness)
    .bind(&c.line)
    .bind(c.signed_at)
    .bind(now_ms())
    .execute(store.pool())
    .await?;
    Ok(())
}

/// The cosignatures of the checkpoint of `tenant` at `tree_size`, by witness.
pub async fn cosignatures(
    store: &Store,
    tenant: &str,
    tree_size: i64,
) -> Result<Vec<Cosignature>, sqlx::Error> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT witness, line, signed_at FROM journal_cosignatures WHERE tenant_id = $1 \
         AND tree_size = $2 ORDER BY witness",
    )
    .bind(tenant)
    .bind(tree_size)
    .fetch_all(store.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(witness, line, signed_at)| Cosignature {
            witness,
            line,
            signed_at,
        })
        .collect())
}
