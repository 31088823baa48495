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
//!   ┌──────┐ Prompted ┌──────────────────────────────┐         ┌───────────┐
//!   │ Idle │─────────►│ Hooking(SessionStart,        │────────►│ Prompting │◄─────────────┐
//!   └──────┘          │         UserPromptSubmit)    │ request └───────────┘              │
//!      ▲              └──────────────────────────────┘   tool calls │     │ end_turn      │
//!      │                                                            ▼     ▼               │
//!      │   Hooking(PreToolUse) ─ deny, then ─► [AwaitingPermission] ─► RunningTools      │
//!      │   RunningTools ─ all results ─► Hooking(PostToolUse) ─ the next request ────────┤
//!      │   end_turn ─► Hooking(Stop) ─ objection ─► Objected ─ tool calls ───────────────┘
//!      │                    │                           └─ end_turn again: finish
//!      ├──── none: finish ──┘
//!      │   over budget before a request: Hooking(PreCompact) ─► Summarizing
//!      │                                 ─► Hooking(PostCompact) ─► the request it was making
//!      └── finish: max_tokens, refusal, round cap, model failure, cancel (superstate `live`)
//!   Closed (from any state): Hooking(SessionEnd), once, if a server has it; then Done, absorbing.
//! ```
//!
//! Every hook point is one state, `Hooking`, whose round waits on the allowed servers' answers
//! and whose continuation (`Then`) names the rule its answers go to; [`Phase`] (what an
//! observer sees) still tells the hook rounds apart (`AwaitingStop`, `PostCompacting`,
//! `AwaitingHook(hook)`).
//!
//! `Summarizing` and `Hooking(PostCompact)` together are the design's `Compacting`: split, each
//! holds only the data valid while it waits. `RunningTools` exists so tool results are collected in a
//! state that knows which calls are outstanding. `Idle` is where a prompt ends while the session
//! lives on (its counters and history survive); `Done` is the end of the session.
//!
//! Every sovereignty rule of the spec is a guard on one of these transitions. This file holds the
//! state handlers; what they call lives beside it, a job a file: `turn` (a prompt's course and
//! the meaning of each stop reason), `request` (when and what the model is asked), `tools` (a
//! reply's calls, gated and answered once), `rules` (hook rounds and each hook's rule). The unit
//! tests (`tests.rs`) are named after the rules.

mod agents;
pub mod bridge;
mod catalog;
mod digest;
mod effect;
#[cfg(feature = "testing")]
mod fingerprint;
#[cfg(feature = "testing")]
pub use self::fingerprint::{Canon, Grain, SizeRegion};
mod history;
mod identity;
mod input;
mod message;
mod pairing;
mod phase;
#[cfg(feature = "planted")]
pub mod planted;
// The supervisor's guards read it too.
#[cfg(not(feature = "planted"))]
pub(crate) mod planted;
mod policy;
mod request;
mod round;
mod rules;
mod tools;
mod turn;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use statig::prelude::*;

pub use self::agents::AGENT_TOOL;
use self::catalog::Tools;
pub use self::digest::{Digest, RequestDigest};
pub use self::effect::{Effect, FinishReason, HookContext, Notice, Purpose, SkipReason};
pub use self::history::History;
pub use self::identity::{AgentId, AgentRef};
pub use self::input::{
    Catalog, HookFault, HookReply, Input, InputKind, LlmReply, PermissionDecision, ServerTools,
    StopReason, ToolHints, ToolInfo, Usage,
};
pub use self::message::{CallId, Content, Message, ToolCall, ToolOutput, ToolSpec};
pub use self::pairing::check_pairing;
pub use self::phase::{MachineError, Phase};
use self::planted::Bug;
pub use self::policy::{BYTES_PER_TOKEN, Counters, Media, Policy, Subagents};
pub(crate) use self::request::fresh_lineage;
pub use self::request::{Lineage, LlmRequest};
use self::round::{HookRound, ToolBatch};
use self::tools::reject;
use crate::hooks::{Hook, ServerName};

/// The instruction that ends a compaction summary request. Public only for the crate's tests.
#[doc(hidden)]
pub const SUMMARY_INSTRUCTION: &str = "Summarize this session so far so that the work can continue \
from the summary alone. Cover: the original task; what has been done; key decisions and facts \
learned (names, paths, values); what remains; and the next step. Answer with the summary only.";

