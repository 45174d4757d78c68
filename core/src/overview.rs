//! The overview's figures: tokens and users, the decisions of the last day and week, the top
//! reasons for denials, what waits for an approver, the chain's status and the latest
//! checkpoint.

use aperture_types::dto::{Me, Overview};

use crate::error::ServiceError;
use crate::principal::Principal;
use crate::services::Services;
use crate::store;

/// Who `p` is, as the dashboard shows them.
pub fn me_of(p: &Principal) -> Me {
    Me {
        tenant_id: p.tenant_id.clone(),
        username: p.actor_id.clone(),
        scopes: p.scopes.iter().map(str::to_owned).collect(),
    }
}

/// Decisions of the last `buckets` × `bucket_ms` up to `now`, oldest bucket first, summed from
/// hourly counts (`hours`: bucket → decision → count).
fn activity(
    hours: &[(i64, String, i64)],
    now: i64,
    bucket_ms: i64,
    buckets: i64,
) -> aperture_types::dto::Activity {
    const HOUR: i64 = 3_600_000;
    let last = now / bucket_ms;
    let first = last - buckets + 1;
    let mut out =
        vec![aperture_types::dto::ActivityBucket::default(); usize::try_from(buckets).unwrap_or(0)];
    for (hour, decision, n) in hours {
        let bucket = hour * HOUR / bucket_ms;
        let Some(b) = usize::try_from(bucket - first)
            .ok()
            .and_then(|i| out.get_mut(i))
        else {
            continue;
        };
        let n = u64::try_from(*n).unwrap_or(0);
        match decision.as_str() {
            "deny" => b.denied += n,
            "park" | "stage" | "confirm" => b.parked += n,
            _ => b.allowed += n,
        }
    }
    aperture_types::dto::Activity {
        bucket_seconds: u64::try_from(bucket_ms / 1000).unwrap_or(0),
        start: store::rfc3339(first * bucket_ms),
        buckets: out,
    }
}

/// The overview's figures. Journal figures need the read scope; the chain status comes from
/// the background verifier's cache, so the page never waits for a verification.
pub async fn overview(services: &Services, p: &Principal) -> Result<Overview, ServiceError> {
    let s = &services.store;
    let tenant = &p.tenant_id;
    let now = store::now_ms();
    let can_read = p.scopes.satisfies(engine::scope::READ);
    let active_tokens = u64::try_from(store::tokens::count_active(s, tenant).await?).unwrap_or(0);
    let users = u64::try_from(store::users::count(s, tenant).await?).unwrap_or(0);
    let mut o = Overview {
        me: me_of(p),
        active_tokens,
        users,
        can_read,
        last_day: aperture_types::dto::Activity::default(),
        last_week: aperture_types::dto::Activity::default(),
        top_deny_reasons: vec![],
        waiting: 0,
        oldest_waiting_at: None,
        oldest_waiting: None,
        chain: None,
        checkpoint: None,
        now: store::rfc3339(now),
    };
    if !can_read {
        return Ok(o);
    }
    const HOUR: i64 = 3_600_000;
    // One read of the last seven days by hour serves both charts (days are whole UTC days).
    let week_start = (now / (24 * HOUR) - 6) * 24 * HOUR;
    // A reader confined to some environments counts only their calls.
    let confined = p.confined_to();
    let hours = store::journal::decision_counts(s, tenant, week_start, HOUR, confined).await?;
    o.last_day = activity(&hours, now, HOUR, 24);
    o.last_week = activity(&hours, now, 24 * HOUR, 7);
    o.top_deny_reasons =
        store::journal::top_deny_reasons(s, tenant, now - 7 * 24 * HOUR, 5, confined)
            .await?
            .into_iter()
            .map(|(reason, n)| aperture_types::dto::ReasonCount {
                reason,
                count: u64::try_from(n).unwrap_or(0),
            })
            .collect();
    let (waiting, oldest) = store::invocations::waiting(s, tenant, confined).await?;
    o.waiting = u64::try_from(waiting).unwrap_or(0);
    o.oldest_waiting_at = oldest.map(store::rfc3339);
    if waiting > 0 {
        o.oldest_waiting = store::invocations::oldest_waiting(s, tenant, confined)
            .await?
            .map(|r| aperture_types::dto::WaitingCall {
                invocation_id: r.id,
                tool: r.tool,
                actor_id: r.actor_id,
                status: r.status,
                created_at: store::rfc3339(r.created_at),
                expires_at: r.expires_at.map(store::rfc3339),
            });
    }
    o.chain = services
        .chain
        .status(tenant)
        .map(|c| aperture_types::dto::ChainView {
            verified: c.verified,
            first_bad: c.first_bad.as_ref().map(|(seq, _)| *seq),
            problem: c.first_bad.map(|(_, problem)| problem),
            checked_at: store::rfc3339(c.checked_at),
        });
    o.checkpoint = crate::transparency::rows(services, tenant, 1)
        .await?
        .into_iter()
        .next();
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::activity;

    #[test]
    fn hourly_counts_make_the_day_and_week_charts() {
        const HOUR: i64 = 3_600_000;
        // 2026-11-30 14:30 UTC.
        let now = 1_796_049_000_000 / HOUR * HOUR + 30 * 60_000;
        let this_hour = now / HOUR;
        let hours = vec![
            (this_hour, "allow".to_owned(), 5),
            (this_hour, "deny".to_owned(), 2),
            (this_hour - 1, "park".to_owned(), 1),
            (this_hour - 1, "dry_run".to_owned(), 1),
            (this_hour - 30, "deny".to_owned(), 7),
            (this_hour - 24 * 9, "allow".to_owned(), 100),
        ];
        let day = activity(&hours, now, HOUR, 24);
        assert_eq!(day.buckets.len(), 24);
        let last = day.buckets[23];
        assert_eq!((last.allowed, last.denied, last.parked), (5, 2, 0));
        let before = day.buckets[22];
        assert_eq!((before.allowed, before.denied, before.parked), (1, 0, 1));
        assert_eq!(
            day.buckets.iter().map(|b| b.denied).sum::<u64>(),
            2,
            "30 h ago is not in the day"
        );
        let week = activity(&hours, now, 24 * HOUR, 7);
        assert_eq!(week.bucket_seconds, 86_400);
        assert_eq!(week.buckets.iter().map(|b| b.denied).sum::<u64>(), 9);
        assert_eq!(
            week.buckets.iter().map(|b| b.allowed).sum::<u64>(),
            6,
            "9 days ago is out"
        );
        assert!(week.start.contains("T00:00:00"), "{}", week.start);
    }
}
