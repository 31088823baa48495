//! Forking a recorded session onto a live model: replay the record up to a point, then go on
//! with a real provider and real MCP servers — "what would the model have done here, with my
//! new objection text, or with another model?".
//!
//! [`fork`] is pure: it replays the prefix and, with an objection, answers the `_Stop` round
//! at the fork point with it. [`Fork::run`] continues live, recording the prefix and the
//! continuation as one transcript that replays.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::config::Config;
use crate::driver::{PromptStop, Session, SessionError};
use crate::hooks::Hook;
use crate::machine::{AgentId, Effect, HookReply, Input, Machine, Phase};
use crate::ports::{LlmClient, Observer, ToolHost};
use crate::transcript::{Divergence, Event, Header, Record, Recorder, Replayer, Transcript};

/// Where a fork leaves the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkPoint {
    /// Before record `N` (0 = the first after the header).
    Record(usize),
    /// Before the K-th prompt (from 1): that prompt is asked again, live.
    Prompt(usize),
    /// Before the K-th `_Stop` round (from 1): the live servers are asked, or an objection
    /// given instead answers it.
    Stop(usize),
}

impl FromStr for ForkPoint {
    type Err = String;

    /// `N`, `prompt:K` or `stop:K`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let ordinal = |k: &str| match k.parse::<usize>() {
            Ok(0) | Err(_) => Err(format!("{text:?}: K counts from 1")),
            Ok(k) => Ok(k),
        };
        if let Some(k) = text.strip_prefix("prompt:") {
            Ok(Self::Prompt(ordinal(k)?))
        } else if let Some(k) = text.strip_prefix("stop:") {
            Ok(Self::Stop(ordinal(k)?))
        } else {
            text.parse().map(Self::Record).map_err(|_| {
                format!("{text:?} is not a fork point: give a record index N, prompt:K or stop:K")
            })
        }
    }
}

impl fmt::Display for ForkPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Record(n) => write!(f, "record {n}"),
            Self::Prompt(k) => write!(f, "prompt:{k}"),
            Self::Stop(k) => write!(f, "stop:{k}"),
        }
    }
}

/// Why a transcript cannot be forked there.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForkError {
    /// The point is past the record.
    #[error("the transcript has no {point}: {reason}")]
    NoSuchPoint {
        /// The point asked for.
        point: ForkPoint,
        /// Why the transcript has no such point.
        reason: String,
    },
    /// The record diverges before the point.
    #[error("the record diverges before the fork point: {0}")]
    Diverged(Box<Divergence>),
    /// At the point the machine waits for answers to an order already given: the session
    /// cannot be taken over there.
    #[error(
        "record {index} answers an order already given (the machine is {phase}); fork at record \
         {order} instead, where that order is given"
    )]
    MidRound {
        /// The record index of the fork point.
        index: usize,
        /// The machine's state there.
        phase: Phase,
        /// The order the round was waiting on.
        order: usize,
    },
    /// Nothing is left to do there: the session is idle and no prompt follows.
    #[error("at record {index} the session is {phase} and no prompt follows: nothing to continue")]
    NothingToContinue {
        /// The record index asked for.
        index: usize,
        /// The machine's state there.
        phase: Phase,
    },
    /// `--objection` needs a `_Stop` round at the point.
    #[error("an objection answers a _Stop round, and record {index} is not one")]
    NotAStopRound {
        /// The record index asked for.
        index: usize,
    },
}

/// A session rebuilt from a record's prefix, ready to go on live.
#[derive(Debug)]
pub struct Fork {
    /// The recorded header: the machine's policy and system prompt come from it.
    pub header: Header,
    /// The records kept, with the objection's answers when one was given.
    pub prefix: Vec<Record>,
    /// What the live session does first.
    pub next: Continuation,
    machine: Machine,
}

