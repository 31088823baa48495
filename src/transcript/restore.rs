//! Going on from a record: the machine rebuilt by replaying it, and a record that a crash cut
//! closed so that the session can go on.
//!
//! The record is a write-ahead log of the machine's boundary, so whatever is on disk when the
//! process dies is a valid prefix of a session, up to a torn last line. [`restore`] replays it
//! up to the session's close and then closes what the cut left open, as records the machine
//! itself gives:
//!
//! - a torn last line is dropped (the crash cut it while it was written);
//! - orders the machine gave after the last whole record, which the recorder never wrote, are
//!   written as the machine gives them again (its orders are a function of the facts);
//! - each subagent still running gets [`Input::PromptInterrupted`] and then `closed`, the
//!   deepest first, as a subagent's lane ends when its parent is cancelled;
//! - the top-level prompt, if one was running, gets [`Input::PromptInterrupted`]: every call it
//!   left without a result is answered with an error result saying so
//!   ([`interrupted_text`](crate::machine::interrupted_text)), an open hook round ends as if
//!   nothing was said (a `_PostCompact` round is owed to the next prompt), a summary that was
//!   asked for is not waited for, and the prompt finishes `interrupted`.
//!
//! The person's words are kept (the prompt is in the history since its `prompted` fact), and
//! every model reply the record holds; a reply that was streaming when the process died was
//! never a fact of the machine and is not there. [`Restored::record_on`] writes the closing
//! records after the kept prefix, so the record replays whole from then on, and keeps the
//! original beside it (`<file>.crashed-<n>`).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::machine::{AgentId, Input, Machine, Message, Phase, interrupted_text};
use crate::transcript::format::{RecordRef, write_line};
use crate::transcript::{
    Event, Header, Record, Recorder, Replayer, Transcript, TranscriptError, Truncation, VERSION,
    fork::Offset, replay::replayable,
};

/// Why a record cannot be gone on from.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// The record could not be read.
    #[error("{0}")]
    Transcript(#[from] TranscriptError),
    /// The record does not replay cleanly: it is not this engine's session, or it was edited.
    #[error("the record does not replay: {0}")]
    Diverged(String),
}

/// What closing a record cut by a crash did, to tell the person who loads it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Interruption {
    /// The torn last line that was dropped.
    pub torn: Option<Truncation>,
    /// Orders the machine gave after the last whole record, written again.
    pub unrecorded_orders: usize,
    /// Where the top-level prompt was when the record stops; `Idle` when no prompt was cut.
    pub phase: Phase,
    /// The calls answered as interrupted, each as `tool` or `agent-1/tool` for a subagent's.
    pub calls: Vec<String>,
    /// The subagents that were running, closed.
    pub agents: Vec<AgentId>,
    /// A model reply was awaited (a turn, an objection's reply or a summary): what had
    /// streamed of it was never recorded and is dropped.
    pub reply_lost: bool,
}

impl std::fmt::Display for Interruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.phase == Phase::Idle {
            f.write_str("the agent stopped between prompts")?;
        } else {
            write!(
                f,
                "the agent stopped during the last prompt (the machine was {}); the prompt was closed as interrupted",
                self.phase
            )?;
        }
        if !self.calls.is_empty() {
            write!(
                f,
                "; {} call(s) answered as interrupted: {}",
                self.calls.len(),
                self.calls.join(", ")
            )?;
        }
        if !self.agents.is_empty() {
            let agents: Vec<&str> = self.agents.iter().map(|a| a.0.as_str()).collect();
            write!(f, "; subagent(s) stopped: {}", agents.join(", "))?;
        }
        if self.reply_lost {
            f.write_str("; the model's reply in progress was not recorded and is dropped")?;
        }
        if let Some(torn) = &self.torn {
            write!(
                f,
                "; a cut last line ({} bytes, line {}) was dropped",
                torn.bytes, torn.line
            )?;
        }
        if self.unrecorded_orders > 0 {
            write!(
                f,
                "; {} order(s) the record lacked were written",
                self.unrecorded_orders
            )?;
        }
        Ok(())
    }
}

