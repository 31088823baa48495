//! `hookloop hook <host>` against the real proxy in front of the real todo server: the test
//! process is the "host" (the ancestor of both the proxy and the hook command), and each host's
//! events are the fixtures of `tests/bridge_hosts/<host>/`, one file per event, written as
//! that host writes them. Every answer is checked against the host's exact format and exit
//! status.

mod binary;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const HOSTS: [&str; 5] = ["claude-code", "codex", "gemini", "cursor", "goose"];

/// The fixture of `host`'s event `name`.
fn fixture(host: &str, name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/bridge_hosts")
        .join(host)
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// Each host's end of turn, tool gate, and session end, by fixture name.
fn stop_event(host: &str) -> Value {
    match host {
        "gemini" => fixture(host, "AfterAgent"),
        "cursor" => fixture(host, "stop"),
        _ => fixture(host, "Stop"),
    }
}

fn gate_event(host: &str) -> Value {
    match host {
        "gemini" => fixture(host, "BeforeTool"),
        "cursor" => fixture(host, "beforeMCPExecution"),
        _ => fixture(host, "PreToolUse"),
    }
}

fn end_event(host: &str) -> Value {
    match host {
        "cursor" => fixture(host, "sessionEnd"),
        _ => fixture(host, "SessionEnd"),
    }
}

fn with_session(mut event: Value, id: &str) -> Value {
    let field = if event.get("conversation_id").is_some() {
        "conversation_id"
    } else {
        "session_id"
    };
    event[field] = id.into();
    event
}

/// The body a hook's answer reaches the model as.
fn body(hook: &str, text: &str) -> String {
    json!({"hook": hook, "server": "todo", "text": text}).to_string()
}

/// `host`'s exact answer blocking its end of turn with `reason`.
fn stop_block(host: &str, reason: &str) -> Value {
    match host {
        "gemini" => json!({"decision": "deny", "reason": reason}),
        "cursor" => json!({"followup_message": reason}),
        _ => json!({"decision": "block", "reason": reason}),
    }
}

/// `host`'s exact answer letting an end of turn (or any event) go: its stdout.
fn quiet_stdout(host: &str) -> &'static str {
    match host {
        "gemini" | "cursor" => "{}",
        _ => "",
    }
}

/// `host`'s exact answer denying a tool call with `reason`.
fn gate_deny(host: &str, reason: &str) -> Value {
    match host {
        "claude-code" | "codex" => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }}),
        "gemini" => json!({"decision": "deny", "reason": reason}),
        "cursor" => json!({"permission": "deny", "user_message": reason, "agent_message": reason}),
        _ => json!({"decision": "block", "reason": reason}),
    }
}

struct Proxy {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The proxy's answer to the host's `initialize`.
    init: Value,
}

impl Proxy {
    fn start(runtime: &Path, name: &str, command: &[&str]) -> Self {
        let mut child = Command::new(binary::hookloop())
            .args(["mcp", "proxy", "--name", name, "--"])
            .args(command)
            .env("XDG_RUNTIME_DIR", runtime)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut proxy = Self {
            child,
            stdin,
            stdout,
            init: Value::Null,
        };
        let init = proxy.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test-host", "version": "0"}}),
        );
        assert!(init["result"].is_object(), "{init}");
        proxy.init = init;
        proxy.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        proxy
    }

    fn todo(runtime: &Path) -> Self {
        let mut proxy = Self::start(runtime, "todo", &[binary::hookloop(), "todo-server"]);
        // Once a later request is answered, the proxy has seen the handshake end.
        let pong = proxy.request(99, "ping", json!({}));
        assert!(pong["result"].is_object(), "{pong}");
        proxy
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
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

    fn add(&mut self, text: &str) {
        let added = self.request(
            1000,
            "tools/call",
            json!({"name": "add", "arguments": {"text": text}}),
        );
        assert!(added["result"].is_object(), "{added}");
    }

    fn stop(self) {
        let Self {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let _ = child.wait();
    }
}

fn runtime(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hookloop-hook-test-{tag}-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// The host's directory of this test process, as the proxy made it.
fn host_dir(runtime: &Path) -> PathBuf {
    runtime
        .join("hookloop-bridge")
        .join(std::process::id().to_string())
}

fn hook_with(host: &str, event: &Value, runtime: &Path, env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(binary::hookloop())
        .args(["hook", host])
        .env("XDG_RUNTIME_DIR", runtime)
        .env("MCP_HOOK_SERVERS", "todo")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A command that stops reading (an event past its cap) may close the pipe first.
    let _ = stdin.write_all(event.to_string().as_bytes());
    drop(stdin);
    child.wait_with_output().unwrap()
}

fn hook(host: &str, event: &Value, runtime: &Path) -> Output {
    hook_with(host, event, runtime, &[])
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The answer is exit 0 and exactly `expected` as JSON on stdout.
fn assert_json(out: &Output, expected: &Value, what: &str) {
    assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(out));
    let got: Value = serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("{what}: stdout {:?}: {e}", stdout(out)));
    assert_eq!(&got, expected, "{what}");
}

/// The answer is exit 0 and the host's "go ahead".
fn assert_quiet(host: &str, out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(out));
    assert_eq!(stdout(out), quiet_stdout(host), "{what}: {}", stderr(out));
}

