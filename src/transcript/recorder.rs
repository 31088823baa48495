//! Writing transcripts as a session runs.
//!
//! The session's observers run on its async task, so a file is never written there: each line
//! goes through a bounded channel to a writer thread of the recorder's own, which writes and
//! flushes it alone. A full channel (a disk slower than the session for [`QUEUE_LINES`] lines)
//! holds the session back rather than dropping a line or growing memory.
//!
//! The write policy: each line is handed to the kernel with one write as soon as it is
//! recorded, so a process that dies (a crash, `kill -9`) loses at most the line it was writing;
//! a file on disk is also `fsync`ed (`sync_data`) after each prompt's `finish` and after the
//! session's `closed`, so a machine that loses power keeps every finished prompt. Lines in
//! between reach the disk when the kernel writes them back.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::driver::Session;
use crate::machine::{AgentId, Effect, Input, Phase, Purpose};
use crate::ports::{LlmClient, Observer, ToolHost};
use crate::supervisor;
use crate::transcript::content::{canonical_effect, redact_effect, redact_input};
use crate::transcript::format::{RecordRef, write_line};
use crate::transcript::{Header, Record, Redaction, TranscriptError};

/// Lines a file recorder holds for its writer thread before the session waits for the disk.
pub const QUEUE_LINES: usize = 256;

/// Writes a transcript: the header when created, then every effect and fact it observes.
///
/// A recorder is an [`Observer`]: add it to a [`Session`] (or use [`Session::record_to`])
/// before the first prompt. It is cheap to clone; clones share one file, so keep one to call
/// [`check`](Self::check) after the session.
///
/// Crash-safe: the writer thread writes and flushes each line with one write, so a crash leaves
/// at most the last line cut short, which [`Transcript::parse`](crate::transcript::Transcript::parse)
/// reports. A write error is logged once; the session goes on unrecorded and
/// [`check`](Self::check) returns the error. When the last clone is dropped, the lines still
/// queued are written before the drop returns.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
}

struct Shared {
    /// Where the transcript goes, for error messages.
    target: String,
    /// The header asked for content to be replaced by lengths (`--redact-content`).
    content_redacted: bool,
    state: Arc<Mutex<State>>,
    /// `None` for an in-memory recorder, which writes under the lock.
    writer: Option<WriterThread>,
}

#[derive(Default)]
struct State {
    /// Lines written after the header.
    records: u64,
    failed: Option<(io::ErrorKind, String)>,
    /// The transcript of an in-memory recorder.
    memory: Option<Vec<u8>>,
}

struct WriterThread {
    /// Taken on drop, which ends the thread once it has written what is queued.
    sender: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

enum Job {
    /// A line, and whether the file is synced to disk once it is written.
    Line(Vec<u8>, bool),
    /// Answered once every line queued before it is written.
    Barrier(mpsc::Sender<()>),
}

impl Recorder {
    /// Creates (or truncates) the file at `path` and writes the header.
    pub fn create(path: impl AsRef<Path>, header: &Header) -> Result<Self, TranscriptError> {
        let path = path.as_ref();
        // A transcript holds prompts and tool output verbatim: the user's alone.
        let file = crate::private::create_file(path).map_err(|source| TranscriptError::Write {
            target: path.display().to_string(),
            source,
        })?;
        Self::to_file(file, path.display().to_string(), header)
    }

    /// Writes the header to `file`, then the transcript from a thread of its own, synced to
    /// disk after each prompt (see the module's write policy).
    pub(crate) fn to_file(
        mut file: File,
        target: String,
        header: &Header,
    ) -> Result<Self, TranscriptError> {
        write_all_flushed(&mut file, &header_line(header)).map_err(|source| {
            TranscriptError::Write {
                target: target.clone(),
                source,
            }
        })?;
        Self::spawn(file, target, header.content_redacted)
    }

    /// Records on after what `file` already holds (a header and records that `header`
    /// describes, written by the caller): no header is written.
    pub(crate) fn after(
        file: File,
        target: String,
        header: &Header,
    ) -> Result<Self, TranscriptError> {
        Self::spawn(file, target, header.content_redacted)
    }

