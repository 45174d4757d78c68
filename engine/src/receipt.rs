//! Receipts, disclosures, signatures, the journal's hash chain and signed manifests
//! (CONTRACT §6).
//!
//! Every decision and every execution yields one [`Receipt`]: a small, signed, caller-safe record
//! of *what* was decided and *why* (as a [`ReasonCode`], never free text). What the caller must
//! not see — the matched rule id, the rule's reason text, the effective arguments, upstream error
//! text — goes into a separate [`Disclosures`] object that stays in the journal; the receipt only
//! carries its digest ([`disclosures_digest`]), so anyone holding both can check that they belong
//! together ([`disclosures_match`]) while the receipt alone reveals nothing. Nothing in this
//! module puts disclosures into a receipt.
//!
//! The byte-level rules, all over RFC 8785 (JCS) bytes from [`crate::canonical`]:
//!
//! - `disclosures_digest` = `sha256:` + SHA-256 of the JCS bytes of the disclosures.
//! - `signature` = base64url (no padding) Ed25519 over the JCS bytes of the receipt *without* its
//!   `signature` member ([`receipt_signing_bytes`]).
//! - The hash of a receipt ([`receipt_hash`]) = `sha256:` + SHA-256 of the JCS bytes of the whole
//!   *signed* receipt. It is the next journal record's `prev_hash`; the first record's
//!   `prev_hash` is [`ZERO_HASH`] and its `seq` is 1. [`verify_chain`] and [`ChainVerifier`]
//!   check a tenant's journal.
//! - A denial the journal could not record (`journal_unavailable`) is still signed, with `seq`
//!   and `prev_hash` null; it is never part of a chain.
//! - Manifests are signed the same way ([`sign_manifest`] over a [`ManifestDocument`]).
//! - Public keys are published as JWKs ([`Jwk`], [`JwkSet`]); a key's id is derived from the key
//!   itself ([`key_id_of`]): `ed25519:` + the first 16 lowercase hex digits (8 bytes) of SHA-256
//!   over the 32-byte public key.
//!
//! The module is pure: it reads no clock (callers pass `issued_at`), draws no randomness
//! (callers pass the 16 salt bytes and the keys) and does no I/O, so it also runs in wasm.
//!
//! JCS writes every number as an IEEE double, so integers (`seq`, `policy_version`) above 2^53
//! would lose precision in the signed bytes; journals never get there.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::canonical::{self, CanonicalError, ZERO_HASH, to_canonical_bytes};

// ---------------------------------------------------------------------------------------------
// Kinds, decisions, reason codes
// ---------------------------------------------------------------------------------------------

/// What a journal record is about (`kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    /// The authorization decision on a `tools/call` (before anything runs).
    Decision,
    /// The outcome of running an authorized invocation; carries `mode`, `limits` and
    /// `redaction` as snapshotted at authorization.
    Execution,
    /// An approver released or rejected a parked invocation, or applied a staged change.
    Approval,
    /// A manifest (and its lease) was granted by `tools/list` or `POST /sessions`.
    Manifest,
    /// An administrative change (policies, descriptors, upstreams, tokens, users, sign-ins).
    Admin,
    /// A request of an upstream's to the calling client (sampling, elicitation, roots) while a
    /// tool ran: relayed or refused, and what came of it.
    ClientRequest,
}

impl ReceiptKind {
    /// Every kind, in declaration order.
    pub const ALL: [ReceiptKind; 6] = [
        ReceiptKind::Decision,
        ReceiptKind::Execution,
        ReceiptKind::Approval,
        ReceiptKind::Manifest,
        ReceiptKind::Admin,
        ReceiptKind::ClientRequest,
    ];

    /// The JSON string of this kind.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReceiptKind::Decision => "decision",
            ReceiptKind::Execution => "execution",
            ReceiptKind::Approval => "approval",
            ReceiptKind::Manifest => "manifest",
            ReceiptKind::Admin => "admin",
            ReceiptKind::ClientRequest => "client_request",
        }
    }
}

/// What was decided (`decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call runs (or ran), or the change was applied.
    Allow,
    /// Refused; `reason` says which check failed.
    Deny,
    /// Parked for an approver (`approval_required`).
    Park,
    /// Validated, bound and journaled, not executed (`dry_run_only`).
    DryRun,
    /// Recorded as a staged change (`staged_change`).
    Stage,
    /// Answered with a confirmation token (`confirmation_required`).
    Confirm,
    /// Accepted as an asynchronous job (`async_job_only`).
    Async,
}

impl Decision {
    /// Every decision, in declaration order.
    pub const ALL: [Decision; 7] = [
        Decision::Allow,
        Decision::Deny,
        Decision::Park,
        Decision::DryRun,
        Decision::Stage,
        Decision::Confirm,
        Decision::Async,
    ];

    /// The JSON string of this decision.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::Park => "park",
            Decision::DryRun => "dry_run",
            Decision::Stage => "stage",
            Decision::Confirm => "confirm",
            Decision::Async => "async",
        }
    }
}

/// The `reason` of a receipt: always a code, never free text (CONTRACT §5).
///
/// [`ReasonCode::Ok`] (`"ok"`) is the reason of every receipt whose checks all passed — an
/// `allow`, and equally a `park`, `dry_run`, `stage`, `confirm` or `async` decision (the
/// `decision` and `mode` members already say what happens next), a successful execution, an
/// approval that released an invocation, a granted manifest and an applied admin change. Every
/// other code names the check that failed. [`ReasonCode::Unauthenticated`] exists for
/// completeness of the vocabulary but never appears in a receipt (it is an HTTP 401 without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// Every check passed.
    Ok,
    /// No or invalid credentials (HTTP 401, no receipt).
    Unauthenticated,
    /// Session, manifest or lease unknown, of another tenant, or not belonging together.
    ManifestBindingMismatch,
    /// The manifest's lease has expired.
    LeaseExpired,
    /// The session was opened by another actor, or `_meta.actor_id` differs from the token's.
    ActorMismatch,
    /// Unknown or hidden tool (indistinguishable to the caller).
    NotCallable,
    /// A fork's `fork_tools` allowlist does not admit the tool.
    ExecutionAllowlist,
    /// The tool's mode is `deny`.
    PolicyDenied,
    /// The principal lacks the tool's required scope.
    ScopeMissing,
    /// The call did not echo `expected_schema_hash`.
    SchemaHashMissing,
    /// The echoed `tool_version` differs from the manifest's.
    ToolVersionMismatch,
    /// The echoed `expected_schema_hash` differs from the manifest's.
    SchemaHashMismatch,
    /// The live tool changed since the manifest was granted.
    ManifestDrift,
    /// The arguments do not validate against the narrowed schema of the grant.
    ArgumentsInvalid,
    /// A rate bucket is exhausted.
    RateLimited,
    /// The rule caps cost but no spend gate is configured.
    SpendGateUnavailable,
    /// The journal could not record the decision; nothing runs (fail closed).
    JournalUnavailable,
    /// The execution target changed between authorization and execution.
    TargetDrift,
    /// An approver rejected the parked invocation.
    ApprovalRejected,
    /// The parked invocation was not approved in time.
    ApprovalExpired,
    /// The execution exceeded its deadline.
    ExecutionTimeout,
    /// The result exceeded `max_result_bytes`.
    ResultTooLarge,
    /// The upstream failed (its error text goes to the disclosures, not the receipt).
    UpstreamError,
    /// The call was cancelled: by its caller while it ran, or (parked, staged or queued) by its
    /// caller or an approver before it ran (CONTRACT §14).
    Cancelled,
}

impl ReasonCode {
    /// Every code: [`ReasonCode::Ok`], then the §5 codes in the contract's checking order.
    pub const ALL: [ReasonCode; 24] = [
        ReasonCode::Ok,
        ReasonCode::Unauthenticated,
        ReasonCode::ManifestBindingMismatch,
        ReasonCode::LeaseExpired,
        ReasonCode::ActorMismatch,
        ReasonCode::NotCallable,
        ReasonCode::ExecutionAllowlist,
        ReasonCode::PolicyDenied,
        ReasonCode::ScopeMissing,
        ReasonCode::SchemaHashMissing,
        ReasonCode::ToolVersionMismatch,
        ReasonCode::SchemaHashMismatch,
        ReasonCode::ManifestDrift,
        ReasonCode::ArgumentsInvalid,
        ReasonCode::RateLimited,
        ReasonCode::SpendGateUnavailable,
        ReasonCode::JournalUnavailable,
        ReasonCode::TargetDrift,
        ReasonCode::ApprovalRejected,
        ReasonCode::ApprovalExpired,
        ReasonCode::ExecutionTimeout,
        ReasonCode::ResultTooLarge,
        ReasonCode::UpstreamError,
        ReasonCode::Cancelled,
    ];

    /// The JSON string of this code.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReasonCode::Ok => "ok",
            ReasonCode::Unauthenticated => "unauthenticated",
            ReasonCode::ManifestBindingMismatch => "manifest_binding_mismatch",
            ReasonCode::LeaseExpired => "lease_expired",
            ReasonCode::ActorMismatch => "actor_mismatch",
            ReasonCode::NotCallable => "not_callable",
            ReasonCode::ExecutionAllowlist => "execution_allowlist",
            ReasonCode::PolicyDenied => "policy_denied",
            ReasonCode::ScopeMissing => "scope_missing",
            ReasonCode::SchemaHashMissing => "schema_hash_missing",
            ReasonCode::ToolVersionMismatch => "tool_version_mismatch",
            ReasonCode::SchemaHashMismatch => "schema_hash_mismatch",
            ReasonCode::ManifestDrift => "manifest_drift",
            ReasonCode::ArgumentsInvalid => "arguments_invalid",
            ReasonCode::RateLimited => "rate_limited",
            ReasonCode::SpendGateUnavailable => "spend_gate_unavailable",
            ReasonCode::JournalUnavailable => "journal_unavailable",
            ReasonCode::TargetDrift => "target_drift",
            ReasonCode::ApprovalRejected => "approval_rejected",
            ReasonCode::ApprovalExpired => "approval_expired",
            ReasonCode::ExecutionTimeout => "execution_timeout",
            ReasonCode::ResultTooLarge => "result_too_large",
            ReasonCode::UpstreamError => "upstream_error",
            ReasonCode::Cancelled => "cancelled",
        }
    }
}

/// A string that is not one of the known codes of a [`ReceiptKind`], [`Decision`] or
/// [`ReasonCode`] (for example a `?reason=` query parameter).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}`")]
pub struct UnknownCode {
    /// Which vocabulary was searched: `kind`, `decision` or `reason`.
    pub what: &'static str,
    /// The string as given.
    pub value: String,
}

