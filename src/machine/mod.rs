//! The engine's core: a deterministic, sans-IO state machine for one agent session.
//!
//! # Driving contract
//!
//! The machine never performs I/O, reads a clock or the environment. A driver:
//!
//! 1. feeds each fact with [`Machine::handle`] (an [`Input`]: the user prompted, the model
//!    replied, a tool finished, a hook answered or timed out, the user cancelled);
//! 2. then drains [`Machine::poll_effect`] until it yields `None`, performing each [`Effect`]
//!    (call the model, run tools, call hooks, kill a server, notify, finish);
//! 3. answers every effect that expects an answer with the fact it names, and repeats.
//!
//! The same facts in the same order always give the same effects: that is what lets a transcript
//! replay a session exactly. Facts the current state does not expect are refused with a
//! [`MachineError`] that names the state, what it expected and what came; the machine is left
//! as it was.
//!
//! # States
//!
//! ```text
//!   ┌──────┐ Prompted  ┌───────────┐ tool calls ┌──────────────┐
//!   │ Idle │──────────►│ Prompting │───────────►│ RunningTools │──┐ all results
//!   └──────┘           └───────────┘◄───────────└──────────────┘  │ (or over budget:
//!      ▲  ▲              │  end_turn                ▲  ▲           │  Summarizing first)
//!      │  │              ▼                          │  └───────────┘
//!      │  │ none   ┌──────────────┐ objection ┌──────────┐
//!      │  └────────│ AwaitingStop │──────────►│ Objected │ end_turn again: finish
//!      │           └──────────────┘           └──────────┘
//!      │  over budget before a request: Summarizing ─► PostCompacting ─► (where it was going)
//!      │  a destructive call, when the policy asks: AwaitingPermission ─► RunningTools
//!      │
//!      └── Finish: max_tokens, refusal, round cap, model failure, cancel (superstate `live`)
//!   Closed (from any state): Done, absorbing.
//! ```
//!
//! `Summarizing` and `PostCompacting` together are the design's `Compacting`: split, each holds
//! only the data valid while it waits. `RunningTools` exists so tool results are collected in a
//! state that knows which calls are outstanding. `Idle` is where a prompt ends while the session
//! lives on (its counters and history survive); `Done` is the end of the session.
//!
//! Every sovereignty rule of the spec is a guard on one of these transitions; the unit tests at
//! the end of this file are named after the rules.

mod catalog;
mod digest;
mod effect;
#[cfg(feature = "testing")]
mod fingerprint;
#[cfg(feature = "testing")]
pub use self::fingerprint::{Canon, Grain, SizeRegion};
mod history;
mod input;
mod message;
mod policy;
mod round;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;

use serde_json::{Map, Value, json};
use statig::prelude::*;

use self::catalog::Tools;
pub use self::digest::{Digest, RequestDigest};
pub use self::effect::{Effect, FinishReason, HookContext, Notice, Purpose, SkipReason};
pub use self::history::{BYTES_PER_TOKEN, History};
pub use self::input::{
    Catalog, HookReply, Input, LlmReply, PermissionDecision, ServerTools, StopReason, ToolHints,
    ToolInfo, Usage,
};
pub use self::message::{CallId, Content, Message, ToolCall, ToolOutput, ToolSpec};
pub use self::policy::{Counters, Media, Policy};
use self::round::{Answer, HookRound, ToolBatch};
use crate::hooks::{self, Hook, ServerName};

/// The instruction that ends a compaction summary request.
pub const SUMMARY_INSTRUCTION: &str = "Summarize this session so far so that the work can continue \
from the summary alone. Cover: the original task; what has been done; key decisions and facts \
learned (names, paths, values); what remains; and the next step. Answer with the summary only.";

/// The words that open a compacted context, before the summary.
pub const SUMMARY_PREFIX: &str =
    "Summary of the session so far (earlier messages were compacted):\n\n";

/// The text of the error result a call the user rejected gets.
pub fn rejected_text(name: &str) -> String {
    format!("the user rejected this call of {name}: it did not run")
}

/// The text of the error result a call to an unknown tool, or to a hook, gets.
pub fn unknown_tool_text(name: &str) -> String {
    format!("unknown tool: {name}")
}

/// One session's state machine. See the [module docs](self) for the driving contract.
///
/// A clone is an independent session from the moment it is taken (its history gets a lineage of
/// its own): what an explorer of the state space forks at every branch.
#[derive(Clone)]
pub struct Machine {
    sm: statig::blocking::InitializedStateMachine<Core>,
    outbox: Outbox,
}

impl Machine {
    /// A machine for a new session, idle, with an empty catalog.
    pub fn new(policy: Policy, system_prompt: Option<String>) -> Self {
        let core = Core {
            history: History::new(policy.media.clone()),
            policy,
            system_prompt,
            tools: Tools::default(),
            counters: Counters::default(),
            turn: Turn::default(),
            post_compact_owed: false,
            session_started: false,
            session_ended: false,
            standing: BTreeMap::new(),
            summary_instruction: SUMMARY_INSTRUCTION.to_owned(),
            next_id: 0,
        };
        let mut outbox = Outbox::default();
        let sm = core
            .uninitialized_state_machine()
            .init_with_context(&mut outbox);
        Self { sm, outbox }
    }

    /// Feeds one fact. On error nothing changed, and the error says what was expected.
    pub fn handle(&mut self, input: Input) -> Result<(), MachineError> {
        tracing::trace!(?input, "fact");
        self.sm.handle_with_context(&input, &mut self.outbox);
        match self.outbox.error.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// The next order, if any. Drain until `None` after every [`handle`](Self::handle).
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.outbox.effects.pop_front()
    }

    /// How many orders wait in the outbox.
    pub fn pending_effects(&self) -> usize {
        self.outbox.effects.len()
    }

