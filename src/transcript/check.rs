//! One call for a crate's own test suite: replay every transcript in a folder, fail with every
//! divergence listed, and under `HOOKLOOP_BLESS=1` rewrite the diverging files' effects.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::machine::{AgentId, Effect, Machine};
use crate::transcript::diff::line_diff;
use crate::transcript::suite::{Outcome, default_threads, replay_files, suite_files};
use crate::transcript::{Divergence, DivergenceKind, Event, Record, Transcript};

/// The variable that turns [`check_dir`] into a rewrite of the diverging files.
pub const BLESS_VAR: &str = "HOOKLOOP_BLESS";

/// Replays every `*.jsonl` beneath `dir` (one per core) and fails with every file that
/// diverged, could not be read, or is not whole (cut short, or ending mid-prompt), each with
/// its report and diff.
///
/// With `HOOKLOOP_BLESS` set (to anything but empty or `0`), each diverging file is rewritten
/// instead: its facts stay as recorded and its effects become the ones this engine gives for
/// them (see [`bless`]); what changed is printed to stderr, where the test harness shows it.
/// A folder with no transcript fails too, so a wrong path cannot pass unnoticed.
///
/// ```no_run
/// // tests/transcripts.rs
/// #[test]
/// fn transcripts_replay() -> Result<(), hookloop::transcript::CheckFailed> {
///     hookloop::transcript::check_dir("tests/transcripts")?;
///     Ok(())
/// }
/// ```
pub fn check_dir(dir: impl AsRef<Path>) -> Result<Checked, CheckFailed> {
    let bless = std::env::var(BLESS_VAR).is_ok_and(|v| !v.is_empty() && v != "0");
    check_dir_with(dir, bless)
}

/// [`check_dir`] with blessing chosen by the caller rather than the environment.
pub fn check_dir_with(dir: impl AsRef<Path>, bless: bool) -> Result<Checked, CheckFailed> {
    let dir = dir.as_ref();
    let files = suite_files(&[dir.to_owned()]).map_err(|e| CheckFailed::whole(dir, e))?;
    if files.is_empty() {
        return Err(CheckFailed::whole(dir, "no transcript (*.jsonl) found"));
    }
    let report = replay_files(&files, default_threads());
    let mut checked = Checked {
        files: files.len(),
        blessed: Vec::new(),
    };
    let mut failures = Vec::new();
    for result in report.results {
        match result.outcome {
            Outcome::Passed(_) => {}
            Outcome::Unreadable(message) => failures.push((result.path, message)),
            // A golden record cut short or ending mid-prompt tests less than it seems to; no
            // rewrite can give it the part that was never recorded.
            Outcome::NotWhole(report) => failures.push((
                result.path,
                format!(
                    "the record is not whole: {}; record it again\n{report}",
                    report.incompleteness().unwrap_or_default()
                ),
            )),
            Outcome::Diverged(divergence) if !bless => {
                failures.push((result.path, divergence.to_string()));
            }
            Outcome::Diverged(_) => match bless_file(&result.path) {
                Ok(diff) => {
                    // The test harness captures stderr and shows it with the test: this is
                    // the report of what the rewrite changed, for review like code.
                    eprintln!("blessed {}:\n{diff}", result.path.display());
                    checked.blessed.push(result.path);
                }
                Err(message) => failures.push((result.path, message)),
            },
        }
    }
    if failures.is_empty() {
        Ok(checked)
    } else {
        Err(CheckFailed {
            dir: dir.to_owned(),
            files: checked.files,
            failures,
            bless,
        })
    }
}

/// Rewrites one diverging file; the line diff of its old and new text, or why it cannot be.
fn bless_file(path: &Path) -> Result<String, String> {
    let transcript = Transcript::read(path).map_err(|e| e.to_string())?;
    let blessed = bless(&transcript).map_err(|divergence| {
        format!("cannot bless: the facts no longer fit this engine; record it again.\n{divergence}")
    })?;
    let (old, new) = (transcript.to_jsonl(), blessed.to_jsonl());
    crate::private::write_file(path, &new).map_err(|e| format!("cannot write it: {e}"))?;
    Ok(line_diff(&old, &new))
}