/// Replays the record at `path` up to the session's close and closes what a crash left open:
/// a torn last line is dropped, orders the machine gave that the record lacks are written, each
/// running subagent gets [`Input::PromptInterrupted`] then `closed` (the deepest first), and the
/// cut prompt gets [`Input::PromptInterrupted`], which answers every open call with an
/// "interrupted" error result. [`Restored::interruption`] says what was cut, and
/// [`Restored::record_on`] writes the closing records after the kept ones.
pub fn restore(path: impl AsRef<Path>) -> Result<Restored, RestoreError> {
    let path = path.as_ref();
    let mut restored = Transcript::read(path)?.restore()?;
    restored.source = Some(path.to_owned());
    Ok(restored)
}

impl Transcript {
    /// Replays the records up to the session's close (its `closed` fact, if it has one: a
    /// closed machine takes no more prompts) and closes what a crash left open. See
    /// [`restore`].
    pub fn restore(self) -> Result<Restored, RestoreError> {
        replayable(&self)?;
        let mut replayer = Replayer::new(&self.header);
        let mut kept = self.records.len();
        for (index, record) in self.records.iter().enumerate() {
            if matches!(record.event, Event::Fact(Input::Closed)) {
                kept = index;
                break;
            }
            if let Err(divergence) = replayer.step(record) {
                let divergence = divergence.locate(index, self.line_of(index));
                return Err(RestoreError::Diverged(divergence.to_string()));
            }
        }
        let at_ms = kept
            .checked_sub(1)
            .and_then(|last| self.records.get(last))
            .map_or(0, |r| r.at_ms);
        let torn = if kept == self.records.len() {
            self.truncated.clone()
        } else {
            None
        };
        let closing = replayer.close_cut(at_ms).map_err(|divergence| {
            let divergence = divergence.locate(kept, self.line_of(kept));
            RestoreError::Diverged(divergence.to_string())
        })?;
        let interruption =
            (torn.is_some() || !closing.records.is_empty()).then_some(Interruption {
                torn,
                unrecorded_orders: closing.unrecorded,
                phase: closing.phase,
                calls: closing.calls,
                agents: closing.agents,
                reply_lost: closing.reply_lost,
            });
        // Lines 2.. of the file up to the first record not kept are kept as they are.
        let prefix_lines = self.line_of(kept).saturating_sub(2);
        let Transcript {
            header,
            mut records,
            ..
        } = self;
        records.truncate(kept);
        let closing_records = closing.records.len();
        records.extend(closing.records);
        Ok(Restored {
            machine: replayer.into_machine(),
            header,
            records,
            closing_records,
            prefix_lines,
            interruption,
            source: None,
        })
    }
}

/// What [`Replayer::close_cut`] wrote.
pub(super) struct Closing {
    records: Vec<Record>,
    unrecorded: usize,
    phase: Phase,
    calls: Vec<String>,
    agents: Vec<AgentId>,
    reply_lost: bool,
}

impl Replayer {
    /// The records that close what the records so far left open, each checked as it is made:
    /// the orders not recorded, then `prompt_interrupted` (and `closed`) for every running
    /// subagent, deepest first, then `prompt_interrupted` for the top-level prompt.
    pub(super) fn close_cut(
        &mut self,
        at_ms: u64,
    ) -> Result<Closing, Box<crate::transcript::Divergence>> {
        let mut closing = Closing {
            records: Vec::new(),
            unrecorded: 0,
            phase: self.machine().phase(),
            calls: Vec::new(),
            agents: Vec::new(),
            reply_lost: false,
        };
        closing.unrecorded = self.write_pending(&mut closing.records, at_ms)?;
        closing.phase = self.machine().phase();
        let mut open: Vec<AgentId> = self
            .agents
            .iter()
            // A child that never got its task has nothing to close; one whose prompt finished
            // still owes its `closed`.
            .filter(|(_, child)| {
                child.phase() != Phase::Done
                    && (child.phase() != Phase::Idle || child.agent_result().is_some())
            })
            .map(|(id, _)| id.clone())
            .collect();
        open.sort_by_key(|id| std::cmp::Reverse(id.0.matches('.').count()));
        for id in open {
            let lane = Some(id.clone());
            let running = self.agents.get(&id).is_some_and(|c| running(c.phase()));
            if running {
                self.interrupt(lane.as_ref(), at_ms, &mut closing)?;
                closing.agents.push(id.clone());
            }
            self.feed(lane.as_ref(), Input::Closed, at_ms, &mut closing.records)?;
        }
        if running(self.machine().phase()) {
            self.interrupt(None, at_ms, &mut closing)?;
        }
        Ok(closing)
    }

