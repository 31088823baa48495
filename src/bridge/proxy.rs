//! `hookloop mcp proxy [--name NAME] -- <command> <args…>`: the MCP server a host starts in place
//! of the real one. It relays the host's JSON-RPC lines to the real server and back, takes every
//! `_` tool out of each `tools/list` answer the host sees, refuses the host model's calls to
//! them, and serves hook calls on the same live connection through a private local socket.
//!
//! Where the socket is: `<runtime>/<host pid>/<NAME>.sock`, `<runtime>` being
//! `$XDG_RUNTIME_DIR/hookloop-bridge` (else `/tmp/hookloop-bridge-<uid>`), every directory mode
//! 0700 and the socket 0600. It is keyed by the host's pid, the proxy's parent, and not by the
//! host's session id: the MCP handshake carries no session id, so the proxy cannot know it,
//! while the host is an ancestor of both the proxy and its hook commands, which walk up their
//! own ancestors to find it.
//!
//! The socket speaks one JSON line each way per connection: `{"hook": "_Stop", "arguments": {},
//! "timeout_ms": 2500}` in, `{"text": "…", "isError": false}` or `{"error": "…"}` out. Only `_`
//! tools can be called through it; a peer of another user is refused; a request line is capped
//! at [`MAX_REQUEST_BYTES`] and must arrive within [`REQUEST_WAIT`]; at most
//! [`MAX_CONNECTIONS`] are served at once (the rest wait in the kernel's backlog).
//!
//! Each direction holds at most [`MAX_QUEUED_BYTES`] of lines not yet written: past it the proxy
//! reads no more from the side that sends, so a host that reads slowly, or a server that does
//! not read, is held back by its own pipe and costs the proxy nothing more.
//!
//! Hook calls wait for the host: until its `notifications/initialized`, or, from a host of a
//! stateless revision (2026-07-28 on, which makes no handshake), its first request naming its
//! protocol in `_meta`; the proxy's calls then carry the host's latest protocol fields, which
//! such a server demands on every request.
//!
//! The kill rule of the spec is the proxy's: it counts the timeouts of the hook calls it serves
//! (each call says its `timeout_ms`), and on the second in a row ([`Policy::KILL_AFTER_TIMEOUTS`])
//! it restarts its server. The host's MCP connection cannot be re-initialized from this side, so
//! restarting means: the old server's process group is killed; every request of the host the
//! old server had not answered is answered with an error saying the server was restarted (the
//! host sees a failed call, never a hang); after a backoff ([`restart_delay`]) the command is
//! started again and re-initialized with the host's own `initialize` params and
//! `notifications/initialized`; then relaying goes on, on the same host connection. What the old
//! server held in memory is gone, and a host that listed its tools keeps its listing (the new
//! server's are announced by nothing). Hook calls are refused, saying why, until the new server
//! has answered its `initialize`. A server that exits on its own is not restarted: the proxy
//! exits with its status. When the host closes the proxy's stdin, or ends it with `SIGTERM`,
//! `SIGINT` or `SIGHUP`, the server's stdin is closed and it has 2 s to exit before its whole
//! process group is killed.
//!
//! [`Policy::KILL_AFTER_TIMEOUTS`]: crate::machine::Policy::KILL_AFTER_TIMEOUTS

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::hooks;

/// The longest request line the socket takes.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// How long a connection may take to send its request line.
pub const REQUEST_WAIT: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// The longest line relayed either way between host and server.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;
/// The longest wait a hook call may ask for.
pub const MAX_HOOK_TIMEOUT: Duration = Duration::from_secs(60);
/// The host's `tools/list` requests waiting for the server's answer, at most.
pub const MAX_LISTINGS: usize = 1024;
/// The prefix of the JSON-RPC ids of the proxy's own requests to the server.
const OWN_ID: &str = "hookloop-proxy-";
/// The host's requests tracked while the server has not answered them, at most (past it, a
/// restart cannot answer the rest for the server).
pub const MAX_IN_FLIGHT: usize = 4096;
/// How long a restarted server may take to answer its `initialize`.
pub const INITIALIZE_WAIT: Duration = Duration::from_secs(10);
/// The bytes of lines relayed one way and not yet written, at most (a longer line is one at a
/// time). Past it the proxy reads no more from that side: a server flooding a host that reads
/// slowly, or a host writing to a server that does not read, is held back by its own pipe
/// rather than queued in the proxy.
pub const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;

