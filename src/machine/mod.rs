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

mod effect;
mod history;
mod input;
mod message;
mod policy;

use std::collections::{HashSet, VecDeque};
use std::fmt;

use serde_json::{Map, Value};
use statig::prelude::*;

pub use self::effect::{Effect, FinishReason, HookContext, Notice, Purpose, SkipReason};
pub use self::history::{BYTES_PER_TOKEN, History};
pub use self::input::{
    Catalog, HookReply, Input, LlmReply, ServerTools, StopReason, ToolInfo, Usage,
};
pub use self::message::{CallId, Content, Message, ToolCall, ToolOutput, ToolSpec};
pub use self::policy::{Counters, Policy};
use crate::hooks::{self, Hook, ServerName};

/// The instruction that ends a compaction summary request.
pub const SUMMARY_INSTRUCTION: &str = "Summarize this session so far so that the work can continue \
from the summary alone. Cover: the original task; what has been done; key decisions and facts \
learned (names, paths, values); what remains; and the next step. Answer with the summary only.";

/// The words that open a compacted context, before the summary.
pub const SUMMARY_PREFIX: &str =
    "Summary of the session so far (earlier messages were compacted):\n\n";

/// The text of the error result a call to an unknown tool, or to a hook, gets.
pub fn unknown_tool_text(name: &str) -> String {
    format!("unknown tool: {name}")
}

/// One session's state machine. See the [module docs](self) for the driving contract.
pub struct Machine {
    sm: statig::blocking::InitializedStateMachine<Core>,
    outbox: Outbox,
}

