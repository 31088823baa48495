//! What `hookloop hook <host>` remembers of a host session between its invocations: the `_Stop`
//! objection budget, the latch of the consecutive end-of-turn rule, each server's run of
//! timeouts. One file per host session, `<runtime>/<host pid>/sessions/<key>.json` (mode 0600,
//! directories 0700), read and written under an exclusive lock (`<key>.lock`) and removed at the
//! session's end.
//!
//! The session id is the host's input: it is never a path. [`session_key`] keeps ids of
//! `[A-Za-z0-9_-]` up to 64 bytes as they are and names any other by a readable prefix and a
//! hash of the whole id, so `../../x` stays inside the directory and two ids never share a key
//! by sanitising alike. A file longer than [`MAX_STATE_BYTES`], or not the JSON written here, is
//! treated as a fresh session, with a warning.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::machine::{Counters, Policy};

/// The longest state file read; a longer one is treated as corrupt.
pub const MAX_STATE_BYTES: u64 = 64 * 1024;
/// How long an invocation waits for another of the same session to let go of the lock.
pub const LOCK_WAIT: Duration = Duration::from_secs(1);
/// The subagents whose `_SubagentStop` budget is kept, at most (the oldest is forgotten).
pub const MAX_SUBAGENTS: usize = 64;
/// The longest session key, in bytes.
const MAX_KEY_BYTES: usize = 64;

/// One host session's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionState {
    /// The engine's own session counters: `_Stop` objections and each server's timeout run.
    pub counters: Counters,
    /// The last end of turn was objected to and the model has done nothing since: the next one
    /// ends the turn (for hosts that do not say so themselves).
    pub objected: bool,
    /// `_SubagentStop` objections per subagent id, each subagent with a budget of its own.
    #[serde(default)]
    pub subagents: BTreeMap<String, u32>,
}

impl SessionState {
    /// `_Stop` objections left under `max` (the budget).
    pub fn budget_left(&self, max: u32) -> u32 {
        let policy = Policy {
            stop_max_rejections: max,
            ..Policy::default()
        };
        self.counters.budget_left(&policy)
    }

    /// `_SubagentStop` objections left for `agent` under `max`.
    pub fn subagent_budget_left(&self, agent: &str, max: u32) -> u32 {
        max.saturating_sub(self.subagents.get(agent).copied().unwrap_or(0))
    }

    /// Counts an objection to `agent`'s end of turn, forgetting the oldest-named subagent when
    /// [`MAX_SUBAGENTS`] are kept, so that the file stays bounded.
    pub fn record_subagent_objection(&mut self, agent: &str) {
        if !self.subagents.contains_key(agent) && self.subagents.len() >= MAX_SUBAGENTS {
            let first = self.subagents.keys().next().cloned();
            if let Some(first) = first {
                self.subagents.remove(&first);
            }
        }
        *self.subagents.entry(agent.to_owned()).or_insert(0) += 1;
    }
}

/// The file name stem a host's session id is kept under: the id itself when it is 1 to 64
/// bytes of `[A-Za-z0-9_-]`, else its safe characters (at most 32) and a hash of the whole id.
pub fn session_key(id: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if !id.is_empty() && id.len() <= MAX_KEY_BYTES && id.chars().all(safe) {
        return id.to_owned();
    }
    let prefix: String = id.chars().filter(|&c| safe(c)).take(32).collect();
    // FNV-1a, 64 bits: stable across releases, unlike std's hasher, and a key that only tells
    // ids apart needs nothing stronger.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{prefix}~{hash:016x}")
}

/// Where a host session's state lives.
#[derive(Clone, Debug)]
pub struct StateFile {
    path: PathBuf,
    lock: PathBuf,
}

impl StateFile {
    /// The state of the session `session_id` under the host's directory `host_dir`.
    pub fn new(host_dir: &Path, session_id: &str) -> Self {
        let dir = host_dir.join("sessions");
        let key = session_key(session_id);
        Self {
            path: dir.join(format!("{key}.json")),
            lock: dir.join(format!("{key}.lock")),
        }
    }

    /// The state file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the state, lets `change` update it, and writes it back if it changed, all under the
    /// session's lock. `warn` hears of a corrupt file (then read as fresh). Returns what
    /// `change` returned; an error when the lock was not had within [`LOCK_WAIT`] or a file
    /// could not be written.
    pub fn update<T>(
        &self,
        warn: &mut dyn FnMut(String),
        change: impl FnOnce(&mut SessionState) -> T,
    ) -> std::io::Result<T> {
        let Some(_lock) = self.lock()? else {
            return Err(std::io::Error::other(format!(
                "the session's state is locked by another hook command for over {} ms",
                LOCK_WAIT.as_millis()
            )));
        };
        let before = self.load(warn);
        let mut state = before.clone();
        let out = change(&mut state);
        if state != before {
            self.store(&state)?;
        }
        Ok(out)
    }

    /// Forgets the session: its state file and its lock file, both unlinked while the lock is
    /// held (an invocation waiting on the old lock file sees it gone and takes the new one, see
    /// `lock`). When the lock is not had within [`LOCK_WAIT`] both are left for the
    /// holder, and for the clean-up of a dead host's directory.
    pub fn remove(&self) {
        if let Ok(Some(_lock)) = self.lock() {
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_file(&self.lock);
        }
    }

