//! Receipts: the journal's signed records, filtered and paged newest first (keyset pagination
//! on the journal position, so page 2,000 costs what page 1 costs), exported as JSON lines, and
//! one record at a time with its signature and chain links verified in the browser.

use leptos::prelude::*;
use leptos_router::components::Form;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::Time;
use crate::api::{receipt, receipts};
use crate::dto::{ReceiptDetail, ReceiptQuery, ReceiptRowView};

/// The query string of `q` (empty filters left out).
fn query_string(q: &ReceiptQuery) -> String {
    serde_urlencoded::to_string(q).unwrap_or_default()
}

/// The Receipts page.
#[component]
pub fn ReceiptsPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| {
        params.with(|m| {
            let get = |k: &str| m.get(k).filter(|v| !v.is_empty());
            ReceiptQuery {
                decision: get("decision"),
                reason: get("reason"),
                tool: get("tool"),
                actor_id: get("actor_id"),
                session_id: get("session_id"),
                since: get("since"),
                until: get("until"),
                cursor: get("cursor"),
            }
        })
    });
    let page = Resource::new(move || query.get(), receipts);
    let value = move |f: fn(&ReceiptQuery) -> &Option<String>| {
        move || query.with(|q| f(q).clone().unwrap_or_default())
    };
    let export = move || {
        let q = ReceiptQuery {
            cursor: None,
            ..query.get()
        };
        format!("/ui/receipts/export.jsonl?{}", query_string(&q))
    };
    view! {
        <h1>"Receipts"</h1>
        <p class="lead">
            "Every decision Aperture made, signed and hash-chained in the tenant's journal. "
            "Open a receipt to check its signature in your browser."
        </p>
        <Form method="GET" action="/receipts" attr:class="panel filters" attr:aria-label="Filters">
            <div class="row">
                <div class="field">
                    <label for="f-decision">"Decision"</label>
                    <select id="f-decision" name="decision" prop:value=value(|q| &q.decision)>
                        <option value="">"any"</option>
                        {engine::receipt::Decision::ALL
                            .into_iter()
                            .map(|d| {
                                let d = d.as_str();
                                view! {
                                    <option value=d selected=move || value(|q| &q.decision)() == d>
                                        {d}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                </div>
                <div class="field">
                    <label for="f-reason">"Reason"</label>
                    <select id="f-reason" name="reason" prop:value=value(|q| &q.reason)>
                        <option value="">"any"</option>
                        {engine::receipt::ReasonCode::ALL
                            .into_iter()
                            .map(|r| {
                                let r = r.as_str();
                                view! {
                                    <option value=r selected=move || value(|q| &q.reason)() == r>
                                        {r}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                </div>
                <div class="field">
                    <label for="f-tool">"Tool"</label>
                    <input type="text" id="f-tool" name="tool" value=value(|q| &q.tool) prop:value=value(|q| &q.tool)/>
                </div>
                <div class="field">
                    <label for="f-actor">"Actor"</label>
                    <input type="text" id="f-actor" name="actor_id" value=value(|q| &q.actor_id) prop:value=value(|q| &q.actor_id)/>
                </div>
                <div class="field">
                    <label for="f-session">"Session"</label>
                    <input
                        type="text"
                        id="f-session"
                        name="session_id"
                        value=value(|q| &q.session_id)
                        prop:value=value(|q| &q.session_id)
                    />
                </div>
                <div class="field">
                    <label for="f-since">"From (UTC)"</label>
                    <input
                        type="datetime-local"
                        id="f-since"
                        name="since"
                        value=value(|q| &q.since)
                        prop:value=value(|q| &q.since)
                    />
                </div>
                <div class="field">
                    <label for="f-until">"Until (UTC)"</label>
                    <input
                        type="datetime-local"
                        id="f-until"
                        name="until"
                        value=value(|q| &q.until)
                        prop:value=value(|q| &q.until)
                    />
                </div>
            </div>
            <div class="save-bar">
                <button type="submit">"Apply filters"</button>
                <a href="/receipts">"Clear"</a>
                <a href=export download="aperture-receipts.jsonl" class="push-right">
                    "Export these as JSON lines"
                </a>
            </div>
        </Form>
        <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) if p.rows.is_empty() => {
                        view! { <p class="empty">"No receipt matches these filters."</p> }.into_any()
                    }
                    Ok(p) => {
                        let older = p
                            .next_cursor
                            .clone()
                            .map(|c| {
                                let q = ReceiptQuery {
                                    cursor: Some(c),
                                    ..query.get_untracked()
                                };
                                format!("/receipts?{}", query_string(&q))
                            });
                        let newest = query
                            .with_untracked(|q| q.cursor.is_some())
                            .then(|| {
                                let q = ReceiptQuery {
                                    cursor: None,
                                    ..query.get_untracked()
                                };
                                format!("/receipts?{}", query_string(&q))
                            });
                        view! {
                            <ReceiptTable rows=p.rows/>
                            <nav class="pager" aria-label="Pages">
                                {newest.map(|h| view! { <a href=h>"← Newest"</a> })}
                                {older.map(|h| view! { <a href=h rel="next">"Older →"</a> })}
                            </nav>
                        }
                            .into_any()
                    }
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

#[component]
fn ReceiptTable(rows: Vec<ReceiptRowView>) -> impl IntoView {
    view! {
        <table class="data" data-testid="receipt-table">
            <thead>
                <tr>
                    <th scope="col">"#"</th>
                    <th scope="col">"Issued"</th>
                    <th scope="col">"Kind"</th>
                    <th scope="col">"Decision"</th>
                    <th scope="col">"Reason"</th>
                    <th scope="col">"Tool"</th>
                    <th scope="col">"Actor"</th>
                    <th scope="col">"Session"</th>
                </tr>
            </thead>
            <tbody>
                {rows
                    .into_iter()
                    .map(|r| {
                        view! {
                            <tr data-receipt-id=r.receipt_id.clone() data-decision=r.decision.clone()>
                                <td>
                                    <a href=format!("/receipts/{}", r.receipt_id)>{r.seq}</a>
                                </td>
                                <td><Time value=Some(r.issued_at)/></td>
                                <td>{r.kind}</td>
                                <td>
                                    <span class=format!("badge decision-{}", r.decision)>{r.decision.clone()}</span>
                                </td>
                                <td><code>{r.reason}</code></td>
                                <td>{r.tool.map(|t| view! { <code>{t}</code> })}</td>
                                <td>{r.actor_id}</td>
                                <td>{r.session_id.map(|s| view! { <code class="muted">{s}</code> })}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// `/receipts/{id}`.
#[component]
pub fn ReceiptDetailPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let data = Resource::new(id, receipt);
    view! {
        <p><a href="/receipts">"← All receipts"</a></p>
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <Detail d/> }.into_any(),
                    Err(e) => {
                        // An unknown receipt (another tenant's looks the same) is a 404 page.
                        #[cfg(feature = "ssr")]
                        if e.code == aperture_types::error::ErrorCode::NotFound
                            && let Some(resp) = use_context::<leptos_axum::ResponseOptions>()
                        {
                            resp.set_status(axum::http::StatusCode::NOT_FOUND);
                        }
                        view! {
                            <h1>"Receipt"</h1>
                            <p class="error" role="alert">{e.message}</p>
                        }
                            .into_any()
                    }
                }
            })}
        </Suspense>
    }
    .into_any()
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

#[component]
fn Detail(d: ReceiptDetail) -> impl IntoView {
    let value: serde_json::Value = serde_json::from_str(&d.receipt).unwrap_or_default();
    let s = |k: &str| {
        value
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    // The signed bytes: the receipt's JCS form without its `signature` member.
    let canonical = {
        let mut unsigned = value.clone();
        if let Some(m) = unsigned.as_object_mut() {
            m.remove("signature");
        }
        String::from_utf8(engine::canonical::value_bytes(&unsigned)).unwrap_or_default()
    };
    // Checked after hydration, by the wasm engine: the server's word is not the proof.
    let checks = RwSignal::new(None::<Vec<crate::verify::Check>>);
    {
        let d = d.clone();
        Effect::new(move |_| checks.set(Some(crate::verify::checks(&d))));
    }
    let decision = s("decision");
    view! {
        <h1>"Receipt " <code>{s("receipt_id")}</code></h1>
        <p>
            <span class=format!("badge decision-{decision}")>{decision.clone()}</span>
            " " <code>{s("reason")}</code> " · " {s("kind")} " · " <Time value=Some(s("issued_at"))/>
        </p>
        <section class="panel" aria-labelledby="verify-heading" data-testid="verification">
            <h2 id="verify-heading">"Verification (in your browser)"</h2>
            {move || match checks.get() {
                None => {
                    view! { <p class="muted" data-testid="verdict">"Checking the signature in your browser…"</p> }
                        .into_any()
                }
                Some(list) => {
                    let all = list.iter().all(|c| c.ok);
                    view! {
                        <p
                            class=if all { "verdict success" } else { "verdict error" }
                            data-testid="verdict"
                            role="status"
                        >
                            {if all {
                                "Valid: signature, stored columns, record hash and chain links all check out."
                            } else {
                                "Invalid: this receipt does not verify."
                            }}
                        </p>
                        <ul class="checks">
                            {list
                                .into_iter()
                                .map(|c| {
                                    view! {
                                        <li class=if c.ok { "ok" } else { "bad" } data-check=c.name>
                                            <strong>{if c.ok { "✓ " } else { "✗ " }} {c.name}</strong>
                                            ": "
                                            {c.detail}
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ul>
                    }
                        .into_any()
                }
            }}
        </section>
        <section class="panel" aria-labelledby="chain-heading">
            <h2 id="chain-heading">"Position in the journal"</h2>
            <dl class="facts">
                <dt>"Record"</dt>
                <dd data-testid="seq">{d.seq}</dd>
                <dt>"Record hash"</dt>
                <dd><code>{d.record_hash.clone()}</code></dd>
                <dt>"Previous hash"</dt>
                <dd><code>{s("prev_hash")}</code></dd>
                <dt>"Previous record"</dt>
                <dd>
                    {match d.previous.clone() {
                        Some(p) => view! { <a href=format!("/receipts/{}", p.receipt_id)>{format!("#{}", p.seq)}</a> }.into_any(),
                        None => view! { <span class="muted">"none (first record)"</span> }.into_any(),
                    }}
                </dd>
                <dt>"Next record"</dt>
                <dd>
                    {match d.next.clone() {
                        Some(n) => view! { <a href=format!("/receipts/{}", n.receipt_id)>{format!("#{}", n.seq)}</a> }.into_any(),
                        None => view! { <span class="muted">"none yet (latest record)"</span> }.into_any(),
                    }}
                </dd>
            </dl>
        </section>
        <section aria-labelledby="canonical-heading">
            <h2 id="canonical-heading">"Canonical JSON (RFC 8785), as signed"</h2>
            <p class="muted">"The bytes the signature covers: the receipt without its " <code>"signature"</code> " member, in RFC 8785 form."</p>
            <pre class="json wrap" data-testid="canonical">{canonical}</pre>
        </section>
        <details>
            <summary>"Receipt, formatted"</summary>
            <pre class="json">{pretty(&value)}</pre>
        </details>
        <section aria-labelledby="disclosures-heading">
            <h2 id="disclosures-heading">"Disclosures"</h2>
            <p class="muted">
                "What the caller never sees: the matched rule, hidden reasons and argument values. "
                "The receipt carries only their salted digest."
            </p>
            <pre class="json">{pretty(&d.disclosures)}</pre>
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_carry_only_the_filters_that_are_set_encoded() {
        let q = ReceiptQuery {
            actor_id: Some("a b&c".into()),
            cursor: Some("5".into()),
            ..ReceiptQuery::default()
        };
        assert_eq!(query_string(&q), "actor_id=a+b%26c&cursor=5");
        assert_eq!(query_string(&ReceiptQuery::default()), "");
    }
}
