//! Deterministic replay: the pure machine against the record, without tokio, servers or model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::machine::{AgentId, Catalog, Effect, FinishReason, Input, Machine, Phase};
use crate::supervisor::{self, Supervisor};
use crate::transcript::report::{
    Divergence, DivergenceKind, ReplayError, ReplayReport, SubagentReport, pretty,
};
use crate::transcript::{Event, Header, Record, Transcript, TranscriptError};

/// Replays the transcript file at `path`. See [`Replayer`].
pub fn replay(path: impl AsRef<Path>) -> Result<ReplayReport, ReplayError> {
    let transcript = Transcript::read(path)?;
    replayable(&transcript)?;
    Ok(transcript.replay()?)
}

/// Replays a transcript held in memory, as read from a file.
pub fn replay_str(text: &str) -> Result<ReplayReport, ReplayError> {
    let transcript = Transcript::parse(text)?;
    replayable(&transcript)?;
    Ok(transcript.replay()?)
}

/// Refuses a record whose content was redacted: its digests pin words it no longer holds, so
/// it would diverge at the first model request for a reason that is not the engine's.
pub(crate) fn replayable(transcript: &Transcript) -> Result<(), TranscriptError> {
    if transcript.header.content_redacted {
        Err(TranscriptError::ContentRedacted)
    } else {
        Ok(())
    }
}

impl Transcript {
    /// Replays the records against a machine built from the header: each recorded effect must
    /// be the machine's next effect, and each recorded fact is fed back. Stops at the first
    /// divergence.
    pub fn replay(&self) -> Result<ReplayReport, Box<Divergence>> {
        let mut replayer = Replayer::new(&self.header);
        for (index, record) in self.records.iter().enumerate() {
            replayer
                .step(record)
                .map_err(|d| d.locate(index, self.line_of(index)))?;
        }
        let end = self.records.len();
        let mut report = replayer
            .finish(self.truncated.is_some())
            .map_err(|d| d.locate(end, self.line_of(end)))?;
        report.truncated.clone_from(&self.truncated);
        Ok(report)
    }
}

/// Checks records against a machine one at a time: for a transcript that is still being
/// written, or to stop and look at the machine mid-way.
///
/// The driving contract is the machine's own: after each fact the machine's orders are taken
/// in order, and the next fact comes only once they all are. So a recorded effect must be the
/// machine's next order, and before a recorded fact the machine must have none left.
///
/// Subagents replay beside the top-level agent: each `agent` call of a checked
/// [`Effect::CallTools`] starts a child machine (as the driver starts one), and the records
/// of its lane (those with its [`agent`](Event::agent)) are checked against it under the
/// same contract. The `tool_finished` fact that answers an `agent` call must be the result
/// the replayed child ended with. A record that holds no lane at all was written before lanes
/// were recorded: it replays as before, its `agent` calls' results taken as recorded
/// ([`SubagentReport::lane_recorded`] says which).
#[derive(Debug)]
pub struct Replayer {
    machine: Machine,
    /// Every subagent started so far, by id.
    pub(super) agents: BTreeMap<AgentId, Machine>,
    /// How each subagent's prompt ended, once it did.
    agent_finishes: BTreeMap<AgentId, FinishReason>,
    /// The subagents whose lanes the record holds. Once it holds one, every `agent` call's
    /// result is checked against its subagent's.
    pub(super) lanes: BTreeSet<AgentId>,
    /// Rebuilt when the header has the supervision policy; supervision records are then
    /// checked like the machine's, else skipped.
    supervisor: Option<Supervisor>,
    /// The header's catalog, until the first fact is checked against it.
    header_catalog: Option<Catalog>,
    pub(super) records: usize,
    facts: usize,
    effects: usize,
    finishes: Vec<FinishReason>,
    pub(super) last_at_ms: u64,
}

impl Replayer {
    /// A machine built from the header's configuration, before any record.
    pub fn new(header: &Header) -> Self {
        let config = &header.config;
        let servers = header.catalog.servers.iter().map(|s| s.server.clone());
        Self {
            machine: Machine::new(config.policy.clone(), config.system_prompt.clone()),
            agents: BTreeMap::new(),
            agent_finishes: BTreeMap::new(),
            lanes: BTreeSet::new(),
            supervisor: header
                .supervision
                .map(|policy| Supervisor::new(policy, servers)),
            header_catalog: Some(header.catalog.clone()),
            records: 0,
            facts: 0,
            effects: 0,
            finishes: Vec::new(),
            last_at_ms: 0,
        }
    }

