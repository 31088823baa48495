//! `hookloop hook <host>`: the command a host runs at its hook events. It reads the host's
//! event on stdin, asks the `_` hook that event stands for of every server a proxy
//! ([`super::proxy`]) serves for this host, combines the answers as the engine does, and
//! answers in the host's own format and exit status ([`super::hosts`]).
//!
//! The rules are the engine's, kept across invocations in the session's state
//! ([`super::state`]): hooks are asked only of the servers `MCP_HOOK_SERVERS` allows, in its
//! order (`*`: every proxy of the host, by name); each call waits at most
//! `SPROUT_AGENT_HOOK_TIMEOUT_MS` (a timeout has nothing to say); `_Stop` objections are
//! budgeted (`SPROUT_AGENT_STOP_MAX_REJECTIONS` per host session); an end of turn right after
//! an objection ends the turn (the state's latch, which an objection sets and any other event
//! of the session clears, a tool call or a prompt; the host's `stop_hook_active` can only rule
//! a stop out); every answer reaches the model
//! JSON-encoded ([`hooks::encode_hook_body`]), one line per speaking server.
//!
//! The command fails open: whatever goes wrong (no proxy, a stale socket, a server that never
//! answers, a corrupt state file, an event it cannot read) it answers as "no objection", with a
//! line on stderr saying why, and it never holds the host longer than [`Settings::deadline`].

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::hosts::{Host, HostEvent, Point, Reply, Verdict};
use super::state::{LOCK_WAIT, SessionState, StateFile};
use crate::config::{ConfigError, vars};
use crate::hooks::{self, Hook, HookServers, ServerName};
use crate::machine::Policy;
use crate::machine::bridge as bridge_rules;

/// The largest event read from stdin; a larger one is not read and fails open.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// How long the host may take to write the event and close stdin.
pub const EVENT_WAIT: Duration = Duration::from_secs(2);
/// Beyond a hook's timeout, how long the proxy may take to say it timed out (its own clock
/// runs the timeout; this is for a proxy that is itself stuck).
pub const ANSWER_GRACE: Duration = Duration::from_millis(500);
/// The longest answer line read from a proxy.
pub const MAX_ANSWER_BYTES: u64 = 4 * 1024 * 1024;
/// Servers asked per event, at most (in `MCP_HOOK_SERVERS` order, or by name for `*`).
pub const MAX_SERVERS: usize = 32;
/// Ancestors walked looking for the host, at most.
pub const MAX_ANCESTORS: usize = 64;
/// What the whole command may take beyond reading the event and one hook timeout: two state
/// updates, each waiting at most [`LOCK_WAIT`], and the answer grace.
const SLACK: Duration = Duration::from_millis(2 * LOCK_WAIT.as_millis() as u64 + 1000);

/// The spec's three variables, as the hook command reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `MCP_HOOK_SERVERS`.
    pub servers: HookServers,
    /// `SPROUT_AGENT_HOOK_TIMEOUT_MS`.
    pub timeout: Duration,
    /// `SPROUT_AGENT_STOP_MAX_REJECTIONS`.
    pub stop_max_rejections: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            servers: HookServers::Off,
            timeout: Duration::from_millis(Policy::DEFAULT_HOOK_TIMEOUT_MS),
            stop_max_rejections: Policy::DEFAULT_STOP_MAX_REJECTIONS,
        }
    }
}

impl Settings {
    /// Reads the three variables through `lookup`, as [`Config::from_lookup`](crate::Config)
    /// reads them (the same defaults, the same errors).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Result<Option<String>, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let raw = lookup(vars::HOOK_SERVERS)?;
        let servers = HookServers::parse(raw.as_deref()).map_err(|e| ConfigError::Invalid {
            var: vars::HOOK_SERVERS,
            value: raw.clone().unwrap_or_default(),
            reason: e.to_string(),
        })?;
        let mut settings = Self {
            servers,
            ..Self::default()
        };
        if let Some(ms) = crate::config::parse_number::<u64>(&lookup, vars::HOOK_TIMEOUT_MS, 1)? {
            settings.timeout = Duration::from_millis(ms);
        }
        if let Some(n) = crate::config::parse_number::<u32>(&lookup, vars::STOP_MAX_REJECTIONS, 0)?
        {
            settings.stop_max_rejections = n;
        }
        Ok(settings)
    }

    /// The longest the command runs, event read included; past it, it answers "no objection"
    /// and exits, whatever it was waiting for.
    pub fn deadline(&self) -> Duration {
        EVENT_WAIT + self.timeout.min(super::proxy::MAX_HOOK_TIMEOUT) + SLACK
    }
}

