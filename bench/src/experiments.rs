//! Experiments, not used by the engine: a cheaper version of an engine function, to measure
//! what it would gain. The benchmark asserts that it gives the same answer as the engine's
//! own function on the whole benchmark input before timing it.

use engine::descriptor::ToolDescriptor;
use engine::policy::{ExposureContext, Policy, Rule};

/// `Policy::select`'s first-match scan with the tool's risk labels computed once per tool
/// instead of once per rule (`Selector::matches` calls `risk_labels()`, which allocates a
/// `Vec`, before looking at any key). Returns the deciding rule.
pub fn first_match<'p>(
    policy: &'p Policy,
    tool: &ToolDescriptor,
    ctx: &ExposureContext,
) -> Option<&'p Rule> {
    let labels = tool.risk_labels();
    policy.rules.iter().find(|r| {
        let s = &r.selector;
        s.name.as_ref().is_none_or(|n| *n == tool.name)
            && s.prefix
                .as_ref()
                .is_none_or(|p| tool.name.starts_with(p.as_str()))
            && s.family
                .as_ref()
                .is_none_or(|f| tool.family.as_ref() == Some(f))
            && s.risk.as_ref().is_none_or(|r| labels.contains(&r.as_str()))
            && s.risk_exactly.as_ref().is_none_or(|want| {
                want.iter().all(|w| labels.contains(&w.as_str()))
                    && labels.iter().all(|l| want.iter().any(|w| w == l))
            })
            && s.environment.as_ref().is_none_or(|e| *e == ctx.environment)
            && s.preset
                .as_ref()
                .is_none_or(|p| ctx.preset.as_ref() == Some(p))
            && s.actor.as_ref().is_none_or(|a| *a == ctx.actor)
    })
}
