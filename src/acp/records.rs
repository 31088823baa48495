//! The recorded sessions of a record directory (`HOOKLOOP_RECORD_DIR`), for `session/list`,
//! `session/load` and `session/resume`.
//!
//! A recorded ACP session is its transcript, `<id>.jsonl`, plus a small side file,
//! `<id>.session.json`, holding what the transcript does not: the session's working directory
//! and its title (the first line of its first prompt). The session id a client sees is the
//! transcript's file stem, so the id it was given by `session/new` is the one it loads by.
//!
//! A session is restored by replaying its transcript ([`crate::transcript::restore`]): the
//! rebuilt machine has the recorded history, counters (the `_Stop` budget already spent stays
//! spent), compactions and standing permission decisions, and any divergence refuses the load
//! with the replay's own description of the first one. A record a crash cut is closed as the
//! transcript module says (the cut prompt interrupted, its calls answered), and goes on.
//!
//! A restored session is recorded on in the same file ([`Restored::record_on`]): the file is
//! rewritten with the record up to the session's close, and what the session does next
//! follows, its times after the record's, so the whole replays as one session and can be
//! loaded again.
//!
//! One process at a time holds a session: [`lock`] takes an exclusive `flock` on
//! `<id>.jsonl.lock` beside the record, held while the session is open. The kernel lets go of
//! it when the process ends, however it ends, so a killed agent's session loads at once.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::transcript::RestoreError;
pub use crate::transcript::Restored;

/// The longest title kept, in characters.
const TITLE_CHARS: usize = 120;

/// What `session/list` shows of one recorded session.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedSession {
    /// The session id: the transcript's file stem.
    pub id: String,
    /// The session's working directory.
    pub cwd: PathBuf,
    /// The first line of its first prompt, if it had one.
    pub title: Option<String>,
    /// A process holds it open now (this one or another): a load would be refused.
    pub open: bool,
}

/// The side file's contents.
#[derive(Debug, Serialize, Deserialize)]
struct SideFile {
    cwd: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
}

/// Why a recorded session cannot be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The id is not one this agent hands out (it must be a plain file stem).
    #[error("{0:?} is not a recorded session id")]
    BadId(String),
    /// No transcript of that id in the directory.
    #[error("no recorded session {id:?} in {}", dir.display())]
    Unknown {
        /// The session id asked for.
        id: String,
        /// The folder searched.
        dir: PathBuf,
    },
    /// The transcript cannot be read or does not replay.
    #[error("{0}")]
    Restore(#[from] RestoreError),
    /// Another process (another agent on the same record directory) has the session open.
    #[error("the session is open in another process; close it there first")]
    OpenElsewhere,
    /// The session's lock file could not be opened or locked.
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The side file of the transcript at `record`.
fn side_path(record: &Path) -> PathBuf {
    record.with_extension("session.json")
}

/// The lock file of the transcript at `record`.
fn lock_path(record: &Path) -> PathBuf {
    record.with_extension("jsonl.lock")
}

/// An exclusive hold on one recorded session, for as long as it lives.
#[derive(Debug)]
pub struct SessionLock {
    _file: File,
}

/// Takes the session of the transcript at `record` for this process: refused with
/// [`LoadError::OpenElsewhere`] while another open file holds it (another process, or this
/// one's other session of the same id). Never waits.
pub fn lock(record: &Path) -> Result<SessionLock, LoadError> {
    let path = lock_path(record);
    let lock_error = |source| LoadError::Lock {
        path: path.clone(),
        source,
    };
    let file = crate::private::write_options()
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(lock_error)?;
    match crate::private::try_lock(&file) {
        Ok(true) => Ok(SessionLock { _file: file }),
        Ok(false) => Err(LoadError::OpenElsewhere),
        Err(e) => Err(lock_error(e)),
    }
}

/// Whether a process holds the session of the transcript at `record`: its lock file exists
/// and cannot be taken. The test takes the lock and lets go of it at once.
fn is_open(record: &Path) -> bool {
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .open(lock_path(record))
    else {
        return false;
    };
    matches!(crate::private::try_lock(&file), Ok(false))
}

/// Writes the side file of the transcript at `record`.
pub fn write_side_file(record: &Path, cwd: &Path, title: Option<&str>) -> std::io::Result<()> {
    let side = SideFile {
        cwd: cwd.to_owned(),
        title: title.map(title_of),
    };
    let json = serde_json::to_vec(&side).map_err(std::io::Error::other)?;
    // It holds the first prompt's first line.
    crate::private::write_file(&side_path(record), json)
}

/// A prompt's first non-blank line, cut to 120 characters (`TITLE_CHARS`).
pub fn title_of(prompt: &str) -> String {
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    match line.char_indices().nth(TITLE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// The recorded sessions of `dir` that have a side file, newest first (file names start with
/// the recording's start time), those in `cwd` only when it is given. The originals kept
/// beside a record a crash cut (`<id>.jsonl.crashed-<n>`) and lock files are not sessions.
pub fn list(dir: &Path, cwd: Option<&Path>) -> std::io::Result<Vec<RecordedSession>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let Some(id) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        // Transcripts without a side file were not written by an ACP session.
        let Ok(bytes) = std::fs::read(side_path(&path)) else {
            continue;
        };
        let side: SideFile = match serde_json::from_slice(&bytes) {
            Ok(side) => side,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable session side file");
                continue;
            }
        };
        if cwd.is_some_and(|cwd| cwd != side.cwd) {
            continue;
        }
        found.push(RecordedSession {
            id: id.to_owned(),
            cwd: side.cwd,
            title: side.title,
            open: is_open(&path),
        });
    }
    found.sort_by(|a, b| b.id.cmp(&a.id));
    Ok(found)
}

