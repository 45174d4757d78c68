//! Tools and upstreams: the catalog with each tool's security descriptor (editable by admins),
//! and the upstream MCP servers with their status and a re-sync that reports what drifted.

use leptos::prelude::*;

use super::{Time, field_error, form_error};
use crate::api::{DescribeTool, SyncUpstream, tools};
use crate::dto::{DescribeToolRequest, ToolRowView, UpstreamView};
use crate::layout::use_me;

/// The Tools page.
#[component]
pub fn ToolsPage() -> impl IntoView {
    let me = use_me();
    let is_admin = me.as_ref().is_some_and(|m| m.can(engine::scope::ADMIN));
    let can_write = me.as_ref().is_some_and(|m| m.can(engine::scope::WRITE));
    let sync = ServerAction::<SyncUpstream>::new();
    // Bumped by a row whose descriptor was saved.
    let saved = RwSignal::new(0u32);
    let data = Resource::new(move || (saved.get(), sync.version().get()), |_| tools());
    view! {
        <h1>"Tools"</h1>
        <p class="lead">
            "The catalog every manifest is built from. Upstream servers own their tools' definitions; "
            "Aperture owns the security descriptor (family, risk labels, required scope). A tool "
            "nobody has described has risk " <code>"unknown"</code> " and the default policy hides it."
        </p>
        <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(v) => {
                        view! {
                            <Upstreams list=v.upstreams can_write sync/>
                            <Catalog list=v.tools is_admin saved/>
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
fn Upstreams(
    list: Vec<UpstreamView>,
    can_write: bool,
    sync: ServerAction<SyncUpstream>,
) -> impl IntoView {
    view! {
        <section aria-labelledby="upstreams-heading">
            <h2 id="upstreams-heading">"Upstream servers"</h2>
            {move || match sync.value().get() {
                Some(Ok(r)) => {
                    let line = |label: &str, names: &[String]| {
                        if names.is_empty() {
                            String::new()
                        } else {
                            format!("{label}: {}. ", names.join(", "))
                        }
                    };
                    let summary = format!(
                        "Re-synced: {} tools. {}{}{}",
                        r.tools,
                        line("New", &r.added),
                        line("Changed (sessions granted before see manifest_drift)", &r.changed),
                        line("Removed", &r.removed),
                    );
                    view! { <p class="success" role="status" data-testid="sync-report">{summary}</p> }
                        .into_any()
                }
                Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                None => ().into_any(),
            }}
            {if list.is_empty() {
                view! {
                    <p class="empty">
                        "No upstream server yet. Register one with " <code>"POST /upstreams"</code>
                        " or " <code>"aperture upstream add"</code> "."
                    </p>
                }
                    .into_any()
            } else {
                view! {
                    <table class="data" data-testid="upstream-table">
                        <thead>
                            <tr>
                                <th scope="col">"Name"</th>
                                <th scope="col">"Transport"</th>
                                <th scope="col">"Endpoint"</th>
                                <th scope="col">"Status"</th>
                                <th scope="col">"Tools"</th>
                                <th scope="col">"Last sync"</th>
                                <th scope="col"><span class="sr-only">"Actions"</span></th>
                            </tr>
                        </thead>
                        <tbody>
                            {list
                                .into_iter()
                                .map(|u| {
                                    let id = u.id.clone();
                                    view! {
                                        <tr data-upstream=u.name.clone() data-status=u.status.clone()>
                                            <td><strong>{u.name.clone()}</strong><div class="muted"><code>{u.id.clone()}</code></div></td>
                                            <td>{u.transport.clone()}</td>
                                            <td><code class="wrap">{u.endpoint.clone()}</code></td>
                                            <td>
                                                <span class=format!("badge status-{}", u.status)>{u.status.clone()}</span>
                                                {u.last_error.clone().map(|e| view! { <div class="error">{e}</div> })}
                                            </td>
                                            <td>{u.tools}</td>
                                            <td><Time value=u.last_synced_at.clone()/></td>
                                            <td>
                                                {can_write
                                                    .then(|| {
                                                        view! {
                                                            <button
                                                                type="button"
                                                                disabled=move || sync.pending().get()
                                                                on:click=move |_| {
                                                                    sync.dispatch(SyncUpstream { id: id.clone() });
                                                                }
                                                            >
                                                                "Re-sync"
                                                            </button>
                                                        }
                                                    })}
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
    .into_any()
}

#[component]
fn Catalog(list: Vec<ToolRowView>, is_admin: bool, saved: RwSignal<u32>) -> impl IntoView {
    view! {
        <section aria-labelledby="catalog-heading">
            <h2 id="catalog-heading">"Catalog"</h2>
            {if list.is_empty() {
                view! { <p class="empty">"The catalog is empty."</p> }.into_any()
            } else {
                view! {
                    <table class="data" data-testid="tool-table">
                        <thead>
                            <tr>
                                <th scope="col">"Tool"</th>
                                <th scope="col">"Version"</th>
                                <th scope="col">"Family"</th>
                                <th scope="col">"Risk"</th>
                                <th scope="col">"Required scope"</th>
                                <th scope="col">"Changed"</th>
                                <th scope="col"><span class="sr-only">"Actions"</span></th>
                            </tr>
                        </thead>
                        <tbody>
                            {list
                                .into_iter()
                                .map(|t| view! { <ToolRow row=t is_admin saved/> })
                                .collect_view()}
                        </tbody>
                    </table>
                }
                    .into_any()
            }}
        </section>
    }
    .into_any()
}

#[component]
fn ToolRow(row: ToolRowView, is_admin: bool, saved: RwSignal<u32>) -> impl IntoView {
    let describe = ServerAction::<DescribeTool>::new();
    let price_error = RwSignal::new(None::<String>);
    let t = row.tool;
    let editing = RwSignal::new(false);
    let labels = t
        .risk_labels()
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let family = RwSignal::new(t.family.clone().unwrap_or_default());
    let risk = RwSignal::new(t.risk.join(", "));
    let scope = RwSignal::new(t.required_scope.clone().unwrap_or_default());
    let price = RwSignal::new(t.price_cents.map(|p| p.to_string()).unwrap_or_default());
    let name = t.name.clone();
    let key = t.name.replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    let result = move || describe.value().get();
    let result2 = result;
    let on_submit = {
        let name = name.clone();
        let version = t.version.clone();
        let dry = t.dry_run_argument.clone();
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            let text =
                |s: RwSignal<String>| Some(s.get().trim().to_owned()).filter(|v| !v.is_empty());
            let price_cents = match text(price).map(|p| p.parse::<u64>()) {
                None => None,
                Some(Ok(n)) => Some(n),
                Some(Err(_)) => {
                    price_error.set(Some("a whole number of cents".into()));
                    return;
                }
            };
            price_error.set(None);
            describe.dispatch(DescribeTool {
                name: name.clone(),
                request: DescribeToolRequest {
                    family: text(family),
                    risk: risk
                        .get()
                        .split(|c: char| c == ',' || c.is_whitespace())
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    required_scope: text(scope),
                    version: Some(version.clone()),
                    dry_run_argument: dry.clone(),
                    price_cents,
                },
            });
        }
    };
    // A successful save closes the form and reloads the catalog.
    Effect::new(move |_| {
        if let Some(Ok(_)) = result2() {
            editing.set(false);
            saved.update(|n| *n += 1);
        }
    });
    let source = match &t.source {
        engine::descriptor::ToolSource::Mcp { server, tool, .. } => {
            format!("{server} → {tool}")
        }
        _ => "built in".to_owned(),
    };
    view! {
        <tr data-tool=t.name.clone()>
            <td>
                <code>{t.name.clone()}</code>
                <div class="muted">{source}</div>
                {t.description.clone().map(|d| view! { <div class="muted">{d}</div> })}
            </td>
            <td><code>{t.version.clone()}</code></td>
            <td>{t.family.clone().unwrap_or_else(|| "—".into())}</td>
            <td data-testid="risk">
                {labels
                    .into_iter()
                    .map(|l| {
                        let class = format!("chip risk-{l}");
                        view! { <span class=class>{l}</span> }
                    })
                    .collect_view()}
            </td>
            <td>{t.required_scope.clone().map(|s| view! { <code>{s}</code> })}</td>
            <td><Time value=Some(row.updated_at)/></td>
            <td>
                {is_admin
                    .then(|| {
                        view! {
                            <button
                                type="button"
                                aria-expanded=move || editing.get().to_string()
                                on:click=move |_| editing.update(|e| *e = !*e)
                            >
                                "Edit descriptor"
                            </button>
                        }
                    })}
            </td>
        </tr>
        <Show when=move || editing.get()>
            <tr class="edit-row">
                <td colspan="7">
                    <form class="descriptor" on:submit=on_submit.clone() novalidate>
                        <div class="row">
                            <div class="field">
                                <label for=format!("{key}-family")>"Family"</label>
                                <input
                                    type="text"
                                    id=format!("{key}-family")
                                    prop:value=move || family.get()
                                    on:input=move |ev| family.set(event_target_value(&ev))
                                />
                                <p class="field-error">{let r = result; move || field_error(r().as_ref(), "family")}</p>
                            </div>
                            <div class="field">
                                <label for=format!("{key}-risk")>"Risk labels (comma separated)"</label>
                                <input
                                    type="text"
                                    id=format!("{key}-risk")
                                    placeholder="read, pii"
                                    prop:value=move || risk.get()
                                    on:input=move |ev| risk.set(event_target_value(&ev))
                                />
                                <p class="field-error">{let r = result; move || field_error(r().as_ref(), "risk")}</p>
                            </div>
                            <div class="field">
                                <label for=format!("{key}-scope")>"Required scope"</label>
                                <input
                                    type="text"
                                    id=format!("{key}-scope")
                                    placeholder="github:read"
                                    prop:value=move || scope.get()
                                    on:input=move |ev| scope.set(event_target_value(&ev))
                                />
                                <p class="field-error">{let r = result; move || field_error(r().as_ref(), "required_scope")}</p>
                            </div>
                            <div class="field">
                                <label for=format!("{key}-price")>"Price per call (cents)"</label>
                                <input
                                    type="text"
                                    id=format!("{key}-price")
                                    prop:value=move || price.get()
                                    on:input=move |ev| price.set(event_target_value(&ev))
                                />
                                <p class="field-error">{move || price_error.get().or_else(|| field_error(result().as_ref(), "price_cents"))}</p>
                            </div>
                        </div>
                        <p class="form-error" role="alert">{let r = result; move || form_error(r().as_ref())}</p>
                        <div class="save-bar">
                            <button type="submit" disabled=move || describe.pending().get()>"Save descriptor"</button>
                            <button type="button" on:click=move |_| editing.set(false)>"Cancel"</button>
                        </div>
                    </form>
                </td>
            </tr>
        </Show>
    }
    .into_any()
}
