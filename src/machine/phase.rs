//! The machine's state by name, and the facts it refuses.

use std::fmt;

use super::CallId;
use crate::hooks::{Hook, ServerName};

/// The machine's state, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Idle,
    Prompting,
    RunningTools,
    AwaitingStop,
    Objected,
    Summarizing,
    PostCompacting,
    /// Waiting for the user to decide whether a destructive tool call may run.
    AwaitingPermission,
    /// Waiting for the answers of another hook: `_SessionStart`, `_UserPromptSubmit`,
    /// `_PreToolUse`, `_PostToolUse`, `_PreCompact`, `_SessionEnd`, or a subagent's
    /// `_SubagentStart` or `_SubagentStop`.
    AwaitingHook(Hook),
    Done,
}

impl Phase {
    /// The phase a round of `hook` waits in: `_Stop` and `_PostCompact` keep their own names.
    pub fn of_hook(hook: Hook) -> Self {
        match hook {
            Hook::Stop => Self::AwaitingStop,
            Hook::PostCompact => Self::PostCompacting,
            Hook::SessionStart
            | Hook::UserPromptSubmit
            | Hook::PreToolUse
            | Hook::PostToolUse
            | Hook::PreCompact
            | Hook::SessionEnd
            | Hook::SubagentStart
            | Hook::SubagentStop => Self::AwaitingHook(hook),
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Self::AwaitingHook(hook) = self {
            return write!(f, "awaiting {hook}");
        }
        let name = match self {
            Self::AwaitingHook(_) => "awaiting a hook",
            Self::Idle => "idle",
            Self::Prompting => "prompting",
            Self::RunningTools => "running tools",
            Self::AwaitingStop => "awaiting _Stop",
            Self::Objected => "objected",
            Self::Summarizing => "summarizing",
            Self::PostCompacting => "awaiting _PostCompact",
            Self::AwaitingPermission => "awaiting a permission decision",
            Self::Done => "done",
        };
        f.write_str(name)
    }
}

/// A fact the machine refused. The driver (or a transcript) fed something the protocol does not
/// allow here: this is API misuse, never the fault of a model, tool or hook.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    #[error("unexpected {got} while {phase}: expected {expected}")]
    Unexpected {
        phase: Phase,
        expected: &'static str,
        got: &'static str,
    },
    #[error("result for tool call {0}, which is not awaiting a result")]
    UnknownCall(CallId),
    #[error("{hook} answer from server {server}, which was not asked or already answered")]
    UnexpectedHookAnswer { server: ServerName, hook: Hook },
    #[error("permission decision for call {0}, which is not awaiting one")]
    UnexpectedDecision(CallId),
    #[error("the session is closed: {got} refused")]
    Closed { got: &'static str },
}
