//! `hookloop mcp proxy` in front of the real todo server (`hookloop todo-server`): the host's
//! side sees no `_` tools and cannot call them, the hook socket calls them on the same live
//! connection (the todo the host added is in `_Stop`'s answer), and hostile peers of the
//! socket are refused without harming the relay.

mod loopback;
#[path = "support/peak_memory.rs"]
mod peak_memory;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use peak_memory::status_kib;

struct Proxy {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    runtime: PathBuf,
    name: String,
}

impl Proxy {
    fn start(runtime: &Path) -> Self {
        Self::start_with(runtime, "todo", &[loopback::hookloop(), "todo-server"], &[])
    }

    /// A proxy named `name` in front of `server` (its command and arguments), `env` set for both.
    fn start_with(runtime: &Path, name: &str, server: &[&str], env: &[(&str, &str)]) -> Self {
        std::fs::create_dir_all(runtime).unwrap();
        std::fs::set_permissions(runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut child = Command::new(loopback::hookloop())
            .args(["mcp", "proxy", "--name", name, "--"])
            .args(server)
            .envs(env.iter().copied())
            .env("XDG_RUNTIME_DIR", runtime)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
            runtime: runtime.to_owned(),
            name: name.to_owned(),
        }
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer_to(id)
    }

    /// Reads the host's side up to the answer to request `id`.
    fn answer_to(&mut self, id: u64) -> Value {
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "proxy closed"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    fn socket(&self) -> PathBuf {
        self.runtime
            .join("hookloop-bridge")
            .join(std::process::id().to_string())
            .join(format!("{}.sock", self.name))
    }

    fn hook(&self, request: &str) -> Value {
        hook_at(&self.socket(), request)
    }
}

/// Sends one request line to the hook socket at `socket`; its answer.
fn hook_at(socket: &Path, request: &str) -> Value {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // One write: the proxy answers a line and closes, so a newline written after a request
    // that already ended in one may meet a closed socket.
    let mut line = request.to_owned();
    if !line.ends_with('\n') {
        line.push('\n');
    }
    stream.write_all(line.as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap()
}

fn runtime(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "hookloop-bridge-test-{tag}-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ))
}

fn handshake(proxy: &mut Proxy) {
    let init = proxy.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test-host", "version": "0"}}),
    );
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    proxy.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // The proxy reads the host's lines in order: once a later request is answered, it has seen
    // the handshake end and takes hook calls (before that it refuses them, saying why).
    let pong = proxy.request(99, "ping", json!({}));
    assert!(pong["result"].is_object(), "{pong}");
}

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_host_sees_no_hooks_and_the_socket_calls_them_on_the_live_connection() {
    let dir = runtime("live");
    let mut proxy = Proxy::start(&dir);
    handshake(&mut proxy);

    let names = tool_names(&proxy.request(2, "tools/list", json!({})));
    assert!(names.contains(&"add".to_owned()), "{names:?}");
    assert!(names.iter().all(|n| !n.starts_with('_')), "{names:?}");

    let refused = proxy.request(3, "tools/call", json!({"name": "_Stop", "arguments": {}}));
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("is a hook"), "{refused}");

