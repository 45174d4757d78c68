//! # `floors`: the layout rules every crate keeps
//!
//! Aperture's crates are built in floors: a module may use the modules below it, never one
//! that uses it back. The compiler keeps the floors between crates; inside a crate nothing
//! does, so this crate reads each crate's source and checks two rules (its tests run them on
//! every workspace crate, so `cargo test --workspace` fails when one breaks):
//!
//! - **Acyclic**: no cycle between the top-level modules of a crate. A module depends on
//!   another when its source names it: a `use crate::x…` line, an inline `crate::x::…` path
//!   anywhere (macro bodies included), or `super::…` paths that climb out of it. A name the
//!   crate root re-exports (`pub use x::Thing`) counts as its module.
//! - **Toured**: the crate root's `//!` tour names every module the root declares.
//!
//! The source is read as tokens ([`proc_macro2`]), so comments and string literals never look
//! like paths. `cargo run -p floors -- <crate>/src` prints a crate's graph, its cycles and its
//! floors (the modules grouped by how high they stand).
//!
//! Modules, in the order the checks use them:
//! - [`source`]: a crate's files, its top-level modules and root re-exports, and the
//!   dependencies each module's source names.
//! - [`graph`]: strongly connected components, floors, and the report of a cycle.
//! - [`tour`]: the modules a crate root's `//!` tour leaves out.

pub mod graph;
pub mod source;
pub mod tour;

pub use graph::{Cycle, cycles, floors};
pub use source::{Crate, Edge};