/// The wait before the `n`th restart (from 1): none for the first, then 1 s doubling to 30 s, so
/// a server that hangs at once on every start does not take a core.
pub fn restart_delay(n: u32) -> Duration {
    match n {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 2).min(5)).min(Duration::from_secs(30)),
    }
}

/// What failed in the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The real server could not be started.
    #[error("cannot start `{command}`: {error}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        error: std::io::Error,
    },
    /// The socket's directory or the socket itself.
    #[error("the hook socket {path}: {error}")]
    Socket {
        /// Where.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Relaying failed.
    #[error("relaying: {0}")]
    Io(#[from] std::io::Error),
}

/// The directory that holds every host's sockets, for this user.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("hookloop-bridge"),
        // SAFETY: getuid cannot fail.
        _ => std::env::temp_dir().join(format!("hookloop-bridge-{}", unsafe { libc::getuid() })),
    }
}

/// The socket of the proxy named `name` started by the host of pid `host`.
pub fn socket_path(host: u32, name: &str) -> PathBuf {
    runtime_dir()
        .join(host.to_string())
        .join(format!("{name}.sock"))
}

/// Creates `dir` (mode 0700) and checks that it is a directory of this user that nobody else
/// can enter: a directory planted by another user is refused, never used.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    crate::private::create_dir(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a private directory of this user (mode 0700)",
            dir.display()
        )));
    }
    Ok(())
}

/// Runs the proxy: starts `command` with `args`, relays stdin and stdout to it, serves the hook
/// socket, and returns the server's exit status once either side closes.
pub async fn run(name: &str, command: &str, args: &[String]) -> Result<i32, ProxyError> {
    let (mut child, server_in, mut server_out) = spawn(command, args)?;
    let path = socket_path(std::os::unix::process::parent_id(), name);
    let listener = bind(&path)?;
    // Hosts that died without ending their sessions left state no one else will remove; the
    // runtime directory was just checked to be this user's own (`bind`).
    for gone in super::state::clean_dead_hosts(&runtime_dir()) {
        tracing::debug!(dir = %gone.display(), "removed the directory of a host that is gone");
    }
    // One writer of the host's stdout, so that lines from both directions never interleave.
    let (to_host, writer) = Lines::writer(tokio::io::stdout());
    let (restart_tx, mut restart_rx) = mpsc::unbounded_channel::<()>();
    let relay = Relay::new(server_in, to_host, restart_tx);
    let serving = tokio::spawn(serve(listener, relay.clone()));
    let mut up = tokio::spawn(host_to_server(tokio::io::stdin(), relay.clone()));
    let mut restarts = 0u32;
    let stop = stopped();
    tokio::pin!(stop);
    loop {
        let down = server_to_host(server_out, relay.clone());
        tokio::select! {
            _ = &mut up => break,
            () = &mut stop => {
                tracing::debug!(server = name, "told to stop: ending as when the host closes");
                break;
            }
            result = down => {
                result?;
                break;
            }
            Some(()) = restart_rx.recv() => {}
        }
        restarts += 1;
        tracing::warn!(
            server = name,
            restarts,
            "second hook timeout in a row: restarting the server"
        );
        let _ = child.start_kill();
        kill_group(&child);
        let _ = child.wait().await;
        relay
            .server_gone(
                "the server was restarted after a second hook timeout in a row; call again",
            )
            .await;
        tokio::time::sleep(restart_delay(restarts)).await;
        let (new_child, new_in, new_out) = spawn(command, args)?;
        child = new_child;
        server_out = new_out;
        relay.attach(new_in);
        // Re-initialized once the new server reads its lines: the answer comes through the
        // relay's reader, so it is awaited beside it, not before it.
        let relay = relay.clone();
        tokio::spawn(async move { relay.reinitialize().await });
    }
    up.abort();
    serving.abort();
    let _ = std::fs::remove_file(&path);
    // The host's directory goes with its last proxy, once no session state is left in it (a
    // session the host ended removed its own); `remove_dir` takes only empty directories, so a
    // second proxy's socket or a live session's state keeps it.
    if let Some(host_dir) = path.parent() {
        let _ = std::fs::remove_dir(host_dir.join("sessions"));
        let _ = std::fs::remove_dir(host_dir);
    }
    // The host closed: the server sees its stdin close and gets a moment to exit on its own.
    drop(relay);
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    let status = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
        Ok(Ok(status)) => status.code().unwrap_or(1),
        _ => {
            // With its whole group: a server started through a shell leaves nothing behind.
            kill_group(&child);
            let _ = child.start_kill();
            let _ = child.wait().await;
            1
        }
    };
    Ok(status)
}