macro_rules! str_code_impls {
    ($ty:ty, $what:literal) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownCode;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$ty>::ALL
                    .into_iter()
                    .find(|c| c.as_str() == s)
                    .ok_or_else(|| UnknownCode {
                        what: $what,
                        value: s.to_owned(),
                    })
            }
        }
    };
}

str_code_impls!(ReceiptKind, "kind");
str_code_impls!(Decision, "decision");
str_code_impls!(ReasonCode, "reason");

// ---------------------------------------------------------------------------------------------
// Receipt
// ---------------------------------------------------------------------------------------------

/// One signed journal record as the caller gets it (CONTRACT §6).
///
/// Members and JSON names are exactly the contract's. Members the contract marks optional
/// (`turn_id`, `invocation_id`, `mode`, `limits`, `redaction`, `target`) are omitted when `None`.
/// Members the contract lists as always present but that do not exist for every record are
/// `Option`s omitted when `None` — a value that does not exist is left out rather than invented:
///
/// - `environment`, `session_id`, `manifest_id`: absent on admin records that concern no
///   session; call records carry the values the call presented even when they did not bind.
/// - `tool`, `tool_version`, `schema_hash`, `args_hash`: present on call-related records
///   (`decision`, `execution`, `approval`); absent on `manifest` and `admin` records, and on
///   a call denial for whatever the call did not supply.
/// - `policy_id`, `policy_version`: absent when no policy was resolved (a binding mismatch, most
///   admin records).
///
/// `seq` and `prev_hash` are always present and `null` only on a `journal_unavailable` denial.
/// `limits`, `redaction` and `target` holding JSON `null` are treated like `None` (omitted), so a
/// receipt's canonical form does not depend on how "absent" was spelled.
///
/// Build one with `signature` (and `key_id`) empty and pass it to [`sign_receipt`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// `rcp_…` id of this record.
    pub receipt_id: String,
    /// What the record is about.
    pub kind: ReceiptKind,
    /// What was decided.
    pub decision: Decision,
    /// Why, as a code.
    pub reason: ReasonCode,
    /// The tenant whose journal holds the record.
    pub tenant_id: String,
    /// The session's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// `ses_…` (or `agt_…` for hosted agents) id of the exposure session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `man_…` id of the manifest the call presented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_id: Option<String>,
    /// The authenticated actor (for admin records: the principal that made the change).
    pub actor_id: String,
    /// Who exactly acted (CONTRACT §15): the token (`tok_…`), the dashboard user (`usr_…`),
    /// `operator` for the command line and the server's own actions, `anonymous` for a sign-in
    /// that did not authenticate. Absent in receipts made before it existed (they still verify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The hosted agent's turn, when the call belongs to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// `inv_…` id of the invocation, when one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// Canonical tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Tool version from the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// `schemaHash` of the tool as granted (`sha256:<hex>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_hash: Option<String>,
    /// Hash of the effective arguments (`sha256:<hex>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_hash: Option<String>,
    /// The policy that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_id: Option<String>,
    /// The version of that policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
    /// The exposure mode (`allow`, `dry_run_only`, …) snapshotted at authorization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `implicit` when a `/mcp` call was bound to its grant without an echo, or a grant was
    /// made for such a call (the tenant's `binding` setting); absent: the echo (CONTRACT §15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    /// The invocation limits snapshotted at authorization.
    #[serde(default, skip_serializing_if = "is_absent")]
    pub limits: Option<Value>,
    /// The output-redaction profile snapshotted at authorization.
    #[serde(default, skip_serializing_if = "is_absent")]
    pub redaction: Option<Value>,
    /// The server-resolved execution target pinned at authorization.
    #[serde(default, skip_serializing_if = "is_absent")]
    pub target: Option<Value>,
    /// When the record was made (RFC 3339, passed in by the caller).
    pub issued_at: String,
    /// Position in the tenant's journal, from 1; `null` when the journal could not record.
    pub seq: Option<u64>,
    /// [`receipt_hash`] of the previous record ([`ZERO_HASH`] for the first); `null` when the
    /// journal could not record.
    pub prev_hash: Option<String>,
    /// [`disclosures_digest`] of the record's disclosures.
    pub disclosures_digest: String,
    /// Id of the signing key (see [`key_id_of`]); set by [`sign_receipt`].
    pub key_id: String,
    /// base64url Ed25519 signature; empty until [`sign_receipt`].
    #[serde(default)]
    pub signature: String,
}

fn is_absent(value: &Option<Value>) -> bool {
    matches!(value, None | Some(Value::Null))
}

// ---------------------------------------------------------------------------------------------
// Disclosures
// ---------------------------------------------------------------------------------------------

/// What the caller must not see, kept in the journal beside the receipt (CONTRACT §6).
///
/// The random `salt` keeps the digest from being a guessing oracle for the hidden values.
/// Only the journal and the dashboard hold disclosures; the receipt carries
/// [`disclosures_digest`] alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disclosures {
    /// 16 random bytes, base64url without padding (22 characters). Set by [`Disclosures::new`].
    pub salt: String,
    /// The id of the policy rule that matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_rule_id: Option<String>,
    /// The matched rule's `reason` text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_reason: Option<String>,
    /// The effective arguments (after server-fixed arguments), whose hash is `args_hash`.
    #[serde(default, skip_serializing_if = "is_absent")]
    pub effective_arguments: Option<Value>,
    /// The upstream's error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_error: Option<String>,
    /// Further members, flattened into the object. Names of the members above are reserved:
    /// [`disclosures_digest`] refuses them (use [`Disclosures::insert_extra`] to be told early).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Member names of [`Disclosures`] that `extra` must not reuse.
pub const RESERVED_DISCLOSURE_KEYS: [&str; 5] = [
    "salt",
    "matched_rule_id",
    "rule_reason",
    "effective_arguments",
    "upstream_error",
];

impl Disclosures {
    /// Empty disclosures with the caller's 16 random salt bytes.
    pub fn new(salt: [u8; 16]) -> Self {
        Disclosures {
            salt: URL_SAFE_NO_PAD.encode(salt),
            matched_rule_id: None,
            rule_reason: None,
            effective_arguments: None,
            upstream_error: None,
            extra: BTreeMap::new(),
        }
    }

    /// Adds a free member; refuses the names in [`RESERVED_DISCLOSURE_KEYS`].
    pub fn insert_extra(
        &mut self,
        key: impl Into<String>,
        value: Value,
    ) -> Result<(), ReceiptError> {
        let key = key.into();
        if RESERVED_DISCLOSURE_KEYS.contains(&key.as_str()) {
            return Err(ReceiptError::ReservedDisclosureKey(key));
        }
        self.extra.insert(key, value);
        Ok(())
    }
}

/// `sha256:` + SHA-256 of the JCS bytes of `disclosures` (the receipt's `disclosures_digest`).
///
/// Fails when the salt is not 16 bytes of base64url or `extra` reuses a reserved member name.
pub fn disclosures_digest(disclosures: &Disclosures) -> Result<String, ReceiptError> {
    Ok(canonical::hash_value(&disclosures_value(disclosures)?))
}

/// The JCS text of `disclosures` and its [`disclosures_digest`], from one writing (what the
/// journal stores beside the receipt, and the digest the receipt carries).
pub fn disclosures_canonical(disclosures: &Disclosures) -> Result<(String, String), ReceiptError> {
    let bytes = canonical::value_bytes(&disclosures_value(disclosures)?);
    let digest = canonical::sha256_tagged(&bytes);
    let text = String::from_utf8(bytes)
        .map_err(|e| ReceiptError::Canonical(canonical::CanonicalError(e.to_string())))?;
    Ok((text, digest))
}

/// `disclosures` as a JSON value, once its salt and member names are checked.
fn disclosures_value(disclosures: &Disclosures) -> Result<Value, ReceiptError> {
    let salt_ok = URL_SAFE_NO_PAD
        .decode(&disclosures.salt)
        .is_ok_and(|bytes| bytes.len() == 16);
    if !salt_ok {
        return Err(ReceiptError::BadSalt);
    }
    if let Some(key) = disclosures
        .extra
        .keys()
        .find(|k| RESERVED_DISCLOSURE_KEYS.contains(&k.as_str()))
    {
        return Err(ReceiptError::ReservedDisclosureKey(key.clone()));
    }
    // The serialized value: its canonical writing sorts the flattened `extra` members in.
    Ok(to_value(disclosures)?)
}

/// Whether `disclosures` are the ones `receipt` was issued with (an auditor's check).
pub fn disclosures_match(
    receipt: &Receipt,
    disclosures: &Disclosures,
) -> Result<bool, ReceiptError> {
    Ok(disclosures_digest(disclosures)? == receipt.disclosures_digest)
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a receipt, digest or signature could not be produced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    /// The value has no canonical form.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// A disclosures `salt` that is not 16 bytes of unpadded base64url.
    #[error("the disclosures salt must be 16 bytes, base64url without padding")]
    BadSalt,
    /// A disclosures `extra` member reuses a reserved name.
    #[error("`{0}` is a reserved disclosures member and cannot be an extra")]
    ReservedDisclosureKey(String),
    /// The document names another key than the one asked to sign it.
    #[error("the document's key_id `{document}` is not the signer's `{signer}`")]
    KeyIdMismatch {
        /// The `key_id` in the document.
        document: String,
        /// The signer's key id.
        signer: String,
    },
    /// A journal link was asked of a record that has no `seq`.
    #[error("a record without seq cannot be followed in a journal")]
    NotJournaled,
}

/// Why a JWK is not a usable Ed25519 public key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwkError {
    /// `kty` is not `OKP`.
    #[error("unsupported kty `{0}`, expected OKP")]
    UnsupportedKty(String),
    /// `crv` is not `Ed25519`.
    #[error("unsupported crv `{0}`, expected Ed25519")]
    UnsupportedCrv(String),
    /// `x` is not 32 bytes of unpadded base64url.
    #[error("x must be 32 bytes, base64url without padding")]
    BadEncoding,
    /// `x` is not a valid Ed25519 point.
    #[error("x is not a valid Ed25519 public key")]
    InvalidKey,
}

/// Why a signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// No key with the record's `key_id` was offered.
    #[error("unknown key id `{0}`")]
    UnknownKeyId(String),
    /// The key offered for the key id is unusable.
    #[error("key `{kid}`: {error}")]
    BadKey {
        /// The key's id.
        kid: String,
        /// What is wrong with it.
        error: JwkError,
    },
    /// The signature is not 64 bytes of unpadded base64url.
    #[error("the signature is not 64 bytes of base64url without padding")]
    BadSignatureEncoding,
    /// The signature does not match the signed bytes and key.
    #[error("the signature does not match")]
    SignatureMismatch,
    /// The record is not a JSON object with string `key_id` and `signature` members.
    #[error("malformed record: {0}")]
    Malformed(String),
    /// The record has no canonical form.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

