//! `fork_allowlist`: an arbitrary `fork_tools` list and an arbitrary tool identity through
//! `ExecutionAllowlist` (CONTRACT §9).
//!
//! Invariants:
//! - `ExecutionAllowlist::parse` never panics;
//! - when it accepts the list, `allows` never panics, for the tool as an MCP tool and as a
//!   built-in tool of the same canonical name;
//! - a built-in tool never matches a list made only of MCP wildcard patterns (`mcp__*`,
//!   `mcp__<server>__*`, `mcp__<server>__<prefix>*`), and `["mcp__*"]` allows every MCP tool;
//! - any sub-list of a valid list is valid, and the list survives its serde round trip;
//! - `rejection_message` and `restriction_notice` stay under 4,000 characters however long the
//!   list or its entries are.
#![no_main]

use arbitrary::Arbitrary;
use engine::fork::{ExecutionAllowlist, ToolIdentity};
use libfuzzer_sys::fuzz_target;

/// Bound on the messages shown to a model (characters).
const MAX_MESSAGE_CHARS: usize = 4_000;

#[derive(Debug, Arbitrary)]
struct Input {
    /// The `fork_tools` list as given.
    entries: Vec<String>,
    /// The canonical name of the tool the fork asks to execute.
    name: String,
    /// Its raw MCP server and tool names, when it is an MCP tool.
    mcp: Option<(String, String)>,
}

fn check_messages(list: &ExecutionAllowlist, tool_name: &str) {
    let rejection = list.rejection_message(tool_name);
    let notice = list.restriction_notice();
    for (what, text) in [
        ("rejection_message", &rejection),
        ("restriction_notice", &notice),
    ] {
        let chars = text.chars().count();
        assert!(
            chars < MAX_MESSAGE_CHARS,
            "{what} is {chars} characters for {} entries",
            list.entries().len()
        );
    }
}

fuzz_target!(|input: Input| {
    let Input { entries, name, mcp } = input;
    let builtin = ToolIdentity::builtin(&name);
    let mcp_tool = mcp
        .as_ref()
        .map(|(server, tool)| ToolIdentity::mcp(&name, server, tool));

    let Ok(list) = ExecutionAllowlist::parse(&entries) else {
        return;
    };
    let builtin_allowed = list.allows(&builtin);
    if let Some(tool) = &mcp_tool {
        let mcp_allowed = list.allows(tool);
        // The exact canonical name allows the tool whatever its source.
        if builtin_allowed {
            assert!(
                mcp_allowed,
                "an exact name allowed the built-in but not the MCP tool"
            );
        }
    }
    assert_eq!(
        builtin_allowed,
        entries.iter().any(|e| *e == name && !e.contains('*')),
        "a built-in tool is allowed exactly when its name is listed without a wildcard"
    );

    // Only wildcard patterns: never a built-in tool.
    let patterns: Vec<String> = entries
        .iter()
        .filter(|e| e.contains('*'))
        .cloned()
        .collect();
    let only_patterns =
        ExecutionAllowlist::parse(&patterns).expect("a sub-list of a valid list is valid");
    assert!(
        !only_patterns.allows(&builtin),
        "a built-in tool matched a list of MCP patterns: {patterns:?}"
    );
    let all_mcp = ExecutionAllowlist::parse(&["mcp__*".to_owned()]).expect("`mcp__*` is valid");
    assert!(
        !all_mcp.allows(&builtin),
        "`mcp__*` matched a built-in tool"
    );
    if let Some(tool) = &mcp_tool {
        assert!(all_mcp.allows(tool), "`mcp__*` did not match an MCP tool");
        // Adding `mcp__*` to the list never takes a permission away.
        let mut widened = entries.clone();
        widened.push("mcp__*".to_owned());
        let widened = ExecutionAllowlist::parse(&widened).expect("adding `mcp__*` stays valid");
        assert!(widened.allows(tool));
        assert_eq!(widened.allows(&builtin), builtin_allowed);
    }

    // Persistence (`executionAllowedTools`) round trip.
    let json = serde_json::to_string(&list).expect("an allowlist serializes");
    let revived: ExecutionAllowlist = serde_json::from_str(&json).expect("and deserializes");
    assert_eq!(revived, list);

    // Messages stay bounded.
    check_messages(&list, &name);
    check_messages(&only_patterns, &name);
});
