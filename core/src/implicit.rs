//! The implicit binding of `/mcp` calls: a tenant's deliberate departure from the seed's echo
//! rule for clients that cannot echo (`binding: "implicit"`, [`crate::settings::mcp`]).
//!
//! It applies only to a call carrying none of the five echo keys (`_meta.session_id`,
//! `manifest_id`, `lease_id`, `tool_version`, `expected_schema_hash`): one present means echo,
//! all five required. The call binds to the newest live grant of the same principal that
//! answered a plain `tools/list` — in the 2025 eras on the same `Mcp-Session-Id`, otherwise in
//! the environment the call names (`_meta.environment`, else the default one) — read from the
//! database, so every node binds alike. With no such grant, one is granted exactly as a plain
//! `tools/list` would (its manifest receipt says it was made implicitly). The call then carries
//! that grant's identifiers, and the tool's version and schema hash as granted: the engine's
//! echo checks pass by construction and what is left of them is the drift check (the live
//! definition hash equals the grant's); every other check of CONTRACT §5 runs unchanged, and
//! the decision receipt says `binding: "implicit"`.
//!
//! What is given up (`docs/mcp.md`): no proof the client saw the schema it calls, and
//! concurrent clients of one principal share a binding.

use aperture_types::dto::CreateSessionRequest;
use engine::environment::DEFAULT_ENVIRONMENT;
use engine::manifest::Manifest;
use engine::narrow::ValidatorCache;

use crate::calls::ToolCall;
use crate::error::ServiceError;
use crate::exposure::{self, Listing};
use crate::journal::Journal;
use crate::principal::Principal;
use crate::settings::mcp::{self, Binding};
use crate::store::{self, Store, cache, exposure::BindWithin};

/// Whether `call` echoes any of the five keys of its grant (then it is bound by its echo).
pub fn echoes(call: &ToolCall) -> bool {
    let m = &call.meta;
    m.session_id.is_some()
        || m.manifest_id.is_some()
        || m.lease_id.is_some()
        || m.tool_version.is_some()
        || m.expected_schema_hash.is_some()
}

/// Binds `call` (a `/mcp` `tools/call` of `principal`, on the 2025-era `mcp_session` when it
/// has one) to its grant when the tenant binds implicitly where the call lands: fills in the
/// grant's identifiers and the tool's version and schema hash as granted, and marks the call
/// [`Binding::Implicit`]. A call that echoes, or lands where the tenant keeps the echo, is left
/// as it is (the echo checks then refuse it if it echoes nothing).
pub async fn bind(
    store: &Store,
    journal: &Journal,
    validators: &ValidatorCache,
    principal: &Principal,
    mcp_session: Option<&str>,
    call: &mut ToolCall,
) -> Result<(), ServiceError> {
    if echoes(call) {
        return Ok(());
    }
    let settings = mcp::of(store, &principal.tenant_id).await?;
    if !settings.any_implicit() {
        return Ok(());
    }
    let named = call.meta.environment.as_deref();
    let environment = named.unwrap_or(DEFAULT_ENVIRONMENT);
    let within = match mcp_session {
        Some(session) => BindWithin::McpSession(session, named),
        None => BindWithin::Environment(environment),
    };
    let found = store::exposure::bindable_grant(
        store,
        &principal.tenant_id,
        principal.principal_id(),
        within,
        store::now_ms(),
    )
    .await?;
    let implicit_in = |env: &str| settings.in_environment(env).binding == Binding::Implicit;
    match found {
        Some((manifest_id, env)) => {
            if !implicit_in(&env) {
                return Ok(());
            }
            let fresh = match principal.read_at {
                Some(at) => at,
                None => cache::fresh(store).await?,
            };
            let Some(grant) =
                cache::grant(store, &fresh, &principal.tenant_id, &manifest_id).await?
            else {
                return Ok(());
            };
            let (Some(session), Some(manifest)) = (&grant.session, &grant.manifest) else {
                return Ok(());
            };
            fill(
                call,
                &session.id,
                &grant.manifest_id,
                &grant.lease_id,
                manifest,
            );
        }
        None => {
            if !implicit_in(environment) {
                return Ok(());
            }
            let request = CreateSessionRequest {
                environment: named.map(str::to_owned),
                preset: None,
                entity: None,
            };
            let listing = Listing {
                mcp: true,
                mcp_session,
                plain: true,
                for_implicit_call: true,
            };
            let grant =
                match exposure::create(store, journal, validators, principal, &request, listing)
                    .await
                {
                    Ok(grant) => grant,
                    // Refused (an environment the caller may not use): the call goes on unbound and
                    // is refused with its receipt like any call that names no grant.
                    Err(ServiceError::App(_)) => return Ok(()),
                    Err(e) => return Err(e),
                };
            fill(
                call,
                &grant.session.id,
                &grant.row.id,
                &grant.row.lease_id,
                &grant.manifest,
            );
        }
    }
    Ok(())
}

/// `call` as the echo of the grant (`session_id`, `manifest_id`, `lease_id`) and, when it lists
/// the tool, of its version and schema hash.
fn fill(call: &mut ToolCall, session_id: &str, manifest_id: &str, lease_id: &str, m: &Manifest) {
    call.binding = Binding::Implicit;
    call.meta.session_id = Some(session_id.to_owned());
    call.meta.manifest_id = Some(manifest_id.to_owned());
    call.meta.lease_id = Some(lease_id.to_owned());
    if let Some(entry) = m.entry(&call.name).filter(|e| e.mode.is_listed()) {
        call.meta.tool_version = Some(entry.tool_version.clone());
        call.meta.expected_schema_hash = Some(entry.schema_hash.clone());
    }
}