/// Runs the command for the host named `host` on this process's stdin, stdout and stderr, and
/// returns the exit status to end with. Never waits past [`Settings::deadline`].
pub fn main(host: &str) -> i32 {
    let Some(host) = Host::from_name(host) else {
        let known: Vec<&str> = Host::ALL.iter().map(|h| h.name()).collect();
        warn(&format!(
            "`{host}` is not a host this command speaks ({}); nothing asked",
            known.join(", ")
        ));
        // Not 2: that status blocks in some hosts.
        return 1;
    };
    let (settings, bad_settings) = match Settings::from_lookup(crate::config::env_lookup) {
        Ok(settings) => (settings, None),
        Err(e) => (Settings::default(), Some(e)),
    };
    let out = Arc::new(Output::default());
    {
        let out = Arc::clone(&out);
        let deadline = settings.deadline();
        std::thread::spawn(move || {
            std::thread::sleep(deadline);
            let code = out.finish_fallback(&format!(
                "no answer within {} ms: no objection",
                deadline.as_millis()
            ));
            std::process::exit(code);
        });
    }
    if let Some(e) = bad_settings {
        warn(&format!("{e}: hooks are off for this event"));
    }
    let reply = run(host, &settings, std::io::stdin(), &out);
    out.finish(&reply)
}

/// The one answer the command writes, whether the run or the deadline gets there first.
#[derive(Default)]
struct Output {
    /// The answer "no objection" to the event read so far (`None`: no event yet); `Some` in
    /// `done` once an answer is written.
    state: Mutex<(Option<Reply>, bool)>,
}

impl Output {
    fn set_fallback(&self, reply: Reply) {
        self.lock().0 = Some(reply);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<Reply>, bool)> {
        // Held only to swap a value and write the answer, which do not panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `reply` unless an answer was written; returns the exit status to end with.
    fn finish(&self, reply: &Reply) -> i32 {
        let mut state = self.lock();
        if !state.1 {
            state.1 = true;
            write_reply(reply);
        }
        reply.exit_code
    }

    fn finish_fallback(&self, why: &str) -> i32 {
        let mut state = self.lock();
        if state.1 {
            // The run answered and is exiting.
            return 0;
        }
        state.1 = true;
        warn(why);
        let reply = state.0.clone().unwrap_or_else(|| Reply::ok(""));
        write_reply(&reply);
        reply.exit_code
    }
}

fn write_reply(reply: &Reply) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(reply.stdout.as_bytes());
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(reply.stderr.as_bytes());
    let _ = stderr.flush();
}

/// One line on stderr. Every host shows a hook's stderr to the user (or its log), never to the
/// model, when the exit status is 0.
fn warn(line: &str) {
    let _ = writeln!(std::io::stderr(), "hookloop hook: {line}");
}

fn run(host: Host, settings: &Settings, stdin: impl Read + Send + 'static, out: &Output) -> Reply {
    let quiet = Reply::ok("");
    let bytes = match read_event(stdin) {
        Ok(bytes) => bytes,
        Err(why) => {
            warn(&format!("{why}: no objection"));
            return quiet;
        }
    };
    let event = match host.read_event(&bytes) {
        Ok(event) => event,
        Err(e) => {
            warn(&format!("{host}: {e}: no objection"));
            return quiet;
        }
    };
    let quiet = event.answer(&Verdict::Quiet);
    out.set_fallback(quiet.clone());
    let point = event.point();
    if settings.servers == HookServers::Off {
        return quiet;
    }
    let runtime = super::proxy::runtime_dir();
    let host_dir = match find_host_dir(&runtime) {
        Ok(Some(dir)) => dir,
        Ok(None) => {
            if let Some(hook) = point.hook() {
                warn(&format!(
                    "no `hookloop mcp proxy` runs under this {host} (no directory of an \
                     ancestor process in {}): {hook} asked of nobody, no objection",
                    runtime.display()
                ));
            }
            return quiet;
        }
        Err(why) => {
            warn(&format!("{why}: no objection"));
            return quiet;
        }
    };
    let Some(hook) = point.hook() else {
        // Not a hook point, but an event of the session all the same: the model acted (a
        // tool ran, say, where the host only lets it be observed), so the latch lets go.
        if !matches!(point, Point::SessionEnd) {
            let state = StateFile::new(&host_dir, event.session_id());
            if let Err(e) = state.update(&mut |line| warn(&line), |s| s.objected = false) {
                warn(&format!(
                    "{e}: the session's state is not kept for this event"
                ));
            }
        }
        return quiet;
    };
    let verdict = decide(&event, &point, hook, settings, &host_dir);
    let reply = event.answer(&verdict);
    if verdict != Verdict::Quiet && reply == quiet {
        warn(&format!(
            "{host} takes no answer at `{}`: {hook}'s text is dropped",
            event.name()
        ));
    }
    reply
}

