//! The async driver: runs a [`Machine`], performs each effect through the injected
//! [`LlmClient`] and [`ToolHost`], and feeds the outcome back as a fact. It holds no policy:
//! every decision about stopping, objecting, compacting or killing is the machine's.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::Config;
use crate::machine::{
    CallId, Counters, Effect, FinishReason, Input, Machine, MachineError, Message,
    PermissionDecision, Phase, Purpose, ToolCall,
};
use crate::ports::{Delta, LlmClient, LlmError, Observer, PermissionAsker, ToolHost};
use crate::telemetry::{self, SessionTrace};

mod agents;
mod floor;
mod hooks;

pub(crate) use hooks::{HookOrder, HookTimer, Round};

/// The asker of a session that has no way to ask: every call is allowed, once.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

impl PermissionAsker for AllowAll {
    fn decide<'a>(
        &'a self,
        _call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = PermissionDecision> + Send + 'a>> {
        Box::pin(std::future::ready(PermissionDecision::AllowOnce))
    }
}

/// How a prompt ended, when it did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PromptStop {
    /// The model ended its turn (and `_Stop` let it).
    EndTurn,
    /// The output limit cut the model's reply.
    MaxTokens,
    /// The prompt's round cap was reached.
    MaxTurnRequests,
    /// The model refused, or a content filter cut its reply.
    Refusal,
    /// The prompt was cancelled.
    Cancelled,
    /// The provider stopped for a reason hookloop does not know; `_Stop` was not asked. The
    /// reason's name is in the [`FinishReason::OtherStop`] the observers saw.
    OtherStop,
}

/// Why a prompt could not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The model could not be reached or answered garbage, after the client's retries.
    #[error("model request failed: {0}")]
    Llm(#[from] LlmError),
    /// The machine refused a fact: a bug in the driver, never the fault of a peer.
    #[error("internal error: {0}")]
    Machine(#[from] MachineError),
    /// The machine stopped giving orders without finishing: a bug in the machine.
    #[error("internal error: the machine stalled")]
    Stalled,
}

/// How a prompt's end is named in its trace: the stop's name, or a failure's class (`llm`,
/// `internal`) and message.
fn traced_end(
    result: &Result<PromptStop, SessionError>,
) -> Result<&'static str, (&'static str, String)> {
    match result {
        Ok(PromptStop::EndTurn) => Ok("end_turn"),
        Ok(PromptStop::MaxTokens) => Ok("max_tokens"),
        Ok(PromptStop::MaxTurnRequests) => Ok("max_turn_requests"),
        Ok(PromptStop::Refusal) => Ok("refusal"),
        Ok(PromptStop::Cancelled) => Ok("cancelled"),
        Ok(PromptStop::OtherStop) => Ok("other_stop"),
        Err(error) => {
            let class = match error {
                SessionError::Llm(_) => "llm",
                SessionError::Machine(_) | SessionError::Stalled => "internal",
            };
            Err((class, error.to_string()))
        }
    }
}

/// Cancels the prompt a [`Session`] is running. Cheap to clone; usable from any task.
#[derive(Clone, Debug)]
pub struct CancelHandle {
    tx: Arc<watch::Sender<u64>>,
}

impl CancelHandle {
    /// Cancels the running prompt, if any: it ends with [`PromptStop::Cancelled`] at its next
    /// await point, with every tool call in the history answered.
    pub fn cancel(&self) {
        self.tx
            .send_modify(|generation| *generation = generation.wrapping_add(1));
    }
}

/// One agent session: its machine, its model and its tools.
pub struct Session<L, H> {
    llm: L,
    host: H,
    asker: Box<dyn PermissionAsker>,
    boundary: Boundary,
    tool_concurrency: usize,
    cancel_tx: Arc<watch::Sender<u64>>,
    cancel_rx: watch::Receiver<u64>,
    hook_timer: HookTimer,
    span: tracing::Span,
    trace: SessionTrace,
}