    /// Checks one record. The divergence it returns has `index` and `line` 0: the caller knows
    /// where the record came from (a [`Transcript`] fills them in).
    pub fn step(&mut self, record: &Record) -> Result<(), Box<Divergence>> {
        match &record.event {
            Event::Effect(expected) => self.effect(None, expected)?,
            Event::AgentEffect { agent, effect } => {
                self.lanes.insert(agent.clone());
                self.effect(Some(agent), effect)?;
            }
            Event::Fact(fact) => {
                if let Some(header) = self.header_catalog.take() {
                    check_header_catalog(self.machine.phase(), header, fact)?;
                }
                self.fact(None, fact)?;
            }
            Event::AgentFact { agent, fact } => {
                self.lanes.insert(agent.clone());
                self.fact(Some(agent), fact)?;
            }
            Event::Supervision(event) => {
                if let Some(supervisor) = &mut self.supervisor {
                    check_supervision(supervisor, event).map_err(|problem| {
                        Divergence::new(
                            self.machine.phase(),
                            DivergenceKind::SupervisionMismatch {
                                recorded: event.clone(),
                                problem,
                            },
                        )
                    })?;
                }
            }
        }
        self.records += 1;
        self.last_at_ms = record.at_ms;
        Ok(())
    }

    /// The machine of `agent`'s lane: the top-level agent's for `None`.
    pub(super) fn lane(
        &mut self,
        agent: Option<&AgentId>,
    ) -> Result<&mut Machine, Box<Divergence>> {
        let Some(id) = agent else {
            return Ok(&mut self.machine);
        };
        let phase = self.machine.phase();
        self.agents.get_mut(id).ok_or_else(|| {
            Divergence::new(phase, DivergenceKind::UnknownAgent { agent: id.clone() })
                .in_agent(Some(id))
        })
    }

    /// Checks a recorded order of `agent` against its machine's next; an `agent` call among
    /// the calls of a checked `call_tools` starts its child, as the driver does when it
    /// performs the order.
    fn effect(
        &mut self,
        agent: Option<&AgentId>,
        expected: &Effect,
    ) -> Result<(), Box<Divergence>> {
        let phase = self.lane(agent)?.phase();
        match self.take_effect(agent)? {
            Some(actual) if actual == *expected => Ok(()),
            Some(actual) => Err(Divergence::new(
                phase,
                DivergenceKind::EffectMismatch {
                    expected: expected.clone(),
                    actual,
                },
            )
            .in_agent(agent)),
            None => Err(Divergence::new(
                phase,
                DivergenceKind::MissingEffect {
                    expected: expected.clone(),
                },
            )
            .in_agent(agent)),
        }
    }

    /// Takes the next order of `agent`'s machine, as the driver performs it: an `agent` call
    /// among the calls of a `call_tools` starts its child, and a finish is noted.
    pub(super) fn take_effect(
        &mut self,
        agent: Option<&AgentId>,
    ) -> Result<Option<Effect>, Box<Divergence>> {
        let machine = self.lane(agent)?;
        let Some(actual) = machine.poll_effect() else {
            return Ok(None);
        };
        if let Effect::CallTools { calls } = &actual {
            let children: Vec<Machine> = calls
                .iter()
                .filter_map(|call| machine.spawn_child(call))
                .collect();
            for child in children {
                if let Some(me) = child.agent() {
                    self.agents.insert(me.id.clone(), child);
                }
            }
        }
        self.effects += 1;
        if let Effect::Finish { reason } = &actual {
            match agent {
                None => self.finishes.push(reason.clone()),
                Some(id) => {
                    self.agent_finishes.insert(id.clone(), reason.clone());
                }
            }
        }
        Ok(Some(actual))
    }

    /// Feeds a recorded fact of `agent` to its machine, which must have no order left; the
    /// result of an `agent` call must be the one its child ended with.
    fn fact(&mut self, agent: Option<&AgentId>, fact: &Input) -> Result<(), Box<Divergence>> {
        let child_result = match fact {
            // An engine that did not record lanes wrote no record of any subagent: its calls'
            // results are taken as recorded (and the report says so).
            Input::ToolFinished { id, output } if !self.lanes.is_empty() => self
                .agents
                .get(&AgentId(id.0.clone()))
                .filter(|child| is_child_of(child, agent))
                .map(|child| (child.agent_result().cloned(), output)),
            _ => None,
        };
        let machine = self.lane(agent)?;
        let phase = machine.phase();
        if let Some(actual) = machine.poll_effect() {
            return Err(Divergence::new(
                phase,
                DivergenceKind::UnrecordedEffect {
                    actual,
                    before: Some(fact.clone()),
                },
            )
            .in_agent(agent));
        }
        if let Some((replayed, recorded)) = child_result
            && replayed.as_ref() != Some(recorded)
        {
            return Err(Divergence::new(
                phase,
                DivergenceKind::AgentResultMismatch {
                    recorded: recorded.clone(),
                    replayed,
                },
            )
            .in_agent(agent));
        }
        if let Err(error) = machine.handle(fact.clone()) {
            return Err(Divergence::new(
                phase,
                DivergenceKind::FactRefused {
                    fact: fact.clone(),
                    error,
                },
            )
            .in_agent(agent));
        }
        self.facts += 1;
        Ok(())
    }