/// Reads the event: at most [`MAX_EVENT_BYTES`], within [`EVENT_WAIT`].
fn read_event(stdin: impl Read + Send + 'static) -> Result<Vec<u8>, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let read = stdin
            .take(MAX_EVENT_BYTES as u64 + 1)
            .read_to_end(&mut bytes);
        let _ = tx.send(read.map(|_| bytes));
    });
    match rx.recv_timeout(EVENT_WAIT) {
        Ok(Ok(bytes)) if bytes.len() > MAX_EVENT_BYTES => Err(format!(
            "the event on stdin is longer than {MAX_EVENT_BYTES} bytes"
        )),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(format!("cannot read the event on stdin: {e}")),
        Err(_) => Err(format!(
            "the event on stdin did not end within {} ms",
            EVENT_WAIT.as_millis()
        )),
    }
}

/// The directory of the nearest ancestor that has one in `runtime`: the host that started the
/// proxies. A directory that is not this user's alone is refused, never used.
pub fn find_host_dir(runtime: &Path) -> Result<Option<PathBuf>, String> {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..MAX_ANCESTORS {
        if pid <= 1 {
            return Ok(None);
        }
        let dir = runtime.join(pid.to_string());
        if let Ok(meta) = std::fs::symlink_metadata(&dir) {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            // SAFETY: getuid cannot fail.
            let uid = unsafe { libc::getuid() };
            if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
                return Err(format!(
                    "{} is not a private directory of this user (mode 0700)",
                    dir.display()
                ));
            }
            return Ok(Some(dir));
        }
        match parent_of(pid) {
            Some(parent) => pid = parent,
            None => return Ok(None),
        }
    }
    Ok(None)
}

/// A process's parent, from `/proc/<pid>/stat` (the field after the command name, which may
/// itself hold spaces and parentheses: it ends at the last `)`).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The servers to ask and their sockets, in `MCP_HOOK_SERVERS` order (`*`: by name), at most
/// [`MAX_SERVERS`]; a server without a socket is not running under this host.
fn servers(host_dir: &Path, allowed: &HookServers) -> Vec<(ServerName, PathBuf)> {
    let socket = |name: &ServerName| host_dir.join(format!("{name}.sock"));
    match allowed {
        HookServers::Off => Vec::new(),
        HookServers::Named(names) => names
            .iter()
            .filter(|name| socket(name).exists())
            .take(MAX_SERVERS)
            .map(|name| (name.clone(), socket(name)))
            .collect(),
        HookServers::All => {
            let Ok(entries) = std::fs::read_dir(host_dir) else {
                return Vec::new();
            };
            let mut names: Vec<ServerName> = entries
                .filter_map(Result::ok)
                .filter_map(|entry| {
                    let name = entry.file_name().into_string().ok()?;
                    ServerName::new(name.strip_suffix(".sock")?).ok()
                })
                .collect();
            names.sort();
            names.truncate(MAX_SERVERS);
            names
                .into_iter()
                .map(|name| {
                    let path = socket(&name);
                    (name, path)
                })
                .collect()
        }
    }
}

/// What one server's hook call came to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Heard {
    /// It answered text (empty: nothing to say).
    Text(String),
    /// It answered an error result: fails open, but it did answer.
    ErrorResult(String),
    /// The call failed: fails open.
    Failed(String),
    /// No answer within the timeout: fails open, and counts toward the kill.
    TimedOut,
}