impl<L: LlmClient, H: ToolHost> Session<L, H> {
    /// A session with no prompt run yet.
    pub fn new(config: Config, llm: L, host: H) -> Self {
        // The dialect decides what binary content costs in the context.
        let mut policy = config.policy().clone();
        policy.media = llm.media();
        let machine = Machine::new(policy, config.system_prompt().map(str::to_owned));
        Self::with_machine(config, machine, llm, host)
    }

    /// A session that goes on from `machine` (one rebuilt by replaying a transcript, say):
    /// its history, counters and policy are the machine's; `config` gives the rest. A machine
    /// stopped mid-way (as a transcript's fork leaves one) still holds orders:
    /// [`resume`](Self::resume) performs them; an idle one takes the next
    /// [`prompt`](Self::prompt).
    pub fn with_machine(config: Config, machine: Machine, llm: L, host: H) -> Self {
        let (tx, cancel_rx) = watch::channel(0);
        let mut trace = SessionTrace::new();
        if let Some((provider, model)) = llm.model_name() {
            trace.set_model(provider, model);
        }
        Self {
            llm,
            host,
            asker: Box::new(AllowAll),
            boundary: Boundary {
                machine,
                observers: vec![Box::new(telemetry::BoundaryTrace)],
                started: Instant::now(),
                catalog_generation: None,
                llm_error: None,
            },
            tool_concurrency: config.tool_concurrency(),
            cancel_tx: Arc::new(tx),
            cancel_rx,
            hook_timer: HookTimer::default(),
            span: tracing::info_span!("session", id = next_session_id()),
            trace,
        }
    }

    /// What the session's trace spans say of it: the conversation id and the model (see
    /// [`crate::telemetry`]).
    pub fn trace_mut(&mut self) -> &mut SessionTrace {
        &mut self.trace
    }

    /// How many tool calls of one reply run at once; the rest wait their turn, in order.
    pub fn tool_concurrency(&self) -> usize {
        self.tool_concurrency
    }

    /// Whether destructive tool calls wait for the user's decision from now on
    /// ([`Policy::ask_permission`](crate::Policy::ask_permission)). For a session restored from
    /// a record, whose machine keeps the setting it was recorded with: the front end's current
    /// setting wins, and the change is fed to the machine as a fact, so that observers (a
    /// transcript) see it and a replay follows it. Between prompts only.
    pub fn set_ask_permission(&mut self, ask: bool) -> Result<(), SessionError> {
        if self.boundary.machine.policy().ask_permission == ask {
            return Ok(());
        }
        self.boundary
            .feed(Input::PermissionSettingChanged { ask })
            .map_err(SessionError::from)
    }

    /// Sets who is asked before a destructive tool call runs (by default, [`AllowAll`]).
    pub fn set_permission_asker(&mut self, asker: impl PermissionAsker + 'static) {
        self.asker = Box::new(asker);
    }

    /// Adds an observer of every effect and fact.
    pub fn add_observer(&mut self, observer: impl Observer + 'static) {
        self.boundary.observers.push(Box::new(observer));
    }

