//! Dashboard cookie sessions (tower-sessions records) in the database, so that every node sees
//! them and a restart signs nobody out.

use async_trait::async_trait;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, ExpiredDeletion, SessionStore};

use super::{Store, now_ms};

/// [`SessionStore`] over the `dashboard_sessions` table.
#[derive(Debug, Clone)]
pub struct DbSessionStore {
    store: Store,
}

impl DbSessionStore {
    /// A session store on `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

fn backend(e: impl std::fmt::Display) -> session_store::Error {
    session_store::Error::Backend(e.to_string())
}

fn expiry_ms(record: &Record) -> i64 {
    i64::try_from(record.expiry_date.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

#[async_trait]
impl SessionStore for DbSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        let data = serde_json::to_string(&record.data)
            .map_err(|e| session_store::Error::Encode(e.to_string()))?;
        // A collision of 128-bit random ids is practically impossible; retry anyway rather than
        // overwrite another person's session.
        for _ in 0..4 {
            let done = sqlx::query(
                "INSERT INTO dashboard_sessions (id, data, expires_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
            )
            .bind(record.id.to_string())
            .bind(&data)
            .bind(expiry_ms(record))
            .execute(self.store.pool())
            .await
            .map_err(backend)?;
            if done.rows_affected() == 1 {
                return Ok(());
            }
            record.id = Id::default();
        }
        Err(backend("could not allocate a session id"))
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let data = serde_json::to_string(&record.data)
            .map_err(|e| session_store::Error::Encode(e.to_string()))?;
        sqlx::query(
            "INSERT INTO dashboard_sessions (id, data, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET data = excluded.data, expires_at = excluded.expires_at",
        )
        .bind(record.id.to_string())
        .bind(data)
        .bind(expiry_ms(record))
        .execute(self.store.pool())
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let row: Option<(String, i64)> = sqlx::query_as(
            "SELECT data, expires_at FROM dashboard_sessions WHERE id = $1 AND expires_at > $2",
        )
        .bind(id.to_string())
        .bind(now_ms())
        .fetch_optional(self.store.pool())
        .await
        .map_err(backend)?;
        let Some((data, expires_at)) = row else {
            return Ok(None);
        };
        let data =
            serde_json::from_str(&data).map_err(|e| session_store::Error::Decode(e.to_string()))?;
        let expiry_date =
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(expires_at) * 1_000_000)
                .map_err(|e| session_store::Error::Decode(e.to_string()))?;
        Ok(Some(Record {
            id: *id,
            data,
            expiry_date,
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        sqlx::query("DELETE FROM dashboard_sessions WHERE id = $1")
            .bind(id.to_string())
            .execute(self.store.pool())
            .await
            .map_err(backend)?;
        Ok(())
    }
}

#[async_trait]
impl ExpiredDeletion for DbSessionStore {
    async fn delete_expired(&self) -> session_store::Result<()> {
        sqlx::query("DELETE FROM dashboard_sessions WHERE expires_at <= $1")
            .bind(now_ms())
            .execute(self.store.pool())
            .await
            .map_err(backend)?;
        Ok(())
    }
}