    /// Ends the replay. Every order the machine gave must have been recorded, and every order
    /// a subagent gave, unless the transcript was `truncated` (the recorder died before
    /// writing them).
    pub fn finish(mut self, truncated: bool) -> Result<ReplayReport, Box<Divergence>> {
        let phase = self.machine.phase();
        let mut unrecorded = 0;
        let lanes = std::iter::once((None, &mut self.machine))
            .chain(self.agents.iter_mut().map(|(id, child)| (Some(id), child)));
        for (agent, machine) in lanes {
            let phase = machine.phase();
            while let Some(actual) = machine.poll_effect() {
                if !truncated {
                    return Err(Divergence::new(
                        phase,
                        DivergenceKind::UnrecordedEffect {
                            actual,
                            before: None,
                        },
                    )
                    .in_agent(agent));
                }
                unrecorded += 1;
            }
        }
        Ok(ReplayReport {
            records: self.records,
            facts: self.facts,
            effects: self.effects,
            phase,
            counters: self.machine.counters().clone(),
            history_len: self.machine.history().len(),
            finishes: self.finishes,
            subagents: self
                .agents
                .iter()
                .map(|(id, child)| SubagentReport {
                    id: id.clone(),
                    phase: child.phase(),
                    finish: self.agent_finishes.remove(id),
                    lane_recorded: self.lanes.contains(id),
                })
                .collect(),
            last_at_ms: self.last_at_ms,
            unrecorded_effects: unrecorded,
            truncated: None,
        })
    }

    /// The machine as the records so far left it.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The machine of the subagent `agent` as the records so far left it, once its `agent`
    /// call was ordered.
    pub fn agent(&self, agent: &AgentId) -> Option<&Machine> {
        self.agents.get(agent)
    }

    /// The machine as the records so far left it, to go on with live.
    pub fn into_machine(self) -> Machine {
        self.machine
    }
}

/// Whether `child` is a subagent that the lane of `agent` started (the top-level agent's lane
/// for `None`): a call id of that lane names it only then.
pub(crate) fn is_child_of(child: &Machine, agent: Option<&AgentId>) -> bool {
    child.agent().is_some_and(|me| me.parent.as_ref() == agent)
}

/// Feeds a recorded supervision fact, or checks a recorded order against the supervisor's next.
fn check_supervision(supervisor: &mut Supervisor, event: &supervisor::Event) -> Result<(), String> {
    match event {
        supervisor::Event::Fact(fact) => {
            if let Some(order) = supervisor.poll_order() {
                return Err(format!(
                    "the supervisor gave an order the record does not have: {}",
                    pretty(&order)
                ));
            }
            supervisor.handle(fact.clone()).map_err(|e| e.to_string())
        }
        supervisor::Event::Order(recorded) => match supervisor.poll_order() {
            Some(order) if order == *recorded => Ok(()),
            Some(order) => Err(format!(
                "the supervisor gave another order: {}",
                pretty(&order)
            )),
            None => Err("the supervisor gave no order here".to_owned()),
        },
    }
}

/// The header's catalog is what the session knew when recording started: the session's first
/// fact is the `catalog_changed` that hands it to the machine, or, with no tools at all, any
/// fact. A header that says otherwise describes another session.
fn check_header_catalog(
    phase: Phase,
    header: Catalog,
    fact: &Input,
) -> Result<(), Box<Divergence>> {
    let first = match fact {
        Input::CatalogChanged { catalog } => Some(catalog),
        Input::Prompted { .. }
        | Input::LlmReplied { .. }
        | Input::LlmFailed { .. }
        | Input::ToolFinished { .. }
        | Input::HookAnswered { .. }
        | Input::PermissionDecided { .. }
        | Input::PermissionSettingChanged { .. }
        | Input::Cancelled
        | Input::PromptInterrupted
        | Input::Closed => None,
    };
    let same = match first {
        Some(catalog) => *catalog == header,
        None => header.servers.is_empty(),
    };
    if same {
        Ok(())
    } else {
        Err(Divergence::new(
            phase,
            DivergenceKind::HeaderCatalog {
                header,
                first: first.cloned(),
            },
        ))
    }
}
