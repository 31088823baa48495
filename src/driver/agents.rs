//! Subagents in the driver: a child machine driven beside its parent, through the parent's
//! model client, tool host and permission asker, until its one prompt finishes; its end is the
//! result of the `agent` call that started it. Like the session's loop, this only performs the
//! child's orders: every rule is the child machine's.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::{HookOrder, HookTimer, PermissionAsker, Round};
use crate::machine::{
    AgentId, CallId, Effect, Input, Machine, MachineError, Purpose, ToolCall, ToolOutput,
};
use crate::ports::{Delta, LlmClient, ToolHost};
use crate::telemetry::{self, SessionTrace};

/// Something a subagent's boundary saw, on its way to the session's observers.
pub(super) enum AgentEvent {
    Effect(Effect),
    Fact(Input),
    Delta(Delta),
    CallStarted(CallId),
}

/// An [`AgentEvent`] with the agent it belongs to and when it happened.
pub(super) struct Stamped {
    pub(super) at: Duration,
    pub(super) agent: AgentId,
    pub(super) event: AgentEvent,
}

/// What every subagent of a session is driven with: the session's model, tools and asker.
pub(super) struct Family<'a, L, H> {
    pub(super) llm: &'a L,
    pub(super) host: &'a H,
    pub(super) asker: &'a dyn PermissionAsker,
    pub(super) tool_concurrency: usize,
    pub(super) started: Instant,
    pub(super) events: mpsc::UnboundedSender<Stamped>,
    /// What the session's spans say of it; a child's spans say the same.
    pub(super) trace: &'a SessionTrace,
}

/// A boxed future of an agent call's result: boxed because a child may start children of its
/// own, which makes the driving recursive.
pub(super) type AgentRun<'a> = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>>;

impl<'a, L: LlmClient, H: ToolHost> Family<'a, L, H> {
    /// Drives `child` to its finish and returns its call's result. Dropping the future (the
    /// parent's prompt was cancelled) cancels the child: its machine is told, so what it
    /// recorded ends with the cancel.
    pub(super) fn run<'s>(&'s self, child: Machine) -> AgentRun<'s> {
        Box::pin(async move {
            let Some(agent) = child.agent().cloned() else {
                return ToolOutput::error("internal error: not a subagent");
            };
            // Made here, inside the `execute_tool agent` span the call runs in: its parent.
            let span = self.trace.invoke_subagent(&agent.id);
            let mut lane = Lane {
                family: self,
                id: agent.id,
                machine: child,
                catalog_generation: None,
                finished: false,
                round: None,
                hook_timer: HookTimer::default(),
            };
            let output = match lane.drive().instrument(span.clone()).await {
                Ok(output) => output,
                Err(error) => {
                    tracing::error!(agent = %lane.id, %error, "subagent driving failed");
                    ToolOutput::error(format!("internal error: {error}"))
                }
            };
            telemetry::subagent_ended(&span, &output);
            output
        })
    }
}

/// One subagent being driven.
struct Lane<'f, 'a, L, H> {
    family: &'f Family<'a, L, H>,
    id: AgentId,
    machine: Machine,
    catalog_generation: Option<u64>,
    /// The child's prompt finished; a drop after it cancels nothing.
    finished: bool,
    /// The span of the hook round just run, for the notices its answers bring.
    round: Option<Span>,
    hook_timer: HookTimer,
}

/// What the child waits on next.
enum Step {
    Llm(Purpose),
    Tools(Vec<ToolCall>),
    Hooks(HookOrder),
    Permission(ToolCall),
    Finished,
}

impl<L: LlmClient, H: ToolHost> Lane<'_, '_, L, H> {
    async fn drive(&mut self) -> Result<ToolOutput, MachineError> {
        self.sync_catalog()?;
        let task = self.machine.agent_task().unwrap_or_default().to_owned();
        self.feed(Input::Prompted { text: task })?;
        loop {
            let step = self.drain().await;
            let fact = match step {
                None => {
                    return Ok(ToolOutput::error(
                        "internal error: the subagent's machine stalled",
                    ));
                }
                Some(Step::Finished) => {
                    self.finished = true;
                    let output = self.machine.agent_result().cloned();
                    // A subagent's end is its session's end; it asks no `_SessionEnd`.
                    self.feed(Input::Closed)?;
                    return Ok(
                        output.unwrap_or_else(|| ToolOutput::error("internal error: no result"))
                    );
                }
                Some(Step::Llm(purpose)) => self.ask_model(purpose).await,
                Some(Step::Permission(call)) => Input::PermissionDecided {
                    id: call.id.clone(),
                    decision: self.family.asker.decide_in(&self.id, &call).await,
                },
                Some(Step::Tools(calls)) => {
                    self.run_calls(calls).await?;
                    continue;
                }
                Some(Step::Hooks(order)) => {
                    self.run_hooks(order).await?;
                    continue;
                }
            };
            self.sync_catalog()?;
            self.feed(fact)?;
        }
    }

