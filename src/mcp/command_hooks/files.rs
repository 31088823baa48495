//! Reading the hook configurations people have: the `hooks` object of Claude Code's
//! `settings.json`, Codex's `hooks.json` or the `[hooks]` table of its `config.toml`, and a
//! plugin's `hooks/hooks.json` (Claude Code, Codex or Open Plugins / goose).
//!
//! Nothing here runs a command. A file that cannot be read, or holds a hook hookloop cannot
//! run as its host would (a matcher Rust's `regex` reads otherwise, a hook without a command),
//! is an error naming the file and the hook; what hookloop does not run at all (an event it has
//! no point for, a hook of another type than `command`) is a warning at load.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::events;
use super::matcher::{Dialect, Matcher};
use crate::bridge::hosts::Host;
use crate::hooks::ServerName;

/// The largest configuration file read, in bytes; a larger one is refused.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// One source the operator named: `[NAME=]PATH`.
///
/// PATH is a Claude Code settings file (`.claude/settings.json`, `settings.local.json`, any
/// other JSON file), a Codex `hooks.json` or `config.toml`, or a plugin: its directory, or its
/// `hooks/hooks.json`. NAME is the source's server name (what `MCP_HOOK_SERVERS` names);
/// without it, `claude-code`, `codex`, or the plugin's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceSpec {
    name: Option<ServerName>,
    path: PathBuf,
}

impl SourceSpec {
    /// Reads `[NAME=]PATH`. The text before the first `=` is a name only when it is a valid
    /// server name; otherwise the whole text is the path.
    pub fn parse(text: &str) -> Result<Self, CommandHooksError> {
        let (name, path) = match text.split_once('=') {
            Some((name, path)) if ServerName::new(name).is_ok() => {
                (ServerName::new(name).ok(), path)
            }
            _ => (None, text),
        };
        if path.is_empty() {
            return Err(CommandHooksError::Spec(format!(
                "{text:?} names no file: write [NAME=]PATH"
            )));
        }
        Ok(Self {
            name,
            path: PathBuf::from(path),
        })
    }

    /// Reads a `:`-separated list of them (`HOOKLOOP_COMMAND_HOOKS`); empty entries are skipped.
    pub fn parse_list(text: &str) -> Result<Vec<Self>, CommandHooksError> {
        text.split(':')
            .filter(|entry| !entry.is_empty())
            .map(Self::parse)
            .collect()
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why command hooks could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandHooksError {
    /// A `[NAME=]PATH` that names nothing.
    #[error("{0}")]
    Spec(String),
    /// A file that cannot be read or does not hold hooks hookloop can run.
    #[error("{}: {reason}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where in the file.
        reason: String,
    },
    /// Two sources under one name that cannot be one, or a name an MCP server has.
    #[error("{0}")]
    Names(String),
}

/// The hook commands of one session, by source, in the order the sources were named.
#[derive(Clone, Debug, Default)]
pub struct CommandHooks {
    pub(crate) sources: Vec<Source>,
}

impl CommandHooks {
    /// Reads every source of `specs`, a relative path from `cwd`. Files of one name (Claude
    /// Code's user, project and local settings) make one source, as their host merges them.
    pub fn load(specs: &[SourceSpec], cwd: &Path) -> Result<Self, CommandHooksError> {
        let mut sources: Vec<Source> = Vec::new();
        for spec in specs {
            let path = cwd.join(&spec.path);
            let found = Found::at(&path)?;
            let name = match &spec.name {
                Some(name) => name.clone(),
                None => found.default_name()?,
            };
            let handlers = read_handlers(&found)?;
            match sources.iter_mut().find(|s| s.name == name) {
                Some(source) if source.host != found.host => {
                    return Err(CommandHooksError::Names(format!(
                        "{} ({}) and {} ({}) are both named {name}; give one another name \
                         with NAME=PATH",
                        source.files[0].display(),
                        source.host,
                        found.file.display(),
                        found.host
                    )));
                }
                Some(source) => {
                    source.files.push(found.file.clone());
                    source.handlers.extend(handlers);
                }
                None => sources.push(Source {
                    name,
                    host: found.host,
                    files: vec![found.file.clone()],
                    handlers,
                }),
            }
        }
        Ok(Self { sources })
    }

