//! Who is calling, and what they may do.
//!
//! - [`password`]: argon2id hashing off the async runtime, with a dummy hash for unknown users.
//! - [`principal`]: the authenticated caller (token or user) and bearer-token authentication.
//! - [`dashboard`]: cookie sessions for people: sign-in with its failure limit, sign-out, the
//!   idle and absolute timeouts.
//! - [`csrf`]: origin checks for state-changing browser requests.

pub mod csrf;
pub mod dashboard;
pub mod password;
pub mod principal;

pub use principal::{Principal, PrincipalKind};
