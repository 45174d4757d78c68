//! Signing keys for receipts and manifests.
//!
//! The private key is a 32-byte Ed25519 seed, kept as hex in `<data_dir>/keys/<created_ms>.ed25519`
//! (mode 0600; created on first start) or given by `APERTURE_SIGNING_KEY` (hex), which nodes
//! sharing one PostgreSQL must all use. The newest key file signs. Every public key is recorded
//! in the database, so `/.well-known/aperture/keys` publishes all of them and receipts signed
//! before `aperture keys rotate` keep verifying.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use engine::receipt::{Jwk, JwkSet, Signer};
use rand::RngCore;
use rand::rngs::OsRng;

use crate::store::{self, Store};

fn keys_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("keys")
}

fn parse_seed(text: &str) -> anyhow::Result<[u8; 32]> {
    let bytes = hex::decode(text.trim()).context("a signing key is 64 hex digits")?;
    bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("a signing key is 32 bytes (64 hex digits)"))
}

fn write_new_key(dir: &Path) -> anyhow::Result<[u8; 32]> {
    store::create_private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut seed = [0u8; 32];
    OsRng.fill_bytes(&mut seed);
    let path = dir.join(format!("{}.ed25519", store::now_ms()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    use std::io::Write;
    let mut file = options
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(hex::encode(seed).as_bytes())?;
    file.sync_all()?;
    Ok(seed)
}

/// The seeds of the key files in `dir`, oldest first.
fn key_files(dir: &Path) -> anyhow::Result<Vec<[u8; 32]>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "ed25519"))
        .filter_map(|p| {
            let stamp = p.file_stem()?.to_str()?.parse::<u64>().ok()?;
            Some((stamp, p))
        })
        .collect();
    files.sort();
    files
        .iter()
        .map(|(_, path)| {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            parse_seed(&text).with_context(|| format!("in {}", path.display()))
        })
        .collect()
}

/// The active signer and where public keys are published from.
#[derive(Clone)]
pub struct KeyRing {
    signer: Arc<Signer>,
    /// The key that signed before the last `aperture keys rotate` (key files only): it signs
    /// the first checkpoint after a rotation beside the new key, so witnesses can follow.
    previous: Option<Arc<Signer>>,
    store: Store,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("active", &self.signer.key_id())
            .finish()
    }
}

impl KeyRing {
    /// Loads the configured key, or the newest key file, creating one on first start; records
    /// its public half.
    pub async fn load(
        store: &Store,
        data_dir: &Path,
        configured: Option<&str>,
    ) -> anyhow::Result<Self> {
        let (seed, previous) = match configured.filter(|s| !s.trim().is_empty()) {
            Some(text) => (parse_seed(text).context("APERTURE_SIGNING_KEY")?, None),
            None => {
                let dir = keys_dir(data_dir);
                let mut seeds = key_files(&dir)?;
                match seeds.pop() {
                    Some(seed) => (seed, seeds.pop()),
                    None => (write_new_key(&dir)?, None),
                }
            }
        };
        let signer = Arc::new(Signer::from_seed(&seed));
        let jwk = signer.jwk();
        store::keys::record(store, &jwk.kid, &jwk.x).await?;
        tracing::info!(kid = %signer.key_id(), "signing key loaded");
        Ok(Self {
            signer,
            previous: previous.map(|seed| Arc::new(Signer::from_seed(&seed))),
            store: store.clone(),
        })
    }

    /// Creates a new key file (it signs from the next start on) and publishes its public half.
    pub async fn rotate(store: &Store, data_dir: &Path) -> anyhow::Result<String> {
        let seed = write_new_key(&keys_dir(data_dir))?;
        let jwk = Signer::from_seed(&seed).jwk();
        store::keys::record(store, &jwk.kid, &jwk.x).await?;
        Ok(jwk.kid)
    }

    /// The key that signs.
    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    /// The key that signed before the last rotation, when its key file is here.
    pub fn previous(&self) -> Option<&Signer> {
        self.previous.as_deref()
    }

    /// Every published public key.
    pub async fn published(&self) -> Result<JwkSet, sqlx::Error> {
        published(&self.store).await
    }
}

/// Every public key recorded in `store`.
pub async fn published(store: &Store) -> Result<JwkSet, sqlx::Error> {
    let keys = store::keys::list(store)
        .await?
        .into_iter()
        .map(|(kid, x)| Jwk {
            kid,
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            x,
        })
        .collect::<Vec<_>>();
    Ok(JwkSet::from(keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_key_file_wins_and_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        assert!(key_files(dir.path()).unwrap().is_empty());
        let first = write_new_key(dir.path()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let second = write_new_key(dir.path()).unwrap();
        assert_ne!(first, second);
        assert_eq!(key_files(dir.path()).unwrap(), vec![first, second]);
        #[cfg(unix)]
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            use std::os::unix::fs::PermissionsExt;
            let mode = entry.unwrap().metadata().unwrap().permissions().mode();
            assert_eq!(
                mode & 0o077,
                0,
                "key files are readable by their owner only"
            );
        }
        assert!(parse_seed("zz").is_err());
        assert!(parse_seed(&"ab".repeat(31)).is_err());
    }
}