    /// The request an [`Effect::CallLlm`] with this purpose stands for, borrowed from the
    /// machine's history so that building it costs nothing at any history length.
    pub fn request(&self, purpose: Purpose) -> LlmRequest<'_> {
        self.sm.inner().request(purpose)
    }

    /// Where the machine is.
    pub fn phase(&self) -> Phase {
        self.sm.state().phase()
    }

    /// The conversation so far.
    pub fn history(&self) -> &[Message] {
        self.sm.inner().history.messages()
    }

    /// The session-wide counters.
    pub fn counters(&self) -> &Counters {
        &self.sm.inner().counters
    }

    /// The settings the machine enforces.
    pub fn policy(&self) -> &Policy {
        &self.sm.inner().policy
    }

    /// The tools the model is offered: never a hook.
    pub fn model_tools(&self) -> &[ToolSpec] {
        &self.sm.inner().tools.model
    }

    /// Servers whose `hook` the machine calls, in configuration order.
    pub fn hook_servers(&self, hook: Hook) -> &[ServerName] {
        self.sm.inner().tools.servers(hook)
    }
}

impl fmt::Debug for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Machine")
            .field("phase", &self.phase())
            .field("messages", &self.history().len())
            .field("counters", self.counters())
            .field("pending_effects", &self.outbox.effects.len())
            .finish()
    }
}

/// A model request, as the machine sees it; providers translate it to their dialect.
#[derive(Clone, Copy, Debug)]
pub struct LlmRequest<'a> {
    pub purpose: Purpose,
    pub system: Option<&'a str>,
    /// The conversation to send. It may begin with an assistant message (a summary request
    /// starts at the newest history that fits); it never holds a tool result without its call.
    pub messages: &'a [Message],
    /// The tools to offer; empty for a summary.
    pub tools: &'a [ToolSpec],
    /// A final user message to send after `messages` (the summary instruction).
    pub instruction: Option<&'a str>,
    pub max_output_tokens: u32,
    /// What this request shares with earlier ones of the same session, so a provider may
    /// reuse what it encoded for them; `None` promises nothing.
    pub lineage: Option<Lineage>,
}

/// Names what a request borrows, so work done for one request can be reused for the next.
///
/// Two requests with the same `history` have `messages` of which the shorter is a prefix of the
/// longer; two with the same `tools` offer the same tools. The numbers are identities, unique in
/// the process, and nothing the machine decides depends on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lineage {
    /// The history's current run of appends.
    pub history: u64,
    /// The catalog the tools come from; 0 when there are none.
    pub tools: u64,
}

/// A lineage number never handed out before in this process.
pub(crate) fn fresh_lineage() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

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
    /// `_PreToolUse`, `_PostToolUse`, `_PreCompact` or `_SessionEnd`.
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
            | Hook::SessionEnd => Self::AwaitingHook(hook),
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

/// The statig context: where handlers put their orders and their refusals.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outbox {
    effects: VecDeque<Effect>,
    error: Option<MachineError>,
}

impl Outbox {
    fn emit(&mut self, effect: Effect) {
        tracing::trace!(?effect, "order");
        self.effects.push_back(effect);
    }

    fn notify(&mut self, notice: Notice) {
        self.emit(Effect::Notify { notice });
    }

    fn refuse(&mut self, error: MachineError) -> Outcome<State> {
        self.error = Some(error);
        Handled
    }

    fn unexpected(&mut self, phase: Phase, expected: &'static str, got: &Input) -> Outcome<State> {
        self.refuse(MachineError::Unexpected {
            phase,
            expected,
            got: got.kind(),
        })
    }
}

/// Shared storage: what lives for the whole session, in every state.
#[derive(Clone)]
pub(crate) struct Core {
    policy: Policy,
    system_prompt: Option<String>,
    history: History,
    tools: Tools,
    counters: Counters,
    turn: Turn,
    /// A `_PostCompact` round was cut short by a cancel: the compacted context still lacks its
    /// answers, so the next prompt asks again before its first request.
    post_compact_owed: bool,
    /// `_SessionStart` had its chance (it is asked once per session, at the first prompt).
    session_started: bool,
    /// `_SessionEnd` had its chance (it is asked at most once).
    session_ended: bool,
    /// The user's "always" decisions, by model-facing tool name: true allows, false rejects.
    standing: BTreeMap<String, bool>,
    /// The instruction of the next summary request: the fixed one, plus any `_PreCompact`
    /// guidance of this compaction.
    summary_instruction: String,
    /// Source of the machine's own call ids (hook pairs, renamed model ids).
    next_id: u64,
}

/// Data of the running prompt.
#[derive(Clone, Debug, Default)]
struct Turn {
    text: String,
    /// Model requests made for this prompt (summaries excluded).
    rounds: u32,
    /// A compaction happened since the model last replied; never compact twice in a row, which
    /// bounds compaction when even a fresh context is over budget.
    compacted: bool,
    /// Index of the prompt's user message in the history.
    pinned: usize,
}

/// Which waiting state a model request leads to; it survives a compaction in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resume {
    Prompting,
    Objected,
}

/// What a hook round leads to once every server has answered: the continuation of the one
/// hook-round state, each applied by the function named after its hook.
#[derive(Clone, Debug)]
pub(crate) enum Then {
    /// `on_session_start`, then the rest of the prompt's start.
    SessionStart,
    /// `on_user_prompt_submit`, then the rest of the prompt's start.
    UserPromptSubmit,
    /// `on_pre_tool_use`: deny, then run what is left of the batch.
    PreToolUse { batch: ToolBatch },
    /// `on_post_tool_use`, then the next request.
    PostToolUse,
    /// `on_stop`: object, or end the prompt.
    Stop,
    /// `on_pre_compact`, then the summary request.
    PreCompact { resume: Resume },
    /// `on_post_compact`, then the request it was going to make.
    PostCompact { resume: Resume },
    /// `on_session_end`: the session is over.
    SessionEnd,
}

/// Where the start of a prompt is, between its hooks and its first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PromptStage {
    SessionStart,
    UserPromptSubmit,
    OwedPostCompact,
    Request,
}

