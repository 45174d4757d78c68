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

#[test]
fn the_conformance_upstream_has_floors() {
    assert_acyclic("conformance");
    assert_toured("conformance");
}

#[test]
fn the_core_has_floors() {
    assert_acyclic("core");
    assert_toured("core");
}

/// The names a `[dependencies]` table of `krate`'s manifest lists (not dev or build ones).
fn normal_dependencies(krate: &str) -> Vec<String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap_or_else(|e| panic!("{krate}: {e}"));
    let mut names = Vec::new();
    let mut in_table = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_table = line == "[dependencies]";
        } else if in_table
            && let Some((name, _)) = line.split_once('=')
            && !line.starts_with('#')
            && !name.trim().is_empty()
            && !name.contains('"')
        {
            names.push(name.trim().to_owned());
        }
    }
    assert!(!names.is_empty(), "{krate}: no [dependencies] read");
    names
}

#[test]
fn the_core_knows_no_http_surface() {
    let surface = [
        "axum",
        "tower",
        "tower-http",
        "tower-sessions",
        "leptos",
        "leptos_axum",
        "leptos_meta",
        "leptos_router",
        "tonic",
        "tonic-reflection",
        "app",
        "server",
    ];
    let deps = normal_dependencies("core");
    let found: Vec<_> = deps
        .iter()
        .filter(|d| surface.contains(&d.as_str()) || d.starts_with("leptos"))
        .collect();
    assert!(
        found.is_empty(),
        "core depends on the HTTP surface's crates {found:?}; the surfaces sit on the core"
    );
}

/// Every `.rs` file under `dir`.
fn sources(dir: &std::path::Path, into: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn the_surfaces_never_reach_the_core_s_sql() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in ["server", "app"] {
        sources(&root.join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 20, "the surfaces' sources were not found");
    let offenders: Vec<_> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            text.contains("aperture_core::store")
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "these surface files name the core's store; call a service instead: {offenders:?}"
    );
}
