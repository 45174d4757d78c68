//! Who is calling, and what they may do.
//!
//! - [`password`]: argon2id hashing off the async runtime, with a dummy hash for unknown users.
//! - [`principal`]: the authenticated caller (token or user) and bearer-token authentication.
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
pub mod password;
pub mod principal;

pub use principal::{Principal, PrincipalKind};