#[state_machine(
    initial = "State::idle()",
    state(derive(Debug, Clone)),
    superstate(derive(Debug)),
    visibility = "pub(crate)",
    after_transition = "Self::after_transition"
)]
impl Core {
    /// No prompt is running. Accepts: `Prompted` → the prompt's hooks (`_SessionStart` at the
    /// first, `_UserPromptSubmit`, an owed `_PostCompact`), then a model request (Prompting), or
    /// Summarizing when the history is over budget; `CatalogChanged` and
    /// `PermissionSettingChanged` (stays); `Cancelled`
    /// (nothing to cancel: stays); `Closed` → `_SessionEnd`, or Done.
    #[state]
    fn idle(&mut self, context: &mut Outbox, event: &Input) -> Outcome<State> {
        match event {
            Input::Prompted { text } => {
                self.turn = Turn {
                    text: text.clone(),
                    rounds: 0,
                    compacted: false,
                    pinned: self.history.len(),
                };
                self.history.push(Message::user(text.clone()));
                self.start_prompt(context, PromptStage::SessionStart)
            }
            Input::CatalogChanged { catalog } => {
                self.tools = Tools::new(catalog, &self.policy.hook_servers);
                Handled
            }
            Input::PermissionSettingChanged { ask } => {
                self.policy.ask_permission = *ask;
                Handled
            }
            Input::Cancelled => Handled,
            Input::Closed => self.end_session(context),
            Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. } => context.unexpected(Phase::Idle, "a prompt", event),
        }
    }

    /// Waiting for the model's reply to a turn. Accepts: `LlmReplied` → RunningTools (tool
    /// calls), AwaitingStop (a genuine end of turn with `_Stop` to ask), Prompting again (a
    /// paused turn), or Idle (any other end); `LlmFailed` → Idle.
    #[state(superstate = "live")]
    fn prompting(&mut self, context: &mut Outbox, event: &Input) -> Outcome<State> {
        self.await_reply(context, event, Resume::Prompting)
    }

    /// Waiting for the results of one reply's tool calls. Accepts: `ToolFinished` for an
    /// outstanding call (stays, or once all are in → the next model request); `Cancelled` and
    /// `Closed` answer every outstanding call with `cancelled`, so the history stays valid,
    /// then defer to `live`.
    #[state(superstate = "live")]
    fn running_tools(
        &mut self,
        batch: &mut ToolBatch,
        context: &mut Outbox,
        event: &Input,
    ) -> Outcome<State> {
        match event {
            Input::ToolFinished { id, output } => match batch.answer(id, output) {
                Err(error) => context.refuse(error),
                Ok(false) => Handled,
                Ok(true) => {
                    let batch = std::mem::take(batch);
                    self.tools_done(context, batch)
                }
            },
            Input::Cancelled | Input::Closed => {
                let batch = std::mem::take(batch);
                self.record_results(batch);
                Super
            }
            Input::CatalogChanged { .. } => Super,
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(Phase::RunningTools, "a tool result", event)
            }
        }
    }

    /// Waiting for the user's decision on `batch.ran[at]`, a call of a tool its server marks
    /// destructive. Accepts: `PermissionDecided` for that call → the next call that needs a
    /// decision (stays), or the batch runs (RunningTools), or, every call rejected, the next
    /// request. `Cancelled` and `Closed` answer every call of the batch `cancelled`, then
    /// defer to `live`.
    #[state(superstate = "live")]
    fn awaiting_permission(
        &mut self,
        batch: &mut ToolBatch,
        at: &mut usize,
        context: &mut Outbox,
        event: &Input,
    ) -> Outcome<State> {
        match event {
            Input::PermissionDecided { id, decision } => {
                let Some(call) = batch.ran.get(*at).filter(|call| call.id == *id) else {
                    return context.refuse(MachineError::UnexpectedDecision(id.clone()));
                };
                if decision.is_standing() {
                    self.standing.insert(call.name.clone(), decision.allows());
                }
                let mut batch = std::mem::take(batch);
                let mut from = *at;
                if decision.allows() {
                    from += 1;
                } else {
                    reject(context, &mut batch, from, decision.is_standing());
                }
                self.gate_batch(context, batch, from)
            }
            Input::Cancelled | Input::Closed => {
                let batch = std::mem::take(batch);
                self.record_results(batch);
                Super
            }
            Input::CatalogChanged { .. } => Super,
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(Phase::AwaitingPermission, "a permission decision", event)
            }
        }
    }

    /// Waiting for one hook's answers from every allowed server that has it (the design's one
    /// hook-round state; `then` says what the answers lead to). Accepts: `HookAnswered` for an
    /// awaited call (stays, or once all are in → the continuation, applied by the function
    /// named after the hook). `Cancelled` answers the calls of a gated batch `cancelled`, leaves
    /// a `_PostCompact` round owed to the next prompt, and defers to `live`; `Closed` likewise.
    /// While `_SessionEnd` runs, `Cancelled` stops waiting (→ Done) and `Closed` changes nothing.
    #[state(superstate = "live")]
    fn hooking(
        &mut self,
        round: &mut HookRound,
        then: &mut Then,
        context: &mut Outbox,
        event: &Input,
    ) -> Outcome<State> {
        match event {
            Input::HookAnswered {
                server,
                hook,
                reply,
                subject,
            } => {
                if let Err(error) =
                    self.take_hook_answer(context, round, server, *hook, *subject, reply)
                {
                    return context.refuse(error);
                }
                if !round.is_complete() {
                    return Handled;
                }
                let round = std::mem::replace(round, HookRound::new(round.hook, Vec::new(), 0));
                let then = std::mem::replace(then, Then::SessionEnd);
                self.conclude_round(context, round, then)
            }
            Input::Cancelled | Input::Closed if matches!(then, Then::SessionEnd) => match event {
                Input::Cancelled => Transition(State::done()),
                _ => Handled,
            },
            Input::Cancelled | Input::Closed => {
                match std::mem::replace(then, Then::SessionEnd) {
                    Then::PreToolUse { batch } => self.record_results(batch),
                    Then::PostCompact { .. } => {
                        if matches!(event, Input::Cancelled) {
                            self.post_compact_owed = true;
                        }
                    }
                    Then::SessionStart
                    | Then::UserPromptSubmit
                    | Then::PostToolUse
                    | Then::Stop
                    | Then::PreCompact { .. }
                    | Then::SessionEnd => {}
                }
                Super
            }
            Input::CatalogChanged { .. } => Super,
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(Phase::of_hook(round.hook), "a hook answer", event)
            }
        }
    }

    /// Waiting for the model's reply after an objection. Accepts: `LlmReplied` → RunningTools
    /// (tool calls clear the latch), Idle with end_turn (it ended again: the model heard and
    /// declined, and `_Stop` is not asked), Objected again (a paused turn), Idle (other ends);
    /// `LlmFailed` → Idle.
    #[state(superstate = "live")]
    fn objected(&mut self, context: &mut Outbox, event: &Input) -> Outcome<State> {
        self.await_reply(context, event, Resume::Objected)
    }

    /// Waiting for the compaction summary. Accepts: `LlmReplied` (its trimmed text, if any, is
    /// the summary) or `LlmFailed` (fall back to dropping the oldest whole turns) → the fresh
    /// context, then PostCompacting, or straight to the request it was going to make.
    #[state(superstate = "live")]
    fn summarizing(
        &mut self,
        resume: &mut Resume,
        context: &mut Outbox,
        event: &Input,
    ) -> Outcome<State> {
        match event {
            Input::LlmReplied { reply } => {
                let summary = reply.text.trim();
                self.compact(context, (!summary.is_empty()).then_some(summary), *resume)
            }
            Input::LlmFailed { error } => {
                tracing::warn!(%error, "compaction summary failed; dropping the oldest turns");
                self.compact(context, None, *resume)
            }
            Input::CatalogChanged { .. } | Input::Cancelled | Input::Closed => Super,
            Input::Prompted { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(Phase::Summarizing, "the summary", event)
            }
        }
    }

    /// Every state of a running prompt. Accepts: `Cancelled` → Idle (finish `cancelled`);
    /// `Closed` → finish `cancelled`, then `_SessionEnd` or Done; `CatalogChanged` (stays). Substates handle the
    /// rest, so anything else reaching here is refused.
    #[superstate]
    fn live(&mut self, context: &mut Outbox, event: &Input) -> Outcome<State> {
        match event {
            Input::Cancelled => self.finish(context, FinishReason::Cancelled),
            Input::Closed => {
                context.emit(Effect::Finish {
                    reason: FinishReason::Cancelled,
                });
                self.end_session(context)
            }
            Input::CatalogChanged { catalog } => {
                self.tools = Tools::new(catalog, &self.policy.hook_servers);
                Handled
            }
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(Phase::Prompting, "a fact of the running prompt", event)
            }
        }
    }

    /// The session is closed. Absorbing: `Closed` again is accepted and changes nothing;
    /// everything else is refused.
    #[state]
    fn done(context: &mut Outbox, event: &Input) -> Outcome<State> {
        match event {
            Input::Closed => Handled,
            Input::Prompted { .. }
            | Input::CatalogChanged { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. }
            | Input::Cancelled => context.refuse(MachineError::Closed { got: event.kind() }),
        }
    }
}

