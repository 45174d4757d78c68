//! Issue 47 (item 2): resource subscriptions behind the policy. `resources/subscribe` (2025
//! eras, on an MCP session) and `subscriptions/listen` with `resourceSubscriptions`
//! (2026-07-28) subscribe only to what the caller can read (anything else answers as a refused
//! read: not found, with the receipt; left out of the acknowledgement), and each upstream
//! `notifications/resources/updated` is decided again at delivery: a caller that may no longer
//! read the resource no longer hears of it. The fixture's subscribed resources change every
//! 100 ms.

use std::time::Duration;

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Requests, TestApp, rpc};
use crate::streams::{Stream, get_mcp, initialize, stateless, stateless_meta};

const README: &str = "docs://readme";
const SECRET: &str = "secret://keys/one";

fn rules(docs: &str) -> Value {
    json!({"rules": [
        {"id": "no-secrets", "resource": {"uri": "secret://*"}, "mode": "deny"},
        {"id": "docs", "resource": {"uri": "docs://*"}, "mode": docs},
        {"id": "tools", "mode": "allow"}
    ]})
}

struct Setup {
    app: TestApp,
    admin: String,
    agent: String,
}

async fn setup() -> Setup {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &[]).await;
    app.activate_policy(&admin, "items", rules("allow")).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    Setup { app, admin, agent }
}

impl Setup {
    /// A 2025-era connection of the agent: its `Mcp-Session-Id`.
    async fn connect(&self) -> String {
        let response = initialize(&self.app, &self.agent, "subscriber").await;
        let body = response.json();
        assert_eq!(
            body["result"]["capabilities"]["resources"]["subscribe"], true,
            "{body}"
        );
        response.header("mcp-session-id").to_owned()
    }

    /// `method` with `uri` on connection `session` (none: without `Mcp-Session-Id`).
    async fn on_session(&self, session: Option<&str>, method: &str, uri: &str) -> Value {
        let mut post = self.app.mcp_post(&self.agent);
        if let Some(session) = session {
            post = post.header("mcp-session-id", session);
            post = post.header("mcp-protocol-version", "2025-11-25");
        }
        post.json(rpc(3, method, json!({"uri": uri}))).await.json()
    }

    /// The connection's listening stream (`GET /mcp`).
    async fn listen(&self, session: &str) -> Stream {
        Stream::open(get_mcp(
            &self.app,
            &self.agent,
            &[("mcp-session-id", session)],
        ))
        .await
    }
}

/// The next `notifications/resources/updated` on `stream` within `within` (other
/// notifications, such as `list_changed`, are skipped).
async fn next_update(stream: &mut Stream, within: Duration) -> Option<Value> {
    let until = tokio::time::Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let (_, message) = stream.message(left).await?;
        if message["method"] == "notifications/resources/updated" {
            return Some(message);
        }
    }
}

/// Reads `stream` until no update has come for `quiet`: what was decided before a change
/// went out before it (at most `within`).
async fn drain_updates(stream: &mut Stream, quiet: Duration, within: Duration) {
    let until = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < until {
        if next_update(stream, quiet).await.is_none() {
            return;
        }
    }
    panic!("updates kept coming for {within:?}");
}

/// Once what was decided before went out, no update comes for 1.5 s (the fixture announces
/// one every 100 ms while subscribed).
async fn assert_no_more_updates(stream: &mut Stream, why: &str) {
    drain_updates(stream, Duration::from_millis(700), Duration::from_secs(10)).await;
    assert!(
        next_update(stream, Duration::from_millis(1500))
            .await
            .is_none(),
        "{why}"
    );
}

#[tokio::test]
async fn a_subscriber_hears_of_a_resource_only_while_it_may_read_it() {
    let s = setup().await;
    let session = s.connect().await;
    let other_session = s.connect().await;
    let mut stream = s.listen(&session).await;
    let mut other = s.listen(&other_session).await;

    let subscribed = s
        .on_session(Some(&session), "resources/subscribe", README)
        .await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    let update = next_update(&mut stream, Duration::from_secs(10))
        .await
        .expect("the subscribed resource's change is told");
    assert_eq!(update["params"]["uri"], README, "{update}");
    // Only the session that subscribed hears it.
    assert!(
        next_update(&mut other, Duration::from_millis(800))
            .await
            .is_none()
    );

    // What it cannot read it cannot subscribe to: refused as a read is, with the receipt.
    let refused = s
        .on_session(Some(&session), "resources/subscribe", SECRET)
        .await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    assert_eq!(refused["error"]["data"]["uri"], SECRET);
    let receipt = &refused["error"]["data"]["receipt"];
    assert_eq!(receipt["decision"], "deny", "{receipt}");
    assert_eq!(receipt["reason"], "policy_denied", "{receipt}");
    // Subscriptions belong to a session.
    let sessionless = s.on_session(None, "resources/subscribe", README).await;
    assert_eq!(sessionless["error"]["code"], -32600, "{sessionless}");

    // Decided again at delivery: once the policy hides the docs, no change of them is told,
    // though the upstream keeps announcing them.
    s.app
        .activate_policy(&s.admin, "items", rules("hide"))
        .await;
    assert_no_more_updates(
        &mut stream,
        "a resource the caller may no longer read is still announced",
    )
    .await;
    s.app
        .activate_policy(&s.admin, "items", rules("allow"))
        .await;
    let update = next_update(&mut stream, Duration::from_secs(10))
        .await
        .expect("allowed again, its changes are told again");
    assert_eq!(update["params"]["uri"], README);

    // Unsubscribed, nothing more comes.
    let unsubscribed = s
        .on_session(Some(&session), "resources/unsubscribe", README)
        .await;
    assert_eq!(unsubscribed["result"], json!({}), "{unsubscribed}");
    assert_no_more_updates(&mut stream, "an unsubscribed resource is still announced").await;
}

#[tokio::test]
async fn a_stateless_listener_subscribes_to_what_it_can_read_and_hears_it_tagged() {
    let s = setup().await;
    let meta = stateless_meta();
    let listen = json!({"jsonrpc": "2.0", "id": "sub-r", "method": "subscriptions/listen",
                        "params": {"_meta": meta,
                                   "notifications": {"resourceSubscriptions": [README, SECRET]}}});
    let listen = stateless(&s.app, &s.agent, "subscriptions/listen").json(listen);
    let mut stream = Stream::open(listen).await;
    let (_, ack) = stream.message(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourceSubscriptions": [README]}),
        "only what the caller can read is honored"
    );
    let update = next_update(&mut stream, Duration::from_secs(10))
        .await
        .expect("an update");
    assert_eq!(update["params"]["uri"], README, "{update}");
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub-r"
    );
    s.app
        .activate_policy(&s.admin, "items", rules("deny"))
        .await;
    assert_no_more_updates(&mut stream, "a denied resource is still announced").await;

    // 2026-07-28 has no resources/subscribe.
    let subscribe = rpc(
        4,
        "resources/subscribe",
        json!({"uri": README, "_meta": meta}),
    );
    let subscribe = stateless(&s.app, &s.agent, "resources/subscribe")
        .json(subscribe)
        .await;
    assert_eq!(subscribe.status(), StatusCode::NOT_FOUND);
    assert_eq!(subscribe.json()["error"]["code"], -32601);
}
