//! The policy editor: forms for rules, redaction profiles and invocation overlays, the live
//! preview beside them (the engine itself, compiled to wasm, recomputing as the admin types), a
//! diff against the saved version before saving, activation and the version history.

use std::sync::Arc;

use engine::catalog::CatalogTool;
use engine::narrow::ValidatorCache;
use engine::policy::{ExposureContext, Mode};
use engine::preview::{Preview, PreviewItem};
use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::Time;
use crate::api::{ActivatePolicy, ReplayPolicy, SavePolicy, policy_editor};
use crate::dto::{PolicyEditorData, PolicyVersionView, ReplayReport};
use crate::error::FieldError;
use crate::layout::use_me;
use crate::policy_draft::{
    CONDITION_KINDS, DESTINATIONS, Draft, InvocationDraft, ProfileDraft, RuleDraft, SELECTS,
    concerns, diff_lines,
};

/// `/policies/{id}`.
#[component]
pub fn PolicyEditorPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let data = Resource::new(id, policy_editor);
    view! {
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => view! { <Editor data/> }.into_any(),
                    Err(e) => {
                        view! {
                            <h1>"Policy"</h1>
                            <p class="error" role="alert">{e.message}</p>
                            <a href="/policies">"Back to policies"</a>
                        }
                            .into_any()
                    }
                }
            })}
        </Suspense>
    }
    .into_any()
}

/// Everything the editor's parts share.
#[derive(Clone, Copy)]
struct Ctx {
    draft: RwSignal<Draft>,
    /// Every problem: the draft's own (text that is not JSON or a number), the engine's
    /// validation, and what the server answered to the last save.
    errors: Memo<Vec<FieldError>>,
    read_only: bool,
}