impl Core {
    /// Prompting and Objected wait for the same fact; only what a second end of turn means
    /// differs, and `on_reply` decides that from `resume`.
    fn await_reply(
        &mut self,
        context: &mut Outbox,
        event: &Input,
        resume: Resume,
    ) -> Outcome<State> {
        let phase = match resume {
            Resume::Prompting => Phase::Prompting,
            Resume::Objected => Phase::Objected,
        };
        match event {
            Input::LlmReplied { reply } => self.on_reply(context, reply, resume),
            Input::LlmFailed { error } => self.finish(
                context,
                FinishReason::Failed {
                    error: error.clone(),
                },
            ),
            Input::CatalogChanged { .. } | Input::Cancelled | Input::Closed => Super,
            Input::Prompted { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(phase, "the model's reply", event)
            }
        }
    }

    fn after_transition(&mut self, source: &State, target: &State, _context: &mut Outbox) {
        tracing::debug!(from = %source.phase(), to = %target.phase(), "transition");
    }

    /// Asks the model for the next turn, unless a guard says otherwise: the round cap ends the
    /// prompt, and a history over budget is compacted first (at most once between replies).
    fn request_turn(&mut self, context: &mut Outbox, resume: Resume) -> Outcome<State> {
        let cap = self.policy.max_rounds;
        if cap != 0 && self.turn.rounds >= cap {
            return self.finish(context, FinishReason::MaxTurnRequests);
        }
        if !self.turn.compacted && self.over_budget() && self.history.fitting_suffix(0) > 0 {
            self.turn.compacted = true;
            self.counters.compactions += 1;
            self.summary_instruction = SUMMARY_INSTRUCTION.to_owned();
            return match self.ask(context, Hook::PreCompact, Vec::new()) {
                Some(round) => Transition(State::hooking(round, Then::PreCompact { resume })),
                None => self.request_summary(context, resume),
            };
        }
        self.turn.rounds += 1;
        self.history.mark_request();
        context.emit(self.call_llm(Purpose::Turn));
        match resume {
            Resume::Prompting => Transition(State::prompting()),
            Resume::Objected => Transition(State::objected()),
        }
    }

    /// Asks the model for the compaction summary of the newest history that fits.
    fn request_summary(&mut self, context: &mut Outbox, resume: Resume) -> Outcome<State> {
        let fixed =
            self.system_prompt.as_ref().map_or(0, String::len) + self.summary_instruction.len();
        let room = self
            .policy
            .context_budget()
            .saturating_sub((fixed as u64).div_ceil(BYTES_PER_TOKEN));
        let from = self.history.fitting_suffix(room);
        context.emit(self.call_llm(Purpose::Summary { from }));
        Transition(State::summarizing(resume))
    }