    /// A handle that cancels the running prompt.
    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle {
            tx: Arc::clone(&self.cancel_tx),
        }
    }

    /// The conversation so far.
    pub fn history(&self) -> &[Message] {
        self.boundary.machine.history()
    }

    /// The session-wide counters (objections, compactions, consecutive timeouts).
    pub fn counters(&self) -> &Counters {
        self.boundary.machine.counters()
    }

    /// The machine, for inspection.
    pub fn machine(&self) -> &Machine {
        &self.boundary.machine
    }

    /// The model client.
    pub fn llm(&self) -> &L {
        &self.llm
    }

    /// The tool host.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// Runs one prompt to its end. Session-wide counters carry over to the next prompt.
    pub async fn prompt(&mut self, text: impl Into<String>) -> Result<PromptStop, SessionError> {
        let span = tracing::info_span!(parent: &self.span, "turn", objections = self.counters().objections);
        let lead = self.boundary.machine.policy().hook_timeout();
        let agent = self.trace.invoke_agent();
        let run = floor::with_timer_floor(lead, self.run_prompt(text.into()).instrument(span));
        let result = run.instrument(agent.clone()).await;
        telemetry::prompt_ended(&agent, traced_end(&result));
        result
    }

    /// Ends the session: a prompt still running (its future dropped) ends as cancelled,
    /// `_SessionEnd` is called on the servers that have it (at most once per session, its
    /// answers ignored), and the machine refuses every later fact. A cancel made while `close`
    /// runs stops waiting for `_SessionEnd`; one made before it (the one that ended the last
    /// prompt, say) does not.
    pub async fn close(&mut self) -> Result<(), SessionError> {
        let span = tracing::info_span!(parent: &self.span, "close");
        let closing = self.trace.close();
        let closed = async {
            // A front end closing a session cancels its prompt first (ACP `session/close`, a
            // client that went away): that cancel was for the prompt, and if it stood it would
            // drop `_SessionEnd` before a single server was asked.
            self.cancel_rx.borrow_and_update();
            // The servers `_SessionEnd` goes to are those of the catalog now: a session that
            // never ran a prompt has not learned it yet, and one may have gained the hook since.
            // A closed machine refuses every fact but `Closed`.
            if self.boundary.machine.phase() != Phase::Done {
                self.boundary.sync_catalog(&self.host)?;
            }
            self.boundary.feed(Input::Closed)?;
            let mut next = self.boundary.drain(&self.host).await?;
            while let Some(work) = next {
                next = match work {
                    // The finish of a prompt cut short; nothing is waiting for it.
                    Next::Finish(_) => self.boundary.drain(&self.host).await?,
                    Next::Work(Work::Hooks(hooks)) => self.perform_hooks(hooks).await?,
                    Next::Work(Work::Llm(_) | Work::Tools(_) | Work::Permission(_)) => {
                        return Err(SessionError::Stalled);
                    }
                };
            }
            Ok(())
        }
        .instrument(span)
        .instrument(closing)
        .await;
        // `session/close` and the end of a run: what the session traced goes out now, off this
        // thread (a collector never holds a session up).
        telemetry::flush_in_background();
        closed
    }

    /// Performs the orders the machine holds and runs on until the prompt they belong to
    /// finishes, as [`prompt`](Self::prompt) would have.
    pub async fn resume(&mut self) -> Result<PromptStop, SessionError> {
        let span = tracing::info_span!(parent: &self.span, "turn", objections = self.counters().objections);
        let agent = self.trace.invoke_agent();
        let result = async {
            self.cancel_rx.borrow_and_update();
            self.boundary.llm_error = None;
            let next = self.boundary.drain(&self.host).await?;
            self.run_until_finish(next).await
        }
        .instrument(span)
        .instrument(agent.clone())
        .await;
        telemetry::prompt_ended(&agent, traced_end(&result));
        result
    }

    async fn run_prompt(&mut self, text: String) -> Result<PromptStop, SessionError> {
        // A cancel that came before this prompt started is not for it.
        self.cancel_rx.borrow_and_update();
        self.boundary.llm_error = None;
        self.boundary.settle_abandoned(&self.host).await?;
        self.boundary.sync_catalog(&self.host)?;
        self.boundary.feed(Input::Prompted { text })?;
        let next = self.boundary.drain(&self.host).await?;
        self.run_until_finish(next).await
    }

    async fn run_until_finish(
        &mut self,
        mut next: Option<Next>,
    ) -> Result<PromptStop, SessionError> {
        loop {
            let work = match next {
                Some(Next::Finish(reason)) => return self.boundary.outcome(reason),
                Some(Next::Work(work)) => work,
                None => return Err(SessionError::Stalled),
            };
            next = match work {
                Work::Llm(purpose) => self.perform_llm(purpose).await?,
                Work::Tools(calls) => self.perform_tools(calls).await?,
                Work::Hooks(hooks) => self.perform_hooks(hooks).await?,
                Work::Permission(call) => self.perform_permission(call).await?,
            };
        }
    }

    async fn perform_permission(&mut self, call: ToolCall) -> Result<Option<Next>, SessionError> {
        let span = telemetry::permission(&call);
        let fact = tokio::select! {
            biased;
            () = cancelled(&mut self.cancel_rx) => Input::Cancelled,
            decision = self.asker.decide(&call).instrument(span.clone()) => Input::PermissionDecided {
                id: call.id.clone(),
                decision,
            },
        };
        telemetry::permission_decided(&span, &fact);
        drop(span);
        self.boundary.sync_catalog(&self.host)?;
        self.boundary.feed(fact)?;
        self.boundary.drain(&self.host).await
    }

    async fn perform_llm(&mut self, purpose: Purpose) -> Result<Option<Next>, SessionError> {
        // A summary's span holds its model request and the compaction's sizes.
        let compaction = telemetry::compaction(purpose);
        async { self.perform_llm_request(purpose).await }
            .instrument(compaction)
            .await
    }

    async fn perform_llm_request(
        &mut self,
        purpose: Purpose,
    ) -> Result<Option<Next>, SessionError> {
        let outcome = {
            let Boundary {
                machine,
                observers,
                started,
                ..
            } = &mut self.boundary;
            let request = machine.request(purpose);
            let chat = self.trace.chat(&request);
            let mut first_chunk = telemetry::FirstChunk::new(&chat);
            let mut on_delta = |delta: Delta| {
                first_chunk.seen();
                let at = started.elapsed();
                for observer in observers.iter_mut() {
                    observer.on_delta(at, &delta);
                }
            };
            let call = self
                .llm
                .stream(request, &mut on_delta)
                .instrument(chat.clone());
            let outcome = tokio::select! {
                biased;
                () = cancelled(&mut self.cancel_rx) => None,
                result = call => Some(result),
            };
            self.trace.chat_ended(&chat, outcome.as_ref());
            outcome
        };
        let fact = match outcome {
            None => Input::Cancelled,
            Some(Ok(reply)) => Input::LlmReplied { reply },
            Some(Err(error)) => {
                let fact = Input::LlmFailed {
                    error: error.to_string(),
                };
                self.boundary.llm_error = Some(error);
                fact
            }
        };
        self.boundary.sync_catalog(&self.host)?;
        self.boundary.feed(fact)?;
        self.boundary.drain(&self.host).await
    }

    async fn perform_tools(&mut self, calls: Vec<ToolCall>) -> Result<Option<Next>, SessionError> {
        let host = &self.host;
        let (events, mut agent_events) = tokio::sync::mpsc::unbounded_channel();
        let family = agents::Family {
            llm: &self.llm,
            host,
            asker: &*self.asker,
            tool_concurrency: self.tool_concurrency,
            started: self.boundary.started,
            events,
            trace: &self.trace,
        };
        let family = &family;
        // The `agent` calls among them run subagents, made now, while the machine is free.
        let calls: Vec<(ToolCall, Option<Machine>)> = calls
            .into_iter()
            .map(|call| {
                let child = self.boundary.machine.spawn_child(&call);
                (call, child)
            })
            .collect();
        let run = |call: ToolCall, child: Option<Machine>| async move {
            let started = Instant::now();
            let span = telemetry::execute_tool(&call);
            // Boxed where it is made: the host's call is a large future (an MCP round trip),
            // and unboxed it would be copied whole at each move on its way into the fan-out.
            let output = match child {
                Some(child) => family.run(child).instrument(span.clone()).await,
                None => {
                    Box::pin(host.call_tool(&call))
                        .instrument(span.clone())
                        .await
                }
            };
            telemetry::tool_ended(&span, &output);
            let elapsed_ms = started.elapsed().as_millis();
            tracing::debug!(tool = %call.name, elapsed_ms, "tool call ended");
            Input::ToolFinished {
                id: call.id,
                output,
            }
        };
        // Collected, not iterated: a queue whose item names the closure's future trips the
        // compiler's proof that the prompt's future is `Send`. The futures start when polled.
        let queue: Vec<_> = calls
            .into_iter()
            .map(|(call, child)| (call.id.clone(), run(call, child)))
            .collect();
        let calls = ToolCalls {
            queue: queue.into_iter(),
            running: FuturesUnordered::new(),
            limit: self.tool_concurrency.max(1),
        };
        fan_out(
            &mut self.boundary,
            &mut self.cancel_rx,
            host,
            calls,
            Some(&mut agent_events),
        )
        .await
    }

    async fn perform_hooks(&mut self, order: HookOrder) -> Result<Option<Next>, SessionError> {
        let host = &self.host;
        let span = order.span();
        let round = Round::start(host, &order, &span, &mut self.hook_timer);
        fan_out(&mut self.boundary, &mut self.cancel_rx, host, round, None)
            .instrument(span)
            .await
    }
}