    /// The sources' names, as `MCP_HOOK_SERVERS` names them.
    pub fn names(&self) -> impl Iterator<Item = &ServerName> {
        self.sources.iter().map(|s| &s.name)
    }

    /// No source at all.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
}

/// The commands of one source.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    pub(crate) name: ServerName,
    pub(crate) host: Host,
    pub(crate) files: Vec<PathBuf>,
    pub(crate) handlers: Vec<Handler>,
}

/// One command hook.
#[derive(Clone, Debug)]
pub(crate) struct Handler {
    /// The host's event it runs at.
    pub(crate) event: String,
    pub(crate) matcher: Matcher,
    /// Shell text, run with `sh -c`.
    pub(crate) command: String,
    /// Its own timeout, when it sets one.
    pub(crate) timeout: Option<Duration>,
    /// What it gets on top of the children's environment: the plugin's root, its settings
    /// file's `env`.
    pub(crate) env: Arc<[(String, String)]>,
    /// Where it was configured: `file: hooks.Stop[0].hooks[1]`.
    pub(crate) origin: Arc<str>,
}

/// A source's file and what its path says about it.
struct Found {
    host: Host,
    file: PathBuf,
    /// The plugin it belongs to, if it is a plugin's.
    plugin: Option<PathBuf>,
}

impl Found {
    fn at(path: &Path) -> Result<Self, CommandHooksError> {
        let error = |reason: String| CommandHooksError::File {
            path: path.to_owned(),
            reason,
        };
        if path.is_dir() {
            let file = path.join("hooks").join("hooks.json");
            if !file.is_file() {
                return Err(error(
                    "a directory, but not a plugin: it has no hooks/hooks.json".into(),
                ));
            }
            return Ok(Self {
                host: plugin_host(path, &file)?,
                file,
                plugin: Some(path.to_owned()),
            });
        }
        if !path.is_file() {
            return Err(error("no such file".into()));
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let parent = path.parent();
        let in_hooks_dir =
            parent.and_then(Path::file_name).and_then(|n| n.to_str()) == Some("hooks");
        if name == "hooks.json" && in_hooks_dir {
            let root = parent.and_then(Path::parent).unwrap_or(Path::new("."));
            return Ok(Self {
                host: plugin_host(root, path)?,
                file: path.to_owned(),
                plugin: Some(root.to_owned()),
            });
        }
        let host = if name == "hooks.json" || name.ends_with(".toml") {
            Host::Codex
        } else {
            Host::ClaudeCode
        };
        Ok(Self {
            host,
            file: path.to_owned(),
            plugin: None,
        })
    }

    fn default_name(&self) -> Result<ServerName, CommandHooksError> {
        let Some(root) = &self.plugin else {
            // Both are valid server names.
            return ServerName::new(self.host.name())
                .map_err(|e| CommandHooksError::Spec(e.to_string()));
        };
        let name = manifest(root)
            .and_then(|m| m.get("name").and_then(Value::as_str).map(str::to_owned))
            .or_else(|| root.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .unwrap_or_default();
        ServerName::new(&name).map_err(|_| {
            CommandHooksError::Names(format!(
                "the plugin at {} is named {name:?}, which is not a server name ([A-Za-z0-9_-]); \
             name its source with NAME=PATH",
                root.display()
            ))
        })
    }
}

/// The manifests a plugin may have, with the host each says it was written for.
const MANIFESTS: [(&str, Host); 4] = [
    (".claude-plugin/plugin.json", Host::ClaudeCode),
    (".codex-plugin/plugin.json", Host::Codex),
    (".plugin/plugin.json", Host::Goose),
    ("plugin.json", Host::Goose),
];

fn manifest(root: &Path) -> Option<Map<String, Value>> {
    MANIFESTS.iter().find_map(|(path, _)| {
        let text = read_capped(&root.join(path)).ok()?;
        match serde_json::from_slice(&text).ok()? {
            Value::Object(map) => Some(map),
            _ => None,
        }
    })
}

/// Which host a plugin was written for: its manifest's place, else the variable its commands
/// use for its root.
fn plugin_host(root: &Path, file: &Path) -> Result<Host, CommandHooksError> {
    if let Some((_, host)) = MANIFESTS.iter().find(|(path, _)| root.join(path).is_file()) {
        return Ok(*host);
    }
    let text = read_capped(file).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    if text.contains("CLAUDE_PLUGIN_ROOT") {
        Ok(Host::ClaudeCode)
    } else if text.contains("PLUGIN_ROOT") {
        Ok(Host::Goose)
    } else {
        Err(CommandHooksError::File {
            path: root.to_owned(),
            reason: "cannot tell which host this plugin was written for: it has no \
                     .claude-plugin/plugin.json (Claude Code), .codex-plugin/plugin.json (Codex) \
                     or .plugin/plugin.json (Open Plugins, goose)"
                .into(),
        })
    }
}

fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(std::io::Error::other(format!(
            "over the limit of {MAX_CONFIG_BYTES} bytes"
        )));
    }
    Ok(bytes)
}

