//! Password hashing with argon2id (OWASP: m = 19 MiB, t = 2, p = 1).
//!
//! Hashing is CPU-bound and deliberately slow, so it runs in `spawn_blocking`, and a semaphore
//! caps how many hashes run at once: a burst of sign-ins queues for the permits instead of
//! starving every other request of CPU.

use std::sync::Arc;

use anyhow::Context;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use tokio::sync::Semaphore;

/// Memory cost in KiB (19 MiB).
pub const M_COST_KIB: u32 = 19 * 1024;
/// Iterations.
pub const T_COST: u32 = 2;
/// Parallelism.
pub const P_COST: u32 = 1;

/// Shortest password accepted for a new user.
pub const MIN_LEN: usize = 12;
/// Longest password accepted (hashing cost must not depend on attacker-chosen sizes).
pub const MAX_LEN: usize = 1024;

fn argon2() -> anyhow::Result<Argon2<'static>> {
    let params = Params::new(M_COST_KIB, T_COST, P_COST, None)
        .map_err(|e| anyhow::anyhow!("argon2 parameters: {e}"))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

fn hash_blocking(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    let hash = argon2()?
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))?;
    Ok(hash.to_string())
}

fn verify_blocking(password: &str, phc: &str) -> anyhow::Result<bool> {
    let parsed = PasswordHash::new(phc).map_err(|e| anyhow::anyhow!("stored hash: {e}"))?;
    match argon2()?.verify_password(password.as_bytes(), &parsed) {
        Ok(()) => Ok(true),
        Err(argon2::password_hash::Error::Password) => Ok(false),
        Err(e) => Err(anyhow::anyhow!("verifying a password: {e}")),
    }
}

/// Hashes and verifies passwords; cheap to clone.
#[derive(Debug, Clone)]
pub struct Passwords {
    permits: Arc<Semaphore>,
    dummy_hash: Arc<str>,
}

impl Passwords {
    /// `concurrency` hashes may run at once. Computes the dummy hash used for unknown users.
    pub fn new(concurrency: usize) -> anyhow::Result<Self> {
        let dummy = hash_blocking("aperture dummy password for unknown users")?;
        Ok(Self {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            dummy_hash: dummy.into(),
        })
    }

    /// The argon2id PHC string of `password`.
    pub async fn hash(&self, password: String) -> anyhow::Result<String> {
        let _permit = self
            .permits
            .acquire()
            .await
            .context("password semaphore closed")?;
        tokio::task::spawn_blocking(move || hash_blocking(&password))
            .await
            .context("password hashing task")?
    }

    /// Whether `password` matches `stored`. With no stored hash (unknown user) the dummy hash is
    /// checked instead and the answer is always `false`, so the time taken does not tell whether
    /// the account exists.
    pub async fn verify(&self, password: String, stored: Option<String>) -> anyhow::Result<bool> {
        let _permit = self
            .permits
            .acquire()
            .await
            .context("password semaphore closed")?;
        let known = stored.is_some();
        let phc = stored.unwrap_or_else(|| self.dummy_hash.to_string());
        let matched = tokio::task::spawn_blocking(move || verify_blocking(&password, &phc))
            .await
            .context("password verification task")??;
        Ok(known && matched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashes_verify_and_use_owasp_parameters() {
        let p = Passwords::new(2).unwrap();
        let hash = p.hash("correct horse battery".into()).await.unwrap();
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert!(
            p.verify("correct horse battery".into(), Some(hash.clone()))
                .await
                .unwrap()
        );
        assert!(!p.verify("wrong".into(), Some(hash)).await.unwrap());
    }

    #[tokio::test]
    async fn unknown_users_never_match_even_the_dummy_password() {
        let p = Passwords::new(1).unwrap();
        let dummy = "aperture dummy password for unknown users".to_owned();
        assert!(!p.verify(dummy, None).await.unwrap());
    }
}
