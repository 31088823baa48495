//! `hookloop hooks install <host>` and `hookloop hooks uninstall <host>`: the host's own
//! configuration files, changed so that its stdio MCP servers run behind
//! [`hookloop mcp proxy`](super::proxy) and [`hookloop hook <host>`](super::command) runs at its
//! events ([`edit`] holds the changes; this file reads and writes the files).
//!
//! - Idempotent: a change is computed on the parsed document and compared with it, so an
//!   install over an install, or an uninstall with nothing to take out, writes nothing.
//! - Nothing half-written: each file is written to a temporary file beside it and renamed over
//!   it, its mode kept. Changes of one run are made under a lock per file
//!   (`<runtime>/install/<key>.lock`), so two installs at once take turns, and a file changed
//!   by someone else between the read and the rename is read again and the change recomputed.
//! - A file that cannot be read as its format (not UTF-8, not JSON or TOML, a value of the wrong
//!   shape where the change goes), one longer than [`MAX_CONFIG_BYTES`] or not a regular file is
//!   refused, with where and why, and no file of the run is written.
//! - A configuration file that is a symbolic link is written through: its target is changed in
//!   place (the link stays a link), and the run says so. A link to nothing is refused.
//! - Uninstall gives each server its own command and arguments back and takes out hookloop's
//!   hook entries alone (both found by their shape), and removes a file it leaves empty.

pub mod edit;
pub mod json;

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml_edit::DocumentMut;

use self::json::Json;
use super::hosts::{Host, claude_code, codex};

/// The longest configuration file read (Claude Code's `~/.claude.json` grows with its history).
pub const MAX_CONFIG_BYTES: u64 = 32 * 1024 * 1024;
/// How long a run waits for another install to let go of a file.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How often a run reads again a file that changed under it before giving up.
const ATTEMPTS: usize = 5;

/// Which of the host's configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The project's, under the current directory.
    Project,
    /// The user's, under the home directory (Codex: `CODEX_HOME`).
    User,
}

/// Install or uninstall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Put the servers behind the proxy and register the hook command.
    Install,
    /// Take both back out.
    Uninstall,
}

/// Where the configuration files are: the project, the home, and the variables that move them.
#[derive(Clone, Debug)]
pub struct Places {
    /// The project (the current directory).
    pub project: PathBuf,
    /// `HOME`.
    pub home: PathBuf,
    /// `CODEX_HOME`, if set.
    pub codex_home: Option<PathBuf>,
}

impl Places {
    /// From this process's current directory and environment.
    pub fn from_env() -> Result<Self, InstallError> {
        let project = std::env::current_dir()
            .map_err(|e| InstallError::Environment(format!("the current directory: {e}")))?;
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| InstallError::Environment("HOME is not set".into()))?;
        let codex_home = std::env::var_os("CODEX_HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        Ok(Self {
            project,
            home,
            codex_home,
        })
    }
}

/// A run's request.
#[derive(Clone, Debug)]
pub struct Request {
    /// The host.
    pub host: Host,
    /// Install or uninstall.
    pub action: Action,
    /// Project or user.
    pub scope: Scope,
    /// The hookloop binary the host is to run (an absolute path, normally this one).
    pub hookloop: String,
}

/// One file's change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The file named in the host's configuration.
    pub path: PathBuf,
    /// The file written, when `path` is a link (its target).
    pub target: PathBuf,
    /// Its text before (`None`: there was no file).
    pub before: Option<String>,
    /// Its text after (`None`: the file is removed).
    pub after: Option<String>,
}

impl Change {
    /// Whether the file changes.
    pub fn changes(&self) -> bool {
        self.before != self.after
    }

    /// The change as lines removed and added (`-`, `+`), with three lines of context, in the
    /// manner of a unified diff.
    pub fn diff(&self) -> String {
        let path = self.path.display();
        let before = self.before.as_deref().unwrap_or("");
        let after = self.after.as_deref().unwrap_or("");
        let mut out = format!(
            "--- {}\n+++ {}\n",
            if self.before.is_some() {
                path.to_string()
            } else {
                "/dev/null".into()
            },
            if self.after.is_some() {
                path.to_string()
            } else {
                "/dev/null".into()
            },
        );
        out.push_str(&line_diff(before, after));
        out
    }
}

