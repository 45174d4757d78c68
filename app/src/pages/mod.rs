//! One module per dashboard page.

pub mod agents;
pub mod approvals;
pub mod journal;
pub mod not_found;
pub mod overview;
pub mod policies;
pub mod policy_editor;
pub mod receipts;
pub mod sessions;
pub mod sign_in;
pub mod tokens;
pub mod tools;
pub mod users;
pub mod webhooks;

use leptos::prelude::*;

/// Scope checkboxes plus a free-text field for other scopes, shared by the token and user forms.
/// `selected` holds Aperture's own scopes; `extra` the rest, separated by spaces or commas.
#[component]
pub fn ScopePicker(
    selected: RwSignal<Vec<String>>,
    extra: RwSignal<String>,
    #[prop(into)] id_prefix: String,
    #[prop(optional, into)] error: Signal<Option<String>>,
) -> impl IntoView {
    let extra_id = format!("{id_prefix}-extra-scopes");
    view! {
        <fieldset class="scopes" aria-describedby=format!("{id_prefix}-scopes-error")>
            <legend>"Scopes"</legend>
            {engine::scope::APERTURE_SCOPES
                .into_iter()
                .map(|scope| {
                    let id = format!("{id_prefix}-{}", scope.replace(':', "-"));
                    view! {
                        <label class="check" for=id>
                            <input
                                type="checkbox"
                                id=id.clone()
                                value=scope
                                prop:checked=move || selected.with(|s| s.iter().any(|x| x == scope))
                                on:change=move |ev| {
                                    let on = event_target_checked(&ev);
                                    selected
                                        .update(|s| {
                                            s.retain(|x| x != scope);
                                            if on {
                                                s.push(scope.to_owned());
                                            }
                                        });
                                }
                            />
                            <code>{scope}</code>
                        </label>
                    }
                })
                .collect_view()}
            <label for=extra_id.clone()>"Other scopes (tool scopes, separated by spaces)"</label>
            <input
                type="text"
                id=extra_id
                placeholder="github:read"
                prop:value=move || extra.get()
                on:input=move |ev| extra.set(event_target_value(&ev))
            />
            <p class="field-error" id=format!("{id_prefix}-scopes-error") role="alert">
                {move || error.get()}
            </p>
        </fieldset>
    }
}

/// All scopes chosen in a [`ScopePicker`], in the order a person would expect to read them.
pub fn collect_scopes(selected: &[String], extra: &str) -> Vec<String> {
    let mut scopes: Vec<String> = engine::scope::APERTURE_SCOPES
        .iter()
        .filter(|s| selected.iter().any(|x| x == *s))
        .map(|s| (*s).to_owned())
        .collect();
    scopes.extend(
        extra
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    );
    scopes
}

/// The first error message for any field starting with `prefix` (`scopes` matches `scopes[2]`).
pub fn field_error(
    result: Option<&Result<impl Sized, crate::error::AppError>>,
    prefix: &str,
) -> Option<String> {
    let Some(Err(e)) = result else { return None };
    let fields = &e.details.as_ref()?.fields;
    fields
        .iter()
        .find(|f| f.path == prefix || f.path.starts_with(&format!("{prefix}[")))
        .map(|f| f.message.clone())
}

/// The environment new tokens and users get unless told otherwise.
pub use engine::environment::DEFAULT_ENVIRONMENT;

/// A list typed into one field, separated by commas or white space.
pub fn split_list(text: &str) -> Vec<String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The error message when it is not about a particular field.
pub fn form_error(result: Option<&Result<impl Sized, crate::error::AppError>>) -> Option<String> {
    match result {
        Some(Err(e)) if !e.has_fields() => Some(e.message.clone()),
        _ => None,
    }
}

/// An RFC 3339 timestamp shown as `2026-11-30 04:52 UTC`, the full value as a tooltip.
#[component]
pub fn Time(#[prop(into)] value: Option<String>) -> impl IntoView {
    match value {
        None => view! { <span class="muted">"—"</span> }.into_any(),
        Some(v) => {
            let short = v
                .get(..16)
                .map(|s| s.replace('T', " "))
                .unwrap_or(v.clone());
            view! {
                <time datetime=v.clone() title=v>
                    {short}
                    " UTC"
                </time>
            }
            .into_any()
        }
    }
}

/// Epoch ms as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, always three fraction digits).
pub fn format_ms(ms: i64) -> String {
    const LAYOUT: &[time::format_description::BorrowedFormatItem<'_>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(LAYOUT).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// Epoch ms of an RFC 3339 time (the server's `store::rfc3339` layout, with or without a
/// fraction); `None` when it is not one.
pub fn parse_ms(s: &str) -> Option<i64> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_checked_then_extra_scopes() {
        let scopes = collect_scopes(
            &[engine::scope::ADMIN.into(), engine::scope::READ.into()],
            " github:read, ,jira:write ",
        );
        assert_eq!(
            scopes,
            vec![
                engine::scope::READ,
                engine::scope::ADMIN,
                "github:read",
                "jira:write"
            ]
        );
    }
}
