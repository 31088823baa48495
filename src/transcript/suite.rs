//! Suites: many transcripts replayed at once, one per core, with a report per file and a JUnit
//! report for CI systems.

use std::fmt;
use std::io;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::transcript::{Divergence, ReplayReport, Transcript, TranscriptError};

/// The files of a suite: each path that is a file, and every `*.jsonl` beneath each folder,
/// folders walked in name order so a report lists files the same way on every machine.
pub fn suite_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, TranscriptError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            collect_jsonl(path, &mut files)?;
        } else {
            // A missing file is reported by its replay, with the others.
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn collect_jsonl(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), TranscriptError> {
    let read_error = |source| TranscriptError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut entries = std::fs::read_dir(dir)
        .map_err(read_error)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<Vec<_>, io::Error>>()
        .map_err(read_error)?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_jsonl(&path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "jsonl") {
            files.push(path);
        }
    }
    Ok(())
}

/// Replays every file on `threads` threads (at least one), each thread taking the next file
/// when it is done with one. Results come back in the order of `files`.
pub fn replay_files(files: &[PathBuf], threads: usize) -> SuiteReport {
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<FileResult>>> = Mutex::new(vec![None; files.len()]);
    let threads = threads.clamp(1, files.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = files.get(index) else { break };
                    let result = replay_file(path);
                    // A panic elsewhere cannot leave the vector half-written: each slot is
                    // one assignment.
                    let mut slots = results.lock().unwrap_or_else(|p| p.into_inner());
                    slots[index] = Some(result);
                }
            });
        }
    });
    let results = results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .flatten()
        .collect();
    SuiteReport {
        results,
        elapsed: started.elapsed(),
    }
}

/// One thread per core, as the OS reports them.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

fn replay_file(path: &Path) -> FileResult {
    let started = Instant::now();
    let outcome = match Transcript::read(path) {
        Err(error) => Outcome::Unreadable(error.to_string()),
        Ok(transcript) if transcript.header.content_redacted => {
            Outcome::Unreadable(crate::transcript::TranscriptError::ContentRedacted.to_string())
        }
        Ok(transcript) => match transcript.replay() {
            Ok(mut report) => {
                report.truncated.clone_from(&transcript.truncated);
                if report.is_whole() {
                    Outcome::Passed(report)
                } else {
                    Outcome::NotWhole(report)
                }
            }
            Err(divergence) => Outcome::Diverged(divergence),
        },
    };
    FileResult {
        path: path.to_owned(),
        outcome,
        elapsed: started.elapsed(),
    }
}

/// How every file of a suite replayed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SuiteReport {
    /// One per file, in the order given.
    pub results: Vec<FileResult>,
    /// Wall-clock time of the whole suite.
    pub elapsed: Duration,
}

/// How one file replayed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FileResult {
    /// The file.
    pub path: PathBuf,
    /// How it replayed.
    pub outcome: Outcome,
    /// How long it took.
    pub elapsed: Duration,
}

/// The ways a file can replay.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Every effect matched, and the record covers the session to a resting point (or the
    /// suite [accepts](SuiteReport::accept_not_whole) records that do not).
    Passed(ReplayReport),
    /// Every recorded effect matched, but the record is not whole: a line is cut short, or it
    /// ends mid-prompt ([`ReplayReport::incompleteness`] says which). It tests less than it
    /// seems to, so it fails a suite unless the suite accepts it.
    NotWhole(ReplayReport),
    /// The machine parted from the record.
    Diverged(Box<Divergence>),
    /// The file could not be read or is not a transcript; the message says why.
    Unreadable(String),
}

impl SuiteReport {
    /// Files that replayed cleanly.
    pub fn passed(&self) -> usize {
        self.count(|outcome| matches!(outcome, Outcome::Passed(_)))
    }

    /// Files that matched as far as their record goes, but are not whole.
    pub fn not_whole(&self) -> usize {
        self.count(|outcome| matches!(outcome, Outcome::NotWhole(_)))
    }

    /// Counts every file that matched as far as its record goes as passed, whole or not: for
    /// suites of records a crash or a full disk may have cut (`hookloop replay
    /// --allow-truncated`). The per-file line still says where a record stops.
    pub fn accept_not_whole(&mut self) {
        for result in &mut self.results {
            if let Outcome::NotWhole(report) = &result.outcome {
                result.outcome = Outcome::Passed(report.clone());
            }
        }
    }

    /// Files that diverged.
    pub fn diverged(&self) -> usize {
        self.count(|outcome| matches!(outcome, Outcome::Diverged(_)))
    }

    /// Files that could not be read.
    pub fn unreadable(&self) -> usize {
        self.count(|outcome| matches!(outcome, Outcome::Unreadable(_)))
    }

    fn count(&self, pick: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| pick(&r.outcome)).count()
    }

    /// Whether every file replayed cleanly and whole.
    pub fn is_clean(&self) -> bool {
        self.passed() == self.results.len()
    }
}

impl fmt::Display for FileResult {
    /// One line: the verdict, the file, and what it came to.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        match &self.outcome {
            Outcome::Passed(report) => {
                write!(
                    f,
                    "ok       {path}: {} records, {} prompt(s), {} objection(s)",
                    report.records,
                    report.finishes.len(),
                    report.counters.objections
                )?;
                let lanes = report.subagents.iter().filter(|s| s.lane_recorded).count();
                if lanes > 0 {
                    write!(f, ", {lanes} subagent(s) replayed")?;
                }
                if let Some(why) = report.incompleteness() {
                    write!(f, "; not whole: {why}")?;
                }
                Ok(())
            }
            Outcome::NotWhole(report) => write!(
                f,
                "PARTIAL  {path}: matched as far as the record goes, but {}",
                report.incompleteness().unwrap_or_default()
            ),
            Outcome::Diverged(divergence) => match &divergence.agent {
                Some(agent) => write!(
                    f,
                    "DIVERGED {path}: at record {} (line {}) in subagent {agent}, while its \
                     machine was {}",
                    divergence.index, divergence.line, divergence.phase
                ),
                None => write!(
                    f,
                    "DIVERGED {path}: at record {} (line {}) while the machine was {}",
                    divergence.index, divergence.line, divergence.phase
                ),
            },
            Outcome::Unreadable(message) => write!(f, "ERROR    {path}: {message}"),
        }
    }
}

impl fmt::Display for SuiteReport {
    /// The summary line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} transcript(s): {} passed, {} not whole, {} diverged, {} unreadable, in {:.2} s",
            self.results.len(),
            self.passed(),
            self.not_whole(),
            self.diverged(),
            self.unreadable(),
            self.elapsed.as_secs_f64()
        )
    }
}
