//! Codex CLI (0.171.0): its events and answers are the nested format ([`super::nested`]), with
//! schemas that refuse fields they do not name; this file holds what is Codex's own.
//!
//! What Codex cannot carry: context from `PostCompact` and guidance from `PreCompact` (their
//! answers hold only `continue`, `stopReason`, `suppressOutput`, `systemMessage`; the bridge
//! answers the `SessionStart` with source `compact`), context after a failed tool call (it has
//! no `PostToolUseFailure`), and an answer to `SessionEnd`. Codex sets no cap of its own on Stop
//! blocks; hookloop's budget is the only one. Hooks not managed by an administrator run only
//! once trusted (`/hooks` in the TUI; `codex exec --dangerously-bypass-hook-trust` for
//! automation that vetted them).

/// The events to register for `hookloop hook codex` (the README's settings for Codex register
/// them), each with its matcher (`None`: the event takes none), and the `_` hook it carries.
pub const EVENTS: [(&str, Option<&str>, &str); 8] = [
    (
        "SessionStart",
        Some("startup|resume|clear|compact"),
        "_SessionStart, _PostCompact (source compact)",
    ),
    ("UserPromptSubmit", None, "_UserPromptSubmit"),
    ("PreToolUse", Some("*"), "_PreToolUse"),
    ("PostToolUse", Some("*"), "_PostToolUse"),
    ("Stop", None, "_Stop"),
    ("SubagentStart", Some("*"), "_SubagentStart"),
    ("SubagentStop", Some("*"), "_SubagentStop"),
    ("SessionEnd", None, "_SessionEnd"),
];

/// The project's hooks, relative to the project.
pub const PROJECT_HOOKS: &str = ".codex/hooks.json";
/// The user's hooks, relative to `CODEX_HOME` (default `~/.codex`).
pub const USER_HOOKS: &str = "hooks.json";
/// The project's configuration (its `[mcp_servers.<name>]` tables), relative to the project.
pub const PROJECT_CONFIG: &str = ".codex/config.toml";
/// The user's configuration, relative to `CODEX_HOME`.
pub const USER_CONFIG: &str = "config.toml";

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
