//! Locking shared in-memory state.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m` even when a holder panicked: every mutex this is used on guards plain data that
/// each holder leaves consistent between statements (maps, counters), so there is nothing
/// half-written to refuse.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
