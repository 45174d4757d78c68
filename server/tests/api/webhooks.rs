//! Webhooks (issue 28): approvers hear about parked calls. Created only by admins, only to
//! addresses the upstream guard allows, with a `whsec_` secret shown once and sealed at rest;
//! deliveries from the outbox written with the status change, signed as Standard Webhooks says,
//! never carrying argument values, retried with backoff, every attempt visible to admins.

use std::time::Duration;

use engine::scope;
use reqwest::StatusCode;
use serde_json::{Value, json};
use standardwebhooks::Webhook;

use crate::helpers::{
    Db, Received, Reply, Requests, TestApp, WebhookReceiver, echo_of, rpc, text_of,
};

/// What only the call's arguments hold: it must never reach a webhook.
const SECRET_ARGUMENT: &str = "argument-value-7f3e91-never-in-a-webhook";

struct Setup {
    app: TestApp,
    admin: String,
    agent: String,
    approver: String,
    list: Value,
}

/// The fixture's `echo` parked for an approver, on a server with `customize`.
async fn setup(db: Db, customize: impl FnOnce(&mut aperture::Config)) -> Option<Setup> {
    let app = TestApp::spawn_with(db, customize).await?;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo"]).await;
    let policy = json!({"rules": [{"id": "echo-rule", "match": {"name": "mcp__fixture__echo"},
                     "mode": "approval_required", "reason": "a person looks first"}]});
    app.activate_policy(&admin, "p", policy).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let approver = app.token("default", "alice", &[scope::APPROVE]).await;
    let list = app.mcp_list(&agent, json!({})).await;
    Some(Setup {
        app,
        admin,
        agent,
        approver,
        list,
    })
}

impl Setup {
    /// Parks a call of `echo`; its invocation id.
    async fn park(&self, text: &str) -> String {
        let meta = echo_of(&self.list, "mcp__fixture__echo");
        let params =
            json!({"name": "mcp__fixture__echo", "arguments": {"text": text}, "_meta": meta});
        let answer = self
            .app
            .mcp(&self.agent, rpc(1, "tools/call", params))
            .await;
        let result = &answer["result"];
        assert_eq!(result["_meta"]["status"], "input_required", "{answer}");
        text_of(&result["_meta"]["invocation_id"]).to_owned()
    }

    async fn create(&self, token: &str, body: Value) -> Reply {
        self.app.post("/webhooks").as_(token).json(&body).await
    }

    async fn decide(&self, id: &str, verb: &str) -> Value {
        let shown = self.app.get(format!("/invocations/{id}"));
        let shown = shown.as_(&self.approver).await.json();
        let body = if verb == "approve" {
            json!({"args_hash": shown["args_hash"], "definition_hash": shown["definition_hash"]})
        } else {
            json!({"comment": "not this one"})
        };
        let answer = self.app.post(format!("/invocations/{id}:{verb}"));
        let answer = answer.as_(&self.approver).json(body).await.json();
        let expected = if verb == "approve" {
            "approved"
        } else {
            "rejected"
        };
        assert!(
            answer["status"] == expected
                || answer["status"] == "running"
                || answer["status"] == "completed",
            "{verb}: {answer}"
        );
        answer
    }

    async fn deliveries(&self, webhook_id: &str) -> Vec<Value> {
        let reply = self.app.get(format!("/webhooks/{webhook_id}/deliveries"));
        let reply = reply.as_(&self.admin).await;
        reply.json()["deliveries"].as_array().unwrap().clone()
    }

