//! Every dashboard server function against nobody signed in, and people signed in with and
//! without the scope it declares (`app::session::caller`). The table below must name exactly
//! the server functions the server registers.

use std::collections::BTreeSet;

use engine::scope::{self, APERTURE_SCOPES};
use reqwest::{Client, StatusCode};
use serde_json::json;

use crate::helpers::{Requests, TestApp};

/// What a server function needs of its caller.
#[derive(Debug, Clone, Copy)]
enum Need {
    /// Nobody in particular: signing in and out, and asking who is signed in.
    Public,
    /// Someone signed in; the service decides what they see.
    SignedIn,
    /// Someone signed in with the scope.
    Scope(&'static str),
}

/// A server function, the form arguments that reach its body, and its need.
struct Case {
    endpoint: &'static str,
    form: &'static str,
    need: Need,
}

const CASES: &[Case] = &[
    Case {
        endpoint: "sign-in",
        form: "tenant=default&username=nobody&password=wrong-password",
        need: Need::Public,
    },
    Case {
        endpoint: "sign-out",
        form: "",
        need: Need::Public,
    },
    Case {
        endpoint: "me",
        form: "",
        need: Need::Public,
    },
    Case {
        endpoint: "overview",
        form: "",
        need: Need::SignedIn,
    },
    Case {
        endpoint: "tokens/list",
        form: "",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "tokens/create",
        form: "request[actor_id]=matrix&request[scopes][0]=agent_tool_exposure%3Aread",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "tokens/revoke",
        form: "id=tok_nothing",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "webhooks/list",
        form: "",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "webhooks/create",
        form: "request[url]=https%3A%2F%2Fhooks.example%2Fa&request[events][0]=invocation.parked",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "webhooks/delete",
        form: "id=whk_nothing",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "users/list",
        form: "",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "users/create",
        form: "request[username]=matrix&request[password]=long-enough-password&request[scopes][0]=agent_tool_exposure%3Aread",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "users/scopes",
        form: "username=nobody&request[scopes][0]=agent_tool_exposure%3Aread",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "policies/list",
        form: "",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "policies/editor",
        form: "id=matrix",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "policies/save",
        form: "id=matrix&document=%7B%7D",
        need: Need::Scope(scope::WRITE),
    },
    Case {
        endpoint: "policies/replay",
        form: "document=%7B%7D&days=1",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "policies/activate",
        form: "id=matrix&environment=",
        need: Need::Scope(scope::WRITE),
    },
    Case {
        endpoint: "approvals/list",
        form: "",
        need: Need::SignedIn,
    },
    Case {
        endpoint: "approvals/decide",
        form: "id=inv_nothing&action=cancel",
        need: Need::SignedIn,
    },
    Case {
        endpoint: "receipts/list",
        form: "query[decision]=deny",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "receipts/get",
        form: "id=rcp_nothing",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "tools/list",
        form: "",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "tools/describe",
        form: "name=nothing&request[risk][0]=read",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "tools/decide",
        form: "name=nothing&decision=accept&definition_hash=sha256%3A00",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "items/decide",
        form: "kind=resource&upstream_id=ups_nothing&key=docs%3A%2F%2Fx&decision=accept&definition_hash=sha256%3A00",
        need: Need::Scope(scope::ADMIN),
    },
    Case {
        endpoint: "upstreams/sync",
        form: "id=ups_nothing",
        need: Need::Scope(scope::WRITE),
    },
    Case {
        endpoint: "sessions/list",
        form: "",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "sessions/get",
        form: "id=ses_nothing",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "sessions/revoke",
        form: "id=ses_nothing",
        need: Need::SignedIn,
    },
    Case {
        endpoint: "agents/list",
        form: "",
        need: Need::Scope(scope::READ),
    },
    Case {
        endpoint: "agents/get",
        form: "id=agt_nothing",
        need: Need::SignedIn,
    },
    Case {
        endpoint: "journal",
        form: "",
        need: Need::SignedIn,
    },
];

const PASSWORD: &str = "matrix-password-1";

/// The short name of a scope (`read` of `agent_tool_exposure:read`).
fn short(scope: &str) -> &str {
    scope.rsplit(':').next().unwrap()
}

/// A browser signed in as a new user with `scopes`.
async fn person(app: &TestApp, admin: &str, username: &str, scopes: &[&str]) -> Client {
    let user = json!({"username": username, "password": PASSWORD, "scopes": scopes});
    app.post("/users")
        .as_(admin)
        .json(user)
        .await
        .expect_created();
    let browser = app.new_browser();
    app.sign_in(&browser, username, PASSWORD)
        .await
        .expect_status(StatusCode::OK);
    browser
}

async fn call(app: &TestApp, browser: &Client, case: &Case) -> crate::requests::Reply {
    app.server_fn(browser, case.endpoint)
        .body(case.form.to_owned())
        .await
}

#[tokio::test]
async fn every_server_function_enforces_its_need() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;

    // The table names exactly what the server registers under /ui.
    let registered: BTreeSet<String> = leptos::server_fn::axum::server_fn_paths()
        .filter_map(|(path, _)| path.strip_prefix("/ui/").map(str::to_owned))
        .collect();
    let tabled: BTreeSet<String> = CASES.iter().map(|c| c.endpoint.to_owned()).collect();
    assert_eq!(
        registered, tabled,
        "every dashboard server function needs a row in this matrix"
    );

    // For each scope, one person with only it and one with every other but admin (which
    // satisfies every scope).
    let mut only = Vec::new();
    let mut all_but = Vec::new();
    for s in APERTURE_SCOPES {
        let others: Vec<&str> = APERTURE_SCOPES
            .into_iter()
            .filter(|o| *o != s && *o != scope::ADMIN)
            .collect();
        only.push((
            s,
            person(&app, &admin, &format!("only-{}", short(s)), &[s]).await,
        ));
        let name = format!("all-but-{}", short(s));
        all_but.push((s, person(&app, &admin, &name, &others).await));
    }
    let anonymous = app.new_browser();

    for case in CASES {
        let label = case.endpoint;
        match case.need {
            Need::Public => {
                let answer = call(&app, &anonymous, case).await;
                assert_ne!(answer.status(), StatusCode::FORBIDDEN, "{label}");
                assert!(
                    !answer.status().is_server_error(),
                    "{label}: {}",
                    answer.text()
                );
            }
            Need::SignedIn => {
                let answer = call(&app, &anonymous, case).await;
                answer.expect_error(StatusCode::UNAUTHORIZED, "unauthenticated");
                for (s, browser) in &only {
                    let answer = call(&app, browser, case).await;
                    let status = answer.status();
                    assert!(
                        status != StatusCode::UNAUTHORIZED && !status.is_server_error(),
                        "{label} with only {s}: {status} {}",
                        answer.text()
                    );
                }
            }
            Need::Scope(needed) => {
                let answer = call(&app, &anonymous, case).await;
                answer.expect_error(StatusCode::UNAUTHORIZED, "unauthenticated");
                let (_, without) = all_but.iter().find(|(s, _)| *s == needed).unwrap();
                let refused = call(&app, without, case).await;
                refused.expect_error(StatusCode::FORBIDDEN, "permission_denied");
                let (_, with) = only.iter().find(|(s, _)| *s == needed).unwrap();
                let answer = call(&app, with, case).await;
                let status = answer.status();
                assert!(
                    status != StatusCode::UNAUTHORIZED
                        && status != StatusCode::FORBIDDEN
                        && !status.is_server_error(),
                    "{label} with only {needed}: {status} {}",
                    answer.text()
                );
            }
        }
    }
}