/// Resolves when the proxy is told to stop (`SIGTERM`, `SIGINT` or `SIGHUP`, the way hosts end
/// the servers they started): it then ends as when the host closes its stdin, and a server that
/// does not exit within the grace is killed with its process group rather than left running.
/// Never resolves if the signals cannot be watched.
async fn stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = hup.recv() => {}
    }
}

/// Starts the server in a process group of its own, its stdio piped.
fn spawn(
    command: &str,
    args: &[String],
) -> Result<
    (
        tokio::process::Child,
        tokio::process::ChildStdin,
        tokio::process::ChildStdout,
    ),
    ProxyError,
> {
    let mut child = tokio::process::Command::new(command)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| ProxyError::Spawn {
            command: command.to_owned(),
            error,
        })?;
    let missing = || std::io::Error::other("the server's stdio was not piped");
    let server_in = child.stdin.take().ok_or_else(missing)?;
    let server_out = child.stdout.take().ok_or_else(missing)?;
    Ok((child, server_in, server_out))
}

/// Kills the server's whole process group: a server started through a shell leaves no child
/// behind holding its pipes.
fn kill_group(child: &tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        // SAFETY: a signal to the group the server leads (`process_group(0)` made it).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// Binds the socket at `path` in its private directory. A socket left by a dead proxy (nobody
/// answers on it) is replaced; one a live proxy holds is not.
fn bind(path: &Path) -> Result<UnixListener, ProxyError> {
    let fail = |error| ProxyError::Socket {
        path: path.to_owned(),
        error,
    };
    // Every directory of the runtime's, not only the socket's own: in a directory others can
    // write, the one below could be swapped for theirs.
    if let Some(dir) = path.parent() {
        if let Some(runtime) = dir.parent() {
            private_dir(runtime).map_err(fail)?;
        }
        private_dir(dir).map_err(fail)?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(fail(std::io::Error::other(
                "another live proxy of that name serves this host: give this one another --name",
            )));
        }
        std::fs::remove_file(path).map_err(fail)?;
    }
    let listener = UnixListener::bind(path).map_err(fail)?;
    use std::os::unix::fs::PermissionsExt;
    // The directory is 0700 already; the socket is narrowed too, before anyone is served.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    Ok(listener)
}

/// Lines on their way to one side, written by a task of their own (a line is never cut short
/// by a reader that stops), at most [`MAX_QUEUED_BYTES`] of them waiting.
#[derive(Clone)]
struct Lines {
    queue: mpsc::UnboundedSender<(Vec<u8>, OwnedSemaphorePermit)>,
    /// One permit per byte queued; closed once the writer has stopped.
    room: Arc<Semaphore>,
}

