//! The async driver: runs a [`Machine`], performs each effect through the injected
//! [`LlmClient`] and [`ToolHost`], and feeds the outcome back as a fact. It holds no policy:
//! every decision about stopping, objecting, compacting or killing is the machine's.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::Config;
use crate::hooks::{Hook, ServerName};
use crate::llm::{LlmClient, LlmError};
use crate::machine::{
    Counters, Effect, FinishReason, HookContext, HookReply, Input, Machine, MachineError, Message,
    Purpose, ToolCall,
};
use crate::mcp::{HookCall, ToolHost};

/// How long past the hook timeout the driver waits for a host that failed to enforce it.
const HOOK_GRACE: Duration = Duration::from_millis(250);

/// Sees everything that crosses the machine's boundary, in order, with the time since the
/// session started. Front ends draw their progress from it; a transcript recorder writes it down.
pub trait Observer: Send {
    /// An order the machine emitted, before the driver performs it.
    fn on_effect(&mut self, at: Duration, effect: &Effect) {
        let _ = (at, effect);
    }

    /// A fact the driver fed to the machine.
    fn on_fact(&mut self, at: Duration, fact: &Input) {
        let _ = (at, fact);
    }
}

/// How a prompt ended, when it did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptStop {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

/// Why a prompt could not complete.
#[derive(Debug, thiserror::Error)]
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
    boundary: Boundary,
    tool_concurrency: usize,
    cancel_tx: Arc<watch::Sender<u64>>,
    cancel_rx: watch::Receiver<u64>,
    span: tracing::Span,
}

impl<L: LlmClient, H: ToolHost> Session<L, H> {
    /// A session with no prompt run yet.
    pub fn new(config: Config, llm: L, host: H) -> Self {
        let machine = Machine::new(
            config.policy().clone(),
            config.system_prompt().map(str::to_owned),
        );
        let (tx, cancel_rx) = watch::channel(0);
        Self {
            llm,
            host,
            boundary: Boundary {
                machine,
                observers: Vec::new(),
                started: Instant::now(),
                catalog_generation: None,
                llm_error: None,
            },
            tool_concurrency: config.tool_concurrency(),
            cancel_tx: Arc::new(tx),
            cancel_rx,
            span: tracing::info_span!("session", id = next_session_id()),
        }
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
        self.run_prompt(text.into()).instrument(span).await
    }

    /// Ends the session: the machine refuses every later fact.
    pub fn close(&mut self) -> Result<(), SessionError> {
        self.boundary.feed(Input::Closed)?;
        // A closed machine may still order a final `Finish`; nothing is waiting for it.
        while let Some(effect) = self.boundary.machine.poll_effect() {
            self.boundary.observe_effect(&effect);
        }
        Ok(())
    }

    /// A session that goes on from `machine` mid-way: a machine rebuilt from a transcript (see
    /// [`transcript::fork`](crate::transcript::fork)). Orders it still holds are performed by
    /// [`resume`](Self::resume); an idle one takes the next [`prompt`](Self::prompt).
    pub fn from_machine(config: Config, machine: Machine, llm: L, host: H) -> Self {
        let mut session = Self::new(config, llm, host);
        session.boundary.machine = machine;
        session
    }

    /// Performs the orders the machine holds and runs on until the prompt they belong to
    /// finishes, as [`prompt`](Self::prompt) would have.
    pub async fn resume(&mut self) -> Result<PromptStop, SessionError> {
        let span = tracing::info_span!(parent: &self.span, "turn", objections = self.counters().objections);
        async {
            self.cancel_rx.borrow_and_update();
            self.boundary.llm_error = None;
            let next = self.boundary.drain(&self.host).await?;
            self.run_until_finish(next).await
        }
        .instrument(span)
        .await
    }

