//! The dashboard's cookie session records, for the surface's session store: kept in the database
//! so that every node sees them and a restart signs nobody out. The data is the session's JSON
//! as the session layer wrote it.

use crate::error::ServiceError;
use crate::store::{self, Store};

/// Inserts a new record under `id`; `false` when the id is taken (nothing is overwritten).
pub async fn create(
    store: &Store,
    id: &str,
    data: &str,
    expires_at: i64,
) -> Result<bool, ServiceError> {
    Ok(store::sessions::create(store, id, data, expires_at).await?)
}

/// Writes the record under `id`, new or not.
pub async fn save(
    store: &Store,
    id: &str,
    data: &str,
    expires_at: i64,
) -> Result<(), ServiceError> {
    Ok(store::sessions::save(store, id, data, expires_at).await?)
}

/// The data and expiry (epoch ms) of the record under `id`, unless it has expired.
pub async fn load(store: &Store, id: &str) -> Result<Option<(String, i64)>, ServiceError> {
    Ok(store::sessions::load(store, id, store::now_ms()).await?)
}

/// Deletes the record under `id`.
pub async fn delete(store: &Store, id: &str) -> Result<(), ServiceError> {
    Ok(store::sessions::delete(store, id).await?)
}

/// Deletes the records expired by `now`.
pub async fn delete_expired(store: &Store, now: i64) -> Result<(), ServiceError> {
    Ok(store::sessions::delete_expired(store, now).await?)
}
