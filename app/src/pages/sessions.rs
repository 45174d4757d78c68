//! Sessions: exposure sessions with their leases and forks; one session with its signed
//! manifest (what it was granted, tool by tool), the tools that drifted since, and revocation.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::Time;
use crate::api::{RevokeSession, session_detail, sessions};
use crate::dto::{SessionDetail, SessionView};
use crate::layout::use_me;

/// Whether a lease (RFC 3339) is still running at `now` (RFC 3339). Compared as times: the
/// server writes fractions only when there are some, so the texts do not sort.
fn live(lease: Option<&str>, now: &str) -> bool {
    match (lease.and_then(super::parse_ms), super::parse_ms(now)) {
        (Some(lease), Some(now)) => lease > now,
        _ => false,
    }
}

fn now() -> String {
    #[cfg(feature = "hydrate")]
    let ms = leptos::web_sys::js_sys::Date::now() as i64;
    #[cfg(not(feature = "hydrate"))]
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    super::format_ms(ms)
}

fn status(s: &SessionView, now: &str) -> &'static str {
    if s.revoked_at.is_some() {
        "revoked"
    } else if live(s.lease_expires_at.as_deref(), now) {
        "active"
    } else {
        "idle"
    }
}

/// The Sessions page.
#[component]
pub fn SessionsPage() -> impl IntoView {
    let list = Resource::new(|| (), |_| sessions());
    view! {
        <h1>"Sessions"</h1>
        <p class="lead">
            "An exposure session pins an actor and an environment; each " <code>"tools/list"</code>
            " grants it a signed manifest and a lease. Forks inherit the parent's declarations and "
            "narrow what may execute."
        </p>
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Ok(list) if list.is_empty() => {
                        view! { <p class="empty">"No session yet: an agent's first tools/list creates one."</p> }
                            .into_any()
                    }
                    Ok(list) => view! { <SessionTable list/> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
    .into_any()
}

#[component]
fn SessionTable(list: Vec<SessionView>) -> impl IntoView {
    let now = now();
    // Parents first, each followed by its forks.
    let mut ordered: Vec<(SessionView, bool)> = Vec::new();
    for s in list.iter().filter(|s| s.parent_id.is_none()) {
        ordered.push((s.clone(), false));
        for f in list
            .iter()
            .filter(|f| f.parent_id.as_deref() == Some(&s.session_id))
        {
            ordered.push((f.clone(), true));
        }
    }
    // Forks whose parent is beyond the list.
    for f in list.iter().filter(|f| {
        f.parent_id
            .as_deref()
            .is_some_and(|p| !list.iter().any(|s| s.session_id == p))
    }) {
        ordered.push((f.clone(), true));
    }
    view! {
        <table class="data" data-testid="session-table">
            <thead>
                <tr>
                    <th scope="col">"Session"</th>
                    <th scope="col">"Actor"</th>
                    <th scope="col">"Environment"</th>
                    <th scope="col">"Status"</th>
                    <th scope="col">"Lease until"</th>
                    <th scope="col">"Created"</th>
                </tr>
            </thead>
            <tbody>
                {ordered
                    .into_iter()
                    .map(|(s, fork)| {
                        let st = status(&s, &now);
                        view! {
                            <tr data-session-id=s.session_id.clone() data-status=st class:fork=fork>
                                <td>
                                    {fork.then_some("↳ fork ")}
                                    <a href=format!("/sessions/{}", s.session_id)><code>{s.session_id.clone()}</code></a>
                                    {s
                                        .fork_tools
                                        .clone()
                                        .map(|t| {
                                            view! {
                                                <div class="muted">
                                                    "fork_tools: "
                                                    {if t.is_empty() { "[] (nothing may run)".to_owned() } else { t.join(", ") }}
                                                </div>
                                            }
                                        })}
                                </td>
                                <td>{s.actor_id.clone()}</td>
                                <td>{s.environment.clone()}</td>
                                <td><span class=format!("badge session-{st}")>{st}</span></td>
                                <td><Time value=s.lease_expires_at.clone()/></td>
                                <td><Time value=Some(s.created_at.clone())/></td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// `/sessions/{id}`.
#[component]
pub fn SessionDetailPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let revoke = ServerAction::<RevokeSession>::new();
    let data = Resource::new(
        move || (id(), revoke.version().get()),
        |(id, _)| session_detail(id),
    );
    view! {
        <p><a href="/sessions">"← All sessions"</a></p>
        <Transition fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <Detail d revoke/> }.into_any(),
                    Err(e) => {
                        view! {
                            <h1>"Session"</h1>
                            <p class="error" role="alert">{e.message}</p>
                        }
                            .into_any()
                    }
                }
            })}
        </Transition>
    }
    .into_any()
}

#[component]
fn Detail(d: SessionDetail, revoke: ServerAction<RevokeSession>) -> impl IntoView {
    let is_admin = use_me().is_some_and(|m| m.can(engine::scope::ADMIN));
    let s = d.session;
    let st = status(&s, &now());
    let id = s.session_id.clone();
    let tools = d
        .manifest
        .as_ref()
        .and_then(|m| m.get("tools"))
        .and_then(|t| t.as_array())
        .cloned()
        .unwrap_or_default();
    let field = |k: &str| {
        d.manifest
            .as_ref()
            .and_then(|m| m.get(k))
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    let drifted = d.drifted.clone();
    view! {
        <h1>"Session " <code>{s.session_id.clone()}</code></h1>
        <dl class="facts">
            <dt>"Status"</dt>
            <dd><span class=format!("badge session-{st}") data-testid="session-status">{st}</span></dd>
            <dt>"Actor"</dt>
            <dd>{s.actor_id.clone()}</dd>
            <dt>"Environment"</dt>
            <dd>{s.environment.clone()}</dd>
            <dt>"Created"</dt>
            <dd><Time value=Some(s.created_at.clone())/></dd>
            {s.parent_id.clone().map(|p| view! {
                <dt>"Fork of"</dt>
                <dd><a href=format!("/sessions/{p}")><code>{p.clone()}</code></a></dd>
            })}
            {s.fork_tools.clone().map(|t| view! {
                <dt>"fork_tools"</dt>
                <dd>{if t.is_empty() { "[] (nothing may run)".to_owned() } else { t.join(", ") }}</dd>
            })}
            {s.revoked_at.clone().map(|r| view! { <dt>"Revoked"</dt><dd><Time value=Some(r)/></dd> })}
        </dl>
        {(is_admin && s.revoked_at.is_none())
            .then(|| {
                view! {
                    <button
                        type="button"
                        class="danger"
                        on:click=move |_| {
                            revoke.dispatch(RevokeSession { id: id.clone() });
                        }
                    >
                        "Revoke session and its forks"
                    </button>
                    <p class="error" role="alert">
                        {move || match revoke.value().get() {
                            Some(Err(e)) => Some(e.message),
                            _ => None,
                        }}
                    </p>
                }
            })}
        <p class="actions">
            <a
                href=format!("/ui/sessions/{}/evidence.json", s.session_id)
                download=""
                data-testid="download-evidence"
            >
                "Download evidence"
            </a>
            " · "
            <a href=format!("/ui/sessions/{}/evidence.json?disclosures=true", s.session_id) download="">
                "with disclosures"
            </a>
            " — its manifests, receipts, their inclusion proofs and a signed checkpoint, to check "
            "offline (" <a href="/journal">"verify one"</a> ")."
        </p>
        <section aria-labelledby="manifest-heading">
            <h2 id="manifest-heading">"Latest manifest"</h2>
            {if d.manifest.is_none() {
                view! { <p class="empty">"No manifest granted yet."</p> }.into_any()
            } else {
                view! {
                    <dl class="facts">
                        <dt>"Manifest"</dt>
                        <dd><code>{field("manifest_id")}</code></dd>
                        <dt>"Policy"</dt>
                        <dd>{field("policy_id")} " v" {field("policy_version")}</dd>
                        <dt>"Lease"</dt>
                        <dd><code>{field("lease_id")}</code> " until " <Time value=Some(field("lease_expires_at"))/></dd>
                        <dt>"Issued"</dt>
                        <dd><Time value=Some(field("issued_at"))/></dd>
                    </dl>
                    {(!drifted.is_empty())
                        .then(|| {
                            view! {
                                <p class="notice" role="status" data-testid="drift">
                                    "Changed upstream since this manifest was granted (their next call is refused with "
                                    <code>"manifest_drift"</code> " until the session lists again): "
                                    {drifted.join(", ")}
                                </p>
                            }
                        })}
                    <table class="data compact" data-testid="manifest-tools">
                        <thead>
                            <tr>
                                <th scope="col">"Tool"</th>
                                <th scope="col">"Mode"</th>
                                <th scope="col">"Version"</th>
                                <th scope="col">"schemaHash"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {tools
                                .into_iter()
                                .map(|t| {
                                    let g = |k: &str| t.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
                                    let name = g("name");
                                    let mode = {
                                        let m = g("exposureMode");
                                        if m.is_empty() { g("mode") } else { m }
                                    };
                                    let drift = d.drifted.contains(&name);
                                    view! {
                                        <tr data-tool=name.clone()>
                                            <td>
                                                <code>{name.clone()}</code>
                                                {drift.then(|| view! { " " <span class="badge status-expired">"drifted"</span> })}
                                            </td>
                                            <td><span class=format!("mode mode-{mode}")>{mode.clone()}</span></td>
                                            <td><code>{g("toolVersion")}</code></td>
                                            <td><code class="wrap">{g("schemaHash")}</code></td>
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
        <section aria-labelledby="items-heading">
            <h2 id="items-heading">"Resources and prompts"</h2>
            <p class="muted">
                "Decided per request, not pinned in the manifest: what this session's actor may list, "
                "read and get in " {s.environment.clone()} " under the policy active there now."
            </p>
            {if d.resources.is_empty() && d.resource_templates.is_empty() && d.prompts.is_empty() {
                view! { <p class="empty" data-testid="session-items-empty">"None: no resource or prompt rule allows any."</p> }
                    .into_any()
            } else {
                view! {
                    <ItemList heading="Resources" testid="session-resources" items=d.resources.clone() key="uri"/>
                    <ItemList
                        heading="Resource templates"
                        testid="session-templates"
                        items=d.resource_templates.clone()
                        key="uriTemplate"
                    />
                    <ItemList heading="Prompts" testid="session-prompts" items=d.prompts.clone() key="name"/>
                }
                    .into_any()
            }}
        </section>
        <section aria-labelledby="forks-heading">
            <h2 id="forks-heading">"Forks"</h2>
            {if d.forks.is_empty() {
                view! { <p class="empty">"No forks."</p> }.into_any()
            } else {
                view! { <SessionTable list=d.forks.clone()/> }.into_any()
            }}
        </section>
    }
    .into_any()
}

/// Listed resources, templates or prompts (as the MCP lists answer them): each one's `key`
/// (`uri`, `uriTemplate` or `name`) and its title or description.
#[component]
fn ItemList(
    heading: &'static str,
    testid: &'static str,
    items: Vec<serde_json::Value>,
    key: &'static str,
) -> impl IntoView {
    if items.is_empty() {
        return ().into_any();
    }
    view! {
        <h3>{heading}</h3>
        <ul class="items" data-testid=testid>
            {items
                .into_iter()
                .map(|i| {
                    let g = |k: &str| i.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
                    let about = [g("title"), g("description")]
                        .into_iter()
                        .find(|t| !t.is_empty())
                        .unwrap_or_default();
                    view! {
                        <li data-item=g(key)>
                            <code>{g(key)}</code>
                            {(!about.is_empty()).then(|| view! { " — " <span class="muted">{about}</span> })}
                        </li>
                    }
                })
                .collect_view()}
        </ul>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    #[test]
    fn epoch_ms_formats_like_the_server() {
        assert_eq!(super::super::format_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::super::format_ms(1_796_049_584_779),
            "2026-11-30T14:39:44.779Z"
        );
        assert_eq!(
            super::super::format_ms(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
    }
}