impl Ctx {
    /// The messages of errors exactly at `path`.
    fn at(self, path: impl Fn() -> String + Send + Sync + 'static) -> impl Fn() -> String {
        move || {
            let path = path();
            self.errors.with(|es| {
                es.iter()
                    .filter(|e| e.path == path)
                    .map(|e| e.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            })
        }
    }

    /// The messages of errors at `path` or inside it (JSON editors, rate bucket).
    fn within(self, path: impl Fn() -> String + Send + Sync + 'static) -> impl Fn() -> String {
        move || {
            let path = path();
            self.errors.with(|es| {
                es.iter()
                    .filter(|e| concerns(&e.path, &path))
                    .map(|e| {
                        let rest = e.path[path.len()..].trim_start_matches('.');
                        if rest.is_empty() {
                            e.message.clone()
                        } else {
                            format!("{rest}: {}", e.message)
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
        }
    }

    fn rule<T: Default>(self, key: u64, f: impl Fn(&RuleDraft) -> T) -> T {
        self.draft
            .with(|d| d.rules.iter().find(|r| r.key == key).map(&f))
            .unwrap_or_default()
    }

    fn set_rule(self, key: u64, f: impl FnOnce(&mut RuleDraft)) {
        self.draft.update(|d| {
            if let Some(r) = d.rule_mut(key) {
                f(r);
            }
        });
    }

    /// `rules[i]` of the rule with `key`, at its current position.
    fn rule_path(self, key: u64) -> String {
        let i = self
            .draft
            .with(|d| d.rules.iter().position(|r| r.key == key))
            .unwrap_or(usize::MAX);
        format!("rules[{i}]")
    }
}

fn to_fields(errors: &[engine::validate::FieldError]) -> impl Iterator<Item = FieldError> + '_ {
    errors.iter().map(|e| FieldError {
        path: e.path.clone(),
        message: e.message.clone(),
    })
}

/// The key of a resource, template or prompt among the preview's marks (tools are marked by
/// name, which never contains a space).
fn item_mark(kind: &str, item: &PreviewItem) -> String {
    format!("{kind} {} {}", item.upstream, item.key)
}

/// Per tool, resource, template and prompt, what differs between two previews: its mode, its
/// deciding rule, a tool's advertised schema (`schemaHash`), or its presence.
fn what_changed(before: &Preview, now: &Preview) -> std::collections::BTreeMap<String, String> {
    let rule = |r: &Option<String>| r.clone().unwrap_or_else(|| "default".into());
    let mut changes = std::collections::BTreeMap::new();
    let lists = [
        ("resource", &before.resources, &now.resources),
        (
            "template",
            &before.resource_templates,
            &now.resource_templates,
        ),
        ("prompt", &before.prompts, &now.prompts),
    ];
    for (kind, before, now) in lists {
        for i in now {
            let mark = item_mark(kind, i);
            let Some(b) = before.iter().find(|b| item_mark(kind, b) == mark) else {
                continue;
            };
            let mut what = Vec::new();
            if b.mode != i.mode {
                what.push(format!("mode {} → {}", b.mode.as_str(), i.mode.as_str()));
            }
            if b.rule_id != i.rule_id {
                let rule = |r: &Option<String>| r.clone().unwrap_or_else(|| "none".into());
                what.push(format!("rule {} → {}", rule(&b.rule_id), rule(&i.rule_id)));
            }
            if !what.is_empty() {
                changes.insert(mark, what.join("; "));
            }
        }
    }
    for t in &now.tools {
        let Some(b) = before.tools.iter().find(|b| b.name == t.name) else {
            changes.insert(t.name.clone(), "new in the preview".to_owned());
            continue;
        };
        let mut what = Vec::new();
        if b.mode != t.mode {
            what.push(format!("mode {} → {}", b.mode.as_str(), t.mode.as_str()));
        }
        if b.rule_id != t.rule_id {
            what.push(format!("rule {} → {}", rule(&b.rule_id), rule(&t.rule_id)));
        }
        if b.schema_hash != t.schema_hash {
            what.push("schemaHash changed (the advertised schema)".to_owned());
        }
        if !what.is_empty() {
            changes.insert(t.name.clone(), what.join("; "));
        }
    }
    changes
}

/// Whether the draft says the same as the saved document (the same policy once parsed).
fn same_policy(doc: &serde_json::Value, saved: Option<&serde_json::Value>) -> bool {
    let Some(saved) = saved else { return false };
    match (
        engine::validate::parse_policy(doc),
        engine::validate::parse_policy(saved),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => doc == saved,
    }
}

#[component]
fn Editor(data: PolicyEditorData) -> impl IntoView {
    let me = use_me();
    let can_write = me.as_ref().is_some_and(|m| m.can(engine::scope::WRITE));
    let read_only = !can_write || data.builtin;
    let id = data.policy_id.clone();
    let versions = RwSignal::new(data.versions.clone());
    let saved = Memo::new(move |_| versions.with(|v| v.first().cloned()));
    let draft = RwSignal::new(match data.versions.first() {
        Some(v) => Draft::from_document(&id, &v.document),
        None => Draft::new(&id),
    });
    let active_in = RwSignal::new(data.active_in.clone());

    // The preview context.
    let environment = RwSignal::new("default".to_owned());
    let actor = RwSignal::new(me.map(|m| m.username).unwrap_or_default());
    let preset = RwSignal::new(String::new());

    let catalog: Arc<Vec<CatalogTool>> =
        Arc::new(data.catalog.into_iter().map(CatalogTool::new).collect());
    let items = Arc::new(data.items);
    let caps = data.capabilities;
    let validators = Arc::new(ValidatorCache::new());
    let document = Memo::new(move |_| draft.with(Draft::document));
    let preview = Memo::new(move |_| {
        let ctx = ExposureContext {
            environment: environment.get().trim().to_owned(),
            actor: actor.get().trim().to_owned(),
            preset: Some(preset.get().trim().to_owned()).filter(|p| !p.is_empty()),
            entity: None,
        };
        document.with(|(doc, _)| {
            engine::preview::preview(
                doc,
                &caps,
                catalog.iter().cloned(),
                &items,
                &ctx,
                &validators,
            )
        })
    });
    // What the last change of the draft (or of the preview's context) changed in the preview,
    // per tool: shown beside the tools, so an admin editing one rule sees what it does.
    let marks = RwSignal::new(std::collections::BTreeMap::<String, String>::new());
    let previous = StoredValue::new(None::<Preview>);
    Effect::new(move |_| {
        let now = preview.get();
        if let Some(before) = previous.get_value() {
            marks.set(what_changed(&before, &now));
        }
        previous.set_value(Some(now));
    });
    let save = ServerAction::<SavePolicy>::new();
    // Errors the server answered; they stand until the draft changes.
    let server_errors = RwSignal::new(Vec::<FieldError>::new());
    Effect::new(move |_| {
        draft.track();
        server_errors.set(vec![]);
    });
    let errors = Memo::new(move |_| {
        let mut all: Vec<FieldError> = document.with(|(_, local)| local.clone());
        preview.with(|p| {
            for e in to_fields(&p.errors) {
                if !all.contains(&e) {
                    all.push(e);
                }
            }
        });
        for e in server_errors.get() {
            if !all.contains(&e) {
                all.push(e);
            }
        }
        all
    });
    let cx = Ctx {
        draft,
        errors,
        read_only,
    };
    let dirty = Memo::new(move |_| {
        document.with(|(doc, _)| !same_policy(doc, saved.get().as_ref().map(|v| &v.document)))
    });

    // A successful save becomes the newest version; a refused one shows its field errors.
    Effect::new(move |_| match save.value().get() {
        Some(Ok(v)) => versions.update(|vs| {
            if vs.first().is_none_or(|f| f.version != v.version) {
                vs.insert(0, v);
            }
        }),
        Some(Err(e)) => {
            if let Some(d) = e.details {
                server_errors.set(d.fields);
            }
        }
        None => {}
    });

    let title = data.policy_id.clone();
    view! {
        <header class="editor-head">
            <h1>"Policy " <code>{title}</code></h1>
            <p class="muted" data-testid="policy-version">
                {move || match saved.get() {
                    Some(v) => format!("Version {} saved by {}", v.version, v.created_by),
                    None => "Not saved yet".to_owned(),
                }}
                {move || dirty.get().then_some(" · unsaved changes")}
            </p>
            {data
                .builtin
                .then(|| {
                    view! {
                        <p class="notice" role="status">
                            "The built-in policy cannot be changed. Create a policy of your own to edit."
                        </p>
                    }
                })}
            {(!can_write)
                .then(|| {
                    view! {
                        <p class="notice" role="status">
                            "Read only: saving needs the scope " <code>"agent_tool_exposure:write"</code> "."
                        </p>
                    }
                })}
        </header>
        <div class="editor-grid">
            <div class="editor-main">
                <ProblemList errors/>
                <fieldset class="bare" disabled=read_only>
                    <div class="field">
                        <label for="default-mode">"Mode of tools no rule matches"</label>
                        <ModeSelect
                            id="default-mode".to_owned()
                            value=Signal::derive(move || draft.with(|d| d.default_mode.clone()))
                            on_change=move |v| draft.update(|d| d.default_mode = v)
                        />
                        <p class="field-error">{cx.at(|| "default_mode".into())}</p>
                    </div>
                    <Rules cx/>
                    <Profiles cx/>
                </fieldset>
                {(!read_only).then(|| view! { <SaveBar cx document saved dirty save/> })}
            </div>
            <PreviewPanel preview environment actor preset marks/>
        </div>
        <ImpactPanel document/>
        <Activation id=data.policy_id.clone() saved active_in can_write/>
        <History versions cx/>
    }
    .into_any()
}

#[component]
fn ProblemList(errors: Memo<Vec<FieldError>>) -> impl IntoView {
    view! {
        <div class="problems" role="status" aria-live="polite" data-testid="problems">
            {move || {
                let es = errors.get();
                if es.is_empty() {
                    view! { <p class="success">"No problems: this policy is valid for this deployment."</p> }
                        .into_any()
                } else {
                    view! {
                        <p class="error">
                            {format!(
                                "{} problem{}",
                                es.len(),
                                if es.len() == 1 { "" } else { "s" },
                            )}
                        </p>
                        <ul>
                            {es
                                .into_iter()
                                .map(|e| {
                                    view! {
                                        <li>
                                            <code>{if e.path.is_empty() { "(policy)".into() } else { e.path }}</code>
                                            " — "
                                            {e.message}
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ul>
                    }
                        .into_any()
                }
            }}
        </div>
    }
    .into_any()
}

#[component]
fn ModeSelect(
    id: String,
    #[prop(into)] value: Signal<String>,
    on_change: impl Fn(String) + 'static,
) -> impl IntoView {
    view! {
        <select id=id prop:value=move || value.get() on:change=move |ev| on_change(event_target_value(&ev))>
            {Mode::ALL
                .into_iter()
                .map(|m| {
                    let name = m.as_str();
                    view! {
                        <option value=name selected=move || value.get() == name>
                            {name}
                        </option>
                    }
                })
                .collect_view()}
        </select>
    }
    .into_any()
}

#[component]
fn Rules(cx: Ctx) -> impl IntoView {
    let keys = move || {
        cx.draft
            .with(|d| d.rules.iter().map(|r| r.key).collect::<Vec<_>>())
    };
    view! {
        <section aria-labelledby="rules-heading">
            <h2 id="rules-heading">"Rules"</h2>
            <p class="muted">"Tried in order; the first rule whose conditions all hold decides."</p>
            <Show when=move || cx.draft.with(|d| d.rules.is_empty())>
                <p class="empty">"No rules: every tool gets the default mode."</p>
            </Show>
            <ol class="rules">
                <For each=keys key=|k| *k let:key>
                    <RuleCard cx key/>
                </For>
            </ol>
            <button
                type="button"
                on:click=move |_| {
                    cx.draft.update(|d| {
                        d.add_rule();
                    });
                }
            >
                "Add rule"
            </button>
        </section>
    }
    .into_any()
}

#[component]
fn RuleCard(cx: Ctx, key: u64) -> impl IntoView {
    let draft = cx.draft;
    let index = move || {
        draft
            .with(|d| d.rules.iter().position(|r| r.key == key))
            .unwrap_or(0)
    };
    let count = move || draft.with(|d| d.rules.len());
    let path = move || cx.rule_path(key);
    let fid = move |f: &str| format!("rule-{key}-{f}");
    let conditions = move || {
        cx.rule(key, |r| {
            r.conditions.iter().map(|c| c.key).collect::<Vec<_>>()
        })
    };
    let profiles = move || {
        draft.with(|d| {
            let mut names = vec!["safe".to_owned()];
            names.extend(
                d.profiles
                    .iter()
                    .map(|p| p.name.clone())
                    .filter(|n| n != "safe"),
            );
            names
        })
    };
    let has_invocation = cx.rule(key, |r| !r.invocation.is_empty());
    view! {
        <li class="rule panel" data-testid=move || format!("rule-{}", index())>
            <div class="rule-head">
                <h3>{move || format!("Rule {}", index() + 1)}</h3>
                <div class="rule-actions">
                    <button
                        type="button"
                        aria-label=move || format!("Move rule {} up", index() + 1)
                        disabled=move || cx.read_only || index() == 0
                        on:click=move |_| draft.update(|d| d.move_rule(key, -1))
                    >
                        "↑"
                    </button>
                    <button
                        type="button"
                        aria-label=move || format!("Move rule {} down", index() + 1)
                        disabled={move || cx.read_only || index() + 1 >= count()}
                        on:click=move |_| draft.update(|d| d.move_rule(key, 1))
                    >
                        "↓"
                    </button>
                    <button
                        type="button"
                        class="danger"
                        aria-label=move || format!("Remove rule {}", index() + 1)
                        on:click=move |_| draft.update(|d| d.remove_rule(key))
                    >
                        "Remove"
                    </button>
                </div>
            </div>
            <p class="field-error">{cx.at(path)}</p>
            <div class="row">
                <div class="field">
                    <label for=fid("id")>"Rule id"</label>
                    <input
                        type="text"
                        id=fid("id")
                        prop:value=move || cx.rule(key, |r| r.id.clone())
                        on:input=move |ev| cx.set_rule(key, |r| r.id = event_target_value(&ev))
                    />
                    <p class="field-error">{cx.at(move || format!("{}.id", path()))}</p>
                </div>
                <div class="field">
                    <label for=fid("mode")>"Mode"</label>
                    <ModeSelect
                        id=fid("mode")
                        value=Signal::derive(move || cx.rule(key, |r| r.mode.clone()))
                        on_change=move |v| cx.set_rule(key, |r| r.mode = v)
                    />
                    <p class="field-error">{cx.at(move || format!("{}.mode", path()))}</p>
                </div>
                <div class="field">
                    <label for=fid("redaction")>"Redaction profile"</label>
                    <select
                        id=fid("redaction")
                        prop:value=move || {
                            let v = cx.rule(key, |r| r.redaction.clone());
                            if v.is_empty() { "safe".to_owned() } else { v }
                        }
                        on:change=move |ev| {
                            let v = event_target_value(&ev);
                            cx.set_rule(key, |r| r.redaction = v);
                        }
                    >
                        {move || {
                            let current = cx.rule(key, |r| r.redaction.clone());
                            let mut names = profiles();
                            if !current.is_empty() && !names.contains(&current) {
                                names.push(current.clone());
                            }
                            names
                                .into_iter()
                                .map(|n| {
                                    let selected = n == current || (current.is_empty() && n == "safe");
                                    view! {
                                        <option value=n.clone() selected=selected>
                                            {n.clone()}
                                        </option>
                                    }
                                })
                                .collect_view()
                        }}
                    </select>
                    <p class="field-error">{cx.at(move || format!("{}.redaction", path()))}</p>
                </div>
            </div>
            <div class="field">
                <label for=fid("reason")>"Reason (for admins; never shown to callers)"</label>
                <input
                    type="text"
                    id=fid("reason")
                    prop:value=move || cx.rule(key, |r| r.reason.clone())
                    on:input=move |ev| cx.set_rule(key, |r| r.reason = event_target_value(&ev))
                />
                <p class="field-error">{cx.at(move || format!("{}.reason", path()))}</p>
            </div>
            <Selects cx key/>
            <fieldset class="conditions">
                <legend>"Applies when"</legend>
                <Show when=move || cx.rule(key, |r| r.conditions.is_empty())>
                    <p class="muted">"Always (no conditions)."</p>
                </Show>
                <For each=conditions key=|k| *k let:ckey>
                    <Condition cx rule=key ckey/>
                </For>
                <p class="field-error">{cx.at(move || format!("{}.match", path()))}</p>
                <button type="button" on:click=move |_| draft.update(|d| d.add_condition(key))>
                    "Add condition"
                </button>
            </fieldset>
            <details class="invocation" open=has_invocation>
                <summary>"Invocation: narrowing and limits"</summary>
                <Invocation cx key/>
            </details>
        </li>
    }
    .into_any()
}

/// What the rule's tools or prompts may ask of the calling client (`client_requests`): one
/// checkbox per kind.
#[component]
fn ClientRequests(cx: Ctx, key: u64, legend: &'static str) -> impl IntoView {
    let path = move || cx.rule_path(key);
    let fid = move |f: &str| format!("rule-{key}-{f}");
    view! {
        <fieldset class="client-requests">
            <legend>{legend}</legend>
            {engine::policy::ClientRequest::ALL
                .into_iter()
                .map(|c| {
                    let name = c.as_str();
                    let id = fid(&format!("asks-{name}"));
                    let for_id = id.clone();
                    view! {
                        <label class="check" for=for_id>
                            <input
                                type="checkbox"
                                id=id
                                prop:checked=move || {
                                    cx.rule(key, |r| r.client_requests.iter().any(|x| x == name))
                                }
                                on:change=move |ev| {
                                    let on = event_target_checked(&ev);
                                    cx.set_rule(
                                        key,
                                        |r| {
                                            r.client_requests.retain(|x| x != name);
                                            if on {
                                                r.client_requests.push(name.to_owned());
                                            }
                                        },
                                    );
                                }
                            />
                            {name}
                        </label>
                    }
                })
                .collect_view()}
            <p class="field-error">
                {cx.at(move || format!("{}.client_requests", path()))}
            </p>
        </fieldset>
    }
}

/// What a rule selects: tools (and what they may ask of the client while they run), resources
/// and templates (an upstream and a URI pattern) or prompts (a canonical name pattern, and what
/// they may ask of the client while they are got).
#[component]
fn Selects(cx: Ctx, key: u64) -> impl IntoView {
    let path = move || cx.rule_path(key);
    let fid = move |f: &str| format!("rule-{key}-{f}");
    let selects = move || cx.rule(key, |r| r.selects.clone());
    let text = move |field: &'static str,
                     label: &'static str,
                     placeholder: &'static str,
                     get: fn(&RuleDraft) -> String,
                     set: fn(&mut RuleDraft, String)| {
        view! {
            <div class="field">
                <label for=fid(field)>{label}</label>
                <input
                    type="text"
                    id=fid(field)
                    placeholder=placeholder
                    prop:value=move || cx.rule(key, get)
                    on:input=move |ev| {
                        let v = event_target_value(&ev);
                        cx.set_rule(key, |r| set(r, v));
                    }
                />
                <p class="field-error">
                    {cx.at(move || format!("{}.{}", path(), field.replace('_', ".")))}
                </p>
            </div>
        }
    };
    view! {
        <div class="field">
            <label for=fid("selects")>"Selects"</label>
            <select
                id=fid("selects")
                prop:value=selects
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    cx.draft.update(|d| d.set_selects(key, &v));
                }
            >
                {SELECTS
                    .into_iter()
                    .map(|(k, label)| {
                        view! {
                            <option value=k selected=move || selects() == k>
                                {label}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
        </div>
        {move || match selects().as_str() {
            "resources" => {
                view! {
                    <p class="muted">
                        "Resource rules need no default: a resource or template no rule allows is hidden. "
                        "A template is listed only when every URI it expands to is allowed."
                    </p>
                    <div class="row">
                        {text(
                            "resource_upstream",
                            "Upstream (any when empty)",
                            "fs",
                            |r| r.resource_upstream.clone(),
                            |r, v| r.resource_upstream = v,
                        )}
                        {text(
                            "resource_uri",
                            "URI (exact, or a prefix ending *)",
                            "file:///docs/*",
                            |r| r.resource_uri.clone(),
                            |r, v| r.resource_uri = v,
                        )}
                    </div>
                }
                    .into_any()
            }
            "prompts" => {
                view! {
                    <p class="muted">"A prompt no rule allows is hidden."</p>
                    {text(
                        "prompt",
                        "Prompt (canonical name, or a prefix ending *)",
                        "mcp__fs__*",
                        |r| r.prompt.clone(),
                        |r, v| r.prompt = v,
                    )}
                    <ClientRequests cx=cx key=key legend="May ask the calling client while it is got" />
                }
                    .into_any()
            }
            _ => view! { <ClientRequests cx=cx key=key legend="May ask the calling client while it runs" /> }
                .into_any(),
        }}
    }
    .into_any()
}

#[component]
fn Condition(cx: Ctx, rule: u64, ckey: u64) -> impl IntoView {
    let get = move |f: fn(&crate::policy_draft::ConditionDraft) -> String| {
        move || {
            cx.rule(rule, |r| {
                r.conditions
                    .iter()
                    .find(|c| c.key == ckey)
                    .map(f)
                    .unwrap_or_default()
            })
        }
    };
    let kind = get(|c| c.kind.clone());
    let value = get(|c| c.value.clone());
    let set = move |f: Box<dyn FnOnce(&mut crate::policy_draft::ConditionDraft)>| {
        cx.set_rule(rule, |r| {
            if let Some(c) = r.conditions.iter_mut().find(|c| c.key == ckey) {
                f(c);
            }
        });
    };
    let id = format!("cond-{ckey}");
    let error = cx.at(move || format!("{}.match.{}", cx.rule_path(rule), kind()));
    view! {
        <div class="condition">
            <label class="sr-only" for=format!("{id}-kind")>"Condition"</label>
            <select
                id=format!("{id}-kind")
                prop:value=kind
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    set(Box::new(move |c| c.kind = v));
                }
            >
                {CONDITION_KINDS
                    .into_iter()
                    .map(|(k, label)| {
                        view! {
                            <option value=k selected=move || kind() == k>
                                {label}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
            <label class="sr-only" for=format!("{id}-value")>"Value"</label>
            <input
                type="text"
                id=format!("{id}-value")
                placeholder=move || if kind() == "risk_exactly" { "read, pii" } else { "" }
                prop:value=value
                on:input=move |ev| {
                    let v = event_target_value(&ev);
                    set(Box::new(move |c| c.value = v));
                }
            />
            <button
                type="button"
                aria-label="Remove condition"
                on:click=move |_| cx.set_rule(rule, |r| r.conditions.retain(|c| c.key != ckey))
            >
                "×"
            </button>
            <p class="field-error">{error}</p>
        </div>
    }
    .into_any()
}

/// A text field of a rule's invocation.
#[component]
fn InvocationText(
    cx: Ctx,
    key: u64,
    field: &'static str,
    label: &'static str,
    get: fn(&InvocationDraft) -> String,
    set: fn(&mut InvocationDraft, String),
    #[prop(optional)] multiline: bool,
    #[prop(optional)] placeholder: &'static str,
) -> impl IntoView {
    let id = format!("rule-{key}-{field}");
    let value = move || cx.rule(key, |r| get(&r.invocation));
    let on_input = move |ev: leptos::ev::Event| {
        let v = event_target_value(&ev);
        cx.set_rule(key, |r| set(&mut r.invocation, v));
    };
    let error = cx.within(move || format!("{}.invocation.{field}", cx.rule_path(key)));
    let error_id = format!("{id}-error");
    let input = if multiline {
        view! {
            <textarea
                id=id.clone()
                rows="4"
                spellcheck="false"
                placeholder=placeholder
                aria-describedby=error_id.clone()
                prop:value=value
                on:input=on_input
            >
                {value()}
            </textarea>
        }
        .into_any()
    } else {
        view! {
            <input
                type="text"
                id=id.clone()
                placeholder=placeholder
                aria-describedby=error_id.clone()
                prop:value=value
                on:input=on_input
            />
        }
        .into_any()
    };
    view! {
        <div class=if multiline { "field json" } else { "field" }>
            <label for=id>{label}</label>
            {input}
            <p class="field-error" id=error_id>{error}</p>
        </div>
    }
    .into_any()
}

#[component]
fn Invocation(cx: Ctx, key: u64) -> impl IntoView {
    let idem_id = format!("rule-{key}-requires_idempotency");
    let idem_for = idem_id.clone();
    view! {
        <div class="row">
            <InvocationText
                cx
                key
                field="fixed_arguments"
                label="Fixed arguments (JSON object)"
                multiline=true
                placeholder="{\"owner\": \"acme\"}"
                get=|i| i.fixed_arguments.clone()
                set=|i, v| i.fixed_arguments = v
            />
            <InvocationText
                cx
                key
                field="allowed_values"
                label="Allowed values (JSON: argument → list)"
                multiline=true
                placeholder="{\"state\": [\"open\"]}"
                get=|i| i.allowed_values.clone()
                set=|i, v| i.allowed_values = v
            />
        </div>
        <InvocationText
            cx
            key
            field="schema_overlay"
            label="Schema overlay (JSON Schema; may only narrow)"
            multiline=true
            placeholder="{\"properties\": {\"q\": {\"maxLength\": 100}}}"
            get=|i| i.schema_overlay.clone()
            set=|i, v| i.schema_overlay = v
        />
        <div class="row">
            <InvocationText
                cx
                key
                field="max_duration_millis"
                label="Max duration (ms)"
                get=|i| i.max_duration_millis.clone()
                set=|i, v| i.max_duration_millis = v
            />
            <InvocationText
                cx
                key
                field="max_result_bytes"
                label="Max result (bytes)"
                get=|i| i.max_result_bytes.clone()
                set=|i, v| i.max_result_bytes = v
            />
            <InvocationText
                cx
                key
                field="max_cost_cents"
                label="Max cost (cents)"
                get=|i| i.max_cost_cents.clone()
                set=|i, v| i.max_cost_cents = v
            />
            <InvocationText
                cx
                key
                field="expires_after_seconds"
                label="Lease expiry (seconds)"
                get=|i| i.expires_after_seconds.clone()
                set=|i, v| i.expires_after_seconds = v
            />
        </div>
        <div class="row">
            <InvocationText
                cx
                key
                field="connection_mode"
                label="Connection mode"
                placeholder="read_replica"
                get=|i| i.connection_mode.clone()
                set=|i, v| i.connection_mode = v
            />
            <InvocationText
                cx
                key
                field="rate_bucket"
                label="Rate bucket"
                get=|i| i.rate_bucket.clone()
                set=|i, v| i.rate_bucket = v
            />
            <div class="field">
                <label for=format!("rule-{key}-rate_per_minute")>"Calls per minute"</label>
                <input
                    type="text"
                    id=format!("rule-{key}-rate_per_minute")
                    prop:value=move || cx.rule(key, |r| r.invocation.rate_per_minute.clone())
                    on:input=move |ev| {
                        cx.set_rule(key, |r| r.invocation.rate_per_minute = event_target_value(&ev))
                    }
                />
            </div>
        </div>
        <label class="check" for=idem_for>
            <input
                type="checkbox"
                id=idem_id
                prop:checked=move || cx.rule(key, |r| r.invocation.requires_idempotency)
                on:change=move |ev| {
                    cx.set_rule(key, |r| r.invocation.requires_idempotency = event_target_checked(&ev))
                }
            />
            "Require an idempotency key"
        </label>
        <p class="field-error">
            {cx.at(move || format!("{}.invocation.fixed_arguments.idempotency_key", cx.rule_path(key)))}
        </p>
    }
    .into_any()
}

#[component]
fn Profiles(cx: Ctx) -> impl IntoView {
    let draft = cx.draft;
    let keys = move || draft.with(|d| d.profiles.iter().map(|p| p.key).collect::<Vec<_>>());
    view! {
        <section aria-labelledby="profiles-heading">
            <h2 id="profiles-heading">"Redaction profiles"</h2>
            <p class="muted">
                "How tool output is reduced before it reaches a destination. "
                <code>"safe"</code> " (truncate to 8 KB, model and MCP) exists even when not listed."
            </p>
            <For each=keys key=|k| *k let:pkey>
                <ProfileCard cx pkey/>
            </For>
            <button
                type="button"
                on:click=move |_| {
                    draft.update(|d| {
                        d.add_profile();
                    });
                }
            >
                "Add profile"
            </button>
        </section>
    }
    .into_any()
}

#[component]
fn ProfileCard(cx: Ctx, pkey: u64) -> impl IntoView {
    let draft = cx.draft;
    let get = move |f: fn(&ProfileDraft) -> String| {
        move || {
            draft.with(|d| {
                d.profiles
                    .iter()
                    .find(|p| p.key == pkey)
                    .map(f)
                    .unwrap_or_default()
            })
        }
    };
    let set = move |f: Box<dyn FnOnce(&mut ProfileDraft)>| {
        draft.update(|d| {
            if let Some(p) = d.profile_mut(pkey) {
                f(p);
            }
        });
    };
    let name = get(|p| p.name.clone());
    let at = move || format!("redaction_profiles.{}", name());
    let id = move |f: &str| format!("profile-{pkey}-{f}");
    view! {
        <div class="profile panel">
            <div class="row">
                <div class="field">
                    <label for=id("name")>"Profile name"</label>
                    <input
                        type="text"
                        id=id("name")
                        prop:value=name
                        on:input=move |ev| {
                            let v = event_target_value(&ev);
                            set(Box::new(move |p| p.name = v));
                        }
                    />
                    <p class="field-error">{cx.at(move || format!("{}.name", at()))}</p>
                </div>
                <div class="field">
                    <label for=id("summary")>"Summary"</label>
                    <select
                        id=id("summary")
                        prop:value=get(|p| p.summary.clone())
                        on:change=move |ev| {
                            let v = event_target_value(&ev);
                            set(Box::new(move |p| p.summary = v));
                        }
                    >
                        {["truncate", "omit"]
                            .into_iter()
                            .map(|s| {
                                let current = get(|p| p.summary.clone());
                                view! {
                                    <option value=s selected=move || current() == s>
                                        {s}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                </div>
                <div class="field">
                    <label for=id("max_bytes")>"Max bytes"</label>
                    <input
                        type="text"
                        id=id("max_bytes")
                        prop:value=get(|p| p.max_bytes.clone())
                        on:input=move |ev| {
                            let v = event_target_value(&ev);
                            set(Box::new(move |p| p.max_bytes = v));
                        }
                    />
                    <p class="field-error">{cx.at(move || format!("{}.max_bytes", at()))}</p>
                </div>
            </div>
            <fieldset class="destinations">
                <legend>"Destinations"</legend>
                {DESTINATIONS
                    .into_iter()
                    .map(|d| {
                        let cid = id(&format!("dest-{d}"));
                        let for_id = cid.clone();
                        view! {
                            <label class="check" for=for_id>
                                <input
                                    type="checkbox"
                                    id=cid
                                    prop:checked=move || {
                                        draft
                                            .with(|dr| {
                                                dr.profiles
                                                    .iter()
                                                    .find(|p| p.key == pkey)
                                                    .is_some_and(|p| p.destinations.iter().any(|x| x == d))
                                            })
                                    }
                                    on:change=move |ev| {
                                        let on = event_target_checked(&ev);
                                        set(
                                            Box::new(move |p| {
                                                p.destinations.retain(|x| x != d);
                                                if on {
                                                    p.destinations.push(d.to_owned());
                                                }
                                            }),
                                        );
                                    }
                                />
                                <code>{d}</code>
                            </label>
                        }
                    })
                    .collect_view()}
                <p class="field-error">{cx.at(move || format!("{}.destinations", at()))}</p>
            </fieldset>
            <button
                type="button"
                class="danger"
                on:click=move |_| draft.update(|d| d.profiles.retain(|p| p.key != pkey))
            >
                "Remove profile"
            </button>
        </div>
    }
    .into_any()
}

#[component]
fn SaveBar(
    cx: Ctx,
    document: Memo<(serde_json::Value, Vec<FieldError>)>,
    saved: Memo<Option<PolicyVersionView>>,
    dirty: Memo<bool>,
    save: ServerAction<SavePolicy>,
) -> impl IntoView {
    let reviewing = RwSignal::new(false);
    let blocked = move || cx.errors.with(|e| e.len());
    let id = cx.draft.with_untracked(|d| d.name.clone());
    // A new version closes the review.
    Effect::new(move |_| {
        if let Some(Ok(_)) = save.value().get() {
            reviewing.set(false);
        }
    });
    let diff = move || {
        let before = saved.get().map(|v| v.document);
        document.with(|(doc, _)| diff_lines(before.as_ref(), doc))
    };
    let next = move || saved.get().map_or(1, |v| v.version + 1);
    view! {
        <div class="save-bar">
            <button
                type="button"
                on:click=move |_| reviewing.set(true)
                disabled=move || !dirty.get()
            >
                "Review changes"
            </button>
            {move || match save.value().get() {
                Some(Ok(v)) if !dirty.get() => {
                    view! {
                        <span class="success" role="status">{format!("Saved version {}.", v.version)}</span>
                    }
                        .into_any()
                }
                Some(Err(e)) => view! { <span class="error" role="alert">{e.message}</span> }.into_any(),
                _ => ().into_any(),
            }}
        </div>
        <Show when=move || reviewing.get()>
            <section class="panel review" aria-labelledby="review-heading" data-testid="review">
                <h2 id="review-heading">
                    {move || match saved.get() {
                        Some(v) => format!("Changes against version {}", v.version),
                        None => "The new policy".to_owned(),
                    }}
                </h2>
                <pre class="diff" data-testid="diff">
                    {move || {
                        diff()
                            .into_iter()
                            .map(|(tag, line)| {
                                let class = match tag {
                                    '+' => "add",
                                    '-' => "del",
                                    _ => "same",
                                };
                                view! { <span class=class>{format!("{tag} {line}\n")}</span> }
                            })
                            .collect_view()
                    }}
                </pre>
                {move || {
                    (blocked() > 0)
                        .then(|| {
                            view! {
                                <p class="error" role="alert">
                                    {format!("Fix the {} problem(s) listed above before saving.", blocked())}
                                </p>
                            }
                        })
                }}
                <div class="save-bar">
                    <button
                        type="button"
                        class="primary"
                        disabled={move || blocked() > 0 || save.pending().get()}
                        on:click={
                            let id = id.clone();
                            move |_| {
                                let doc = document.with_untracked(|(d, _)| d.to_string());
                                save.dispatch(SavePolicy {
                                    id: id.clone(),
                                    document: doc,
                                });
                            }
                        }
                    >
                        {move || format!("Save as version {}", next())}
                    </button>
                    <button type="button" on:click=move |_| reviewing.set(false)>
                        "Keep editing"
                    </button>
                </div>
            </section>
        </Show>
    }
    .into_any()
}

/// "Impact": the draft replayed on the server over the calls the journal recorded
/// (`POST /policies:replay`), as calls per tool and actor that would move from one mode to
/// another, with example receipts.
#[component]
fn ImpactPanel(document: Memo<(serde_json::Value, Vec<FieldError>)>) -> impl IntoView {
    let days = RwSignal::new(7_u32);
    let replay = ServerAction::<ReplayPolicy>::new();
    let run = move |_| {
        let text = document.with(|(doc, _)| doc.to_string());
        replay.dispatch(ReplayPolicy {
            document: text,
            days: days.get(),
        });
    };
    view! {
        <section class="panel impact" aria-labelledby="impact-heading" data-testid="impact">
            <h2 id="impact-heading">"Impact"</h2>
            <p class="muted">
                "What this draft would have changed over the calls the journal recorded: each call's "
                "tool, actor and session run through the same engine, against the tools as they are now."
            </p>
            <div class="row">
                <div class="field">
                    <label for="impact-days">"Calls of the last"</label>
                    <select
                        id="impact-days"
                        on:change=move |ev| days.set(event_target_value(&ev).parse().unwrap_or(7))
                    >
                        <option value="1">"day"</option>
                        <option value="7" selected>"7 days"</option>
                        <option value="30">"30 days"</option>
                        <option value="90">"90 days"</option>
                    </select>
                </div>
                <button type="button" on:click=run disabled=move || replay.pending().get()>
                    {move || if replay.pending().get() { "Replaying…" } else { "Replay" }}
                </button>
            </div>
            {move || match replay.value().get() {
                None => ().into_any(),
                Some(Err(e)) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                Some(Ok(report)) => view! { <ImpactReport report/> }.into_any(),
            }}
        </section>
    }
    .into_any()
}

#[component]
fn ImpactReport(report: ReplayReport) -> impl IntoView {
    let moved: u64 = report.changes.iter().map(|c| c.count).sum();
    let summary = format!(
        "{} calls replayed, {moved} would change; {} could not be replayed (arguments not kept, or tools no longer in the catalog).",
        report.replayed, report.not_replayable
    );
    view! {
        <p role="status" data-testid="impact-summary">{summary}</p>
        {if report.changes.is_empty() {
            view! { <p class="empty">"No recorded call would be decided differently."</p> }.into_any()
        } else {
            view! {
                <table class="data compact" data-testid="impact-table">
                    <thead>
                        <tr>
                            <th scope="col">"Tool"</th>
                            <th scope="col">"Actor"</th>
                            <th scope="col">"From"</th>
                            <th scope="col">"To"</th>
                            <th scope="col">"Calls"</th>
                            <th scope="col">"Examples"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {report
                            .changes
                            .into_iter()
                            .map(|c| {
                                let from_class = format!("mode mode-{}", c.from);
                                let to_class = format!("mode mode-{}", c.to);
                                let (tool, actor, from, to) = (
                                    c.tool.clone(),
                                    c.actor.clone(),
                                    c.from.clone(),
                                    c.to.clone(),
                                );
                                view! {
                                    <tr data-tool=tool data-actor=actor data-from=from data-to=to>
                                        <td>
                                            <code>{c.tool}</code>
                                            {c
                                                .definition_changed
                                                .then(|| {
                                                    view! {
                                                        <span class="badge" title="The tool's definition changed since these calls; the draft was applied to its current descriptor.">
                                                            "definition changed"
                                                        </span>
                                                    }
                                                })}
                                        </td>
                                        <td>{c.actor}</td>
                                        <td><span class=from_class>{c.from}</span></td>
                                        <td><span class=to_class>{c.to}</span></td>
                                        <td>{c.count}</td>
                                        <td>
                                            {c
                                                .examples
                                                .into_iter()
                                                .map(|id| {
                                                    let href = format!("/receipts/{id}");
                                                    let short = id.get(..12).unwrap_or(&id).to_owned();
                                                    view! { <a href=href title=id>{short} "…"</a> " " }
                                                })
                                                .collect_view()}
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
    }
}

#[component]
fn PreviewPanel(
    preview: Memo<Preview>,
    environment: RwSignal<String>,
    actor: RwSignal<String>,
    preset: RwSignal<String>,
    marks: RwSignal<std::collections::BTreeMap<String, String>>,
) -> impl IntoView {
    // On narrow screens the preview is below the form; the toggle pins it to the bottom of the
    // window, over the form, while the admin edits.
    let pinned = RwSignal::new(false);
    let input = move |id: &'static str, label: &'static str, signal: RwSignal<String>| {
        view! {
            <div class="field">
                <label for=id>{label}</label>
                <input
                    type="text"
                    id=id
                    prop:value=move || signal.get()
                    on:input=move |ev| signal.set(event_target_value(&ev))
                />
            </div>
        }
    };
    view! {
        <aside
            class="preview panel"
            class:pinned=move || pinned.get()
            aria-labelledby="preview-heading"
            data-testid="preview"
        >
            <button
                type="button"
                class="preview-toggle"
                aria-pressed=move || pinned.get().to_string()
                on:click=move |_| pinned.update(|p| *p = !*p)
            >
                {move || if pinned.get() { "Unpin the preview" } else { "Pin the preview" }}
            </button>
            <h2 id="preview-heading">"Live preview"</h2>
            <p class="muted">
                "What a session would be granted under this draft, computed in your browser by the "
                "same engine the server runs."
            </p>
            <div class="row">
                {input("preview-environment", "Environment", environment)}
                {input("preview-actor", "Actor", actor)}
                {input("preview-preset", "Preset", preset)}
            </div>
            {move || {
                let p = preview.get();
                let listed = p.tools.iter().filter(|t| t.listed).count();
                let total = p.tools.len();
                let changed = marks.with(std::collections::BTreeMap::len);
                view! {
                    <p data-testid="preview-summary">
                        {format!("{listed} of {total} tools listed · lease {} s", p.lease_seconds)}
                    </p>
                    <p class="muted" role="status" data-testid="preview-changes">
                        {match changed {
                            0 => String::new(),
                            1 => "1 tool changed by the last edit (marked).".to_owned(),
                            n => format!("{n} tools changed by the last edit (marked)."),
                        }}
                    </p>
                    {if total == 0 {
                        view! {
                            <p class="empty">
                                "The catalog is empty: register an upstream MCP server to see its tools here."
                            </p>
                        }
                            .into_any()
                    } else {
                        view! {
                            <table class="data compact" data-testid="preview-table">
                                <thead>
                                    <tr>
                                        <th scope="col">"Tool"</th>
                                        <th scope="col">"Mode"</th>
                                        <th scope="col">"Rule"</th>
                                        <th scope="col">"schemaHash"</th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {p
                                        .tools
                                        .into_iter()
                                        .map(|t| {
                                            let mode = t.mode.as_str();
                                            let short = t.schema_hash.get(..19).unwrap_or(&t.schema_hash).to_owned();
                                            let schema = serde_json::to_string_pretty(&t.input_schema)
                                                .unwrap_or_default();
                                            let name = t.name.clone();
                                            let hash = t.schema_hash.clone();
                                            let mark = marks.with(|m| m.get(&t.name).cloned());
                                            let changed = mark.is_some();
                                            view! {
                                                <tr
                                                    data-tool=name
                                                    data-mode=mode
                                                    data-schema-hash=hash
                                                    data-changed=changed.then_some("true")
                                                    class:changed=changed
                                                >
                                                    <td>
                                                        <code>{t.name}</code>
                                                        {mark.map(|m| view! { <p class="what-changed">{m}</p> })}
                                                        <details>
                                                            <summary>"input schema"</summary>
                                                            <pre class="schema">{schema}</pre>
                                                        </details>
                                                        {t.error.map(|e| view! { <p class="error">{e}</p> })}
                                                    </td>
                                                    <td>
                                                        <span class=format!("mode mode-{mode}")>{mode}</span>
                                                    </td>
                                                    <td>
                                                        {match t.rule_id {
                                                            Some(r) => view! { <code>{r}</code> }.into_any(),
                                                            None => view! { <span class="muted">"default"</span> }.into_any(),
                                                        }}
                                                    </td>
                                                    <td>
                                                        <code title=t.schema_hash>{short} "…"</code>
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
                    <ItemTable
                        kind="resource"
                        heading="Resources"
                        testid="preview-resources"
                        items=p.resources
                        marks
                    />
                    <ItemTable
                        kind="template"
                        heading="Resource templates"
                        testid="preview-templates"
                        items=p.resource_templates
                        marks
                    />
                    <ItemTable kind="prompt" heading="Prompts" testid="preview-prompts" items=p.prompts marks/>
                }
            }}
        </aside>
    }
    .into_any()
}

/// The preview of the catalog's resources, templates or prompts: each with its mode, whether
/// it is listed (and so readable) and the rule that decided.
#[component]
fn ItemTable(
    kind: &'static str,
    heading: &'static str,
    testid: &'static str,
    items: Vec<PreviewItem>,
    marks: RwSignal<std::collections::BTreeMap<String, String>>,
) -> impl IntoView {
    if items.is_empty() {
        return ().into_any();
    }
    let listed = items.iter().filter(|i| i.listed).count();
    let total = items.len();
    view! {
        <h3>{heading}</h3>
        <p class="muted" data-testid=format!("{testid}-summary")>
            {format!("{listed} of {total} listed")}
        </p>
        <table class="data compact" data-testid=testid>
            <thead>
                <tr>
                    <th scope="col">{if kind == "prompt" { "Prompt" } else { "URI" }}</th>
                    <th scope="col">"Upstream"</th>
                    <th scope="col">"Mode"</th>
                    <th scope="col">"Rule"</th>
                </tr>
            </thead>
            <tbody>
                {items
                    .into_iter()
                    .map(|i| {
                        let mark = marks.with(|m| m.get(&item_mark(kind, &i)).cloned());
                        let changed = mark.is_some();
                        // What the caller meets: a mode that is not `allow`, or an item the
                        // catalog cannot route, is not listed.
                        let shown = if i.listed {
                            "allow"
                        } else if i.mode == Mode::Deny {
                            "deny"
                        } else {
                            "hide"
                        };
                        let key = i.key.clone();
                        view! {
                            <tr
                                data-item=key
                                data-mode=shown
                                data-listed=i.listed.to_string()
                                data-changed=changed.then_some("true")
                                class:changed=changed
                            >
                                <td>
                                    <code>{i.key}</code>
                                    {mark.map(|m| view! { <p class="what-changed">{m}</p> })}
                                    {(!i.routable)
                                        .then(|| {
                                            view! {
                                                <p class="muted">
                                                    "Offered by another upstream too: never exposed."
                                                </p>
                                            }
                                        })}
                                </td>
                                <td>{i.upstream}</td>
                                <td>
                                    <span class=format!("mode mode-{shown}")>{shown}</span>
                                </td>
                                <td>
                                    {match i.rule_id {
                                        Some(r) => view! { <code>{r}</code> }.into_any(),
                                        None => view! { <span class="muted">"no rule"</span> }.into_any(),
                                    }}
                                </td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

#[component]
fn Activation(
    id: String,
    saved: Memo<Option<PolicyVersionView>>,
    active_in: RwSignal<Vec<String>>,
    can_write: bool,
) -> impl IntoView {
    let activate = ServerAction::<ActivatePolicy>::new();
    let environment = RwSignal::new("default".to_owned());
    Effect::new(move |_| {
        if let Some(Ok(summary)) = activate.value().get() {
            active_in.set(summary.active_in);
        }
    });
    view! {
        <section class="panel" aria-labelledby="activation-heading">
            <h2 id="activation-heading">"Activation"</h2>
            <p data-testid="active-in">
                {move || {
                    let envs = active_in.get();
                    if envs.is_empty() {
                        "Not active in any environment.".to_owned()
                    } else {
                        format!("Active in: {}", envs.join(", "))
                    }
                }}
            </p>
            {can_write
                .then(|| {
                    let id = id.clone();
                    view! {
                        <form
                            class="inline"
                            on:submit=move |ev| {
                                ev.prevent_default();
                                activate.dispatch(ActivatePolicy {
                                    id: id.clone(),
                                    environment: environment.get(),
                                });
                            }
                        >
                            <label for="activate-environment">"Environment"</label>
                            <input
                                type="text"
                                id="activate-environment"
                                prop:value=move || environment.get()
                                on:input=move |ev| environment.set(event_target_value(&ev))
                            />
                            <button
                                type="submit"
                                disabled=move || saved.get().is_none() || activate.pending().get()
                            >
                                "Activate for new sessions"
                            </button>
                        </form>
                        <p class="field-error" role="alert">
                            {move || match activate.value().get() {
                                Some(Err(e)) => Some(e.field("environment").map(str::to_owned).unwrap_or(e.message)),
                                _ => None,
                            }}
                        </p>
                    }
                })}
        </section>
    }
    .into_any()
}

#[component]
fn History(versions: RwSignal<Vec<PolicyVersionView>>, cx: Ctx) -> impl IntoView {
    view! {
        <section aria-labelledby="history-heading">
            <h2 id="history-heading">"Versions"</h2>
            <Show
                when=move || versions.with(|v| !v.is_empty())
                fallback=|| view! { <p class="empty">"No version saved yet."</p> }
            >
                <table class="data" data-testid="version-table">
                    <thead>
                        <tr>
                            <th scope="col">"Version"</th>
                            <th scope="col">"Saved by"</th>
                            <th scope="col">"Saved"</th>
                            <th scope="col"><span class="sr-only">"Actions"</span></th>
                        </tr>
                    </thead>
                    <tbody>
                        {move || {
                            versions
                                .get()
                                .into_iter()
                                .map(|v| {
                                    let doc = v.document.clone();
                                    let name = v.policy_id.clone();
                                    view! {
                                        <tr data-version=v.version>
                                            <td>{v.version}</td>
                                            <td>{v.created_by}</td>
                                            <td><Time value=Some(v.created_at)/></td>
                                            <td>
                                                {(!cx.read_only)
                                                    .then(|| {
                                                        view! {
                                                            <button
                                                                type="button"
                                                                on:click=move |_| {
                                                                    cx.draft.set(Draft::from_document(&name, &doc));
                                                                }
                                                            >
                                                                {format!("Edit from version {}", v.version)}
                                                            </button>
                                                        }
                                                    })}
                                            </td>
                                        </tr>
                                    }
                                })
                                .collect_view()
                        }}
                    </tbody>
                </table>
            </Show>
        </section>
    }
    .into_any()
}
