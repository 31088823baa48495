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
pub enum Hook {
    /// Called when the model ends its turn, before the engine honours it.
    #[serde(rename = "_Stop")]
    Stop,
    /// Called after compaction, before the next model request.
    #[serde(rename = "_PostCompact")]
    PostCompact,
}

impl Hook {
    /// The tool name a server exposes for this hook.
    pub const fn tool_name(self) -> &'static str {
        match self {
            Self::Stop => "_Stop",
            Self::PostCompact => "_PostCompact",
        }
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
/// Valid names are 1 to 64 bytes of `[A-Za-z0-9_-]` without `__`, so that qualified tool names
/// split unambiguously.
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
        if name.is_empty() || name.len() > Self::MAX_LEN || !valid_chars || name.contains(QUALIFIER)
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
    "invalid server name {0:?}: use 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-', without \"__\""
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
    Named(Vec<String>),
}

impl HookServers {
    /// Parses the variable's value: unset, empty or only separators = off; a lone `*` = all;
    /// else a comma list whose entries are trimmed and whose empty entries are dropped.
    pub fn parse(value: Option<&str>) -> Self {
        let Some(value) = value else { return Self::Off };
        if value.trim() == "*" {
            return Self::All;
        }
        let names: Vec<String> = value
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect();
        if names.is_empty() {
            Self::Off
        } else {
            Self::Named(names)
        }
    }

    /// Whether this server's hooks may run.
    pub fn allows(&self, server: &str) -> bool {
        match self {
            Self::Off => false,
            Self::All => true,
            Self::Named(names) => names.iter().any(|name| name == server),
        }
    }
}

/// The JSON object a hook's answer reaches the model as. Encoding it as JSON, rather than pasting
/// the text, keeps a hostile answer from posing as instructions of a higher trust level.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookBody {
    pub hook: Hook,
    pub server: String,
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
    fn hook_names_start_with_underscore() {
        assert!(is_hook("_Stop"));
        assert!(is_hook("_anything"));
        assert!(!is_hook("Stop"));
        assert!(!is_hook(""));
        assert_eq!(bare_name("srv___Stop"), "_Stop");
        assert_eq!(bare_name("_Stop"), "_Stop");
        assert_eq!(split_qualified("a__b__c"), Some(("a", "b__c")));
    }

    #[test]
    fn allowlist_unset_empty_or_separators_is_off() {
        assert_eq!(HookServers::parse(None), HookServers::Off);
        assert_eq!(HookServers::parse(Some("")), HookServers::Off);
        assert_eq!(HookServers::parse(Some(" , ,, ")), HookServers::Off);
        assert!(!HookServers::Off.allows("todo"));
    }

    #[test]
    fn allowlist_lone_star_is_all() {
        assert_eq!(HookServers::parse(Some("*")), HookServers::All);
        assert_eq!(HookServers::parse(Some(" * ")), HookServers::All);
        assert!(HookServers::All.allows("anything"));
    }

    #[test]
    fn allowlist_names_are_trimmed_exact_and_case_sensitive() {
        let list = HookServers::parse(Some(" todo , ,tests,"));
        assert_eq!(
            list,
            HookServers::Named(vec!["todo".into(), "tests".into()])
        );
        assert!(list.allows("todo"));
        assert!(list.allows("tests"));
        assert!(!list.allows("Todo"));
        assert!(!list.allows("tod"));
        // A star inside a list is a name, not a wildcard.
        assert!(!HookServers::parse(Some("*,todo")).allows("other"));
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