impl Machine {
    /// A machine for a new session, idle, with an empty catalog.
    pub fn new(policy: Policy, system_prompt: Option<String>) -> Self {
        let core = Core {
            policy,
            system_prompt,
            history: History::default(),
            tools: Tools::default(),
            counters: Counters::default(),
            turn: Turn::default(),
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
        let core = self.sm.inner();
        let all = core.history.messages();
        match purpose {
            Purpose::Turn => LlmRequest {
                purpose,
                system: core.system_prompt.as_deref(),
                messages: all,
                tools: &core.tools.model,
                instruction: None,
                max_output_tokens: core.policy.max_output_tokens,
                lineage: Some(Lineage {
                    history: core.history.lineage(),
                    tools: core.tools.lineage,
                }),
            },
            Purpose::Summary { from } => LlmRequest {
                purpose,
                system: core.system_prompt.as_deref(),
                messages: &all[from.min(all.len())..],
                tools: &[],
                instruction: Some(SUMMARY_INSTRUCTION),
                max_output_tokens: core.policy.max_output_tokens,
                // A summary starts wherever the budget allows and is rare: nothing to reuse.
                lineage: None,
            },
        }
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
        let tools = &self.sm.inner().tools;
        match hook {
            Hook::Stop => &tools.stop_servers,
            Hook::PostCompact => &tools.post_compact_servers,
        }
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
    Done,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Idle => "idle",
            Self::Prompting => "prompting",
            Self::RunningTools => "running tools",
            Self::AwaitingStop => "awaiting _Stop",
            Self::Objected => "objected",
            Self::Summarizing => "summarizing",
            Self::PostCompacting => "awaiting _PostCompact",
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
    #[error("the session is closed: {got} refused")]
    Closed { got: &'static str },
}

/// The statig context: where handlers put their orders and their refusals.
#[derive(Debug, Default)]
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
pub(crate) struct Core {
    policy: Policy,
    system_prompt: Option<String>,
    history: History,
    tools: Tools,
    counters: Counters,
    turn: Turn,
    /// Source of the machine's own call ids (hook pairs, renamed model ids).
    next_id: u64,
}

/// Data of the running prompt.
#[derive(Debug, Default)]
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

/// The catalog as the machine uses it.
#[derive(Debug, Default)]
struct Tools {
    model: Vec<ToolSpec>,
    /// Names this catalog for [`Lineage::tools`]; 0 for the empty default.
    lineage: u64,
    names: HashSet<String>,
    stop_servers: Vec<ServerName>,
    post_compact_servers: Vec<ServerName>,
    bytes: usize,
}

impl Tools {
    fn new(catalog: &Catalog, allow: &hooks::HookServers) -> Self {
        let mut tools = Self {
            lineage: fresh_lineage(),
            ..Self::default()
        };
        for entry in &catalog.servers {
            let server = &entry.server;
            for tool in &entry.tools {
                if hooks::is_hook(&tool.name) {
                    // Hooks never reach the model, whatever the allowlist says; only allowed
                    // servers are ever called.
                    if allow.allows(server.as_str()) {
                        let list = if tool.name == Hook::Stop.tool_name() {
                            Some(&mut tools.stop_servers)
                        } else if tool.name == Hook::PostCompact.tool_name() {
                            Some(&mut tools.post_compact_servers)
                        } else {
                            None
                        };
                        if let Some(list) = list.filter(|list| !list.contains(server)) {
                            list.push(server.clone());
                        }
                    }
                    continue;
                }
                let name = hooks::qualify(server.as_str(), &tool.name);
                if tools.names.insert(name.clone()) {
                    let spec = ToolSpec {
                        name,
                        description: tool.description.clone(),
                        input_schema: tool.input_schema.clone(),
                    };
                    tools.bytes += spec.size_bytes();
                    tools.model.push(spec);
                }
            }
        }
        tools
    }
}

/// The outstanding calls of one model reply, in the order the model made them.
#[derive(Debug, Default)]
pub(crate) struct ToolBatch {
    ids: Vec<CallId>,
    results: Vec<Option<ToolOutput>>,
}

impl ToolBatch {
    /// Records one result; true when every call has one.
    fn answer(&mut self, id: &CallId, output: &ToolOutput) -> Result<bool, MachineError> {
        let slot = self
            .ids
            .iter()
            .zip(&mut self.results)
            .find_map(|(known, slot)| (known == id && slot.is_none()).then_some(slot))
            .ok_or_else(|| MachineError::UnknownCall(id.clone()))?;
        *slot = Some(output.clone());
        Ok(self.results.iter().all(Option::is_some))
    }
}

/// One hook called on several servers; answers kept in server configuration order.
#[derive(Debug)]
pub(crate) struct HookRound {
    hook: Hook,
    servers: Vec<ServerName>,
    answers: Vec<Answer>,
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Waiting,
    Quiet,
    Said(String),
}

impl HookRound {
    fn new(hook: Hook, servers: Vec<ServerName>) -> Self {
        let answers = servers.iter().map(|_| Answer::Waiting).collect();
        Self {
            hook,
            servers,
            answers,
        }
    }

    fn is_complete(&self) -> bool {
        !self.answers.contains(&Answer::Waiting)
    }

    fn said(self) -> impl Iterator<Item = (ServerName, String)> {
        self.servers
            .into_iter()
            .zip(self.answers)
            .filter_map(|(server, answer)| match answer {
                Answer::Said(text) => Some((server, text)),
                Answer::Waiting | Answer::Quiet => None,
            })
    }
}

#[state_machine(
    initial = "State::idle()",
    state(derive(Debug)),
    superstate(derive(Debug)),
    visibility = "pub(crate)",
    after_transition = "Self::after_transition"
)]
impl Core {
    /// No prompt is running. Accepts: `Prompted` → a model request (Prompting), or Summarizing
    /// when the history is over budget, or Idle at once when the round cap is 0 rounds away;
    /// `CatalogChanged` (stays); `Cancelled` (nothing to cancel: stays); `Closed` → Done.
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
                self.request_turn(context, Resume::Prompting)
            }
            Input::CatalogChanged { catalog } => {
                self.tools = Tools::new(catalog, &self.policy.hook_servers);
                Handled
            }
            Input::Cancelled => Handled,
            Input::Closed => Transition(State::done()),
            Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. } => context.unexpected(Phase::Idle, "a prompt", event),
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
                    self.record_results(batch);
                    self.request_turn(context, Resume::Prompting)
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
            | Input::HookAnswered { .. } => {
                context.unexpected(Phase::RunningTools, "a tool result", event)
            }
        }
    }

    /// The model ended its turn; waiting for `_Stop` from every allowed server that has it.
    /// Accepts: `HookAnswered` from an awaited server (stays, or once all are in → Objected
    /// with the objections injected and the model asked again, or Idle when none objected).
    #[state(superstate = "live")]
    fn awaiting_stop(
        &mut self,
        round: &mut HookRound,
        context: &mut Outbox,
        event: &Input,
    ) -> Outcome<State> {
        match event {
            Input::HookAnswered {
                server,
                hook,
                reply,
            } => {
                if let Err(error) = self.take_hook_answer(context, round, server, *hook, reply) {
                    return context.refuse(error);
                }
                if !round.is_complete() {
                    return Handled;
                }
                let round = std::mem::replace(round, HookRound::new(Hook::Stop, Vec::new()));
                self.conclude_stop(context, round)
            }
            Input::CatalogChanged { .. } | Input::Cancelled | Input::Closed => Super,
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. } => {
                context.unexpected(Phase::AwaitingStop, "a _Stop answer", event)
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
            Input::Prompted { .. } | Input::ToolFinished { .. } | Input::HookAnswered { .. } => {
                context.unexpected(Phase::Summarizing, "the summary", event)
            }
        }
    }

    /// The context was compacted; waiting for `_PostCompact` from every allowed server that has
    /// it. Accepts: `HookAnswered` from an awaited server (stays, or once all are in → the
    /// answers injected into the fresh context and the request it was going to make).
    #[state(superstate = "live")]
    fn post_compacting(
        &mut self,
        round: &mut HookRound,
        resume: &mut Resume,
        context: &mut Outbox,
        event: &Input,
    ) -> Outcome<State> {
        match event {
            Input::HookAnswered {
                server,
                hook,
                reply,
            } => {
                if let Err(error) = self.take_hook_answer(context, round, server, *hook, reply) {
                    return context.refuse(error);
                }
                if !round.is_complete() {
                    return Handled;
                }
                let round = std::mem::replace(round, HookRound::new(Hook::PostCompact, Vec::new()));
                for (server, text) in round.said() {
                    self.inject_hook_pair(Hook::PostCompact, &server, &text);
                    context.notify(Notice::PostCompactInjected { server, text });
                }
                self.request_turn(context, *resume)
            }
            Input::CatalogChanged { .. } | Input::Cancelled | Input::Closed => Super,
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. } => {
                context.unexpected(Phase::PostCompacting, "a _PostCompact answer", event)
            }
        }
    }

    /// Every state of a running prompt. Accepts: `Cancelled` → Idle (finish `cancelled`);
    /// `Closed` → Done (finish `cancelled`); `CatalogChanged` (stays). Substates handle the
    /// rest, so anything else reaching here is refused.
    #[superstate]
    fn live(&mut self, context: &mut Outbox, event: &Input) -> Outcome<State> {
        match event {
            Input::Cancelled => self.finish(context, FinishReason::Cancelled),
            Input::Closed => {
                context.emit(Effect::Finish {
                    reason: FinishReason::Cancelled,
                });
                Transition(State::done())
            }
            Input::CatalogChanged { catalog } => {
                self.tools = Tools::new(catalog, &self.policy.hook_servers);
                Handled
            }
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. } => {
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
            Input::Prompted { .. } | Input::ToolFinished { .. } | Input::HookAnswered { .. } => {
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
            let fixed =
                self.system_prompt.as_ref().map_or(0, String::len) + SUMMARY_INSTRUCTION.len();
            let room = self
                .policy
                .context_budget()
                .saturating_sub((fixed as u64).div_ceil(BYTES_PER_TOKEN));
            let from = self.history.fitting_suffix(room);
            context.emit(self.call_llm(Purpose::Summary { from }));
            return Transition(State::summarizing(resume));
        }
        self.turn.rounds += 1;
        self.history.mark_request();
        context.emit(self.call_llm(Purpose::Turn));
        match resume {
            Resume::Prompting => Transition(State::prompting()),
            Resume::Objected => Transition(State::objected()),
        }
    }

    fn call_llm(&self, purpose: Purpose) -> Effect {
        Effect::CallLlm {
            purpose,
            messages: self.history.len(),
            digest: self.history.digest(),
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
        if let Some(usage) = reply.usage {
            self.history.note_usage(usage.input_tokens);
        }
        if !reply.tool_calls.is_empty() {
            let calls = self.unique_ids(&reply.tool_calls);
            self.history.push(Message::Assistant {
                text: reply.text.clone(),
                tool_calls: calls.clone(),
            });
            return match reply.stop {
                StopReason::ToolUse
                | StopReason::EndTurn
                | StopReason::StopSequence
                | StopReason::PauseTurn => self.start_tools(context, calls),
                // A reply cut short may carry truncated calls: answer them unrun, then stop.
                StopReason::MaxTokens | StopReason::Refusal | StopReason::ContentFilter => {
                    let reason = finish_reason(reply.stop);
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
        match reply.stop {
            StopReason::EndTurn | StopReason::StopSequence => self.on_end_turn(context, resume),
            StopReason::PauseTurn => self.request_turn(context, resume),
            StopReason::ToolUse => {
                tracing::warn!(
                    "the model stopped for tool use but called no tool; ending the turn"
                );
                self.finish(context, FinishReason::EndTurn)
            }
            StopReason::MaxTokens | StopReason::Refusal | StopReason::ContentFilter => {
                self.finish(context, finish_reason(reply.stop))
            }
        }
    }

    /// A genuine end of turn: ask `_Stop`, unless a sovereignty rule says not to.
    fn on_end_turn(&mut self, context: &mut Outbox, resume: Resume) -> Outcome<State> {
        let servers = &self.tools.stop_servers;
        if servers.is_empty() || self.policy.stop_max_rejections == 0 {
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
        let servers = servers.clone();
        context.emit(Effect::CallHooks {
            hook: Hook::Stop,
            servers: servers.clone(),
            timeout_ms: self.policy.hook_timeout_ms,
            context: self.hook_context(),
        });
        Transition(State::awaiting_stop(HookRound::new(Hook::Stop, servers)))
    }

    fn conclude_stop(&mut self, context: &mut Outbox, round: HookRound) -> Outcome<State> {
        let mut objections = round.said().peekable();
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
        reply: &HookReply,
    ) -> Result<(), MachineError> {
        let unexpected = || MachineError::UnexpectedHookAnswer {
            server: server.clone(),
            hook,
        };
        if hook != round.hook {
            return Err(unexpected());
        }
        let slot = round
            .servers
            .iter()
            .zip(&mut round.answers)
            .find_map(|(s, slot)| (s == server && *slot == Answer::Waiting).then_some(slot))
            .ok_or_else(unexpected)?;
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
        context.emit(Effect::CallTools { calls: run });
        Transition(State::running_tools(batch))
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
        let servers = self.tools.post_compact_servers.clone();
        if servers.is_empty() {
            return self.request_turn(context, resume);
        }
        context.emit(Effect::CallHooks {
            hook: Hook::PostCompact,
            servers: servers.clone(),
            timeout_ms: self.policy.hook_timeout_ms,
            context: self.hook_context(),
        });
        Transition(State::post_compacting(
            HookRound::new(Hook::PostCompact, servers),
            resume,
        ))
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
            Self::AwaitingStop { .. } => Phase::AwaitingStop,
            Self::Objected {} => Phase::Objected,
            Self::Summarizing { .. } => Phase::Summarizing,
            Self::PostCompacting { .. } => Phase::PostCompacting,
            Self::Done {} => Phase::Done,
        }
    }
}

fn finish_reason(stop: StopReason) -> FinishReason {
    match stop {
        StopReason::MaxTokens => FinishReason::MaxTokens,
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
            let shown = hooks::cap_middle(raw, 200);
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
