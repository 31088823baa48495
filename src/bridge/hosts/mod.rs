//! What each agent host hands a hook command and what it takes back, one file per host.
//!
//! Every host runs a command at its lifecycle events, writes the event as JSON on the command's
//! stdin, and reads the command's answer from its exit status, stdout and stderr, each in a
//! format of its own. This module holds those formats as types, in both directions:
//!
//! - an event parses from the host's JSON and serialises back to it (unknown fields are kept in
//!   `extra`, so a value read and written again loses nothing);
//! - a host-neutral [`Verdict`] encodes into the host's exact answer ([`Reply`]: exit status,
//!   stdout, stderr), and a command's [`Reply`] decodes into a [`Verdict`] under the host's own
//!   rules ([`Decoded`], with the parts hookloop does not act on named).
//!
//! The bridge (`hookloop hook <host>`) reads events and encodes answers; running a host's own
//! command hook inside hookloop is the other direction (write the event, decode the answer).
//!
//! Formats followed, each cited in its file: Claude Code 2.1.332 (the hooks reference and the
//! schemas of that release), Codex CLI 0.171.0 (the JSON schemas that release embeds), Gemini CLI
//! 0.61.0 (its hooks reference and the hook code of that release), Cursor (its hooks
//! documentation, `hooks.json` version 1), goose (its hooks guide, after the Open Plugins hooks
//! specification).

/// An event of a host: `base` (the fields every event of that host carries, the `Base` of the
/// file that uses it), the event's own fields, and `extra`, the fields this version does not
/// name, kept as they came so an event read and written again loses nothing. Defined before the
/// host modules so each of them can use it.
macro_rules! event_struct {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// The fields every event carries.
            #[serde(flatten)]
            pub base: Base,
            $($(#[$fdoc])* pub $field: $ty,)*
            /// Fields this version does not name, kept as they came.
            #[serde(flatten)]
            pub extra: Map<String, Value>,
        }
    };
}

pub mod claude_code;
pub mod codex;
pub mod cursor;
pub mod gemini;
pub mod goose;
pub mod nested;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hooks::{self, Hook};

/// An agent host whose hooks the bridge speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Host {
    /// Anthropic's Claude Code (`claude`).
    ClaudeCode,
    /// OpenAI's Codex CLI (`codex`).
    Codex,
    /// Google's Gemini CLI (`gemini`).
    Gemini,
    /// Cursor's agent (the editor and `cursor-agent`).
    Cursor,
    /// Block's goose.
    Goose,
}

impl Host {
    /// Every host, in the order the README lists them.
    pub const ALL: [Self; 5] = [
        Self::ClaudeCode,
        Self::Codex,
        Self::Gemini,
        Self::Cursor,
        Self::Goose,
    ];