    /// Writes the transcript to `writer` from a thread of its own, flushing after each line;
    /// `target` names it in errors. The header is written before this returns.
    pub fn to_writer(
        mut writer: impl Write + Send + 'static,
        target: impl Into<String>,
        header: &Header,
    ) -> Result<Self, TranscriptError> {
        let target = target.into();
        write_all_flushed(&mut writer, &header_line(header)).map_err(|source| {
            TranscriptError::Write {
                target: target.clone(),
                source,
            }
        })?;
        Self::spawn(Unsynced(writer), target, header.content_redacted)
    }

    fn spawn(
        writer: impl Sink,
        target: String,
        content_redacted: bool,
    ) -> Result<Self, TranscriptError> {
        let write_error = |source| TranscriptError::Write {
            target: target.clone(),
            source,
        };
        let state = Arc::new(Mutex::new(State::default()));
        let (sender, receiver) = mpsc::sync_channel(QUEUE_LINES);
        let thread = {
            let state = Arc::clone(&state);
            let target = target.clone();
            std::thread::Builder::new()
                .name("hookloop-recorder".to_owned())
                .spawn(move || write_lines(writer, &receiver, &state, &target))
                .map_err(write_error)?
        };
        Ok(Self {
            shared: Arc::new(Shared {
                target,
                content_redacted,
                state,
                writer: Some(WriterThread {
                    sender: Some(sender),
                    thread: Some(thread),
                }),
            }),
        })
    }

    /// Keeps the transcript in memory; [`text`](Self::text) returns it.
    pub fn in_memory(header: &Header) -> Self {
        let state = State {
            memory: Some(header_line(header)),
            ..State::default()
        };
        Self {
            shared: Arc::new(Shared {
                target: "memory".to_owned(),
                content_redacted: header.content_redacted,
                state: Arc::new(Mutex::new(state)),
                writer: None,
            }),
        }
    }

    /// Records written after the header. For a file, this waits until every record observed
    /// so far is written.
    pub fn records(&self) -> u64 {
        self.drain();
        self.lock().records
    }

    /// Waits until every record observed so far is written, then returns the first write
    /// error, if one happened; recording stopped there.
    pub fn check(&self) -> Result<(), TranscriptError> {
        let stopped = !self.drain();
        let state = self.lock();
        match &state.failed {
            Some((kind, message)) => Err(TranscriptError::Write {
                target: self.shared.target.clone(),
                source: io::Error::new(*kind, message.clone()),
            }),
            None if stopped => Err(TranscriptError::Write {
                target: self.shared.target.clone(),
                source: io::Error::other("the transcript writer stopped"),
            }),
            None => Ok(()),
        }
    }

