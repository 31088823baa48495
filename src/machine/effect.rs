//! Orders: what the machine wants done. The driver takes them from
//! [`Machine::poll_effect`](crate::machine::Machine::poll_effect) and performs them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hooks::{Hook, ServerName};
use crate::machine::digest::RequestDigest;
use crate::machine::identity::AgentRef;
use crate::machine::message::{CallId, ToolCall};

/// An order to the driver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    /// Ask the model. The driver builds the request with
    /// [`Machine::request`](crate::machine::Machine::request) and answers with
    /// [`Input::LlmReplied`](crate::machine::Input::LlmReplied) or
    /// [`Input::LlmFailed`](crate::machine::Input::LlmFailed).
    ///
    /// The order carries the history's length and a digest of each part of the request
    /// (system, messages, tools, instruction, limits) rather than the request itself, so it
    /// costs the same at any history length and a transcript still pins all that was sent.
    CallLlm {
        /// What the request is for.
        purpose: Purpose,
        /// The history's length when the request is built.
        messages: usize,
        /// A digest of each part of the request.
        digest: RequestDigest,
    },
    /// Run these tool calls, concurrently, and answer each with
    /// [`Input::ToolFinished`](crate::machine::Input::ToolFinished) in any order.
    CallTools {
        /// The calls, in the model's order.
        calls: Vec<ToolCall>,
    },
    /// Call `hook` on each server at once, and answer each with
    /// [`Input::HookAnswered`](crate::machine::Input::HookAnswered): the order's `timeout` is the
    /// round's one deadline, and a call still unanswered when it passes is answered
    /// [`HookReply::TimedOut`](crate::machine::HookReply::TimedOut) (and dropped, which cancels it). Each server gets one call
    /// per entry of `subjects`, whose arguments are that entry, answered with its index as
    /// `subject`; with no subjects, one call with arguments `{}` and no `subject`.
    CallHooks {
        /// The hook to call.
        hook: Hook,
        /// The servers to call it on, in configuration order.
        servers: Vec<ServerName>,
        /// How long the round's calls may take, from the moment they are sent; written as
        /// `timeout_ms`.
        #[serde(rename = "timeout_ms", with = "crate::millis")]
        timeout: std::time::Duration,
        /// Session facts the servers may use.
        context: HookContext,
        /// What each call is about; empty for one call with arguments `{}`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        subjects: Vec<Value>,
    },
    /// Ask the user whether this call of a tool its server marks destructive may run, and
    /// answer with [`Input::PermissionDecided`](crate::machine::Input::PermissionDecided).
    /// The calls of one reply are asked about one at a time, in the model's order.
    AskPermission {
        /// The call to ask about.
        call: ToolCall,
    },
    /// Kill this server (its process group); it comes back through a lazy restart. No answer.
    KillServer {
        /// The server.
        server: ServerName,
    },
    /// Tell the embedder something worth showing. No answer.
    Notify {
        /// What to show.
        notice: Notice,
    },
    /// The prompt is over. No answer; the machine is idle again (or done, after `Closed`).
    Finish {
        /// Why the prompt ended.
        reason: FinishReason,
    },
}

/// What a model request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Purpose {
    /// A turn of the agent loop: the whole history, the model-visible tools.
    Turn,
    /// A compaction summary: the history from message `from` on, no tools, and the summary
    /// instruction as a final user message.
    Summary {
        /// The index of the first message summarized.
        from: usize,
    },
}

/// Session facts a hook server may use (sent as `_meta`; servers that ignore it are unaffected).
/// Inside a subagent, the counts are the subagent's own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookContext {
    /// `_Stop` (in a subagent, `_SubagentStop`) objections counted so far in this agent.
    pub objections_so_far: u32,
    /// `_Stop` (`_SubagentStop`) rounds left before the engine stops asking.
    pub budget_left: u32,
    /// Compactions done in this agent, the current one included.
    pub compactions: u32,
    /// The subagent asking (`_meta["hookloop/agent"]`); none for the top-level agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentRef>,
}

/// Something the embedder may want to show: why the agent kept working, or why it stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "notice", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Notice {
    /// A server's `_Stop` objected; the model is asked again.
    Objection {
        /// The server.
        server: ServerName,
        /// What the hook said.
        text: String,
        /// Objections the session may still make.
        budget_left: u32,
    },
    /// The model ended its turn and `_Stop` was not consulted.
    StopSkipped {
        /// Why `_Stop` was not asked.
        reason: SkipReason,
    },
    /// A `_PostCompact` answer was injected into the fresh context.
    PostCompactInjected {
        /// The server.
        server: ServerName,
        /// The text put into the fresh context.
        text: String,
    },
    /// A `_SessionStart`, `_UserPromptSubmit` or `_PostToolUse` answer was injected as context,
    /// or a `_PreCompact` answer was added to the summary instruction.
    HookInjected {
        /// The hook.
        hook: Hook,
        /// The server.
        server: ServerName,
        /// The text injected.
        text: String,
    },
    /// A server's `_PreToolUse` denied a model tool call: it did not run, and the model got an
    /// error result carrying the denial.
    ToolDenied {
        /// The server.
        server: ServerName,
        /// The qualified name of the denied tool.
        tool: String,
        /// The denial, as the hook gave it.
        text: String,
    },
    /// The history was compacted.
    Compacted {
        /// Whether the model summarized the older history (otherwise the oldest turns were dropped).
        summarized: bool,
        /// Messages in the history before.
        messages_before: usize,
        /// Messages in the history after.
        messages_after: usize,
    },
    /// A hook call ended without an answer the machine could use; it counts as no objection.
    HookFailedOpen {
        /// The server.
        server: ServerName,
        /// The hook.
        hook: Hook,
        /// Why the call gave no usable answer.
        reason: String,
    },
    /// A server sat a hook round out (it was restarting); the round went on without it.
    HookSkipped {
        /// The server.
        server: ServerName,
        /// The hook.
        hook: Hook,
        /// Why the server sat the round out.
        reason: String,
    },
    /// The user rejected a call (now, or with an earlier "always"): it did not run, and the
    /// model got an error result saying so.
    PermissionRejected {
        /// The rejected call.
        id: CallId,
        /// The qualified name of the rejected tool.
        tool: String,
        /// The rejection stands for the rest of the session.
        standing: bool,
    },
    /// The model called a tool that is a hook, or that does not exist; it was answered with
    /// `unknown tool`, and nothing ran.
    UnknownToolRefused {
        /// The name the model called.
        name: String,
    },
}

