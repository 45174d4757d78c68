//! Output redaction: a tool result reduced by a profile before it reaches a destination.
//!
//! Works on MCP `CallToolResult` JSON (`{"content": [...], "structuredContent"?, "isError"?}`).
//! A destination the profile does not list receives nothing but a notice. Otherwise text is
//! kept in order up to `max_bytes` (cut on a character boundary, with a note of how much was
//! cut) or, with `summary: omit`, withheld with only its size reported. Non-text blocks and
//! `structuredContent` pass only when they fit in what is left of the budget.

use serde_json::{Value, json};

use crate::canonical;
use crate::policy::{Destination, RedactionProfile, SummaryMode};

/// What redaction did, for receipts and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RedactionReport {
    /// Bytes of content removed.
    pub bytes_removed: u64,
    /// Whether anything at all was withheld.
    pub withheld: bool,
}

fn notice(text: String) -> Value {
    json!({"type": "text", "text": text})
}

fn size_of(v: &Value) -> u64 {
    canonical::to_canonical_bytes(v)
        .map(|b| b.len() as u64)
        .unwrap_or(u64::MAX)
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or("")
}

/// Applies `profile` to `result` for `destination`.
pub fn redact(
    result: &Value,
    profile: &RedactionProfile,
    destination: Destination,
) -> (Value, RedactionReport) {
    redact_for(result, profile, &[destination])
}

/// Applies `profile` to `result` for output that reaches each of `destinations` at once (a
/// hosted agent's tool result goes to its model and is stored, as sent, in its transcript):
/// a destination the profile does not list withholds all of it.
pub fn redact_for(
    result: &Value,
    profile: &RedactionProfile,
    destinations: &[Destination],
) -> (Value, RedactionReport) {
    let is_error = result.get("isError").cloned().unwrap_or(Value::Bool(false));
    let content = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let total: u64 = content.iter().map(size_of).sum::<u64>()
        + result.get("structuredContent").map(size_of).unwrap_or(0);
    if let Some(destination) = destinations
        .iter()
        .find(|d| !profile.destinations.contains(d))
    {
        let out = json!({
            "content": [notice(format!("[output withheld: this tool's output may not be sent to {} ({total} bytes)]", destination.as_str()))],
            "isError": is_error,
        });
        return (
            out,
            RedactionReport {
                bytes_removed: total,
                withheld: true,
            },
        );
    }
    if profile.summary == SummaryMode::Omit {
        let out = json!({
            "content": [notice(format!("[output omitted by policy ({total} bytes)]"))],
            "isError": is_error,
        });
        return (
            out,
            RedactionReport {
                bytes_removed: total,
                withheld: total > 0,
            },
        );
    }
    let mut budget = u64::try_from(profile.max_bytes).unwrap_or(0);
    let mut removed = 0u64;
    let mut out_content = Vec::with_capacity(content.len());
    for block in content {
        if let Some(text) = block
            .get("type")
            .filter(|t| *t == "text")
            .and(block.get("text"))
            .and_then(Value::as_str)
        {
            let len = text.len() as u64;
            let kept = cut(text, usize::try_from(budget).unwrap_or(usize::MAX));
            budget -= kept.len() as u64;
            if kept.len() as u64 == len {
                out_content.push(block.clone());
            } else {
                let dropped = len - kept.len() as u64;
                removed += dropped;
                out_content.push(notice(format!("{kept}\n[truncated {dropped} bytes]")));
            }
        } else {
            let len = size_of(&block);
            if len <= budget {
                budget -= len;
                out_content.push(block);
            } else {
                removed += len;
                out_content.push(notice(format!(
                    "[content block omitted: {len} bytes over the limit]"
                )));
            }
        }
    }
    let mut out = json!({"content": out_content, "isError": is_error});
    if let Some(structured) = result.get("structuredContent") {
        let len = size_of(structured);
        if len <= budget {
            out["structuredContent"] = structured.clone();
        } else {
            removed += len;
        }
    }
    (
        out,
        RedactionReport {
            bytes_removed: removed,
            withheld: removed > 0,
        },
    )
}

