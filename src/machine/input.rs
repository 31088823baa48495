//! Facts: what happened outside the machine. The driver feeds them to [`Machine::handle`].
//!
//! [`Machine::handle`]: crate::machine::Machine::handle

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hooks::{Hook, ServerName};
use crate::machine::message::{CallId, ToolCall, ToolOutput};

/// A fact the machine reacts to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
pub enum Input {
    /// The user sent a prompt. Starts a prompt when the machine is idle.
    Prompted {
        /// The prompt.
        text: String,
    },
    /// The tool catalog changed (start-up, `list_changed`, a server gone or back).
    CatalogChanged {
        /// The whole new catalog.
        catalog: Catalog,
    },
    /// The model answered the last [`Effect::CallLlm`](crate::machine::Effect::CallLlm).
    LlmReplied {
        /// The reply.
        reply: LlmReply,
    },
    /// The model request failed after the client's own retries.
    LlmFailed {
        /// What went wrong, after the client's retries.
        error: String,
    },
    /// One tool call of the last [`Effect::CallTools`](crate::machine::Effect::CallTools) ended.
    ToolFinished {
        /// The call that finished.
        id: CallId,
        /// Its result.
        output: ToolOutput,
    },
    /// One server's hook call of the last [`Effect::CallHooks`](crate::machine::Effect::CallHooks)
    /// ended, one way or another (a timeout included: time reaches the core only as facts).
    HookAnswered {
        /// The server that answered.
        server: ServerName,
        /// The hook it answered for.
        hook: Hook,
        /// Its answer.
        reply: HookReply,
        /// Which of the order's `subjects` this call was about; none when it had none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subject: Option<u32>,
    },
    /// The user decided whether the call of the last
    /// [`Effect::AskPermission`](crate::machine::Effect::AskPermission) may run.
    PermissionDecided {
        /// The call asked about.
        id: CallId,
        /// What the user decided.
        decision: PermissionDecision,
    },
    /// The front end's setting of whether destructive tool calls wait for the user's decision
    /// ([`Policy::ask_permission`](crate::Policy::ask_permission)) is now `ask`: a session
    /// restored from a record goes on under the front end's current setting, and the change is
    /// a fact so that a replay of the record follows it. Accepted between prompts.
    PermissionSettingChanged {
        /// Ask before destructive tools from now on.
        ask: bool,
    },
    /// The embedder cancelled the running prompt.
    Cancelled,
    /// The running prompt was cut by the end of the process that ran it (a crash, a kill, a
    /// power cut): written when a record that stops mid-prompt is loaded, so that the history
    /// goes on valid. Like [`Cancelled`](Self::Cancelled) it ends the prompt, with
    /// [`FinishReason::Interrupted`](crate::machine::FinishReason::Interrupted), but each call
    /// left without a result is answered with an error result saying the agent stopped
    /// ("interrupted: the agent stopped…"), an open hook round ends as if
    /// nothing was said, and a `_PostCompact` round left open is owed to the next prompt.
    /// Refused when no prompt runs.
    PromptInterrupted,
    /// The session is over; every later fact is refused.
    Closed,
}

impl Input {
    /// The fact's kind by name, for error messages and logs: the `fact` tag of its record.
    pub fn kind(&self) -> &'static str {
        InputKind::of(self).name()
    }
}

/// A fact's kind, without its data: what a refusal ([`MachineError`]) names, so that it can be
/// matched.
///
/// [`MachineError`]: crate::machine::MachineError
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputKind {
    /// [`Input::Prompted`].
    Prompted,
    /// [`Input::CatalogChanged`].
    CatalogChanged,
    /// [`Input::LlmReplied`].
    LlmReplied,
    /// [`Input::LlmFailed`].
    LlmFailed,
    /// [`Input::ToolFinished`].
    ToolFinished,
    /// [`Input::HookAnswered`].
    HookAnswered,
    /// [`Input::PermissionDecided`].
    PermissionDecided,
    /// [`Input::PermissionSettingChanged`].
    PermissionSettingChanged,
    /// [`Input::Cancelled`].
    Cancelled,
    /// [`Input::PromptInterrupted`].
    PromptInterrupted,
    /// [`Input::Closed`].
    Closed,
}