/// The transcript with its facts as recorded and its effects as this engine gives them: the
/// machine is fed each recorded fact, and every order it gives before the next fact is written
/// in place of the recorded ones, at the time of the fact it follows (as a recorder writes
/// them). A subagent's lane is rewritten the same way against its own machine, started by the
/// `agent` call that starts it. Fails when a machine refuses a recorded fact: the session no
/// longer goes that way, and only a new recording can say how it goes.
pub fn bless(transcript: &Transcript) -> Result<Transcript, Box<Divergence>> {
    let config = &transcript.header.config;
    let mut lanes = Lanes {
        top: Machine::new(config.policy.clone(), config.system_prompt.clone()),
        agents: BTreeMap::new(),
    };
    let mut records = Vec::with_capacity(transcript.records.len());
    for (index, record) in transcript.records.iter().enumerate() {
        let (agent, fact) = match &record.event {
            Event::Fact(fact) => (None, fact),
            Event::AgentFact { agent, fact } => (Some(agent), fact),
            Event::Effect(_) | Event::AgentEffect { .. } | Event::Supervision(_) => continue,
        };
        let refused = |phase, error| {
            Divergence::new(
                phase,
                DivergenceKind::FactRefused {
                    fact: fact.clone(),
                    error,
                },
            )
            .in_agent(agent)
            .locate(index, transcript.line_of(index))
        };
        let top_phase = lanes.top.phase();
        let machine = lanes.get(agent).map_err(|unknown| {
            Divergence::new(top_phase, DivergenceKind::UnknownAgent { agent: unknown })
                .in_agent(agent)
                .locate(index, transcript.line_of(index))
        })?;
        let phase = machine.phase();
        machine
            .handle(fact.clone())
            .map_err(|error| refused(phase, error))?;
        records.push(record.clone());
        lanes.drain(agent, record.at_ms, &mut records);
    }
    Ok(Transcript::new(transcript.header.clone(), records))
}

/// The top-level machine and its subagents', as [`bless`] rewrites them.
struct Lanes {
    top: Machine,
    agents: BTreeMap<AgentId, Machine>,
}

impl Lanes {
    /// The machine of `agent`'s lane, or the id no `agent` call started.
    fn get(&mut self, agent: Option<&AgentId>) -> Result<&mut Machine, AgentId> {
        match agent {
            None => Ok(&mut self.top),
            Some(id) => self.agents.get_mut(id).ok_or_else(|| id.clone()),
        }
    }

    /// Writes the orders of `agent`'s machine at `at_ms`, starting the subagents its
    /// `agent` calls start.
    fn drain(&mut self, agent: Option<&AgentId>, at_ms: u64, records: &mut Vec<Record>) {
        let mut children = Vec::new();
        let Ok(machine) = self.get(agent) else {
            return;
        };
        while let Some(effect) = machine.poll_effect() {
            if let Effect::CallTools { calls } = &effect {
                children.extend(calls.iter().filter_map(|call| machine.spawn_child(call)));
            }
            records.push(match agent {
                None => Record::effect(at_ms, effect),
                Some(agent) => Record::agent_effect(at_ms, agent.clone(), effect),
            });
        }
        for child in children {
            if let Some(me) = child.agent() {
                self.agents.insert(me.id.clone(), child);
            }
        }
    }
}

/// A folder whose transcripts all replayed (or were blessed).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checked {
    /// Transcripts found.
    pub files: usize,
    /// Files rewritten under `HOOKLOOP_BLESS`.
    pub blessed: Vec<PathBuf>,
}

/// Transcripts that did not replay. Its `Debug` is its report, so a test that returns it (or
/// unwraps it) shows every file with its diff.
pub struct CheckFailed {
    dir: PathBuf,
    files: usize,
    /// Each failing file and its report.
    failures: Vec<(PathBuf, String)>,
    bless: bool,
}

impl CheckFailed {
    fn whole(dir: &Path, reason: impl fmt::Display) -> Self {
        Self {
            dir: dir.to_owned(),
            files: 0,
            failures: vec![(dir.to_owned(), reason.to_string())],
            bless: false,
        }
    }

    /// Each failing file and its report (the divergence with its diff, or why it could not
    /// be read).
    pub fn failures(&self) -> &[(PathBuf, String)] {
        &self.failures
    }
}

impl fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} of {} transcript(s) in {} failed:",
            self.failures.len(),
            self.files,
            self.dir.display()
        )?;
        for (path, report) in &self.failures {
            writeln!(f, "\n{}: {report}", path.display())?;
        }
        if !self.bless && self.files > 0 {
            write!(
                f,
                "\nIf the engine's new behaviour is intended, run the tests again with \
                 {BLESS_VAR}=1 to rewrite the effects of the diverging files, and review the diff."
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for CheckFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for CheckFailed {}
