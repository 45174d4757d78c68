//! Scopes carried by tokens and users (CONTRACT §1).
//!
//! A scope is a string matching `[a-z0-9_.:-]+`. Six of them belong to Aperture itself; any
//! other well-formed string is accepted too, because tool descriptors may require scopes of their
//! own (`github:write`). `agent_tool_exposure:admin` implies the other five Aperture scopes and
//! nothing else: an admin of the gateway is not automatically allowed to use every tool scope.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Read everything in the tenant: tools, policies, sessions, receipts, invocations.
pub const READ: &str = "agent_tool_exposure:read";
/// Write policies and trigger upstream syncs.
pub const WRITE: &str = "agent_tool_exposure:write";
/// Open exposure sessions and call tools through them.
pub const RUN: &str = "agent_tool_exposure:run";
/// Administer the tenant: descriptors, upstreams, tokens, users. Implies every other Aperture scope.
pub const ADMIN: &str = "agent_tool_exposure:admin";
/// Release or reject parked invocations and apply staged changes.
pub const APPROVE: &str = "agent_tool_exposure:approve";

/// Read the journal's signed checkpoints and Merkle proofs and cosign checkpoints, and
/// nothing else (for witnesses and auditors).
pub const WITNESS: &str = "agent_tool_exposure:witness";

/// Aperture's own scopes, in the order the dashboard shows them.
pub const APERTURE_SCOPES: [&str; 6] = [READ, WRITE, RUN, APPROVE, WITNESS, ADMIN];

/// The longest scope string accepted; longer ones are refused rather than truncated.
pub const MAX_SCOPE_LEN: usize = 128;

/// Why a scope string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// The scope was the empty string.
    #[error("a scope must not be empty")]
    Empty,
    /// The scope was longer than [`MAX_SCOPE_LEN`].
    #[error("a scope is at most {MAX_SCOPE_LEN} characters")]
    TooLong,
    /// The scope contained a character outside `[a-z0-9_.:-]`.
    #[error("`{0}` is not a valid scope: use only a-z, 0-9, `_`, `.`, `:` and `-`")]
    InvalidCharacter(String),
}

/// Checks one scope string against `[a-z0-9_.:-]+`.
pub fn validate(scope: &str) -> Result<(), ScopeError> {
    if scope.is_empty() {
        return Err(ScopeError::Empty);
    }
    if scope.len() > MAX_SCOPE_LEN {
        return Err(ScopeError::TooLong);
    }
    let valid = scope
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.:-".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(ScopeError::InvalidCharacter(scope.to_owned()))
    }
}

/// A validated set of scopes, kept sorted so that stored and displayed forms are stable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct ScopeSet(BTreeSet<String>);

/// A scope list that failed validation, with the index of the first bad entry so callers can
/// point at the exact field (`scopes[2]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scopes[{index}]: {error}")]
pub struct ScopeListError {
    /// Position of the offending entry in the list as given.
    pub index: usize,
    /// What is wrong with it.
    pub error: ScopeError,
}

impl ScopeSet {
    /// Validates every entry; duplicates collapse.
    pub fn parse<I, S>(scopes: I) -> Result<Self, ScopeListError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut set = BTreeSet::new();
        for (index, scope) in scopes.into_iter().enumerate() {
            let scope = scope.as_ref();
            validate(scope).map_err(|error| ScopeListError { index, error })?;
            set.insert(scope.to_owned());
        }
        Ok(Self(set))
    }

    /// Every Aperture scope (what the bootstrap admin receives).
    pub fn all_aperture() -> Self {
        Self(APERTURE_SCOPES.iter().map(|s| (*s).to_owned()).collect())
    }

    /// Whether a principal holding this set may do what `required` guards.
    /// `agent_tool_exposure:admin` satisfies every `agent_tool_exposure:*` scope.
    pub fn satisfies(&self, required: &str) -> bool {
        if self.0.contains(required) {
            return true;
        }
        APERTURE_SCOPES.contains(&required) && self.0.contains(ADMIN)
    }

    /// The scopes in sorted order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    /// Whether the set holds no scope at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of distinct scopes.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl TryFrom<Vec<String>> for ScopeSet {
    type Error = ScopeListError;

    fn try_from(value: Vec<String>) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<ScopeSet> for Vec<String> {
    fn from(value: ScopeSet) -> Self {
        value.0.into_iter().collect()
    }
}

impl fmt::Display for ScopeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for scope in &self.0 {
            if !first {
                f.write_str(" ")?;
            }
            f.write_str(scope)?;
            first = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn admin_implies_every_aperture_scope_but_not_tool_scopes() {
        let admin = ScopeSet::parse([ADMIN]).unwrap();
        for scope in APERTURE_SCOPES {
            assert!(admin.satisfies(scope), "{scope}");
        }
        assert!(!admin.satisfies("github:write"));
    }

    #[test]
    fn other_scopes_imply_only_themselves() {
        let read = ScopeSet::parse([READ, "github:read"]).unwrap();
        assert!(read.satisfies(READ));
        assert!(read.satisfies("github:read"));
        assert!(!read.satisfies(WRITE));
        assert!(!read.satisfies(ADMIN));
        assert!(!read.satisfies("github:write"));
    }

    #[test]
    fn invalid_scopes_name_their_index() {
        let err = ScopeSet::parse([READ, "Bad Scope"]).unwrap_err();
        assert_eq!(err.index, 1);
        assert_eq!(err.error, ScopeError::InvalidCharacter("Bad Scope".into()));
        assert_eq!(ScopeSet::parse([""]).unwrap_err().error, ScopeError::Empty);
        let long = "a".repeat(MAX_SCOPE_LEN + 1);
        assert_eq!(
            ScopeSet::parse([long]).unwrap_err().error,
            ScopeError::TooLong
        );
    }

    #[test]
    fn serde_round_trip_validates() {
        let set: ScopeSet = serde_json::from_str(r#"["b:x","a:y","b:x"]"#).unwrap();
        assert_eq!(serde_json::to_string(&set).unwrap(), r#"["a:y","b:x"]"#);
        assert!(serde_json::from_str::<ScopeSet>(r#"["UPPER"]"#).is_err());
    }

    proptest! {
        #[test]
        fn well_formed_scopes_are_accepted(s in "[a-z0-9_.:-]{1,128}") {
            prop_assert!(validate(&s).is_ok());
        }

        #[test]
        fn anything_with_another_character_is_refused(
            prefix in "[a-z0-9]{0,10}",
            bad in "[^a-z0-9_.:-]",
            suffix in "[a-z0-9]{0,10}",
        ) {
            let scope = format!("{prefix}{bad}{suffix}");
            prop_assert!(validate(&scope).is_err());
        }
    }
}
