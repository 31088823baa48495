//! Transcripts: the machine's boundary written down, and replayed.
//!
//! A transcript is a JSON Lines file: a [`Header`] (format and version, engine version, the
//! machine's configuration without secrets, the tool catalog per server), then one [`Record`]
//! per event in order — every [`Effect`](crate::Effect) the machine emitted and every
//! [`Input`](crate::Input) fact that answered it (model reply, tool result, hook answer or
//! timeout, cancellation, catalog change), each with its virtual time in ms since the session
//! started. A subagent's orders and facts are records of their own, marked with its agent id
//! (`agent-1`, `agent-1.1`: the id of the `agent` call that started it), in the same file.
//!
//! - **Recording**: a [`Recorder`] is an [`Observer`](crate::Observer) of a session;
//!   [`Session::record_to`](crate::Session::record_to) adds one writing to a file, and
//!   [`RecordDir`] hands out one file per session. Each line is written and flushed by the
//!   recorder's own thread; a crash leaves at most the last line cut short, and reading
//!   reports it and keeps the rest. The format's rules are in `docs/transcript-format.md`.
//! - **Replay**: [`replay`] rebuilds the [`Machine`](crate::Machine) from the header, feeds
//!   each recorded fact and checks each effect the machine emits against the recorded one, in
//!   order. No tokio, no server, no model: the machine never reads a clock (a hook timeout is
//!   the fact `HookReply::TimedOut`), so a replay is exact. The first mismatch stops it with a
//!   [`Divergence`]: record index, line, the machine's state, and a diff of the recorded and
//!   replayed effect. Model requests are pinned by the history's length and a digest of each
//!   part of the request (system, messages, tools, instruction, limits) that
//!   [`Effect::CallLlm`](crate::Effect::CallLlm) carries, so a change to anything the model
//!   would have been sent diverges too, naming the part. A record cut short or ending
//!   mid-prompt replays as far as it goes and says so ([`ReplayReport::is_whole`]).
//!   Subagents replay beside the top-level agent, each on its own machine, and a divergence in
//!   one names it ([`Divergence::agent`]).
//! - **Live tools**: [`replay_live`] takes the model's side from the record but runs tools and
//!   hooks against a live [`ToolHost`](crate::ToolHost), and reports each answer that differs
//!   from the record ([`Drift`]): a check that the MCP servers still behave as recorded. An
//!   `agent` call runs its subagent from the recorded model replies against the same host.
//!
//! ```
//! use hookloop::testing::{InProcessHost, ScriptedLlm, Step, HookStep};
//! use hookloop::transcript::{Recorder, Transcript};
//! use hookloop::{Config, Hook, HookServers, Session};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let llm = ScriptedLlm::new([Step::text("Done."), Step::text("Done, really.")]);
//! let host = InProcessHost::new().hook("todo", Hook::Stop, [HookStep::Say("1 open".into())]);
//! let config = Config::builder().hook_servers(HookServers::All).build()?;
//! let mut session = Session::new(config, llm, host);
//!
//! let recorder = Recorder::in_memory(&session.transcript_header());
//! session.record_with(recorder.clone())?;
//! session.prompt("Finish the feature.").await?;
//!
//! let text = recorder.text().expect("an in-memory recorder");
//! let report = hookloop::transcript::replay_str(&text)?;
//! assert_eq!(report.counters.objections, 1);
//! # Ok(())
//! # }
//! ```

mod check;
mod content;
mod diff;
mod fork;
mod format;
#[cfg(feature = "html")]
mod html;
#[cfg(feature = "junit")]
mod junit;
mod live;
mod parse;
mod recorder;
mod redact;
mod replay;
mod report;
mod restore;
mod show;
mod suite;
mod text;

use std::io;
use std::path::PathBuf;

