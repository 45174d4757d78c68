//! The tool catalog as a service: `GET /tools` and the admin's `PUT /tools/{name}`.

use engine::descriptor::ToolDescriptor;
use engine::receipt::{Decision, ReasonCode};
use engine::scope;
use serde_json::{Value, json};

use app::dto::DescribeToolRequest;
use app::error::{AppError, FieldError};

use crate::auth::Principal;
use crate::error::ServiceError;
use crate::journal::Journal;
use crate::store::{self, Store};

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// `GET /tools` (read).
pub async fn list(
    store: &Store,
    principal: &Principal,
) -> Result<Vec<ToolDescriptor>, ServiceError> {
    principal.require(scope::READ)?;
    Ok(store::catalog::list(store, &principal.tenant_id).await?)
}

/// `PUT /tools/{name}` (admin): sets the server-owned descriptor of a tool in the catalog.
/// Journaled. The tool's own definition is not touched.
pub async fn describe(
    store: &Store,
    journal: &Journal,
    principal: &Principal,
    name: &str,
    request: &DescribeToolRequest,
) -> Result<ToolDescriptor, ServiceError> {
    principal.require(scope::ADMIN)?;
    // Read, change the descriptor, write only if nobody wrote in between (an upstream sync
    // updating the definition); otherwise do it again on what is there now. Journaled once.
    let mut journaled = false;
    for _ in 0..WRITE_ATTEMPTS {
        let Some(current) = store::catalog::find_revised(store, &principal.tenant_id, name).await?
        else {
            return Err(AppError::not_found("tool").into());
        };
        let mut tool = current.tool;
        validate_descriptor(&tool, request)?;
        tool.risk = request.risk.clone();
        tool.family = request.family.clone();
        tool.required_scope = request.required_scope.clone();
        if let Some(v) = &request.version {
            tool.version = v.clone();
        }
        tool.dry_run_argument = request.dry_run_argument.clone();
        tool.price_cents = request.price_cents;
        if !journaled {
            journal
                .admin(
                    &principal.tenant_id,
                    &principal.as_creator(),
                    Decision::Allow,
                    ReasonCode::Ok,
                    "tool.describe",
                    json!({"tool": name, "descriptor": request}),
                )
                .await?;
            journaled = true;
        }
        if store::catalog::write_if(store, &principal.tenant_id, &tool, Some(current.revision))
            .await?
        {
            return Ok(tool);
        }
    }
    Err(ServiceError::Other(anyhow::anyhow!(
        "tool {name} kept changing while its descriptor was written"
    )))
}

/// How often a descriptor write re-reads a tool that a sync changed under it before giving up.
const WRITE_ATTEMPTS: u32 = 8;

/// Field errors of a descriptor for `tool`.
fn validate_descriptor(
    tool: &ToolDescriptor,
    request: &DescribeToolRequest,
) -> Result<(), ServiceError> {
    let mut fields = Vec::new();
    let mut bad = |path: String, message: &str| {
        fields.push(FieldError {
            path,
            message: message.into(),
        })
    };
    if request.risk.is_empty() {
        bad("risk".into(), "name at least one risk label");
    }
    for (i, label) in request.risk.iter().enumerate() {
        if !is_label(label) {
            bad(format!("risk[{i}]"), "1–32 characters of a-z, 0-9, _ and -");
        }
    }
    if let Some(f) = &request.family
        && !is_label(f)
    {
        bad("family".into(), "1–32 characters of a-z, 0-9, _ and -");
    }
    if let Some(s) = &request.required_scope
        && engine::scope::validate(s).is_err()
    {
        bad("required_scope".into(), "a scope: a-z, 0-9, _ . : and -");
    }
    if let Some(v) = &request.version
        && (v.is_empty() || v.len() > 64)
    {
        bad("version".into(), "1–64 characters");
    }
    if let Some(arg) = &request.dry_run_argument {
        let ty = tool
            .input_schema
            .pointer(&format!("/properties/{arg}/type"));
        if ty != Some(&Value::String("boolean".into())) {
            bad(
                "dry_run_argument".into(),
                "must name a boolean argument of the tool",
            );
        }
    }
    if !fields.is_empty() {
        return Err(AppError::invalid(fields).into());
    }
    Ok(())
}