/// The handlers of one file.
fn read_handlers(found: &Found) -> Result<Vec<Handler>, CommandHooksError> {
    let path = &found.file;
    let error = |reason: String| CommandHooksError::File {
        path: path.clone(),
        reason,
    };
    let bytes = read_capped(path).map_err(|e| error(format!("cannot read it: {e}")))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| error("not UTF-8".into()))?;
    let document = if path.extension().is_some_and(|e| e == "toml") {
        super::toml::to_json(text).map_err(|e| error(format!("not TOML: {e}")))?
    } else {
        serde_json::from_str(text).map_err(|e| error(format!("not JSON: {e}")))?
    };
    let Value::Object(document) = document else {
        return Err(error("not a JSON object".into()));
    };
    if document.get("disableAllHooks") == Some(&Value::Bool(true)) {
        tracing::warn!(file = %path.display(), "disableAllHooks is set: none of its hooks run");
        return Ok(Vec::new());
    }
    let mut env: Vec<(String, String)> = Vec::new();
    if let Some(root) = &found.plugin {
        let root = root.canonicalize().unwrap_or_else(|_| root.clone());
        let root = root.to_string_lossy().into_owned();
        // Open Plugins' name and Claude Code's; Codex sets both for its plugins too.
        env.push(("PLUGIN_ROOT".into(), root.clone()));
        env.push(("CLAUDE_PLUGIN_ROOT".into(), root));
    }
    // Claude Code applies a settings file's `env` to its session, which its hooks inherit.
    if let Some(vars) = document.get("env") {
        let Value::Object(vars) = vars else {
            return Err(error("`env` is not an object".into()));
        };
        for (name, value) in vars {
            let Value::String(value) = value else {
                return Err(error(format!("`env.{name}` is not a string")));
            };
            env.push((name.clone(), value.clone()));
        }
    }
    let env: Arc<[(String, String)]> = env.into();
    let Some(hooks) = document.get("hooks") else {
        tracing::warn!(file = %path.display(), "no `hooks` in it: it adds no command hooks");
        return Ok(Vec::new());
    };
    let Value::Object(hooks) = hooks else {
        return Err(error("`hooks` is not an object".into()));
    };
    let mut handlers = Vec::new();
    let mut ignored: HashMap<&str, usize> = HashMap::new();
    for (event, groups) in hooks {
        let Value::Array(groups) = groups else {
            return Err(error(format!("`hooks.{event}` is not a list")));
        };
        if !events::runs_here(found.host, event) {
            *ignored.entry(event.as_str()).or_default() += groups.len();
            continue;
        }
        for (g, group) in groups.iter().enumerate() {
            let at = format!("hooks.{event}[{g}]");
            read_group(found.host, event, group, &at, &env, path, &mut handlers)
                .map_err(|reason| error(format!("{at}: {reason}")))?;
        }
    }
    for (event, groups) in ignored {
        tracing::warn!(
            file = %path.display(), event, groups,
            "{event} hooks never run here: hookloop has no such point"
        );
    }
    Ok(handlers)
}