/// What a run did or, dry, would do.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Every file the run looked at, changed or not.
    pub changes: Vec<Change>,
    /// What the person should know: servers left out and why, links written through.
    pub notes: Vec<String>,
}

/// Why a run changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file could not be read, or not as its format.
    #[error("{path}: {why}; nothing was changed")]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The host's MCP configuration has no server the proxy can front.
    #[error(
        "{0} has no stdio MCP server to put behind the proxy: add the hook server there first; \
         nothing was changed"
    )]
    NoServers(PathBuf),
    /// The host's configuration cannot be written by this command.
    #[error("{0}")]
    Unsupported(String),
    /// The environment does not say where the files are.
    #[error("{0}")]
    Environment(String),
    /// Writing failed.
    #[error("{path}: {error}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// The two formats of the hosts' files this command writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Toml,
}

/// A file as read: where, its text, and its parsed document.
struct Loaded {
    path: PathBuf,
    target: PathBuf,
    before: Option<String>,
    mode: Option<u32>,
    doc: Doc,
}

enum Doc {
    Json(Json),
    Toml(DocumentMut),
}

impl fmt::Debug for Doc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(_) => f.write_str("Json"),
            Self::Toml(_) => f.write_str("Toml"),
        }
    }
}

/// The files of `host` in `scope`: the MCP servers' file, then the hooks' file (the same file
/// for hosts that keep both in one).
fn files(
    host: Host,
    scope: Scope,
    places: &Places,
) -> Result<Vec<(PathBuf, Format)>, InstallError> {
    let base = match scope {
        Scope::Project => &places.project,
        Scope::User => &places.home,
    };
    Ok(match host {
        Host::ClaudeCode => {
            let (mcp, settings) = match scope {
                Scope::Project => (claude_code::PROJECT_MCP, claude_code::PROJECT_SETTINGS),
                Scope::User => (claude_code::USER_MCP, claude_code::USER_SETTINGS),
            };
            vec![
                (base.join(mcp), Format::Json),
                (base.join(settings), Format::Json),
            ]
        }
        Host::Codex => {
            let path = match scope {
                Scope::Project => places.project.join(codex::PROJECT_CONFIG),
                Scope::User => places
                    .codex_home
                    .clone()
                    .unwrap_or_else(|| places.home.join(".codex"))
                    .join(codex::USER_CONFIG),
            };
            vec![(path, Format::Toml)]
        }
        Host::Gemini => vec![(base.join(".gemini/settings.json"), Format::Json)],
        Host::Cursor => vec![
            (base.join(".cursor/mcp.json"), Format::Json),
            (base.join(".cursor/hooks.json"), Format::Json),
        ],
        Host::Goose => {
            return Err(InstallError::Unsupported(
                "goose keeps its extensions in config.yaml, which `hookloop hooks` does not \
                 write: put the proxy in front of the extension and the hook command in a \
                 plugin's hooks/hooks.json by hand (the README's goose section shows both)"
                    .into(),
            ));
        }
    })
}