#[test]
fn every_host_gets_its_own_block_of_a_stop_with_an_open_todo_and_its_allow_without() {
    let dir = runtime("formats");
    let mut proxy = Proxy::todo(&dir);
    for host in HOSTS {
        let out = hook(host, &stop_event(host), &dir);
        assert_quiet(host, &out, &format!("{host}: no todo"));
        assert!(stderr(&out).is_empty(), "{host}: {}", stderr(&out));
    }
    proxy.add("write the bridge tests");
    let reason = body("_Stop", "1 open: write the bridge tests");
    for host in HOSTS {
        let out = hook(host, &stop_event(host), &dir);
        assert_json(&out, &stop_block(host, &reason), &format!("{host}: a todo"));
    }
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_host_gets_a_pre_tool_use_denial_in_its_deny_format() {
    let dir = runtime("deny");
    let proxy = Proxy::todo(&dir);
    let reason = body(
        "_PreToolUse",
        "there is no todo #9: call list to see the numbers",
    );
    for host in HOSTS {
        let out = hook(host, &gate_event(host), &dir);
        assert_json(&out, &gate_deny(host, &reason), host);
    }
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn post_compact_comes_through_a_session_start_of_source_compact() {
    let dir = runtime("compact");
    let mut proxy = Proxy::todo(&dir);
    proxy.add("keep me");
    for host in ["claude-code", "codex"] {
        let out = hook(host, &fixture(host, "SessionStart"), &dir);
        let expected = json!({"hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": body("_PostCompact", "Open todos:\n- keep me"),
        }});
        assert_json(&out, &expected, host);
    }
    // Gemini's session start is a start: `_SessionStart` speaks there.
    let out = hook("gemini", &fixture("gemini", "SessionStart"), &dir);
    let expected = json!({"hookSpecificOutput": {
        "hookEventName": "SessionStart",
        "additionalContext": body("_SessionStart", "Open todos from earlier:\n- keep me"),
    }});
    assert_json(&out, &expected, "gemini");
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn four_stops_of_one_session_get_three_objections_then_the_stop() {
    let dir = runtime("budget");
    let mut proxy = Proxy::todo(&dir);
    proxy.add("a");
    let reason = body("_Stop", "1 open: a");
    // `stop_hook_active` false each time: the host says none follows a block, so only the
    // budget stops the objections.
    for host in ["claude-code", "cursor"] {
        for round in 1..=3 {
            let out = hook(host, &stop_event(host), &dir);
            assert_json(&out, &stop_block(host, &reason), &format!("{host} {round}"));
        }
        let out = hook(host, &stop_event(host), &dir);
        assert_quiet(host, &out, &format!("{host}: the fourth"));
    }
    // A smaller budget is the operator's.
    let event = with_session(stop_event("codex"), "codex-small-budget");
    let budget = [("SPROUT_AGENT_STOP_MAX_REJECTIONS", "1")];
    let out = hook_with("codex", &event, &dir, &budget);
    assert_json(&out, &stop_block("codex", &reason), "codex, budget 1");
    assert_quiet("codex", &hook_with("codex", &event, &dir, &budget), "codex");
    // 0 disables `_Stop`.
    let event = with_session(stop_event("codex"), "codex-no-budget");
    let off = [("SPROUT_AGENT_STOP_MAX_REJECTIONS", "0")];
    assert_quiet("codex", &hook_with("codex", &event, &dir, &off), "codex 0");
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_end_of_turn_right_after_an_objection_ends_the_turn() {
    let dir = runtime("consecutive");
    let mut proxy = Proxy::todo(&dir);
    proxy.add("a");
    let reason = body("_Stop", "1 open: a");
    // Hosts that flag a stop after a block (`stop_hook_active`) keep the flag up over the whole
    // continuation, tool calls and all: a flagged stop right after the objection is let go, one
    // after a tool call is asked again.
    for host in ["claude-code", "gemini"] {
        let stop = stop_event(host);
        let mut again = stop.clone();
        again["stop_hook_active"] = true.into();
        assert_json(&hook(host, &stop, &dir), &stop_block(host, &reason), host);
        assert_quiet(
            host,
            &hook(host, &again, &dir),
            &format!("{host}: right after"),
        );
        assert_json(
            &hook(host, &stop, &dir),
            &stop_block(host, &reason),
            &format!("{host}: asked again"),
        );
        if host == "claude-code" {
            let used = hook(host, &fixture(host, "PostToolUse"), &dir);
            assert_eq!(used.status.code(), Some(0), "{host}: a tool ran");
            assert_json(
                &hook(host, &again, &dir),
                &stop_block(host, &reason),
                &format!("{host}: flagged, but after a tool call"),
            );
        }
    }
    // goose does not say: the state's latch decides. An objection, then a second end right
    // after is let go; the next end is asked again.
    let stop = stop_event("goose");
    assert_json(
        &hook("goose", &stop, &dir),
        &stop_block("goose", &reason),
        "1",
    );
    assert_quiet("goose", &hook("goose", &stop, &dir), "right after");
    assert_json(
        &hook("goose", &stop, &dir),
        &stop_block("goose", &reason),
        "2",
    );
    // A tool call between two ends clears the latch: the second end is asked.
    let used = hook("goose", &fixture("goose", "PostToolUse"), &dir);
    assert_quiet("goose", &used, "a tool ran");
    assert_json(
        &hook("goose", &stop, &dir),
        &stop_block("goose", &reason),
        "3",
    );
    // And the budget (3) is spent now.
    let used = hook("goose", &fixture("goose", "PreToolUse"), &dir);
    assert_eq!(used.status.code(), Some(0));
    assert_quiet("goose", &hook("goose", &stop, &dir), "budget spent");
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_session_end_forgets_the_session() {
    let dir = runtime("end");
    let mut proxy = Proxy::todo(&dir);
    proxy.add("a");
    let reason = body("_Stop", "1 open: a");
    for host in HOSTS {
        for _ in 0..3 {
            hook(host, &stop_event(host), &dir);
        }
        assert_quiet(host, &hook(host, &stop_event(host), &dir), host);
        let sessions = host_dir(&dir).join("sessions");
        let before = std::fs::read_dir(&sessions).unwrap().count();
        let out = hook(host, &end_event(host), &dir);
        assert_quiet(host, &out, &format!("{host}: session end"));
        let after = std::fs::read_dir(&sessions).unwrap().count();
        assert_eq!(
            after + 2,
            before,
            "{host}: the state and its lock are removed"
        );
        // A fresh budget: the same session id starts again.
        let out = hook(host, &stop_event(host), &dir);
        assert_json(&out, &stop_block(host, &reason), host);
    }
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that answers the handshake and never anything else.
const HANGING_SERVER: &str = r#"while IFS= read -r line; do case "$line" in *'"initialize"'*) printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"hang","version":"0"}}}';; esac; done"#;

#[test]
fn a_hook_that_hangs_costs_at_most_its_timeout_and_has_nothing_to_say() {
    let dir = runtime("hang");
    let hang = Proxy::start(&dir, "hang", &["sh", "-c", HANGING_SERVER]);
    // A ping to the silent server would never be answered: give the relay a moment to read
    // the end of the handshake instead.
    std::thread::sleep(Duration::from_millis(300));
    let env = [
        ("MCP_HOOK_SERVERS", "hang"),
        ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "300"),
    ];
    for round in 1..=2 {
        let started = Instant::now();
        let out = hook_with("claude-code", &stop_event("claude-code"), &dir, &env);
        let took = started.elapsed();
        assert_quiet("claude-code", &out, "hung");
        let err = stderr(&out);
        assert!(err.contains("did not answer within 300 ms"), "{err}");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        // The timeout, the process's start and the proxy's answer: never the server's hang.
        assert!(took < Duration::from_millis(300 + 1500), "{took:?}");
        assert_eq!(
            err.contains("second hook timeout in a row"),
            round == 2,
            "{err}"
        );
    }
    let state = host_dir(&dir).join("sessions/cc-session-1.json");
    let state: Value = serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    assert_eq!(state["counters"]["objections"], 0, "{state}");
    hang.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_proxy_every_host_goes_ahead_with_one_line_on_stderr() {
    let dir = runtime("none");
    for host in HOSTS {
        let out = hook(host, &stop_event(host), &dir);
        assert_quiet(host, &out, host);
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{host}: {err}");
        assert!(err.contains("no `hookloop mcp proxy` runs"), "{err}");
    }
    // Hooks off: not a word.
    let out = Command::new(binary::hookloop())
        .args(["hook", "claude-code"])
        .env("XDG_RUNTIME_DIR", &dir)
        .env_remove("MCP_HOOK_SERVERS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stale_socket_and_a_bad_event_fail_open() {
    let dir = runtime("stale");
    let host = host_dir(&dir);
    std::fs::create_dir_all(&host).unwrap();
    for d in [&dir.join("hookloop-bridge"), &host] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    drop(std::os::unix::net::UnixListener::bind(host.join("todo.sock")).unwrap());
    let out = hook("claude-code", &stop_event("claude-code"), &dir);
    assert_quiet("claude-code", &out, "stale");
    assert!(stderr(&out).contains("stale socket"), "{}", stderr(&out));
    for bad in ["not json", "{\"hook_event_name\":\"Nope\"}", "[1,2]"] {
        let mut child = Command::new(binary::hookloop())
            .args(["hook", "claude-code"])
            .env("XDG_RUNTIME_DIR", &dir)
            .env("MCP_HOOK_SERVERS", "todo")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(bad.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_quiet("claude-code", &out, bad);
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_event_past_the_cap_is_not_read_and_fails_open() {
    let dir = runtime("big");
    let proxy = Proxy::todo(&dir);
    let mut event = stop_event("claude-code");
    event["last_assistant_message"] = "x".repeat(1024 * 1024 + 1).into();
    let out = hook("claude-code", &event, &dir);
    assert_quiet("claude-code", &out, "big");
    assert!(
        stderr(&out).contains("longer than 1048576 bytes"),
        "{}",
        stderr(&out)
    );
    // A host that never closes stdin: the read deadline lets go.
    let started = Instant::now();
    let mut child = Command::new(binary::hookloop())
        .args(["hook", "claude-code"])
        .env("XDG_RUNTIME_DIR", &dir)
        .env("MCP_HOOK_SERVERS", "todo")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    assert_quiet("claude-code", &out, "open stdin");
    assert!(
        stderr(&out).contains("did not end within"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_flood_of_invocations_keeps_every_answer_and_the_budget() {
    let dir = runtime("flood");
    let mut proxy = Proxy::todo(&dir);
    proxy.add("a");
    let deny = gate_deny(
        "claude-code",
        &body(
            "_PreToolUse",
            "there is no todo #9: call list to see the numbers",
        ),
    );
    let block = stop_block("claude-code", &body("_Stop", "1 open: a"));
    let gate = gate_event("claude-code");
    let stop = with_session(stop_event("claude-code"), "one-session");
    let outs: Vec<(bool, Output)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..40)
            .map(|i| {
                let (dir, gate, stop) = (&dir, &gate, &stop);
                scope.spawn(move || {
                    let is_stop = i % 5 == 0;
                    let event = if is_stop { stop } else { gate };
                    (is_stop, hook("claude-code", event, dir))
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut blocks = 0;
    for (is_stop, out) in &outs {
        if *is_stop {
            if stdout(out).is_empty() {
                assert_quiet("claude-code", out, "a stop past the budget");
            } else {
                assert_json(out, &block, "a stop");
                blocks += 1;
            }
        } else {
            assert_json(out, &deny, "a gate");
        }
    }
    // Eight stops of one session at once: the budget holds under the session's lock.
    assert_eq!(blocks, 3);
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_or_hostile_state_file_is_a_fresh_session_with_a_warning() {
    let dir = runtime("corrupt");
    let mut proxy = Proxy::todo(&dir);
    proxy.add("a");
    let block = stop_block("claude-code", &body("_Stop", "1 open: a"));
    let sessions = host_dir(&dir).join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::set_permissions(&sessions, std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = sessions.join("cc-session-1.json");
    let stop = stop_event("claude-code");

    // A spent budget, as this command writes it, is honoured: the state is read.
    std::fs::write(
        &state,
        r#"{"counters":{"objections":3,"compactions":0,"consecutive_timeouts":{}},"objected":false}"#,
    )
    .unwrap();
    assert_quiet("claude-code", &hook("claude-code", &stop, &dir), "spent");

    let oversized = format!(
        r#"{{"counters":{{"objections":3,"compactions":0,"consecutive_timeouts":{{}}}},"objected":false,"subagents":{{"{}":1}}}}"#,
        "x".repeat(100 * 1024)
    );
    for (what, contents) in [
        ("garbage", "\u{0}\u{1}not json at all".to_owned()),
        (
            "another shape",
            r#"{"objections": 3, "evil": true}"#.to_owned(),
        ),
        ("oversized", oversized),
    ] {
        std::fs::write(&state, contents).unwrap();
        let out = hook("claude-code", &stop, &dir);
        assert_json(&out, &block, what);
        assert!(
            stderr(&out).contains("treated as a fresh session"),
            "{what}: {}",
            stderr(&out)
        );
        // Written fresh: one objection.
        let now: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
        assert_eq!(now["counters"]["objections"], 1, "{what}");
    }

    // A link planted at the state's path is not followed, and what it points to is untouched.
    let outside = dir.join("outside.json");
    std::fs::write(&outside, "keep").unwrap();
    std::fs::remove_file(&state).unwrap();
    std::os::unix::fs::symlink(&outside, &state).unwrap();
    let out = hook("claude-code", &stop, &dir);
    assert_json(&out, &block, "a link");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    assert!(!std::fs::symlink_metadata(&state).unwrap().is_symlink());
    let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hostile_session_id_stays_inside_the_sessions_directory() {
    let dir = runtime("id");
    let mut proxy = Proxy::todo(&dir);
    proxy.add("a");
    let block = stop_block("claude-code", &body("_Stop", "1 open: a"));
    for id in [
        "../../x",
        "/etc/passwd",
        "..",
        "",
        "a\u{0}b",
        &"s".repeat(5000),
    ] {
        let stop = with_session(stop_event("claude-code"), id);
        let out = hook("claude-code", &stop, &dir);
        assert_json(&out, &block, &format!("{id:?}"));
    }
    // Everything made is the socket or in `sessions/`.
    let host = host_dir(&dir);
    let mut stray = Vec::new();
    let mut walk = vec![dir.clone()];
    while let Some(d) = walk.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk.push(path);
            } else if path != host.join("todo.sock")
                && path.parent() != Some(&host.join("sessions"))
            {
                stray.push(path);
            }
        }
    }
    assert!(stray.is_empty(), "{stray:?}");
    assert!(!dir.join("x").exists() && !dir.join("hookloop-bridge/x").exists());
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn at_most_32_servers_are_asked_per_event() {
    let dir = runtime("many");
    let host = host_dir(&dir);
    std::fs::create_dir_all(&host).unwrap();
    for d in [&dir.join("hookloop-bridge"), &host] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // 40 stale sockets: each one asked is one stderr line.
    for i in 0..40 {
        let socket = host.join(format!("s{i:02}.sock"));
        drop(std::os::unix::net::UnixListener::bind(socket).unwrap());
    }
    let out = hook_with(
        "claude-code",
        &stop_event("claude-code"),
        &dir,
        &[("MCP_HOOK_SERVERS", "*")],
    );
    assert_quiet("claude-code", &out, "many");
    let err = stderr(&out);
    assert_eq!(err.matches("stale socket").count(), 32, "{err}");
    // By name: s00 to s31 were asked, s32 on were not.
    assert!(
        err.contains("s31.sock") && !err.contains("s32.sock"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_whose_hook_times_out_twice_in_a_row_is_restarted_and_re_initialized() {
    let dir = runtime("restart");
    let log = dir.join("server.log");
    let pids = dir.join("server.pids");
    // The hanging server, noting each start and each line it reads.
    let script = format!(
        r#"echo $$ >> '{pids}'; while IFS= read -r line; do printf '%s\n' "$line" >> '{log}'; case "$line" in *'"initialize"'*) id=$(printf '%s' "$line" | sed 's/.*"id":\("[^"]*"\|[0-9]*\).*/\1/'); printf '{{"jsonrpc":"2.0","id":%s,"result":{{"protocolVersion":"2025-06-18","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"hang","version":"0"}}}}}}\n' "$id";; esac; done"#,
        pids = pids.display(),
        log = log.display()
    );
    let mut proxy = Proxy::start(&dir, "hang", &["sh", "-c", &script]);
    std::thread::sleep(Duration::from_millis(300));
    // A request of the host the server will never answer.
    proxy.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}));
    let env = [
        ("MCP_HOOK_SERVERS", "hang"),
        ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "300"),
    ];
    for _ in 0..2 {
        let out = hook_with("claude-code", &stop_event("claude-code"), &dir, &env);
        assert_quiet("claude-code", &out, "hung");
    }
    // The host's pending request is answered with an error, not left hanging: a proxy that
    // leaves it is ended after 10 s, so the read below fails instead of hanging the test.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (done, pid) = (done.clone(), proxy.child.id());
        std::thread::spawn(move || {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = Command::new("kill").arg(pid.to_string()).status();
        })
    };
    let answer = loop {
        let mut line = String::new();
        assert!(
            proxy.stdout.read_line(&mut line).unwrap() > 0,
            "proxy closed"
        );
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 5 {
            break message;
        }
    };
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    watchdog.join().unwrap();
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("restarted"), "{answer}");
    // A second server was started and initialized with the host's own params.
    let started = Instant::now();
    let initialized = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("notifications/initialized")
            .count()
    };
    while initialized() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not re-initialized"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let starts: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(
        !Path::new(&format!("/proc/{}", starts[0])).exists(),
        "the old server still runs"
    );
    let lines = std::fs::read_to_string(&log).unwrap();
    let inits: Vec<&str> = lines
        .lines()
        .filter(|l| l.contains("\"initialize\""))
        .collect();
    assert_eq!(inits.len(), 2, "{lines}");
    assert!(inits[1].contains("test-host"), "{}", inits[1]);
    // The host was told its tool list may have changed, which the proxy declared it would.
    assert_eq!(
        proxy.init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{}",
        proxy.init
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (done, pid) = (done.clone(), proxy.child.id());
        std::thread::spawn(move || {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = Command::new("kill").arg(pid.to_string()).status();
        })
    };
    loop {
        let mut line = String::new();
        assert!(
            proxy.stdout.read_line(&mut line).unwrap() > 0,
            "the proxy never said the tool list changed"
        );
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["method"] == "notifications/tools/list_changed" {
            break;
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    watchdog.join().unwrap();
    // Hook calls reach the new server (it hangs too: a timeout, not a refusal).
    let out = hook_with("claude-code", &stop_event("claude-code"), &dir, &env);
    assert!(
        stderr(&out).contains("did not answer within 300 ms"),
        "{}",
        stderr(&out)
    );
    proxy.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
