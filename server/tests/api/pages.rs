//! Dashboard pages as a browser that runs no script sees them: the data is in the HTML the
//! server sends, in place (not only in chunks that a script would move there).

use engine::scope;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{ADMIN_PASSWORD, Requests, TestApp, text_of};

/// What follows the element that `from` opens with `open` (nested ones included), up to its
/// matching `close`; empty when it is never closed.
fn after_element<'a>(from: &'a str, open: &str, close: &str) -> &'a str {
    let (mut depth, mut at) = (0usize, 0);
    loop {
        let next_open = from[at..].find(open).map(|i| at + i);
        let Some(next_close) = from[at..].find(close).map(|i| at + i) else {
            return "";
        };
        match next_open {
            Some(o) if o < next_close => {
                depth += 1;
                at = o + open.len();
            }
            _ => {
                depth = depth.saturating_sub(1);
                at = next_close + close.len();
                if depth == 0 {
                    return &from[at..];
                }
            }
        }
    }
}

/// The part of `html` a browser shows when it runs no script: without `<script>` elements, and
/// without `<template>` elements, whose content stays inert until a script moves it in place
/// (how out-of-order streaming delivers what the server resolved late).
fn shown_without_scripts(html: &str) -> String {
    let mut shown = String::new();
    let mut rest = html;
    loop {
        let next = [("<script", "</script>"), ("<template", "</template>")]
            .into_iter()
            .filter_map(|(open, close)| rest.find(open).map(|at| (at, open, close)))
            .min();
        let Some((at, open, close)) = next else {
            shown.push_str(rest);
            return shown;
        };
        shown.push_str(&rest[..at]);
        rest = after_element(&rest[at..], open, close);
    }
}

#[test]
fn scripts_and_templates_are_not_shown() {
    let html = "<p>a</p><template><p>b<template>c</template>d</p></template><script>e</script>\
                <p>f</p><script nonce=\"n\">g</script>";
    assert_eq!(shown_without_scripts(html), "<p>a</p><p>f</p>");
}

/// Issue 45 item 13: every signed-in page, fetched as plain HTTP, shows its data in the HTML —
/// receipts (filtered by the query string too, with the filter form showing the filter), the
/// approval queue, and a known datum of each other page — and none is left saying "Loading…".
#[tokio::test]
async fn signed_in_pages_show_their_data_without_scripts() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let echo = "mcp__fixture__echo";
    let stats = "mcp__fixture__stats";
    app.register_fixture(&admin, &[echo, stats]).await;
    let policy2 = json!({"rules": [
        {"id": "echo-rule", "match": {"name": echo}, "mode": "approval_required", "reason": "a person looks first"},
        {"id": "reads", "match": {"risk_exactly": ["read"]}, "mode": "allow"}
    ]});
    app.activate_policy(&admin, "p", policy2).await;
    let (agent_token_id, agent) = app.token_full("default", "agent", &[scope::RUN]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    let session = list["_meta"]["session_id"].as_str().unwrap().to_owned();
    let allowed = app.mcp_call(&agent, &list, stats, json!({})).await;
    let allowed_receipt = text_of(&allowed["_meta"]["receipt"]["receipt_id"]).to_owned();
    let parked = app
        .mcp_call(&agent, &list, echo, json!({"text": "ship it"}))
        .await;
    assert_eq!(parked["_meta"]["status"], "input_required", "{parked}");
    let invocation = text_of(&parked["_meta"]["invocation_id"]).to_owned();
    let parked_receipt = text_of(&parked["_meta"]["receipt"]["receipt_id"]).to_owned();

    let signed_in = app.sign_in(&app.browser, "admin", ADMIN_PASSWORD).await;
    signed_in.expect_status(StatusCode::OK);

    let receipt_row = |id: &str| format!("data-receipt-id=\"{id}\"");
    let pages: Vec<(String, Vec<String>, Vec<String>)> = vec![
        (
            "/receipts".into(),
            vec![receipt_row(&allowed_receipt), receipt_row(&parked_receipt)],
            vec![],
        ),
        (
            "/receipts?decision=park".into(),
            vec![receipt_row(&parked_receipt)],
            vec![receipt_row(&allowed_receipt)],
        ),
        (
            // The filter form shows the filter it applied, so submitting it again keeps it.
            format!("/receipts?tool={echo}"),
            vec![
                receipt_row(&parked_receipt),
                format!("name=\"tool\" value=\"{echo}\""),
            ],
            vec![receipt_row(&allowed_receipt)],
        ),
        (
            format!("/receipts/{parked_receipt}"),
            vec![
                parked_receipt.clone(),
                "data-testid=\"verification\"".into(),
            ],
            vec![],
        ),
        (
            "/approvals".into(),
            vec![
                format!("data-invocation-id=\"{invocation}\""),
                format!("<code>{echo}</code>"),
            ],
            vec![],
        ),
        (
            "/".into(),
            vec![format!("href=\"/approvals#{invocation}\"")],
            vec![],
        ),
        (
            "/policies".into(),
            vec!["data-policy-id=\"p\"".into()],
            vec![],
        ),
        (
            "/policies/p".into(),
            vec!["Version 1 saved by".into()],
            vec![],
        ),
        (
            "/tools".into(),
            vec![
                format!("data-tool=\"{echo}\""),
                format!("data-tool=\"{stats}\""),
            ],
            vec![],
        ),
        (
            "/sessions".into(),
            vec![format!("href=\"/sessions/{session}\"")],
            vec![],
        ),
        (
            format!("/sessions/{session}"),
            vec![session.clone(), "data-testid=\"session-status\"".into()],
            vec![],
        ),
        (
            "/tokens".into(),
            vec![format!("data-token-id=\"{agent_token_id}\"")],
            vec![],
        ),
        (
            "/users".into(),
            vec!["data-username=\"admin\"".into()],
            vec![],
        ),
        (
            "/journal".into(),
            vec!["data-testid=\"verifier-key\"".into()],
            vec![],
        ),
        ("/webhooks".into(), vec!["No webhooks yet.".into()], vec![]),
        ("/agents".into(), vec!["No hosted agent yet".into()], vec![]),
    ];
    for (path, present, absent) in pages {
        let response = app.in_browser(Method::GET, &path).await;
        let response = response.expect_status(StatusCode::OK);
        // The data also reaches the wasm for hydration, in scripts that the page's
        // Content-Security-Policy must let run.
        let policy = response.header("content-security-policy");
        let nonce = policy
            .split("'nonce-")
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .expect("a script nonce")
            .to_owned();
        let html = response.text();
        for script in html.split("<script").skip(1) {
            let tag = script.split('>').next().unwrap();
            assert!(
                tag.contains(&format!("nonce=\"{nonce}\"")),
                "{path}: <script{tag}>"
            );
        }
        let shown = shown_without_scripts(&html);
        assert!(
            !shown.contains("Loading…"),
            "{path} waits for a script: {shown}"
        );
        for text in present {
            assert!(shown.contains(&text), "{path} shows {text}: {shown}");
        }
        for text in absent {
            assert!(!shown.contains(&text), "{path} does not show {text}");
        }
    }
    // A receipt that is not there (or is another tenant's) is a page that says so, with 404.
    let missing = app.in_browser(Method::GET, "/receipts/rcp_missing").await;
    let missing = missing.expect_status(StatusCode::NOT_FOUND);
    assert!(
        shown_without_scripts(&missing.text()).contains("not found"),
        "{}",
        missing.text()
    );
}
