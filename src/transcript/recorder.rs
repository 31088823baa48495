//! Writing transcripts as a session runs.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::driver::{Observer, Session};
use crate::llm::LlmClient;
use crate::machine::{Effect, Input, Phase, Purpose};
use crate::mcp::ToolHost;
use crate::transcript::format::{RecordRef, write_line};
use crate::transcript::{Event, Header, Record, Redaction, TranscriptError};

/// Writes a transcript: the header when created, then every effect and fact it observes.
///
/// A recorder is an [`Observer`]: add it to a [`Session`] (or use [`Session::record_to`])
/// before the first prompt. It is cheap to clone; clones share one file, so keep one to call
/// [`check`](Self::check) after the session.
///
/// Crash-safe: each line is written and flushed with one write, so a crash leaves at most the
/// last line cut short, which [`Transcript::parse`](crate::transcript::Transcript::parse)
/// reports and skips. A write error is logged once; the session goes on unrecorded and
/// [`check`](Self::check) returns the error.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Mutex<Shared>>,
}

struct Shared {
    sink: Sink,
    /// Where the transcript goes, for error messages.
    target: String,
    line: Vec<u8>,
    records: u64,
    failed: Option<(io::ErrorKind, String)>,
}

enum Sink {
    Writer(Box<dyn Write + Send>),
    Memory(Vec<u8>),
}

impl Recorder {
    /// Creates (or truncates) the file at `path` and writes the header.
    pub fn create(path: impl AsRef<Path>, header: &Header) -> Result<Self, TranscriptError> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|source| TranscriptError::Write {
            target: path.display().to_string(),
            source,
        })?;
        Self::to_writer(file, path.display().to_string(), header)
    }

    /// Writes the transcript to `writer`, flushing after each line; `target` names it in
    /// errors.
    pub fn to_writer(
        writer: impl Write + Send + 'static,
        target: impl Into<String>,
        header: &Header,
    ) -> Result<Self, TranscriptError> {
        Self::start(Sink::Writer(Box::new(writer)), target.into(), header)
    }

    /// Keeps the transcript in memory; [`text`](Self::text) returns it.
    pub fn in_memory(header: &Header) -> Self {
        // Writing to memory cannot fail.
        Self::start(Sink::Memory(Vec::new()), "memory".to_owned(), header)
            .unwrap_or_else(|_| unreachable!("an in-memory transcript cannot fail to write"))
    }

    fn start(sink: Sink, target: String, header: &Header) -> Result<Self, TranscriptError> {
        let mut header = header.clone();
        // Whoever built the header, well-known secrets never reach the file.
        let redaction = Redaction::new();
        header.servers = header
            .servers
            .into_iter()
            .map(|entry| redaction.apply(entry))
            .collect();
        let mut shared = Shared {
            sink,
            target,
            line: Vec::with_capacity(256),
            records: 0,
            failed: None,
        };
        write_line(&mut shared.line, &header);
        shared
            .flush_line()
            .map_err(|source| TranscriptError::Write {
                target: shared.target.clone(),
                source,
            })?;
        Ok(Self {
            shared: Arc::new(Mutex::new(shared)),
        })
    }

    /// Records written after the header.
    pub fn records(&self) -> u64 {
        self.lock().records
    }

    /// The first write error, if one happened; recording stopped there.
    pub fn check(&self) -> Result<(), TranscriptError> {
        let shared = self.lock();
        match &shared.failed {
            None => Ok(()),
            Some((kind, message)) => Err(TranscriptError::Write {
                target: shared.target.clone(),
                source: io::Error::new(*kind, message.clone()),
            }),
        }
    }

    /// The transcript so far, for a recorder made with [`in_memory`](Self::in_memory); `None`
    /// for one that writes elsewhere.
    pub fn text(&self) -> Option<String> {
        match &self.lock().sink {
            Sink::Memory(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Sink::Writer(_) => None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while writing leaves at worst a cut-short line, which readers handle.
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes a record as it stands: the prefix copied from another transcript, before the
    /// recorder observes a session that goes on from it.
    pub fn write_record(&self, record: &Record) {
        let (effect, fact) = match &record.event {
            Event::Effect(effect) => (Some(effect), None),
            Event::Fact(fact) => (None, Some(fact)),
        };
        self.record(Duration::from_millis(record.at_ms), effect, fact);
    }

    fn record(&self, at: Duration, effect: Option<&Effect>, fact: Option<&Input>) {
        let mut shared = self.lock();
        if shared.failed.is_some() {
            return;
        }
        let at_ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
        let mut line = std::mem::take(&mut shared.line);
        line.clear();
        write_line(
            &mut line,
            &RecordRef {
                at_ms,
                effect,
                fact,
            },
        );
        shared.line = line;
        match shared.flush_line() {
            Ok(()) => shared.records += 1,
            Err(error) => {
                tracing::warn!(target = %shared.target, %error, "transcript write failed; recording stops");
                shared.failed = Some((error.kind(), error.to_string()));
            }
        }
    }
}

impl Shared {
    fn flush_line(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Writer(writer) => {
                writer.write_all(&self.line)?;
                writer.flush()
            }
            Sink::Memory(bytes) => {
                bytes.extend_from_slice(&self.line);
                Ok(())
            }
        }
    }
}

impl Observer for Recorder {
    fn on_effect(&mut self, at: Duration, effect: &Effect) {
        self.record(at, Some(effect), None);
    }

    fn on_fact(&mut self, at: Duration, fact: &Input) {
        self.record(at, None, Some(fact));
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared = self.lock();
        f.debug_struct("Recorder")
            .field("target", &shared.target)
            .field("records", &shared.records)
            .field("failed", &shared.failed)
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
        std::fs::create_dir_all(&dir).map_err(|source| TranscriptError::Write {
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
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    let recorder = Recorder::to_writer(file, path.display().to_string(), header)?;
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
        Header::from_parts(machine.policy().clone(), system).with_catalog(self.host().catalog())
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
