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

use super::{PermissionAsker, call_hook_bounded, hook_calls};
use crate::llm::{Delta, LlmClient};
use crate::machine::{
    AgentId, CallId, Effect, Input, Machine, MachineError, Purpose, ToolCall, ToolOutput,
};
use crate::mcp::ToolHost;

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
            let mut lane = Lane {
                family: self,
                id: agent.id,
                machine: child,
                catalog_generation: None,
                finished: false,
            };
            match lane.drive().await {
                Ok(output) => output,
                Err(error) => {
                    tracing::error!(agent = %lane.id, %error, "subagent driving failed");
                    ToolOutput::error(format!("internal error: {error}"))
                }
            }
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
}

/// What the child waits on next.
enum Step {
    Llm(Purpose),
    Tools(Vec<ToolCall>),
    Hooks(Effect),
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
        let mut on_delta = |delta: Delta| {
            let _ = family.events.send(Stamped {
                at: family.started.elapsed(),
                agent: id.clone(),
                event: AgentEvent::Delta(delta),
            });
        };
        match self.family.llm.stream(request, &mut on_delta).await {
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
            let output = match child {
                Some(child) => family.run(child).await,
                None => Box::pin(family.host.call_tool(&call)).await,
            };
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

    async fn run_hooks(&mut self, order: Effect) -> Result<(), MachineError> {
        let Effect::CallHooks {
            hook,
            servers,
            timeout_ms,
            context,
            subjects,
        } = order
        else {
            return Ok(());
        };
        let host = self.family.host;
        let timeout = Duration::from_millis(timeout_ms);
        let mut running: FuturesUnordered<_> =
            hook_calls(hook, &servers, timeout, context, &subjects)
                .map(|(subject, call)| async move {
                    let reply = call_hook_bounded(host, &call).await;
                    Input::HookAnswered {
                        server: call.server,
                        hook,
                        reply,
                        subject,
                    }
                })
                .collect();
        while let Some(fact) = running.next().await {
            self.feed(fact)?;
        }
        Ok(())
    }

    /// Performs the orders that expect no answer and returns the one that does, or the finish.
    async fn drain(&mut self) -> Option<Step> {
        while let Some(effect) = self.machine.poll_effect() {
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
                order @ Effect::CallHooks { .. } => Step::Hooks(order),
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