impl From<ReceiptError> for VerifyError {
    fn from(error: ReceiptError) -> Self {
        match error {
            ReceiptError::Canonical(e) => VerifyError::Canonical(e),
            other => VerifyError::Malformed(other.to_string()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/// The key id of a public key: `ed25519:` + the first 16 lowercase hex digits (8 bytes) of
/// SHA-256 over the 32 raw public-key bytes, e.g. `ed25519:1a2b3c4d5e6f7081`.
///
/// Deterministic, so the same key has the same id on every node and after every restart; the id
/// only selects a key, the signature check is what proves authorship.
pub fn key_id_of(key: &VerifyingKey) -> String {
    let digest = Sha256::digest(key.as_bytes());
    format!("ed25519:{}", hex::encode(&digest[..8]))
}

/// An Ed25519 signing key together with its [`key_id_of`] id. The secret never leaves it; its
/// `Debug` shows the key id only.
#[derive(Clone)]
pub struct Signer {
    key: SigningKey,
    key_id: String,
}

impl Signer {
    /// Wraps a signing key (generated or loaded by the caller).
    pub fn new(key: SigningKey) -> Self {
        let key_id = key_id_of(&key.verifying_key());
        Signer { key, key_id }
    }

    /// A signer from the 32-byte Ed25519 seed (secret key bytes).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Signer::new(SigningKey::from_bytes(seed))
    }

    /// The key id stamped on everything this signer signs.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public half.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The public half as a published JWK.
    pub fn jwk(&self) -> Jwk {
        jwk_of(&self.key.verifying_key())
    }

    fn sign_bytes(&self, bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(self.sign_raw(bytes))
    }

    /// The raw Ed25519 signature of `bytes` (for formats other than receipts: signed notes).
    pub fn sign_raw(&self, bytes: &[u8]) -> [u8; 64] {
        self.key.sign(bytes).to_bytes()
    }
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// A published Ed25519 public key (RFC 8037 OKP JWK): `{"kid","kty":"OKP","crv":"Ed25519","x"}`.
///
/// Unknown members (`use`, `alg`) are ignored when reading.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Jwk {
    /// Key id, as in receipts' `key_id` (see [`key_id_of`]).
    pub kid: String,
    /// Always `OKP`.
    pub kty: String,
    /// Always `Ed25519`.
    pub crv: String,
    /// The 32-byte public key, base64url without padding.
    pub x: String,
}

/// The document of `GET /.well-known/aperture/keys`: `{"keys":[…]}`. Rotated-out keys stay in it
/// so old receipts keep verifying.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwkSet {
    /// Every published key, current and retired.
    pub keys: Vec<Jwk>,
}

impl JwkSet {
    /// The key with id `kid`, if published.
    pub fn find(&self, kid: &str) -> Option<&Jwk> {
        self.keys.iter().find(|k| k.kid == kid)
    }
}

impl From<Vec<Jwk>> for JwkSet {
    fn from(keys: Vec<Jwk>) -> Self {
        JwkSet { keys }
    }
}

/// The JWK of a public key, with its [`key_id_of`] id.
pub fn jwk_of(key: &VerifyingKey) -> Jwk {
    Jwk {
        kid: key_id_of(key),
        kty: "OKP".to_owned(),
        crv: "Ed25519".to_owned(),
        x: URL_SAFE_NO_PAD.encode(key.as_bytes()),
    }
}

/// The public key a JWK describes. The `kid` is not checked against [`key_id_of`]: the set of
/// published keys decides which id names which key.
pub fn verifying_key_from_jwk(jwk: &Jwk) -> Result<VerifyingKey, JwkError> {
    if jwk.kty != "OKP" {
        return Err(JwkError::UnsupportedKty(jwk.kty.clone()));
    }
    if jwk.crv != "Ed25519" {
        return Err(JwkError::UnsupportedCrv(jwk.crv.clone()));
    }
    let bytes: [u8; 32] = URL_SAFE_NO_PAD
        .decode(&jwk.x)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(JwkError::BadEncoding)?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| JwkError::InvalidKey)
}

fn find_key<'a>(keys: &'a [Jwk], kid: &str) -> Result<&'a Jwk, VerifyError> {
    keys.iter()
        .find(|k| k.kid == kid)
        .ok_or_else(|| VerifyError::UnknownKeyId(kid.to_owned()))
}

/// Checks a base64url Ed25519 `signature` over `bytes` with `jwk` (strict verification: no
/// small-order keys, no malleable signatures).
fn verify_bytes(bytes: &[u8], signature: &str, jwk: &Jwk) -> Result<(), VerifyError> {
    verify_bytes_with(bytes, signature, &decode_key(jwk)?)
}

fn decode_key(jwk: &Jwk) -> Result<VerifyingKey, VerifyError> {
    verifying_key_from_jwk(jwk).map_err(|error| VerifyError::BadKey {
        kid: jwk.kid.clone(),
        error,
    })
}

/// [`verify_bytes`] with the key already decoded.
fn verify_bytes_with(bytes: &[u8], signature: &str, key: &VerifyingKey) -> Result<(), VerifyError> {
    let signature: [u8; 64] = URL_SAFE_NO_PAD
        .decode(signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(VerifyError::BadSignatureEncoding)?;
    key.verify_strict(bytes, &Signature::from_bytes(&signature))
        .map_err(|_| VerifyError::SignatureMismatch)
}

// ---------------------------------------------------------------------------------------------
// Signing and verifying receipts
// ---------------------------------------------------------------------------------------------

fn to_value<T: Serialize>(value: &T) -> Result<Value, CanonicalError> {
    serde_json::to_value(value).map_err(|e| CanonicalError(e.to_string()))
}

/// JCS bytes of a receipt object without its `signature` member.
fn signing_bytes_of_value(mut value: Value) -> Result<Vec<u8>, VerifyError> {
    let Value::Object(members) = &mut value else {
        return Err(VerifyError::Malformed("a receipt is a JSON object".into()));
    };
    members.remove("signature");
    Ok(to_canonical_bytes(&value)?)
}

/// The bytes a receipt's signature covers: the JCS bytes of the receipt without `signature`.
pub fn receipt_signing_bytes(receipt: &Receipt) -> Result<Vec<u8>, ReceiptError> {
    let mut out = Vec::with_capacity(1024);
    write_receipt(receipt, false, &mut out);
    Ok(out)
}

/// The JCS bytes of a receipt as serde would serialize it (with `signature` when `signed`),
/// written member by member in canonical order: the same bytes as canonicalizing the
/// serialized receipt (a test compares them), without building a JSON value first. Receipts
/// are signed and hashed on every journal record, in the writer that orders the chain.
fn write_receipt(r: &Receipt, signed: bool, out: &mut impl canonical::Sink) {
    canonical::write_fields(&receipt_fields(r, signed), out);
}

/// Position of `signature` among [`receipt_fields`].
const SIGNATURE_FIELD: usize = 23;

/// A receipt's members in canonical order (`signature` only when `signed`).
fn receipt_fields(r: &Receipt, signed: bool) -> [(&'static str, canonical::Field<'_>); 29] {
    use canonical::Field;
    fn opt(v: &Option<Value>) -> Field<'_> {
        match v {
            None | Some(Value::Null) => Field::Absent,
            Some(v) => Field::Json(v),
        }
    }
    [
        ("actor_id", Field::Str(&r.actor_id)),
        ("args_hash", Field::str_or_absent(r.args_hash.as_deref())),
        ("binding", Field::str_or_absent(r.binding.as_deref())),
        ("decision", Field::Str(r.decision.as_str())),
        ("disclosures_digest", Field::Str(&r.disclosures_digest)),
        (
            "environment",
            Field::str_or_absent(r.environment.as_deref()),
        ),
        (
            "invocation_id",
            Field::str_or_absent(r.invocation_id.as_deref()),
        ),
        ("issued_at", Field::Str(&r.issued_at)),
        ("key_id", Field::Str(&r.key_id)),
        ("kind", Field::Str(r.kind.as_str())),
        ("limits", opt(&r.limits)),
        (
            "manifest_id",
            Field::str_or_absent(r.manifest_id.as_deref()),
        ),
        ("mode", Field::str_or_absent(r.mode.as_deref())),
        ("policy_id", Field::str_or_absent(r.policy_id.as_deref())),
        (
            "policy_version",
            r.policy_version.map_or(Field::Absent, Field::U64),
        ),
        ("prev_hash", Field::str_or_null(r.prev_hash.as_deref())),
        ("principal", Field::str_or_absent(r.principal.as_deref())),
        ("reason", Field::Str(r.reason.as_str())),
        ("receipt_id", Field::Str(&r.receipt_id)),
        ("redaction", opt(&r.redaction)),
        (
            "schema_hash",
            Field::str_or_absent(r.schema_hash.as_deref()),
        ),
        ("seq", r.seq.map_or(Field::Null, Field::U64)),
        ("session_id", Field::str_or_absent(r.session_id.as_deref())),
        (
            "signature",
            if signed {
                Field::Str(&r.signature)
            } else {
                Field::Absent
            },
        ),
        ("target", opt(&r.target)),
        ("tenant_id", Field::Str(&r.tenant_id)),
        ("tool", Field::str_or_absent(r.tool.as_deref())),
        (
            "tool_version",
            Field::str_or_absent(r.tool_version.as_deref()),
        ),
        ("turn_id", Field::str_or_absent(r.turn_id.as_deref())),
    ]
}

/// The JCS bytes of a signed receipt, signature included: what [`receipt_hash`] hashes, and a
/// valid JSON text of the receipt (the journal stores it).
pub fn receipt_canonical_bytes(receipt: &Receipt) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    write_receipt(receipt, true, &mut out);
    out
}

/// Signs a receipt: sets `key_id` to the signer's and `signature` to base64url (no padding)
/// Ed25519 over [`receipt_signing_bytes`]. Any previous `key_id`/`signature` is replaced.
pub fn sign_receipt(mut unsigned: Receipt, signer: &Signer) -> Result<Receipt, ReceiptError> {
    sign_receipt_in_place(&mut unsigned, signer);
    Ok(unsigned)
}

