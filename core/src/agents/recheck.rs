//! Who a turn runs as, checked again before each new step (seed: request-context RBAC before
//! every durable receipt; a turn never goes on as another actor or on withdrawn rights).
//!
//! A turn that started, parked and continued, or a background fork revived after a restart,
//! runs as the principal that started it *as that principal is now*: before each model call and
//! each tool call the turn's token (or dashboard user) is read again. A revoked or
//! deleted token, a user deleted or without `:run`, or the agent's exposure session revoked ends
//! the turn (status [`REVOKED`]) and nothing new runs. The end of a token's lifetime or of a
//! browser session does not: what was authorized while it was valid goes on (the seed's
//! recovery runs without depending on an expired context), and the token cannot start anything
//! new, since authenticating it fails.

use engine::scope;

use super::store_failed;
use crate::principal::{Principal, PrincipalKind};
use crate::services::Services;
use crate::store::{self, agents::AgentRow};

/// The status of a turn that ended because its caller's rights were withdrawn.
pub const REVOKED: &str = "revoked";

/// The turn's caller as they are now, in an agent session that is still open: `token_id` for
/// a turn started with a token, `None` for a dashboard user (the agent's actor). `Err` says why
/// the turn cannot go on.
pub async fn current(
    state: &Services,
    agent: &AgentRow,
    token_id: Option<&str>,
) -> Result<Principal, String> {
    let principal = caller(state, agent, token_id).await?;
    session_open(state, agent).await?;
    Ok(principal)
}

/// The caller part of [`current`]: the token (or user) still there, not revoked, with `:run`.
pub async fn caller(
    state: &Services,
    agent: &AgentRow,
    token_id: Option<&str>,
) -> Result<Principal, String> {
    let principal = match token_id {
        Some(token_id) => {
            let token = store::tokens::find(&state.store, &agent.tenant_id, token_id)
                .await
                .map_err(store_failed)?
                .filter(|t| t.revoked_at.is_none() && t.actor_id == agent.actor_id)
                .ok_or("the caller's token was revoked; nothing more runs in this turn")?;
            let created_by = token.creating_person().to_owned();
            Principal {
                tenant_id: agent.tenant_id.clone(),
                actor_id: token.actor_id,
                scopes: scope::ScopeSet::parse(&token.scopes).map_err(|e| e.to_string())?,
                kind: PrincipalKind::Token {
                    token_id: token.id,
                    created_by,
                },
                read_at: None,
                environments: token.environments,
            }
        }
        None => {
            let user = store::users::find(&state.store, &agent.tenant_id, &agent.actor_id)
                .await
                .map_err(store_failed)?
                .ok_or("the caller's user was deleted; nothing more runs in this turn")?;
            Principal {
                tenant_id: agent.tenant_id.clone(),
                actor_id: user.username,
                scopes: scope::ScopeSet::parse(&user.scopes).map_err(|e| e.to_string())?,
                kind: PrincipalKind::User { user_id: user.id },
                read_at: None,
                environments: user.environments,
            }
        }
    };
    if !principal.scopes.satisfies(scope::RUN) {
        return Err(format!(
            "the caller no longer holds {}; nothing more runs in this turn",
            scope::RUN
        ));
    }
    if !principal.sees(&agent.environment) {
        return Err(format!(
            "the caller may no longer use environment {:?}; nothing more runs in this turn",
            agent.environment
        ));
    }
    Ok(principal)
}

/// The session part of [`current`]: the agent's exposure session not revoked.
pub async fn session_open(state: &Services, agent: &AgentRow) -> Result<(), String> {
    let session = store::exposure::find_session(&state.store, &agent.tenant_id, &agent.id)
        .await
        .map_err(store_failed)?;
    if session.is_none_or(|s| s.revoked_at.is_some()) {
        return Err("the agent's session was revoked; nothing more runs in this turn".into());
    }
    Ok(())
}

/// [`current`] for the principal a running turn holds (the operator has nothing to withdraw).
pub async fn again(
    state: &Services,
    agent: &AgentRow,
    principal: &Principal,
) -> Result<Principal, String> {
    match &principal.kind {
        PrincipalKind::Token { token_id, .. } => current(state, agent, Some(token_id)).await,
        PrincipalKind::User { user_id } => {
            let now = current(state, agent, None).await?;
            // The same name made again is another person.
            if now.principal_id() != user_id {
                return Err("the caller's user was deleted; nothing more runs in this turn".into());
            }
            Ok(now)
        }
        PrincipalKind::Operator => Ok(principal.clone()),
    }
}