    /// The request an [`Effect::CallLlm`] with this purpose stands for.
    fn request(&self, purpose: Purpose) -> LlmRequest<'_> {
        let all = self.history.messages();
        match purpose {
            Purpose::Turn => LlmRequest {
                purpose,
                system: self.system_prompt.as_deref(),
                messages: all,
                tools: &self.tools.model,
                instruction: None,
                max_output_tokens: self.policy.max_output_tokens,
                lineage: Some(Lineage {
                    history: self.history.lineage(),
                    tools: self.tools.lineage,
                }),
            },
            Purpose::Summary { from } => LlmRequest {
                purpose,
                system: self.system_prompt.as_deref(),
                messages: &all[from.min(all.len())..],
                tools: &[],
                instruction: Some(&self.summary_instruction),
                max_output_tokens: self.policy.max_output_tokens,
                // A summary starts wherever the budget allows and is rare: nothing to reuse.
                lineage: None,
            },
        }
    }

    /// The order to send `request(purpose)`, pinning every part of it.
    fn call_llm(&self, purpose: Purpose) -> Effect {
        let request = self.request(purpose);
        // The offered tools' digest is kept with the catalog; a summary offers none.
        let tools = if request.tools.is_empty() {
            Digest::of_tools(&[])
        } else {
            self.tools.digest
        };
        Effect::CallLlm {
            purpose,
            messages: self.history.len(),
            digest: RequestDigest::of(
                request.system,
                self.history.digest(),
                tools,
                request.instruction,
                request.max_output_tokens,
            ),
        }
    }

    fn over_budget(&self) -> bool {
        let fixed = self.system_prompt.as_ref().map_or(0, String::len) + self.tools.bytes;
        self.history.estimate_tokens(fixed) > self.policy.context_budget()
    }

    fn finish(&mut self, context: &mut Outbox, reason: FinishReason) -> Outcome<State> {
        context.emit(Effect::Finish { reason });
        Transition(State::idle())
    }

    /// A model reply, in Prompting (`resume` = Prompting) or right after an objection.
    fn on_reply(
        &mut self,
        context: &mut Outbox,
        reply: &LlmReply,
        resume: Resume,
    ) -> Outcome<State> {
        self.turn.compacted = false;
        // A usage block without input tokens (0, or left out and defaulted) measures nothing:
        // anchoring on it would zero the context estimate and put off compaction.
        if let Some(usage) = reply.usage.filter(|usage| usage.input_tokens > 0) {
            self.history.note_usage(usage.input_tokens);
        }
        if !reply.tool_calls.is_empty() {
            let calls = self.unique_ids(&reply.tool_calls);
            self.history.push(Message::Assistant {
                text: reply.text.clone(),
                tool_calls: calls.clone(),
            });
            return match &reply.stop {
                StopReason::ToolUse
                | StopReason::EndTurn
                | StopReason::StopSequence
                | StopReason::PauseTurn => self.start_tools(context, calls),
                // A reply cut short may carry truncated calls, and one that stopped for an
                // unknown reason may too: answer them unrun, then stop.
                StopReason::MaxTokens
                | StopReason::Refusal
                | StopReason::ContentFilter
                | StopReason::Other(_) => {
                    let reason = finish_reason(&reply.stop);
                    for call in calls {
                        let text = format!("not run: the reply ended with {:?}", reply.stop);
                        self.history.push(Message::ToolResult {
                            call_id: call.id,
                            output: ToolOutput::error(text),
                        });
                    }
                    self.finish(context, reason)
                }
            };
        }
        // An empty assistant message is invalid for some providers and says nothing.
        if !reply.text.is_empty() {
            self.history.push(Message::Assistant {
                text: reply.text.clone(),
                tool_calls: Vec::new(),
            });
        }
        match &reply.stop {
            StopReason::EndTurn | StopReason::StopSequence => self.on_end_turn(context, resume),
            StopReason::PauseTurn => self.request_turn(context, resume),
            StopReason::ToolUse => {
                tracing::warn!(
                    "the model stopped for tool use but called no tool; ending the turn"
                );
                self.finish(context, FinishReason::EndTurn)
            }
            // Only a genuine end of turn asks `_Stop`: an unknown reason may be a cut.
            StopReason::MaxTokens
            | StopReason::Refusal
            | StopReason::ContentFilter
            | StopReason::Other(_) => self.finish(context, finish_reason(&reply.stop)),
        }
    }

    /// A genuine end of turn: ask `_Stop`, unless a sovereignty rule says not to.
    fn on_end_turn(&mut self, context: &mut Outbox, resume: Resume) -> Outcome<State> {
        if self.tools.servers(Hook::Stop).is_empty() || self.policy.stop_max_rejections == 0 {
            return self.finish(context, FinishReason::EndTurn);
        }
        // Consecutive end_turn: the model heard the objection and declined.
        if resume == Resume::Objected {
            context.notify(Notice::StopSkipped {
                reason: SkipReason::DeclinedObjection,
            });
            return self.finish(context, FinishReason::EndTurn);
        }
        if self.counters.budget_left(&self.policy) == 0 {
            context.notify(Notice::StopSkipped {
                reason: SkipReason::BudgetSpent,
            });
            return self.finish(context, FinishReason::EndTurn);
        }
        match self.ask(context, Hook::Stop, Vec::new()) {
            Some(round) => Transition(State::hooking(round, Then::Stop)),
            None => self.finish(context, FinishReason::EndTurn),
        }
    }

    /// `_Stop`'s rule: any non-empty answer is an objection, injected, and the model is asked
    /// again (once per round, whatever the number of objecting servers).
    fn on_stop(&mut self, context: &mut Outbox, round: HookRound) -> Outcome<State> {
        let mut objections = round
            .said()
            .map(|(_, server, text)| (server, text))
            .peekable();
        if objections.peek().is_none() {
            return self.finish(context, FinishReason::EndTurn);
        }
        self.counters.objections += 1;
        let budget_left = self.counters.budget_left(&self.policy);
        for (server, text) in objections {
            self.inject_hook_pair(Hook::Stop, &server, &text);
            context.notify(Notice::Objection {
                server,
                text,
                budget_left,
            });
        }
        self.request_turn(context, Resume::Objected)
    }

    /// Applies the sovereignty rules to one server's hook answer.
    fn take_hook_answer(
        &mut self,
        context: &mut Outbox,
        round: &mut HookRound,
        server: &ServerName,
        hook: Hook,
        subject: Option<u32>,
        reply: &HookReply,
    ) -> Result<(), MachineError> {
        let unexpected = || MachineError::UnexpectedHookAnswer {
            server: server.clone(),
            hook,
        };
        if hook != round.hook {
            return Err(unexpected());
        }
        let subject = subject.map_or(0, |s| usize::try_from(s).unwrap_or(usize::MAX));
        let slot = round.waiting_slot(server, subject).ok_or_else(unexpected)?;
        let failed_open = |reason: String| {
            tracing::warn!(%server, %hook, %reason, "hook failed open: no objection");
            Notice::HookFailedOpen {
                server: server.clone(),
                hook,
                reason,
            }
        };
        *slot = match reply {
            HookReply::Text { text } => {
                self.counters.record_answer(server);
                let text = text.trim();
                if text.is_empty() {
                    Answer::Quiet
                } else {
                    Answer::Said(text.to_owned())
                }
            }
            HookReply::ErrorResult { text } => {
                self.counters.record_answer(server);
                context.notify(failed_open(format!("error result: {text}")));
                Answer::Quiet
            }
            HookReply::Failed { error } => {
                context.notify(failed_open(format!("call failed: {error}")));
                Answer::Quiet
            }
            HookReply::Skipped { reason } => {
                tracing::info!(%server, %hook, %reason, "server skipped for this hook round");
                context.notify(Notice::HookSkipped {
                    server: server.clone(),
                    hook,
                    reason: reason.clone(),
                });
                Answer::Quiet
            }
            HookReply::TimedOut => {
                context.notify(failed_open(format!(
                    "no answer within {} ms",
                    self.policy.hook_timeout_ms
                )));
                if self.counters.record_timeout(server) {
                    tracing::warn!(%server, "second consecutive hook timeout: killing the server");
                    context.emit(Effect::KillServer {
                        server: server.clone(),
                    });
                }
                Answer::Quiet
            }
        };
        Ok(())
    }

    /// Starts the calls of one reply. Calls to hooks or unknown tools, and calls whose arguments
    /// are not a JSON object, are answered at once with an error and never run.
    fn start_tools(&mut self, context: &mut Outbox, calls: Vec<ToolCall>) -> Outcome<State> {
        let mut batch = ToolBatch::default();
        let mut run = Vec::new();
        for call in calls {
            let refusal = if !self.tools.names.contains(&call.name) {
                context.notify(Notice::UnknownToolRefused {
                    name: call.name.clone(),
                });
                Some(ToolOutput::error(unknown_tool_text(&call.name)))
            } else if !call.arguments.is_object() {
                Some(ToolOutput::error(invalid_arguments_text(
                    &call.name,
                    &call.arguments,
                )))
            } else {
                None
            };
            batch.ids.push(call.id.clone());
            if refusal.is_none() {
                run.push(call);
            }
            batch.results.push(refusal);
        }
        if run.is_empty() {
            self.record_results(batch);
            return self.request_turn(context, Resume::Prompting);
        }
        let subjects = run
            .iter()
            .map(|call| json!({"tool": call.name, "arguments": call.arguments}))
            .collect();
        batch.ran = run;
        match self.ask(context, Hook::PreToolUse, subjects) {
            Some(round) => Transition(State::hooking(round, Then::PreToolUse { batch })),
            None => self.run_batch(context, batch),
        }
    }

    /// Runs the batch's calls that are left, once the user has allowed each destructive one.
    fn run_batch(&mut self, context: &mut Outbox, batch: ToolBatch) -> Outcome<State> {
        self.gate_batch(context, batch, 0)
    }

    /// The permission rule, from `batch.ran[from]` on: a call of a destructive tool, when the
    /// policy asks, runs only if the user allows it. A standing decision of the session answers
    /// at once; otherwise the user is asked, one call at a time. A rejected call leaves the
    /// batch with an error result. Once no call needs a decision, the batch runs.
    fn gate_batch(
        &mut self,
        context: &mut Outbox,
        mut batch: ToolBatch,
        mut from: usize,
    ) -> Outcome<State> {
        while let Some(call) = batch.ran.get(from) {
            if !self.policy.ask_permission || !self.tools.destructive.contains(&call.name) {
                from += 1;
                continue;
            }
            match self.standing.get(&call.name) {
                Some(true) => from += 1,
                Some(false) => reject(context, &mut batch, from, true),
                None => {
                    context.emit(Effect::AskPermission { call: call.clone() });
                    return Transition(State::awaiting_permission(batch, from));
                }
            }
        }
        self.launch_batch(context, batch)
    }

    /// Runs the batch's calls that are left, or, when none is, asks the model again.
    fn launch_batch(&mut self, context: &mut Outbox, batch: ToolBatch) -> Outcome<State> {
        if batch.ran.is_empty() {
            self.record_results(batch);
            return self.request_turn(context, Resume::Prompting);
        }
        context.emit(Effect::CallTools {
            calls: batch.ran.clone(),
        });
        Transition(State::running_tools(batch))
    }

    /// Every call of a batch has its result: record them, then `_PostToolUse` on the calls that
    /// ran, then the next request.
    fn tools_done(&mut self, context: &mut Outbox, mut batch: ToolBatch) -> Outcome<State> {
        let ran = std::mem::take(&mut batch.ran);
        let subjects: Vec<Value> = ran
            .iter()
            .map(|call| {
                let output = batch
                    .ids
                    .iter()
                    .position(|id| *id == call.id)
                    .and_then(|i| batch.results[i].as_ref());
                let (is_error, text) = output.map_or((true, String::new()), |output| {
                    (output.is_error, output.joined_text())
                });
                json!({
                    "tool": call.name,
                    "arguments": call.arguments,
                    "isError": is_error,
                    "output": crate::text::cut(&text, hooks::MAX_HOOK_TEXT_BYTES, crate::text::Cut::Middle),
                })
            })
            .collect();
        self.record_results(batch);
        if subjects.is_empty() {
            return self.request_turn(context, Resume::Prompting);
        }
        match self.ask(context, Hook::PostToolUse, subjects) {
            Some(round) => Transition(State::hooking(round, Then::PostToolUse)),
            None => self.request_turn(context, Resume::Prompting),
        }
    }

    /// Appends a batch's results in call order; calls still outstanding get `cancelled`.
    fn record_results(&mut self, batch: ToolBatch) {
        for (call_id, output) in batch.ids.into_iter().zip(batch.results) {
            let output = output.unwrap_or_else(|| ToolOutput::error("cancelled"));
            self.history.push(Message::ToolResult { call_id, output });
        }
    }

    /// Gives every call an id unique in the history, renaming empty or repeated ones, so every
    /// result answers exactly one call.
    fn unique_ids(&mut self, calls: &[ToolCall]) -> Vec<ToolCall> {
        let mut seen = HashSet::new();
        calls
            .iter()
            .map(|call| {
                let mut call = call.clone();
                if call.id.0.is_empty()
                    || self.history.has_call_id(&call.id)
                    || seen.contains(&call.id)
                {
                    call.id = self.fresh_id("call");
                }
                seen.insert(call.id.clone());
                call
            })
            .collect()
    }

    fn fresh_id(&mut self, prefix: &str) -> CallId {
        loop {
            self.next_id += 1;
            let id = CallId(format!("{prefix}_hl{}", self.next_id));
            if !self.history.has_call_id(&id) {
                return id;
            }
        }
    }

    /// Injects a hook's answer as a synthetic `<server>__<hook>` call and its JSON result.
    fn inject_hook_pair(&mut self, hook: Hook, server: &ServerName, text: &str) {
        let id = self.fresh_id("hook");
        let call = ToolCall {
            id: id.clone(),
            name: hooks::qualify(server.as_str(), hook.tool_name()),
            arguments: Value::Object(Map::new()),
        };
        self.history.push(Message::Assistant {
            text: String::new(),
            tool_calls: vec![call],
        });
        let body = hooks::encode_hook_body(hook, server.as_str(), text);
        self.history.push(Message::ToolResult {
            call_id: id,
            output: ToolOutput::text(body),
        });
    }

    /// Replaces the history with a fresh context — [summary, current prompt] — or, without a
    /// summary, drops the oldest whole turns; then asks `_PostCompact`.
    fn compact(
        &mut self,
        context: &mut Outbox,
        summary: Option<&str>,
        resume: Resume,
    ) -> Outcome<State> {
        let before = self.history.len();
        match summary {
            Some(summary) => {
                self.history.replace(vec![
                    Message::user(format!("{SUMMARY_PREFIX}{summary}")),
                    Message::user(self.turn.text.clone()),
                ]);
                self.turn.pinned = 1;
            }
            None => {
                // Aim below the budget so the next round does not compact again at once.
                let target = self.policy.context_budget() / 2;
                let (_, pinned) = self.history.drop_oldest(self.turn.pinned, target);
                self.turn.pinned = pinned;
            }
        }
        context.notify(Notice::Compacted {
            summarized: summary.is_some(),
            messages_before: before,
            messages_after: self.history.len(),
        });
        self.ask_post_compact(context, resume)
    }

    /// Asks `_PostCompact` of every allowed server that has it, then makes the request `resume`
    /// names; without such servers, makes it at once.
    fn ask_post_compact(&mut self, context: &mut Outbox, resume: Resume) -> Outcome<State> {
        self.post_compact_owed = false;
        match self.ask(context, Hook::PostCompact, Vec::new()) {
            Some(round) => Transition(State::hooking(round, Then::PostCompact { resume })),
            None => self.request_turn(context, resume),
        }
    }

    /// Orders a round of `hook` on every allowed server that has it, one call per subject;
    /// `None` when no server has it.
    fn ask(&mut self, context: &mut Outbox, hook: Hook, subjects: Vec<Value>) -> Option<HookRound> {
        let servers = self.tools.servers(hook).to_vec();
        if servers.is_empty() {
            return None;
        }
        let round = HookRound::new(hook, servers.clone(), subjects.len());
        context.emit(Effect::CallHooks {
            hook,
            servers,
            timeout_ms: self.policy.hook_timeout_ms,
            context: self.hook_context(),
            subjects,
        });
        Some(round)
    }

    /// The start of a prompt, from `stage` on: `_SessionStart` (first prompt only),
    /// `_UserPromptSubmit`, an owed `_PostCompact`, then the first request.
    fn start_prompt(&mut self, context: &mut Outbox, mut stage: PromptStage) -> Outcome<State> {
        loop {
            stage = match stage {
                PromptStage::SessionStart => {
                    if !self.session_started {
                        self.session_started = true;
                        if let Some(round) = self.ask(context, Hook::SessionStart, Vec::new()) {
                            return Transition(State::hooking(round, Then::SessionStart));
                        }
                    }
                    PromptStage::UserPromptSubmit
                }
                PromptStage::UserPromptSubmit => {
                    let subject = json!({"prompt": self.turn.text});
                    if let Some(round) = self.ask(context, Hook::UserPromptSubmit, vec![subject]) {
                        return Transition(State::hooking(round, Then::UserPromptSubmit));
                    }
                    PromptStage::OwedPostCompact
                }
                PromptStage::OwedPostCompact => {
                    if self.post_compact_owed {
                        return self.ask_post_compact(context, Resume::Prompting);
                    }
                    PromptStage::Request
                }
                PromptStage::Request => return self.request_turn(context, Resume::Prompting),
            };
        }
    }

    /// Ends the session: `_SessionEnd` once, if a server has it, then Done.
    fn end_session(&mut self, context: &mut Outbox) -> Outcome<State> {
        if self.session_ended {
            return Transition(State::done());
        }
        self.session_ended = true;
        match self.ask(context, Hook::SessionEnd, Vec::new()) {
            Some(round) => Transition(State::hooking(round, Then::SessionEnd)),
            None => Transition(State::done()),
        }
    }

    /// A complete hook round leads where `then` says, through the rule named after its hook.
    fn conclude_round(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
        then: Then,
    ) -> Outcome<State> {
        match then {
            Then::SessionStart => self.on_session_start(context, round),
            Then::UserPromptSubmit => self.on_user_prompt_submit(context, round),
            Then::PreToolUse { batch } => self.on_pre_tool_use(context, round, batch),
            Then::PostToolUse => self.on_post_tool_use(context, round),
            Then::Stop => self.on_stop(context, round),
            Then::PreCompact { resume } => self.on_pre_compact(context, round, resume),
            Then::PostCompact { resume } => self.on_post_compact(context, round, resume),
            Then::SessionEnd => Self::on_session_end(round),
        }
    }

    /// Injects each non-empty answer of a context hook, in order, and tells the embedder.
    fn inject_context(&mut self, context: &mut Outbox, round: HookRound) {
        let hook = round.hook;
        for (_, server, text) in round.said() {
            self.inject_hook_pair(hook, &server, &text);
            context.notify(Notice::HookInjected { hook, server, text });
        }
    }

    /// `_SessionStart`'s rule: its answers are context, injected after the first prompt.
    fn on_session_start(&mut self, context: &mut Outbox, round: HookRound) -> Outcome<State> {
        self.inject_context(context, round);
        self.start_prompt(context, PromptStage::UserPromptSubmit)
    }

    /// `_UserPromptSubmit`'s rule: its answers are context, injected after the prompt.
    fn on_user_prompt_submit(&mut self, context: &mut Outbox, round: HookRound) -> Outcome<State> {
        self.inject_context(context, round);
        self.start_prompt(context, PromptStage::OwedPostCompact)
    }

    /// `_PreToolUse`'s rule: a non-empty answer denies its call. A denied call never runs; it is
    /// answered once, with an error result carrying every denying server's JSON body.
    fn on_pre_tool_use(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
        mut batch: ToolBatch,
    ) -> Outcome<State> {
        let mut denials: Vec<Vec<Content>> = batch.ran.iter().map(|_| Vec::new()).collect();
        for (subject, server, text) in round.said() {
            let Some(call) = batch.ran.get(subject) else {
                continue;
            };
            let body = hooks::encode_hook_body(Hook::PreToolUse, server.as_str(), &text);
            denials[subject].push(Content::Text { text: body });
            context.notify(Notice::ToolDenied {
                server,
                tool: call.name.clone(),
                text,
            });
        }
        let ran = std::mem::take(&mut batch.ran);
        for (call, denial) in ran.into_iter().zip(denials) {
            if denial.is_empty() {
                batch.ran.push(call);
                continue;
            }
            let output = ToolOutput {
                content: denial,
                is_error: true,
            };
            // The id is the batch's own and still unanswered: a denial answers it once.
            let _ = batch.answer(&call.id, &output);
        }
        self.run_batch(context, batch)
    }

    /// `_PostToolUse`'s rule: its answers are context, injected after the batch's results.
    fn on_post_tool_use(&mut self, context: &mut Outbox, round: HookRound) -> Outcome<State> {
        self.inject_context(context, round);
        self.request_turn(context, Resume::Prompting)
    }

    /// `_PreCompact`'s rule: its answers are guidance, added to the summary instruction of
    /// this compaction only; they never enter the history.
    fn on_pre_compact(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
        resume: Resume,
    ) -> Outcome<State> {
        for (_, server, text) in round.said() {
            self.summary_instruction.push_str(&format!(
                "\n\nThe summary must also keep what server {server} asks for:\n{}",
                crate::text::cut(&text, hooks::MAX_HOOK_TEXT_BYTES, crate::text::Cut::Middle)
            ));
            context.notify(Notice::HookInjected {
                hook: Hook::PreCompact,
                server,
                text,
            });
        }
        self.request_summary(context, resume)
    }

    /// `_PostCompact`'s rule: its answers are injected into the fresh context.
    fn on_post_compact(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
        resume: Resume,
    ) -> Outcome<State> {
        for (_, server, text) in round.said() {
            self.inject_hook_pair(Hook::PostCompact, &server, &text);
            context.notify(Notice::PostCompactInjected { server, text });
        }
        self.request_turn(context, resume)
    }

    /// `_SessionEnd`'s rule: a notification; its answers are ignored.
    fn on_session_end(round: HookRound) -> Outcome<State> {
        drop(round);
        Transition(State::done())
    }

    fn hook_context(&self) -> HookContext {
        HookContext {
            objections_so_far: self.counters.objections,
            budget_left: self.counters.budget_left(&self.policy),
            compactions: self.counters.compactions,
        }
    }
}

