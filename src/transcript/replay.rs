//! Deterministic replay: the pure machine against the record, without tokio, servers or model.

use std::fmt;
use std::path::Path;

use crate::machine::{
    Catalog, Counters, Effect, FinishReason, Input, Machine, MachineError, Phase,
};
use crate::supervisor::{self, Supervisor};
use crate::transcript::diff::line_diff;
use crate::transcript::{Event, Header, Record, Transcript, TranscriptError, Truncation};

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
#[derive(Debug)]
pub struct Replayer {
    machine: Machine,
    /// Rebuilt when the header has the supervision policy; supervision records are then
    /// checked like the machine's, else skipped.
    supervisor: Option<Supervisor>,
    /// The header's catalog, until the first fact is checked against it.
    header_catalog: Option<Catalog>,
    records: usize,
    facts: usize,
    effects: usize,
    finishes: Vec<FinishReason>,
    last_at_ms: u64,
}

impl Replayer {
    /// A machine built from the header's configuration, before any record.
    pub fn new(header: &Header) -> Self {
        let config = &header.config;
        let servers = header.catalog.servers.iter().map(|s| s.server.clone());
        Self {
            machine: Machine::new(config.policy.clone(), config.system_prompt.clone()),
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
        let phase = self.machine.phase();
        match &record.event {
            Event::Effect(expected) => match self.machine.poll_effect() {
                Some(actual) if actual == *expected => {
                    if let Effect::Finish { reason } = actual {
                        self.finishes.push(reason);
                    }
                    self.effects += 1;
                }
                Some(actual) => {
                    return Err(Divergence::new(
                        phase,
                        DivergenceKind::EffectMismatch {
                            expected: expected.clone(),
                            actual,
                        },
                    ));
                }
                None => {
                    return Err(Divergence::new(
                        phase,
                        DivergenceKind::MissingEffect {
                            expected: expected.clone(),
                        },
                    ));
                }
            },
            Event::Fact(fact) => {
                if let Some(header) = self.header_catalog.take() {
                    check_header_catalog(phase, header, fact)?;
                }
                if let Some(actual) = self.machine.poll_effect() {
                    return Err(Divergence::new(
                        phase,
                        DivergenceKind::UnrecordedEffect {
                            actual,
                            before: Some(fact.clone()),
                        },
                    ));
                }
                if let Err(error) = self.machine.handle(fact.clone()) {
                    return Err(Divergence::new(
                        phase,
                        DivergenceKind::FactRefused {
                            fact: fact.clone(),
                            error,
                        },
                    ));
                }
                self.facts += 1;
            }
            Event::Supervision(event) => {
                if let Some(supervisor) = &mut self.supervisor {
                    check_supervision(supervisor, event).map_err(|problem| {
                        Divergence::new(
                            phase,
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

    /// Ends the replay. Every order the machine gave must have been recorded, unless the
    /// transcript was `truncated` (the recorder died before writing them).
    pub fn finish(mut self, truncated: bool) -> Result<ReplayReport, Box<Divergence>> {
        let phase = self.machine.phase();
        let mut unrecorded = 0;
        while let Some(actual) = self.machine.poll_effect() {
            if !truncated {
                return Err(Divergence::new(
                    phase,
                    DivergenceKind::UnrecordedEffect {
                        actual,
                        before: None,
                    },
                ));
            }
            unrecorded += 1;
        }
        Ok(ReplayReport {
            records: self.records,
            facts: self.facts,
            effects: self.effects,
            phase,
            counters: self.machine.counters().clone(),
            history_len: self.machine.history().len(),
            finishes: self.finishes,
            last_at_ms: self.last_at_ms,
            unrecorded_effects: unrecorded,
            truncated: None,
        })
    }

    /// The machine as the records so far left it.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The machine as the records so far left it, to go on with live.
    pub fn into_machine(self) -> Machine {
        self.machine
    }
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
    /// The virtual time of the last record.
    pub last_at_ms: u64,
    /// Orders the machine gave after the last record of a truncated transcript.
    pub unrecorded_effects: usize,
    /// The cut-short last line, if there was one.
    pub truncated: Option<Truncation>,
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
    /// The machine's state when it met the record.
    pub phase: Phase,
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
}

impl Divergence {
    fn new(phase: Phase, kind: DivergenceKind) -> Box<Self> {
        Box::new(Self {
            index: 0,
            line: 0,
            phase,
            kind,
        })
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
            | DivergenceKind::HeaderCatalog { .. } => Vec::new(),
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
            DivergenceKind::FactRefused { .. } | DivergenceKind::SupervisionMismatch { .. } => {
                return String::new();
            }
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
        write!(
            f,
            "replay diverged at record {} (line {}) while the machine was {}: ",
            self.index, self.line, self.phase
        )?;
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
            DivergenceKind::EffectMismatch { .. }
            | DivergenceKind::MissingEffect { .. }
            | DivergenceKind::UnrecordedEffect { .. }
            | DivergenceKind::FactRefused { .. }
            | DivergenceKind::SupervisionMismatch { .. } => ("recorded", "replayed"),
        };
        write!(f, "\n--- {minus}\n+++ {plus}\n{}", self.diff())
    }
}

impl std::error::Error for Divergence {}

fn pretty(value: &impl serde::Serialize) -> String {
    // Effects and facts are plain data with string keys.
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}\n")).collect()
}