/// Asks `hook` of the server behind `socket`, waiting at most `timeout` (plus the grace).
fn ask(socket: &Path, hook: Hook, arguments: &Value, timeout: Duration) -> Heard {
    let mut stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(e) => {
            return Heard::Failed(format!(
                "cannot connect to {} ({e}): a stale socket of a proxy that is gone?",
                socket.display()
            ));
        }
    };
    let wait = timeout + ANSWER_GRACE;
    let _ = stream.set_read_timeout(Some(wait));
    let _ = stream.set_write_timeout(Some(wait));
    let request = json!({
        "hook": hook.tool_name(),
        "arguments": arguments,
        "timeout_ms": u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    });
    let mut line = request.to_string().into_bytes();
    line.push(b'\n');
    if let Err(e) = stream.write_all(&line) {
        return Heard::Failed(format!("cannot send the call: {e}"));
    }
    let mut answer = String::new();
    let read = BufReader::new((&stream).take(MAX_ANSWER_BYTES)).read_line(&mut answer);
    match read {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Heard::TimedOut
        }
        Err(e) => Heard::Failed(format!("cannot read the answer: {e}")),
        Ok(0) => Heard::Failed("the proxy closed without an answer".into()),
        Ok(_) => match serde_json::from_str::<Value>(&answer) {
            Err(e) => Heard::Failed(format!("the proxy's answer is not JSON: {e}")),
            Ok(answer) => match (answer.get("text"), answer.get("error")) {
                (Some(Value::String(text)), _) if answer["isError"] == true => {
                    Heard::ErrorResult(text.clone())
                }
                (Some(Value::String(text)), _) => Heard::Text(text.clone()),
                (_, _) if answer["timedOut"] == true => Heard::TimedOut,
                (_, Some(Value::String(error))) => Heard::Failed(error.clone()),
                _ => Heard::Failed(format!("an answer the proxy does not give: {answer}")),
            },
        },
    }
}

/// What the end of a turn may do before anyone is asked: the machine's rule
/// ([`crate::machine::bridge::may_object`]) on the session's state.
fn may_object(state: &mut SessionState, point: &Point, max: u32) -> Result<(), &'static str> {
    let (continuing, objections) = match point {
        Point::EndOfTurn { continuing } => (*continuing, state.counters.objections),
        Point::SubagentEnded {
            agent, continuing, ..
        } => (
            *continuing,
            max.saturating_sub(state.subagent_budget_left(agent, max)),
        ),
        _ => return Ok(()),
    };
    let (decision, latched) = bridge_rules::may_object(bridge_rules::EndOfTurn {
        latched: state.objected,
        continuing,
        objections,
        max,
    });
    state.objected = latched;
    decision.map_err(bridge_rules::NotAsked::why)
}

