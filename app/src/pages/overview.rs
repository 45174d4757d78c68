//! The page after sign-in: decisions over time, the top deny reasons, calls waiting for a
//! person, and whether the journal chain verifies.

use leptos::prelude::*;

use super::Time;
use crate::api::overview;
use crate::dto::{Activity, ChainView, CheckpointRow, Overview};

/// The overview.
#[component]
pub fn OverviewPage() -> impl IntoView {
    let data = Resource::new(|| (), |_| overview());
    view! {
        <h1>"Overview"</h1>
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(o) => view! { <Figures o/> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
    .into_any()
}

#[component]
fn Figures(o: Overview) -> impl IntoView {
    let read = o.can_read;
    view! {
        {read
            .then(|| {
                view! {
                    <section class="cards">
                        <ChainCard chain=o.chain.clone()/>
                        <CheckpointCard checkpoint=o.checkpoint.clone() now=o.now.clone()/>
                        <div class="card" data-testid="waiting-card">
                            <h2>"Waiting for a person"</h2>
                            <p class="figure" data-testid="waiting">{o.waiting}</p>
                            {match o.oldest_waiting.clone() {
                                Some(call) => {
                                    view! {
                                        <p class="muted" data-testid="oldest-waiting">
                                            "longest waiting: "
                                            <a href=format!("/approvals#{}", call.invocation_id)>
                                                <code>{call.tool}</code>
                                            </a>
                                            " by " {call.actor_id} ", parked " <Time value=Some(call.created_at)/>
                                            {call
                                                .expires_at
                                                .map(|t| view! { ", expires " <Time value=Some(t)/> })}
                                        </p>
                                    }
                                        .into_any()
                                }
                                None => view! { <p class="muted">"nothing parked"</p> }.into_any(),
                            }}
                            <a href="/approvals">"Open approvals"</a>
                        </div>
                        <div class="card">
                            <h2>"Active API tokens"</h2>
                            <p class="figure" data-testid="active-tokens">{o.active_tokens}</p>
                            <a href="/tokens">"Manage tokens"</a>
                        </div>
                        <div class="card">
                            <h2>"Dashboard users"</h2>
                            <p class="figure">{o.users}</p>
                            <a href="/users">"Manage users"</a>
                        </div>
                    </section>
                    <section aria-labelledby="day-heading">
                        <h2 id="day-heading">"Decisions, last 24 hours"</h2>
                        <DecisionChart activity=o.last_day.clone() id="day" period="the last 24 hours"/>
                    </section>
                    <section aria-labelledby="week-heading">
                        <h2 id="week-heading">"Decisions, last 7 days"</h2>
                        <DecisionChart activity=o.last_week.clone() id="week" period="the last 7 days"/>
                    </section>
                    <section aria-labelledby="reasons-heading">
                        <h2 id="reasons-heading">"Top deny reasons, last 7 days"</h2>
                        {if o.top_deny_reasons.is_empty() {
                            view! { <p class="empty">"No denials in the last 7 days."</p> }.into_any()
                        } else {
                            let max = o.top_deny_reasons.iter().map(|r| r.count).max().unwrap_or(1).max(1);
                            view! {
                                <table class="data bars" data-testid="deny-reasons">
                                    <thead>
                                        <tr>
                                            <th scope="col">"Reason"</th>
                                            <th scope="col">"Denials"</th>
                                        </tr>
                                    </thead>
                                    <tbody>
                                        {o
                                            .top_deny_reasons
                                            .clone()
                                            .into_iter()
                                            .map(|r| {
                                                // An SVG shape's width is an attribute, not a
                                                // style: the page's policy allows no inline style.
                                                let width = (r.count * 100 / max).max(1).to_string();
                                                view! {
                                                    <tr data-reason=r.reason.clone()>
                                                        <td>
                                                            <a href=format!("/receipts?decision=deny&reason={}", r.reason)>
                                                                <code>{r.reason.clone()}</code>
                                                            </a>
                                                        </td>
                                                        <td class="bar-cell">
                                                            <svg
                                                                class="bar"
                                                                viewBox="0 0 100 10"
                                                                preserveAspectRatio="none"
                                                                aria-hidden="true"
                                                            >
                                                                <rect width=width height="10" rx="1"></rect>
                                                            </svg>
                                                            <span class="n">{r.count}</span>
                                                        </td>
                                                    </tr>
                                                }
                                            })
                                            .collect_view()}
                                    </tbody>
                                </table>
                            }
                                .into_any()
                        }}
                    </section>
                }
            })}
        {(!read)
            .then(|| {
                view! {
                    <section class="cards">
                        <div class="card">
                            <h2>"Active API tokens"</h2>
                            <p class="figure" data-testid="active-tokens">{o.active_tokens}</p>
                        </div>
                    </section>
                    <p class="notice" role="status">
                        "Decisions, approvals and the journal need the scope "
                        <code>"agent_tool_exposure:read"</code> "."
                    </p>
                }
            })}
        <section>
            <h2>"Your access"</h2>
            <p>
                "Signed in as " <strong>{o.me.username.clone()}</strong> " in tenant "
                <strong>{o.me.tenant_id.clone()}</strong> "."
            </p>
            <ul class="scope-list">
                {o.me.scopes.clone().into_iter().map(|s| view! { <li><code>{s}</code></li> }).collect_view()}
            </ul>
        </section>
    }
    .into_any()
}

#[component]
fn ChainCard(chain: Option<ChainView>) -> impl IntoView {
    let body = match chain {
        None => view! {
            <p class="figure muted">"…"</p>
            <p class="muted" data-testid="chain-status">"First verification in progress."</p>
        }
        .into_any(),
        Some(c) if c.first_bad.is_none() => view! {
            <p class="figure ok">"✓"</p>
            <p data-testid="chain-status">
                {if c.verified == 0 {
                    "The journal is empty.".to_owned()
                } else {
                    format!("Verified up to record {}", c.verified)
                }}
            </p>
            <p class="muted">"checked " <Time value=Some(c.checked_at)/></p>
        }
        .into_any(),
        Some(c) => view! {
            <p class="figure bad">"✗"</p>
            <p class="error" data-testid="chain-status" role="alert">
                {format!(
                    "Record {} does not verify: {}",
                    c.first_bad.unwrap_or_default(),
                    c.problem.clone().unwrap_or_default(),
                )}
            </p>
            <p class="muted">
                {format!("Records 1–{} verify. ", c.verified)} "Checked " <Time value=Some(c.checked_at)/>
            </p>
        }
        .into_any(),
    };
    view! {
        <div class="card" data-testid="chain-card">
            <h2>"Journal chain"</h2>
            {body}
            <a href="/receipts">"Browse receipts"</a>
        </div>
    }
    .into_any()
}

#[component]
fn CheckpointCard(checkpoint: Option<CheckpointRow>, now: String) -> impl IntoView {
    let body = match checkpoint {
        None => view! {
            <p class="figure muted">"—"</p>
            <p class="muted" data-testid="checkpoint-status">"No signed checkpoint yet."</p>
        }
        .into_any(),
        Some(c) => {
            let age = super::journal::age(&now, &c.made_at);
            view! {
                <p class="figure">{c.tree_size}</p>
                <p data-testid="checkpoint-status">
                    {format!("records in the latest signed checkpoint, made {age}")}
                </p>
                <p class="muted" data-testid="checkpoint-cosigners">
                    {if c.cosigners.is_empty() {
                        "Not cosigned by a witness yet.".to_owned()
                    } else {
                        format!("Cosigned by {}", c.cosigners.join(", "))
                    }}
                </p>
            }
            .into_any()
        }
    };
    view! {
        <div class="card" data-testid="checkpoint-card">
            <h2>"Signed checkpoint"</h2>
            {body}
            <a href="/journal">"Open the journal"</a>
        </div>
    }
    .into_any()
}

/// The label of bucket `i` (hours as `14:00`, days as `11-30`).
fn bucket_label(a: &Activity, i: usize) -> String {
    // `start` is `YYYY-MM-DDTHH:MM:SS.mmmZ`; buckets are whole hours or days after it.
    let start_ms = super::parse_ms(&a.start).unwrap_or(0);
    let at = start_ms + (i as i64) * (a.bucket_seconds as i64) * 1000;
    let text = super::format_ms(at);
    if a.bucket_seconds >= 86_400 {
        text.get(5..10).unwrap_or_default().to_owned()
    } else {
        text.get(11..16).unwrap_or_default().to_owned()
    }
}

/// Stacked bars of allowed, parked and denied calls per bucket, drawn as SVG on the server.
#[component]
fn DecisionChart(activity: Activity, id: &'static str, period: &'static str) -> impl IntoView {
    let total: u64 = activity
        .buckets
        .iter()
        .map(|b| b.allowed + b.denied + b.parked)
        .sum();
    if total == 0 {
        return view! { <p class="empty" data-testid=format!("chart-{id}-empty")>{format!("No calls in {period}.")}</p> }
            .into_any();
    }
    let (w, h, left, bottom, top) = (720.0_f64, 200.0_f64, 40.0_f64, 22.0_f64, 8.0_f64);
    let n = activity.buckets.len().max(1) as f64;
    let slot = (w - left) / n;
    let bar = (slot * 0.7).max(2.0);
    let max = activity
        .buckets
        .iter()
        .map(|b| b.allowed + b.denied + b.parked)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let y = |v: f64| top + (h - bottom - top) * (1.0 - v / max);
    let sums = activity.buckets.iter().fold((0, 0, 0), |acc, b| {
        (acc.0 + b.allowed, acc.1 + b.denied, acc.2 + b.parked)
    });
    let summary = format!(
        "{} calls in {period}: {} allowed, {} denied, {} waiting for a person.",
        total, sums.0, sums.1, sums.2
    );
    let label_every = if activity.buckets.len() > 12 { 3 } else { 1 };
    let bars = activity
        .buckets
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let x = left + slot * i as f64 + (slot - bar) / 2.0;
            let mut base = 0.0;
            let mut rects = Vec::new();
            for (v, class) in [
                (b.allowed, "allowed"),
                (b.parked, "parked"),
                (b.denied, "denied"),
            ] {
                if v == 0 {
                    continue;
                }
                let y0 = y(base);
                let y1 = y(base + v as f64);
                base += v as f64;
                rects.push(view! {
                    <rect class=class x=format!("{x:.1}") y=format!("{y1:.1}") width=format!("{bar:.1}") height=format!("{:.1}", (y0 - y1).max(0.5))/>
                });
            }
            let label = bucket_label(&activity, i);
            let tip = format!(
                "{label}: {} allowed, {} denied, {} waiting",
                b.allowed, b.denied, b.parked
            );
            let text = (i % label_every == 0).then(|| {
                view! {
                    <text class="axis" x=format!("{:.1}", x + bar / 2.0) y=format!("{:.1}", h - 6.0) text-anchor="middle">
                        {label.clone()}
                    </text>
                }
            });
            view! {
                <g>
                    <title>{tip}</title>
                    {rects}
                    {text}
                </g>
            }
        })
        .collect_view();
    let grid = [0.0, 0.5, 1.0]
        .into_iter()
        .map(|f| {
            let v = (max * f).round();
            let yy = y(v);
            view! {
                <line class="grid" x1=format!("{left:.1}") x2=format!("{w:.1}") y1=format!("{yy:.1}") y2=format!("{yy:.1}")/>
                <text class="axis" x=format!("{:.1}", left - 6.0) y=format!("{:.1}", yy + 4.0) text-anchor="end">{v as u64}</text>
            }
        })
        .collect_view();
    let title_id = format!("chart-{id}-title");
    let labelled_by = title_id.clone();
    let rows = activity
        .buckets
        .iter()
        .enumerate()
        .map(|(i, b)| {
            view! {
                <tr>
                    <td>{bucket_label(&activity, i)}</td>
                    <td>{b.allowed}</td>
                    <td>{b.denied}</td>
                    <td>{b.parked}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <figure class="chart" data-testid=format!("chart-{id}")>
            <svg viewBox=format!("0 0 {w} {h}") role="img" aria-labelledby=labelled_by>
                <title id=title_id>{summary.clone()}</title>
                {grid}
                {bars}
            </svg>
            <figcaption>
                <span class="key allowed">"allowed"</span>
                <span class="key parked">"waiting for a person"</span>
                <span class="key denied">"denied"</span>
                <span class="muted" data-testid=format!("chart-{id}-summary")>{summary}</span>
            </figcaption>
            <details>
                <summary>"As a table"</summary>
                <table class="data compact">
                    <thead>
                        <tr>
                            <th scope="col">"Period (UTC)"</th>
                            <th scope="col">"Allowed"</th>
                            <th scope="col">"Denied"</th>
                            <th scope="col">"Waiting"</th>
                        </tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
            </details>
        </figure>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_round_trip() {
        let ms = 1_796_049_584_000;
        assert_eq!(
            super::super::parse_ms(&super::super::format_ms(ms)),
            Some(ms)
        );
        assert_eq!(
            super::super::parse_ms("2000-03-01T00:00:00.000Z"),
            Some(951_868_800_000)
        );
    }
}