/// Calls in flight whose answers are facts for the machine: one reply's tool calls, or one
/// hook round.
trait InFlight {
    /// Starts the calls that may start now, telling the observers of each tool call.
    fn start(&mut self, boundary: &mut Boundary);

    /// The next answer; `None` once every call is answered. Cancel-safe.
    fn next(&mut self) -> impl Future<Output = Option<Input>>;

    /// Whether nothing is left to start or to wait for.
    fn is_done(&self) -> bool;
}

/// One reply's tool calls: `limit` at a time, the next started each time one ends.
struct ToolCalls<F> {
    queue: std::vec::IntoIter<(CallId, F)>,
    running: FuturesUnordered<F>,
    limit: usize,
}

impl<F: Future<Output = Input>> InFlight for ToolCalls<F> {
    fn start(&mut self, boundary: &mut Boundary) {
        while self.running.len() < self.limit {
            let Some((id, call)) = self.queue.next() else {
                break;
            };
            boundary.observe_call_started(&id);
            self.running.push(call);
        }
    }

    async fn next(&mut self) -> Option<Input> {
        self.running.next().await
    }

    fn is_done(&self) -> bool {
        self.running.is_empty() && self.queue.len() == 0
    }
}

impl InFlight for Round<'_, '_> {
    // Every call of a round is sent when it starts.
    fn start(&mut self, _boundary: &mut Boundary) {}