/// The events `host` registers the hook command at, each with its matcher.
pub fn events(host: Host) -> Vec<edit::Event> {
    let table = |events: &[(&'static str, Option<&'static str>, &'static str)]| {
        events.iter().map(|&(e, m, _)| (e, m)).collect()
    };
    match host {
        Host::ClaudeCode => table(&claude_code::EVENTS),
        Host::Codex => table(&codex::EVENTS),
        Host::Gemini => vec![
            ("SessionStart", None),
            ("BeforeAgent", None),
            ("BeforeTool", Some("*")),
            ("AfterTool", Some("*")),
            ("AfterAgent", None),
            ("SessionEnd", None),
        ],
        Host::Cursor => vec![
            ("sessionStart", None),
            ("beforeShellExecution", None),
            ("beforeMCPExecution", None),
            ("postToolUse", None),
            ("stop", None),
            ("sessionEnd", None),
        ],
        Host::Goose => vec![
            ("PreToolUse", Some("*")),
            ("PostToolUse", Some("*")),
            ("Stop", None),
            ("SessionEnd", None),
        ],
    }
}

/// Computes the run's changes without writing anything: `hookloop hooks … --dry-run`.
pub fn plan(request: &Request, places: &Places) -> Result<Outcome, InstallError> {
    let files = files(request.host, request.scope, places)?;
    let mut notes = Vec::new();
    let loaded = files
        .iter()
        .map(|(path, format)| load(path, *format, &mut notes))
        .collect::<Result<Vec<_>, _>>()?;
    let mut outcome = change(request, loaded)?;
    notes.append(&mut outcome.notes);
    outcome.notes = notes;
    Ok(outcome)
}

/// Makes the run's changes: each file under its lock, written whole or not at all.
pub fn apply(request: &Request, places: &Places) -> Result<Outcome, InstallError> {
    let files = files(request.host, request.scope, places)?;
    let mut locks = Vec::new();
    let mut keys: Vec<(String, &Path)> = files
        .iter()
        .map(|(path, _)| (lock_key(path), path.as_path()))
        .collect();
    // Always in one order, so two runs over the same files never wait on each other in a ring.
    keys.sort();
    keys.dedup_by(|a, b| a.0 == b.0);
    for (key, path) in &keys {
        let lock = super::proxy::runtime_dir()
            .join("install")
            .join(format!("{key}.lock"));
        match crate::private::lock_exclusive(&lock, LOCK_WAIT) {
            Ok(Some(lock)) => locks.push(lock),
            Ok(None) => {
                return Err(InstallError::Refused {
                    path: path.to_path_buf(),
                    why: format!(
                        "another `hookloop hooks` run held it for over {} s",
                        LOCK_WAIT.as_secs()
                    ),
                });
            }
            Err(error) => return Err(InstallError::Write { path: lock, error }),
        }
    }
    'attempt: for _ in 0..ATTEMPTS {
        let mut notes = Vec::new();
        let loaded = files
            .iter()
            .map(|(path, format)| load(path, *format, &mut notes))
            .collect::<Result<Vec<_>, _>>()?;
        let modes: Vec<Option<u32>> = loaded.iter().map(|l| l.mode).collect();
        let mut outcome = change(request, loaded)?;
        for (change, mode) in outcome.changes.iter().zip(modes) {
            if !change.changes() {
                continue;
            }
            // Someone else (the host itself, say) wrote the file since it was read: read again.
            let now = read_text(&change.target).ok().flatten();
            if now != change.before {
                continue 'attempt;
            }
            write(change, mode, request.scope).map_err(|error| InstallError::Write {
                path: change.target.clone(),
                error,
            })?;
        }
        notes.append(&mut outcome.notes);
        outcome.notes = notes;
        return Ok(outcome);
    }
    Err(InstallError::Refused {
        path: files[0].0.clone(),
        why: format!("changed under this run {ATTEMPTS} times in a row"),
    })
}

fn lock_key(path: &Path) -> String {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    super::state::session_key(&real.display().to_string())
}