impl InputKind {
    /// The kind of `input`.
    pub fn of(input: &Input) -> Self {
        match input {
            Input::Prompted { .. } => Self::Prompted,
            Input::CatalogChanged { .. } => Self::CatalogChanged,
            Input::LlmReplied { .. } => Self::LlmReplied,
            Input::LlmFailed { .. } => Self::LlmFailed,
            Input::ToolFinished { .. } => Self::ToolFinished,
            Input::HookAnswered { .. } => Self::HookAnswered,
            Input::PermissionDecided { .. } => Self::PermissionDecided,
            Input::PermissionSettingChanged { .. } => Self::PermissionSettingChanged,
            Input::Cancelled => Self::Cancelled,
            Input::PromptInterrupted => Self::PromptInterrupted,
            Input::Closed => Self::Closed,
        }
    }

    /// The kind's name: the `fact` tag of its record.
    pub fn name(self) -> &'static str {
        match self {
            Self::Prompted => "prompted",
            Self::CatalogChanged => "catalog_changed",
            Self::LlmReplied => "llm_replied",
            Self::LlmFailed => "llm_failed",
            Self::ToolFinished => "tool_finished",
            Self::HookAnswered => "hook_answered",
            Self::PermissionDecided => "permission_decided",
            Self::PermissionSettingChanged => "permission_setting_changed",
            Self::Cancelled => "cancelled",
            Self::PromptInterrupted => "prompt_interrupted",
            Self::Closed => "closed",
        }
    }
}

impl std::fmt::Display for InputKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The user's answer to a permission request. An "always" decision stands for every later call
/// of the same tool in the session, which is then not asked about again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionDecision {
    /// Run this call.
    AllowOnce,
    /// Run this call and every later call of the same tool in this session.
    AllowAlways,
    /// Do not run this call.
    RejectOnce,
    /// Run no call of this tool for the rest of the session.
    RejectAlways,
}

impl PermissionDecision {
    /// Whether the call may run.
    pub fn allows(self) -> bool {
        match self {
            Self::AllowOnce | Self::AllowAlways => true,
            Self::RejectOnce | Self::RejectAlways => false,
        }
    }

    /// Whether the decision stands for the rest of the session.
    pub fn is_standing(self) -> bool {
        match self {
            Self::AllowAlways | Self::RejectAlways => true,
            Self::AllowOnce | Self::RejectOnce => false,
        }
    }
}

/// The model's answer to one request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmReply {
    /// The reply's text; empty when it only calls tools.
    pub text: String,
    /// The tools the model asked for, in its order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped.
    pub stop: StopReason,
    /// Tokens the provider counted, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// Why the model stopped generating, in provider-neutral terms.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model ended its turn. A genuine end: `_Stop` is consulted.
    #[default]
    EndTurn,
    /// A stop sequence ended the turn. A genuine end: `_Stop` is consulted.
    StopSequence,
    /// The model asked for tools.
    ToolUse,
    /// The output limit cut the reply.
    MaxTokens,
    /// The model declined.
    Refusal,
    /// A provider's content filter cut the reply.
    ContentFilter,
    /// The provider paused a long turn; asking again continues it.
    PauseTurn,
    /// A reason the adapter does not know, as the provider named it. The machine ends the prompt
    /// on it without asking `_Stop`, as on `MaxTokens`: nothing says the turn is complete.
    Other(String),
}

/// Token counts a provider reported for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The whole prompt, cached parts included.
    pub input_tokens: u64,
    /// Tokens of the reply.
    pub output_tokens: u64,
    /// Of `input_tokens`, how many were read from the provider's cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Of `input_tokens`, how many were written to the provider's cache.
    #[serde(default)]
    pub cache_creation_tokens: u64,
}

/// Why a hook call failed without an answer ([`HookReply::Failed`]).
///
/// An embedder matches on the variant instead of parsing the text. The text ([`Display`](fmt::Display))
/// is what the notices and the transcript views print. A record keeps only that text (a failed
/// reply is written `{"kind":"failed","error":"…"}`), so a fault read back from a record is
/// [`HookFault::Other`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
#[non_exhaustive]
pub enum HookFault {
    /// The engine asked for a server the host does not have: the engine's misuse, not the
    /// server's fault.
    NoSuchServer {
        /// The server asked for.
        server: ServerName,
    },
    /// The MCP call failed: the transport's or the protocol's message.
    Call(String),
    /// The hook's shell commands failed: their messages, joined.
    Commands(String),
    /// A fault only known by its text: a host with nothing finer to say, or a fault read back
    /// from a record.
    Other(String),
}