/// Text that came from a tool's upstream but is not its result (an upstream's error message),
/// as `profile` lets it reach `destination` (`logs`: the server's logs and the journal's
/// disclosures). A destination the profile does not list, or `summary: omit`, gets only the
/// text's size and SHA-256 (so whoever holds the text can still match it); otherwise the text
/// is cut to `max_bytes`, with a note of how much was cut.
pub fn text_for(text: &str, profile: &RedactionProfile, destination: Destination) -> String {
    let fingerprint = || {
        format!(
            "{} bytes, {}",
            text.len(),
            canonical::sha256_tagged(text.as_bytes())
        )
    };
    if !profile.destinations.contains(&destination) {
        return format!(
            "[withheld: this tool's output may not be sent to {} ({})]",
            destination.as_str(),
            fingerprint()
        );
    }
    if profile.summary == SummaryMode::Omit {
        return format!("[omitted by policy ({})]", fingerprint());
    }
    let kept = cut(text, usize::try_from(profile.max_bytes).unwrap_or(0));
    if kept.len() == text.len() {
        text.to_owned()
    } else {
        format!("{kept}\n[truncated {} bytes]", text.len() - kept.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(summary: SummaryMode, max: i64, dest: &[Destination]) -> RedactionProfile {
        RedactionProfile {
            summary,
            max_bytes: max,
            destinations: dest.to_vec(),
        }
    }

    /// Seed: "Redaction profiles — summary mode, a max-bytes cap, and allowed destinations …
    /// applied to tool output before the agent sees it."
    #[test]
    fn text_is_cut_to_the_cap_on_a_character_boundary() {
        let result = json!({"content": [{"type": "text", "text": "héllo wörld"}]});
        let (out, report) = redact(
            &result,
            &profile(SummaryMode::Truncate, 2, &[Destination::Mcp]),
            Destination::Mcp,
        );
        let text = out["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("h\n[truncated"), "{text}");
        assert_eq!(report.bytes_removed, "héllo wörld".len() as u64 - 1);
        let (same, report) = redact(
            &result,
            &profile(SummaryMode::Truncate, 100, &[Destination::Mcp]),
            Destination::Mcp,
        );
        assert_eq!(same["content"], result["content"]);
        assert!(!report.withheld);
    }

    #[test]
    fn destinations_not_listed_get_nothing() {
        let result =
            json!({"content": [{"type": "text", "text": "secret"}], "structuredContent": {"a": 1}});
        let (out, report) = redact(
            &result,
            &profile(SummaryMode::Truncate, 100, &[Destination::Llm]),
            Destination::Logs,
        );
        assert!(!out.to_string().contains("secret"));
        assert!(out.get("structuredContent").is_none());
        assert!(report.withheld);
    }

    #[test]
    fn output_for_several_destinations_needs_every_one_listed() {
        let result = json!({"content": [{"type": "text", "text": "canary"}]});
        let llm_only = profile(SummaryMode::Truncate, 100, &[Destination::Llm]);
        let both = profile(
            SummaryMode::Truncate,
            100,
            &[Destination::Llm, Destination::Transcript],
        );
        let hosted = [Destination::Llm, Destination::Transcript];
        let (out, report) = redact_for(&result, &llm_only, &hosted);
        assert!(!out.to_string().contains("canary"), "{out}");
        assert!(out.to_string().contains("sent to transcript"), "{out}");
        assert!(report.withheld);
        let (out, report) = redact_for(&result, &both, &hosted);
        assert_eq!(out["content"], result["content"]);
        assert!(!report.withheld);
        let (out, _) = redact_for(&result, &both, &[Destination::Mcp]);
        assert!(!out.to_string().contains("canary"), "{out}");
    }

    /// Issue 45 (item 4): an upstream's error text reaches the logs (and the journal's
    /// disclosures) only as the profile lets it: withheld with its size and hash when `logs` is
    /// not listed or the summary is `omit`, cut to `max_bytes` otherwise.
    #[test]
    fn upstream_text_for_the_logs_follows_the_profile() {
        let text = "CANARY-UPSTREAM-ERR-0123456789";
        let hash = canonical::sha256_tagged(text.as_bytes());
        let without_logs = profile(SummaryMode::Truncate, 100, &[Destination::Mcp]);
        let out = text_for(text, &without_logs, Destination::Logs);
        assert!(!out.contains("CANARY"), "{out}");
        assert!(out.contains(&hash) && out.contains("30 bytes"), "{out}");
        let omitted = profile(SummaryMode::Omit, 100, &[Destination::Logs]);
        let out = text_for(text, &omitted, Destination::Logs);
        assert!(!out.contains("CANARY") && out.contains(&hash), "{out}");
        let cut_short = profile(SummaryMode::Truncate, 6, &[Destination::Logs]);
        assert_eq!(
            text_for(text, &cut_short, Destination::Logs),
            "CANARY\n[truncated 24 bytes]"
        );
        let whole = profile(SummaryMode::Truncate, 100, &[Destination::Logs]);
        assert_eq!(text_for(text, &whole, Destination::Logs), text);
    }

    #[test]
    fn omit_reports_only_the_size_and_structured_content_must_fit() {
        let result = json!({"content": [{"type": "text", "text": "abc"}], "structuredContent": {"big": "x".repeat(50)}, "isError": true});
        let (out, _) = redact(
            &result,
            &profile(SummaryMode::Omit, 100, &[Destination::Mcp]),
            Destination::Mcp,
        );
        assert!(!out.to_string().contains("abc"));
        assert_eq!(out["isError"], json!(true));
        let (out, report) = redact(
            &result,
            &profile(SummaryMode::Truncate, 10, &[Destination::Mcp]),
            Destination::Mcp,
        );
        assert_eq!(out["content"][0]["text"], "abc");
        assert!(out.get("structuredContent").is_none());
        assert!(report.bytes_removed > 50);
    }
}
