//! The checker itself: what counts as one module naming another, and what does not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use floors::Crate;

/// A crate in a temporary folder: `(path under src, text)`.
fn krate(files: &[(&str, &str)]) -> (tempfile::TempDir, Crate) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
    let c = Crate::read(dir.path()).unwrap();
    (dir, c)
}

fn pairs(c: &Crate) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = c
        .edges()
        .unwrap()
        .into_iter()
        .map(|e| (e.from, e.to))
        .collect();
    pairs.dedup();
    pairs
}

fn pair(from: &str, to: &str) -> (String, String) {
    (from.to_owned(), to.to_owned())
}

#[test]
fn use_lines_grouped_uses_and_inline_paths_all_count() {
    let (_dir, c) = krate(&[
        ("lib.rs", "pub mod a;\npub mod b;\nmod c;\n"),
        ("a.rs", "fn f() { let x = crate::b::X; }\n"),
        ("b.rs", "use crate::{a::Y, c};\n"),
        ("c.rs", "pub struct Z;\n"),
    ]);
    assert_eq!(c.modules, ["a", "b", "c"]);
    assert_eq!(pairs(&c), [pair("a", "b"), pair("b", "a"), pair("b", "c")]);
    let cycles = floors::cycles(&c.modules, &c.edges().unwrap());
    assert_eq!(cycles.len(), 1);
    assert_eq!(cycles[0].modules, ["a", "b"]);
    assert!(floors::floors(&c.modules, &c.edges().unwrap()).is_none());
}

#[test]
fn comments_strings_and_dollar_crate_do_not_count_but_macro_bodies_do() {
    let (_dir, c) = krate(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        (
            "a.rs",
            "// crate::b::X\n/// [`crate::b`]\nconst S: &str = \"crate::b::X\";\n\
             macro_rules! m { () => { $crate::b::X } }\n",
        ),
        ("b.rs", "fn f() { println!(\"{}\", crate::c::Z); }\n"),
        ("c.rs", ""),
    ]);
    assert_eq!(pairs(&c), [pair("b", "c")]);
}

#[test]
fn super_counts_only_when_it_climbs_out_of_the_module() {
    let (_dir, c) = krate(&[
        ("lib.rs", "mod a;\nmod b;\nmod d;\n"),
        ("a/mod.rs", "mod inner;\nmod tests { use super::*; }\n"),
        ("a/inner.rs", "use super::X;\nuse super::super::b::Y;\n"),
        ("b.rs", "mod tests { use super::super::d::W; }\n"),
        ("d.rs", "fn f() { super::a::g(); }\n"),
    ]);
    assert_eq!(pairs(&c), [pair("a", "b"), pair("b", "d"), pair("d", "a")]);
}

#[test]
fn names_the_root_re_exports_count_as_their_module() {
    let (_dir, c) = krate(&[
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub use b::{Thing, Other as Renamed};\n",
        ),
        ("a.rs", "use crate::Renamed;\n"),
        ("b.rs", "pub struct Thing;\npub struct Other;\n"),
    ]);
    assert_eq!(c.reexports.get("Renamed").map(String::as_str), Some("b"));
    assert_eq!(pairs(&c), [pair("a", "b")]);
    let floors = floors::floors(&c.modules, &c.edges().unwrap()).unwrap();
    assert_eq!(floors, [vec!["b".to_owned()], vec!["a".to_owned()]]);
}

#[test]
fn a_tour_must_name_every_module() {
    let (_dir, c) = krate(&[
        (
            "lib.rs",
            "//! - [`a`]: one; `b` two.\n//! c is not quoted.\npub mod a;\npub mod b;\n\
             pub mod c;\n#[cfg(test)]\nmod tests {}\n",
        ),
        ("a.rs", ""),
        ("b.rs", ""),
        ("c.rs", ""),
    ]);
    assert_eq!(floors::tour::missing(&c), ["c"]);
}
