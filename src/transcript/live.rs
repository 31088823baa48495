//! Live-tools replay: the model's side comes from the record, tools and hooks run against real
//! servers, and every answer that differs from the record is reported as drift.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use futures_util::future::join_all;

use crate::driver::{HookOrder, HookTimer, Round};
use crate::hooks::ServerName;
use crate::machine::{
    AGENT_TOOL, AgentId, CallId, Effect, HookReply, Input, Machine, Notice, ToolOutput,
};
use crate::ports::ToolHost;
use crate::transcript::replay::is_child_of;
use crate::transcript::{Divergence, DivergenceKind};
use crate::transcript::{Event, Transcript, Truncation};

/// Replays `transcript` with the model's side from the record and tools, hooks and the catalog
/// from `host`: each recorded tool result, hook answer and catalog change is replaced by what
/// `host` answers now, and the differences are reported as [`Drift`].
///
/// The machine then runs on the live answers. Once something drifted, the model requests that
/// follow are accepted whatever their digest (the history they pin now holds the live
/// answers); orders that differ in kind (a hook that objected and no longer does) end the
/// replay with the divergence, since the recorded model replies no longer fit.
pub async fn replay_live<H: ToolHost>(transcript: &Transcript, host: &H) -> LiveReport {
    let config = &transcript.header.config;
    let mut live = Live {
        top: Lane::new(Machine::new(
            config.policy.clone(),
            config.system_prompt.clone(),
        )),
        agents: BTreeMap::new(),
        drifts: Vec::new(),
        hook_timer: HookTimer::default(),
    };
    for (index, record) in transcript.records.iter().enumerate() {
        let line = transcript.line_of(index);
        let step = match &record.event {
            Event::Effect(expected) => live.check_effect(None, expected, host).await,
            Event::Fact(fact) => live.feed(None, fact, host, index, line),
            Event::AgentEffect { agent, effect } => {
                live.check_effect(Some(agent), effect, host).await
            }
            Event::AgentFact { agent, fact } => live.feed(Some(agent), fact, host, index, line),
            // The live host supervises its servers itself; the record's restarts are its
            // recording session's.
            Event::Supervision(_) => Ok(()),
        };
        if let Err(divergence) = step {
            let mut divergence = divergence;
            divergence.index = index;
            divergence.line = line;
            return LiveReport {
                records: index,
                drifts: live.drifts,
                divergence: Some(divergence),
                truncated: transcript.truncated.clone(),
            };
        }
    }
    // The end of the record is checked too: an order the machine gave after the last record
    // is a divergence, unless the record was cut short and could not hold it.
    let end = transcript.records.len();
    let lanes = std::iter::once((None, &mut live.top))
        .chain(live.agents.iter_mut().map(|(id, lane)| (Some(id), lane)));
    let mut divergence = None;
    for (agent, lane) in lanes {
        if let Some(actual) = lane.machine.poll_effect()
            && transcript.truncated.is_none()
        {
            let found = Divergence::new(
                lane.machine.phase(),
                DivergenceKind::UnrecordedEffect {
                    actual,
                    before: None,
                },
            )
            .in_agent(agent)
            .locate(end, transcript.line_of(end));
            divergence = Some(found);
            break;
        }
    }
    LiveReport {
        records: end,
        drifts: live.drifts,
        divergence,
        truncated: transcript.truncated.clone(),
    }
}

/// What a live-tools replay found.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LiveReport {
    /// Records replayed before the end or the divergence.
    pub records: usize,
    /// Every answer that differs from the record, in order.
    pub drifts: Vec<Drift>,
    /// Where the session's course parted from the record, if it did.
    pub divergence: Option<Box<Divergence>>,
    /// The record's cut-short last line, if there was one: the replay covers less than the
    /// session.
    pub truncated: Option<Truncation>,
}

impl LiveReport {
    /// Whether the servers answered exactly as recorded.
    pub fn is_clean(&self) -> bool {
        self.drifts.is_empty() && self.divergence.is_none()
    }
}

impl fmt::Display for LiveReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "replayed {} records against live servers: {} answer(s) drifted",
            self.records,
            self.drifts.len()
        )?;
        for drift in &self.drifts {
            write!(f, "\n\n{drift}")?;
        }
        if let Some(truncated) = &self.truncated {
            write!(
                f,
                "\n\nthe record is cut short: line {} ({} bytes) is incomplete and was skipped",
                truncated.line, truncated.bytes
            )?;
        }
        if let Some(divergence) = &self.divergence {
            write!(f, "\n\nthe session then took another course:\n{divergence}")?;
        }
        Ok(())
    }
}

/// One answer from a live server that differs from the record.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Drift {
    /// The index of the recorded answer.
    pub index: usize,
    /// Its line in the file.
    pub line: usize,
    /// What differs.
    pub kind: DriftKind,
}