    /// The name `hookloop hook <host>` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
            Self::Gemini => "gemini",
            Self::Cursor => "cursor",
            Self::Goose => "goose",
        }
    }

    /// The host a name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|host| host.name() == name)
    }

    /// Parses one event as this host writes it on a hook command's stdin.
    pub fn read_event(self, json: &[u8]) -> Result<HostEvent, EventError> {
        match self {
            Self::ClaudeCode | Self::Codex => nested::read(json).map(|event| HostEvent::Nested {
                host: self,
                event: Box::new(event),
            }),
            Self::Gemini => gemini::read(json).map(|event| HostEvent::Gemini(Box::new(event))),
            Self::Cursor => cursor::read(json).map(|event| HostEvent::Cursor(Box::new(event))),
            Self::Goose => goose::read(json).map(|event| HostEvent::Goose(Box::new(event))),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An event of one host, typed.
#[derive(Clone, Debug, PartialEq)]
pub enum HostEvent {
    /// Claude Code or Codex: the nested `hooks` format both read.
    Nested {
        /// Which of the two wrote it (their answers differ in detail).
        host: Host,
        /// The event.
        event: Box<nested::Event>,
    },
    /// Gemini CLI.
    Gemini(Box<gemini::Event>),
    /// Cursor.
    Cursor(Box<cursor::Event>),
    /// goose.
    Goose(Box<goose::Event>),
}

impl HostEvent {
    /// The host that wrote the event.
    pub fn host(&self) -> Host {
        match self {
            Self::Nested { host, .. } => *host,
            Self::Gemini(_) => Host::Gemini,
            Self::Cursor(_) => Host::Cursor,
            Self::Goose(_) => Host::Goose,
        }
    }

    /// The host's own name of the event (`Stop`, `AfterAgent`, `stop`...).
    pub fn name(&self) -> &str {
        match self {
            Self::Nested { event, .. } => event.name(),
            Self::Gemini(event) => event.name(),
            Self::Cursor(event) => event.name(),
            Self::Goose(event) => event.name(),
        }
    }

    /// The host's id of the session the event belongs to (Cursor's conversation id).
    pub fn session_id(&self) -> &str {
        match self {
            Self::Nested { event, .. } => &event.base().session_id,
            Self::Gemini(event) => &event.base().session_id,
            Self::Cursor(event) => &event.base().conversation_id,
            Self::Goose(event) => &event.base().session_id,
        }
    }

    /// What the event is in hookloop's terms: the porting table of the README, row by row.
    pub fn point(&self) -> Point {
        match self {
            Self::Nested { host, event } => nested::point(*host, event),
            Self::Gemini(event) => gemini::point(event),
            Self::Cursor(event) => cursor::point(event),
            Self::Goose(event) => goose::point(event),
        }
    }

    /// The host's answer that carries `verdict`, in its exact format and exit status. A verdict
    /// the event cannot carry (context where the host takes none) is answered as [`Verdict::Quiet`].
    pub fn answer(&self, verdict: &Verdict) -> Reply {
        match self {
            Self::Nested { host, event } => nested::answer(*host, event, verdict),
            Self::Gemini(event) => gemini::answer(event, verdict),
            Self::Cursor(event) => cursor::answer(event, verdict),
            Self::Goose(event) => goose::answer(event, verdict),
        }
    }

    /// What a command's `reply` to this event means under the host's rules.
    pub fn decode(&self, reply: &Reply) -> Decoded {
        match self {
            Self::Nested { host, event } => nested::decode(*host, event, reply),
            Self::Gemini(event) => gemini::decode(event, reply),
            Self::Cursor(event) => cursor::decode(event, reply),
            Self::Goose(event) => goose::decode(event, reply),
        }
    }

    /// The event as the host writes it.
    pub fn to_json(&self) -> String {
        // Events are maps of JSON values; they always serialise.
        match self {
            Self::Nested { event, .. } => serde_json::to_string(event),
            Self::Gemini(event) => serde_json::to_string(event),
            Self::Cursor(event) => serde_json::to_string(event),
            Self::Goose(event) => serde_json::to_string(event),
        }
        .unwrap_or_default()
    }
}

/// An event that is not one of the host's, or not JSON at all.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// Not a JSON object.
    #[error("the event is not a JSON object: {0}")]
    NotJson(String),
    /// The field naming the event is missing or not a string.
    #[error("the event has no `{field}` naming it")]
    Unnamed {
        /// The field the host names its events by.
        field: &'static str,
    },
    /// An event this host does not document.
    #[error("`{0}` is not an event this host documents")]
    Unknown(String),
    /// A documented event whose fields do not fit the host's format.
    #[error("the `{event}` event does not fit the host's format: {reason}")]
    Malformed {
        /// The event's name.
        event: String,
        /// What does not fit.
        reason: String,
    },
}

/// Reads a JSON object and the string its `field` holds: the first step of every host's parse.
pub(crate) fn named_object(
    json: &[u8],
    field: &'static str,
) -> Result<(serde_json::Map<String, Value>, String), EventError> {
    let value: Value =
        serde_json::from_slice(json).map_err(|e| EventError::NotJson(e.to_string()))?;
    let Value::Object(map) = value else {
        return Err(EventError::NotJson(
            "a JSON value that is not an object".into(),
        ));
    };
    let name = map
        .get(field)
        .and_then(Value::as_str)
        .ok_or(EventError::Unnamed { field })?
        .to_owned();
    Ok((map, name))
}

/// Parses an event whose name is known to be one of `T`'s.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(
    map: serde_json::Map<String, Value>,
    name: &str,
) -> Result<T, EventError> {
    serde_json::from_value(Value::Object(map)).map_err(|e| EventError::Malformed {
        event: name.to_owned(),
        reason: e.to_string(),
    })
}

