//! The house rules, checked on every crate of the workspace.

use std::path::PathBuf;

fn read(krate: &str) -> floors::Crate {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    floors::Crate::read(&src).unwrap_or_else(|e| panic!("{krate}: {e}"))
}

fn assert_acyclic(krate: &str) {
    let c = read(krate);
    let edges = c.edges().unwrap_or_else(|e| panic!("{krate}: {e}"));
    let cycles = floors::cycles(&c.modules, &edges);
    let report: String = cycles.iter().map(ToString::to_string).collect();
    assert!(
        cycles.is_empty(),
        "{krate}: its top-level modules use each other in a circle; cut one edge of each \
         (`cargo run -p floors -- {krate}/src` prints the graph):\n{report}"
    );
}

fn assert_toured(krate: &str) {
    let missing = floors::tour::missing(&read(krate));
    assert!(
        missing.is_empty(),
        "{krate}: the `//!` tour of src/lib.rs does not name {missing:?}"
    );
}

#[test]
fn the_engine_has_floors() {
    assert_acyclic("engine");
    assert_toured("engine");
}

#[test]
fn the_shared_types_have_floors() {
    assert_acyclic("types");
    assert_toured("types");
}

#[test]
fn the_dashboard_has_floors() {
    assert_acyclic("app");
    assert_toured("app");
}

#[test]
fn the_checker_has_floors() {
    assert_acyclic("floors");
    assert_toured("floors");
}

#[test]
fn the_server_has_floors() {
    assert_acyclic("server");
    assert_toured("server");
}