    async fn next(&mut self) -> Option<Input> {
        Round::next(self).await
    }

    fn is_done(&self) -> bool {
        Round::is_done(self)
    }
}

/// Runs the calls of `flight` and feeds each outcome to the machine as it arrives, until the
/// machine gives its next order or the prompt is cancelled (the calls still running are
/// dropped, which cancels them). What subagents among the calls saw reaches the observers
/// through `agent_events`, each before the result of the call it belongs to.
async fn fan_out(
    boundary: &mut Boundary,
    cancel_rx: &mut watch::Receiver<u64>,
    host: &impl ToolHost,
    mut flight: impl InFlight,
    mut agent_events: Option<&mut tokio::sync::mpsc::UnboundedReceiver<agents::Stamped>>,
) -> Result<Option<Next>, SessionError> {
    flight.start(boundary);
    loop {
        tokio::select! {
            biased;
            () = cancelled(cancel_rx) => {
                // Dropping a subagent's run cancels it, and it says so before the parent hears.
                drop(flight);
                boundary.observe_agents(&mut agent_events);
                boundary.feed(Input::Cancelled)?;
                return boundary.drain(host).await;
            }
            Some(stamped) = next_agent_event(&mut agent_events) => {
                boundary.observe_agent(stamped);
            }
            ended = flight.next() => {
                // Every call answered and no order came: the caller decides if that is a stall.
                let Some(fact) = ended else { return Ok(None) };
                if flight.is_done() {
                    // The catalog may have changed meanwhile; the machine must know before it
                    // plans the next request.
                    boundary.sync_catalog(host)?;
                }
                boundary.observe_agents(&mut agent_events);
                boundary.feed(fact)?;
                if let Some(next) = boundary.drain(host).await? {
                    return Ok(Some(next));
                }
                // After the fact, so observers see a call end before the next one starts.
                flight.start(boundary);
            }
        }
    }
}

