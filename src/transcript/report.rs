//! What a replay comes to: the report of a clean one, and where and how one parted from its
//! record.

use std::fmt;

use crate::machine::{
    AgentId, Catalog, Counters, Effect, FinishReason, Input, MachineError, Phase, ToolOutput,
};
use crate::supervisor;
use crate::transcript::diff::line_diff;
use crate::transcript::{TranscriptError, Truncation};

/// What a clean replay found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// Records replayed.
    pub records: usize,
    /// Facts fed.
    pub facts: usize,
    /// Effects checked.
    pub effects: usize,
    /// Where the machine ended.
    pub phase: Phase,
    /// The session-wide counters at the end.
    pub counters: Counters,
    /// Messages in the history at the end.
    pub history_len: usize,
    /// How each prompt ended, in order.
    pub finishes: Vec<FinishReason>,
    /// Every subagent the record started, in the order of their ids.
    pub subagents: Vec<SubagentReport>,
    /// The virtual time of the last record.
    pub last_at_ms: u64,
    /// Orders the machine gave after the last record of a truncated transcript.
    pub unrecorded_effects: usize,
    /// The cut-short last line, if there was one.
    pub truncated: Option<Truncation>,
}

/// Where a replayed subagent ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubagentReport {
    /// Its id, the id of the `agent` call that started it.
    pub id: AgentId,
    /// Where its machine ended: done, for a subagent whose record is whole.
    pub phase: Phase,
    /// How its prompt ended; `None` when it did not finish in the record.
    pub finish: Option<FinishReason>,
    /// The record holds its lane. A transcript written before subagents' lanes were recorded
    /// (within format version 2) holds none: its `agent` calls' results are then taken as
    /// recorded, unchecked.
    pub lane_recorded: bool,
}

impl ReplayReport {
    /// Whether the record covers the session to a resting point: no line was cut short and the
    /// last record leaves the machine idle or closed. A record a crash or a write error ended
    /// mid-prompt replays as far as it goes, but it is not a whole match.
    pub fn is_whole(&self) -> bool {
        self.incompleteness().is_none()
    }

    /// Why the record is not whole, in words; `None` when it is.
    pub fn incompleteness(&self) -> Option<String> {
        if let Some(truncated) = &self.truncated {
            return Some(format!(
                "the record is cut short: line {} ({} bytes) is incomplete and was skipped, and \
                 {} order(s) the machine gave after the last whole record are not in it",
                truncated.line, truncated.bytes, self.unrecorded_effects
            ));
        }
        match self.phase {
            Phase::Idle | Phase::Done => None,
            Phase::Prompting
            | Phase::RunningTools
            | Phase::AwaitingStop
            | Phase::AwaitingHook(_)
            | Phase::Objected
            | Phase::Summarizing
            | Phase::AwaitingPermission
            | Phase::PostCompacting => Some(format!(
                "the record ends mid-prompt, while the machine is {}: the rest of the session \
                 was not recorded",
                self.phase
            )),
        }
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "replayed {} records ({} facts, {} effects) over {} ms: {} prompt(s) finished, \
             {} objection(s), {} compaction(s); the machine is {}",
            self.records,
            self.facts,
            self.effects,
            self.last_at_ms,
            self.finishes.len(),
            self.counters.objections,
            self.counters.compactions,
            self.phase,
        )?;
        let unrecorded = self.subagents.iter().filter(|s| !s.lane_recorded).count();
        let replayed = self.subagents.len() - unrecorded;
        if replayed > 0 {
            write!(f, "; {replayed} subagent(s) replayed")?;
        }
        if unrecorded > 0 {
            write!(
                f,
                "; {unrecorded} subagent(s) without a recorded lane (an older recording): \
                 their calls' results are taken as recorded"
            )?;
        }
        if let Some(incomplete) = self.incompleteness() {
            write!(f, "; {incomplete}")?;
        }
        Ok(())
    }
}