impl Notice {
    /// What happened, in one line for a person: a mark, then the words every view shows
    /// (`hookloop run`'s progress lines, `transcript show` and its page). `stop` is the hook
    /// asked at an end of turn: `_Stop`, or `_SubagentStop` for a subagent. The hook's own
    /// words, when the notice carries them, are not in the line: [`said`](Self::said) has them,
    /// for each view to cut or show whole.
    pub fn headline(&self, stop: Hook) -> String {
        match self {
            Self::Objection {
                server,
                budget_left,
                ..
            } => format!("⚑ {stop} objection from {server} ({budget_left} left in the budget)"),
            Self::StopSkipped {
                reason: SkipReason::BudgetSpent,
            } => format!("■ {stop} budget spent: the turn ends whatever the hooks say"),
            Self::StopSkipped {
                reason: SkipReason::DeclinedObjection,
            } => "■ the model ended its turn again after an objection: it declined".to_owned(),
            Self::PostCompactInjected { server, .. } => {
                format!("↺ {} from {server} re-injected", Hook::PostCompact)
            }
            Self::HookInjected {
                hook: Hook::PreCompact,
                server,
                ..
            } => format!(
                "+ {} from {server} added to the summary instruction",
                Hook::PreCompact
            ),
            Self::HookInjected { hook, server, .. } => {
                format!("+ {hook} from {server} injected as context")
            }
            Self::ToolDenied { server, tool, .. } => {
                format!("⊘ {tool} denied by {} of {server}", Hook::PreToolUse)
            }
            Self::Compacted {
                summarized,
                messages_before,
                messages_after,
            } => format!(
                "⟲ history compacted ({}): {messages_before} → {messages_after} messages",
                if *summarized {
                    "summarized"
                } else {
                    "oldest turns dropped"
                }
            ),
            Self::HookFailedOpen {
                server,
                hook,
                reason,
            } => format!("! {hook} on {server} failed open ({reason}): no objection"),
            Self::HookSkipped {
                server,
                hook,
                reason,
            } => format!("! {hook} on {server} skipped ({reason}): the round went on without it"),
            Self::PermissionRejected { tool, standing, .. } => format!(
                "⊘ {tool} rejected by the user{}: it did not run",
                if *standing { " (always)" } else { "" }
            ),
            Self::UnknownToolRefused { name } => {
                format!("✗ {name}: refused (a hook, or no such tool); nothing ran")
            }
        }
    }

    /// The words of the hook the notice reports (an objection, a denial, injected context),
    /// whole; `None` for a notice that carries none.
    pub fn said(&self) -> Option<&str> {
        match self {
            Self::Objection { text, .. }
            | Self::PostCompactInjected { text, .. }
            | Self::HookInjected { text, .. }
            | Self::ToolDenied { text, .. } => Some(text),
            Self::StopSkipped { .. }
            | Self::Compacted { .. }
            | Self::HookFailedOpen { .. }
            | Self::HookSkipped { .. }
            | Self::PermissionRejected { .. }
            | Self::UnknownToolRefused { .. } => None,
        }
    }
}

/// Why `_Stop` was not consulted at an end of turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkipReason {
    /// The session's objection budget is spent.
    BudgetSpent,
    /// The model ended its turn again right after an objection: it heard and declined.
    DeclinedObjection,
}

/// How a prompt ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// The model ended its turn, and `_Stop` let it (or was not asked).
    EndTurn,
    /// The output limit cut the model's reply.
    MaxTokens,
    /// The prompt's round cap was reached.
    MaxTurnRequests,
    /// The model refused, or a content filter cut its reply.
    Refusal,
    /// The provider stopped for a reason hookloop does not know (its name is kept here).
    OtherStop {
        /// The provider's own name for the reason.
        stop_reason: String,
    },
    /// The user cancelled.
    Cancelled,
    /// The process running the prompt ended before it did; the prompt was closed when its
    /// record was loaded ([`Input::PromptInterrupted`](crate::Input::PromptInterrupted)).
    Interrupted,
    /// The model could not be reached or answered garbage, after retries.
    Failed {
        /// What went wrong, said plainly.
        error: String,
    },
}