    let socket = proxy.socket();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);

    let quiet = proxy.hook(r#"{"hook":"_Stop","arguments":{},"timeout_ms":2500}"#);
    assert_eq!(quiet["text"], "", "{quiet}");

    let added = proxy.request(
        4,
        "tools/call",
        json!({"name": "add", "arguments": {"text": "write the bridge tests"}}),
    );
    assert!(added["result"].is_object(), "{added}");
    let objection = proxy.hook(r#"{"hook":"_Stop","arguments":{},"timeout_ms":2500}"#);
    let text = objection["text"].as_str().unwrap();
    assert!(text.contains("write the bridge tests"), "{objection}");

    drop(proxy.stdin);
    let status = proxy.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the socket outlived its proxy");
    // With no session state in it, the host's directory goes with its last proxy.
    assert!(
        !socket.parent().unwrap().exists(),
        "the host's directory outlived its proxy"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fields a host of the stateless MCP revision (2026-07-28, which Claude Code 2.1.332
/// speaks) puts in every request's `_meta`, in place of the handshake it no longer makes.
fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test-host", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"roots": {"listChanged": true}},
    })
}

#[test]
fn a_host_of_the_stateless_revision_gets_its_hooks_called_with_its_protocol_fields() {
    let dir = runtime("stateless");
    let mut proxy = Proxy::start(&dir);
    // No `initialize`, no `notifications/initialized`: discovery, then plain requests.
    let meta = json!({"_meta": stateless_meta()});
    let found = proxy.request(1, "server/discover", meta.clone());
    assert!(found["result"]["supportedVersions"].is_array(), "{found}");
    let names = tool_names(&proxy.request(2, "tools/list", meta.clone()));
    assert!(names.contains(&"add".to_owned()), "{names:?}");
    assert!(names.iter().all(|n| !n.starts_with('_')), "{names:?}");
    let added = proxy.request(
        3,
        "tools/call",
        json!({"name": "add", "arguments": {"text": "write the host tests"},
               "_meta": stateless_meta()}),
    );
    assert_eq!(added["result"]["isError"], false, "{added}");

    // The server of this revision refuses a request without those fields: the proxy's own call
    // carries the host's, and sees the todo the host added.
    let objection = proxy.hook(r#"{"hook":"_Stop","arguments":{},"timeout_ms":2500}"#);
    let text = objection["text"].as_str().unwrap_or_default();
    assert!(text.contains("write the host tests"), "{objection}");

    drop(proxy.stdin);
    proxy.child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_socket_peers_are_refused_and_the_relay_goes_on() {
    let dir = runtime("hostile");
    let mut proxy = Proxy::start(&dir);
    handshake(&mut proxy);

    let garbage = proxy.hook("this is not json\n");
    assert!(
        garbage["error"].as_str().unwrap().contains("not JSON"),
        "{garbage}"
    );
    let not_a_hook = proxy.hook(r#"{"hook":"add","arguments":{"text":"sneaked in"}}"#);
    assert!(
        not_a_hook["error"]
            .as_str()
            .unwrap()
            .contains("no `_` hook"),
        "{not_a_hook}"
    );
    let mut flood = "x".repeat(2 * 1024 * 1024);
    flood.push('\n');
    let mut stream = UnixStream::connect(proxy.socket()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The proxy answers once the cap is passed and closes; the rest of the write may fail.
    let _ = stream.write_all(flood.as_bytes());
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.contains("longer than"), "{answer}");

    // The refused `add` did not run: the list is still empty, and the relay still answers.
    let quiet = proxy.hook(r#"{"hook":"_Stop","arguments":{}}"#);
    assert_eq!(quiet["text"], "", "{quiet}");
    let names = tool_names(&proxy.request(2, "tools/list", json!({})));
    assert!(names.contains(&"add".to_owned()));

    drop(proxy.stdin);
    proxy.child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stale_socket_of_a_dead_proxy_is_replaced() {
    let dir = runtime("stale");
    let socket_dir = dir
        .join("hookloop-bridge")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&socket_dir).unwrap();
    for d in [&dir, &dir.join("hookloop-bridge"), &socket_dir] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // A socket whose listener is gone: bound, then dropped.
    drop(std::os::unix::net::UnixListener::bind(socket_dir.join("todo.sock")).unwrap());
    let mut proxy = Proxy::start(&dir);
    handshake(&mut proxy);
    let quiet = proxy.hook(r#"{"hook":"_Stop","arguments":{}}"#);
    assert_eq!(quiet["text"], "", "{quiet}");
    drop(proxy.stdin);
    proxy.child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_socket_directory_others_can_enter_is_refused_never_used() {
    let dir = runtime("open");
    let planted = dir.join("hookloop-bridge");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = Command::new(loopback::hookloop())
        .args([
            "mcp",
            "proxy",
            "--name",
            "todo",
            "--",
            loopback::hookloop(),
            "todo-server",
        ])
        .env("XDG_RUNTIME_DIR", &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("not a private directory"), "{stderr}");
    let sockets = std::fs::read_dir(&planted).unwrap().count();
    assert_eq!(sockets, 0, "something was made in the open directory");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host that lists tools faster than a server that never answers: the proxy notes 1,024
/// `tools/list` requests waiting (`MAX_LISTINGS`) and answers the next one itself with an error,
/// never forwarding it: the set of ids it must strip hooks from stays bounded, and no id is
/// forgotten.
#[test]
fn listings_a_silent_server_never_answers_stop_at_1024_and_the_next_is_refused() {
    let dir = runtime("listings");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut child = Command::new(loopback::hookloop())
        .args(["mcp", "proxy", "--name", "silent", "--", "sleep", "60"])
        .env("XDG_RUNTIME_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut requests = String::new();
    for id in 1..=1026 {
        requests.push_str(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}}).to_string(),
        );
        requests.push('\n');
    }
    stdin.write_all(requests.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let mut refused = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(3)) {
        let answer: Value = serde_json::from_str(&line).unwrap();
        refused.push(answer);
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let ids: Vec<&Value> = refused.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [&json!(1025), &json!(1026)], "{refused:?}");
    for answer in &refused {
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("too many `tools/list` requests"),
            "{answer}"
        );
    }
}

/// A host line past 64 MiB (`MAX_LINE_BYTES`) ends the relay: the proxy exits instead of
/// holding a line without end, and takes its server with it.
#[test]
fn a_host_line_past_64_mib_ends_the_relay_and_the_proxy_exits() {
    let dir = runtime("long-line");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut child = Command::new(loopback::hookloop())
        .args(["mcp", "proxy", "--name", "silent", "--", "sleep", "60"])
        .env("XDG_RUNTIME_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let started = std::time::Instant::now();
    let chunk = vec![b'x'; 1 << 20];
    // 65 MiB, no newline; the proxy may stop reading (a broken pipe) once past its cap.
    for _ in 0..65 {
        if stdin.write_all(&chunk).is_err() {
            break;
        }
    }
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.is_some(),
        "the proxy still runs 20 s after a 65 MiB line"
    );
}

#[test]
fn a_starting_proxy_removes_the_state_of_hosts_that_died_without_a_session_end() {
    let dir = runtime("dead-hosts");
    let bridge = dir.join("hookloop-bridge");
    // A host that is gone: a process started and reaped, its pid now nobody's.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let dead_sessions = bridge.join(dead.to_string()).join("sessions");
    let live_sessions = bridge.join(std::process::id().to_string()).join("sessions");
    for sessions in [&dead_sessions, &live_sessions] {
        std::fs::create_dir_all(sessions).unwrap();
        std::fs::write(sessions.join("s.json"), "{}").unwrap();
        std::fs::write(sessions.join("s.lock"), "").unwrap();
    }
    std::fs::create_dir_all(bridge.join("install")).unwrap();
    let live = bridge.join(std::process::id().to_string());
    for d in [&dir, &bridge, &live, &live_sessions] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let mut proxy = Proxy::start(&dir);
    handshake(&mut proxy);
    assert!(
        !bridge.join(dead.to_string()).exists(),
        "the dead host's directory is gone"
    );
    assert!(
        live_sessions.join("s.json").exists(),
        "a live host's state stays"
    );
    assert!(
        bridge.join("install").exists(),
        "what is not a host's stays"
    );
    drop(proxy.stdin);
    proxy.child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hostile MCP server of the hostile-peer tests (`tests/support/hostile.rs`).
const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// What the proxy may grow by while one side does not read: the lines it holds for that side
/// (4 MiB, `MAX_QUEUED_BYTES`) and the buffers around them. Queuing all the other side sends
/// takes far more (a flood of 1 KiB log lines is tens of MiB a second).
const MAX_GROWTH_KIB: u64 = 16 * 1024;

/// Kills the proxy and the server it started, which leads a process group of its own and
/// outlives a killed proxy (a server that reads nothing never sees its stdin close).
fn kill_with_server(proxy: &mut Child) {
    for child in children(proxy.id()) {
        // SAFETY: a signal to the process group the proxy's server leads.
        unsafe {
            libc::kill(-child, libc::SIGKILL);
        }
    }
    let _ = proxy.kill();
    let _ = proxy.wait();
}

/// The processes `pid` started, from every one of its threads.
fn children(pid: u32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .flatten()
        .flat_map(|task| {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether process `pid` has ended (gone, or a zombie waiting to be reaped).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S …": the state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// A server that floods its host with log lines while the host reads nothing: the proxy stops
/// reading the server once the lines it holds for the host fill its room, so its memory stays
/// put; once the host reads again, the flood's end and the call's answer arrive.
#[test]
fn a_server_flooding_a_host_that_does_not_read_costs_the_proxy_little_memory() {
    let dir = runtime("flood-host");
    let mut proxy = Proxy::start_with(
        &dir,
        "evil",
        &[TEST_SERVER],
        &[("TS_HOSTILE", "flood:logging"), ("TS_FLOOD_MS", "3000")],
    );
    handshake(&mut proxy);
    let pid = proxy.child.id();
    let before = status_kib(pid, "VmRSS:");
    proxy.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "poke", "arguments": {}}}));
    // The flood runs for 3 s while the host reads nothing.
    std::thread::sleep(Duration::from_secs(3));
    let peak = status_kib(pid, "VmHWM:");
    // The host reads again: the relay goes on to the call's answer.
    let answer = proxy.answer_to(7);
    assert!(answer["result"].is_object(), "{answer}");
    kill_with_server(&mut proxy.child);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(before > 0 && peak > 0, "memory was not read");
    let growth = peak.saturating_sub(before);
    eprintln!("proxy: VmRSS before {before} KiB, VmHWM after {peak} KiB, growth {growth} KiB");
    assert!(growth < MAX_GROWTH_KIB, "the proxy grew by {growth} KiB");
}

/// A host that writes on and on to a server that reads nothing: the proxy stops reading the
/// host once the lines it holds for the server fill its room, and a hook call, which finds no
/// room either, times out as a call the server never answers does.
#[test]
fn a_host_writing_to_a_server_that_does_not_read_costs_the_proxy_little_memory() {
    let dir = runtime("deaf-server");
    let mut proxy = Proxy::start_with(&dir, "deaf", &[TEST_SERVER], &[("TS_HOSTILE", "deaf")]);
    handshake(&mut proxy);
    // The server answers this listing, then reads its stdin no more.
    let listed = proxy.request(2, "tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let pid = proxy.child.id();
    let socket = proxy.socket();
    let before = status_kib(pid, "VmRSS:");
    // 64 MiB of pings, written by a thread the full pipes will block.
    let mut stdin = proxy.stdin;
    let writer = std::thread::spawn(move || {
        let padding = "p".repeat(1024);
        for id in 0..64 * 1024 {
            let ping = json!({"jsonrpc": "2.0", "id": 1000 + id, "method": "ping",
                              "params": {"_meta": {"padding": padding}}});
            if writeln!(stdin, "{ping}").is_err() {
                return;
            }
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let peak = status_kib(pid, "VmHWM:");
    let timed_out = hook_at(
        &socket,
        r#"{"hook":"_Stop","arguments":{},"timeout_ms":500}"#,
    );
    kill_with_server(&mut proxy.child);
    writer.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(timed_out["timedOut"], true, "{timed_out}");
    assert!(before > 0 && peak > 0, "memory was not read");
    let growth = peak.saturating_sub(before);
    eprintln!("proxy: VmRSS before {before} KiB, VmHWM after {peak} KiB, growth {growth} KiB");
    assert!(growth < MAX_GROWTH_KIB, "the proxy grew by {growth} KiB");
}

/// A host that ends the proxy with a signal (`SIGTERM`, as hosts end their servers): the proxy
/// ends as when the host closes, and its server, which reads nothing and so never sees its stdin
/// close, is killed with it rather than left running.
#[test]
fn a_proxy_told_to_stop_takes_a_server_that_does_not_read_with_it() {
    let dir = runtime("stopped");
    let mut proxy = Proxy::start_with(&dir, "deaf", &[TEST_SERVER], &[("TS_HOSTILE", "deaf")]);
    handshake(&mut proxy);
    // The server answers this listing, then reads its stdin no more.
    let listed = proxy.request(2, "tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let servers = children(proxy.child.id());
    assert_eq!(servers.len(), 1, "{servers:?}");
    let pid = i32::try_from(proxy.child.id()).unwrap();
    // SAFETY: a signal to the proxy this test started.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = proxy.child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let server_ended = (0..100).any(|_| {
        let ended = ended(servers[0]);
        if !ended {
            std::thread::sleep(Duration::from_millis(50));
        }
        ended
    });
    if !server_ended || status.is_none() {
        // SAFETY: the group the proxy's server leads, which the test must not leave running.
        unsafe {
            libc::kill(-servers[0], libc::SIGKILL);
        }
        let _ = proxy.child.kill();
        let _ = proxy.child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.is_some(), "the proxy still runs 10 s after SIGTERM");
    assert!(server_ended, "the proxy's server outlived it");
}
