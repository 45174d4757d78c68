//! The approvals queue as a person sees it: the calls waiting for a decision and the recent
//! ones, each with what it was granted as and the rule that sent it there.

use aperture_types::dto::ApprovalsView;

use crate::error::ServiceError;
use crate::principal::Principal;
use crate::store::{self, Store};
use crate::{invocations, policies};

/// The approvals queue and recent decisions: the tenant's with the read or approve scope,
/// otherwise the person's own calls; confined to the environments the person may see.
pub async fn view(store: &Store, p: &Principal) -> Result<ApprovalsView, ServiceError> {
    let s = store;
    let tenant = p.tenant_id.clone();
    let sees_all =
        p.scopes.satisfies(engine::scope::READ) || p.scopes.satisfies(engine::scope::APPROVE);
    let actor = (!sees_all).then_some(p.actor_id.as_str());
    let confined = p.confined_to();
    let load = async {
        let mut waiting = Vec::new();
        for status in ["input_required", "staged"] {
            waiting.extend(
                store::invocations::list(s, &tenant, Some(status), actor, 500, confined).await?,
            );
        }
        waiting.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        let recent: Vec<_> = store::invocations::list(s, &tenant, None, actor, 40, confined)
            .await?
            .into_iter()
            .filter(|r| r.status != "input_required" && r.status != "staged")
            .take(20)
            .collect();
        let mut out = (Vec::new(), Vec::new());
        for (rows, into) in [(waiting, &mut out.0), (recent, &mut out.1)] {
            for row in rows {
                let mut view = invocations::typed_view(&row);
                view.granted_tool = invocations::granted_tool(s, &row).await?;
                if sees_all {
                    let bound =
                        serde_json::from_str::<engine::decision::BoundCall>(&row.binding).ok();
                    view.rule_id = bound.and_then(|b| b.rule_id);
                    if let Some(rule) = &view.rule_id {
                        view.rule_reason = policies::rule_reason(
                            s,
                            &tenant,
                            &row.policy_id,
                            row.policy_version,
                            rule,
                        )
                        .await?;
                    }
                }
                into.push(view);
            }
        }
        Ok::<_, ServiceError>(out)
    };
    let (waiting, recent) = load.await?;
    Ok(ApprovalsView {
        waiting,
        recent,
        can_decide: p.scopes.satisfies(engine::scope::APPROVE),
        me: p.actor_id.clone(),
        can_cancel_own: p.scopes.satisfies(engine::scope::RUN),
        now: store::rfc3339(store::now_ms()),
    })
}