impl Lines {
    /// A task writing lines to `out` until a write fails or every sender is gone.
    fn writer<W>(mut out: W) -> (Self, tokio::task::JoinHandle<()>)
    where
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (queue, mut lines) = mpsc::unbounded_channel::<(Vec<u8>, OwnedSemaphorePermit)>();
        let room = Arc::new(Semaphore::new(MAX_QUEUED_BYTES));
        let closing = Arc::clone(&room);
        let task = tokio::spawn(async move {
            while let Some((line, _room)) = lines.recv().await {
                if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
                    break;
                }
            }
            // Whoever waits for room learns that nothing more is written.
            closing.close();
        });
        (Self { queue, room }, task)
    }

    /// Queues `line` once there is room for it; false once the writer has stopped.
    async fn send(&self, line: Vec<u8>) -> bool {
        match self.room_for(line.len()).await {
            Some(room) => self.push(line, room),
            None => false,
        }
    }

    /// Waits for room for a line of `len` bytes; `None` once the writer has stopped.
    async fn room_for(&self, len: usize) -> Option<OwnedSemaphorePermit> {
        let cost = u32::try_from(len.clamp(1, MAX_QUEUED_BYTES)).unwrap_or(u32::MAX);
        Arc::clone(&self.room).acquire_many_owned(cost).await.ok()
    }

    /// Queues `line` in the `room` waited for; false once the writer has stopped.
    fn push(&self, line: Vec<u8>, room: OwnedSemaphorePermit) -> bool {
        self.queue.send((line, room)).is_ok()
    }
}

/// What both directions of the relay share.
#[derive(Clone)]
struct Relay {
    /// The current server's writer; replaced at a restart.
    to_server: Arc<Mutex<Lines>>,
    to_host: Lines,
    state: Arc<Mutex<Shared>>,
    restart: mpsc::UnboundedSender<()>,
}

#[derive(Default)]
struct Shared {
    /// Ids (as JSON text) of the host's `tools/list` requests not answered yet.
    listing: HashSet<String>,
    /// The proxy's own calls waiting for their answers.
    waiting: HashMap<String, oneshot::Sender<Value>>,
    next_id: u64,
    /// How far the host has come: the proxy's own calls wait for it.
    handshake: Handshake,
    /// The params of the host's `initialize`, to initialize a restarted server with.
    init_params: Option<Value>,
    /// The id (as JSON text) of the host's `initialize`, whose answer is told the tool list
    /// may change.
    init_id: Option<String>,
    /// Ids (as JSON text, with the id as JSON) of the host's requests not answered yet.
    in_flight: HashMap<String, Value>,
    /// Hook calls in a row that timed out (the machine's rule says when that restarts it).
    timeouts: crate::machine::bridge::TimeoutRun,
    /// The server is being restarted: the host's requests are answered with an error until
    /// the new one is initialized.
    restarting: bool,
}

/// The host's side of the connection, as the proxy's own calls need it.
#[derive(Default)]
enum Handshake {
    /// Nothing yet: the server takes no calls. Leads to either state below.
    #[default]
    Pending,
    /// The host sent `notifications/initialized` (revisions up to 2025-11-25): calls go as they
    /// are.
    Initialized,
    /// The host speaks a stateless revision (2026-07-28 on, Claude Code 2.1.332 among them):
    /// there is no handshake, and every request carries its protocol fields in `_meta`, which
    /// such a server demands. The proxy's calls carry the host's latest ones.
    Stateless(serde_json::Map<String, Value>),
}

/// The prefix of the protocol's own `_meta` fields.
const PROTOCOL_META: &str = "io.modelcontextprotocol/";

/// The protocol fields of a request's `_meta` when it names its protocol version, the mark of
/// a stateless revision; `None` for a request of the handshake revisions.
fn stateless_meta(message: &Value) -> Option<serde_json::Map<String, Value>> {
    let meta = message.get("params")?.get("_meta")?.as_object()?;
    meta.get("io.modelcontextprotocol/protocolVersion")?;
    Some(
        meta.iter()
            .filter(|(key, _)| key.starts_with(PROTOCOL_META))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
    )
}

impl Relay {
    fn new(
        server_in: tokio::process::ChildStdin,
        to_host: Lines,
        restart: mpsc::UnboundedSender<()>,
    ) -> Self {
        Self {
            to_server: Arc::new(Mutex::new(Lines::writer(server_in).0)),
            to_host,
            state: Arc::new(Mutex::new(Shared::default())),
            restart,
        }
    }

    /// Relays to a restarted server from now on.
    fn attach(&self, server_in: tokio::process::ChildStdin) {
        *self.to_server.lock().unwrap_or_else(|e| e.into_inner()) = Lines::writer(server_in).0;
    }

