//! Who is calling over HTTP, and what they may do. The caller itself, a
//! [`Principal`], and password hashing live below the surfaces (`crate::principal`,
//! `crate::password`, re-exported here).
//!
//! - [`dashboard`]: cookie sessions for people: sign-in with its failure limit, sign-out, the
//!   idle and absolute timeouts.
//! - [`client`]: the caller's address (behind trusted proxies too), for sign-in limits.
//! - [`device`]: the long-lived device cookie by which a browser that signed in is known.
//! - [`csrf`]: origin checks for state-changing browser requests.
//! - [`headers`]: the Content-Security-Policy with its per-response nonce, and the other
//!   security headers of every dashboard and API response.

pub mod client;
pub mod csrf;
pub mod dashboard;
pub mod device;
pub mod headers;

pub use crate::password;
pub use crate::principal::{self, Principal, PrincipalKind};
