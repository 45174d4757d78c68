//! Environments (`dev`, `prod`, …): the one rule for their names, the environment of sessions
//! that name none, and `*`, which in a token's or user's list admits every environment. The
//! server and the dashboard read them from here.
//!
//! The name rule (`[a-z0-9_-]{1,64}`) is also the rule of policy ids and tenant ids.

/// The environment of sessions that name none.
pub const DEFAULT_ENVIRONMENT: &str = "default";

/// Every environment, in a token's or user's list.
pub const ANY_ENVIRONMENT: &str = "*";

/// Whether `name` is 1–64 characters of `a-z`, `0-9`, `_` and `-`: an environment, a policy id
/// or a tenant id.
pub fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Whether `env` is an environment name ([`is_name`]).
pub fn is_environment(env: &str) -> bool {
    is_name(env)
}

/// Whether a list of environments (as tokens and users carry it) admits `environment`.
pub fn environment_allowed(allowed: &[String], environment: &str) -> bool {
    allowed
        .iter()
        .any(|e| e == ANY_ENVIRONMENT || e == environment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_lowercase_words() {
        for good in ["default", "prod", "eu-west_2", "a", &"x".repeat(64)] {
            assert!(is_environment(good), "{good}");
        }
        for bad in ["", "Prod", "prod env", "*", "é", &"x".repeat(65)] {
            assert!(!is_environment(bad), "{bad}");
        }
    }

    #[test]
    fn a_star_admits_every_environment() {
        let prod = vec!["prod".to_owned()];
        assert!(environment_allowed(&prod, "prod"));
        assert!(!environment_allowed(&prod, "dev"));
        assert!(environment_allowed(&[ANY_ENVIRONMENT.to_owned()], "dev"));
        assert!(!environment_allowed(&[], "dev"));
    }
}