impl State {
    fn phase(&self) -> Phase {
        match self {
            Self::Idle {} => Phase::Idle,
            Self::Prompting {} => Phase::Prompting,
            Self::RunningTools { .. } => Phase::RunningTools,
            Self::Hooking { round, .. } => Phase::of_hook(round.hook),
            Self::Objected {} => Phase::Objected,
            Self::Summarizing { .. } => Phase::Summarizing,
            Self::AwaitingPermission { .. } => Phase::AwaitingPermission,
            Self::Done {} => Phase::Done,
        }
    }
}

/// Takes the rejected call `batch.ran[at]` out of those that run and answers it with an error
/// result, as a `_PreToolUse` denial is answered.
fn reject(context: &mut Outbox, batch: &mut ToolBatch, at: usize, standing: bool) {
    let call = batch.ran.remove(at);
    let output = ToolOutput::error(rejected_text(&call.name));
    // The call is the batch's own and still unanswered: a rejection answers it once.
    let _ = batch.answer(&call.id, &output);
    context.notify(Notice::PermissionRejected {
        id: call.id,
        tool: call.name,
        standing,
    });
}

fn finish_reason(stop: &StopReason) -> FinishReason {
    match stop {
        StopReason::MaxTokens => FinishReason::MaxTokens,
        StopReason::Other(reason) => FinishReason::OtherStop {
            stop_reason: reason.clone(),
        },
        StopReason::Refusal | StopReason::ContentFilter => FinishReason::Refusal,
        StopReason::EndTurn
        | StopReason::StopSequence
        | StopReason::ToolUse
        | StopReason::PauseTurn => FinishReason::EndTurn,
    }
}

fn invalid_arguments_text(name: &str, arguments: &Value) -> String {
    let got = match arguments {
        Value::String(raw) => {
            let shown = crate::text::cut(raw, 200, crate::text::Cut::Middle);
            return format!("invalid arguments for {name}: not a JSON object: {shown:?}");
        }
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    format!("invalid arguments for {name}: expected a JSON object, got {got}")
}

#[cfg(test)]
mod tests;
