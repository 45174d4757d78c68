//! Receipts as a service: the filtered, cursor-paginated search behind `GET /receipts` and the
//! dashboard's browser, one record with its chain neighbours, and the JSON-lines export.

use aperture_types::dto::{
    ChainNeighbour, ReceiptDetail, ReceiptPage, ReceiptQuery, ReceiptRowView,
};
use aperture_types::error::AppError;
use engine::scope;
use serde_json::Value;

use crate::error::ServiceError;
use crate::journal::Journal;
use crate::principal::Principal;
use crate::store::{self, Store, journal::ReceiptFilter, journal::RecordRow};

/// Largest page.
pub const MAX_PAGE: i64 = 500;

/// A time filter: RFC 3339, or `YYYY-MM-DDTHH:MM[:SS]` without a zone (a browser's
/// `datetime-local` input), read as UTC.
fn time(field: &str, value: Option<&str>) -> Result<Option<i64>, AppError> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let parsed = store::parse_rfc3339(v).or_else(|| {
        let with_seconds = if v.len() == 16 {
            format!("{v}:00")
        } else {
            v.to_owned()
        };
        store::parse_rfc3339(&format!("{with_seconds}Z"))
    });
    parsed
        .map(Some)
        .ok_or_else(|| AppError::invalid_field(field, "a date and time (RFC 3339)"))
}

fn text(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// The store filter of a query (validated: times parse, the cursor is one we issued).
pub fn filter(query: ReceiptQuery) -> Result<ReceiptFilter, AppError> {
    let before_seq = text(query.cursor)
        .map(|c| {
            c.parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| AppError::invalid_field("cursor", "a cursor from next_cursor"))
        })
        .transpose()?;
    Ok(ReceiptFilter {
        decision: text(query.decision),
        reason: text(query.reason),
        tool: text(query.tool),
        session_id: text(query.session_id),
        actor_id: text(query.actor_id),
        since: time("since", query.since.as_deref())?,
        until: time("until", query.until.as_deref())?,
        before_seq,
        environments: None,
    })
}

/// A page of stored records matching `filter`, newest first, and the cursor of the next page.
pub async fn search(
    store: &Store,
    principal: &Principal,
    filter: &ReceiptFilter,
    limit: i64,
) -> Result<(Vec<RecordRow>, Option<String>), ServiceError> {
    principal.require(scope::READ)?;
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(AppError::invalid_field("limit", "between 1 and 500").into());
    }
    // A confined reader reads its environments' records (and those of no session) only.
    let confined;
    let filter = match principal.confined_to() {
        None => filter,
        Some(environments) => {
            confined = ReceiptFilter {
                environments: Some(environments.to_vec()),
                ..filter.clone()
            };
            &confined
        }
    };
    let mut rows = store::journal::search(store, &principal.tenant_id, filter, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(0));
    let next_cursor = more
        .then(|| rows.last().map(|r| r.seq.to_string()))
        .flatten();
    Ok((rows, next_cursor))
}

fn row_view(row: &RecordRow) -> Option<ReceiptRowView> {
    let r: Value = serde_json::from_str(&row.receipt).ok()?;
    let s = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(ReceiptRowView {
        receipt_id: s("receipt_id")?,
        seq: row.seq,
        kind: s("kind").unwrap_or_default(),
        decision: s("decision").unwrap_or_default(),
        reason: s("reason").unwrap_or_default(),
        tool: s("tool"),
        actor_id: s("actor_id").unwrap_or_default(),
        session_id: s("session_id"),
        issued_at: s("issued_at").unwrap_or_default(),
    })
}

/// The dashboard's page of receipts (50 at a time).
pub async fn page(
    store: &Store,
    principal: &Principal,
    query: ReceiptQuery,
) -> Result<ReceiptPage, ServiceError> {
    let filter = filter(query)?;
    let (rows, next_cursor) = search(store, principal, &filter, 50).await?;
    Ok(ReceiptPage {
        rows: rows.iter().filter_map(row_view).collect(),
        next_cursor,
    })
}

/// Whether `principal` may read record `row`: one of no session (or of a session that does not
/// exist: a refusal of a made-up id) is tenant-wide; one of a session only in the session's
/// environment, for a confined reader (CONTRACT §15).
pub async fn visible(
    store: &Store,
    principal: &Principal,
    row: &RecordRow,
) -> Result<bool, ServiceError> {
    if principal.confined_to().is_none() {
        return Ok(true);
    }
    let Some(session_id) = &row.columns.session_id else {
        return Ok(true);
    };
    Ok(
        store::exposure::find_session(store, &principal.tenant_id, session_id)
            .await?
            .is_none_or(|s| principal.sees(&s.environment)),
    )
}

