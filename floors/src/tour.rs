//! The tour: a crate root's `//!` comment, which names every module the root declares.

use crate::source::Crate;

/// The modules the root declares that its `//!` tour does not name (as `` `name` `` or
/// `` [`name`] ``). A `tests` module needs no place in a tour.
pub fn missing(krate: &Crate) -> Vec<String> {
    let tour: String = krate
        .root
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    krate
        .modules
        .iter()
        .filter(|m| *m != "tests")
        .filter(|m| !names(&tour, m))
        .cloned()
        .collect()
}

fn names(tour: &str, module: &str) -> bool {
    tour.contains(&format!("`{module}`"))
}