    /// The transcript so far, for a recorder made with [`in_memory`](Self::in_memory); `None`
    /// for one that writes elsewhere.
    pub fn text(&self) -> Option<String> {
        self.lock()
            .memory
            .as_ref()
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Writes a record as it stands: the prefix copied from another transcript, before the
    /// recorder observes a session that goes on from it.
    pub fn write_record(&self, record: &Record) {
        self.record(Duration::from_millis(record.at_ms), RecordRef::from(record));
    }

    /// Waits for the writer thread to write what is queued; false if it is gone.
    fn drain(&self) -> bool {
        let Some(sender) = self.sender() else {
            return true;
        };
        let (done, wait) = mpsc::channel();
        sender.send(Job::Barrier(done)).is_ok() && wait.recv().is_ok()
    }

    fn sender(&self) -> Option<&SyncSender<Job>> {
        self.shared.writer.as_ref()?.sender.as_ref()
    }

    fn record(&self, at: Duration, event: RecordRef<'_>) {
        let at_ms = crate::millis::of(at);
        let (redacted_effect, redacted_fact, canonical);
        let (effect, fact) = if self.shared.content_redacted {
            redacted_effect = event.effect.map(redact_effect);
            redacted_fact = event.fact.map(redact_input);
            (redacted_effect.as_ref(), redacted_fact.as_ref())
        } else {
            (event.effect, event.fact)
        };
        canonical = effect.and_then(canonical_effect);
        let effect = canonical.as_ref().or(effect);
        // A prompt's end and the session's are where a finished prompt is made durable.
        let sync = event.agent.is_none()
            && (matches!(effect, Some(Effect::Finish { .. }))
                || matches!(fact, Some(Input::Closed)));
        let mut line = Vec::with_capacity(256);
        write_line(
            &mut line,
            &RecordRef {
                at_ms,
                effect,
                fact,
                ..event
            },
        );
        let Some(sender) = self.sender() else {
            let mut state = self.lock();
            if let Some(memory) = &mut state.memory {
                memory.extend_from_slice(&line);
                state.records += 1;
            }
            return;
        };
        if self.lock().failed.is_some() {
            return;
        }
        // Blocks only while the queue is full: the session waits for the disk, and no line is
        // dropped. The thread outlives every sender, so a send fails only if it panicked.
        if sender.send(Job::Line(line, sync)).is_err() {
            let mut state = self.lock();
            if state.failed.is_none() {
                tracing::warn!(target = %self.shared.target, "the transcript writer stopped; recording stops");
                state.failed = Some((
                    io::ErrorKind::Other,
                    "the transcript writer stopped".to_owned(),
                ));
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(writer) = &mut self.writer {
            // Closing the channel ends the thread once it has written every queued line; wait
            // for it so that a process exiting after its session keeps the whole record.
            drop(writer.sender.take());
            if let Some(thread) = writer.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // State is counters and a buffer, consistent between statements: a panic elsewhere does
    // not leave it half-updated.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The header as written: whoever built it, well-known secrets never reach the file.
fn header_line(header: &Header) -> Vec<u8> {
    let mut header = header.clone();
    let redaction = Redaction::new();
    header.servers = header
        .servers
        .into_iter()
        .map(|entry| redaction.apply(entry))
        .collect();
    let mut line = Vec::with_capacity(256);
    write_line(&mut line, &header);
    line
}

fn write_all_flushed(writer: &mut impl Write, line: &[u8]) -> io::Result<()> {
    writer.write_all(line)?;
    writer.flush()
}

/// Where the writer thread writes: a file is synced to disk where the write policy says.
trait Sink: Write + Send + 'static {
    fn sync(&mut self) -> io::Result<()>;
}

impl Sink for File {
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

/// A writer of the caller's, which has no disk to sync to that the recorder knows of.
struct Unsynced<W>(W);

impl<W: Write> Write for Unsynced<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<W: Write + Send + 'static> Sink for Unsynced<W> {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The writer thread: one write and one flush per line, and a sync where the line asks for
/// one, until every sender is gone.
fn write_lines(mut writer: impl Sink, jobs: &Receiver<Job>, state: &Mutex<State>, target: &str) {
    for job in jobs {
        match job {
            Job::Line(line, sync) => {
                if lock(state).failed.is_some() {
                    continue;
                }
                let written = write_all_flushed(&mut writer, &line)
                    .and_then(|()| if sync { writer.sync() } else { Ok(()) });
                let mut state = lock(state);
                match written {
                    Ok(()) => state.records += 1,
                    Err(error) => {
                        tracing::warn!(%target, %error, "transcript write failed; recording stops");
                        state.failed = Some((error.kind(), error.to_string()));
                    }
                }
            }
            Job::Barrier(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl Observer for Recorder {
    fn on_effect(&mut self, at: Duration, effect: &Effect) {
        self.record(
            at,
            RecordRef {
                effect: Some(effect),
                ..RecordRef::EMPTY
            },
        );
    }

    fn on_fact(&mut self, at: Duration, fact: &Input) {
        self.record(
            at,
            RecordRef {
                fact: Some(fact),
                ..RecordRef::EMPTY
            },
        );
    }

    fn on_supervision(&mut self, at: Duration, event: &supervisor::Event) {
        self.record(
            at,
            RecordRef {
                supervision: Some(event),
                ..RecordRef::EMPTY
            },
        );
    }

    fn on_agent_effect(&mut self, at: Duration, agent: &AgentId, effect: &Effect) {
        self.record(
            at,
            RecordRef {
                agent: Some(agent),
                effect: Some(effect),
                ..RecordRef::EMPTY
            },
        );
    }

    fn on_agent_fact(&mut self, at: Duration, agent: &AgentId, fact: &Input) {
        self.record(
            at,
            RecordRef {
                agent: Some(agent),
                fact: Some(fact),
                ..RecordRef::EMPTY
            },
        );
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Recorder")
            .field("target", &self.shared.target)
            .field("records", &state.records)
            .field("failed", &state.failed)
            .finish()
    }
}

/// A directory that receives one transcript per session (as `HOOKLOOP_RECORD_DIR` asks).
#[derive(Clone, Debug)]
pub struct RecordDir {
    dir: PathBuf,
}

impl RecordDir {
    /// The variable naming the directory where `hookloop acp` records each session.
    pub const ENV_VAR: &str = "HOOKLOOP_RECORD_DIR";

    /// The directory [`ENV_VAR`](Self::ENV_VAR) names, created if needed; `None` when it is
    /// unset or empty (recording is off by default).
    pub fn from_env() -> Result<Option<Self>, TranscriptError> {
        match std::env::var_os(Self::ENV_VAR) {
            Some(dir) if !dir.is_empty() => Self::new(PathBuf::from(dir)).map(Some),
            Some(_) | None => Ok(None),
        }
    }

    /// Uses `dir`, creating it if needed.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, TranscriptError> {
        let dir = dir.into();
        crate::private::create_dir(&dir).map_err(|source| TranscriptError::Write {
            target: dir.display().to_string(),
            source,
        })?;
        Ok(Self { dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A recorder writing to a new file of the directory, named
    /// `<unix time in ms>-<process id>-<sequence>.jsonl` so that names sort by start time and
    /// never collide, and the file's path.
    pub fn create(&self, header: &Header) -> Result<(Recorder, PathBuf), TranscriptError> {
        static SEQUENCE: AtomicU64 = AtomicU64::new(1);
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let pid = std::process::id();
        loop {
            let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
            let path = self.dir.join(format!("{millis:013}-{pid}-{n}.jsonl"));
            // `create_new`: a name taken by another process is skipped, never overwritten.
            match crate::private::write_options().create_new(true).open(&path) {
                Ok(file) => {
                    let recorder = Recorder::to_file(file, path.display().to_string(), header)?;
                    return Ok((recorder, path));
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(TranscriptError::Write {
                        target: path.display().to_string(),
                        source,
                    });
                }
            }
        }
    }
}

impl<L: LlmClient, H: ToolHost> Session<L, H> {
    /// The transcript header for this session: its policy, system prompt, and the host's
    /// current catalog.
    pub fn transcript_header(&self) -> Header {
        let machine = self.machine();
        let system = machine.request(Purpose::Turn).system.map(str::to_owned);
        Header::from_parts(machine.policy().clone(), system)
            .with_catalog(self.host().catalog())
            .with_supervision(self.host().supervision_policy())
    }

    /// Records this session into a new transcript file at `path`. Call it before the first
    /// prompt: a transcript must start with the session to replay.
    pub fn record_to(&mut self, path: impl AsRef<Path>) -> Result<Recorder, TranscriptError> {
        self.ensure_fresh()?;
        let recorder = Recorder::create(path, &self.transcript_header())?;
        self.add_observer(recorder.clone());
        Ok(recorder)
    }

    /// Records this session into a new file of `dir`; returns the recorder and the file's path.
    pub fn record_in(&mut self, dir: &RecordDir) -> Result<(Recorder, PathBuf), TranscriptError> {
        self.ensure_fresh()?;
        let (recorder, path) = dir.create(&self.transcript_header())?;
        self.add_observer(recorder.clone());
        Ok((recorder, path))
    }

    /// Records this session with `recorder`, whose header the caller built (to add server
    /// launch configurations, say). Call it before the first prompt.
    pub fn record_with(&mut self, recorder: Recorder) -> Result<(), TranscriptError> {
        self.ensure_fresh()?;
        self.add_observer(recorder);
        Ok(())
    }

    fn ensure_fresh(&self) -> Result<(), TranscriptError> {
        let machine = self.machine();
        // A prompt always adds to the history, and facts reach the machine only through one.
        if machine.history().is_empty() && machine.phase() == Phase::Idle {
            Ok(())
        } else {
            Err(TranscriptError::SessionStarted)
        }
    }
}
