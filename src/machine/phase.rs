//! The machine's state by name, and the facts it refuses.

use std::fmt;

use super::{CallId, InputKind};
use crate::hooks::{Hook, ServerName};

/// The machine's state, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Phase {
    /// Waiting for a prompt.
    Idle,
    /// Waiting for the model's reply to a turn.
    Prompting,
    /// Waiting for tool results.
    RunningTools,
    /// Waiting for the `_Stop` round after the model ended its turn.
    AwaitingStop,
    /// Waiting for the model's reply to an objection.
    Objected,
    /// Waiting for a compaction summary.
    Summarizing,
    /// Waiting for the `_PostCompact` round after a compaction.
    PostCompacting,
    /// Waiting for the user to decide whether a destructive tool call may run.
    AwaitingPermission,
    /// Waiting for the answers of another hook: `_SessionStart`, `_UserPromptSubmit`,
    /// `_PreToolUse`, `_PostToolUse`, `_PreCompact`, `_SessionEnd`, or a subagent's
    /// `_SubagentStart` or `_SubagentStop`.
    AwaitingHook(Hook),
    /// Closed: absorbing.
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
#[non_exhaustive]
pub enum MachineError {
    /// A fact the current state does not expect.
    #[error("unexpected {got} while {phase}: expected {}", OneOf(expected))]
    Unexpected {
        /// The state the machine was in.
        phase: Phase,
        /// The facts the refusing state waits for (a running state takes a catalog change, a
        /// cancel, an interruption and the close too: they are named only when its superstate
        /// refuses).
        expected: &'static [InputKind],
        /// The fact that came.
        got: InputKind,
    },
    /// A tool result for a call that is not running.
    #[error("result for tool call {0}, which is not awaiting a result")]
    UnknownCall(CallId),
    /// A hook answer nobody is waiting for.
    #[error("{hook} answer from server {server}, which was not asked or already answered")]
    UnexpectedHookAnswer {
        /// The server named by the answer.
        server: ServerName,
        /// The hook named by the answer.
        hook: Hook,
    },
    /// A permission decision nobody asked for.
    #[error("permission decision for call {0}, which is not awaiting one")]
    UnexpectedDecision(CallId),
    /// A fact after the session closed.
    #[error("the session is closed: {got} refused")]
    Closed {
        /// The fact that came.
        got: InputKind,
    },
}

/// Kinds for a message: `a`, `a or b`.
struct OneOf(&'static [InputKind]);

impl fmt::Display for OneOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, kind) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" or ")?;
            }
            write!(f, "{kind}")?;
        }
        Ok(())
    }
}
