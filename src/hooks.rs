//! The `_` convention of the spec: which tools are hooks, which servers may run them, and how a
//! hook's answer is encoded before the model sees it. Pure functions; the machine and the MCP
//! host both use them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::text::{Cut, cut};

/// The separator between a server name and a tool name in a qualified tool name.
pub const QUALIFIER: &str = "__";

/// The most bytes of a hook's answer that reach the model; the middle of a longer one is elided.
pub const MAX_HOOK_TEXT_BYTES: usize = 16 * 1024;

/// A lifecycle hook the engine calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Hook {
    /// Called when the model ends its turn, before the engine honours it.
    #[serde(rename = "_Stop")]
    Stop,
    /// Called after compaction, before the next model request.
    #[serde(rename = "_PostCompact")]
    PostCompact,
    /// Called once per session, before its first model request.
    #[serde(rename = "_SessionStart")]
    SessionStart,
    /// Called on each prompt, before its first model request.
    #[serde(rename = "_UserPromptSubmit")]
    UserPromptSubmit,
    /// Called before each model tool call runs; non-empty text denies the call.
    #[serde(rename = "_PreToolUse")]
    PreToolUse,
    /// Called after each model tool call ran.
    #[serde(rename = "_PostToolUse")]
    PostToolUse,
    /// Called before a compaction summary is requested.
    #[serde(rename = "_PreCompact")]
    PreCompact,
    /// Called when the session closes; a notification whose answer is ignored.
    #[serde(rename = "_SessionEnd")]
    SessionEnd,
    /// Called before a subagent's first model request; non-empty text is put into its context.
    #[serde(rename = "_SubagentStart")]
    SubagentStart,
    /// Called when a subagent ends its turn, in place of `_Stop`; non-empty text objects.
    #[serde(rename = "_SubagentStop")]
    SubagentStop,
}

impl Hook {
    /// Every hook of a session's top-level agent, in lifecycle order. A subagent's hooks
    /// ([`SUBAGENT`](Self::SUBAGENT)) are not among them; [`EVERY`](Self::EVERY) holds both.
    pub const ALL: [Self; 8] = [
        Self::SessionStart,
        Self::UserPromptSubmit,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::Stop,
        Self::PreCompact,
        Self::PostCompact,
        Self::SessionEnd,
    ];

    /// The hooks only a subagent is asked: its start and its end of turn.
    pub const SUBAGENT: [Self; 2] = [Self::SubagentStart, Self::SubagentStop];

    /// Every hook: [`ALL`](Self::ALL), then [`SUBAGENT`](Self::SUBAGENT).
    pub const EVERY: [Self; 10] = [
        Self::SessionStart,
        Self::UserPromptSubmit,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::Stop,
        Self::PreCompact,
        Self::PostCompact,
        Self::SessionEnd,
        Self::SubagentStart,
        Self::SubagentStop,
    ];

    /// The tool name a server exposes for this hook.
    pub const fn tool_name(self) -> &'static str {
        match self {
            Self::Stop => "_Stop",
            Self::PostCompact => "_PostCompact",
            Self::SessionStart => "_SessionStart",
            Self::UserPromptSubmit => "_UserPromptSubmit",
            Self::PreToolUse => "_PreToolUse",
            Self::PostToolUse => "_PostToolUse",
            Self::PreCompact => "_PreCompact",
            Self::SessionEnd => "_SessionEnd",
            Self::SubagentStart => "_SubagentStart",
            Self::SubagentStop => "_SubagentStop",
        }
    }

    /// Where the hook stands in [`EVERY`](Self::EVERY) (and so in [`ALL`](Self::ALL) for its
    /// hooks): a dense index for tables and bit sets.
    pub const fn index(self) -> usize {
        match self {
            Self::SessionStart => 0,
            Self::UserPromptSubmit => 1,
            Self::PreToolUse => 2,
            Self::PostToolUse => 3,
            Self::Stop => 4,
            Self::PreCompact => 5,
            Self::PostCompact => 6,
            Self::SessionEnd => 7,
            Self::SubagentStart => 8,
            Self::SubagentStop => 9,
        }
    }

    /// The hook a bare tool name declares, if any.
    pub fn from_tool_name(name: &str) -> Option<Self> {
        Self::EVERY
            .into_iter()
            .find(|hook| hook.tool_name() == name)
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tool_name())
    }
}

/// Whether a tool's bare name (without the `<server>__` qualifier) makes it a lifecycle hook.
pub fn is_hook(bare_name: &str) -> bool {
    bare_name.starts_with('_')
}

/// Splits a qualified name `<server>__<tool>` at its first separator. Server names never contain
/// the separator, so the split is unambiguous: `srv___Stop` is server `srv`, tool `_Stop`.
pub fn split_qualified(name: &str) -> Option<(&str, &str)> {
    name.split_once(QUALIFIER)
}

/// The bare tool name a model-facing name refers to: the part after the qualifier, or the whole
/// name when it has none.
pub fn bare_name(name: &str) -> &str {
    split_qualified(name).map_or(name, |(_, tool)| tool)
}