/// The words that open a compacted context, before the summary. Public only for the binary's
/// script model and the crate's tests.
#[doc(hidden)]
pub const SUMMARY_PREFIX: &str =
    "Summary of the session so far (earlier messages were compacted):\n\n";

/// The text of the error result a call the user rejected gets.
pub(crate) fn rejected_text(name: &str) -> String {
    format!("the user rejected this call of {name}: it did not run")
}

/// The text of the error result a call to an unknown tool, or to a hook, gets. Public only for
/// the crate's reference-model tests.
#[doc(hidden)]
pub fn unknown_tool_text(name: &str) -> String {
    format!("unknown tool: {name}")
}

/// The text of the error result a call gets when a catalog change took its tool away while the
/// call waited on `_PreToolUse` or on the user's decision: only offered tools run.
pub(crate) fn withdrawn_text(name: &str) -> String {
    format!("tool no longer offered: {name} left the catalog before this call ran; it did not run")
}

/// The text of the error result a call gets when its prompt was interrupted
/// ([`Input::PromptInterrupted`]): `started` when the call was running, so it may have taken
/// effect; otherwise it never ran. Public only for the crate's tests.
#[doc(hidden)]
pub fn interrupted_text(started: bool) -> &'static str {
    if started {
        "interrupted: the agent stopped while this call ran; it may or may not have taken effect"
    } else {
        "interrupted: the agent stopped before this call ran; it did not run"
    }
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
        Self::from_core(Core::new(policy, system_prompt))
    }

    fn from_core(core: Core) -> Self {
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

    /// Whether a call of the model-facing tool `name` waits for the user's decision before it
    /// runs: the policy asks, and the tool's server marks it destructive.
    pub fn asks_permission_for(&self, name: &str) -> bool {
        let core = self.sm.inner();
        core.policy.ask_permission && core.tools.destructive.contains(name)
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

/// What the `live` superstate takes itself, in every running state: a fact reaching it that is
/// none of these is one no state of the running prompt waits for.
const LIVE_FACTS: &[InputKind] = &[
    InputKind::Cancelled,
    InputKind::PromptInterrupted,
    InputKind::Closed,
    InputKind::CatalogChanged,
];

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

    fn unexpected(
        &mut self,
        phase: Phase,
        expected: &'static [InputKind],
        got: &Input,
    ) -> Outcome<State> {
        self.refuse(MachineError::Unexpected {
            phase,
            expected,
            got: InputKind::of(got),
        })
    }
}

/// Shared storage: what lives for the whole session, in every state.
#[derive(Clone)]
pub(crate) struct Core {
    policy: Policy,
    system_prompt: Option<String>,
    history: History,
    /// Replaced whole when the catalog changes, never edited: shared between clones of the
    /// machine (an explorer clones it at every branch).
    tools: Arc<Tools>,
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
    /// `agent` calls named so far: the source of the ids of this agent's children.
    agents_started: u32,
    /// `agent` calls let run in this session, toward [`Subagents::max_total`].
    agents_run: u32,
    /// Who this machine is when it is a subagent; `None` for a session's top-level agent.
    child: Option<Box<agents::Child>>,
}

impl Core {
    fn new(policy: Policy, system_prompt: Option<String>) -> Self {
        Self {
            history: History::new(policy.media.clone()),
            policy,
            system_prompt,
            tools: Arc::default(),
            counters: Counters::default(),
            turn: Turn::default(),
            post_compact_owed: false,
            session_started: false,
            session_ended: false,
            standing: BTreeMap::new(),
            summary_instruction: SUMMARY_INSTRUCTION.to_owned(),
            next_id: 0,
            agents_started: 0,
            agents_run: 0,
            child: None,
        }
    }
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
    /// The text of the model's last reply in this prompt, for `_Stop`'s details.
    last_text: String,
    /// An objection was made in this prompt: the model is working on after one (`_Stop`'s
    /// `afterObjection`, Claude Code's `stop_hook_active`).
    objected: bool,
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
                    rounds: if planted::on(Bug::RoundsCarriedOver) {
                        self.turn.rounds
                    } else {
                        0
                    },
                    compacted: false,
                    pinned: self.history.len(),
                    last_text: String::new(),
                    objected: false,
                };
                self.history.push(Message::user(text.clone()));
                self.start_prompt(context, PromptStage::SessionStart)
            }
            Input::CatalogChanged { catalog } => {
                self.tools = self.tools_of(catalog);
                if planted::on(Bug::ObjectionsResetByCatalog) {
                    self.counters.objections = 0;
                }
                if planted::on(Bug::PostCompactOwedLostOnCatalog) {
                    self.post_compact_owed = false;
                }
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
            | Input::PermissionDecided { .. }
            | Input::PromptInterrupted => {
                context.unexpected(Phase::Idle, &[InputKind::Prompted], event)
            }
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
            Input::PromptInterrupted => {
                let batch = std::mem::take(batch);
                self.record_results_with(batch, interrupted_text(true));
                Super
            }
            Input::CatalogChanged { .. } => Super,
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(Phase::RunningTools, &[InputKind::ToolFinished], event)
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
                if decision.is_standing() && !planted::on(Bug::StandingForgotten) {
                    self.standing.insert(call.name.clone(), decision.allows());
                }
                if planted::on(Bug::RejectOnceStands) && !decision.allows() {
                    self.standing.insert(call.name.clone(), false);
                }
                let mut batch = std::mem::take(batch);
                let mut from = *at;
                if decision.allows() || planted::on(Bug::RejectedCallRuns) {
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
            Input::PromptInterrupted => {
                let batch = std::mem::take(batch);
                self.record_results_with(batch, interrupted_text(false));
                Super
            }
            Input::CatalogChanged { .. } => Super,
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionSettingChanged { .. } => context.unexpected(
                Phase::AwaitingPermission,
                &[InputKind::PermissionDecided],
                event,
            ),
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
                self.conclude_round(context, round, then)
            }
            Input::Cancelled if self.child.is_some() && planted::on(Bug::ChildOpenAfterCancel) => {
                Handled
            }
            Input::Cancelled | Input::PromptInterrupted if matches!(then, Then::SessionEnd) => {
                Transition(State::done())
            }
            Input::Closed if matches!(then, Then::SessionEnd) => Handled,
            Input::Cancelled | Input::Closed | Input::PromptInterrupted => {
                // The state is left (`live` ends the prompt or the session): the batch is
                // taken from it, not copied.
                match then {
                    Then::PreToolUse { batch } => {
                        let batch = std::mem::take(batch);
                        if matches!(event, Input::PromptInterrupted) {
                            self.record_results_with(batch, interrupted_text(false));
                        } else {
                            self.record_results(batch);
                        }
                    }
                    Then::PostCompact { .. } => {
                        if matches!(event, Input::Cancelled | Input::PromptInterrupted) {
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
            | Input::PermissionSettingChanged { .. } => context.unexpected(
                Phase::of_hook(round.hook),
                &[InputKind::HookAnswered],
                event,
            ),
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
            Input::CatalogChanged { .. }
            | Input::Cancelled
            | Input::Closed
            | Input::PromptInterrupted => Super,
            Input::Prompted { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => context.unexpected(
                Phase::Summarizing,
                &[InputKind::LlmReplied, InputKind::LlmFailed],
                event,
            ),
        }
    }

    /// Every state of a running prompt. Accepts: `Cancelled` → Idle (finish `cancelled`);
    /// `Closed` → finish `cancelled`, then `_SessionEnd` or Done; `CatalogChanged` (stays). Substates handle the
    /// rest, so anything else reaching here is refused.
    #[superstate]
    fn live(&mut self, context: &mut Outbox, event: &Input) -> Outcome<State> {
        match event {
            Input::Cancelled => self.finish(context, FinishReason::Cancelled),
            Input::PromptInterrupted => self.finish(context, FinishReason::Interrupted),
            Input::Closed => {
                context.emit(Effect::Finish {
                    reason: FinishReason::Cancelled,
                });
                self.end_session(context)
            }
            Input::CatalogChanged { catalog } => {
                self.tools = self.tools_of(catalog);
                if planted::on(Bug::ObjectionsResetByCatalog) {
                    self.counters.objections = 0;
                }
                Handled
            }
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(Phase::Prompting, LIVE_FACTS, event)
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
            | Input::Cancelled
            | Input::PromptInterrupted => context.refuse(MachineError::Closed {
                got: InputKind::of(event),
            }),
        }
    }
}

impl Core {
    fn after_transition(&mut self, source: &State, target: &State, _context: &mut Outbox) {
        tracing::debug!(from = %source.phase(), to = %target.phase(), "transition");
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

#[cfg(test)]
mod details_tests;
#[cfg(test)]
mod tests;