    /// Queues `line` for the current server, once there is room; a server that is gone takes
    /// nothing.
    async fn to_server(&self, line: Vec<u8>) {
        let lines = self
            .to_server
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        lines.send(line).await;
    }

    /// The server is gone: every request of the host it had not answered gets `message` as
    /// an error, the proxy's own calls end, and hook calls wait for the next handshake.
    async fn server_gone(&self, message: &str) {
        let (in_flight, waiting) = {
            let mut shared = self.shared();
            // A host of a stateless revision makes no handshake: its protocol fields still go
            // on the proxy's calls. One that made a handshake has to be re-initialized.
            if matches!(shared.handshake, Handshake::Initialized) {
                shared.handshake = Handshake::Pending;
            }
            shared.restarting = true;
            shared.timeouts.answered();
            shared.listing.clear();
            (
                std::mem::take(&mut shared.in_flight),
                std::mem::take(&mut shared.waiting),
            )
        };
        drop(waiting);
        for id in in_flight.values() {
            let error = json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": -32603, "message": message},
            });
            let mut text = error.to_string().into_bytes();
            text.push(b'\n');
            self.to_host.send(text).await;
        }
    }

    /// Initializes a restarted server with the host's own `initialize` params.
    async fn reinitialize(&self) {
        if matches!(self.shared().handshake, Handshake::Stateless(_)) {
            // Nothing to initialize: each request carries its protocol fields.
            self.shared().restarting = false;
            return;
        }
        let Some(params) = self.shared().init_params.clone() else {
            tracing::warn!("the host never sent `initialize`: the restarted server waits for it");
            self.shared().restarting = false;
            return;
        };
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut shared = self.shared();
            shared.next_id += 1;
            let id = format!("{OWN_ID}{}", shared.next_id);
            shared.waiting.insert(id.clone(), tx);
            id
        };
        let initialize =
            json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": params});
        let answer = tokio::time::timeout(INITIALIZE_WAIT, async {
            self.send(&initialize).await;
            rx.await
        });
        match answer.await {
            Ok(Ok(answer)) if answer.get("result").is_some() => {
                self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                    .await;
                {
                    let mut shared = self.shared();
                    shared.handshake = Handshake::Initialized;
                    shared.restarting = false;
                }
                // The host lists again: whatever the new server offers, hooks taken out.
                let changed =
                    json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
                let mut line = changed.to_string().into_bytes();
                line.push(b'\n');
                self.to_host.send(line).await;
            }
            _ => {
                let mut shared = self.shared();
                shared.waiting.remove(&id);
                shared.restarting = false;
                tracing::warn!("the restarted server did not answer `initialize`");
            }
        }
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        // The lock is held for map updates only, which do not panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn send(&self, value: &Value) {
        let mut line = value.to_string().into_bytes();
        line.push(b'\n');
        self.to_server(line).await;
    }

    /// Calls the hook `tool` on the server and waits at most `timeout` for its answer.
    async fn call_hook(&self, tool: &str, arguments: Value, timeout: Duration) -> Value {
        let (tx, rx) = oneshot::channel();
        let mut params = json!({ "name": tool, "arguments": arguments });
        let id = {
            let mut shared = self.shared();
            if shared.restarting {
                return json!({ "error": "the server is being restarted" });
            }
            match &shared.handshake {
                Handshake::Pending => {
                    return json!({ "error": "the server is not initialized by its host yet" });
                }
                Handshake::Initialized => {}
                Handshake::Stateless(meta) => params["_meta"] = Value::Object(meta.clone()),
            }
            shared.next_id += 1;
            let id = format!("{OWN_ID}{}", shared.next_id);
            shared.waiting.insert(id.clone(), tx);
            id
        };
        let call = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": params,
        });
        // The wait for room to send counts against the timeout: a server that reads nothing
        // times the call out as one that answers nothing does.
        let answer = tokio::time::timeout(timeout, async {
            self.send(&call).await;
            rx.await
        })
        .await;
        let restart = {
            let mut shared = self.shared();
            shared.waiting.remove(&id);
            match &answer {
                Ok(Ok(_)) => {
                    shared.timeouts.answered();
                    false
                }
                Ok(Err(_)) => false,
                Err(_) => shared.timeouts.timed_out(),
            }
        };
        if restart {
            let _ = self.restart.send(());
        }
        match answer {
            Ok(Ok(response)) => hook_answer(&response),
            Ok(Err(_)) => json!({ "error": "the server closed" }),
            Err(_) if restart => json!({
                "error": "timeout: a second in a row, the proxy restarts the server",
                "timedOut": true,
                "restarted": true,
            }),
            Err(_) => json!({ "error": "timeout", "timedOut": true }),
        }
    }
}