/// [`sign_receipt`] on a receipt the caller keeps, also returning the signed receipt's
/// [`receipt_canonical_bytes`], made from the signing bytes by inserting the `signature`
/// member where it sorts (one canonical writing instead of two: the journal hashes and stores
/// these bytes). Signing again (after changing `seq` or `prev_hash`, say) replaces `key_id`
/// and `signature`, so one receipt can be signed for each attempt without a copy per attempt.
pub fn sign_receipt_in_place(receipt: &mut Receipt, signer: &Signer) -> Vec<u8> {
    signer.key_id().clone_into(&mut receipt.key_id);
    receipt.signature.clear();
    let mut bytes = Vec::with_capacity(1024);
    // `actor_id` (always present) sorts before `signature`, so the member goes after a comma.
    let fields = receipt_fields(receipt, false);
    debug_assert_eq!(fields[SIGNATURE_FIELD].0, "signature");
    let at = canonical::write_fields_at(&fields, SIGNATURE_FIELD, &mut bytes);
    let signature = signer.sign_bytes(&bytes);
    let mut member = Vec::with_capacity(16 + signature.len());
    member.push(b',');
    canonical::write_str("signature", &mut member);
    member.push(b':');
    canonical::write_str(&signature, &mut member);
    bytes.splice(at..at, member);
    receipt.signature = signature;
    bytes
}

/// Verifies a receipt against one key. Fails with [`VerifyError::UnknownKeyId`] when the
/// receipt's `key_id` is not the key's `kid`.
pub fn verify_receipt(receipt: &Receipt, key: &Jwk) -> Result<(), VerifyError> {
    verify_receipt_with_keys(receipt, std::slice::from_ref(key))
}

/// Verifies a receipt against the published keys, choosing the key by `key_id`.
pub fn verify_receipt_with_keys(receipt: &Receipt, keys: &[Jwk]) -> Result<(), VerifyError> {
    let jwk = find_key(keys, &receipt.key_id)?;
    let bytes = receipt_signing_bytes(receipt)?;
    verify_bytes(&bytes, &receipt.signature, jwk)
}

/// Verifies a receipt exactly as received (e.g. by `aperture receipt verify`), without first
/// reading it into a [`Receipt`]: the signature must cover the JCS bytes of this very object
/// minus `signature`, so an added, removed or re-spelled member fails, and receipts with codes
/// this version does not know still verify. A receipt given as text must be read with
/// [`canonical::parse_strict`]: a `Value` cannot show that the text named a member twice.
pub fn verify_receipt_json(receipt: &Value, keys: &[Jwk]) -> Result<(), VerifyError> {
    let member = |name: &str| {
        receipt
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| VerifyError::Malformed(format!("`{name}` must be a string")))
    };
    let key_id = member("key_id")?;
    let signature = member("signature")?;
    let jwk = find_key(keys, key_id)?;
    let bytes = signing_bytes_of_value(receipt.clone())?;
    verify_bytes(&bytes, signature, jwk)
}

// ---------------------------------------------------------------------------------------------
// The journal chain
// ---------------------------------------------------------------------------------------------

/// `sha256:` + SHA-256 of the JCS bytes of a signed receipt: the `prev_hash` of the record that
/// follows it in the tenant's journal.
pub fn receipt_hash(receipt: &Receipt) -> Result<String, ReceiptError> {
    let mut h = canonical::HashSink::new();
    write_receipt(receipt, true, &mut h);
    Ok(h.finish())
}

/// The `seq` and `prev_hash` of the record that follows `previous` (`(1, ZERO_HASH)` when the
/// journal is empty). Fails when `previous` was never journaled (`seq` null).
pub fn next_link(previous: Option<&Receipt>) -> Result<(u64, String), ReceiptError> {
    match previous {
        None => Ok((1, ZERO_HASH.to_owned())),
        Some(receipt) => {
            let seq = receipt.seq.ok_or(ReceiptError::NotJournaled)?;
            Ok((seq.saturating_add(1), receipt_hash(receipt)?))
        }
    }
}

/// What is wrong with one journal record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainProblem {
    /// The record belongs to another tenant than the records before it.
    #[error("tenant `{found}` in the journal of tenant `{expected}`")]
    TenantMismatch {
        /// The tenant of the chain so far.
        expected: String,
        /// The record's tenant.
        found: String,
    },
    /// The record's `seq` is not the next number (a gap, a repeat, or `null`).
    #[error("seq is {found:?}, expected the next number")]
    SeqMismatch {
        /// The record's `seq`.
        found: Option<u64>,
    },
    /// The record's `prev_hash` is not the hash of the previous record.
    #[error("prev_hash is {found:?}, expected {expected}")]
    PrevHashMismatch {
        /// The hash of the previous record ([`ZERO_HASH`] for the first).
        expected: String,
        /// The record's `prev_hash`.
        found: Option<String>,
    },
    /// The record's signature does not verify.
    #[error("signature: {0}")]
    Signature(VerifyError),
    /// The record has no canonical form.
    #[error(transparent)]
    Canonical(CanonicalError),
    /// A column of the journal row (what filters, counts and exports read) says something
    /// else than the signed receipt.
    #[error("column `{column}` says {stored}, the signed receipt says {signed}")]
    Column {
        /// The column's name.
        column: &'static str,
        /// What the column holds (`nothing` for NULL).
        stored: String,
        /// What the signed receipt says (`nothing` when it has no such member).
        signed: String,
    },
    /// An index kept beside the journal has rows for positions the journal holds no record
    /// at: whatever reads the index counts records nobody signed.
    #[error("{index} has rows for {rows}, which the journal does not have")]
    Unrecorded {
        /// The index's table.
        index: &'static str,
        /// The positions, in words (`records 4, 5 and 1000`).
        rows: String,
    },
}

/// The copies of receipt members a journal row keeps beside the signed receipt, for the
/// receipts browser's filters, the overview's counts and the export to read without parsing
/// receipts. None of them is signed: [`RowColumns::mismatch`] checks them against the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowColumns {
    /// `tenant_id`
    pub tenant_id: String,
    /// `seq`
    pub seq: i64,
    /// `receipt_id`
    pub receipt_id: String,
    /// `kind`
    pub kind: String,
    /// `decision`
    pub decision: String,
    /// `reason`
    pub reason: String,
    /// `tool`
    pub tool: Option<String>,
    /// `session_id`
    pub session_id: Option<String>,
    /// `actor_id`
    pub actor_id: String,
    /// `issued_at`, stored as epoch milliseconds, written here as the RFC 3339 text the
    /// journal stamps receipts with (so it compares with the receipt's member as text).
    pub issued_at: String,
}

impl RowColumns {
    /// The first column that disagrees with `receipt`, in the order above.
    pub fn mismatch(&self, receipt: &Receipt) -> Option<ChainProblem> {
        let text = |v: Option<&str>| v.map_or_else(|| "nothing".to_owned(), str::to_owned);
        let seq = receipt.seq.and_then(|s| i64::try_from(s).ok());
        let pairs: [(&'static str, Option<&str>, Option<&str>); 9] = [
            ("tenant_id", Some(&self.tenant_id), Some(&receipt.tenant_id)),
            (
                "receipt_id",
                Some(&self.receipt_id),
                Some(&receipt.receipt_id),
            ),
            ("kind", Some(&self.kind), Some(receipt.kind.as_str())),
            (
                "decision",
                Some(&self.decision),
                Some(receipt.decision.as_str()),
            ),
            ("reason", Some(&self.reason), Some(receipt.reason.as_str())),
            ("tool", self.tool.as_deref(), receipt.tool.as_deref()),
            (
                "session_id",
                self.session_id.as_deref(),
                receipt.session_id.as_deref(),
            ),
            ("actor_id", Some(&self.actor_id), Some(&receipt.actor_id)),
            ("issued_at", Some(&self.issued_at), Some(&receipt.issued_at)),
        ];
        if Some(self.seq) != seq {
            return Some(ChainProblem::Column {
                column: "seq",
                stored: self.seq.to_string(),
                signed: receipt
                    .seq
                    .map_or_else(|| "nothing".to_owned(), |s| s.to_string()),
            });
        }
        pairs
            .into_iter()
            .find(|(_, stored, signed)| stored != signed)
            .map(|(column, stored, signed)| ChainProblem::Column {
                column,
                stored: text(stored),
                signed: text(signed),
            })
    }
}

/// The first bad record of a journal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal record {seq}: {problem}")]
pub struct ChainError {
    /// The `seq` the record should have had (its 1-based position in the journal), whatever it
    /// claims.
    pub seq: u64,
    /// What is wrong with it.
    pub problem: ChainProblem,
}

/// Verifies a journal one record at a time (for journals read in pages): each record must be of
/// the same tenant, carry the next `seq`, link to the previous record's [`receipt_hash`] and
/// verify under the published keys. A failed [`ChainVerifier::push`] leaves the state unchanged.
///
/// [`ChainVerifier::push_linked`] checks everything but the signature. A record's hash covers
/// its signature and the next record's signature covers that hash (its `prev_hash`), so one
/// valid signature vouches for every record linked before it: a verifier that links a run of
/// records and then [`push`](ChainVerifier::push)es the last one strictly has verified them
/// all, though when something is wrong it may name a later record than a strict pass would
/// (a changed record shows as the next record's broken link).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainVerifier {
    last_seq: u64,
    head_hash: String,
    tenant_id: Option<String>,
    /// Published keys decoded once: `(kid, x, key)`. Decoding a key is a point decompression,
    /// about as costly as a quarter of a signature check.
    decoded: Vec<(String, String, VerifyingKey)>,
}

impl Default for ChainVerifier {
    fn default() -> Self {
        ChainVerifier::new()
    }
}

impl ChainVerifier {
    /// A verifier for a journal read from its first record.
    pub fn new() -> Self {
        ChainVerifier {
            last_seq: 0,
            head_hash: ZERO_HASH.to_owned(),
            tenant_id: None,
            decoded: Vec::new(),
        }
    }

    /// A verifier that continues after an already verified prefix ending at `last_seq` with
    /// hash `head_hash` (a checkpoint).
    pub fn resume(
        tenant_id: impl Into<String>,
        last_seq: u64,
        head_hash: impl Into<String>,
    ) -> Self {
        ChainVerifier {
            last_seq,
            head_hash: head_hash.into(),
            tenant_id: Some(tenant_id.into()),
            decoded: Vec::new(),
        }
    }

    /// The `seq` of the last verified record (0 before any).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The hash the next record's `prev_hash` must equal.
    pub fn head_hash(&self) -> &str {
        &self.head_hash
    }

    /// Checks the next record, its signature included, and advances past it.
    pub fn push(&mut self, receipt: &Receipt, keys: &[Jwk]) -> Result<(), ChainError> {
        self.next(receipt, Some(keys))
    }

    /// Checks the next record's tenant, `seq` and `prev_hash` but not its signature, and
    /// advances past it. Only a later strict [`ChainVerifier::push`] vouches for it.
    pub fn push_linked(&mut self, receipt: &Receipt) -> Result<(), ChainError> {
        self.next(receipt, None)
    }

