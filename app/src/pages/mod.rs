//! One module per dashboard page.

pub mod approvals;
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

/// Epoch ms as `YYYY-MM-DDTHH:MM:SS.mmmZ` (the server's layout).
pub fn format_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// Epoch ms of `YYYY-MM-DDTHH:MM:SS…Z` (UTC).
pub fn parse_ms(s: &str) -> Option<i64> {
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss) = (n(11..13)?, n(14..16)?, n(17..19)?);
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000)
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