/// What drifted.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum DriftKind {
    /// A tool call's result.
    Tool {
        /// The call's id.
        id: CallId,
        /// The qualified tool name.
        name: String,
        /// The result in the record.
        recorded: ToolOutput,
        /// The live result.
        live: ToolOutput,
    },
    /// A hook's answer.
    Hook {
        /// The server.
        server: ServerName,
        /// The hook.
        hook: crate::Hook,
        /// The answer in the record.
        recorded: HookReply,
        /// The live answer.
        live: HookReply,
    },
    /// The tool catalog.
    Catalog {
        /// The catalog in the record.
        recorded: crate::machine::Catalog,
        /// The catalog the live servers have.
        live: crate::machine::Catalog,
    },
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, recorded, live) = match &self.kind {
            DriftKind::Tool {
                id,
                name,
                recorded,
                live,
            } => (
                format!("tool {name} (call {id})"),
                pretty(recorded),
                pretty(live),
            ),
            DriftKind::Hook {
                server,
                hook,
                recorded,
                live,
            } => (
                format!("{hook} on {server}"),
                pretty(recorded),
                pretty(live),
            ),
            DriftKind::Catalog { recorded, live } => (
                "the tool catalog".to_owned(),
                pretty(recorded),
                pretty(live),
            ),
        };
        write!(
            f,
            "record {} (line {}): {what} answered differently\n--- recorded\n+++ live\n{}",
            self.index,
            self.line,
            super::line_diff(&recorded, &live)
        )
    }
}

/// The top-level agent and its subagents, each replayed on its own lane.
struct Live {
    top: Lane,
    /// Every subagent started so far, by id.
    agents: BTreeMap<AgentId, Lane>,
    drifts: Vec<Drift>,
    /// The one timer of the live hook rounds.
    hook_timer: HookTimer,
}

/// One agent's machine and the live answers to its last order.
struct Lane {
    machine: Machine,
    /// Live results of the last `CallTools`, by call id.
    tools: HashMap<CallId, (String, ToolOutput)>,
    /// Live answers of the last `CallHooks`, by server.
    hooks: HashMap<(ServerName, Option<u32>), HookReply>,
}

impl Lane {
    fn new(machine: Machine) -> Self {
        Self {
            machine,
            tools: HashMap::new(),
            hooks: HashMap::new(),
        }
    }
}

/// The lane of `agent` (the top-level agent's for `None`).
fn lane<'a>(
    top: &'a mut Lane,
    agents: &'a mut BTreeMap<AgentId, Lane>,
    agent: Option<&AgentId>,
) -> Result<&'a mut Lane, Box<Divergence>> {
    let Some(id) = agent else {
        return Ok(top);
    };
    let phase = top.machine.phase();
    agents.get_mut(id).ok_or_else(|| {
        Divergence::new(phase, DivergenceKind::UnknownAgent { agent: id.clone() }).in_agent(agent)
    })
}

impl Live {
    async fn check_effect(
        &mut self,
        agent: Option<&AgentId>,
        expected: &Effect,
        host: &impl ToolHost,
    ) -> Result<(), Box<Divergence>> {
        let drifted = !self.drifts.is_empty();
        let lane = lane(&mut self.top, &mut self.agents, agent)?;
        let phase = lane.machine.phase();
        let Some(actual) = lane.machine.poll_effect() else {
            return Err(Divergence::new(
                phase,
                DivergenceKind::MissingEffect {
                    expected: expected.clone(),
                },
            )
            .in_agent(agent));
        };
        let fits = actual == *expected || (drifted && same_course(expected, &actual));
        if !fits {
            return Err(Divergence::new(
                phase,
                DivergenceKind::EffectMismatch {
                    expected: expected.clone(),
                    actual,
                },
            )
            .in_agent(agent));
        }
        match actual {
            Effect::CallTools { calls } => {
                // An `agent` call runs no server tool: its subagent replays on its own lane,
                // from the record's model replies against the live tools.
                let mut children = Vec::new();
                let mut run = Vec::new();
                for call in calls {
                    match lane.machine.spawn_child(&call) {
                        Some(child) => children.push(child),
                        None => run.push(call),
                    }
                }
                let outputs = join_all(run.iter().map(|call| host.call_tool(call))).await;
                lane.tools = run
                    .into_iter()
                    .zip(outputs)
                    .map(|(call, output)| (call.id, (call.name, output)))
                    .collect();
                for child in children {
                    if let Some(me) = child.agent() {
                        self.agents.insert(me.id.clone(), Lane::new(child));
                    }
                }
            }
            Effect::CallHooks {
                hook,
                servers,
                timeout,
                context,
                subjects,
            } => {
                let order = HookOrder {
                    hook,
                    servers,
                    timeout,
                    context,
                    subjects,
                };
                let mut round = Round::start(host, &order, &order.span(), &mut self.hook_timer);
                lane.hooks.clear();
                while let Some(fact) = round.next().await {
                    if let Input::HookAnswered {
                        server,
                        reply,
                        subject,
                        ..
                    } = fact
                    {
                        lane.hooks.insert((server, subject), reply);
                    }
                }
            }
            Effect::KillServer { server } => host.kill_server(&server).await,
            // The user's decision is replayed as recorded: nobody is asked again.
            Effect::CallLlm { .. }
            | Effect::AskPermission { .. }
            | Effect::Notify { .. }
            | Effect::Finish { .. } => {}
        }
        Ok(())
    }