    /// The session's lock, waited for at most [`LOCK_WAIT`] in all. A lock taken on a file
    /// that was unlinked meanwhile (the session removed by its end while this one waited)
    /// locks nothing anyone else will open: the file at the path is opened and locked again.
    fn lock(&self) -> std::io::Result<Option<crate::private::FileLock>> {
        use std::os::unix::fs::MetadataExt;
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            let wait = deadline.saturating_duration_since(std::time::Instant::now());
            let Some(lock) = crate::private::lock_exclusive(&self.lock, wait)? else {
                return Ok(None);
            };
            let held = lock.file().metadata()?;
            let same = std::fs::symlink_metadata(&self.lock)
                .is_ok_and(|now| now.dev() == held.dev() && now.ino() == held.ino());
            if same {
                return Ok(Some(lock));
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    fn load(&self, warn: &mut dyn FnMut(String)) -> SessionState {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            // A link planted in place of the file is not followed.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path);
        let file = match file {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return SessionState::default(),
            Err(e) => {
                warn(format!(
                    "the state file {} cannot be read ({e}): treated as a fresh session",
                    self.path.display()
                ));
                return SessionState::default();
            }
        };
        let mut bytes = Vec::new();
        let read = file.take(MAX_STATE_BYTES + 1).read_to_end(&mut bytes);
        let corrupt = |why: String| {
            format!(
                "the state file {} is {why}: treated as a fresh session",
                self.path.display()
            )
        };
        match read {
            Err(e) => warn(corrupt(format!("unreadable ({e})"))),
            Ok(_) if bytes.len() as u64 > MAX_STATE_BYTES => {
                warn(corrupt(format!("longer than {MAX_STATE_BYTES} bytes")));
            }
            Ok(_) => match serde_json::from_slice(&bytes) {
                Ok(state) => return state,
                Err(e) => warn(corrupt(format!("not hookloop's state ({e})"))),
            },
        }
        SessionState::default()
    }

    /// Writes the state to a fresh file beside it and renames that over it: a reader never
    /// sees half a file, and a link planted at the path is replaced, not followed.
    fn store(&self, state: &SessionState) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = self.path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut file = crate::private::write_options()
            .create_new(true)
            .open(&tmp)?;
        // A struct of numbers, booleans and maps of strings always serialises.
        file.write_all(&serde_json::to_vec(state).unwrap_or_default())?;
        drop(file);
        std::fs::rename(&tmp, &self.path)
    }
}

/// Removes the directories under `runtime` (the bridge's, which the proxy names) of
/// hosts that are gone: a host killed, or one that never sent its session end, leaves its
/// sessions' state and locks behind, and nothing else would ever remove them. A directory is a
/// host's when its name is a pid; it is removed when no process has that pid (`kill(pid, 0)`
/// says `ESRCH`). A pid taken again by another process keeps its directory, which is harmless:
/// state is keyed by the host's session id too. Returns the directories removed.
pub fn clean_dead_hosts(runtime: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(runtime) else {
        return removed;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
            .filter(|&pid| pid > 0)
        else {
            continue;
        };
        // Not through a link: the directory itself, or nothing.
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // SAFETY: signal 0 only checks that the pid exists; no signal is sent.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ids_are_kept_and_others_hashed_inside_the_directory() {
        assert_eq!(session_key("abc-123_X"), "abc-123_X");
        for hostile in ["../../x", "a/b", "", ".", "..", "x\0y", &"a".repeat(65)] {
            let key = session_key(hostile);
            assert!(!key.contains('/') && !key.contains('\0'), "{key}");
            assert!(!key.starts_with('.'), "{key}");
            assert!(key.len() <= 32 + 17, "{key}");
        }
        // Two ids that sanitise alike keep apart keys.
        assert_ne!(session_key("a/b"), session_key("a.b"));
    }

    #[test]
    fn the_subagent_map_stays_bounded() {
        let mut state = SessionState::default();
        for i in 0..MAX_SUBAGENTS * 2 {
            state.record_subagent_objection(&format!("agent-{i:04}"));
        }
        assert_eq!(state.subagents.len(), MAX_SUBAGENTS);
        state.record_subagent_objection("agent-0127");
        assert_eq!(state.subagent_budget_left("agent-0127", 3), 1);
    }

    fn scratch_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "hookloop-state-{tag}-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        crate::private::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn a_session_removed_while_an_update_holds_its_lock_never_lets_a_second_holder_in() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = scratch_dir("unlink");
        let file = StateFile::new(&dir, "s");
        let inside = AtomicBool::new(false);
        std::thread::scope(|scope| {
            // A holds the lock for a while.
            scope.spawn(|| {
                file.update(&mut |_| {}, |s| {
                    inside.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(300));
                    s.objected = true;
                    inside.store(false, Ordering::SeqCst);
                })
                .unwrap();
            });
            while !inside.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            // The session ends meanwhile (B), and another event of it comes (C): C must not
            // hold the session's lock while A does.
            let ender = scope.spawn(|| file.remove());
            std::thread::sleep(Duration::from_millis(50));
            let c = file.update(&mut |_| {}, |_| inside.load(Ordering::SeqCst));
            ender.join().unwrap();
            assert_eq!(c.ok(), Some(false), "C ran while A held the lock");
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