/// How a fork goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Continuation {
    /// The machine holds orders: perform them and run on to the end of that prompt.
    Resume,
    /// The session is idle before this recorded prompt: ask it again.
    Prompt(String),
}

/// What a live continuation did.
pub struct ForkRun<L, H> {
    /// The live session, for inspection; it is not closed.
    pub session: Session<L, H>,
    /// How the continued prompt ended.
    pub stop: PromptStop,
}

/// Replays `transcript` up to `point` and prepares to go on from there. With `objection`, the
/// `_Stop` round at the point is answered with it (by the round's first server; the others
/// answer nothing) instead of asking live servers.
pub fn fork(
    transcript: &Transcript,
    point: ForkPoint,
    objection: Option<&str>,
) -> Result<Fork, ForkError> {
    let index = resolve(transcript, point)?;
    let mut replayer = Replayer::new(&transcript.header);
    let mut prefix = Vec::with_capacity(index + 1);
    let diverged_at = |i: usize| {
        move |mut divergence: Box<Divergence>| {
            divergence.index = i;
            divergence.line = transcript.line_of(i);
            ForkError::Diverged(divergence)
        }
    };
    for (i, record) in transcript.records[..index].iter().enumerate() {
        replayer.step(record).map_err(diverged_at(i))?;
        prefix.push(record.clone());
    }
    let next_record = transcript.records.get(index);
    if let Some(text) = objection {
        let Some(
            record @ Record {
                event:
                    Event::Effect(Effect::CallHooks {
                        hook: Hook::Stop,
                        servers,
                        ..
                    }),
                at_ms,
            },
        ) = next_record
        else {
            return Err(ForkError::NotAStopRound { index });
        };
        replayer.step(record).map_err(diverged_at(index))?;
        prefix.push(record.clone());
        for (i, server) in servers.iter().enumerate() {
            let answer = if i == 0 { text } else { "" };
            let fact = Record::fact(
                *at_ms,
                Input::HookAnswered {
                    server: server.clone(),
                    hook: Hook::Stop,
                    reply: HookReply::Text {
                        text: answer.to_owned(),
                    },
                    // A `_Stop` round has no subjects.
                    subject: None,
                },
            );
            // The machine refuses an answer only if the record was not what it said.
            replayer.step(&fact).map_err(diverged_at(index + 1))?;
            prefix.push(fact);
        }
    }
    let machine = replayer.into_machine();
    let next = if machine.pending_effects() > 0 {
        Continuation::Resume
    } else {
        match (machine.phase(), next_record) {
            (
                Phase::Idle,
                Some(Record {
                    event: Event::Fact(Input::Prompted { text }),
                    ..
                }),
            ) => Continuation::Prompt(text.clone()),
            (phase @ (Phase::Idle | Phase::Done), _) => {
                return Err(ForkError::NothingToContinue { index, phase });
            }
            (phase, _) => {
                return Err(ForkError::MidRound {
                    index,
                    phase,
                    order: last_awaited_order(&transcript.records[..index]),
                });
            }
        }
    };
    Ok(Fork {
        header: transcript.header.clone(),
        prefix,
        next,
        machine,
    })
}

/// The record index a point stands for.
fn resolve(transcript: &Transcript, point: ForkPoint) -> Result<usize, ForkError> {
    let records = &transcript.records;
    let nth = |k: usize, pick: &dyn Fn(&Event) -> bool, what: &str| {
        records
            .iter()
            .enumerate()
            .filter(|(_, record)| pick(&record.event))
            .nth(k - 1)
            .map(|(i, _)| i)
            .ok_or_else(|| ForkError::NoSuchPoint {
                point,
                reason: format!(
                    "it holds {} {what}",
                    records.iter().filter(|r| pick(&r.event)).count()
                ),
            })
    };
    match point {
        ForkPoint::Record(n) if n <= records.len() => Ok(n),
        ForkPoint::Record(_) => Err(ForkError::NoSuchPoint {
            point,
            reason: format!("it holds {} records", records.len()),
        }),
        ForkPoint::Prompt(k) => nth(
            k,
            &|event| matches!(event, Event::Fact(Input::Prompted { .. })),
            "prompt(s)",
        ),
        ForkPoint::Stop(k) => nth(
            k,
            &|event| {
                matches!(
                    event,
                    Event::Effect(Effect::CallHooks {
                        hook: Hook::Stop,
                        ..
                    })
                )
            },
            "_Stop round(s)",
        ),
    }
}