pub use self::check::{BLESS_VAR, CheckFailed, Checked, bless, check_dir, check_dir_with};
pub use self::diff::line_diff;
pub use self::fork::{Continuation, Fork, ForkError, ForkPoint, ForkRun, fork};
pub use self::format::{
    ENGINE_VERSION, Event, FORMAT, Header, OLDEST_VERSION, Record, RecordedConfig, ServerEntry,
    Transcript, Truncation, VERSION,
};
#[cfg(feature = "html")]
#[cfg_attr(docsrs, doc(cfg(feature = "html")))]
pub use self::html::{render_html, write_html};
pub use self::live::{Drift, DriftKind, LiveReport, replay_live};
pub use self::parse::MAX_LINE_BYTES;
pub use self::recorder::{RecordDir, Recorder};
pub use self::redact::{REDACTED, Redaction};
pub use self::replay::{Replayer, replay, replay_str};
pub use self::report::{Divergence, DivergenceKind, ReplayError, ReplayReport, SubagentReport};
pub use self::restore::{Interruption, RestoreError, Restored, restore};
pub use self::show::{
    AgentLane, End, Entry, EntryKind, HookAnswer, ServerView, SessionView, ToolRun,
};
pub use self::suite::{
    FileResult, Outcome, SuiteReport, default_threads, replay_files, suite_files,
};

/// What to do with a transcript of another version.
fn version_advice(found: &u64) -> &'static str {
    if *found < u64::from(OLDEST_VERSION) {
        // Version 1 pinned only the history of each model request: replaying it would call a
        // request "the same" without knowing its tools, instruction or limits.
        " (older transcripts do not pin every part of a model request; record the session again)"
    } else {
        " (it was written by a newer engine)"
    }
}

/// A transcript that cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TranscriptError {
    /// The file could not be read.
    #[error("could not read transcript {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The transcript could not be written.
    #[error("could not write transcript {target}: {source}")]
    Write {
        /// Where the transcript was going.
        target: String,
        /// The error.
        source: io::Error,
    },
    /// Nothing to read.
    #[error("the transcript is empty: it has no header line")]
    Empty,
    /// Line 1 is not a hookloop transcript header.
    #[error("not a hookloop transcript: {reason}")]
    NotATranscript {
        /// Why it is not.
        reason: String,
    },
    /// A transcript of a format version this engine does not read.
    #[error(
        "transcript format version {found} is not supported: this engine reads versions {OLDEST_VERSION} to {VERSION}{}",
        version_advice(.found)
    )]
    UnsupportedVersion {
        /// The version the header names.
        found: u64,
    },
    /// The header is of this format and version but malformed.
    #[error("line 1: invalid transcript header: {source}")]
    Header {
        /// What the parser said.
        source: serde_json::Error,
    },
    /// A record before the last line is malformed.
    #[error("line {line}: invalid record: {source}")]
    Record {
        /// The line, counted from 1.
        line: usize,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// A line holds a field this engine does not know (`path` is where, as `.a.b[0].c`).
    #[error("line {line}: unknown field `{path}`: this engine would ignore it, so it refuses it")]
    UnknownField {
        /// The line, counted from 1.
        line: usize,
        /// Where the field is.
        path: String,
    },
    /// A line is longer than [`MAX_LINE_BYTES`].
    #[error("line {line} is longer than {limit} bytes: refused rather than read whole")]
    LineTooLong {
        /// The line, counted from 1.
        line: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// A line is not valid UTF-8.
    #[error("line {line}: not valid UTF-8")]
    NotUtf8 {
        /// The line, counted from 1.
        line: usize,
    },
    /// The record's content was redacted (`--redact-content`): it shows the session's course
    /// but no longer pins what the model was sent.
    #[error(
        "the transcript's content was redacted when it was recorded: it can be read, not replayed"
    )]
    ContentRedacted,
    /// Recording started after the session had run: the transcript would not replay.
    #[error("the session has already run a prompt: record it from its start")]
    SessionStarted,
}
