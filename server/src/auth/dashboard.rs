//! Cookie sessions for people signing in to the dashboard.
//!
//! The session id lives in an `HttpOnly`, `SameSite=Lax` cookie (`__Host-` prefixed and `Secure`
//! when served over TLS) and the record in the database ([`aperture_core::sign_in::records`]).
//! It expires after 30 minutes without a request, and 12 hours after sign-in whatever the
//! activity. The id is rotated at sign-in (no fixation) and the record deleted at sign-out
//! (`app::session`, where the dashboard's server functions sign people in and out); the
//! password check and its limits on guessing are the core's ([`aperture_core::sign_in`]).

use async_trait::async_trait;
use tower_sessions::cookie::SameSite;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, ExpiredDeletion, SessionStore};
use tower_sessions::{Expiry, SessionManagerLayer};

use aperture_core::sign_in::records;
use aperture_core::{Store, clock};

/// Who is signed in: the dashboard's own reading of its session (`app::session`), which the
/// routes beside it (exports, downloads, live views) share.
pub use app::session::{current, require};

/// Idle timeout.
pub const IDLE_MINUTES: i64 = 30;

/// The session layer for the whole app.
pub fn session_layer(store: Store, secure: bool) -> SessionManagerLayer<DbSessionStore> {
    let name = if secure {
        "__Host-aperture_session"
    } else {
        "aperture_session"
    };
    SessionManagerLayer::new(DbSessionStore::new(store))
        .with_name(name)
        .with_secure(secure)
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_path("/")
        .with_expiry(Expiry::OnInactivity(time::Duration::minutes(IDLE_MINUTES)))
}

/// [`SessionStore`] over the core's session records.
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

fn encode(record: &Record) -> session_store::Result<String> {
    serde_json::to_string(&record.data).map_err(|e| session_store::Error::Encode(e.to_string()))
}

#[async_trait]
impl SessionStore for DbSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        let data = encode(record)?;
        // A collision of 128-bit random ids is practically impossible; retry anyway rather than
        // overwrite another person's session.
        for _ in 0..4 {
            let id = record.id.to_string();
            if records::create(&self.store, &id, &data, expiry_ms(record))
                .await
                .map_err(backend)?
            {
                return Ok(());
            }
            record.id = Id::default();
        }
        Err(backend("could not allocate a session id"))
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let data = encode(record)?;
        records::save(
            &self.store,
            &record.id.to_string(),
            &data,
            expiry_ms(record),
        )
        .await
        .map_err(backend)
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let Some((data, expires_at)) = records::load(&self.store, &id.to_string())
            .await
            .map_err(backend)?
        else {
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
        records::delete(&self.store, &id.to_string())
            .await
            .map_err(backend)
    }
}

#[async_trait]
impl ExpiredDeletion for DbSessionStore {
    async fn delete_expired(&self) -> session_store::Result<()> {
        records::delete_expired(&self.store, clock::now_ms())
            .await
            .map_err(backend)
    }
}
