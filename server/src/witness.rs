//! `aperture witness`: a pull witness of one tenant's journal (CONTRACT §13). It fetches the
//! latest checkpoint, checks its signature against the log key it pinned on first use and a
//! consistency proof from the last tree it saw (kept in `--state`), then cosigns it
//! (C2SP `tlog-cosignature`, Ed25519 `cosignature/v1`) and posts the cosignature. On an
//! inconsistent or badly signed checkpoint it refuses: it keeps its state, says why and exits
//! non-zero. (The C2SP push protocol `tlog-witness` is not implemented.)
//!
//! Its key file holds `PRIVATE+KEY+<name>+<key id>+<base64(0x04 ‖ seed)>`, made on first use
//! under `--name`; its verifier key (what an admin registers with `POST /journal/witnesses`)
//! is printed at every start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use engine::merkle::{self, Hash};
use engine::note::{self, Checkpoint, Note, VerifierKey};
use engine::receipt::{JwkSet, Signer, verifying_key_from_jwk};
use rand::RngCore;
use serde::{Deserialize, Serialize};

/// The witness's options.
#[derive(Debug, Clone)]
pub struct Options {
    /// The gateway's base URL.
    pub url: String,
    /// The tenant whose log is witnessed.
    pub tenant: String,
    /// API token (`agent_tool_exposure:witness`).
    pub token: String,
    /// The witness's key file.
    pub key_file: PathBuf,
    /// The name for a new key file.
    pub name: String,
    /// Where the witness keeps what it saw.
    pub state: PathBuf,
    /// Seconds between rounds (without `--once`).
    pub interval: Duration,
}

/// What the witness remembers between rounds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct State {
    /// The log's origin.
    pub origin: String,
    /// The log's key, pinned on first use (note verifier format).
    pub log_key: String,
    /// The largest consistent tree seen.
    pub tree_size: u64,
    /// Its root, standard base64.
    pub root: String,
}

impl State {
    /// Reads a state file `aperture witness --state` wrote.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        read_state(path)?.with_context(|| format!("{}: no such file", path.display()))
    }

    /// The tenant whose log the witness follows (the origin is `<host>/aperture/<tenant>`).
    pub fn tenant(&self) -> Option<&str> {
        self.origin
            .rsplit_once("/aperture/")
            .map(|(_, tenant)| tenant)
            .filter(|tenant| engine::environment::is_name(tenant))
    }

    /// The root of the tree of `tree_size` records the witness cosigned.
    pub fn root_hash(&self) -> anyhow::Result<Hash> {
        decode_hash(&self.root)
    }
}

/// The witness's signing key and name.
pub struct WitnessKey {
    /// The key name.
    pub name: String,
    /// The signer.
    pub signer: Signer,
}

impl WitnessKey {
    /// Its verifier key.
    pub fn verifier(&self) -> anyhow::Result<VerifierKey> {
        Ok(VerifierKey::new(
            &self.name,
            note::COSIGNATURE_V1,
            self.signer.verifying_key(),
        )?)
    }
}

/// Reads the key file, or makes one under `name` when there is none.
pub fn load_or_create_key(path: &Path, name: &str) -> anyhow::Result<WitnessKey> {
    if path.exists() {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut parts = text.trim().splitn(5, '+');
        let (Some("PRIVATE"), Some("KEY"), Some(name), Some(_id), Some(material)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            anyhow::bail!("{} is not a witness key file", path.display());
        };
        let bytes = STANDARD
            .decode(material)
            .context("the key file's key is not base64")?;
        let (kind, seed) = bytes.split_first().context("the key file's key is empty")?;
        anyhow::ensure!(*kind == note::COSIGNATURE_V1, "not a cosigner key (0x04)");
        let seed: [u8; 32] = seed
            .try_into()
            .map_err(|_| anyhow::anyhow!("an Ed25519 seed is 32 bytes"))?;
        return Ok(WitnessKey {
            name: name.to_owned(),
            signer: Signer::from_seed(&seed),
        });
    }
    anyhow::ensure!(
        note::valid_key_name(name),
        "--name {name:?}: no spaces or `+`"
    );
    let mut seed = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut seed);
    let key = WitnessKey {
        name: name.to_owned(),
        signer: Signer::from_seed(&seed),
    };
    let mut material = vec![note::COSIGNATURE_V1];
    material.extend_from_slice(&seed);
    let text = format!(
        "PRIVATE+KEY+{name}+{}+{}\n",
        hex::encode(key.verifier()?.id()),
        STANDARD.encode(material)
    );
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    use std::io::Write;
    options
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(key)
}

fn read_state(path: &Path) -> anyhow::Result<Option<State>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn write_state(path: &Path, state: &State) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(state)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn decode_hash(text: &str) -> anyhow::Result<Hash> {
    STANDARD
        .decode(text)
        .ok()
        .and_then(|b| b.try_into().ok())
        .context("not a base64 SHA-256 hash")
}

/// What one round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Cosigned a checkpoint of this size.
    Cosigned(u64),
}

/// The first of `keys` that signed `note` under `origin`, as a note verifier key.
fn signer_among(note: &Note, origin: &str, keys: &JwkSet) -> Option<VerifierKey> {
    keys.keys
        .iter()
        .filter_map(|k| verifying_key_from_jwk(k).ok())
        .filter_map(|k| VerifierKey::new(origin, note::ED25519, k).ok())
        .find(|k| note.verify(k).is_ok())
}

