//! The journal as a transparency log: its signed checkpoints (size, age, cosigners), the key to
//! pin, the registered witnesses, and an evidence bundle verified in the browser by the wasm
//! engine (`engine::evidence::verify`, the code of `aperture evidence verify`).

use leptos::prelude::*;

use super::Time;
use crate::api::journal;
use crate::dto::{CheckpointRow, JournalView};

/// The Journal page.
#[component]
pub fn JournalPage() -> impl IntoView {
    let data = Resource::new(|| (), |_| journal());
    view! {
        <h1>"Journal"</h1>
        <p class="lede">
            "Every decision is a signed record in this tenant's journal, which is also a Merkle tree. "
            "Signed checkpoints of the tree are kept in the database and in a file outside it; "
            "witnesses cosign them, so a rewritten or shortened history is refused."
        </p>
        <Suspense fallback=|| view! { <p class="loading">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(v) => view! { <Log v/> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
                }
            })}
        </Suspense>
        <EvidenceCheck/>
    }
    .into_any()
}

/// `then` to `now` (both RFC 3339) in words: `4 min ago`.
pub fn age(now: &str, then: &str) -> String {
    use time::format_description::well_known::Rfc3339;
    let parse = |t: &str| time::OffsetDateTime::parse(t, &Rfc3339).ok();
    let (Some(now), Some(then)) = (parse(now), parse(then)) else {
        return String::new();
    };
    let seconds = (now - then).whole_seconds().max(0);
    match seconds {
        0..60 => format!("{seconds} s ago"),
        60..3_600 => format!("{} min ago", seconds / 60),
        3_600..86_400 => format!("{} h ago", seconds / 3_600),
        _ => format!("{} days ago", seconds / 86_400),
    }
}

#[component]
fn Log(v: JournalView) -> impl IntoView {
    let now = v.now.clone();
    view! {
        <section class="panel" aria-labelledby="log-heading">
            <h2 id="log-heading">"Signed checkpoints"</h2>
            <dl class="facts">
                <dt>"Log origin"</dt>
                <dd><code data-testid="origin">{v.origin.clone()}</code></dd>
                <dt>"Log key (pin it)"</dt>
                <dd><code data-testid="verifier-key" class="wrap">{v.verifier_key.clone()}</code></dd>
            </dl>
            {if v.checkpoints.is_empty() {
                view! { <p class="empty">"No checkpoint yet: one is made within a minute of the first records."</p> }
                    .into_any()
            } else {
                view! {
                    <table class="data" data-testid="checkpoint-table">
                        <thead>
                            <tr>
                                <th scope="col">"Records"</th>
                                <th scope="col">"Made"</th>
                                <th scope="col">"Age"</th>
                                <th scope="col">"Cosigned by"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {v.checkpoints
                                .into_iter()
                                .map(|c| view! { <CheckpointLine c now=now.clone()/> })
                                .collect_view()}
                        </tbody>
                    </table>
                }
                    .into_any()
            }}
        </section>
        {(!v.witnesses.is_empty())
            .then(|| {
                view! {
                    <section class="panel" aria-labelledby="witness-heading">
                        <h2 id="witness-heading">"Witnesses"</h2>
                        <table class="data" data-testid="witness-table">
                            <thead>
                                <tr>
                                    <th scope="col">"Name"</th>
                                    <th scope="col">"Cosigner key"</th>
                                    <th scope="col">"Registered"</th>
                                </tr>
                            </thead>
                            <tbody>
                                {v.witnesses
                                    .into_iter()
                                    .map(|w| {
                                        view! {
                                            <tr>
                                                <td>{w.name}</td>
                                                <td><code class="wrap">{w.key}</code></td>
                                                <td><Time value=Some(w.created_at)/></td>
                                            </tr>
                                        }
                                    })
                                    .collect_view()}
                            </tbody>
                        </table>
                    </section>
                }
            })}
    }
    .into_any()
}