    fn next(&mut self, receipt: &Receipt, keys: Option<&[Jwk]>) -> Result<(), ChainError> {
        let expected_seq = self.last_seq.saturating_add(1);
        let fail = |problem| ChainError {
            seq: expected_seq,
            problem,
        };
        if let Some(tenant) = &self.tenant_id
            && *tenant != receipt.tenant_id
        {
            return Err(fail(ChainProblem::TenantMismatch {
                expected: tenant.clone(),
                found: receipt.tenant_id.clone(),
            }));
        }
        if receipt.seq != Some(expected_seq) {
            return Err(fail(ChainProblem::SeqMismatch { found: receipt.seq }));
        }
        if receipt.prev_hash.as_deref() != Some(self.head_hash.as_str()) {
            return Err(fail(ChainProblem::PrevHashMismatch {
                expected: self.head_hash.clone(),
                found: receipt.prev_hash.clone(),
            }));
        }
        if let Some(keys) = keys {
            self.verify_signature(receipt, keys)
                .map_err(|e| fail(ChainProblem::Signature(e)))?;
        }
        let mut h = canonical::HashSink::new();
        write_receipt(receipt, true, &mut h);
        let hash = h.finish();
        self.last_seq = expected_seq;
        self.head_hash = hash;
        if self.tenant_id.is_none() {
            self.tenant_id = Some(receipt.tenant_id.clone());
        }
        Ok(())
    }

    /// [`verify_receipt_with_keys`], with each published key decoded once per verifier.
    fn verify_signature(&mut self, receipt: &Receipt, keys: &[Jwk]) -> Result<(), VerifyError> {
        let jwk = find_key(keys, &receipt.key_id)?;
        let known = self
            .decoded
            .iter()
            .position(|(kid, x, _)| *kid == jwk.kid && *x == jwk.x);
        let at = match known {
            Some(at) => at,
            None => {
                self.decoded
                    .push((jwk.kid.clone(), jwk.x.clone(), decode_key(jwk)?));
                self.decoded.len() - 1
            }
        };
        let bytes = receipt_signing_bytes(receipt)?;
        verify_bytes_with(&bytes, &receipt.signature, &self.decoded[at].2)
    }
}

/// Verifies a whole tenant journal, given from its first record: signatures, `seq` 1, 2, 3, …
/// and `prev_hash` links (the first must be [`ZERO_HASH`]). Returns the last verified `seq`
/// (0 for an empty journal) or the first bad record.
pub fn verify_chain(receipts: &[Receipt], keys: &[Jwk]) -> Result<u64, ChainError> {
    let mut verifier = ChainVerifier::new();
    for receipt in receipts {
        verifier.push(receipt, keys)?;
    }
    Ok(verifier.last_seq())
}

// ---------------------------------------------------------------------------------------------
// Manifests
// ---------------------------------------------------------------------------------------------

/// One tool of a [`ManifestDocument`], as listed (tools in mode `hide` are not in it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestDocTool {
    /// Canonical tool name.
    pub name: String,
    /// `toolVersion`.
    #[serde(rename = "toolVersion")]
    pub tool_version: String,
    /// `schemaHash` (`sha256:<hex>` of the tool as advertised).
    #[serde(rename = "schemaHash")]
    pub schema_hash: String,
    /// `exposureMode` (`allow`, `deny`, `dry_run_only`, `approval_required`,
    /// `confirmation_required`, `async_job_only`, `staged_change`).
    #[serde(rename = "exposureMode")]
    pub exposure_mode: String,
}

/// The signed manifest document served by `GET /sessions/{id}/manifest` (CONTRACT §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestDocument {
    /// `man_…` id.
    pub manifest_id: String,
    /// `ses_…` id of the exposure session.
    pub session_id: String,
    /// The tenant.
    pub tenant_id: String,
    /// The session's environment.
    pub environment: String,
    /// The actor the session is pinned to.
    pub actor_id: String,
    /// The policy that produced the manifest.
    pub policy_id: String,
    /// Its version.
    pub policy_version: u64,
    /// `lea_…` id of the lease.
    pub lease_id: String,
    /// When the lease ends (RFC 3339).
    pub lease_expires_at: String,
    /// When the manifest was granted (RFC 3339).
    pub issued_at: String,
    /// Id of the signing key; must be the signer's (see [`sign_manifest`]).
    pub key_id: String,
    /// The listed tools.
    pub tools: Vec<ManifestDocTool>,
    /// The session's `preset` hint, when it named one (the client's choice, recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// The session's `entity` hint, when it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// For a fork's grant: the parent manifest it copies, byte for byte (absent for a grant of
    /// its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<String>,
    /// For a fork: the entries of its execution allowlist (`fork_tools`) as given. Absent: no
    /// restriction; `[]`: it may execute nothing. Signed, so evidence proves what a fork could
    /// execute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_allowed_tools: Option<Vec<String>>,
}

/// The `manifest_signature`: base64url (no padding) Ed25519 over the JCS bytes of `document`.
/// The document's `key_id` must already be `signer.key_id()`.
pub fn sign_manifest(document: &ManifestDocument, signer: &Signer) -> Result<String, ReceiptError> {
    if document.key_id != signer.key_id() {
        return Err(ReceiptError::KeyIdMismatch {
            document: document.key_id.clone(),
            signer: signer.key_id().to_owned(),
        });
    }
    Ok(signer.sign_bytes(&to_canonical_bytes(document)?))
}

/// Verifies a `manifest_signature` against one key (whose `kid` must be the document's `key_id`).
pub fn verify_manifest(
    document: &ManifestDocument,
    signature: &str,
    key: &Jwk,
) -> Result<(), VerifyError> {
    verify_manifest_with_keys(document, signature, std::slice::from_ref(key))
}