/// A `tools/call` response as the socket answers it: its text blocks joined, or its error.
fn hook_answer(response: &Value) -> Value {
    if let Some(error) = response.get("error") {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("");
        return json!({ "error": format!("the server answered an error: {message}") });
    }
    let result = &response["result"];
    let text: Vec<&str> = result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "text": text.join("\n"),
        "isError": result["isError"].as_bool().unwrap_or(false),
    })
}

/// Reads one line of at most `max` bytes; `None` at the end of the stream. A longer line is an
/// error, so that a peer cannot grow the buffer without bound.
async fn read_line(
    reader: &mut (impl tokio::io::AsyncBufRead + Unpin),
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Err(std::io::Error::other(format!(
                "a line longer than {max} bytes"
            )));
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if done {
            return Ok(Some(line));
        }
    }
}

/// Answers the host's request `id` with an error, without the server.
async fn refuse(relay: &Relay, id: &Value, message: &str) {
    let refusal = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32602, "message": message},
    });
    let mut text = refusal.to_string().into_bytes();
    text.push(b'\n');
    relay.to_host.send(text).await;
}

/// The host's lines to the server: `tools/list` ids noted, calls of `_` tools refused.
async fn host_to_server(host: impl AsyncRead + Unpin, relay: Relay) {
    let mut host = BufReader::new(host);
    while let Ok(Some(line)) = read_line(&mut host, MAX_LINE_BYTES).await {
        if let Ok(message) = serde_json::from_slice::<Value>(&line) {
            let method = message.get("method").and_then(Value::as_str);
            let id = message.get("id");
            if method.is_some()
                && id.is_some()
                && let Some(meta) = stateless_meta(&message)
            {
                relay.shared().handshake = Handshake::Stateless(meta);
            }
            if relay.shared().restarting {
                if let (Some(_), Some(id)) = (method, id) {
                    refuse(&relay, id, "the server is being restarted; call again").await;
                }
                continue;
            }
            match (method, id) {
                (Some("tools/list"), Some(id)) => {
                    // Each noted id waits for its answer; a server that never answers must not
                    // grow the set, and forgetting an id would let its hooks through.
                    let noted = {
                        let mut shared = relay.shared();
                        let room = shared.listing.len() < MAX_LISTINGS;
                        if room {
                            shared.listing.insert(id.to_string());
                        }
                        room
                    };
                    if !noted {
                        refuse(
                            &relay,
                            id,
                            "too many `tools/list` requests wait for the server",
                        )
                        .await;
                        continue;
                    }
                }
                (Some("tools/call"), Some(id)) => {
                    let name = message["params"]["name"].as_str().unwrap_or("");
                    if hooks::is_hook(name) {
                        refuse(
                            &relay,
                            id,
                            &format!("`{name}` is a hook: only hookloop calls it"),
                        )
                        .await;
                        continue;
                    }
                }
                (Some("notifications/initialized"), None) => {
                    relay.shared().handshake = Handshake::Initialized;
                }
                _ => {}
            }
            if let (Some(method), Some(id)) = (method, id) {
                let mut shared = relay.shared();
                if method == "initialize" {
                    shared.init_params = message.get("params").cloned();
                    shared.init_id = Some(id.to_string());
                }
                if shared.in_flight.len() < MAX_IN_FLIGHT {
                    shared.in_flight.insert(id.to_string(), id.clone());
                }
            }
        }
        relay.to_server(line).await;
    }
}

