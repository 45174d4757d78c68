//! `aperture bridge`: a stock MCP client that sends no `_meta` works through it.

use engine::scope;
use reqwest::StatusCode;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::json;

use crate::helpers::{Requests, TestApp};

/// `aperture bridge` against `app` with `agent`'s token (in a file of the returned folder),
/// and a stock rmcp client on its stdio.
async fn bridge(
    app: &TestApp,
    agent: &str,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{agent}\n")).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_aperture"));
    command
        .args(["bridge", "--url", &app.url(""), "--token-file"])
        .arg(&token_file)
        .env("APERTURE_LOG", "warn")
        .kill_on_drop(true);
    let client =
        ().serve(TokioChildProcess::new(command).unwrap())
            .await
            .expect("the bridge speaks MCP on stdio");
    (client, dir)
}

/// Issue 4: "`aperture bridge`: a local stdio MCP server for stock clients that cannot add
/// `_meta`: it lists through the gateway, adds the echo to each call, and re-lists before the
/// lease ends. Tested with a stock client library that sends no `_meta`." The policy cuts the
/// lease to 3 s; a call after 4 s still goes through because the bridge listed again in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_client_calls_through_the_bridge_across_leases() {
    let app = TestApp::spawn().await;
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    app.register_fixture(&admin, &["mcp__fixture__echo"]).await;
    let policy = json!({"rules": [
        {"id": "short", "match": {"name": "mcp__fixture__echo"}, "mode": "allow",
         "invocation": {"expires_after_seconds": 3}}
    ]});
    let put = app.put("/policies/p").as_(&admin).json(policy).await;
    put.expect_status(StatusCode::OK);
    let activated = app.post("/policies/p:activate").as_(&admin).await;
    activated.expect_status(StatusCode::OK);
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let (client, _dir) = bridge(&app, &agent).await;

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, vec!["mcp__fixture__echo"]);

    let call = |text: &str| {
        CallToolRequestParams::new("mcp__fixture__echo")
            .with_arguments(json!({"text": text}).as_object().unwrap().clone())
    };
    let first = serde_json::to_value(client.call_tool(call("one")).await.unwrap()).unwrap();
    assert_eq!(first["isError"], false, "{first}");
    assert_eq!(first["content"][0]["text"], "one");
    assert_eq!(first["_meta"]["receipt"]["reason"], "ok");

    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let later = serde_json::to_value(client.call_tool(call("two")).await.unwrap()).unwrap();
    assert_eq!(
        later["isError"], false,
        "the bridge renewed the lease: {later}"
    );
    assert_eq!(later["content"][0]["text"], "two");
    assert_ne!(
        later["_meta"]["receipt"]["manifest_id"], first["_meta"]["receipt"]["manifest_id"],
        "a new grant"
    );
    assert_eq!(
        later["_meta"]["receipt"]["session_id"], first["_meta"]["receipt"]["session_id"],
        "in the same exposure session"
    );
    client.cancel().await.ok();
}

/// Issue 27: a listing the gateway pages (`APERTURE_TOOLS_PAGE_SIZE=2`, five tools) reaches the
/// bridge's client whole, and a tool of the last page is called with the one grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_gathers_a_paged_listing() {
    let app = TestApp::spawn_with(crate::helpers::Db::Sqlite, |c| c.tools_page_size = 2)
        .await
        .unwrap();
    let admin = app.token("default", "ops", &[scope::ADMIN]).await;
    let read = [
        "mcp__fixture__add",
        "mcp__fixture__big",
        "mcp__fixture__echo",
        "mcp__fixture__getenv",
        "mcp__fixture__stats",
    ];
    app.register_fixture(&admin, &read).await;
    let agent = app.token("default", "agent", &[scope::RUN]).await;
    let (client, _dir) = bridge(&app, &agent).await;
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(names, read);
    let called = client
        .call_tool(
            CallToolRequestParams::new("mcp__fixture__stats")
                .with_arguments(serde_json::Map::new()),
        )
        .await
        .unwrap();
    let called = serde_json::to_value(called).unwrap();
    assert_eq!(called["isError"], false, "{called}");
    assert_eq!(called["_meta"]["receipt"]["reason"], "ok");
    client.cancel().await.ok();
}