/// An event in hookloop's terms: the `_` hook it asks and with what.
#[derive(Clone, Debug, PartialEq)]
pub enum Point {
    /// A session started (or resumed, or was cleared): `_SessionStart`.
    SessionStart,
    /// The history was compacted and the host takes context now: `_PostCompact`.
    PostCompact,
    /// A prompt was submitted: `_UserPromptSubmit`.
    PromptSubmitted {
        /// The prompt.
        prompt: String,
    },
    /// A tool call is about to run: `_PreToolUse`.
    BeforeTool {
        /// The tool as hookloop names it: `<server>__<tool>` for an MCP tool, else the host's name.
        tool: String,
        /// The call's arguments.
        arguments: Value,
    },
    /// A tool call ran: `_PostToolUse`.
    AfterTool {
        /// As for [`BeforeTool`](Self::BeforeTool).
        tool: String,
        /// The call's arguments.
        arguments: Value,
        /// Whether the call failed.
        is_error: bool,
        /// Its output as text.
        output: String,
    },
    /// The model ended its turn: `_Stop`.
    EndOfTurn {
        /// What the host says of this end: is it the continuation of an earlier block? `None`
        /// when the host does not say (goose).
        continuing: Option<bool>,
    },
    /// A subagent started: `_SubagentStart`.
    SubagentStarted {
        /// The host's id of the subagent.
        agent: String,
        /// Its type or description, as the host gives it.
        description: String,
    },
    /// A subagent ended its turn: `_SubagentStop`.
    SubagentEnded {
        /// The host's id of the subagent.
        agent: String,
        /// Its last text.
        result: String,
        /// As for [`EndOfTurn`](Self::EndOfTurn).
        continuing: Option<bool>,
    },
    /// The history is about to be compacted: `_PreCompact`. No host takes summary guidance from
    /// a hook, so the bridge asks nothing here.
    BeforeCompaction,
    /// The history was compacted, but this event cannot carry context (the host gives it again
    /// as a session start with source `compact`). Counted, not asked.
    Compacted,
    /// The session ended: `_SessionEnd`.
    SessionEnd,
    /// An event with no `_` hook.
    Unmapped,
}

impl Point {
    /// The hook this point asks, if any.
    pub fn hook(&self) -> Option<Hook> {
        match self {
            Self::SessionStart => Some(Hook::SessionStart),
            Self::PostCompact => Some(Hook::PostCompact),
            Self::PromptSubmitted { .. } => Some(Hook::UserPromptSubmit),
            Self::BeforeTool { .. } => Some(Hook::PreToolUse),
            Self::AfterTool { .. } => Some(Hook::PostToolUse),
            Self::EndOfTurn { .. } => Some(Hook::Stop),
            Self::SubagentStarted { .. } => Some(Hook::SubagentStart),
            Self::SubagentEnded { .. } => Some(Hook::SubagentStop),
            Self::SessionEnd => Some(Hook::SessionEnd),
            Self::BeforeCompaction | Self::Compacted | Self::Unmapped => None,
        }
    }

    /// The hook's arguments, as the hook contract of the README gives them.
    pub fn arguments(&self) -> Value {
        match self {
            Self::PromptSubmitted { prompt } => serde_json::json!({ "prompt": prompt }),
            Self::BeforeTool { tool, arguments } => {
                serde_json::json!({ "tool": tool, "arguments": arguments })
            }
            Self::AfterTool {
                tool,
                arguments,
                is_error,
                output,
            } => serde_json::json!({
                "tool": tool,
                "arguments": arguments,
                "isError": is_error,
                "output": crate::text::cut(output, hooks::MAX_HOOK_TEXT_BYTES, crate::text::Cut::Middle),
            }),
            Self::SubagentStarted { agent, description } => {
                serde_json::json!({ "agent": agent, "description": description, "prompt": "" })
            }
            Self::SubagentEnded { agent, result, .. } => {
                serde_json::json!({ "agent": agent, "result": result })
            }
            Self::SessionStart
            | Self::PostCompact
            | Self::EndOfTurn { .. }
            | Self::BeforeCompaction
            | Self::Compacted
            | Self::SessionEnd
            | Self::Unmapped => Value::Object(serde_json::Map::new()),
        }
    }
}

/// What a hook round decided for one host event, in no host's format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "text", rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing to say: the action goes ahead, no context.
    Quiet,
    /// Context for the model.
    Context(String),
    /// The action the event names is held back: a tool call denied, an end of turn objected
    /// to (the model is asked again with the text), a prompt blocked.
    Block(String),
}

/// A hook command's answer as the host reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// The exit status.
    pub exit_code: i32,
    /// What it wrote on stdout.
    pub stdout: String,
    /// What it wrote on stderr.
    pub stderr: String,
}