/// Why a replay could not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The transcript could not be read.
    #[error(transparent)]
    Load(#[from] TranscriptError),
    /// The machine did not do what the transcript says.
    #[error(transparent)]
    Diverged(#[from] Box<Divergence>),
}

impl ReplayError {
    /// The divergence, if that is what stopped the replay.
    pub fn divergence(&self) -> Option<&Divergence> {
        match self {
            Self::Diverged(divergence) => Some(divergence),
            Self::Load(_) => None,
        }
    }
}

/// Where and how the machine first parted from the record.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Divergence {
    /// The index of the record (0 = the first after the header); the number of records for a
    /// divergence at the end.
    pub index: usize,
    /// Its line in the file (1-based; the header is line 1).
    pub line: usize,
    /// The state of the machine that met the record: the subagent's when `agent` is set.
    pub phase: Phase,
    /// The subagent whose lane parted from the record; `None` for the top-level agent (and
    /// for the supervisor).
    pub agent: Option<AgentId>,
    /// How the machine parted from the record.
    pub kind: DivergenceKind,
}

/// The ways a machine can part from its record.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum DivergenceKind {
    /// The machine's next order is not the recorded one.
    EffectMismatch {
        /// The recorded effect.
        expected: Effect,
        /// The one the machine gave.
        actual: Effect,
    },
    /// The record has an order where the machine gave none.
    MissingEffect {
        /// The recorded effect the machine did not give.
        expected: Effect,
    },
    /// The machine gave an order the record does not have: before the fact `before`, or at
    /// the end of the transcript.
    UnrecordedEffect {
        /// The effect the machine gave.
        actual: Effect,
        /// The recorded fact it came before, if any.
        before: Option<Input>,
    },
    /// The machine refused a recorded fact.
    FactRefused {
        /// The recorded fact.
        fact: Input,
        /// Why the machine refused it.
        error: MachineError,
    },
    /// The supervisor refused a recorded supervision fact, or its orders differ from the
    /// record's.
    SupervisionMismatch {
        /// The recorded supervision event.
        recorded: supervisor::Event,
        /// How the supervisor disagrees.
        problem: String,
    },
    /// The header's catalog is not the one the first fact gave the machine (`first` is `None`
    /// when the first fact is no catalog change).
    HeaderCatalog {
        /// The catalog of the header.
        header: Catalog,
        /// The first recorded catalog, if any.
        first: Option<Catalog>,
    },
    /// A record of a subagent no replayed `agent` call started.
    UnknownAgent {
        /// The subagent the record names.
        agent: AgentId,
    },
    /// The recorded result of an `agent` call is not the one its replayed subagent ended
    /// with (`replayed` is `None` when the subagent had not finished).
    AgentResultMismatch {
        /// The result in the record.
        recorded: ToolOutput,
        /// The result of the replayed subagent.
        replayed: Option<ToolOutput>,
    },
}

impl Divergence {
    pub(crate) fn new(phase: Phase, kind: DivergenceKind) -> Box<Self> {
        Box::new(Self {
            index: 0,
            line: 0,
            phase,
            agent: None,
            kind,
        })
    }

    /// The same divergence, on the lane of `agent`.
    pub(crate) fn in_agent(mut self: Box<Self>, agent: Option<&AgentId>) -> Box<Self> {
        self.agent = agent.cloned();
        self
    }

    /// Places the divergence at record `index`, line `line` of its file.
    pub(crate) fn locate(mut self: Box<Self>, index: usize, line: usize) -> Box<Self> {
        self.index = index;
        self.line = line;
        self
    }