/// What the session waits on next.
enum Next {
    Work(Work),
    Finish(FinishReason),
}

/// An effect that expects answers.
enum Work {
    Llm(Purpose),
    Tools(Vec<ToolCall>),
    Hooks(HookOrder),
    Permission(ToolCall),
}

/// The machine and everything that watches its boundary. Kept apart from the injected traits
/// so a fan-out can borrow the host while the machine is fed.
struct Boundary {
    machine: Machine,
    observers: Vec<Box<dyn Observer>>,
    started: Instant,
    catalog_generation: Option<u64>,
    /// The typed error behind the last `LlmFailed`, returned if the prompt finishes on it.
    llm_error: Option<LlmError>,
}

impl Boundary {
    fn feed(&mut self, fact: Input) -> Result<(), MachineError> {
        let at = self.started.elapsed();
        for observer in &mut self.observers {
            observer.on_fact(at, &fact);
        }
        self.machine.handle(fact)
    }

    /// Shows the observers what a subagent's boundary saw.
    fn observe_agent(&mut self, stamped: agents::Stamped) {
        let agents::Stamped { at, agent, event } = stamped;
        for observer in &mut self.observers {
            match &event {
                agents::AgentEvent::Effect(effect) => observer.on_agent_effect(at, &agent, effect),
                agents::AgentEvent::Fact(fact) => observer.on_agent_fact(at, &agent, fact),
                agents::AgentEvent::Delta(delta) => observer.on_agent_delta(at, &agent, delta),
                agents::AgentEvent::CallStarted(id) => {
                    observer.on_agent_call_started(at, &agent, id);
                }
            }
        }
    }

    /// Shows the observers every subagent event already sent.
    fn observe_agents(
        &mut self,
        events: &mut Option<&mut tokio::sync::mpsc::UnboundedReceiver<agents::Stamped>>,
    ) {
        if let Some(events) = events {
            while let Ok(stamped) = events.try_recv() {
                self.observe_agent(stamped);
            }
        }
    }

    fn observe_call_started(&mut self, id: &CallId) {
        let at = self.started.elapsed();
        for observer in &mut self.observers {
            observer.on_call_started(at, id);
        }
    }

    fn observe_effect(&mut self, effect: &Effect) {
        let at = self.started.elapsed();
        for observer in &mut self.observers {
            observer.on_effect(at, effect);
        }
    }

    /// Shows the observers what the host's supervision did since the last look.
    fn forward_supervision(&mut self, host: &impl ToolHost) {
        let events = host.take_supervision();
        if events.is_empty() {
            return;
        }
        let at = self.started.elapsed();
        for event in &events {
            for observer in &mut self.observers {
                observer.on_supervision(at, event);
            }
        }
    }

    fn sync_catalog(&mut self, host: &impl ToolHost) -> Result<(), MachineError> {
        let generation = host.catalog_generation();
        if self.catalog_generation != Some(generation) {
            self.catalog_generation = Some(generation);
            self.feed(Input::CatalogChanged {
                catalog: host.catalog(),
            })?;
        }
        Ok(())
    }