    async fn ask_model(&mut self, purpose: Purpose) -> Input {
        let request = self.machine.request(purpose);
        let (family, id) = (self.family, &self.id);
        let compaction = telemetry::compaction(purpose);
        let chat = compaction.in_scope(|| family.trace.chat(&request));
        let mut first_chunk = telemetry::FirstChunk::new(&chat);
        let mut on_delta = |delta: Delta| {
            first_chunk.seen();
            let _ = family.events.send(Stamped {
                at: family.started.elapsed(),
                agent: id.clone(),
                event: AgentEvent::Delta(delta),
            });
        };
        let result = family
            .llm
            .stream(request, &mut on_delta)
            .instrument(chat.clone())
            .await;
        family.trace.chat_ended(&chat, Some(&result));
        // The compaction's sizes come with the notice that follows the reply.
        self.round = Some(compaction).filter(|span| !span.is_none());
        match result {
            Ok(reply) => Input::LlmReplied { reply },
            Err(error) => Input::LlmFailed {
                error: error.to_string(),
            },
        }
    }

    /// Runs one reply's calls, a few at a time as the session does, a child's own `agent`
    /// calls as children of it; feeds each result as it comes.
    async fn run_calls(&mut self, calls: Vec<ToolCall>) -> Result<(), MachineError> {
        let family = self.family;
        let mut queue = calls
            .into_iter()
            .map(|call| {
                let child = self.machine.spawn_child(&call);
                (call, child)
            })
            .collect::<Vec<_>>()
            .into_iter();
        let run = |call: ToolCall, child: Option<Machine>| async move {
            let span = telemetry::execute_tool(&call);
            let output = match child {
                Some(child) => family.run(child).instrument(span.clone()).await,
                None => {
                    Box::pin(family.host.call_tool(&call))
                        .instrument(span.clone())
                        .await
                }
            };
            telemetry::tool_ended(&span, &output);
            Input::ToolFinished {
                id: call.id,
                output,
            }
        };
        let mut running = FuturesUnordered::new();
        let limit = family.tool_concurrency.max(1);
        loop {
            while running.len() < limit {
                let Some((call, child)) = queue.next() else {
                    break;
                };
                self.send(AgentEvent::CallStarted(call.id.clone()));
                running.push(run(call, child));
            }
            let Some(fact) = running.next().await else {
                return Ok(());
            };
            if running.is_empty() && queue.len() == 0 {
                self.sync_catalog()?;
            }
            self.feed(fact)?;
        }
    }

    async fn run_hooks(&mut self, order: HookOrder) -> Result<(), MachineError> {
        let span = order.span();
        // Lent to the round, which the lane's feeding must not borrow.
        let mut timer = std::mem::take(&mut self.hook_timer);
        let mut round = Round::start(self.family.host, &order, &span, &mut timer);
        let mut fed = Ok(());
        while let Some(fact) = round.next().await {
            fed = self.feed(fact);
            if fed.is_err() {
                break;
            }
        }
        drop(round);
        self.hook_timer = timer;
        // The round's objection or denial comes with the notices that follow its answers.
        self.round = Some(span);
        fed
    }

    /// Performs the orders that expect no answer and returns the one that does, or the finish.
    async fn drain(&mut self) -> Option<Step> {
        // Entered, not only named as the parent: an event's parent must be a span the trace
        // records, which the current one, a driver's span, may not be.
        let span = self.round.take().unwrap_or_else(Span::current);
        while let Some(effect) = self.machine.poll_effect() {
            span.in_scope(|| telemetry::effect_event(&effect));
            self.send(AgentEvent::Effect(effect.clone()));
            return Some(match effect {
                Effect::Notify { .. } => continue,
                Effect::KillServer { server } => {
                    self.family.host.kill_server(&server).await;
                    continue;
                }
                Effect::CallLlm { purpose, .. } => Step::Llm(purpose),
                Effect::CallTools { calls } => Step::Tools(calls),
                Effect::AskPermission { call } => Step::Permission(call),
                Effect::CallHooks {
                    hook,
                    servers,
                    timeout,
                    context,
                    subjects,
                } => Step::Hooks(HookOrder {
                    hook,
                    servers,
                    timeout,
                    context,
                    subjects,
                }),
                Effect::Finish { .. } => Step::Finished,
            });
        }
        None
    }

    fn feed(&mut self, fact: Input) -> Result<(), MachineError> {
        self.send(AgentEvent::Fact(fact.clone()));
        self.machine.handle(fact)
    }

    fn sync_catalog(&mut self) -> Result<(), MachineError> {
        let generation = self.family.host.catalog_generation();
        if self.catalog_generation != Some(generation) {
            self.catalog_generation = Some(generation);
            self.feed(Input::CatalogChanged {
                catalog: self.family.host.catalog(),
            })?;
        }
        Ok(())
    }

    fn send(&self, event: AgentEvent) {
        // The receiver lives as long as the parent's fan-out that polls this lane.
        let _ = self.family.events.send(Stamped {
            at: self.family.started.elapsed(),
            agent: self.id.clone(),
            event,
        });
    }
}

impl<L, H> Drop for Lane<'_, '_, L, H> {
    /// A lane dropped before its finish was cut by its parent's cancel: the child is told, so
    /// that what observers saw of it ends with the cancel and its finish.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut facts = vec![Input::Cancelled, Input::Closed];
        facts.reverse();
        while let Some(fact) = facts.pop() {
            let stamp = |event| Stamped {
                at: self.family.started.elapsed(),
                agent: self.id.clone(),
                event,
            };
            let _ = self
                .family
                .events
                .send(stamp(AgentEvent::Fact(fact.clone())));
            if self.machine.handle(fact).is_err() {
                return;
            }
            while let Some(effect) = self.machine.poll_effect() {
                let _ = self.family.events.send(stamp(AgentEvent::Effect(effect)));
            }
        }
    }
}
