//! The time as the records write it: epoch milliseconds, shown as RFC 3339 (UTC).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in epoch milliseconds (the unit of every stored timestamp).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Epoch milliseconds as RFC 3339 (UTC), as every view shows times.
pub fn rfc3339(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// RFC 3339 to epoch milliseconds.
pub fn parse_rfc3339(value: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}