#[component]
fn CheckpointLine(c: CheckpointRow, now: String) -> impl IntoView {
    let age = age(&now, &c.made_at);
    view! {
        <tr data-tree-size=c.tree_size>
            <td>{c.tree_size}</td>
            <td><Time value=Some(c.made_at.clone())/></td>
            <td>{age}</td>
            <td>
                {if c.cosigners.is_empty() {
                    view! { <span class="muted">"no witness yet"</span> }.into_any()
                } else {
                    view! { <span>{c.cosigners.join(", ")}</span> }.into_any()
                }}
            </td>
        </tr>
    }
}

/// The outcome of checking a bundle: whether it verified and what it proved or why not.
fn check(text: &str) -> (bool, String) {
    match engine::evidence::verify(text, None, &[], 0) {
        Ok(v) => (true, v.to_string()),
        Err(e) => (false, e.to_string()),
    }
}

/// Verifies an evidence bundle the person picks or pastes, in the browser.
#[component]
fn EvidenceCheck() -> impl IntoView {
    let text = RwSignal::new(String::new());
    let verdict = RwSignal::new(None::<(bool, String)>);
    let on_file = move |_ev: leptos::ev::Event| {
        #[cfg(feature = "hydrate")]
        {
            use leptos::wasm_bindgen::JsCast;
            let file = _ev
                .target()
                .and_then(|t| t.dyn_into::<leptos::web_sys::HtmlInputElement>().ok())
                .and_then(|input| input.files())
                .and_then(|files| files.get(0));
            if let Some(file) = file {
                wasm_bindgen_futures::spawn_local(async move {
                    match wasm_bindgen_futures::JsFuture::from(file.text()).await {
                        Ok(v) => {
                            let body = v.as_string().unwrap_or_default();
                            verdict.set(Some(check(&body)));
                            text.set(body);
                        }
                        Err(_) => verdict.set(Some((false, "the file cannot be read".into()))),
                    }
                });
            }
        }
    };
    view! {
        <section class="panel" aria-labelledby="evidence-heading">
            <h2 id="evidence-heading">"Verify an evidence bundle (in your browser)"</h2>
            <p class="muted">
                "A session's evidence (its page has “Download evidence”) holds its manifests, receipts, "
                "their inclusion proofs, a signed checkpoint and the keys. It is checked here with the "
                "same code as " <code>"aperture evidence verify"</code> ", against the bundle's own keys; "
                "pin keys with the command line to trust nothing the bundle says."
            </p>
            <label for="evidence-file">"Evidence bundle (JSON file)"</label>
            <input id="evidence-file" type="file" accept="application/json,.json" on:change=on_file/>
            <label for="evidence-text">"…or paste it"</label>
            <textarea
                id="evidence-text"
                rows="4"
                prop:value=move || text.get()
                on:input=move |ev| text.set(event_target_value(&ev))
            ></textarea>
            <button type="button" on:click=move |_| verdict.set(Some(check(&text.get_untracked())))>
                "Verify"
            </button>
            {move || {
                verdict
                    .get()
                    .map(|(ok, detail)| {
                        view! {
                            <p
                                class=if ok { "verdict success" } else { "verdict error" }
                                role="status"
                                data-testid="evidence-verdict"
                            >
                                {if ok { "Valid: " } else { "Invalid: " }}
                                {detail}
                            </p>
                        }
                    })
            }}
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::age;

    #[test]
    fn ages_read_as_words() {
        let now = "2026-12-02T12:00:00Z";
        assert_eq!(age(now, "2026-12-02T11:59:30Z"), "30 s ago");
        assert_eq!(age(now, "2026-12-02T11:56:00Z"), "4 min ago");
        assert_eq!(age(now, "2026-12-02T09:00:00Z"), "3 h ago");
        assert_eq!(age(now, "2026-11-30T12:00:00Z"), "2 days ago");
        assert_eq!(age(now, "garbage"), "");
    }
}
