//! Claude Code (2.1.332): its events and answers are the nested format ([`super::nested`]);
//! this file holds what is Claude Code's own: the events the bridge registers, and where its
//! hooks and MCP servers are configured.
//!
//! What Claude Code cannot carry: context after a compaction from `PostCompact` (it has no
//! `hookSpecificOutput`; the bridge answers the `SessionStart` with source `compact` instead),
//! summary guidance from `PreCompact`, and a `SubagentStart` prompt (the event names the agent's
//! type only). Its own cap of consecutive Stop blocks (8, `CLAUDE_CODE_STOP_HOOK_BLOCK_CAP`)
//! stays above hookloop's budget, which ends the loop first.

/// The events to register for `hookloop hook claude-code` (the README's settings for Claude
/// Code register them), each with its matcher (`None`: the event takes none), and the `_` hook
/// it carries.
pub const EVENTS: [(&str, Option<&str>, &str); 9] = [
    (
        "SessionStart",
        Some("startup|resume|clear|compact"),
        "_SessionStart, _PostCompact (source compact)",
    ),
    ("UserPromptSubmit", None, "_UserPromptSubmit"),
    ("PreToolUse", Some("*"), "_PreToolUse"),
    ("PostToolUse", Some("*"), "_PostToolUse"),
    ("PostToolUseFailure", Some("*"), "_PostToolUse (isError)"),
    ("Stop", None, "_Stop"),
    ("SubagentStart", Some("*"), "_SubagentStart"),
    ("SubagentStop", Some("*"), "_SubagentStop"),
    ("SessionEnd", None, "_SessionEnd"),
];

/// The project's hook settings, relative to the project.
pub const PROJECT_SETTINGS: &str = ".claude/settings.json";
/// The user's hook settings, relative to the home directory.
pub const USER_SETTINGS: &str = ".claude/settings.json";
/// The project's MCP servers, relative to the project.
pub const PROJECT_MCP: &str = ".mcp.json";
/// The user's MCP servers (its top-level `mcpServers`), relative to the home directory.
pub const USER_MCP: &str = ".claude.json";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_event_is_one_the_format_reads() {
        for (name, _, _) in EVENTS {
            let json = format!(
                r#"{{"hook_event_name":"{name}","session_id":"s","source":"startup","prompt":"p","tool_name":"t"}}"#
            );
            assert!(
                super::super::nested::read(json.as_bytes()).is_ok(),
                "{name}"
            );
        }
    }
}