/// The index of the last order before the end of `records` that the driver answers.
fn last_awaited_order(records: &[Record]) -> usize {
    records
        .iter()
        .rposition(|record| {
            matches!(
                record.event,
                Event::Effect(
                    Effect::CallLlm { .. }
                        | Effect::CallTools { .. }
                        | Effect::CallHooks { .. }
                        | Effect::AskPermission { .. }
                )
            )
        })
        .unwrap_or(0)
}

impl Fork {
    /// The machine as the prefix left it.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The time of the last record kept, where the continuation's clock starts.
    pub fn at_ms(&self) -> u64 {
        self.prefix.last().map_or(0, |record| record.at_ms)
    }

    /// Goes on live: a [`Session`] with `llm` and `host` takes over the machine and runs the
    /// prompt the fork point is in (or the recorded prompt it stands before) to its end.
    /// `recorder`, if given, gets the prefix and then the continuation, its times following
    /// the prefix's, so the whole replays as one transcript. `config` gives the driver's
    /// settings; the machine keeps the recorded policy.
    pub async fn run<L: LlmClient, H: ToolHost>(
        self,
        config: Config,
        llm: L,
        host: H,
        recorder: Option<Recorder>,
    ) -> Result<ForkRun<L, H>, SessionError> {
        let at = Duration::from_millis(self.at_ms());
        let mut session = Session::with_machine(config, self.machine, llm, host);
        if let Some(recorder) = recorder {
            for record in &self.prefix {
                recorder.write_record(record);
            }
            session.add_observer(Offset {
                inner: recorder,
                by: at,
            });
        }
        let stop = match self.next {
            Continuation::Resume => session.resume().await?,
            Continuation::Prompt(text) => session.prompt(text).await?,
        };
        Ok(ForkRun { session, stop })
    }
}

/// Shifts the times a recorder sees by the length of the prefix it was given, so a session
/// that goes on from a record is recorded on after it.
pub(crate) struct Offset {
    pub(crate) inner: Recorder,
    pub(crate) by: Duration,
}

impl Observer for Offset {
    fn on_effect(&mut self, at: Duration, effect: &Effect) {
        self.inner.on_effect(self.by + at, effect);
    }

    fn on_fact(&mut self, at: Duration, fact: &Input) {
        self.inner.on_fact(self.by + at, fact);
    }

    // A subagent's records are the record's as much as the top-level agent's: without them a
    // later replay finds an `agent` call's lane missing. The supervisor's are left out: the
    // servers of a session that goes on start afresh, and their course is not the record's.
    fn on_agent_effect(&mut self, at: Duration, agent: &AgentId, effect: &Effect) {
        self.inner.on_agent_effect(self.by + at, agent, effect);
    }

    fn on_agent_fact(&mut self, at: Duration, agent: &AgentId, fact: &Input) {
        self.inner.on_agent_fact(self.by + at, agent, fact);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_points_parse_from_their_three_spellings() {
        assert_eq!("12".parse(), Ok(ForkPoint::Record(12)));
        assert_eq!("prompt:2".parse(), Ok(ForkPoint::Prompt(2)));
        assert_eq!("stop:1".parse(), Ok(ForkPoint::Stop(1)));
        assert!("stop:0".parse::<ForkPoint>().is_err());
        assert!("prompt:x".parse::<ForkPoint>().is_err());
        assert!("end".parse::<ForkPoint>().is_err());
    }
}