    /// For two model requests, the parts of the request that differ (`system`, `messages`,
    /// `tools`, `instruction`, `limits`); empty otherwise.
    pub fn request_parts(&self) -> Vec<&'static str> {
        match &self.kind {
            DivergenceKind::EffectMismatch {
                expected: Effect::CallLlm { digest: a, .. },
                actual: Effect::CallLlm { digest: b, .. },
            } => a.differing_parts(b),
            DivergenceKind::EffectMismatch { .. }
            | DivergenceKind::MissingEffect { .. }
            | DivergenceKind::UnrecordedEffect { .. }
            | DivergenceKind::FactRefused { .. }
            | DivergenceKind::SupervisionMismatch { .. }
            | DivergenceKind::HeaderCatalog { .. }
            | DivergenceKind::UnknownAgent { .. }
            | DivergenceKind::AgentResultMismatch { .. } => Vec::new(),
        }
    }

    /// The expected and actual sides, pretty-printed, as a line diff: `-` recorded only,
    /// `+` replayed only.
    pub fn diff(&self) -> String {
        let (expected, actual) = match &self.kind {
            DivergenceKind::EffectMismatch { expected, actual } => {
                (pretty(expected), pretty(actual))
            }
            DivergenceKind::MissingEffect { expected } => (pretty(expected), String::new()),
            DivergenceKind::UnrecordedEffect { actual, .. } => (String::new(), pretty(actual)),
            DivergenceKind::FactRefused { .. }
            | DivergenceKind::SupervisionMismatch { .. }
            | DivergenceKind::UnknownAgent { .. } => {
                return String::new();
            }
            DivergenceKind::AgentResultMismatch { recorded, replayed } => (
                pretty(recorded),
                replayed.as_ref().map(pretty).unwrap_or_default(),
            ),
            DivergenceKind::HeaderCatalog { header, first } => (
                pretty(header),
                first.as_ref().map(pretty).unwrap_or_default(),
            ),
        };
        line_diff(&expected, &actual)
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.agent {
            Some(agent) => write!(
                f,
                "replay diverged at record {} (line {}) in subagent {agent}, while its machine \
                 was {}: ",
                self.index, self.line, self.phase
            )?,
            None => write!(
                f,
                "replay diverged at record {} (line {}) while the machine was {}: ",
                self.index, self.line, self.phase
            )?,
        }
        match &self.kind {
            DivergenceKind::EffectMismatch { .. } => {
                f.write_str("the machine gave another order than recorded")?;
                let parts = self.request_parts();
                if !parts.is_empty() {
                    write!(f, "; the model request differs in: {}", parts.join(", "))?;
                }
            }
            DivergenceKind::MissingEffect { .. } => {
                f.write_str("the record has an order the machine did not give")?;
            }
            DivergenceKind::UnrecordedEffect {
                before: Some(fact), ..
            } => {
                write!(
                    f,
                    "the machine gave an order the record does not have, before the {} fact",
                    fact.kind()
                )?;
            }
            DivergenceKind::UnrecordedEffect { before: None, .. } => {
                f.write_str("the transcript ends, but the machine gave another order")?;
            }
            DivergenceKind::HeaderCatalog { first: Some(_), .. } => {
                f.write_str(
                    "the header's catalog is not the one the first catalog_changed fact gave",
                )?;
            }
            DivergenceKind::HeaderCatalog { first: None, .. } => {
                f.write_str(
                    "the header lists tools, but the session's first fact is no catalog_changed",
                )?;
            }
            DivergenceKind::UnknownAgent { agent } => {
                return write!(
                    f,
                    "the record has a lane for subagent {agent}, but no replayed `agent` call \
                     started it"
                );
            }
            DivergenceKind::AgentResultMismatch { replayed: None, .. } => {
                f.write_str(
                    "the record answers the subagent's call before the replayed subagent finished",
                )?;
            }
            DivergenceKind::AgentResultMismatch { .. } => {
                f.write_str("the subagent ended with another result than its call got")?;
            }
            DivergenceKind::FactRefused { fact, error } => {
                return write!(
                    f,
                    "the machine refused the recorded fact: {error}\n{}",
                    indent(&pretty(fact))
                );
            }
            DivergenceKind::SupervisionMismatch { recorded, problem } => {
                return write!(
                    f,
                    "the supervisor does not match the record: {problem}\n{}",
                    indent(&pretty(recorded))
                );
            }
        }
        let (minus, plus) = match &self.kind {
            DivergenceKind::HeaderCatalog { .. } => ("header", "first fact"),
            DivergenceKind::AgentResultMismatch { .. } => ("recorded", "the subagent's result"),
            DivergenceKind::UnknownAgent { .. }
            | DivergenceKind::EffectMismatch { .. }
            | DivergenceKind::MissingEffect { .. }
            | DivergenceKind::UnrecordedEffect { .. }
            | DivergenceKind::FactRefused { .. }
            | DivergenceKind::SupervisionMismatch { .. } => ("recorded", "replayed"),
        };
        write!(f, "\n--- {minus}\n+++ {plus}\n{}", self.diff())
    }
}

impl std::error::Error for Divergence {}

pub(super) fn pretty(value: &impl serde::Serialize) -> String {
    // Effects and facts are plain data with string keys.
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}\n")).collect()
}