/// The transcript of session `id` in `dir`.
pub fn find(dir: &Path, id: &str) -> Result<PathBuf, LoadError> {
    let plain = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !plain {
        return Err(LoadError::BadId(id.to_owned()));
    }
    let path = dir.join(format!("{id}.jsonl"));
    if !path.is_file() {
        return Err(LoadError::Unknown {
            id: id.to_owned(),
            dir: dir.to_owned(),
        });
    }
    Ok(path)
}

/// Rebuilds the machine of the session recorded at `path` by replaying its records up to the
/// session's end, a prompt a crash cut closed as interrupted.
pub fn restore(path: &Path) -> Result<Restored, LoadError> {
    Ok(crate::transcript::restore(path)?)
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::machine::Phase;
    use crate::testing::{HookStep, InProcessHost, ScriptedLlm, Step};
    use crate::transcript::Transcript;
    use crate::{Config, Hook, HookServers, Session};

    fn scratch(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("hookloop-records-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Records a session of one prompt whose `_Stop` objects once, then closes it.
    async fn record(path: &Path) {
        let config = Config::builder()
            .hook_servers(HookServers::All)
            .stop_max_rejections(3)
            .build()
            .unwrap();
        let llm = ScriptedLlm::new([Step::text("first"), Step::text("second")]);
        let host = InProcessHost::new().hook(
            "gate",
            Hook::Stop,
            [
                HookStep::Say("not yet".into()),
                HookStep::Say(String::new()),
            ],
        );
        let mut session = Session::new(config, llm, host);
        let recorder = session.record_to(path).unwrap();
        session.prompt("go").await.unwrap();
        session.close().await.unwrap();
        recorder.check().unwrap();
    }

    #[tokio::test]
    async fn records_and_side_files_are_the_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let base = scratch("modes");
        let dir = crate::transcript::RecordDir::new(base.join("records")).unwrap();
        assert_eq!(mode(dir.path()), 0o700);
        let header = crate::transcript::Header::from_parts(crate::machine::Policy::default(), None);
        let (recorder, path) = dir.create(&header).unwrap();
        drop(recorder);
        assert_eq!(mode(&path), 0o600);
        write_side_file(&path, &base, Some("a prompt")).unwrap();
        assert_eq!(mode(&side_path(&path)), 0o600);
        // A file named by the caller (`--record`) too.
        let named = base.join("named.jsonl");
        record(&named).await;
        assert_eq!(mode(&named), 0o600);
        let _ = std::fs::remove_dir_all(base);
    }

    #[tokio::test]
    async fn a_recorded_session_restores_with_its_history_and_counters() {
        let dir = scratch("restore");
        let path = dir.join("1-1-1.jsonl");
        record(&path).await;
        let machine = restore(&path).unwrap().machine;
        assert_eq!(machine.phase(), Phase::Idle);
        assert_eq!(machine.counters().objections, 1);
        assert!(matches!(&machine.history()[0], crate::Message::User { text } if text == "go"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_restored_session_is_recorded_on_in_its_file_and_loads_again_whole() {
        let dir = scratch("record-on");
        let path = dir.join("1-1-1.jsonl");
        record(&path).await;
        let before = Transcript::read(&path).unwrap();
        let restored = restore(&path).unwrap();
        let (recorder, observer, kept) = restored.record_on(&path).unwrap();
        assert_eq!(kept, None, "a whole record is not kept twice");
        let config = Config::builder()
            .hook_servers(HookServers::All)
            .stop_max_rejections(3)
            .build()
            .unwrap();
        let llm = ScriptedLlm::new([Step::text("third")]);
        let host = InProcessHost::new().hook("gate", Hook::Stop, [HookStep::Say(String::new())]);
        let mut session = Session::with_machine(config, restored.machine, llm, host);
        session.add_observer(observer);
        session.prompt("again").await.unwrap();
        session.close().await.unwrap();
        recorder.check().unwrap();

        // The file holds both prompts, its times never go back, and it replays whole.
        let after = Transcript::read(&path).unwrap();
        assert!(after.records.len() > before.records.len());
        let times: Vec<u64> = after.records.iter().map(|r| r.at_ms).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        let machine = restore(&path).unwrap().machine;
        let prompts: Vec<&str> = machine
            .history()
            .iter()
            .filter_map(|m| match m {
                crate::Message::User { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(prompts, ["go", "again"]);
        assert_eq!(machine.counters().objections, 1);
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.contains("reloading"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_record_that_does_not_replay_is_refused_with_its_first_divergence() {
        let dir = scratch("diverged");
        let path = dir.join("1-1-1.jsonl");
        record(&path).await;
        // Drop the first record after the header: the machine's first order is then missing.
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.remove(1);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let err = restore(&path).unwrap_err();
        assert!(
            matches!(err, LoadError::Restore(RestoreError::Diverged(_))),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains("replay diverged at record"), "{message}");
        assert!(message.contains("(line "), "{message}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn listing_is_newest_first_filtered_by_cwd_and_skips_foreign_transcripts() {
        let dir = scratch("list");
        for (id, cwd, title) in [
            ("100-1-1", "/a", Some("old\nsecond line")),
            ("200-1-1", "/b", None),
            ("300-1-1", "/a", Some("  \n new ")),
        ] {
            let path = dir.join(format!("{id}.jsonl"));
            std::fs::write(&path, "").unwrap();
            write_side_file(&path, Path::new(cwd), title).unwrap();
        }
        // A transcript without a side file (not an ACP session's) is not listed.
        std::fs::write(dir.join("400-1-1.jsonl"), "").unwrap();
        let all = list(&dir, None).unwrap();
        let ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["300-1-1", "200-1-1", "100-1-1"]);
        assert_eq!(all[0].title.as_deref(), Some("new"));
        assert_eq!(all[2].title.as_deref(), Some("old"));
        assert_eq!(all[1].title, None);
        let in_a = list(&dir, Some(Path::new("/a"))).unwrap();
        assert_eq!(in_a.len(), 2);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn ids_that_are_not_plain_file_stems_are_refused() {
        let dir = scratch("find");
        for bad in ["", "../x", "a/b", "a.b", "x y"] {
            assert!(matches!(find(&dir, bad), Err(LoadError::BadId(_))), "{bad}");
        }
        assert!(matches!(
            find(&dir, "123-4-5"),
            Err(LoadError::Unknown { .. })
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
}
