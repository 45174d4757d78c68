//! Secrets at rest: what an upstream needs to authenticate (HTTP header values, a stdio
//! process's environment) is stored encrypted, under a key kept apart from the database.
//!
//! The cipher is XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`), a fresh random 24-byte
//! nonce per seal, and the row's identity (tenant and upstream id) as associated data, so a
//! sealed value copied into another row does not open. A sealed value reads
//! `enc:v1:<key id>:<base64 of nonce ‖ ciphertext>`; the key id (the first 8 hex digits of the
//! key's SHA-256) names which key sealed it.
//!
//! Keys: `APERTURE_SECRETS_KEY` (64 hex digits; several, comma-separated, when rotating: the
//! first seals, all open), else the key file `<data dir>/secrets.key` (one key per line, the
//! first current), created mode 0600 with a fresh key on first use. Nodes sharing a database
//! must share the key. `aperture keys rotate-secrets` seals every stored value under a new key;
//! a running server reads the key file again before it seals and when it meets a key id it
//! does not hold, so it follows a rotation without a restart.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

const PREFIX: &str = "enc:v1:";
/// The key file in the data directory.
pub const KEY_FILE: &str = "secrets.key";

/// Why a sealed value did not open.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The value is not sealed (a plaintext left from before encryption, or tampering).
    #[error("the stored secret is not encrypted")]
    NotSealed,
    /// No key with the value's key id is configured.
    #[error(
        "the stored secret was encrypted with key {0}, which is not configured (APERTURE_SECRETS_KEY or {KEY_FILE})"
    )]
    UnknownKey(String),
    /// The value does not decrypt under its key and row (tampered, or moved from another row).
    #[error("the stored secret does not decrypt for this row")]
    Corrupt,
}

struct Key {
    id: String,
    bytes: [u8; 32],
    cipher: XChaCha20Poly1305,
}

impl Key {
    fn new(bytes: [u8; 32]) -> Self {
        let id = hex::encode(&Sha256::digest(bytes)[..4]);
        Self {
            id,
            bytes,
            cipher: XChaCha20Poly1305::new(&bytes.into()),
        }
    }
}

/// The keys secrets are sealed and opened with; the first seals.
pub struct SecretBox {
    keys: std::sync::RwLock<std::sync::Arc<Vec<Key>>>,
    /// Where the keys came from (the key file, or `None` for the environment).
    file: Option<PathBuf>,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretBox")
            .field("current", &self.current_id())
            .field("file", &self.file)
            .finish()
    }
}

fn parse_keys(text: &str, what: &str) -> anyhow::Result<Vec<Key>> {
    let keys = text
        .split([',', '\n'])
        .map(str::trim)
        .filter(|k| !k.is_empty() && !k.starts_with('#'))
        .map(|k| {
            let bytes: [u8; 32] = hex::decode(k)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| anyhow::anyhow!("{what}: a key is 64 hex digits (32 bytes)"))?;
            Ok(Key::new(bytes))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(!keys.is_empty(), "{what} holds no key");
    Ok(keys)
}

fn random_key() -> [u8; 32] {
    XChaCha20Poly1305::generate_key(&mut OsRng).into()
}

/// Writes `text` to `path` readable by the owner only (0600), replacing it atomically.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

impl SecretBox {
    /// The keys of `APERTURE_SECRETS_KEY` (`env`), else of the key file in `data_dir`, which is
    /// created with a fresh key when missing.
    pub fn load(data_dir: &Path, env: Option<&str>) -> anyhow::Result<Self> {
        if let Some(env) = env.filter(|e| !e.trim().is_empty()) {
            return Ok(Self::with_keys(
                parse_keys(env, "APERTURE_SECRETS_KEY")?,
                None,
            ));
        }
        let path = data_dir.join(KEY_FILE);
        if !path.exists() {
            crate::store::create_private_dir(data_dir)?;
            write_private(&path, &format!("{}\n", hex::encode(random_key())))?;
        }
        Ok(Self::with_keys(read_key_file(&path)?, Some(path)))
    }

    fn with_keys(keys: Vec<Key>, file: Option<PathBuf>) -> Self {
        Self {
            keys: std::sync::RwLock::new(std::sync::Arc::new(keys)),
            file,
        }
    }

    /// One random key held in memory (tests and throwaway tools).
    pub fn ephemeral() -> Self {
        Self::with_keys(vec![Key::new(random_key())], None)
    }

    fn keys(&self) -> std::sync::Arc<Vec<Key>> {
        self.keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the key file again (a rotation may have changed it); keeps the keys held when it
    /// cannot be read.
    fn reload(&self) {
        let Some(path) = &self.file else { return };
        match read_key_file(path) {
            Ok(keys) => {
                *self
                    .keys
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = std::sync::Arc::new(keys);
            }
            Err(e) => tracing::warn!(error = %e, "reading the secrets key file again"),
        }
    }

    /// The key id that seals.
    pub fn current_id(&self) -> String {
        self.keys()[0].id.clone()
    }

    /// Seals `plaintext` for the row named by `aad`.
    pub fn seal(&self, aad: &str, plaintext: &str) -> String {
        self.reload();
        let keys = self.keys();
        let key = &keys[0];
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        // Encryption with a valid key and nonce cannot fail for inputs that fit in memory.
        let sealed = key
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: aad.as_bytes(),
                },
            )
            .unwrap_or_default();
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!(
            "{PREFIX}{}:{}",
            key.id,
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    }

    /// Whether `stored` is a sealed value.
    pub fn is_sealed(stored: &str) -> bool {
        stored.starts_with(PREFIX)
    }

    /// Opens a sealed value of the row named by `aad`.
    pub fn open(&self, aad: &str, stored: &str) -> Result<String, SecretError> {
        let rest = stored.strip_prefix(PREFIX).ok_or(SecretError::NotSealed)?;
        let (id, data) = rest.split_once(':').ok_or(SecretError::Corrupt)?;
        let mut keys = self.keys();
        if !keys.iter().any(|k| k.id == id) {
            self.reload();
            keys = self.keys();
        }
        let key = keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| SecretError::UnknownKey(id.to_owned()))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|_| SecretError::Corrupt)?;
        if bytes.len() < 24 {
            return Err(SecretError::Corrupt);
        }
        let (nonce, sealed) = bytes.split_at(24);
        let plain = key
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| SecretError::Corrupt)?;
        String::from_utf8(plain).map_err(|_| SecretError::Corrupt)
    }

    /// Rotation, step one: a new current key (fresh when `new` is `None`) before every key
    /// held now, saved to the key file first when the keys came from one (a crash later leaves
    /// every value openable). With keys from `APERTURE_SECRETS_KEY` the operator rotates by
    /// putting the new key first there, so this keeps them as they are.
    pub fn begin_rotation(&self, new: Option<[u8; 32]>) -> anyhow::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let held = read_key_file(path)?;
        let mut keys = vec![Key::new(new.unwrap_or_else(random_key))];
        // The previous current key stays for values a running node sealed meanwhile; older
        // ones go (everything is re-sealed under the new key next).
        keys.extend(held.into_iter().take(1));
        let text: String = keys
            .iter()
            .map(|k| format!("{}\n", hex::encode(k.bytes)))
            .collect();
        write_private(path, &text)?;
        *self
            .keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = std::sync::Arc::new(keys);
        Ok(())
    }

    /// The key file, when the keys came from one.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }
}