impl Reply {
    /// Exit 0 with `stdout`.
    pub fn ok(stdout: impl Into<String>) -> Self {
        Self {
            exit_code: 0,
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    /// Exit 0 with `value` as JSON on stdout.
    pub(crate) fn json(value: &impl Serialize) -> Self {
        // The answers are maps of strings and booleans; they always serialise.
        Self::ok(serde_json::to_string(value).unwrap_or_default())
    }
}

/// A command's reply read under its host's rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// What hookloop takes from it.
    pub verdict: Verdict,
    /// What the reply asked that hookloop does not do (rewriting a tool's input, stopping the
    /// session), named for a log line.
    pub ignored: Vec<&'static str>,
}

impl Decoded {
    pub(crate) fn quiet() -> Self {
        Self {
            verdict: Verdict::Quiet,
            ignored: Vec::new(),
        }
    }
}

/// `mcp__<server>__<tool>` (Claude Code's and Codex's name of an MCP tool) as hookloop names it,
/// `<server>__<tool>`; any other name unchanged.
pub(crate) fn tool_from_mcp_prefix(name: &str) -> String {
    match name.strip_prefix("mcp__") {
        Some(rest) if rest.contains(hooks::QUALIFIER) => rest.to_owned(),
        _ => name.to_owned(),
    }
}

/// The other way: hookloop's `<server>__<tool>` as Claude Code and Codex name an MCP tool,
/// `mcp__<server>__<tool>`; a name without a server (the built-in `agent`) unchanged.
#[cfg_attr(not(feature = "command-hooks"), allow(dead_code))]
pub(crate) fn tool_with_mcp_prefix(name: &str) -> String {
    match hooks::split_qualified(name) {
        Some(_) => format!("mcp__{name}"),
        None => name.to_owned(),
    }
}

/// A tool's response as the text `_PostToolUse` gets: a string as it is, any other JSON as JSON.
///
/// An MCP tool's result, as its content blocks (`[{"type": "text", "text"}, …]`, Claude Code's
/// form) or the whole result (`{"content": [blocks], …}`), is the text the engine gives
/// `_PostToolUse` of it: the text blocks joined by newlines, other blocks left out
/// ([`ToolOutput::joined_text`](crate::machine::ToolOutput::joined_text)).
pub(crate) fn response_text(response: &Value) -> String {
    let blocks = match response {
        Value::String(text) => return text.clone(),
        Value::Array(blocks) => Some(blocks),
        Value::Object(result) => result.get("content").and_then(Value::as_array),
        _ => None,
    };
    let typed = |b: &Value| b.get("type").is_some_and(Value::is_string);
    match blocks {
        Some(blocks) if !blocks.is_empty() && blocks.iter().all(typed) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect();
            texts.join("\n")
        }
        _ => response.to_string(),
    }
}

/// The first text of a reply the host reads as plain text, trimmed; `None` when empty.
pub(crate) fn plain(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_is_found_by_its_name() {
        for host in Host::ALL {
            assert_eq!(Host::from_name(host.name()), Some(host));
            assert_eq!(host.to_string(), host.name());
        }
        assert_eq!(Host::from_name("claude"), None);
    }

    #[test]
    fn an_mcp_tool_loses_its_prefix_and_other_names_stay() {
        assert_eq!(tool_from_mcp_prefix("mcp__todo__add"), "todo__add");
        assert_eq!(tool_from_mcp_prefix("Bash"), "Bash");
        assert_eq!(tool_from_mcp_prefix("mcp__odd"), "mcp__odd");
    }

    #[test]
    fn a_hookloop_tool_gains_the_prefix_and_comes_back_unchanged() {
        assert_eq!(tool_with_mcp_prefix("todo__add"), "mcp__todo__add");
        assert_eq!(tool_with_mcp_prefix("agent"), "agent");
        for name in ["todo__add", "fs__read_file", "agent"] {
            assert_eq!(tool_from_mcp_prefix(&tool_with_mcp_prefix(name)), name);
        }
    }

    #[test]
    fn non_json_and_unnamed_events_are_refused_saying_why() {
        for host in Host::ALL {
            let err = host.read_event(b"not json").unwrap_err();
            assert!(matches!(err, EventError::NotJson(_)), "{host}: {err}");
            let err = host.read_event(b"[1]").unwrap_err();
            assert!(matches!(err, EventError::NotJson(_)), "{host}: {err}");
            let err = host.read_event(b"{}").unwrap_err();
            assert!(matches!(err, EventError::Unnamed { .. }), "{host}: {err}");
        }
    }

    #[test]
    fn post_tool_use_output_is_capped_in_the_arguments() {
        let point = Point::AfterTool {
            tool: "t".into(),
            arguments: Value::Null,
            is_error: false,
            output: "x".repeat(40_000),
        };
        let args = point.arguments();
        assert!(args["output"].as_str().unwrap().len() <= hooks::MAX_HOOK_TEXT_BYTES);
    }
}
