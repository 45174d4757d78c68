//! Who is calling over HTTP, and what they may do. The caller itself, a
//! [`Principal`], and password hashing live below the surfaces (`aperture_core::principal`,
//! `aperture_core::password`, re-exported here).
//!
//! - [`dashboard`]: the cookie sessions of people signed in to the dashboard: their layer, idle
//!   timeout and records.
//! - [`client`]: the caller's address (behind trusted proxies too), for sign-in limits.
//! - [`csrf`]: origin checks for state-changing browser requests.
//! - [`headers`]: the Content-Security-Policy with its per-response nonce, and the other
//!   security headers of every dashboard and API response.

pub mod client;
pub mod csrf;
pub mod dashboard;
pub mod headers;

pub use aperture_core::password;
pub use aperture_core::principal::{self, Principal, PrincipalKind};
