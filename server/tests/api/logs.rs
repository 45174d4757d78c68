//! Issue 45, item 4: the `logs` destination (CONTRACT §11: server logs and journal disclosures).
//! An upstream's error text is tool output that is not a result: with a profile that does not
//! list `logs`, it reaches neither the server's log, nor the journal's disclosures, nor what is
//! read from them (`GET /receipts/{id}`, the dashboard's receipt, evidence bundles with
//! disclosures); with one that does, the profile's `max_bytes` applies.

use engine::scope;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::cli::aperture;
use crate::crash::{add_fixture_upstream, serve_logged, token};
use crate::helpers::{Call, Db, Requests, TestDb, echo_of};

const ECHO: &str = "mcp__fixture__echo";
/// What the fixture answers `FAIL:<x>` with; no argument contains it.
const CANARY: &str = "CANARY-UPSTREAM-ERR-";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_s_error_text_reaches_logs_only_as_the_profile_lets_it() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let admin = token(&db, "ops", scope::ADMIN);
    let agent = token(&db, "agent", scope::RUN);
    add_fixture_upstream(&db, &[]);
    let log = db.data_dir().join("server.log");
    // The most the server ever logs.
    let (mut server, node) = serve_logged(&db, &[("APERTURE_LOG", "debug")], &log).await;
    let read = json!({"risk": ["read"]});
    let put = node.put(format!("/tools/{ECHO}"));
    let put = put.as_(&admin).json(read).await;
    put.expect_status(StatusCode::OK);
    let policy = json!({
        "rules": [
            {"id": "quiet", "match": {"name": ECHO, "preset": "quiet"}, "mode": "allow",
             "redaction": "no-logs"},
            {"id": "short", "match": {"name": ECHO}, "mode": "allow", "redaction": "short-logs"}
        ],
        "redaction_profiles": {
            "no-logs": {"summary": "truncate", "max_bytes": 8192,
                        "destinations": ["llm", "mcp", "transcript"]},
            "short-logs": {"summary": "truncate", "max_bytes": 75,
                           "destinations": ["llm", "mcp", "transcript", "logs"]}
        }
    });
    let put = node.put("/policies/canary").as_(&admin).json(policy).await;
    put.expect_status(StatusCode::OK);
    let activate = node.post("/policies/canary:activate").as_(&admin).await;
    activate.expect_status(StatusCode::OK);

    // One call under each profile, each failing upstream with its own canary.
    let mut calls = Vec::new();
    for (preset, secret) in [
        ("quiet", "first-secret-0451"),
        ("loud", "second-secret-0452"),
    ] {
        let session = node
            .post("/sessions")
            .as_(&agent)
            .json(json!({"preset": preset}));
        let session = session.await.json();
        let sid = session["_meta"]["session_id"].as_str().unwrap().to_owned();
        let fail = json!({"name": ECHO, "arguments": {"text": format!("FAIL:{secret}")},
                          "_meta": echo_of(&session, ECHO)});
        let result = node.post(format!("/sessions/{sid}/calls")).as_(&agent);
        let result = result.json(fail).await.json();
        let receipt = &result["_meta"]["receipt"];
        assert_eq!(receipt["reason"], "upstream_error", "{result}");
        assert!(!result.to_string().contains(CANARY), "{result}");
        calls.push((
            sid,
            receipt["receipt_id"].as_str().unwrap().to_owned(),
            secret,
        ));
    }

    // What a reader gets of each receipt, and of each session's evidence with disclosures.
    let mut texts = Vec::new();
    for (sid, receipt_id, _) in &calls {
        let receipt = node.get(format!("/receipts/{receipt_id}")).as_(&admin);
        let receipt = receipt.await.text();
        let evidence = node.get(format!("/sessions/{sid}/evidence?disclosures=true"));
        let evidence = evidence.as_(&admin).await.text();
        assert!(evidence.contains(receipt_id.as_str()), "{evidence}");
        texts.push((receipt, evidence));
    }
    // The dashboard's receipt, as its page loads it, for the bootstrap admin.
    let browser = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    let dashboard = |endpoint: &str| {
        let url = format!("{}/ui/{endpoint}", node.base);
        Call::new(&browser, Method::POST, url).header("accept", "application/json")
    };
    let form = [
        ("tenant", "default"),
        ("username", "admin"),
        ("password", "a-long-enough-password"),
    ];
    let signed_in = dashboard("sign-in").form(&form).await;
    assert!(signed_in.status().is_success(), "{}", signed_in.status());
    let mut pages = Vec::new();
    for (_, receipt_id, _) in &calls {
        let page = dashboard("receipts/get").form(&[("id", receipt_id.as_str())]);
        let page = page.await.expect_status(StatusCode::OK);
        pages.push(page.text());
    }
    server.kill().ok();
    server.wait().ok();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.is_empty(), "the server logged at debug level");

    // Under `no-logs`: its error text is nowhere; its hash is in the disclosures.
    let (quiet_receipt, quiet_evidence) = &texts[0];
    // The error as the gateway words it, which the disclosures keep only the hash of.
    let quiet_error = format!(
        "the upstream answered with JSON-RPC error -32603: {CANARY}{}",
        calls[0].2
    );
    let hash = engine::canonical::sha256_tagged(quiet_error.as_bytes());
    for (what, text) in [
        ("GET /receipts/{id}", quiet_receipt),
        ("the evidence bundle", quiet_evidence),
        ("the dashboard's receipt", &pages[0]),
        ("the server log", &logged),
    ] {
        assert!(!text.contains(CANARY), "{what}: {text}");
    }
    assert!(quiet_receipt.contains(&hash), "{quiet_receipt}");
    // Under `short-logs`: cut to its 75 bytes, five bytes into the secret.
    let (loud_receipt, loud_evidence) = &texts[1];
    let loud: Value = serde_json::from_str(loud_receipt).unwrap();
    assert_eq!(
        loud["disclosures"]["upstream_error"],
        format!(
            "the upstream answered with JSON-RPC error -32603: {CANARY}secon\n[truncated 13 bytes]"
        ),
        "{loud}"
    );
    let loud_error = format!("{CANARY}{}", calls[1].2);
    for text in [loud_receipt, loud_evidence, &pages[1], &logged] {
        assert!(!text.contains(&loud_error), "{text}");
    }
}