/// Verifies a `manifest_signature` against the published keys, choosing by the document's
/// `key_id`.
pub fn verify_manifest_with_keys(
    document: &ManifestDocument,
    signature: &str,
    keys: &[Jwk],
) -> Result<(), VerifyError> {
    let jwk = find_key(keys, &document.key_id)?;
    verify_bytes(&to_canonical_bytes(document)?, signature, jwk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::hash_of;
    use proptest::prelude::*;
    use serde_json::json;

    fn signer() -> Signer {
        Signer::new(SigningKey::from_bytes(&[7u8; 32]))
    }

    fn other_signer() -> Signer {
        Signer::from_seed(&[9u8; 32])
    }

    fn disclosures() -> Disclosures {
        let mut d = Disclosures::new([1u8; 16]);
        d.matched_rule_id = Some("read-github".into());
        d.rule_reason = Some("read-only GitHub access".into());
        d.effective_arguments = Some(json!({"owner": "acme", "state": "open"}));
        d
    }

    fn unsigned(seq: Option<u64>, prev_hash: Option<String>) -> Receipt {
        Receipt {
            receipt_id: "rcp_0a1b2c3d4e5f60718293a4b5c6d7e8f9".into(),
            kind: ReceiptKind::Decision,
            decision: Decision::Allow,
            reason: ReasonCode::Ok,
            tenant_id: "default".into(),
            environment: Some("default".into()),
            session_id: Some("ses_5f2c9a7e1d3b4c6a8e0f1a2b3c4d5e6f".into()),
            manifest_id: Some("man_9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b".into()),
            actor_id: "agent-42".into(),
            principal: Some("tok_0123456789abcdef0123456789abcdef".into()),
            turn_id: None,
            invocation_id: Some("inv_00112233445566778899aabbccddeeff".into()),
            tool: Some("mcp__github__list_issues".into()),
            tool_version: Some("1".into()),
            schema_hash: Some(format!("sha256:{}", "ab".repeat(32))),
            args_hash: Some(
                crate::canonical::args_hash(&json!({"owner": "acme", "state": "open"})).unwrap(),
            ),
            policy_id: Some("support-agents".into()),
            policy_version: Some(3),
            mode: Some("allow".into()),
            binding: None,
            limits: Some(json!({"max_duration_millis": 5000, "max_result_bytes": 65536})),
            redaction: Some(json!({"summary": "truncate", "max_bytes": 8192})),
            target: None,
            issued_at: "2026-05-01T12:00:00Z".into(),
            seq,
            prev_hash,
            disclosures_digest: disclosures_digest(&disclosures()).unwrap(),
            key_id: String::new(),
            signature: String::new(),
        }
    }

    fn signed() -> Receipt {
        sign_receipt(unsigned(Some(1), Some(ZERO_HASH.into())), &signer()).unwrap()
    }

    #[test]
    fn signing_with_canonical_bytes_matches_signing_then_writing() {
        let full = unsigned(Some(7), Some(ZERO_HASH.into()));
        let mut sparse = receipt_minimal();
        sparse.target = Some(json!({"upstream_id": "ups_1", "endpoint_fingerprint": "x"}));
        let mut unrecorded = unsigned(None, None);
        unrecorded.session_id = None;
        unrecorded.tool = None;
        unrecorded.turn_id = Some("turn_1".into());
        for u in [full, receipt_minimal(), sparse, unrecorded] {
            let mut signed = u.clone();
            let bytes = sign_receipt_in_place(&mut signed, &signer());
            let reference = sign_receipt(u, &signer()).unwrap();
            assert_eq!(signed, reference);
            assert_eq!(bytes, receipt_canonical_bytes(&reference));
            // And they are the JCS bytes of the receipt as serialized, by another writer.
            let independent =
                serde_json_canonicalizer::to_vec(&serde_json::to_value(&signed).unwrap()).unwrap();
            assert_eq!(bytes, independent);
            verify_receipt(&signed, &signer().jwk()).unwrap();
        }
    }

    #[test]
    fn signing_in_place_again_replaces_the_signature() {
        // The journal signs a record for each attempt at a position; a second attempt at
        // another position must leave no trace of the first.
        let mut kept = unsigned(Some(1), Some(ZERO_HASH.into()));
        let first = sign_receipt_in_place(&mut kept, &signer());
        kept.seq = Some(2);
        kept.prev_hash = Some(format!("sha256:{}", "ab".repeat(32)));
        let again = sign_receipt_in_place(&mut kept, &signer());
        assert_ne!(first, again);
        let mut fresh = unsigned(Some(2), Some(format!("sha256:{}", "ab".repeat(32))));
        fresh.receipt_id.clone_from(&kept.receipt_id);
        let reference = sign_receipt(fresh, &signer()).unwrap();
        assert_eq!(kept, reference);
        assert_eq!(again, receipt_canonical_bytes(&reference));
        verify_receipt(&kept, &signer().jwk()).unwrap();
    }

    #[test]
    fn disclosures_text_and_digest_come_from_one_writing() {
        let mut d = disclosures();
        d.insert_extra("detail", json!("a \"quoted\" reason"))
            .unwrap();
        d.insert_extra("action", json!({"b": 1, "a": [true, null]}))
            .unwrap();
        let (text, digest) = disclosures_canonical(&d).unwrap();
        assert_eq!(digest, disclosures_digest(&d).unwrap());
        let independent = serde_json_canonicalizer::to_vec(&serde_json::to_value(&d).unwrap());
        assert_eq!(text.as_bytes(), independent.unwrap());
        assert_eq!(digest, crate::canonical::sha256_tagged(text.as_bytes()));
        let back: Disclosures = serde_json::from_str(&text).unwrap();
        assert_eq!(disclosures_digest(&back).unwrap(), digest);
        let mut bad = d.clone();
        bad.salt = "short".into();
        assert!(matches!(
            disclosures_canonical(&bad),
            Err(ReceiptError::BadSalt)
        ));
    }

    /// A receipt with every optional member absent.
    fn receipt_minimal() -> Receipt {
        Receipt {
            environment: None,
            session_id: None,
            manifest_id: None,
            invocation_id: None,
            tool: None,
            tool_version: None,
            schema_hash: None,
            args_hash: None,
            policy_id: None,
            policy_version: None,
            mode: None,
            binding: None,
            limits: None,
            redaction: None,
            ..unsigned(Some(1), Some(ZERO_HASH.into()))
        }
    }

    fn chain(n: u64) -> Vec<Receipt> {
        let s = signer();
        let mut out: Vec<Receipt> = Vec::new();
        for _ in 0..n {
            let (seq, prev) = next_link(out.last()).unwrap();
            let mut r = unsigned(Some(seq), Some(prev));
            r.receipt_id = format!("rcp_{seq:032}");
            out.push(sign_receipt(r, &s).unwrap());
        }
        out
    }

    /// The reference: the crate's canonicalization of the serialized receipt.
    fn crate_bytes(r: &Receipt, signed: bool) -> Vec<u8> {
        let mut v = serde_json::to_value(r).unwrap();
        if !signed {
            v.as_object_mut().unwrap().remove("signature");
        }
        to_canonical_bytes(&v).unwrap()
    }

    #[test]
    fn receipts_are_written_member_by_member_exactly_as_canonicalized() {
        for r in [signed(), unsigned(None, None), {
            let mut r = signed();
            r.kind = ReceiptKind::Execution;
            r.decision = Decision::Deny;
            r.reason = ReasonCode::JournalUnavailable;
            r.limits = Some(Value::Null);
            r.target = Some(json!({"upstream_id": "ups_1", "endpoint_fingerprint": "sha256:x"}));
            r.turn_id = Some("turn_\u{e9}\"\n".into());
            r.environment = None;
            r.policy_version = None;
            r.binding = Some("implicit".into());
            r
        }] {
            for with_signature in [false, true] {
                let mut out = Vec::new();
                write_receipt(&r, with_signature, &mut out);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    String::from_utf8(crate_bytes(&r, with_signature)).unwrap()
                );
            }
            assert_eq!(receipt_hash(&r).unwrap(), hash_of(&r).unwrap());
            // The stored text reads back as the same receipt (a `null` limit reads as absent).
            let stored = receipt_canonical_bytes(&r);
            let back: Receipt = serde_json::from_slice(&stored).unwrap();
            assert_eq!(receipt_canonical_bytes(&back), stored);
            assert_eq!(back.signature, r.signature);
        }
    }

    proptest! {
        #[test]
        fn any_receipt_is_written_as_canonicalized(
            opts in proptest::collection::vec(any::<bool>(), 16),
            text in "\\PC{0,12}",
            number in any::<u64>(),
            float in -1.0e30f64..1.0e30,
        ) {
            let mut r = signed();
            let pick = |on: bool, v: String| on.then_some(v);
            r.environment = pick(opts[0], text.clone());
            r.session_id = pick(opts[1], text.clone());
            r.manifest_id = pick(opts[2], format!("man_{text}"));
            r.turn_id = pick(opts[3], text.clone());
            r.invocation_id = pick(opts[4], text.clone());
            r.tool = pick(opts[5], text.clone());
            r.tool_version = pick(opts[6], text.clone());
            r.policy_version = opts[7].then_some(number);
            r.seq = opts[8].then_some(number);
            r.prev_hash = pick(opts[9], text.clone());
            r.limits = opts[10].then(|| json!({"n": number, "f": float, text.clone(): [text.clone(), null, true]}));
            r.redaction = opts[11].then(|| json!(float));
            r.target = opts[12].then(|| json!({}));
            r.mode = pick(opts[13], text.clone());
            r.actor_id = text.clone();
            r.principal = pick(opts[14], text.clone());
            r.binding = pick(opts[15], text.clone());
            for with_signature in [false, true] {
                let mut out = Vec::new();
                write_receipt(&r, with_signature, &mut out);
                prop_assert_eq!(out, crate_bytes(&r, with_signature));
            }
        }
    }

    #[test]
    fn sign_verify_round_trip() {
        let s = signer();
        let r = signed();
        assert_eq!(r.key_id, s.key_id());
        assert_eq!(r.signature.len(), 86, "64 bytes, unpadded base64url");
        verify_receipt(&r, &s.jwk()).unwrap();
        verify_receipt_with_keys(&r, &[other_signer().jwk(), s.jwk()]).unwrap();
        // Through JSON and back, typed and raw.
        let text = serde_json::to_string(&r).unwrap();
        let back: Receipt = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        verify_receipt(&back, &s.jwk()).unwrap();
        let raw: Value = serde_json::from_str(&text).unwrap();
        verify_receipt_json(&raw, &[s.jwk()]).unwrap();
    }

    #[test]
    fn receipts_made_before_principal_still_verify() {
        // A receipt signed by a build without `principal`: its JSON has no such member, and it
        // verifies typed and raw, as every verifier reads it.
        let s = signer();
        let mut r = unsigned(Some(1), Some(ZERO_HASH.into()));
        r.principal = None;
        let r = sign_receipt(r, &s).unwrap();
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("principal"));
        let back: Receipt = serde_json::from_str(&text).unwrap();
        assert_eq!(back.principal, None);
        verify_receipt(&back, &s.jwk()).unwrap();
        verify_receipt_json(&serde_json::from_str(&text).unwrap(), &[s.jwk()]).unwrap();
        // Adding the member afterwards breaks the signature: it is signed when present.
        let mut forged: Value = serde_json::from_str(&text).unwrap();
        forged["principal"] = json!("operator");
        assert!(verify_receipt_json(&forged, &[s.jwk()]).is_err());
    }

    #[test]
    fn json_shape_is_the_contracts() {
        let r = signed();
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = vec![
            "receipt_id",
            "kind",
            "decision",
            "reason",
            "tenant_id",
            "environment",
            "session_id",
            "manifest_id",
            "actor_id",
            "principal",
            "invocation_id",
            "tool",
            "tool_version",
            "schema_hash",
            "args_hash",
            "policy_id",
            "policy_version",
            "mode",
            "limits",
            "redaction",
            "issued_at",
            "seq",
            "prev_hash",
            "disclosures_digest",
            "key_id",
            "signature",
        ];
        expected.sort_unstable();
        assert_eq!(keys, expected, "turn_id and target are omitted when None");
        assert_eq!(v["kind"], "decision");
        assert_eq!(v["decision"], "allow");
        assert_eq!(v["reason"], "ok");
        assert_eq!(v["seq"], 1);
        assert_eq!(v["prev_hash"], ZERO_HASH);
        assert!(v.get("disclosures").is_none());
    }

    #[test]
    fn tampering_any_field_breaks_verification() {
        let jwk = signer().jwk();
        let r = signed();
        let tampered: Vec<Receipt> = vec![
            Receipt {
                reason: ReasonCode::PolicyDenied,
                ..r.clone()
            },
            Receipt {
                decision: Decision::Deny,
                ..r.clone()
            },
            Receipt {
                args_hash: Some(format!("sha256:{}", "00".repeat(32))),
                ..r.clone()
            },
            Receipt {
                seq: Some(2),
                ..r.clone()
            },
            Receipt {
                seq: None,
                ..r.clone()
            },
            Receipt {
                tool: Some("mcp__github__delete_repo".into()),
                ..r.clone()
            },
            Receipt {
                tool: None,
                ..r.clone()
            },
            Receipt {
                turn_id: Some("turn_1".into()),
                ..r.clone()
            },
            Receipt {
                limits: Some(json!({"max_duration_millis": 5001, "max_result_bytes": 65536})),
                ..r.clone()
            },
            Receipt {
                disclosures_digest: format!("sha256:{}", "11".repeat(32)),
                ..r.clone()
            },
        ];
        for t in &tampered {
            assert_eq!(
                verify_receipt(t, &jwk),
                Err(VerifyError::SignatureMismatch),
                "{t:?}"
            );
        }
        // A broken signature encoding is reported as such.
        let bad = Receipt {
            signature: "not base64!".into(),
            ..r.clone()
        };
        assert_eq!(
            verify_receipt(&bad, &jwk),
            Err(VerifyError::BadSignatureEncoding)
        );
        let short = Receipt {
            signature: URL_SAFE_NO_PAD.encode([0u8; 63]),
            ..r
        };
        assert_eq!(
            verify_receipt(&short, &jwk),
            Err(VerifyError::BadSignatureEncoding)
        );
    }

    #[test]
    fn null_snapshot_values_are_omitted_like_none() {
        let s = signer();
        let mut u = unsigned(Some(1), Some(ZERO_HASH.into()));
        u.target = Some(Value::Null);
        let r = sign_receipt(u, &s).unwrap();
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("\"target\""));
        let back: Receipt = serde_json::from_str(&text).unwrap();
        assert_eq!(back.target, None);
        verify_receipt(&back, &s.jwk()).unwrap();
    }

    #[test]
    fn another_key_is_an_unknown_key_id() {
        let r = sign_receipt(unsigned(Some(1), Some(ZERO_HASH.into())), &other_signer()).unwrap();
        let ours = signer().jwk();
        assert_eq!(
            verify_receipt(&r, &ours),
            Err(VerifyError::UnknownKeyId(
                other_signer().key_id().to_owned()
            ))
        );
        assert!(matches!(
            verify_receipt_with_keys(&r, std::slice::from_ref(&ours)),
            Err(VerifyError::UnknownKeyId(_))
        ));
        // Claiming our key id does not help: the signature does not match our key.
        let forged = Receipt {
            key_id: ours.kid.clone(),
            ..r
        };
        assert_eq!(
            verify_receipt(&forged, &ours),
            Err(VerifyError::SignatureMismatch)
        );
    }

    #[test]
    fn signature_covers_jcs_bytes_without_signature() {
        let s = signer();
        let r = signed();
        // Recompute independently: JSON object, drop `signature`, canonicalize, Ed25519.
        let mut v = serde_json::to_value(&r).unwrap();
        v.as_object_mut().unwrap().remove("signature");
        let bytes = serde_json_canonicalizer::to_vec(&v).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with(r#"{"actor_id":"agent-42","args_hash":"sha256:"#));
        assert!(!text.contains("signature"));
        assert!(text.contains(&format!(r#""key_id":"{}""#, s.key_id())));
        assert_eq!(receipt_signing_bytes(&r).unwrap(), bytes);
        let sig = SigningKey::from_bytes(&[7u8; 32]).sign(&bytes);
        assert_eq!(URL_SAFE_NO_PAD.encode(sig.to_bytes()), r.signature);
        let decoded: [u8; 64] = URL_SAFE_NO_PAD
            .decode(&r.signature)
            .unwrap()
            .try_into()
            .unwrap();
        s.verifying_key()
            .verify_strict(&bytes, &Signature::from_bytes(&decoded))
            .unwrap();
    }

    #[test]
    fn raw_verification_rejects_added_members() {
        let s = signer();
        let mut v = serde_json::to_value(signed()).unwrap();
        v.as_object_mut().unwrap().insert(
            "disclosures".into(),
            serde_json::to_value(disclosures()).unwrap(),
        );
        assert_eq!(
            verify_receipt_json(&v, &[s.jwk()]),
            Err(VerifyError::SignatureMismatch)
        );
        assert!(matches!(
            verify_receipt_json(&json!([1]), &[s.jwk()]),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn disclosures_digest_depends_on_salt_and_every_member() {
        let base = disclosures();
        let d0 = disclosures_digest(&base).unwrap();
        assert!(d0.starts_with("sha256:") && d0.len() == 71);
        assert_eq!(d0, hash_of(&base).unwrap());
        assert_eq!(base.salt.len(), 22);
        let mut variants = vec![Disclosures {
            salt: URL_SAFE_NO_PAD.encode([2u8; 16]),
            ..base.clone()
        }];
        variants.push(Disclosures {
            matched_rule_id: Some("read-github-2".into()),
            ..base.clone()
        });
        variants.push(Disclosures {
            matched_rule_id: None,
            ..base.clone()
        });
        variants.push(Disclosures {
            rule_reason: Some("read-only GitHub access!".into()),
            ..base.clone()
        });
        variants.push(Disclosures {
            effective_arguments: Some(json!({"owner": "acme", "state": "closed"})),
            ..base.clone()
        });
        variants.push(Disclosures {
            upstream_error: Some("502 Bad Gateway".into()),
            ..base.clone()
        });
        let mut with_extra = base.clone();
        with_extra
            .insert_extra("deployment", json!("eu-1"))
            .unwrap();
        variants.push(with_extra);
        let mut digests = std::collections::BTreeSet::from([d0]);
        for v in &variants {
            assert!(digests.insert(disclosures_digest(v).unwrap()), "{v:?}");
        }
        // Round trip through JSON (extra is flattened) keeps the digest.
        let with_extra = variants.last().unwrap();
        let text = serde_json::to_string(with_extra).unwrap();
        assert!(text.contains(r#""deployment":"eu-1""#));
        let back: Disclosures = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, with_extra);
        assert_eq!(
            disclosures_digest(&back).unwrap(),
            disclosures_digest(with_extra).unwrap()
        );
        // The receipt's digest matches its disclosures and nothing else.
        let r = signed();
        assert!(disclosures_match(&r, &base).unwrap());
        assert!(!disclosures_match(&r, &variants[0]).unwrap());
    }

    #[test]
    fn disclosures_refuse_reserved_extras_and_bad_salts() {
        let mut d = disclosures();
        assert_eq!(
            d.insert_extra("salt", json!("x")),
            Err(ReceiptError::ReservedDisclosureKey("salt".into()))
        );
        d.extra.insert("rule_reason".into(), json!("sneaky"));
        assert_eq!(
            disclosures_digest(&d),
            Err(ReceiptError::ReservedDisclosureKey("rule_reason".into()))
        );
        let short = Disclosures {
            salt: URL_SAFE_NO_PAD.encode([0u8; 15]),
            ..disclosures()
        };
        assert_eq!(disclosures_digest(&short), Err(ReceiptError::BadSalt));
    }

    #[test]
    fn chain_of_five_verifies_and_reports_the_first_bad_record() {
        let keys = [signer().jwk()];
        let c = chain(5);
        assert_eq!(c[0].prev_hash.as_deref(), Some(ZERO_HASH));
        assert_eq!(
            c[1].prev_hash.as_deref(),
            Some(receipt_hash(&c[0]).unwrap().as_str())
        );
        assert_eq!(verify_chain(&c, &keys), Ok(5));
        assert_eq!(verify_chain(&[], &keys), Ok(0));

        // Tampering record 3 breaks its signature.
        let mut t = c.clone();
        t[2].reason = ReasonCode::PolicyDenied;
        let err = verify_chain(&t, &keys).unwrap_err();
        assert_eq!(err.seq, 3);
        assert_eq!(
            err.problem,
            ChainProblem::Signature(VerifyError::SignatureMismatch)
        );

        // Re-signing the tampered record 3 is caught by record 4's link.
        let mut t = c.clone();
        t[2].reason = ReasonCode::PolicyDenied;
        t[2] = sign_receipt(t[2].clone(), &signer()).unwrap();
        let err = verify_chain(&t, &keys).unwrap_err();
        assert_eq!(err.seq, 4);
        assert!(matches!(err.problem, ChainProblem::PrevHashMismatch { .. }));

        // Removing record 3 is a gap at 3.
        let mut t = c.clone();
        t.remove(2);
        let err = verify_chain(&t, &keys).unwrap_err();
        assert_eq!(err.seq, 3);
        assert_eq!(err.problem, ChainProblem::SeqMismatch { found: Some(4) });

        // A record of another tenant.
        let mut t = c.clone();
        t[2].tenant_id = "other".into();
        t[2] = sign_receipt(t[2].clone(), &signer()).unwrap();
        assert_eq!(verify_chain(&t, &keys).unwrap_err().seq, 3);

        // Unknown key.
        let err = verify_chain(&c, &[other_signer().jwk()]).unwrap_err();
        assert_eq!(err.seq, 1);
        assert!(matches!(
            err.problem,
            ChainProblem::Signature(VerifyError::UnknownKeyId(_))
        ));
    }

    #[test]
    fn chain_verifier_resumes_from_a_checkpoint() {
        let keys = [signer().jwk()];
        let c = chain(5);
        let mut v = ChainVerifier::new();
        for r in &c[..2] {
            v.push(r, &keys).unwrap();
        }
        let mut resumed = ChainVerifier::resume("default", v.last_seq(), v.head_hash());
        for r in &c[2..] {
            resumed.push(r, &keys).unwrap();
        }
        assert_eq!(resumed.last_seq(), 5);
        assert_eq!(resumed.head_hash(), receipt_hash(&c[4]).unwrap());
        // A failed push leaves the state alone.
        let before = resumed.clone();
        assert!(resumed.push(&c[0], &keys).is_err());
        assert_eq!(resumed, before);
        assert_eq!(
            next_link(c.last()).unwrap(),
            (6, receipt_hash(&c[4]).unwrap())
        );
    }

    #[test]
    fn one_strict_signature_vouches_for_the_records_linked_before_it() {
        let keys = [signer().jwk()];
        let c = chain(5);
        let linked_then_strict = |records: &[Receipt]| {
            let mut v = ChainVerifier::new();
            let (last, rest) = records.split_last().unwrap();
            for r in rest {
                v.push_linked(r)?;
            }
            v.push(last, &keys).map(|()| v)
        };
        let v = linked_then_strict(&c).unwrap();
        assert_eq!(v.last_seq(), 5);
        assert_eq!(v.head_hash(), receipt_hash(&c[4]).unwrap());

        // A record's hash covers its signature: a garbled signature on record 2 breaks record
        // 3's link even though record 2's own signature is not checked.
        let mut t = c.clone();
        t[1].signature = URL_SAFE_NO_PAD.encode([7u8; 64]);
        let err = linked_then_strict(&t).unwrap_err();
        assert_eq!(err.seq, 3);
        assert!(matches!(err.problem, ChainProblem::PrevHashMismatch { .. }));
        // A changed member likewise.
        let mut t = c.clone();
        t[1].reason = ReasonCode::PolicyDenied;
        assert_eq!(linked_then_strict(&t).unwrap_err().seq, 3);
        // And the last record's signature is checked.
        let mut t = c.clone();
        t[4].reason = ReasonCode::PolicyDenied;
        let err = linked_then_strict(&t).unwrap_err();
        assert_eq!(err.seq, 5);
        assert_eq!(
            err.problem,
            ChainProblem::Signature(VerifyError::SignatureMismatch)
        );
    }

    #[test]
    fn a_verifier_decodes_keys_once_but_follows_the_keys_it_is_given() {
        let c = chain(2);
        let mut v = ChainVerifier::new();
        v.push(&c[0], &[signer().jwk()]).unwrap();
        // The same kid now names another key: the cached key must not be used.
        let mut impostor = other_signer().jwk();
        impostor.kid = signer().key_id().to_owned();
        let err = v.clone().push(&c[1], &[impostor]).unwrap_err();
        assert_eq!(
            err.problem,
            ChainProblem::Signature(VerifyError::SignatureMismatch)
        );
        let err = v.clone().push(&c[1], &[other_signer().jwk()]).unwrap_err();
        assert!(matches!(
            err.problem,
            ChainProblem::Signature(VerifyError::UnknownKeyId(_))
        ));
        v.push(&c[1], &[signer().jwk()]).unwrap();
        assert_eq!(v.last_seq(), 2);
    }

    #[test]
    fn first_record_must_link_to_the_zero_hash() {
        let s = signer();
        let first = sign_receipt(
            unsigned(Some(1), Some(format!("sha256:{}", "01".repeat(32)))),
            &s,
        )
        .unwrap();
        let err = verify_chain(&[first], &[s.jwk()]).unwrap_err();
        assert_eq!(err.seq, 1);
        assert_eq!(
            err.problem,
            ChainProblem::PrevHashMismatch {
                expected: ZERO_HASH.into(),
                found: Some(format!("sha256:{}", "01".repeat(32))),
            }
        );
        let not_first = sign_receipt(unsigned(Some(2), Some(ZERO_HASH.into())), &s).unwrap();
        let err = verify_chain(&[not_first], &[s.jwk()]).unwrap_err();
        assert_eq!(err.problem, ChainProblem::SeqMismatch { found: Some(2) });
    }

    #[test]
    fn journal_unavailable_denial_signs_with_null_seq_and_prev_hash() {
        let s = signer();
        let mut u = unsigned(None, None);
        u.decision = Decision::Deny;
        u.reason = ReasonCode::JournalUnavailable;
        let r = sign_receipt(u, &s).unwrap();
        verify_receipt(&r, &s.jwk()).unwrap();
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""seq":null"#), "{text}");
        assert!(text.contains(r#""prev_hash":null"#), "{text}");
        assert!(text.contains(r#""reason":"journal_unavailable""#));
        let canonical = String::from_utf8(receipt_signing_bytes(&r).unwrap()).unwrap();
        assert!(canonical.contains(r#""prev_hash":null"#) && canonical.contains(r#""seq":null"#));
        let back: Receipt = serde_json::from_str(&text).unwrap();
        verify_receipt(&back, &s.jwk()).unwrap();
        verify_receipt_json(&serde_json::from_str(&text).unwrap(), &[s.jwk()]).unwrap();
        // It is never part of a chain.
        let err = verify_chain(std::slice::from_ref(&r), &[s.jwk()]).unwrap_err();
        assert_eq!(err.problem, ChainProblem::SeqMismatch { found: None });
        assert_eq!(next_link(Some(&r)), Err(ReceiptError::NotJournaled));
    }

    #[test]
    fn admin_receipts_omit_what_does_not_apply() {
        let s = signer();
        let r = sign_receipt(
            Receipt {
                receipt_id: "rcp_admin".into(),
                kind: ReceiptKind::Admin,
                decision: Decision::Allow,
                reason: ReasonCode::Ok,
                tenant_id: "default".into(),
                environment: None,
                session_id: None,
                manifest_id: None,
                actor_id: "admin".into(),
                principal: None,
                turn_id: None,
                invocation_id: None,
                tool: None,
                tool_version: None,
                schema_hash: None,
                args_hash: None,
                policy_id: Some("support-agents".into()),
                policy_version: Some(4),
                mode: None,
                binding: None,
                limits: None,
                redaction: None,
                target: None,
                issued_at: "2026-05-01T12:00:00Z".into(),
                seq: Some(1),
                prev_hash: Some(ZERO_HASH.into()),
                disclosures_digest: disclosures_digest(&Disclosures::new([3; 16])).unwrap(),
                key_id: String::new(),
                signature: String::new(),
            },
            &s,
        )
        .unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["kind"], "admin");
        for absent in [
            "tool",
            "session_id",
            "manifest_id",
            "args_hash",
            "environment",
        ] {
            assert!(v.get(absent).is_none(), "{absent}");
        }
        verify_chain(&[r], &[s.jwk()]).unwrap();
    }

    #[test]
    fn key_id_derivation_is_pinned() {
        let s = signer();
        let vk = s.verifying_key();
        let digest = Sha256::digest(vk.as_bytes());
        assert_eq!(
            s.key_id(),
            format!("ed25519:{}", &hex::encode(digest)[..16])
        );
        assert_eq!(s.key_id().len(), "ed25519:".len() + 16);
        // The id of the [7u8; 32] seed key, pinned so the derivation never changes by accident.
        assert_eq!(s.key_id(), "ed25519:fe812c12f3ab4ce6");
        assert_ne!(s.key_id(), other_signer().key_id());
        assert!(!format!("{s:?}").contains("key:"));
    }

    #[test]
    fn jwk_round_trip() {
        let s = signer();
        let jwk = s.jwk();
        assert_eq!(jwk.kty, "OKP");
        assert_eq!(jwk.crv, "Ed25519");
        assert_eq!(jwk.kid, s.key_id());
        assert_eq!(jwk.x.len(), 43);
        let set = JwkSet::from(vec![jwk.clone(), other_signer().jwk()]);
        let text = serde_json::to_string(&set).unwrap();
        assert!(text.starts_with(&format!(
            r#"{{"keys":[{{"kid":"{}","kty":"OKP","crv":"Ed25519","x":""#,
            s.key_id()
        )));
        let back: JwkSet = serde_json::from_str(&text).unwrap();
        assert_eq!(back, set);
        let found = back.find(s.key_id()).unwrap();
        assert_eq!(verifying_key_from_jwk(found).unwrap(), s.verifying_key());
        assert_eq!(jwk_of(&s.verifying_key()), jwk);
        // Extra JWK members are tolerated.
        let with_alg: Jwk = serde_json::from_value(json!({
            "kid": jwk.kid, "kty": "OKP", "crv": "Ed25519", "x": jwk.x, "alg": "EdDSA", "use": "sig"
        }))
        .unwrap();
        assert_eq!(with_alg, jwk);
        // Bad keys.
        let wrong = |f: fn(&mut Jwk)| {
            let mut j = jwk.clone();
            f(&mut j);
            verifying_key_from_jwk(&j).unwrap_err()
        };
        assert_eq!(
            wrong(|j| j.kty = "EC".into()),
            JwkError::UnsupportedKty("EC".into())
        );
        assert_eq!(
            wrong(|j| j.crv = "X25519".into()),
            JwkError::UnsupportedCrv("X25519".into())
        );
        assert_eq!(wrong(|j| j.x = "AAAA".into()), JwkError::BadEncoding);
        assert_eq!(wrong(|j| j.x.push('=')), JwkError::BadEncoding);
        let r = signed();
        let mut broken = jwk.clone();
        broken.x = "AAAA".into();
        assert!(matches!(
            verify_receipt(&r, &broken),
            Err(VerifyError::BadKey { .. })
        ));
    }

    fn manifest(key_id: &str) -> ManifestDocument {
        ManifestDocument {
            manifest_id: "man_9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b".into(),
            session_id: "ses_5f2c9a7e1d3b4c6a8e0f1a2b3c4d5e6f".into(),
            tenant_id: "default".into(),
            environment: "default".into(),
            actor_id: "agent-42".into(),
            policy_id: "support-agents".into(),
            policy_version: 3,
            lease_id: "lea_0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
            lease_expires_at: "2026-05-01T12:15:00Z".into(),
            issued_at: "2026-05-01T12:00:00Z".into(),
            key_id: key_id.into(),
            tools: vec![ManifestDocTool {
                name: "mcp__github__list_issues".into(),
                tool_version: "1".into(),
                schema_hash: format!("sha256:{}", "ab".repeat(32)),
                exposure_mode: "allow".into(),
            }],
            preset: None,
            entity: None,
            copied_from: None,
            execution_allowed_tools: None,
        }
    }

    #[test]
    fn manifest_sign_verify() {
        let s = signer();
        let doc = manifest(s.key_id());
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(
            v["tools"][0],
            json!({"name": "mcp__github__list_issues", "toolVersion": "1",
                   "schemaHash": format!("sha256:{}", "ab".repeat(32)), "exposureMode": "allow"})
        );
        let sig = sign_manifest(&doc, &s).unwrap();
        verify_manifest(&doc, &sig, &s.jwk()).unwrap();
        verify_manifest_with_keys(&doc, &sig, &[other_signer().jwk(), s.jwk()]).unwrap();
        // Independent recomputation over the JCS bytes of the document.
        let bytes = serde_json_canonicalizer::to_vec(&v).unwrap();
        let expected = SigningKey::from_bytes(&[7u8; 32]).sign(&bytes);
        assert_eq!(sig, URL_SAFE_NO_PAD.encode(expected.to_bytes()));
        let mut tampered = doc.clone();
        tampered.tools[0].exposure_mode = "deny".into();
        assert_eq!(
            verify_manifest(&tampered, &sig, &s.jwk()),
            Err(VerifyError::SignatureMismatch)
        );
        assert!(matches!(
            verify_manifest(&doc, &sig, &other_signer().jwk()),
            Err(VerifyError::UnknownKeyId(_))
        ));
        assert!(matches!(
            sign_manifest(&manifest("ed25519:0000000000000000"), &s),
            Err(ReceiptError::KeyIdMismatch { .. })
        ));
    }

    #[test]
    fn codes_serialize_as_their_strings() {
        for c in ReasonCode::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), json!(c.as_str()));
            assert_eq!(c.as_str().parse::<ReasonCode>(), Ok(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        for d in Decision::ALL {
            assert_eq!(serde_json::to_value(d).unwrap(), json!(d.as_str()));
            assert_eq!(d.as_str().parse::<Decision>(), Ok(d));
        }
        for k in ReceiptKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.as_str()));
            assert_eq!(k.as_str().parse::<ReceiptKind>(), Ok(k));
        }
        let distinct: std::collections::BTreeSet<_> =
            ReasonCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(distinct.len(), ReasonCode::ALL.len());
        assert_eq!(
            "nope".parse::<ReasonCode>(),
            Err(UnknownCode {
                what: "reason",
                value: "nope".into()
            })
        );
    }

    /// Replaces the byte at `offset` within the string value of `member` in the canonical text.
    fn mutate_member(canonical: &str, member: &str, offset: usize, byte: u8) -> Option<Vec<u8>> {
        let marker = format!("\"{member}\":\"");
        let start = canonical.find(&marker)? + marker.len();
        let len = canonical[start..].find('"')?;
        let at = start + offset % len;
        let mut bytes = canonical.as_bytes().to_vec();
        if bytes[at] == byte {
            return None;
        }
        bytes[at] = byte;
        Some(bytes)
    }

    proptest! {
        #[test]
        fn any_single_byte_change_of_reason_or_tool_fails(
            use_tool in any::<bool>(),
            offset in 0usize..64,
            byte in (0x20u8..0x7f)
                .prop_filter("no quote or backslash", |b| *b != b'"' && *b != b'\\'),
        ) {
            let s = signer();
            let r = signed();
            let full = serde_json::to_value(&r).unwrap();
            let canonical = serde_json_canonicalizer::to_string(&full).unwrap();
            let member = if use_tool { "tool" } else { "reason" };
            let Some(bytes) = mutate_member(&canonical, member, offset, byte) else {
                return Ok(());
            };
            let mutated: Value = serde_json::from_slice(&bytes).unwrap();
            prop_assert_ne!(&mutated, &full);
            prop_assert_eq!(
                verify_receipt_json(&mutated, &[s.jwk()]),
                Err(VerifyError::SignatureMismatch)
            );
            if let Ok(typed) = serde_json::from_value::<Receipt>(mutated) {
                prop_assert_eq!(
                    verify_receipt(&typed, &s.jwk()),
                    Err(VerifyError::SignatureMismatch)
                );
            }
            // The untouched receipt still verifies.
            prop_assert!(verify_receipt_json(&full, &[s.jwk()]).is_ok());
        }
    }
}