impl fmt::Display for HookFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchServer { server } => write!(f, "no server named {server}"),
            Self::Call(text) | Self::Commands(text) | Self::Other(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for HookFault {}

impl From<String> for HookFault {
    fn from(text: String) -> Self {
        Self::Other(text)
    }
}

impl From<&str> for HookFault {
    fn from(text: &str) -> Self {
        Self::Other(text.to_owned())
    }
}

impl From<HookFault> for String {
    fn from(fault: HookFault) -> Self {
        fault.to_string()
    }
}

/// How one server's hook call ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HookReply {
    /// A successful result; its text blocks joined. Non-empty after trimming = an objection.
    Text {
        /// The text.
        text: String,
    },
    /// The server answered with `isError`. Counts as no objection; the server is alive.
    ErrorResult {
        /// The error's text blocks, joined.
        text: String,
    },
    /// The call failed without an answer: transport error, crash, protocol error.
    Failed {
        /// What went wrong.
        error: HookFault,
    },
    /// No answer within the hook timeout.
    TimedOut,
    /// The server sat the round out: it was between lives when the round started, so it was
    /// not asked. Counts as no objection and not as a timeout.
    Skipped {
        /// Why the server was not asked.
        reason: String,
    },
}

/// Every server's tools, in server configuration order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// One entry per server.
    pub servers: Vec<ServerTools>,
}

/// The tools of one server, hooks included.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerTools {
    /// The server's configured name.
    pub server: ServerName,
    /// Its tools and hooks, in the order it lists them.
    pub tools: Vec<ToolInfo>,
}

/// One tool as its server describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// The bare name, as the server lists it.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// A JSON Schema object for the tool's arguments.
    pub input_schema: Value,
    /// What the server says about the tool's behaviour; absent when it says nothing.
    #[serde(default, skip_serializing_if = "ToolHints::is_unknown")]
    pub hints: ToolHints,
}

impl ToolInfo {
    /// A tool with no description and no hints.
    pub fn new(name: impl Into<String>, input_schema: Value) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            input_schema,
            hints: ToolHints::default(),
        }
    }
}

/// A server's hints about what a tool does (MCP tool annotations). Hints, not guarantees:
/// front ends use them to label calls, never to decide policy on a server's word alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolHints {
    /// The tool does not change its environment (`readOnlyHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The tool may destroy or overwrite things (`destructiveHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// The tool reaches outside the machine, such as the web (`openWorldHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

impl ToolHints {
    /// The server gave no hint.
    pub fn is_unknown(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(error: HookFault) -> HookReply {
        HookReply::Failed { error }
    }

    #[test]
    fn a_hook_fault_is_recorded_as_its_text_and_read_back_as_other() {
        let faults = [
            (
                HookFault::NoSuchServer {
                    server: ServerName::new("lint").unwrap(),
                },
                "no server named lint",
            ),
            (HookFault::Call("broken pipe".into()), "broken pipe"),
            (
                HookFault::Commands("exit 3; exit 4".into()),
                "exit 3; exit 4",
            ),
            (HookFault::Other("gone".into()), "gone"),
        ];
        for (fault, text) in faults {
            assert_eq!(fault.to_string(), text);
            let record = serde_json::to_string(&failed(fault.clone())).unwrap();
            assert_eq!(
                record,
                format!(r#"{{"kind":"failed","error":"{text}"}}"#),
                "the record format is the one a string error had"
            );
            let back: HookReply = serde_json::from_str(&record).unwrap();
            assert_eq!(back, failed(HookFault::Other(text.to_owned())));
        }
        let old: HookReply =
            serde_json::from_str(r#"{"kind":"failed","error":"no server named lint"}"#).unwrap();
        assert!(
            matches!(old, HookReply::Failed { error: HookFault::Other(ref t) } if t == "no server named lint"),
            "{old:?}"
        );
    }
}