    /// The newest delivery of `webhook_id` once its `status` is `status`, or as it stands
    /// after 10 s (for the caller's assertion to show).
    async fn delivery_when(&self, webhook_id: &str, status: &str) -> Value {
        let mut view = Value::Null;
        for _ in 0..100 {
            view = self.deliveries(webhook_id).await[0].clone();
            if view["status"] == status {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        view
    }
}

/// The event a received request carries, after checking its Standard Webhooks signature.
fn verified(secret: &str, r: &Received) -> Value {
    Webhook::new(secret)
        .unwrap()
        .verify(r.body.as_bytes(), &r.headers)
        .unwrap_or_else(|e| panic!("the signature verifies: {e}: {r:?}"));
    serde_json::from_str(&r.body).unwrap()
}

async fn journaled(app: &TestApp, action: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM journal WHERE tenant_id = 'default' AND kind = 'admin' \
         AND disclosures LIKE $1",
    )
    .bind(format!("%\"{action}\"%"))
    .fetch_one(app.store.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn only_admins_create_webhooks_to_public_addresses_and_the_secret_is_shown_once() {
    let s = setup(Db::Sqlite, |_| {}).await.unwrap();
    // Refused addresses and shapes, each with the field that is wrong.
    for (body, path) in [
        (
            json!({"url": "http://127.0.0.1:9/hook", "events": ["invocation.parked"]}),
            "url",
        ),
        (
            json!({"url": "http://localhost:9/hook", "events": ["invocation.parked"]}),
            "url",
        ),
        (
            json!({"url": "http://169.254.169.254/latest", "events": ["invocation.parked"]}),
            "url",
        ),
        (
            json!({"url": "http://[::ffff:10.0.0.1]/", "events": ["invocation.parked"]}),
            "url",
        ),
        (
            json!({"url": "file:///etc/passwd", "events": ["invocation.parked"]}),
            "url",
        ),
        (json!({"url": "", "events": ["invocation.parked"]}), "url"),
        (
            json!({"url": "https://93.184.215.14/hook", "events": []}),
            "events",
        ),
        (
            json!({"url": "https://93.184.215.14/hook", "events": ["invocation.parked", "invocation.bogus"]}),
            "events[1]",
        ),
    ] {
        let answer = s.create(&s.admin, body.clone()).await;
        let answer = answer.expect_status(StatusCode::UNPROCESSABLE_ENTITY);
        answer.expect_field_error(path);
    }
    // Not an admin: an approver may not point the tenant's events anywhere.
    let hook = json!({"url": "https://93.184.215.14/hook", "events": ["invocation.parked"]});
    s.create(&s.approver, hook)
        .await
        .expect_status(StatusCode::FORBIDDEN);
    assert_eq!(journaled(&s.app, "webhook.create").await, 0);

    let hook = json!({"url": "https://93.184.215.14/services/T0001/B0002/chat-token-in-the-path", "events": ["invocation.parked", "invocation.parked", "invocation.expired"]});
    let created = s.create(&s.admin, hook).await.expect_created();
    // The journal names the receiver by origin and digest: a chat service's URL is itself a
    // credential, and readers of the journal are more than the admins.
    let disclosures: Vec<String> = sqlx::query_scalar(
        "SELECT disclosures FROM journal WHERE tenant_id = 'default' AND kind = 'admin' \
         AND disclosures LIKE '%webhook.create%'",
    )
    .fetch_all(s.app.store.pool())
    .await
    .unwrap();
    assert_eq!(disclosures.len(), 1);
    assert!(
        disclosures[0].contains("https://93.184.215.14") && !disclosures[0].contains("chat-token"),
        "{}",
        disclosures[0]
    );
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let key = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        &secret["whsec_".len()..],
    )
    .unwrap();
    assert_eq!(key.len(), 32);
    let id = created["webhook"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created["webhook"]["events"],
        json!(["invocation.parked", "invocation.expired"])
    );
    assert_eq!(journaled(&s.app, "webhook.create").await, 1);

    // Listed without its secret; stored sealed, not in plaintext.
    let listed = s.app.get("/webhooks").as_(&s.admin).await.json();
    assert_eq!(listed["webhooks"][0]["id"], id.as_str(), "{listed}");
    assert!(listed["webhooks"][0].get("secret").is_none(), "{listed}");
    assert!(!listed.to_string().contains(&secret[6..]), "{listed}");
    let stored: String = sqlx::query_scalar("SELECT secret FROM webhooks WHERE id = $1")
        .bind(&id)
        .fetch_one(s.app.store.pool())
        .await
        .unwrap();
    assert!(stored.starts_with("enc:v1:"), "{stored}");
    assert!(!stored.contains(&secret[6..]));
    // Sealed for its own row: another row cannot borrow it.
    let secrets = aperture_core::secrets::SecretBox::load(&s.app.data_dir, None).unwrap();
    assert_eq!(
        secrets
            .open(
                &aperture_core::secrets::webhook_aad("default", &id),
                &stored
            )
            .unwrap(),
        secret
    );
    assert!(
        secrets
            .open(&aperture_core::secrets::webhook_aad("other", &id), &stored)
            .is_err()
    );

    // Deleted once (journaled); then gone.
    let reply = s.app.delete(format!("/webhooks/{id}")).as_(&s.admin).await;
    reply.expect_status(StatusCode::OK);
    assert_eq!(journaled(&s.app, "webhook.delete").await, 1);
    let again = s.app.delete(format!("/webhooks/{id}")).as_(&s.admin).await;
    again.expect_status(StatusCode::NOT_FOUND);
    let listed = s.app.get("/webhooks").as_(&s.admin).await.json();
    assert_eq!(listed["webhooks"], json!([]));
}

async fn parked_decided_and_cancelled_calls_reach_a_signed_webhook(db: Db) {
    let Some(s) = setup(db, |c| c.allow_private_upstreams = true).await else {
        return;
    };
    let receiver = WebhookReceiver::start(vec![]).await;
    let hook = json!({"url": receiver.url, "events": ["invocation.parked", "invocation.decided", "invocation.cancelled"]});
    let created = s.create(&s.admin, hook).await.expect_created();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let webhook_id = created["webhook"]["id"].as_str().unwrap().to_owned();

    let approved = s.park(&format!("approve {SECRET_ARGUMENT}")).await;
    let got = receiver.wait_for(1).await;
    let parked = verified(&secret, &got[0]);
    assert_eq!(parked["type"], "invocation.parked", "{parked}");
    let data = &parked["data"];
    assert_eq!(data["invocation_id"], approved.as_str());
    assert_eq!(data["tool"], "mcp__fixture__echo");
    assert_eq!(data["status"], "input_required");
    assert_eq!(data["actor_id"], "agent");
    assert_eq!(
        data["approval_url"],
        s.app.url(&format!("/approvals#{approved}")).as_str()
    );
    assert!(
        text_of(&data["receipt_url"]).starts_with(&s.app.url("/receipts/rcp_")),
        "{data}"
    );
    // Issue 45 (item 12): nothing of the arguments, not even their (guessable) hash.
    assert!(data.get("args_hash").is_none(), "{data}");
    assert!(!got[0].body.contains("args_hash"), "{}", got[0].body);
    // A body changed on the way does not verify.
    let mut forged = got[0].clone();
    forged.body = forged.body.replace("input_required", "approved");
    assert!(
        Webhook::new(&secret)
            .unwrap()
            .verify(forged.body.as_bytes(), &forged.headers)
            .is_err()
    );

    s.decide(&approved, "approve").await;
    let rejected = s.park(&format!("reject {SECRET_ARGUMENT}")).await;
    s.decide(&rejected, "reject").await;
    let cancelled = s.park(&format!("cancel {SECRET_ARGUMENT}")).await;
    let answer = s.app.post(format!("/invocations/{cancelled}:cancel"));
    let answer = answer.as_(&s.agent).json(json!({})).await.json();
    assert_eq!(answer["status"], "cancelled", "{answer}");
    // parked ×3, decided ×2, cancelled ×1; in any order across deliveries.
    let got = receiver.wait_for(6).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got_all = receiver.received();
    assert_eq!(got_all.len(), 6, "each change once: {got_all:?}");
    let events: Vec<Value> = got.iter().map(|r| verified(&secret, r)).collect();
    let find = |kind: &str, id: &str| {
        events
            .iter()
            .filter(|e| e["type"] == kind && e["data"]["invocation_id"] == id)
            .count()
    };
    assert_eq!(find("invocation.parked", &rejected), 1);
    assert_eq!(find("invocation.decided", &approved), 1);
    assert_eq!(find("invocation.decided", &rejected), 1);
    assert_eq!(find("invocation.cancelled", &cancelled), 1);
    let decided = events
        .iter()
        .find(|e| e["type"] == "invocation.decided" && e["data"]["invocation_id"] == approved)
        .unwrap();
    assert_eq!(decided["data"]["status"], "approved");
    assert_eq!(decided["data"]["decided_by"], "alice");
    assert!(decided["data"]["approval_receipt_id"].is_string());
    // Never the arguments, in any delivery.
    for r in &got {
        assert!(!r.body.contains(SECRET_ARGUMENT), "{}", r.body);
        assert!(!r.body.contains("argument-value"), "{}", r.body);
    }
    // Distinct message ids, one per delivery.
    let ids: std::collections::BTreeSet<String> = got
        .iter()
        .map(|r| r.headers["webhook-id"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 6);

    // Admins see each delivery with its attempt.
    let deliveries = s.deliveries(&webhook_id).await;
    assert_eq!(deliveries.len(), 6, "{deliveries:?}");
    for d in &deliveries {
        assert_eq!(d["status"], "delivered", "{d}");
        assert_eq!(d["attempts"], 1, "{d}");
        assert_eq!(d["history"][0]["http_status"], 200, "{d}");
        assert!(ids.contains(d["id"].as_str().unwrap()));
    }
    let listed = s.app.get("/webhooks").as_(&s.admin).await.json();
    assert_eq!(listed["webhooks"][0]["delivered"], 6, "{listed}");
    // Not for approvers: deliveries are an admin's view.
    let reply = s.app.get(format!("/webhooks/{webhook_id}/deliveries"));
    let reply = reply.as_(&s.approver).await;
    reply.expect_status(StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn parked_decided_and_cancelled_calls_reach_a_signed_webhook_sqlite() {
    parked_decided_and_cancelled_calls_reach_a_signed_webhook(Db::Sqlite).await;
}

#[tokio::test]
async fn parked_decided_and_cancelled_calls_reach_a_signed_webhook_postgres() {
    parked_decided_and_cancelled_calls_reach_a_signed_webhook(Db::Postgres).await;
}

/// Standard Webhooks: a receiver that answers `410 Gone` wants no more of the message, so the
/// delivery is not sent again, though the retry policy would allow it and the receiver would
/// accept the next attempt.
#[tokio::test]
async fn a_receiver_that_answers_gone_is_not_sent_the_message_again() {
    let s = setup(Db::Sqlite, |c| {
        c.allow_private_upstreams = true;
        c.webhook_retry = vec![Duration::from_millis(300), Duration::from_millis(300)];
    })
    .await
    .unwrap();
    // 410 first, then it would take anything.
    let gone = WebhookReceiver::start(vec![410]).await;
    let hook = json!({"url": gone.url, "events": ["invocation.parked"]});
    let created = s.create(&s.admin, hook).await.json_or_null();
    let id = created["webhook"]["id"].as_str().unwrap().to_owned();
    s.park("not again").await;
    let view = s.delivery_when(&id, "failed").await;
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(view["attempts"], 1, "{view}");
    assert!(view["next_attempt_at"].is_null(), "{view}");
    assert_eq!(view["history"][0]["http_status"], 410, "{view}");
    assert!(text_of(&view["last_error"]).contains("410 Gone"), "{view}");
    // Well past both waits of the retry policy: still the one attempt.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(gone.received().len(), 1);
    assert_eq!(s.deliveries(&id).await[0]["attempts"], 1);
}

#[tokio::test]
async fn failed_deliveries_are_retried_with_backoff_then_given_up_and_every_attempt_is_kept() {
    let s = setup(Db::Sqlite, |c| {
        c.allow_private_upstreams = true;
        c.webhook_retry = vec![Duration::from_secs(1), Duration::from_secs(1)];
    })
    .await
    .unwrap();
    // One receiver fails twice, then accepts; another address answers nothing at all.
    let flaky = WebhookReceiver::start(vec![500, 503]).await;
    let hook = json!({"url": flaky.url, "events": ["invocation.parked"]});
    let created = s.create(&s.admin, hook).await.json_or_null();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let flaky_id = created["webhook"]["id"].as_str().unwrap().to_owned();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        format!("http://127.0.0.1:{port}/gone")
    };
    let hook = json!({"url": closed, "events": ["invocation.parked"]});
    let created = s.create(&s.admin, hook).await.json_or_null();
    let dead_id = created["webhook"]["id"].as_str().unwrap().to_owned();

    let id = s.park("retry me").await;
    let got = flaky.wait_for(3).await;
    // The same message at every attempt: one id, the same bytes, each signed anew.
    let first = verified(&secret, &got[0]);
    assert_eq!(first["data"]["invocation_id"], id.as_str());
    for r in &got {
        assert_eq!(r.headers["webhook-id"], got[0].headers["webhook-id"]);
        assert_eq!(r.body, got[0].body);
        verified(&secret, r);
    }
    let flaky_view = s.delivery_when(&flaky_id, "delivered").await;
    let dead_view = s.delivery_when(&dead_id, "failed").await;
    assert_eq!(flaky_view["status"], "delivered", "{flaky_view}");
    assert_eq!(flaky_view["attempts"], 3, "{flaky_view}");
    let statuses: Vec<Value> = flaky_view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["http_status"].clone())
        .collect();
    assert_eq!(statuses, vec![json!(500), json!(503), json!(200)]);
    assert!(text_of(&flaky_view["history"][0]["error"]).contains("500"));
    // Backoff: the second attempt waited for the first retry's second.
    let at = |i: usize| {
        aperture_core::store::parse_rfc3339(
            flaky_view["history"][i]["attempted_at"].as_str().unwrap(),
        )
        .unwrap()
    };
    assert!(at(1) - at(0) >= 1_000, "{flaky_view}");
    // Every retry used up: failed, three attempts, the reason kept.
    assert_eq!(dead_view["status"], "failed", "{dead_view}");
    assert_eq!(dead_view["attempts"], 3, "{dead_view}");
    assert!(dead_view["next_attempt_at"].is_null());
    assert!(
        dead_view["history"][2]["error"].as_str().unwrap().len() > 5,
        "{dead_view}"
    );
    assert!(dead_view["history"][2]["http_status"].is_null());
    let listed = s.app.get("/webhooks").as_(&s.admin).await.json();
    let dead = listed["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == dead_id.as_str())
        .unwrap();
    assert_eq!(dead["failed"], 1, "{listed}");
}

#[tokio::test]
async fn a_webhook_that_now_points_inside_is_refused_at_delivery() {
    // As if its name had been re-pointed at a loopback address after it was created (DNS
    // rebinding): the guard runs again at every attempt, and nothing is sent.
    let s = setup(Db::Sqlite, |c| {
        c.webhook_retry = vec![];
    })
    .await
    .unwrap();
    let receiver = WebhookReceiver::start(vec![]).await;
    let id = aperture_core::ids::new_id("whk");
    let secrets = aperture_core::secrets::SecretBox::load(&s.app.data_dir, None).unwrap();
    aperture_core::store::webhooks::insert(
        &s.app.store,
        &aperture_core::store::webhooks::WebhookRow {
            secret: secrets.seal(
                &aperture_core::secrets::webhook_aad("default", &id),
                "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTMyYnl0ZXM=",
            ),
            id: id.clone(),
            tenant_id: "default".into(),
            url: receiver.url.clone(),
            events: r#"["invocation.parked"]"#.into(),
            created_by: "ops".into(),
            created_at: aperture_core::store::now_ms(),
        },
    )
    .await
    .unwrap();
    s.park("stay inside").await;
    let view = s.delivery_when(&id, "failed").await;
    assert_eq!(view["status"], "failed", "{view}");
    let error = view["last_error"].as_str().unwrap();
    assert!(
        error.contains("address refused") && error.contains("loopback"),
        "{error}"
    );
    assert!(receiver.received().is_empty());
}

#[tokio::test]
async fn expired_calls_are_announced() {
    let s = setup(Db::Sqlite, |c| {
        c.allow_private_upstreams = true;
        c.parked_expiry = Duration::from_secs(1);
    })
    .await
    .unwrap();
    let receiver = WebhookReceiver::start(vec![]).await;
    let hook = json!({"url": receiver.url, "events": ["invocation.expired"]});
    let created = s.create(&s.admin, hook).await.json_or_null();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let id = s.park("nobody will look").await;
    let got = receiver.wait_for(1).await;
    let event = verified(&secret, &got[0]);
    // Only what the webhook asked for: no `parked` before it.
    assert_eq!(event["type"], "invocation.expired", "{event}");
    assert_eq!(event["data"]["invocation_id"], id.as_str());
    assert_eq!(event["data"]["status"], "expired");
}

/// Two nodes racing to move one parked invocation: one wins, and the outbox holds exactly one
/// delivery of the change (it is written in the winner's transaction).
async fn a_change_is_enqueued_once_by_whoever_wins_it(store: &aperture_core::store::Store) {
    use aperture_core::store::invocations::{self, Change, InvocationRow};
    let store = store.clone();
    aperture_core::store::tenants::ensure(&store, "t")
        .await
        .unwrap();
    aperture_core::store::webhooks::insert(
        &store,
        &aperture_core::store::webhooks::WebhookRow {
            id: "whk_1".into(),
            tenant_id: "t".into(),
            url: "https://93.184.215.14/hook".into(),
            events: r#"["invocation.parked", "invocation.cancelled", "invocation.expired"]"#.into(),
            secret: "sealed".into(),
            created_by: "ops".into(),
            created_at: 0,
        },
    )
    .await
    .unwrap();
    let now = aperture_core::store::now_ms();
    let row = |id: &str, mode: &str| InvocationRow {
        id: id.into(),
        tenant_id: "t".into(),
        session_id: "ses_1".into(),
        manifest_id: "man_1".into(),
        client_key: None,
        turn_id: None,
        actor_id: "agent".into(),
        token_id: None,
        token_created_by: None,
        tool: "echo".into(),
        tool_version: "1".into(),
        schema_hash: "sha256:s".into(),
        args_hash: "sha256:a".into(),
        mode: mode.into(),
        binding: "{}".into(),
        policy_id: "p".into(),
        policy_version: 1,
        decision_receipt_id: "rcpt_1".into(),
        status: "input_required".into(),
        result: None,
        decided_by: None,
        decided_by_principal: None,
        decided_at: None,
        decision_comment: None,
        approval_receipt_id: None,
        confirmation_sha256: None,
        created_at: now,
        expires_at: None,
        updated_at: now,
        output_to: "mcp".into(),
    };
    assert!(
        invocations::insert(&store, &row("inv_1", "approval_required"))
            .await
            .unwrap()
    );
    // A caller's confirmation is not an approver's business.
    let mut confirm = row("inv_2", "confirmation_required");
    confirm.status = "confirmation_required".into();
    assert!(invocations::insert(&store, &confirm).await.unwrap());
    let race = |store: aperture_core::store::Store| async move {
        invocations::transition(
            &store,
            "t",
            "inv_1",
            "input_required",
            "cancelled",
            &Change {
                announce: Some("invocation.cancelled"),
                ..Change::default()
            },
        )
        .await
        .unwrap()
    };
    let (a, b) = tokio::join!(
        tokio::spawn(race(store.clone())),
        tokio::spawn(race(store.clone()))
    );
    assert!(a.unwrap() ^ b.unwrap(), "exactly one wins");
    // The caller's own confirmation running out is not announced.
    assert!(
        invocations::transition(
            &store,
            "t",
            "inv_2",
            "confirmation_required",
            "expired",
            &Change {
                announce: Some("invocation.expired"),
                ..Change::default()
            },
        )
        .await
        .unwrap()
    );
    let events: Vec<(String, String)> = sqlx::query_as(
        "SELECT event, subject FROM webhook_deliveries WHERE webhook_id = 'whk_1' ORDER BY event, subject",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        events,
        vec![
            ("invocation.cancelled".to_owned(), "inv_1".to_owned()),
            ("invocation.parked".to_owned(), "inv_1".to_owned()),
        ]
    );
}

crate::on_both_backends!(
    a_change_is_enqueued_once_by_whoever_wins_it_on,
    a_change_is_enqueued_once_by_whoever_wins_it
);