/// Joins a server and a tool into the name the model sees.
pub fn qualify(server: &str, tool: &str) -> String {
    let mut name = String::with_capacity(server.len() + QUALIFIER.len() + tool.len());
    name.push_str(server);
    name.push_str(QUALIFIER);
    name.push_str(tool);
    name
}

/// The name of an MCP server, as configured.
///
/// Valid names are 1 to 64 bytes of `[A-Za-z0-9_-]` without `__`, neither starting nor ending
/// with `_`, so that qualified tool names split unambiguously: `todo_` + `list` would make
/// `todo___list`, which splits as server `todo`, tool `_list` (a hook).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ServerName(String);

impl ServerName {
    /// The longest server name accepted, in bytes.
    pub const MAX_LEN: usize = 64;

    /// Checks a server name against the naming rule.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidServerName> {
        let name = name.into();
        let valid_chars = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if name.is_empty()
            || name.len() > Self::MAX_LEN
            || !valid_chars
            || name.contains(QUALIFIER)
            || name.starts_with('_')
            || name.ends_with('_')
        {
            return Err(InvalidServerName(name));
        }
        Ok(Self(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ServerName {
    type Error = InvalidServerName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<ServerName> for String {
    fn from(name: ServerName) -> Self {
        name.0
    }
}

/// A server name that breaks the naming rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid server name {0:?}: use 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-', without \"__\" \
     and neither starting nor ending with '_' (the qualified tool names <server>__<tool> must split \
     unambiguously)"
)]
pub struct InvalidServerName(pub String);

/// The operator's allowlist of servers whose hooks run (`MCP_HOOK_SERVERS`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookServers {
    /// No server's hooks run: the spec's default.
    #[default]
    Off,
    /// Every server's hooks run (`*`).
    All,
    /// Only these servers' hooks run; names match exactly, case-sensitively.
    Named(Vec<ServerName>),
}

impl HookServers {
    /// Parses the variable's value: unset, empty or only separators = off; else a comma list
    /// whose entries are trimmed and whose empty entries are dropped. A lone `*` is all; `*`
    /// beside names, or an entry that is not a valid server name, is an error naming the entry
    /// (such an entry could never match, and the operator would lose hooks silently).
    pub fn parse(value: Option<&str>) -> Result<Self, InvalidHookServer> {
        let Some(value) = value else {
            return Ok(Self::Off);
        };
        let entries: Vec<&str> = value
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .collect();
        match entries.as_slice() {
            [] => return Ok(Self::Off),
            ["*"] => return Ok(Self::All),
            _ => {}
        }
        entries
            .into_iter()
            .map(|entry| {
                if entry == "*" {
                    return Err(InvalidHookServer {
                        entry: entry.to_owned(),
                        reason: "`*` means every server and must stand alone".to_owned(),
                    });
                }
                ServerName::new(entry).map_err(|error| InvalidHookServer {
                    entry: entry.to_owned(),
                    reason: error.to_string(),
                })
            })
            .collect::<Result<_, _>>()
            .map(Self::Named)
    }

    /// Whether this server's hooks may run.
    pub fn allows(&self, server: &str) -> bool {
        match self {
            Self::Off => false,
            Self::All => true,
            Self::Named(names) => names.iter().any(|name| name.as_str() == server),
        }
    }

    /// The named servers that are not among `configured`: their hooks would never run.
    pub fn unconfigured(&self, configured: &[&ServerName]) -> Vec<ServerName> {
        match self {
            Self::Off | Self::All => Vec::new(),
            Self::Named(names) => names
                .iter()
                .filter(|name| !configured.contains(name))
                .cloned()
                .collect(),
        }
    }
}

/// An entry of `MCP_HOOK_SERVERS` that can never match a server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("entry {entry:?}: {reason}")]
pub struct InvalidHookServer {
    /// The entry, trimmed.
    pub entry: String,
    /// Why it is refused.
    pub reason: String,
}

/// The JSON object a hook's answer reaches the model as. Encoding it as JSON, rather than pasting
/// the text, keeps a hostile answer from posing as instructions of a higher trust level.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookBody {
    /// The hook that spoke.
    pub hook: Hook,
    /// The server whose hook it is.
    pub server: String,
    /// What the hook said.
    pub text: String,
}

