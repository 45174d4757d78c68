//! Tools and upstreams: tools whose change an upstream made is held for review (a side-by-side
//! diff with hidden characters made visible, Accept / Keep held), the catalog with each tool's
//! security descriptor (editable by admins) and the flags its definition raises, the upstream
//! MCP servers with their status and a re-sync that reports what drifted, and their resources,
//! templates and prompts (held ones first, with the same diff and decisions).

use leptos::prelude::*;

use super::{Time, field_error, form_error};
use crate::api::{DecideItemChange, DecideToolChange, DescribeTool, SyncUpstream, tools};
use crate::dto::{CatalogItemView, DescribeToolRequest, HeldView, ToolRowView, UpstreamView};
use crate::layout::use_me;

/// The Tools page.
#[component]
pub fn ToolsPage() -> impl IntoView {
    let me = use_me();
    let is_admin = me.as_ref().is_some_and(|m| m.can(engine::scope::ADMIN));
    let can_write = me.as_ref().is_some_and(|m| m.can(engine::scope::WRITE));
    let sync = ServerAction::<SyncUpstream>::new();
    // Bumped by a row whose descriptor was saved, or a held change decided.
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
                        let held: Vec<ToolRowView> = v
                            .tools
                            .iter()
                            .filter(|t| t.held.is_some())
                            .cloned()
                            .collect();
                        view! {
                            <Held list=held is_admin saved/>
                            <Upstreams list=v.upstreams can_write sync/>
                            <Catalog list=v.tools is_admin saved/>
                            <Items list=v.items is_admin saved/>
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
                    ) + &line(
                        "Held for review",
                        &r.held.iter().map(|h| format!("{} ({})", h.tool, h.changes.join(", "))).collect::<Vec<_>>(),
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

/// Tools held for review, those still asking first.
#[component]
fn Held(list: Vec<ToolRowView>, is_admin: bool, saved: RwSignal<u32>) -> impl IntoView {
    if list.is_empty() {
        return ().into_any();
    }
    let mut list = list;
    list.sort_by_key(|t| t.held.as_ref().is_some_and(|h| h.kept));
    view! {
        <section aria-labelledby="held-heading" data-testid="held">
            <h2 id="held-heading">"Held for review"</h2>
            <p class="lead">
                "An upstream changed these tools in a way this tenant holds for review. They are left "
                "out of every new manifest, and calls under older grants are refused ("
                <code>"manifest_drift"</code> "), until an admin accepts the change."
            </p>
            <ul class="held-list">
                {list.into_iter().map(|t| view! { <HeldTool row=t is_admin saved/> }).collect_view()}
            </ul>
        </section>
    }
    .into_any()
}

/// One held tool: the classes found, the accepted and the offered definition side by side.
#[component]
fn HeldTool(row: ToolRowView, is_admin: bool, saved: RwSignal<u32>) -> impl IntoView {
    let Some(held) = row.held.clone() else {
        return ().into_any();
    };
    let decide = ServerAction::<DecideToolChange>::new();
    Effect::new(move |_| {
        if let Some(Ok(_)) = decide.value().get() {
            saved.update(|n| *n += 1);
        }
    });
    let error = move || match decide.value().get() {
        Some(Err(e)) => Some(e.message),
        _ => None,
    };
    let name = row.tool.name.clone();
    let hash = held.definition_hash.clone();
    let dispatch = move |decision: &'static str| {
        decide.dispatch(DecideToolChange {
            name: name.clone(),
            decision: decision.into(),
            definition_hash: hash.clone(),
        });
    };
    let dispatch2 = dispatch.clone();
    let removed = held.changes.iter().any(|c| c == "removed");
    let offered = (!removed).then(|| stored_definition(&row));
    view! {
        <li class="panel held" data-tool=row.tool.name.clone() data-kept=held.kept.to_string()>
            <div class="parked-head">
                <h3><code>{row.tool.name.clone()}</code></h3>
                <span class="muted">
                    "held since " <Time value=Some(held.since.clone())/>
                    {held.kept.then(|| view! { " · " <span class="badge status-expired">"kept held"</span> })}
                </span>
            </div>
            <p data-testid="changes">
                {held
                    .changes
                    .iter()
                    .map(|c| view! { <span class=format!("chip drift-{c}")>{c.clone()}</span> })
                    .collect_view()}
            </p>
            <DefinitionDiff accepted=held.accepted.clone() offered/>
            <dl class="facts">
                <dt>"Accepted definition"</dt>
                <dd><code>{held.accepted_definition_hash.clone()}</code></dd>
                <dt>{if removed { "Last listed definition" } else { "Offered definition" }}</dt>
                <dd><code data-testid="held-hash">{held.definition_hash.clone()}</code></dd>
            </dl>
            {is_admin
                .then(|| {
                    view! {
                        <div class="save-bar">
                            <button
                                type="button"
                                class="primary"
                                disabled=move || decide.pending().get()
                                on:click=move |_| dispatch("accept")
                            >
                                {if removed { "Accept removal" } else { "Accept" }}
                            </button>
                            {(!held.kept)
                                .then(|| {
                                    view! {
                                        <button
                                            type="button"
                                            disabled=move || decide.pending().get()
                                            on:click=move |_| dispatch2("keep_held")
                                        >
                                            "Keep held"
                                        </button>
                                    }
                                })}
                        </div>
                        <p class="error" role="alert">{error}</p>
                    }
                })}
        </li>
    }
    .into_any()
}

/// The stored form of the row's current definition (`title`, `description`, `input_schema`,
/// `output_schema`, `annotations`), like [`HeldView::accepted`].
fn stored_definition(row: &ToolRowView) -> serde_json::Value {
    engine::drift::Definition::from(&row.tool).to_stored()
}

/// The accepted and the offered definition, field by field, side by side; changed fields
/// marked, hidden characters made visible. `offered` is `None` for a removed tool.
#[component]
fn DefinitionDiff(
    accepted: serde_json::Value,
    offered: Option<serde_json::Value>,
) -> impl IntoView {
    let fields = [
        ("title", "Title"),
        ("description", "Description"),
        ("input_schema", "Input schema"),
        ("output_schema", "Output schema"),
        ("annotations", "Annotations"),
    ];
    let text = |v: Option<&serde_json::Value>| match v {
        None => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
    };
    let rows = fields
        .into_iter()
        .filter_map(|(key, label)| {
            let old = text(accepted.get(key));
            let new = offered.as_ref().map(|o| text(o.get(key)));
            if old.is_empty() && new.as_deref().is_none_or(str::is_empty) {
                return None;
            }
            let changed = new.as_ref().is_some_and(|n| *n != old);
            Some(view! {
                <tr data-field=key class:changed=changed>
                    <th scope="row">{label}</th>
                    <td><Revealed text=old/></td>
                    <td>
                        {match new {
                            Some(n) => view! { <Revealed text=n/> }.into_any(),
                            None => view! { <em>"(removed)"</em> }.into_any(),
                        }}
                    </td>
                </tr>
            })
        })
        .collect_view();
    view! {
        <table class="data diff" data-testid="definition-diff">
            <thead>
                <tr>
                    <th scope="col">"Field"</th>
                    <th scope="col">"Accepted"</th>
                    <th scope="col">"Offered now"</th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}

/// `text` with each hidden character (zero-width, bidirectional controls, tag characters)
/// shown as a marked `U+XXXX` instead of nothing.
#[component]
fn Revealed(text: String) -> impl IntoView {
    let mut parts: Vec<(bool, String)> = Vec::new();
    for c in text.chars() {
        if engine::drift::is_hidden(c) {
            parts.push((true, format!("U+{:04X}", u32::from(c))));
        } else if let Some((false, last)) = parts.last_mut() {
            last.push(c);
        } else {
            parts.push((false, c.to_string()));
        }
    }
    view! {
        <pre class="wrap">
            {parts
                .into_iter()
                .map(|(hidden, s)| {
                    if hidden {
                        view! { <mark class="hidden-char" data-testid="hidden-char" title="a hidden character">{s}</mark> }
                            .into_any()
                    } else {
                        s.into_any()
                    }
                })
                .collect_view()}
        </pre>
    }
    .into_any()
}

/// The flags a definition raises, as chips.
fn flag_chips(flags: &[String]) -> impl IntoView + use<> {
    flags
        .iter()
        .map(|f| view! { <span class=format!("chip flag flag-{f}") data-testid="flag">{f.clone()}</span> })
        .collect_view()
}

#[component]
fn Catalog(list: Vec<ToolRowView>, is_admin: bool, saved: RwSignal<u32>) -> impl IntoView {
    let mut list = list;
    // Held tools first, as on a review queue.
    list.sort_by_key(|t| t.held.is_none());
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
    let held: Option<HeldView> = row.held.clone();
    let is_held = held.is_some().to_string();
    let flags = flag_chips(&row.flags);
    view! {
        <tr data-tool=t.name.clone() data-held=is_held>
            <td>
                <code>{t.name.clone()}</code>
                {held.map(|_| view! { " " <span class="badge status-expired">"held"</span> })}
                <div class="muted">{source}</div>
                {t.description.clone().map(|d| view! { <div class="muted">{engine::drift::reveal_hidden(&d)}</div> })}
                <div class="flags">{flags}</div>
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

/// The upstreams' resources, templates and prompts: held ones first (the accepted and the
/// offered definition side by side, Accept / Keep held), each with the flags its text raises.
#[component]
fn Items(list: Vec<CatalogItemView>, is_admin: bool, saved: RwSignal<u32>) -> impl IntoView {
    let mut list = list;
    list.sort_by_key(|i| i.held.as_ref().is_none_or(|h| h.kept));
    view! {
        <section aria-labelledby="items-heading" data-testid="items">
            <h2 id="items-heading">"Resources and prompts"</h2>
            <p class="muted">
                "What upstreams offer besides tools. Policies expose them only through rules of their "
                "own; a change of their text is triaged like a tool's, and a held one is neither listed "
                "nor readable until an admin accepts it."
            </p>
            {if list.is_empty() {
                view! { <p class="empty">"No upstream offers resources or prompts."</p> }.into_any()
            } else {
                view! {
                    <ul class="held-list">
                        {list
                            .into_iter()
                            .map(|item| view! { <ItemEntry item is_admin saved/> })
                            .collect_view()}
                    </ul>
                }
                    .into_any()
            }}
        </section>
    }
    .into_any()
}

/// One resource, template or prompt; a held one with its diff and the admin's decisions.
#[component]
fn ItemEntry(item: CatalogItemView, is_admin: bool, saved: RwSignal<u32>) -> impl IntoView {
    let decide = ServerAction::<DecideItemChange>::new();
    Effect::new(move |_| {
        if let Some(Ok(_)) = decide.value().get() {
            saved.update(|n| *n += 1);
        }
    });
    let error = move || match decide.value().get() {
        Some(Err(e)) => Some(e.message),
        _ => None,
    };
    let request = (
        item.kind.clone(),
        item.upstream_id.clone(),
        item.key.clone(),
        item.definition_hash.clone(),
    );
    let dispatch = move |decision: &'static str| {
        let (kind, upstream_id, key, definition_hash) = request.clone();
        decide.dispatch(DecideItemChange {
            kind,
            upstream_id,
            key,
            decision: decision.into(),
            definition_hash,
        });
    };
    let dispatch2 = dispatch.clone();
    let held = item.held.clone();
    let is_held = held.is_some();
    view! {
        <li
            class=if is_held { "panel held" } else { "panel" }
            data-item=item.key.clone()
            data-held=is_held.to_string()
        >
            <div class="parked-head">
                <h3>
                    <span class="chip">{item.kind.clone()}</span>
                    " "
                    <code>{item.key.clone()}</code>
                </h3>
                <span class="muted">
                    "from " {item.upstream.clone()}
                    {held
                        .as_ref()
                        .map(|h| {
                            view! {
                                " · held since " <Time value=Some(h.since.clone())/>
                                {h.kept.then(|| view! { " · " <span class="badge status-expired">"kept held"</span> })}
                            }
                        })}
                </span>
            </div>
            <p>{flag_chips(&item.flags)}</p>
            {held
                .map(|h| {
                    let kept = h.kept;
                    view! {
                        <p data-testid="changes">
                            {h
                                .changes
                                .iter()
                                .map(|c| view! { <span class=format!("chip drift-{c}")>{c.clone()}</span> })
                                .collect_view()}
                        </p>
                        <ItemDiff accepted=h.accepted.clone() offered=item.definition.clone()/>
                        {is_admin
                            .then(|| {
                                view! {
                                    <div class="save-bar">
                                        <button
                                            type="button"
                                            class="primary"
                                            disabled=move || decide.pending().get()
                                            on:click=move |_| dispatch("accept")
                                        >
                                            "Accept"
                                        </button>
                                        {(!kept)
                                            .then(|| {
                                                view! {
                                                    <button
                                                        type="button"
                                                        disabled=move || decide.pending().get()
                                                        on:click=move |_| dispatch2("keep_held")
                                                    >
                                                        "Keep held"
                                                    </button>
                                                }
                                            })}
                                    </div>
                                    <p class="error" role="alert">{error}</p>
                                }
                            })}
                    }
                })}
        </li>
    }
    .into_any()
}

/// An item's accepted and offered definition, member by member, side by side; changed members
/// marked, hidden characters made visible.
#[component]
fn ItemDiff(accepted: serde_json::Value, offered: serde_json::Value) -> impl IntoView {
    let text = |v: Option<&serde_json::Value>| match v {
        None => String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
    };
    let mut keys: Vec<String> = accepted
        .as_object()
        .into_iter()
        .chain(offered.as_object())
        .flat_map(|m| m.keys().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    let rows = keys
        .into_iter()
        .map(|key| {
            let old = text(accepted.get(&key));
            let new = text(offered.get(&key));
            let changed = old != new;
            let label = key.clone();
            view! {
                <tr data-field=key class:changed=changed>
                    <th scope="row">{label}</th>
                    <td><Revealed text=old/></td>
                    <td><Revealed text=new/></td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="data diff" data-testid="definition-diff">
            <thead>
                <tr>
                    <th scope="col">"Member"</th>
                    <th scope="col">"Accepted"</th>
                    <th scope="col">"Offered now"</th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}