/// `GET /receipts/{id}`: the receipt, its disclosures and its position in the chain, when
/// `principal` may read it (else 404, as for an id that does not exist).
pub async fn get(store: &Store, principal: &Principal, id: &str) -> Result<Value, ServiceError> {
    let row = store::journal::by_receipt_id(store, &principal.tenant_id, id)
        .await?
        .ok_or_else(|| AppError::not_found("receipt"))?;
    if !visible(store, principal, &row).await? {
        return Err(AppError::not_found("receipt").into());
    }
    let receipt: Value =
        serde_json::from_str(&row.receipt).map_err(|e| ServiceError::Other(e.into()))?;
    let disclosures: Value =
        serde_json::from_str(&row.disclosures).map_err(|e| ServiceError::Other(e.into()))?;
    Ok(serde_json::json!({
        "receipt": receipt,
        "disclosures": disclosures,
        "seq": row.seq,
        "record_hash": row.record_hash,
    }))
}

fn neighbour(row: RecordRow) -> ChainNeighbour {
    let r: Value = serde_json::from_str(&row.receipt).unwrap_or(Value::Null);
    ChainNeighbour {
        seq: row.seq,
        receipt_id: r
            .get("receipt_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        record_hash: row.record_hash,
        prev_hash: r
            .get("prev_hash")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// One receipt, its disclosures, its neighbours in the chain and the keys to verify it with.
pub async fn detail(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    receipt_id: &str,
) -> Result<ReceiptDetail, ServiceError> {
    principal.require(scope::READ)?;
    let tenant = &principal.tenant_id;
    let row = store::journal::by_receipt_id(store, tenant, receipt_id)
        .await?
        .ok_or_else(|| AppError::not_found("receipt"))?;
    if !visible(store, principal, &row).await? {
        return Err(AppError::not_found("receipt").into());
    }
    let previous = store::journal::page(store, tenant, row.seq - 2, 1)
        .await?
        .into_iter()
        .find(|r| r.seq == row.seq - 1)
        .map(neighbour);
    let next = store::journal::page(store, tenant, row.seq, 1)
        .await?
        .into_iter()
        .find(|r| r.seq == row.seq + 1)
        .map(neighbour);
    let disclosures =
        serde_json::from_str(&row.disclosures).map_err(|e| ServiceError::Other(e.into()))?;
    Ok(ReceiptDetail {
        receipt: row.receipt,
        disclosures,
        seq: row.seq,
        record_hash: row.record_hash,
        previous,
        next,
        keys: journal.keys().published().await?,
        columns: row.columns,
    })
}

/// Most records one export holds.
pub const MAX_EXPORT: usize = 100_000;

/// Every receipt `principal` may see matching `query`, newest first, one signed receipt per
/// line, read page by page as the stream is polled (at most [`MAX_EXPORT`]). A failure midway
/// ends the stream with an error (the download is visibly short) and is logged.
pub fn export(
    store: Store,
    principal: Principal,
    query: ReceiptQuery,
) -> Result<impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send, AppError> {
    principal.require(scope::READ)?;
    let first = filter(query)?;
    struct Cursor {
        filter: Option<ReceiptFilter>,
        sent: usize,
    }
    let start = Cursor {
        filter: Some(first),
        sent: 0,
    };
    Ok(futures_util::stream::unfold(start, move |mut cursor| {
        let store = store.clone();
        let principal = principal.clone();
        async move {
            let filter = cursor.filter.take()?;
            if cursor.sent >= MAX_EXPORT {
                return None;
            }
            let room = i64::try_from((MAX_EXPORT - cursor.sent).min(500)).unwrap_or(500);
            match search(&store, &principal, &filter, room).await {
                Ok((rows, next)) => {
                    let mut chunk = Vec::new();
                    for row in &rows {
                        chunk.extend_from_slice(row.receipt.as_bytes());
                        chunk.push(b'\n');
                    }
                    cursor.sent += rows.len();
                    cursor.filter = next
                        .and_then(|n| n.parse().ok())
                        .map(|before| ReceiptFilter {
                            before_seq: Some(before),
                            ..filter
                        });
                    Some((Ok::<_, std::io::Error>(chunk), cursor))
                }
                Err(e) => {
                    // Headers are gone: end the body short (the client sees a truncated
                    // download rather than a silent success) and log why.
                    tracing::error!(error = %e, "receipts export failed midway");
                    Some((Err(std::io::Error::other("export failed")), cursor))
                }
            }
        }
    }))
}
