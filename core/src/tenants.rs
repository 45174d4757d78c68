//! Tenants: each a name (`[a-z0-9_-]{1,64}`, the rule of [`engine::environment::is_name`])
//! under which everything else is kept apart.

use crate::error::ServiceError;
use crate::store::{self, Store};

/// Creates tenant `id` unless it exists; whether it was created.
pub async fn ensure(store: &Store, id: &str) -> Result<bool, ServiceError> {
    Ok(store::tenants::ensure(store, id).await?)
}

/// Every tenant with a journal.
pub async fn with_journal(store: &Store) -> Result<Vec<String>, ServiceError> {
    Ok(store::journal::tenants(store).await?)
}
