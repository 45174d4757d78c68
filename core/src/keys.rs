//! Signing keys for receipts and manifests.
//!
//! The private key is a 32-byte Ed25519 seed, kept as hex in `<data_dir>/keys/<created_ms>.ed25519`
//! (mode 0600; created on first start) or given by `APERTURE_SIGNING_KEY` (hex), which nodes
//! sharing one PostgreSQL must all use. The newest key file signs. Every public key is recorded
//! in the database too, but `/.well-known/aperture/keys` (and every bundle and page that hands
//! out keys) publishes only the node's own: the public halves of its key files and of
//! `APERTURE_SIGNING_KEY`, and the keys of the JWKS file `APERTURE_PUBLISHED_KEYS` (default
//! `<data dir>/keys/published.jwks`). A row somebody inserts into the database publishes
//! nothing. `aperture keys rotate` appends the outgoing key to that file, so receipts signed
//! before keep verifying whatever signs next.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use engine::receipt::{Jwk, JwkSet, Signer};
use rand::RngCore;
use rand::rngs::OsRng;

use crate::store::{self, Store};

pub use crate::config::{default_published_file, keys_dir};

/// The keys of the JWKS file `path` (none when there is no such file).
fn read_published(path: &Path) -> anyhow::Result<Vec<Jwk>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let set: JwkSet = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a JWKS file ({{\"keys\": [...]}})",
            path.display()
        )
    })?;
    for key in &set.keys {
        anyhow::ensure!(
            key.kty == "OKP" && key.crv == "Ed25519",
            "{}: key {} is not an Ed25519 key",
            path.display(),
            key.kid
        );
    }
    Ok(set.keys)
}

/// Adds `key` to the JWKS file `path` (made when missing), unless it is there already.
fn append_published(path: &Path, key: Jwk) -> anyhow::Result<()> {
    let mut keys = read_published(path)?;
    if keys.iter().any(|k| k.kid == key.kid) {
        return Ok(());
    }
    keys.push(key);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&JwkSet::from(keys))?;
    let temporary = path.with_extension("jwks.tmp");
    std::fs::write(&temporary, text).with_context(|| format!("writing {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
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
    /// What this node publishes: its own keys and those of the published-keys file.
    published: JwkSet,
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
    /// its public half; publishes the node's own keys and those of `published_file`.
    pub async fn load(
        store: &Store,
        data_dir: &Path,
        configured: Option<&str>,
        published_file: &Path,
    ) -> anyhow::Result<Self> {
        let dir = keys_dir(data_dir);
        let mut files = key_files(&dir)?;
        let (seed, previous) = match configured.filter(|s| !s.trim().is_empty()) {
            Some(text) => (parse_seed(text).context("APERTURE_SIGNING_KEY")?, None),
            None => {
                if files.is_empty() {
                    files.push(write_new_key(&dir)?);
                }
                let newest = files.len() - 1;
                (files[newest], newest.checked_sub(1).map(|i| files[i]))
            }
        };
        let signer = Arc::new(Signer::from_seed(&seed));
        let jwk = signer.jwk();
        store::keys::record(store, &jwk.kid, &jwk.x).await?;
        let mut published: Vec<Jwk> = Vec::new();
        let own = files.iter().map(|seed| Signer::from_seed(seed).jwk());
        for key in own
            .chain(std::iter::once(jwk))
            .chain(read_published(published_file)?)
        {
            if !published.iter().any(|k| k.kid == key.kid) {
                published.push(key);
            }
        }
        tracing::info!(kid = %signer.key_id(), published = published.len(), "signing key loaded");
        Ok(Self {
            signer,
            previous: previous.map(|seed| Arc::new(Signer::from_seed(&seed))),
            published: JwkSet::from(published),
        })
    }

    /// Creates a new key file (it signs from the next start on), records its public half, and
    /// appends the outgoing key (`configured`, else the newest key file) to `published_file`, so
    /// what it signed stays verifiable whatever signs next.
    pub async fn rotate(
        store: &Store,
        data_dir: &Path,
        configured: Option<&str>,
        published_file: &Path,
    ) -> anyhow::Result<String> {
        let dir = keys_dir(data_dir);
        let outgoing = match configured.filter(|s| !s.trim().is_empty()) {
            Some(text) => Some(parse_seed(text).context("APERTURE_SIGNING_KEY")?),
            None => key_files(&dir)?.pop(),
        };
        if let Some(seed) = outgoing {
            append_published(published_file, Signer::from_seed(&seed).jwk())?;
        }
        let seed = write_new_key(&dir)?;
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

    /// Every key this node publishes (never one that is only in the database).
    pub async fn published(&self) -> Result<JwkSet, sqlx::Error> {
        Ok(self.published.clone())
    }
}

/// Every public key recorded in `store` (what a verifier reading the database trusts; what the
/// node publishes is [`KeyRing::published`]).
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