    /// Ends a prompt whose future was dropped mid-flight (a `timeout` or `select!` around
    /// [`Session::prompt`]) exactly as a cancel would, so the next prompt starts from a valid
    /// history. The cancel goes through the machine as a fact, so observers and transcripts see
    /// it like any other.
    async fn settle_abandoned(&mut self, host: &impl ToolHost) -> Result<(), SessionError> {
        // Orders the dropped prompt never performed: a kill still matters (its server hung
        // twice), the others answered work that is gone.
        while let Some(effect) = self.machine.poll_effect() {
            self.observe_effect(&effect);
            if let Effect::KillServer { server } = effect {
                host.kill_server(&server).await;
            }
        }
        match self.machine.phase() {
            Phase::Idle | Phase::Done => Ok(()),
            Phase::Prompting
            | Phase::RunningTools
            | Phase::AwaitingStop
            | Phase::Objected
            | Phase::Summarizing
            | Phase::PostCompacting
            | Phase::AwaitingPermission
            | Phase::AwaitingHook(_) => {
                tracing::debug!("the last prompt was dropped mid-flight: cancelling it");
                self.feed(Input::Cancelled)?;
                self.drain(host).await?;
                Ok(())
            }
        }
    }

    /// Performs the orders that expect no answer, and returns the one that does (or the finish),
    /// if the machine gave one. The machine emits at most one such order per fact, always last.
    async fn drain(&mut self, host: &impl ToolHost) -> Result<Option<Next>, SessionError> {
        self.forward_supervision(host);
        while let Some(effect) = self.machine.poll_effect() {
            self.observe_effect(&effect);
            let next = match effect {
                Effect::Notify { notice } => {
                    tracing::debug!(?notice, "notice");
                    continue;
                }
                Effect::KillServer { server } => {
                    host.kill_server(&server).await;
                    continue;
                }
                Effect::CallLlm { purpose, .. } => Next::Work(Work::Llm(purpose)),
                Effect::CallTools { calls } => Next::Work(Work::Tools(calls)),
                Effect::AskPermission { call } => Next::Work(Work::Permission(call)),
                Effect::CallHooks {
                    hook,
                    servers,
                    timeout,
                    context,
                    subjects,
                } => Next::Work(Work::Hooks(HookOrder {
                    hook,
                    servers,
                    timeout,
                    context,
                    subjects,
                })),
                // A prompt cut short by `Closed` finishes before `_SessionEnd` is ordered.
                Effect::Finish { reason } => return Ok(Some(Next::Finish(reason))),
            };
            debug_assert_eq!(
                self.machine.pending_effects(),
                0,
                "an awaited order is always last"
            );
            return Ok(Some(next));
        }
        Ok(None)
    }

    fn outcome(&mut self, reason: FinishReason) -> Result<PromptStop, SessionError> {
        Ok(match reason {
            FinishReason::EndTurn => PromptStop::EndTurn,
            FinishReason::MaxTokens => PromptStop::MaxTokens,
            FinishReason::MaxTurnRequests => PromptStop::MaxTurnRequests,
            FinishReason::Refusal => PromptStop::Refusal,
            // Only loading a record closes a prompt as interrupted; no live prompt ends so,
            // and an embedder that feeds the fact itself stopped the prompt as a cancel does.
            FinishReason::Cancelled | FinishReason::Interrupted => PromptStop::Cancelled,
            FinishReason::OtherStop { .. } => PromptStop::OtherStop,
            FinishReason::Failed { error } => {
                let error = self.llm_error.take().unwrap_or(LlmError::Other(error));
                return Err(SessionError::Llm(error));
            }
        })
    }
}

fn next_session_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The next subagent event; never, without a receiver.
async fn next_agent_event(
    events: &mut Option<&mut tokio::sync::mpsc::UnboundedReceiver<agents::Stamped>>,
) -> Option<agents::Stamped> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}

/// Resolves when the handle cancels; never, if every handle is gone.
async fn cancelled(rx: &mut watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