fn read_group(
    host: Host,
    event: &str,
    group: &Value,
    at: &str,
    env: &Arc<[(String, String)]>,
    path: &Path,
    handlers: &mut Vec<Handler>,
) -> Result<(), String> {
    let Value::Object(group) = group else {
        return Err("not an object".into());
    };
    let matcher = match group.get("matcher") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.as_str()),
        Some(_) => return Err("`matcher` is not a string".into()),
    };
    // Where the event has no value to match, the hosts ignore the matcher.
    let matcher = if events::has_target(host, event) {
        Matcher::parse(matcher, dialect(host))
            .map_err(|e| format!("matcher {:?}: {e}", matcher.unwrap_or_default()))?
    } else {
        Matcher::All
    };
    let Some(Value::Array(hooks)) = group.get("hooks") else {
        return Err("has no `hooks` list".into());
    };
    for (h, hook) in hooks.iter().enumerate() {
        let origin = format!("{}: {at}.hooks[{h}]", path.display());
        let Value::Object(hook) = hook else {
            return Err(format!("hooks[{h}] is not an object"));
        };
        let kind = match hook.get("type") {
            // goose runs a hook without a type as a command.
            None => "command",
            Some(Value::String(kind)) => kind.as_str(),
            Some(_) => return Err(format!("hooks[{h}].type is not a string")),
        };
        if kind != "command" {
            tracing::warn!(hook = %origin, kind, "not run: only command hooks run here");
            continue;
        }
        let command = match hook.get("command") {
            Some(Value::String(command)) if !command.trim().is_empty() => command.clone(),
            _ => return Err(format!("hooks[{h}] has no command")),
        };
        let timeout = match hook.get("timeout") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_f64() {
                Some(secs) if secs > 0.0 && secs.is_finite() => {
                    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
                }
                _ => {
                    return Err(format!(
                        "hooks[{h}].timeout is not a number of seconds above 0"
                    ));
                }
            },
            Some(_) => return Err(format!("hooks[{h}].timeout is not a number of seconds")),
        };
        if hook.get("async") == Some(&Value::Bool(true)) {
            tracing::warn!(hook = %origin, "not run: async hooks are not supported here");
            continue;
        }
        match hook.get("on_failure") {
            None | Some(Value::Null) => {}
            Some(Value::String(v)) if v == "allow" => {}
            Some(Value::String(v)) if v == "block" => tracing::warn!(
                hook = %origin,
                "on_failure: block is not honoured: a hook that cannot decide is no objection here"
            ),
            Some(_) => {
                return Err(format!(
                    "hooks[{h}].on_failure is not \"allow\" or \"block\""
                ));
            }
        }
        handlers.push(Handler {
            event: event.to_owned(),
            matcher: matcher.clone(),
            command,
            timeout,
            env: Arc::clone(env),
            origin: origin.into(),
        });
    }
    Ok(())
}

fn dialect(host: Host) -> Dialect {
    match host {
        Host::Codex => Dialect::Codex,
        Host::Goose => Dialect::Goose,
        Host::ClaudeCode | Host::Gemini | Host::Cursor => Dialect::ClaudeCode,
    }
}

#[cfg(test)]
mod tests;