/// The run's change to the files as read: `loaded[0]` holds the servers, the last the hooks.
fn change(request: &Request, mut loaded: Vec<Loaded>) -> Result<Outcome, InstallError> {
    let host = request.host;
    let mut notes = Vec::new();
    let refused = |l: &Loaded, e: edit::ShapeError| InstallError::Refused {
        path: l.path.clone(),
        why: format!("{e} expected"),
    };
    let nested = host != Host::Cursor;
    match request.action {
        Action::Install => {
            let first = &mut loaded[0];
            let servers = match &mut first.doc {
                Doc::Json(doc) => {
                    edit::wrap_json_servers(doc, "mcpServers", "command", &request.hookloop)
                }
                Doc::Toml(doc) => edit::wrap_toml_servers(doc, &request.hookloop),
            };
            let servers = servers.map_err(|e| refused(first, e))?;
            for skipped in &servers.skipped {
                notes.push(format!(
                    "{}: left as it is, {skipped}",
                    first.path.display()
                ));
            }
            if servers.proxied.is_empty() {
                return Err(InstallError::NoServers(first.path.clone()));
            }
            let command = edit::hook_command(&request.hookloop, host, &servers.proxied);
            let events = events(host);
            let last = loaded.last_mut().expect("every host has a file");
            let added = match &mut last.doc {
                Doc::Json(doc) => edit::add_json_hooks(doc, host, &events, &command, nested),
                Doc::Toml(doc) => edit::add_toml_hooks(doc, host, &events, &command),
            };
            added.map_err(|e| refused(last, e))?;
        }
        Action::Uninstall => {
            let count = loaded.len();
            for (n, file) in loaded.iter_mut().enumerate() {
                let servers_file = n == 0;
                let hooks_file = n + 1 == count;
                let done = match &mut file.doc {
                    Doc::Json(doc) => {
                        let mut done = Ok(());
                        if servers_file {
                            done =
                                edit::unwrap_json_servers(doc, "mcpServers", "command").map(drop);
                        }
                        if hooks_file && done.is_ok() {
                            done = edit::remove_json_hooks(doc, host, nested);
                        }
                        done
                    }
                    Doc::Toml(doc) => {
                        edit::unwrap_toml_servers(doc);
                        edit::remove_toml_hooks(doc, host);
                        Ok(())
                    }
                };
                done.map_err(|e| refused(file, e))?;
            }
        }
    }
    let changes = loaded
        .into_iter()
        .map(|file| {
            let after = render(&file.doc, file.before.as_deref(), request.action);
            Change {
                path: file.path,
                target: file.target,
                before: file.before,
                after,
            }
        })
        .collect();
    Ok(Outcome { changes, notes })
}

/// The file's text after the change: the text read, untouched, when the document did not
/// change; `None` (remove the file) when an uninstall left it empty.
fn render(doc: &Doc, before: Option<&str>, action: Action) -> Option<String> {
    let (text, empty) = match doc {
        Doc::Json(json) => {
            if let Some(before) = before
                && Json::parse(before).ok().as_ref() == Some(json)
            {
                return Some(before.to_owned());
            }
            (json.pretty(), json.as_obj().is_some_and(Vec::is_empty))
        }
        Doc::Toml(toml) => {
            let text = toml.to_string();
            let empty = toml.as_table().is_empty() && text.trim().is_empty();
            (text, empty)
        }
    };
    if before.is_none() && empty {
        return None;
    }
    if empty && action == Action::Uninstall {
        return None;
    }
    Some(text)
}

/// Reads the file at `path` (through a link, noted) and parses it; a missing file is an empty
/// document.
fn load(path: &Path, format: Format, notes: &mut Vec<String>) -> Result<Loaded, InstallError> {
    use std::os::unix::fs::PermissionsExt;
    let refused = |why: String| InstallError::Refused {
        path: path.to_path_buf(),
        why,
    };
    let mut target = path.to_path_buf();
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            target = std::fs::canonicalize(path).map_err(|e| {
                refused(format!(
                    "a symbolic link whose target cannot be reached ({e})"
                ))
            })?;
            notes.push(format!(
                "{} is a symbolic link: its target {} is the file changed",
                path.display(),
                target.display()
            ));
        }
        _ => {}
    }
    let meta = match std::fs::metadata(&target) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(refused(format!("cannot be read ({e})"))),
    };
    if let Some(meta) = &meta {
        if !meta.is_file() {
            return Err(refused("not a regular file".into()));
        }
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(refused(format!(
                "{} bytes, longer than the {MAX_CONFIG_BYTES} read",
                meta.len()
            )));
        }
    }
    let before = read_text(&target).map_err(refused)?;
    let text = before.as_deref().unwrap_or("");
    let doc = match format {
        Format::Json if text.trim().is_empty() => Doc::Json(Json::Obj(Vec::new())),
        Format::Json => {
            let json = Json::parse(text).map_err(|e| refused(format!("not JSON ({e})")))?;
            if json.as_obj().is_none() {
                return Err(refused("not a JSON object".into()));
            }
            Doc::Json(json)
        }
        Format::Toml => Doc::Toml(
            text.parse::<DocumentMut>()
                .map_err(|e| refused(format!("not TOML ({})", e.to_string().trim())))?,
        ),
    };
    Ok(Loaded {
        path: path.to_path_buf(),
        target,
        before,
        mode: meta.map(|m| m.permissions().mode() & 0o7777),
        doc,
    })
}