    async fn run_prompt(&mut self, text: String) -> Result<PromptStop, SessionError> {
        // A cancel that came before this prompt started is not for it.
        self.cancel_rx.borrow_and_update();
        self.boundary.llm_error = None;
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
                Work::Hooks {
                    hook,
                    servers,
                    timeout,
                    context,
                } => self.perform_hooks(hook, servers, timeout, context).await?,
            };
        }
    }

    async fn perform_llm(&mut self, purpose: Purpose) -> Result<Option<Next>, SessionError> {
        let outcome = {
            let request = self.boundary.machine.request(purpose);
            let call = self.llm.complete(request);
            tokio::select! {
                biased;
                () = cancelled(&mut self.cancel_rx) => None,
                result = call => Some(result),
            }
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
        let run = |call: ToolCall| async move {
            let started = Instant::now();
            let output = host.call_tool(&call).await;
            let elapsed_ms = started.elapsed().as_millis();
            tracing::debug!(tool = %call.name, elapsed_ms, "tool call ended");
            Input::ToolFinished {
                id: call.id,
                output,
            }
        };
        let mut queue = calls.into_iter().map(run);
        let running = queue.by_ref().take(self.tool_concurrency).collect();
        fan_out(
            &mut self.boundary,
            &mut self.cancel_rx,
            host,
            running,
            queue,
        )
        .await
    }

    async fn perform_hooks(
        &mut self,
        hook: Hook,
        servers: Vec<ServerName>,
        timeout: Duration,
        context: HookContext,
    ) -> Result<Option<Next>, SessionError> {
        let host = &self.host;
        let running = servers
            .into_iter()
            .map(|server| async move {
                let call = HookCall {
                    server,
                    hook,
                    timeout,
                    context,
                };
                // The host enforces the timeout; this bounds a host that does not.
                let reply = tokio::time::timeout(timeout + HOOK_GRACE, host.call_hook(&call))
                    .await
                    .unwrap_or(HookReply::TimedOut);
                Input::HookAnswered {
                    server: call.server,
                    hook,
                    reply,
                }
            })
            .collect();
        fan_out(
            &mut self.boundary,
            &mut self.cancel_rx,
            host,
            running,
            std::iter::empty(),
        )
        .await
    }
}

/// Runs calls concurrently, starting one from `queue` each time one ends, and feeds each
/// outcome to the machine as it arrives, until the machine gives its next order or the prompt
/// is cancelled (the calls still running are dropped, which cancels them).
async fn fan_out<F: Future<Output = Input>>(
    boundary: &mut Boundary,
    cancel_rx: &mut watch::Receiver<u64>,
    host: &impl ToolHost,
    mut running: FuturesUnordered<F>,
    mut queue: impl Iterator<Item = F>,
) -> Result<Option<Next>, SessionError> {
    loop {
        tokio::select! {
            biased;
            () = cancelled(cancel_rx) => {
                drop(running);
                boundary.feed(Input::Cancelled)?;
                return boundary.drain(host).await;
            }
            ended = running.next() => {
                let Some(fact) = ended else { return Err(SessionError::Stalled) };
                running.extend(queue.next());
                if running.is_empty() {
                    // The catalog may have changed meanwhile; the machine must know before it
                    // plans the next request.
                    boundary.sync_catalog(host)?;
                }
                boundary.feed(fact)?;
                if let Some(next) = boundary.drain(host).await? {
                    return Ok(Some(next));
                }
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
    Hooks {
        hook: Hook,
        servers: Vec<ServerName>,
        timeout: Duration,
        context: HookContext,
    },
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

    fn observe_effect(&mut self, effect: &Effect) {
        let at = self.started.elapsed();
        for observer in &mut self.observers {
            observer.on_effect(at, effect);
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

    /// Performs the orders that expect no answer, and returns the one that does (or the finish),
    /// if the machine gave one. The machine emits at most one such order per fact, always last.
    async fn drain(&mut self, host: &impl ToolHost) -> Result<Option<Next>, SessionError> {
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
                Effect::CallHooks {
                    hook,
                    servers,
                    timeout_ms,
                    context,
                } => Next::Work(Work::Hooks {
                    hook,
                    servers,
                    timeout: Duration::from_millis(timeout_ms),
                    context,
                }),
                Effect::Finish { reason } => Next::Finish(reason),
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
            FinishReason::Cancelled => PromptStop::Cancelled,
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

/// Resolves when the handle cancels; never, if every handle is gone.
async fn cancelled(rx: &mut watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