/// The server's lines to the host: answers to the proxy's own calls taken out, `_` tools taken
/// out of `tools/list` answers.
async fn server_to_host(server: impl AsyncRead + Unpin, relay: Relay) -> std::io::Result<()> {
    let mut server = BufReader::new(server);
    while let Some(mut line) = read_line(&mut server, MAX_LINE_BYTES).await? {
        // Room first, then the bookkeeping and the line queued at once: a restart that drops
        // this future while it waits leaves the answer's request in flight, to be answered
        // with an error, rather than forgotten and never answered.
        let Some(room) = relay.to_host.room_for(line.len()).await else {
            break;
        };
        if let Ok(mut message) = serde_json::from_slice::<Value>(&line)
            && message.get("method").is_none()
            && let Some(id) = message.get("id").cloned()
        {
            if let Some(own) = id.as_str().filter(|id| id.starts_with(OWN_ID)) {
                if let Some(waiter) = relay.shared().waiting.remove(own) {
                    let _ = waiter.send(message);
                }
                continue;
            }
            relay.shared().in_flight.remove(&id.to_string());
            // A restart may change the tool list (the new server's is read afresh), so the
            // proxy says it can tell, and does after each restart (`reinitialize`).
            if relay.shared().init_id.as_deref() == Some(&id.to_string())
                && let Some(tools) = message["result"]["capabilities"]["tools"].as_object_mut()
            {
                tools.insert("listChanged".into(), Value::Bool(true));
                line = message.to_string().into_bytes();
                line.push(b'\n');
            }
            if relay.shared().listing.remove(&id.to_string())
                && let Some(tools) = message["result"]["tools"].as_array_mut()
            {
                tools.retain(|tool| !tool["name"].as_str().is_some_and(hooks::is_hook));
                line = message.to_string().into_bytes();
                line.push(b'\n');
            }
        }
        if !relay.to_host.push(line, room) {
            break;
        }
    }
    Ok(())
}

/// Serves hook calls on the socket, [`MAX_CONNECTIONS`] at a time.
async fn serve(listener: UnixListener, relay: Relay) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let relay = relay.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = serve_one(stream, &relay).await {
                tracing::warn!(error = %e, "hook socket: connection refused");
            }
        });
    }
}

async fn serve_one(stream: UnixStream, relay: &Relay) -> std::io::Result<()> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if stream.peer_cred()?.uid() != uid {
        return Err(std::io::Error::other("a peer of another user"));
    }
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let answer = match tokio::time::timeout(REQUEST_WAIT, read_line(&mut read, MAX_REQUEST_BYTES))
        .await
    {
        Err(_) => json!({ "error": format!("no request within {} s", REQUEST_WAIT.as_secs()) }),
        Ok(Err(e)) => json!({ "error": e.to_string() }),
        Ok(Ok(None)) => return Ok(()),
        Ok(Ok(Some(line))) => match serde_json::from_slice::<Value>(&line) {
            Err(e) => json!({ "error": format!("the request is not JSON: {e}") }),
            Ok(request) => match request["hook"].as_str() {
                Some(hook) if hooks::is_hook(hook) => {
                    let timeout = request["timeout_ms"]
                        .as_u64()
                        .map_or(MAX_HOOK_TIMEOUT, Duration::from_millis)
                        .min(MAX_HOOK_TIMEOUT);
                    let arguments = match request.get("arguments") {
                        Some(Value::Object(map)) => Value::Object(map.clone()),
                        _ => json!({}),
                    };
                    relay.call_hook(hook, arguments, timeout).await
                }
                _ => {
                    json!({ "error": "the request names no `_` hook: only hooks are called here" })
                }
            },
        },
    };
    let mut text = answer.to_string().into_bytes();
    text.push(b'\n');
    write.write_all(&text).await?;
    write.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_wait_nothing_first_then_double_up_to_30_s() {
        let waits: Vec<u64> = (1..=9).map(|n| restart_delay(n).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(restart_delay(u32::MAX), Duration::from_secs(30));
    }
}