/// The file's text, `None` when there is no file; an error for a file that is not UTF-8 or
/// longer than [`MAX_CONFIG_BYTES`].
fn read_text(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot be read ({e})")),
    };
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read ({e})"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("longer than the {MAX_CONFIG_BYTES} bytes read"));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "not UTF-8 text".to_owned())
}

/// Writes the change to a new file beside the target and renames it over the target, so a
/// reader sees the old file or the new one; or removes the target.
fn write(change: &Change, mode: Option<u32>, scope: Scope) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let Some(text) = &change.after else {
        return std::fs::remove_file(&change.target);
    };
    let dir = change
        .target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = change
        .target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.hookloop-{}-{:08x}.tmp",
        std::process::id(),
        fastrand::u32(..)
    ));
    // A user's file may hold credentials (servers' `env`): private unless it was not before.
    let mode = mode.unwrap_or(match scope {
        Scope::Project => 0o644,
        Scope::User => 0o600,
    });
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &change.target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The lines of `before` and `after` that differ, `-` and `+`, with three lines of context
/// around each run of changes (a longest common subsequence of the changed middle; when that
/// middle is too long to compare line by line, all of it removed and added).
fn line_diff(before: &str, after: &str) -> String {
    const CONTEXT: usize = 3;
    const MAX_CELLS: usize = 4_000_000;
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    // (tag, line): ' ' kept, '-' removed, '+' added.
    let mut ops: Vec<(char, &str)> = a[..prefix].iter().map(|l| (' ', *l)).collect();
    if am.len().saturating_mul(bm.len()) <= MAX_CELLS {
        let (n, m) = (am.len(), bm.len());
        let mut lcs = vec![0u32; (n + 1) * (m + 1)];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * (m + 1) + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * (m + 1) + j + 1] + 1
                } else {
                    lcs[(i + 1) * (m + 1) + j].max(lcs[i * (m + 1) + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                ops.push((' ', am[i]));
                i += 1;
                j += 1;
            } else if i < n && (j == m || lcs[(i + 1) * (m + 1) + j] >= lcs[i * (m + 1) + j + 1]) {
                ops.push(('-', am[i]));
                i += 1;
            } else {
                ops.push(('+', bm[j]));
                j += 1;
            }
        }
    } else {
        ops.extend(am.iter().map(|l| ('-', *l)));
        ops.extend(bm.iter().map(|l| ('+', *l)));
    }
    ops.extend(a[a.len() - suffix..].iter().map(|l| (' ', *l)));
    let near = |at: usize| {
        let lo = at.saturating_sub(CONTEXT);
        let hi = (at + CONTEXT + 1).min(ops.len());
        ops[lo..hi].iter().any(|(tag, _)| *tag != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (at, (tag, line)) in ops.iter().enumerate() {
        if *tag == ' ' && !near(at) {
            skipped = true;
            continue;
        }
        if skipped {
            out.push_str("@@\n");
            skipped = false;
        }
        out.push(*tag);
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_shows_the_changed_lines_and_their_context() {
        let before = "a\nb\nc\nd\ne\nf\ng\nh\ni\n";
        let after = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\n";
        assert_eq!(
            line_diff(before, after),
            "@@\n b\n c\n d\n-e\n+E\n f\n g\n h\n i\n+j\n"
        );
        assert_eq!(line_diff("x\n", "x\n"), "");
    }
}