/// Encodes a hook's answer as the tool-result text the model sees:
/// `{"hook":"_Stop","server":"<server>","text":"<text>"}`, with `text` capped at
/// [`MAX_HOOK_TEXT_BYTES`] by eliding its middle.
pub fn encode_hook_body(hook: Hook, server: &str, text: &str) -> String {
    let body = HookBody {
        hook,
        server: server.to_owned(),
        text: cut(text, MAX_HOOK_TEXT_BYTES, Cut::Middle),
    };
    // A struct of strings always serialises.
    serde_json::to_string(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hook_s_index_is_its_place_in_all() {
        for (at, hook) in Hook::EVERY.into_iter().enumerate() {
            assert_eq!(hook.index(), at, "{hook}");
        }
    }

    #[test]
    fn hook_names_start_with_underscore() {
        assert!(is_hook("_Stop"));
        assert!(is_hook("_anything"));
        assert!(!is_hook("Stop"));
        assert!(!is_hook(""));
        assert_eq!(bare_name("srv___Stop"), "_Stop");
        assert_eq!(bare_name("_Stop"), "_Stop");
        assert_eq!(split_qualified("a__b__c"), Some(("a", "b__c")));
    }

    fn names(list: &[&str]) -> HookServers {
        HookServers::Named(list.iter().map(|n| ServerName::new(*n).unwrap()).collect())
    }

    #[test]
    fn allowlist_unset_empty_or_separators_is_off() {
        assert_eq!(HookServers::parse(None), Ok(HookServers::Off));
        assert_eq!(HookServers::parse(Some("")), Ok(HookServers::Off));
        assert_eq!(HookServers::parse(Some(" , ,, ")), Ok(HookServers::Off));
        assert!(!HookServers::Off.allows("todo"));
    }

    #[test]
    fn allowlist_lone_star_is_all_even_among_empty_entries() {
        for value in ["*", " * ", "*,", ", *, ,"] {
            assert_eq!(
                HookServers::parse(Some(value)),
                Ok(HookServers::All),
                "{value:?}"
            );
        }
        assert!(HookServers::All.allows("anything"));
    }

    #[test]
    fn allowlist_names_are_trimmed_exact_and_case_sensitive() {
        let list = HookServers::parse(Some(" todo , ,tests,")).unwrap();
        assert_eq!(list, names(&["todo", "tests"]));
        assert!(list.allows("todo"));
        assert!(list.allows("tests"));
        assert!(!list.allows("Todo"));
        assert!(!list.allows("tod"));
    }

    #[test]
    fn allowlist_refuses_a_star_beside_names_naming_the_entry() {
        let err = HookServers::parse(Some("*,todo")).unwrap_err();
        assert_eq!(err.entry, "*");
        assert!(err.to_string().contains("must stand alone"), "{err}");
    }

    #[test]
    fn allowlist_refuses_an_invalid_name_naming_the_entry() {
        for (value, entry) in [
            ("a b", "a b"),
            ("todo, x__y", "x__y"),
            ("ok,todo_", "todo_"),
        ] {
            let err = HookServers::parse(Some(value)).unwrap_err();
            assert_eq!(err.entry, entry, "{value:?}");
            assert!(err.to_string().contains(&format!("{entry:?}")), "{err}");
        }
    }

    #[test]
    fn allowlist_lists_named_servers_that_are_not_configured() {
        let list = names(&["todo", "gate"]);
        let todo = ServerName::new("todo").unwrap();
        assert_eq!(
            list.unconfigured(&[&todo]),
            [ServerName::new("gate").unwrap()]
        );
        assert!(HookServers::All.unconfigured(&[]).is_empty());
    }

    #[test]
    fn server_names_follow_the_rule() {
        assert!(ServerName::new("todo-1_a").is_ok());
        assert!(ServerName::new("").is_err());
        assert!(ServerName::new("a__b").is_err());
        assert!(ServerName::new("a b").is_err());
        assert!(ServerName::new("x".repeat(64)).is_ok());
        assert!(ServerName::new("x".repeat(65)).is_err());
        let err = ServerName::new("bad name").unwrap_err();
        assert!(err.to_string().contains("\"bad name\""));
    }

    #[test]
    fn server_names_may_not_start_or_end_with_an_underscore() {
        // `todo_` + `list` would be `todo___list`: server `todo`, hook-like tool `_list`.
        for name in ["todo_", "_todo", "_", "a_b_"] {
            let err = ServerName::new(name).unwrap_err();
            assert!(
                err.to_string().contains("starting nor ending with '_'"),
                "{err}"
            );
        }
        assert!(ServerName::new("a_b").is_ok());
        assert!(ServerName::new("-a-").is_ok());
    }

    #[test]
    fn hook_body_is_the_exact_json_object() {
        assert_eq!(
            encode_hook_body(Hook::Stop, "todo", "2 open: \"a\"\n"),
            r#"{"hook":"_Stop","server":"todo","text":"2 open: \"a\"\n"}"#
        );
        assert_eq!(
            encode_hook_body(Hook::PostCompact, "s", ""),
            r#"{"hook":"_PostCompact","server":"s","text":""}"#
        );
    }

    #[test]
    fn hook_text_is_capped_with_its_middle_elided() {
        let text = format!("{}{}", "a".repeat(20_000), "é".repeat(5_000));
        let capped = cut(&text, MAX_HOOK_TEXT_BYTES, Cut::Middle);
        assert!(capped.len() <= MAX_HOOK_TEXT_BYTES);
        assert!(capped.starts_with("aaaa"));
        assert!(capped.ends_with("éé"));
        assert!(capped.contains("bytes elided"));
        let body: HookBody =
            serde_json::from_str(&encode_hook_body(Hook::Stop, "s", &text)).unwrap();
        assert_eq!(body.text, capped);
    }
}
