#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the first surprise"
)]

//! Integration tests: the real application on port 0, a fresh database per test.
//! PostgreSQL variants run where `APERTURE_TEST_POSTGRES_URL` is set (`.ci/run` sets it).

mod helpers;
mod requests;

mod agents;
mod approvals;
mod background;
mod bridge;
mod calls;
mod cli;
mod client_requests;
mod cluster;
mod connect;
mod crash;
mod dashboard_matrix;
mod decisions;
mod decoding;
mod drift;
mod edges;
mod environment_matrix;
mod environments;
mod events;
mod evidence;
mod forks;
mod grpc;
mod items_property;
mod journal;
mod journal_writer;
mod keys;
mod logs;
mod mcp;
mod mcp_logging;
mod model;
#[path = "../model_fixture/server.rs"]
#[allow(dead_code, reason = "each test uses part of the fixture")]
mod model_fixture;
mod operations;
mod pages;
mod policies;
mod proto;
mod readme;
mod replay;
mod resources;
mod scope_matrix;
mod sdk_interop;
mod sessions;
mod sign_in;
mod stock_clients;
mod store;
mod streams;
mod subscriptions;
mod tamper;
mod tokens;
#[path = "../upstream_fixture/server.rs"]
#[allow(dead_code, reason = "each test uses part of the fixture")]
mod upstream_fixture;
mod upstreams;
mod users;
mod webhooks;
mod worker;