    /// Feeds `prompt_interrupted` to `agent`'s lane, noting the calls it answers.
    fn interrupt(
        &mut self,
        agent: Option<&AgentId>,
        at_ms: u64,
        closing: &mut Closing,
    ) -> Result<(), Box<crate::transcript::Divergence>> {
        let machine = self.lane(agent)?;
        closing.reply_lost |= matches!(
            machine.phase(),
            Phase::Prompting | Phase::Objected | Phase::Summarizing
        );
        let before = machine.history().len();
        self.feed(agent, Input::PromptInterrupted, at_ms, &mut closing.records)?;
        let history = self.lane(agent)?.history();
        for message in &history[before.min(history.len())..] {
            let Message::ToolResult { call_id, output } = message else {
                continue;
            };
            let text = output.joined_text();
            if !output.is_error
                || (text != interrupted_text(true) && text != interrupted_text(false))
            {
                continue;
            }
            let name = history
                .iter()
                .rev()
                .find_map(|m| match m {
                    Message::Assistant { tool_calls, .. } => tool_calls
                        .iter()
                        .find(|c| c.id == *call_id)
                        .map(|c| c.name.clone()),
                    Message::User { .. } | Message::ToolResult { .. } => None,
                })
                .unwrap_or_else(|| call_id.0.clone());
            closing.calls.push(match agent {
                Some(agent) => format!("{agent}/{name}"),
                None => name,
            });
        }
        Ok(())
    }

    /// Feeds `fact` to `agent`'s lane as a record, then writes the orders it gives.
    fn feed(
        &mut self,
        agent: Option<&AgentId>,
        fact: Input,
        at_ms: u64,
        out: &mut Vec<Record>,
    ) -> Result<(), Box<crate::transcript::Divergence>> {
        let record = match agent {
            Some(agent) => Record::agent_fact(at_ms, agent.clone(), fact),
            None => Record::fact(at_ms, fact),
        };
        self.step(&record)?;
        out.push(record);
        self.write_pending(out, at_ms).map(drop)
    }

    /// Writes every order any lane holds as a record; how many there were.
    fn write_pending(
        &mut self,
        out: &mut Vec<Record>,
        at_ms: u64,
    ) -> Result<usize, Box<crate::transcript::Divergence>> {
        let mut written = 0;
        loop {
            let lanes: Vec<Option<AgentId>> = std::iter::once(None)
                .chain(self.agents.keys().cloned().map(Some))
                .collect();
            let before = written;
            for lane in lanes {
                while let Some(effect) = self.take_effect(lane.as_ref())? {
                    out.push(match &lane {
                        Some(agent) => {
                            self.lanes.insert(agent.clone());
                            Record::agent_effect(at_ms, agent.clone(), effect)
                        }
                        None => Record::effect(at_ms, effect),
                    });
                    self.records += 1;
                    self.last_at_ms = at_ms;
                    written += 1;
                }
            }
            // A `call_tools` may have started children, whose lanes are looked at again.
            if written == before {
                return Ok(written);
            }
        }
    }
}

/// Whether a prompt runs in this phase.
fn running(phase: Phase) -> bool {
    match phase {
        Phase::Idle | Phase::Done => false,
        Phase::Prompting
        | Phase::RunningTools
        | Phase::AwaitingStop
        | Phase::Objected
        | Phase::Summarizing
        | Phase::PostCompacting
        | Phase::AwaitingPermission
        | Phase::AwaitingHook(_) => true,
    }
}

/// A recorded session, replayed up to its close and closed where a crash cut it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Restored {
    /// The machine that goes on from the record.
    pub machine: Machine,
    header: Header,
    /// The records before the session's close, then the closing records.
    records: Vec<Record>,
    /// How many of `records` close what the crash left open.
    closing_records: usize,
    /// Lines of the file after the header that the kept records are.
    prefix_lines: usize,
    interruption: Option<Interruption>,
    /// The file read, when it was read from one.
    source: Option<PathBuf>,
}

/// Tells the temporary files of one process apart.
static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

impl Restored {
    /// The records before the session's close, its subagents' lanes among them, then those
    /// that closed a cut prompt.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// What closing the record did, when a crash had cut it; `None` for a whole record.
    pub fn interruption(&self) -> Option<&Interruption> {
        self.interruption.as_ref()
    }