fn read_key_file(path: &Path) -> anyhow::Result<Vec<Key>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    parse_keys(&text, &path.display().to_string())
}

/// The associated data that binds an upstream's sealed spec to its row.
pub fn upstream_aad(tenant_id: &str, upstream_id: &str) -> String {
    format!("aperture/upstream-spec/v1\n{tenant_id}\n{upstream_id}")
}

/// The associated data that binds a webhook's sealed signing secret to its row.
pub fn webhook_aad(tenant_id: &str, webhook_id: &str) -> String {
    format!("aperture/webhook-secret/v1\n{tenant_id}\n{webhook_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_for_their_row_and_key() {
        let secrets = SecretBox::ephemeral();
        let aad = upstream_aad("t", "ups_1");
        let sealed = secrets.seal(&aad, "canary-secret");
        assert!(SecretBox::is_sealed(&sealed));
        assert!(!sealed.contains("canary"));
        assert_eq!(secrets.open(&aad, &sealed).unwrap(), "canary-secret");
        // Two seals of the same value differ (fresh nonces).
        assert_ne!(secrets.seal(&aad, "canary-secret"), sealed);
        // Another row, another key, a flipped byte, plaintext: refused.
        assert!(matches!(
            secrets.open(&upstream_aad("t", "ups_2"), &sealed),
            Err(SecretError::Corrupt)
        ));
        assert!(matches!(
            SecretBox::ephemeral().open(&aad, &sealed),
            Err(SecretError::UnknownKey(_))
        ));
        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 3;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert!(
            secrets
                .open(&aad, &String::from_utf8(tampered).unwrap())
                .is_err()
        );
        assert!(matches!(
            secrets.open(&aad, "{\"transport\":\"stdio\"}"),
            Err(SecretError::NotSealed)
        ));
    }

    #[test]
    fn a_rotation_keeps_old_values_open_and_running_boxes_follow_it() {
        let dir = tempfile::tempdir().unwrap();
        let running = SecretBox::load(dir.path(), None).unwrap();
        let aad = upstream_aad("t", "ups_1");
        let sealed = running.seal(&aad, "canary-secret");
        let old = running.current_id();
        let operator = SecretBox::load(dir.path(), None).unwrap();
        operator.begin_rotation(None).unwrap();
        assert_ne!(operator.current_id(), old);
        assert_eq!(operator.open(&aad, &sealed).unwrap(), "canary-secret");
        // The running box seals with the new key at once, and opens what the operator sealed.
        let resealed = operator.seal(&aad, "canary-secret");
        assert!(running.seal(&aad, "x").contains(&operator.current_id()));
        assert_eq!(running.open(&aad, &resealed).unwrap(), "canary-secret");
        // A second rotation drops the oldest key.
        operator.begin_rotation(None).unwrap();
        assert!(matches!(
            SecretBox::load(dir.path(), None)
                .unwrap()
                .open(&aad, &sealed),
            Err(SecretError::UnknownKey(_))
        ));
    }

    #[test]
    fn the_key_file_is_created_private_and_the_environment_wins() {
        let dir = tempfile::tempdir().unwrap();
        let first = SecretBox::load(dir.path(), None).unwrap();
        let again = SecretBox::load(dir.path(), None).unwrap();
        assert_eq!(first.current_id(), again.current_id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let env = "11".repeat(32);
        let from_env = SecretBox::load(dir.path(), Some(&env)).unwrap();
        assert_ne!(from_env.current_id(), first.current_id());
        assert!(SecretBox::load(dir.path(), Some("abc")).is_err());
    }
}