    fn feed(
        &mut self,
        agent: Option<&AgentId>,
        recorded: &Input,
        host: &impl ToolHost,
        index: usize,
        line: usize,
    ) -> Result<(), Box<Divergence>> {
        // The live result of an `agent` call is what its subagent ended with here.
        let child_result = match recorded {
            Input::ToolFinished { id, .. } => self
                .agents
                .get(&AgentId(id.0.clone()))
                .filter(|child| is_child_of(&child.machine, agent))
                .and_then(|child| child.machine.agent_result().cloned()),
            _ => None,
        };
        let drifts = &mut self.drifts;
        let mut drift = |kind| {
            tracing::info!(index, line, "live server answer drifted from the record");
            drifts.push(Drift { index, line, kind });
        };
        let lane = lane(&mut self.top, &mut self.agents, agent)?;
        let phase = lane.machine.phase();
        if let Some(actual) = lane.machine.poll_effect() {
            return Err(Divergence::new(
                phase,
                DivergenceKind::UnrecordedEffect {
                    actual,
                    before: Some(recorded.clone()),
                },
            )
            .in_agent(agent));
        }
        let fact = match recorded {
            Input::ToolFinished { id, output } => {
                let live = match child_result {
                    Some(live) => Some((AGENT_TOOL.to_owned(), live)),
                    None => lane.tools.remove(id),
                };
                match live {
                    Some((name, live)) => {
                        if live != *output {
                            drift(DriftKind::Tool {
                                id: id.clone(),
                                name,
                                recorded: output.clone(),
                                live: live.clone(),
                            });
                        }
                        Input::ToolFinished {
                            id: id.clone(),
                            output: live,
                        }
                    }
                    None => recorded.clone(),
                }
            }
            Input::HookAnswered {
                server,
                hook,
                reply,
                subject,
            } => match lane.hooks.remove(&(server.clone(), *subject)) {
                Some(live) => {
                    if live != *reply {
                        drift(DriftKind::Hook {
                            server: server.clone(),
                            hook: *hook,
                            recorded: reply.clone(),
                            live: live.clone(),
                        });
                    }
                    Input::HookAnswered {
                        server: server.clone(),
                        hook: *hook,
                        reply: live,
                        subject: *subject,
                    }
                }
                None => recorded.clone(),
            },
            Input::CatalogChanged { catalog } => {
                let live = host.catalog();
                if live != *catalog {
                    drift(DriftKind::Catalog {
                        recorded: catalog.clone(),
                        live: live.clone(),
                    });
                }
                Input::CatalogChanged { catalog: live }
            }
            Input::Prompted { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. }
            | Input::Cancelled
            | Input::PromptInterrupted
            | Input::Closed => recorded.clone(),
        };
        lane.machine.handle(fact.clone()).map_err(|error| {
            Divergence::new(phase, DivergenceKind::FactRefused { fact, error }).in_agent(agent)
        })
    }
}

/// Whether `actual` takes the same course as `expected` once content has drifted: the same
/// order, differing only in what the live answers changed (a history digest, a hook's words).
fn same_course(expected: &Effect, actual: &Effect) -> bool {
    match (expected, actual) {
        (Effect::CallLlm { purpose: a, .. }, Effect::CallLlm { purpose: b, .. }) => a == b,
        (Effect::Notify { notice: a }, Effect::Notify { notice: b }) => match (a, b) {
            (Notice::Objection { server: a, .. }, Notice::Objection { server: b, .. })
            | (
                Notice::PostCompactInjected { server: a, .. },
                Notice::PostCompactInjected { server: b, .. },
            ) => a == b,
            (
                Notice::HookFailedOpen {
                    server: a, hook: x, ..
                },
                Notice::HookFailedOpen {
                    server: b, hook: y, ..
                },
            ) => a == b && x == y,
            (Notice::Compacted { summarized: a, .. }, Notice::Compacted { summarized: b, .. }) => {
                a == b
            }
            _ => a == b,
        },
        _ => expected == actual,
    }
}

fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}