/// One round: fetch, check, cosign, post. An error is a refusal (or an unreachable gateway);
/// the state is then left as it was.
pub async fn round(options: &Options, key: &WitnessKey) -> anyhow::Result<Round> {
    let base = options
        .url
        .trim_end_matches('/')
        .trim_end_matches("/mcp")
        .to_owned();
    let tls = aperture_core::upstream::tls_config(base.starts_with("https:"))?;
    let http = upstream_reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(30))
        .build()?;
    let get = |url: String| {
        let http = http.clone();
        let token = options.token.clone();
        async move {
            let response = http
                .get(&url)
                .bearer_auth(token)
                .send()
                .await
                .with_context(|| format!("fetching {url}"))?;
            let status = response.status();
            let text = response.text().await?;
            anyhow::ensure!(status.is_success(), "{url}: {status}: {text}");
            anyhow::Ok(text)
        }
    };
    let text = get(format!(
        "{base}/.well-known/aperture/checkpoints/{}",
        options.tenant
    ))
    .await?;
    let fetched = Note::parse(&text).context("the checkpoint is not a signed note")?;
    let checkpoint = Checkpoint::parse(&fetched.text).context("the note is not a checkpoint")?;
    let previous = read_state(&options.state)?;
    let keys: JwkSet =
        serde_json::from_str(&get(format!("{base}/.well-known/aperture/keys")).await?)
            .context("the gateway's key set")?;
    let log_key = match &previous {
        Some(seen) => {
            anyhow::ensure!(
                checkpoint.origin == seen.origin,
                "refused: the checkpoint's origin {} is not the log's {}",
                checkpoint.origin,
                seen.origin
            );
            let pinned = VerifierKey::parse(&seen.log_key).context("the pinned log key")?;
            fetched.verify(&pinned).map_err(|e| {
                anyhow::anyhow!("refused: the checkpoint is not signed by the pinned log key: {e}")
            })?;
            // A rotated log signs its first checkpoint with both keys: follow to the new one.
            match signer_among(
                &Note {
                    text: fetched.text.clone(),
                    signatures: fetched
                        .signatures
                        .iter()
                        .filter(|s| s.id != pinned.id())
                        .cloned()
                        .collect(),
                },
                &checkpoint.origin,
                &keys,
            ) {
                Some(next) => next,
                None => pinned,
            }
        }
        None => signer_among(&fetched, &checkpoint.origin, &keys).context(
            "refused: the checkpoint is not signed by any of the gateway's published keys",
        )?,
    };
    if let Some(seen) = &previous {
        let old_root = decode_hash(&seen.root)?;
        anyhow::ensure!(
            checkpoint.size >= seen.tree_size,
            "refused: the log shrank from {} to {} records",
            seen.tree_size,
            checkpoint.size
        );
        if checkpoint.size == seen.tree_size {
            anyhow::ensure!(
                checkpoint.root == old_root,
                "refused: two different roots for {} records",
                checkpoint.size
            );
        } else {
            let proof: aperture_core::transparency::Proof = serde_json::from_str(
                &get(format!(
                    "{base}{}/journal/proofs/consistency?from={}&to={}",
                    crate::api::PREFIX,
                    seen.tree_size,
                    checkpoint.size
                ))
                .await?,
            )
            .context("the consistency proof")?;
            let hashes = proof
                .hashes
                .iter()
                .map(|h| decode_hash(h))
                .collect::<anyhow::Result<Vec<_>>>()?;
            merkle::verify_consistency(
                seen.tree_size,
                checkpoint.size,
                &old_root,
                &checkpoint.root,
                &hashes,
            )
            .map_err(|e| {
                anyhow::anyhow!(
                    "refused: the tree of {} records is not an extension of the {} seen before: {e}",
                    checkpoint.size,
                    seen.tree_size
                )
            })?;
        }
    }
    write_state(
        &options.state,
        &State {
            origin: checkpoint.origin.clone(),
            log_key: log_key.to_string(),
            tree_size: checkpoint.size,
            root: STANDARD.encode(checkpoint.root),
        },
    )?;
    let now = u64::try_from(aperture_core::clock::now_ms() / 1000).unwrap_or(0);
    let line = note::cosign(&fetched.text, &key.name, &key.signer, now)?;
    let mut posted = Note {
        text: fetched.text.clone(),
        signatures: fetched
            .signatures
            .iter()
            .filter(|s| s.name == checkpoint.origin)
            .cloned()
            .collect(),
    };
    posted.signatures.push(line);
    let url = format!(
        "{base}{}/journal/checkpoints/cosignatures",
        crate::api::PREFIX
    );
    let response = http
        .post(&url)
        .bearer_auth(&options.token)
        .json(&serde_json::json!({ "note": posted.render() }))
        .send()
        .await
        .with_context(|| format!("posting to {url}"))?;
    let status = response.status();
    anyhow::ensure!(
        status.is_success(),
        "{url}: {status}: {}",
        response.text().await.unwrap_or_default()
    );
    Ok(Round::Cosigned(checkpoint.size))
}

/// Runs rounds (one with `once`).
pub async fn run(options: Options, once: bool) -> anyhow::Result<()> {
    let key = load_or_create_key(&options.key_file, &options.name)?;
    println!(
        "witness key: {} (register it with POST /journal/witnesses)",
        key.verifier()?
    );
    loop {
        match round(&options, &key).await {
            Ok(Round::Cosigned(size)) => println!("cosigned the checkpoint of {size} records"),
            // A refusal ends the witness (its state kept); a gateway that cannot be reached
            // is tried again next round.
            Err(e) if once || e.to_string().starts_with("refused") => return Err(e),
            Err(e) => eprintln!("{e:#}"),
        }
        if once {
            return Ok(());
        }
        tokio::time::sleep(options.interval).await;
    }
}