    /// Starts recording the session that goes on from this record, in the file at `path`.
    ///
    /// The file is rewritten through a temporary file of this process renamed over it, so a
    /// failure leaves the old one whole: the header (at this engine's format version), the
    /// kept records copied line by line from the file read (streamed, never held whole), the
    /// closing records, then what the recorder returned takes next, its times after the
    /// record's. The new file is synced to disk before the rename. When a crash had cut the
    /// record and `path` is the file read, the original is kept beside it as
    /// `<file>.crashed-<n>` (the first `n` free), which is returned. Add the observer to the
    /// session; keep the recorder to check it.
    pub fn record_on(
        &self,
        path: &Path,
    ) -> Result<(Recorder, impl crate::Observer + use<>, Option<PathBuf>), TranscriptError> {
        let write_error = |source| TranscriptError::Write {
            target: path.display().to_string(),
            source,
        };
        let fresh = temporary(path);
        let written = crate::private::write_options()
            .create_new(true)
            .open(&fresh)
            .and_then(|file| self.write_prefix(file));
        let kept = match written {
            Ok(file) => self
                .keep_original(path)
                .and_then(|kept| std::fs::rename(&fresh, path).map(|()| (file, kept))),
            Err(e) => Err(e),
        };
        let (file, kept) = match kept {
            Ok(done) => done,
            Err(e) => {
                let _ = std::fs::remove_file(&fresh);
                return Err(write_error(e));
            }
        };
        sync_dir(path);
        let recorder = Recorder::after(file, path.display().to_string(), &self.header)?;
        let by = Duration::from_millis(self.records.last().map_or(0, |r| r.at_ms));
        let observer = Offset {
            inner: recorder.clone(),
            by,
        };
        Ok((recorder, observer, kept))
    }

    /// Writes the header, the kept records and the closing ones to `file`, synced.
    fn write_prefix(&self, file: File) -> io::Result<File> {
        let mut out = io::BufWriter::new(file);
        let mut header = self.header.clone();
        // The closing records may hold facts of this version; the kept ones read the same.
        header.version = VERSION;
        let mut line = Vec::with_capacity(4096);
        write_line(&mut line, &header);
        out.write_all(&line)?;
        let kept = self.records.len() - self.closing_records;
        match &self.source {
            Some(source) => copy_lines(source, self.prefix_lines, &mut out)?,
            None => {
                for record in &self.records[..kept] {
                    line.clear();
                    write_line(&mut line, &RecordRef::from(record));
                    out.write_all(&line)?;
                }
            }
        }
        for record in &self.records[kept..] {
            line.clear();
            write_line(&mut line, &RecordRef::from(record));
            out.write_all(&line)?;
        }
        let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_data()?;
        Ok(file)
    }

    /// Keeps the file read, cut by a crash, as `<path>.crashed-<n>` before it is replaced.
    fn keep_original(&self, path: &Path) -> io::Result<Option<PathBuf>> {
        if self.interruption.is_none() || self.source.as_deref() != Some(path) {
            return Ok(None);
        }
        for n in 1..=u32::MAX {
            let kept = with_suffix(path, &format!("crashed-{n}"));
            // A second name for the same file: nothing is copied, and its mode stays 0600.
            match std::fs::hard_link(path, &kept) {
                Ok(()) => return Ok(Some(kept)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other(
            "no free name to keep the original record under",
        ))
    }
}

/// `path` with `.suffix` after its whole name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// A temporary name beside `path`, unique to this process and this call.
fn temporary(path: &Path) -> PathBuf {
    let n = NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed);
    with_suffix(path, &format!("reloading-{}-{n}", std::process::id()))
}

/// Copies lines 2..=`lines`+1 of the file at `source` (its records after the header) to `out`.
fn copy_lines(source: &Path, lines: usize, out: &mut impl Write) -> io::Result<()> {
    let mut reader = BufReader::new(File::open(source)?);
    let mut line = Vec::new();
    // The header line is written anew.
    let limit = crate::transcript::MAX_LINE_BYTES as u64 + 1;
    for index in 0..=lines {
        line.clear();
        let read = (&mut reader).take(limit).read_until(b'\n', &mut line)?;
        if read == 0 || line.last() != Some(&b'\n') {
            return Err(io::Error::other(format!(
                "the record changed while it was loaded (line {} is not whole)",
                index + 1
            )));
        }
        if index > 0 {
            out.write_all(&line)?;
        }
    }
    Ok(())
}

/// Syncs the directory of `path`, so a rename into it survives a power cut. Best effort: a
/// directory that cannot be opened is left as it is.
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(dir) = File::open(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
    {
        let _ = dir.sync_all();
    }
}