/// Asks the servers and combines their answers into the verdict, under the session's rules.
fn decide(
    event: &HostEvent,
    point: &Point,
    hook: Hook,
    settings: &Settings,
    host_dir: &Path,
) -> Verdict {
    let state = StateFile::new(host_dir, event.session_id());
    let mut warn_line = |line: String| warn(&line);
    let stopping = matches!(point, Point::EndOfTurn { .. } | Point::SubagentEnded { .. });
    let max = settings.stop_max_rejections;
    let before = state.update(&mut warn_line, |s| {
        if stopping {
            may_object(s, point, max)
        } else {
            // Any other event of the session is the model (or the user) acting: the next end
            // of turn is not "right after" an objection any more.
            if !matches!(point, Point::SessionEnd) {
                s.objected = false;
            }
            Ok(())
        }
    });
    match before {
        Ok(Ok(())) => {}
        Ok(Err(why)) => {
            tracing::debug!(%hook, why, "not asked");
            return Verdict::Quiet;
        }
        Err(e) if stopping => {
            warn(&format!("{e}: {hook} not asked, no objection"));
            return Verdict::Quiet;
        }
        Err(e) => warn(&format!(
            "{e}: the session's state is not kept for this event"
        )),
    }
    let asked = servers(host_dir, &settings.servers);
    let arguments = point.arguments();
    let heard: Vec<(ServerName, Heard)> = std::thread::scope(|scope| {
        let calls: Vec<_> = asked
            .iter()
            .map(|(name, socket)| {
                let arguments = &arguments;
                let call = scope.spawn(move || ask(socket, hook, arguments, settings.timeout));
                (name.clone(), call)
            })
            .collect();
        calls
            .into_iter()
            .map(|(name, call)| {
                let heard = call
                    .join()
                    .unwrap_or_else(|_| Heard::Failed("the call panicked".into()));
                (name, heard)
            })
            .collect()
    });
    let mut said = Vec::new();
    for (server, heard) in &heard {
        match heard {
            Heard::Text(text) if !text.trim().is_empty() => {
                said.push((server.clone(), text.trim().to_owned()));
            }
            Heard::Text(_) => {}
            Heard::ErrorResult(text) => warn(&format!(
                "{server}: {hook} answered an error result ({text}): no objection"
            )),
            Heard::Failed(why) => warn(&format!("{server}: {hook} failed ({why}): no objection")),
            Heard::TimedOut => warn(&format!(
                "{server}: {hook} did not answer within {} ms: no objection",
                settings.timeout.as_millis()
            )),
        }
    }
    if matches!(point, Point::SessionEnd) {
        state.remove();
        return Verdict::Quiet;
    }
    let after = state.update(&mut warn_line, |s| {
        for (server, heard) in &heard {
            match heard {
                Heard::TimedOut => {
                    if s.counters.record_timeout(server) {
                        warn(&format!(
                            "{server}: a second hook timeout in a row (its proxy restarts a \
                             server that does this)"
                        ));
                    }
                }
                Heard::Text(_) | Heard::ErrorResult(_) => s.counters.record_answer(server),
                Heard::Failed(_) => {}
            }
        }
        if said.is_empty() {
            return true;
        }
        match point {
            Point::EndOfTurn { .. } if s.budget_left(max) > 0 => {
                s.counters.objections += 1;
                s.objected = true;
                true
            }
            Point::SubagentEnded { agent, .. } if s.subagent_budget_left(agent, max) > 0 => {
                s.record_subagent_objection(agent);
                s.objected = true;
                true
            }
            // Another invocation of this session spent the budget meanwhile.
            Point::EndOfTurn { .. } | Point::SubagentEnded { .. } => false,
            _ => true,
        }
    });
    let speaks = match after {
        Ok(speaks) => speaks,
        // Without the state an objection could not be counted against the budget.
        Err(e) if stopping => {
            warn(&format!("{e}: no objection"));
            false
        }
        Err(e) => {
            warn(&format!(
                "{e}: the session's state is not kept for this event"
            ));
            true
        }
    };
    if said.is_empty() || !speaks {
        return Verdict::Quiet;
    }
    let body: Vec<String> = said
        .iter()
        .map(|(server, text)| hooks::encode_hook_body(hook, server.as_str(), text))
        .collect();
    let body = body.join("\n");
    match hook {
        Hook::Stop | Hook::SubagentStop | Hook::PreToolUse => Verdict::Block(body),
        Hook::SessionStart
        | Hook::PostCompact
        | Hook::UserPromptSubmit
        | Hook::PostToolUse
        | Hook::SubagentStart => Verdict::Context(body),
        Hook::PreCompact | Hook::SessionEnd => Verdict::Quiet,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Result<Option<String>, ConfigError> {
        move |var| {
            Ok(pairs
                .iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| (*v).to_owned()))
        }
    }

    #[test]
    fn settings_default_to_the_spec_and_read_its_variables() {
        let defaults = Settings::from_lookup(lookup(&[])).unwrap();
        assert_eq!(defaults.servers, HookServers::Off);
        assert_eq!(defaults.timeout, Duration::from_millis(2500));
        assert_eq!(defaults.stop_max_rejections, 3);
        let set = Settings::from_lookup(lookup(&[
            ("MCP_HOOK_SERVERS", "todo"),
            ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "100"),
            ("SPROUT_AGENT_STOP_MAX_REJECTIONS", "0"),
        ]))
        .unwrap();
        assert!(set.servers.allows("todo"));
        assert_eq!(set.timeout, Duration::from_millis(100));
        assert_eq!(set.stop_max_rejections, 0);
        assert!(Settings::from_lookup(lookup(&[("SPROUT_AGENT_HOOK_TIMEOUT_MS", "0")])).is_err());
    }

    #[test]
    fn the_parent_of_this_process_is_read_from_proc() {
        assert_eq!(
            parent_of(std::process::id()),
            Some(std::os::unix::process::parent_id())
        );
        assert_eq!(parent_of(u32::MAX), None);
    }

    #[test]
    fn a_stop_after_an_objection_or_past_the_budget_asks_nobody() {
        let stop = |continuing| Point::EndOfTurn { continuing };
        let mut s = SessionState::default();
        assert!(may_object(&mut s, &stop(Some(false)), 3).is_ok());
        // The host's flag stays up over a continuation in which the model called tools: with
        // the latch cleared by those calls, the stop is no consecutive one.
        assert!(may_object(&mut s, &stop(Some(true)), 3).is_ok());
        s.objected = true;
        assert!(may_object(&mut s, &stop(Some(true)), 3).is_err());
        s.objected = true;
        assert!(may_object(&mut s, &stop(None), 3).is_err());
        assert!(!s.objected, "the latch lets one end go, then clears");
        assert!(may_object(&mut s, &stop(None), 3).is_ok());
        s.counters.objections = 3;
        assert!(may_object(&mut s, &stop(None), 3).is_err());
        assert!(may_object(&mut SessionState::default(), &stop(None), 0).is_err());
    }
}
