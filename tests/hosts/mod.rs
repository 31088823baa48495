//! Shared by the tests that run a real host CLI (tests/host_claude_code.rs,
//! tests/host_codex.rs) with `hookloop mcp proxy` as its MCP server: finding the host's binary
//! (or skipping with one line), a scratch tree per run, the proxy's command line, and running
//! the host to its end under a time limit.
//!
//! The hosts are pinned and installed by `.ci/setup.d/45-bridge-hosts.sh`. They talk to the
//! loopback model on 127.0.0.1 only; every switch that stops their own traffic is set by the
//! test that runs them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::binary;
use crate::support::loopback::{Captured, Loopback};

/// How long one host run may take; a healthy one takes a few seconds.
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The text `_Stop` of the todo server answers with the one todo the model added open.
pub const OBJECTION: &str = "1 open: write tests";

/// The host's binary from `variable`, or `None` after one line on stderr saying how to get it.
/// Under CI a missing variable is a failure: the setup stage should have set it.
pub fn host_bin(variable: &str) -> Option<PathBuf> {
    let Some(bin) = std::env::var_os(variable).map(PathBuf::from) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but {variable} is not: .ci/setup.d/45-bridge-hosts.sh did not run"
        );
        // Straight to the process's stderr: the harness captures `println!`, and this line is
        // for whoever runs `cargo test`.
        let line = format!(
            "host test skipped: {variable} is unset; run `CI_ENV=/dev/stdout bash \
             .ci/setup.d/45-bridge-hosts.sh` and export the variables it prints\n"
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        return None;
    };
    assert!(bin.is_file(), "{variable}={}: no such file", bin.display());
    Some(bin)
}

/// A scratch tree for one host run: the host's HOME, the project it runs in, and the runtime
/// directory where the proxy puts its hook socket (mode 0700, as the proxy demands).
pub struct Scratch {
    pub root: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!(
            "hookloop-host-{tag}-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        for dir in ["home", "project", "runtime"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::set_permissions(root.join("runtime"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        Self { root }
    }

    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    pub fn project(&self) -> PathBuf {
        self.root.join("project")
    }

    pub fn runtime(&self) -> PathBuf {
        self.root.join("runtime")
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.root.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The host's MCP server: `hookloop mcp proxy --name todo -- hookloop todo-server`, as
/// `(command, args)`.
pub fn proxied_todo_server() -> (String, Vec<String>) {
    let hookloop = binary::hookloop().to_owned();
    let args = [
        "mcp",
        "proxy",
        "--name",
        "todo",
        "--",
        &hookloop,
        "todo-server",
    ]
    .map(str::to_owned)
    .to_vec();
    (hookloop, args)
}

/// The command line of the host's Stop hook: `hookloop hook <host>`.
pub fn hook_command(host: &str) -> String {
    format!("{} hook {host}", binary::hookloop())
}

/// A command for the host with an empty environment but `PATH` (the npm launcher needs `node`)
/// and the scratch tree's HOME and runtime directory; the caller adds the host's own switches.
/// Every proxy variable names `outside`, a loopback server that answers nothing: whatever the
/// host sends past 127.0.0.1 is recorded there (see [`assert_offline`]) instead of leaving.
pub fn host_command(bin: &Path, scratch: &Scratch, outside: &Loopback) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(bin);
    command.env_clear();
    for proxy in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        command
            .env(proxy, outside.url())
            .env(proxy.to_ascii_lowercase(), outside.url());
    }
    command
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", scratch.home())
        .env("XDG_RUNTIME_DIR", scratch.runtime())
        .env("TMPDIR", &scratch.root)
        .current_dir(scratch.project())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The switches that keep Claude Code to the loopback model. `NONESSENTIAL_TRAFFIC` is the
/// umbrella for the auto-updater, telemetry, error reporting and feedback; each is also set on
/// its own, so a release that splits the umbrella still sends nothing. `ENABLE_TOOL_SEARCH=false`
/// makes it list MCP tools in the request instead of deferring them behind its search tool.
pub const CLAUDE_OFFLINE: &[(&str, &str)] = &[
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
    ("DISABLE_BUG_COMMAND", "1"),
    ("ENABLE_TOOL_SEARCH", "false"),
];

/// `claude -p <prompt>` in `scratch`'s project, offline ([`host_command`], [`CLAUDE_OFFLINE`]),
/// its model the Messages server `model` with a dummy key, answering in JSON; the caller adds
/// its MCP servers and settings.
pub fn claude_command(
    bin: &Path,
    scratch: &Scratch,
    outside: &Loopback,
    model: &Loopback,
    prompt: &str,
) -> tokio::process::Command {
    let mut claude = host_command(bin, scratch, outside);
    claude
        .envs(CLAUDE_OFFLINE.iter().copied())
        .env("ANTHROPIC_BASE_URL", model.url())
        .env("ANTHROPIC_API_KEY", "sk-test-key")
        .arg("-p")
        .arg(prompt)
        .args(["--output-format", "json"]);
    claude
}

/// Asserts the host sent nothing past 127.0.0.1: its proxy saw no request.
pub fn assert_offline(outside: &Loopback) {
    let sent: Vec<String> = outside
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        sent.is_empty(),
        "the host reached for the internet: {sent:?}"
    );
}

/// Runs the host to its end, whatever its exit status; panics if it does not end within
/// [`RUN_LIMIT`]. Prints the run's wall time.
pub async fn run_to_end(mut command: tokio::process::Command, what: &str) -> Output {
    let started = Instant::now();
    let child = command.spawn().expect("the host starts");
    let output = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not end within {RUN_LIMIT:?}"))
        .unwrap();
    eprintln!("{what}: {:.1} s", started.elapsed().as_secs_f64());
    output
}

/// Runs the host to its end; panics, with what it wrote, if it does not end within
/// [`RUN_LIMIT`] or fails. Prints the run's wall time.
pub async fn run(command: tokio::process::Command, what: &str) -> Output {
    let output = run_to_end(command, what).await;
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Every tool name in a tool list, namespaces' members included, without the host's
/// `mcp__todo__` prefix where it has one.
pub fn tool_names(tools: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for tool in tools.as_array().into_iter().flatten() {
        if let Some(name) = tool["name"].as_str() {
            names.push(name.strip_prefix("mcp__todo__").unwrap_or(name).to_owned());
        }
        names.extend(tool_names(&tool["tools"]));
    }
    names
}

/// Asserts the model was offered the todo server's tools and none of its hooks.
pub fn assert_todo_tools_without_hooks(tools: &Value) {
    let names = tool_names(tools);
    for tool in ["add", "complete", "list"] {
        assert!(names.iter().any(|n| n == tool), "no {tool} in {names:?}");
    }
    let hooks: Vec<&String> = names.iter().filter(|n| n.starts_with('_')).collect();
    assert!(hooks.is_empty(), "the model was offered hooks: {hooks:?}");
}

/// Once `model` has received `requests` requests, calls `hook` through the proxy's socket in
/// `scratch`'s runtime directory (whatever the host's pid, there is one) and returns the
/// answer: what `hookloop hook` would get on the host's live connection at that moment. The
/// model's next reply must be held back long enough for the call, so the host is still there.
pub async fn hook_once(model: &Loopback, scratch: &Scratch, requests: usize, hook: &str) -> Value {
    use std::io::{BufRead, BufReader, Write};
    let waited = Instant::now();
    while model.requests().len() < requests {
        assert!(
            waited.elapsed() < RUN_LIMIT,
            "the model never got {requests} requests"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hosts: Vec<PathBuf> = std::fs::read_dir(scratch.runtime().join("hookloop-bridge"))
        .expect("the proxy made its directory")
        .map(|entry| entry.unwrap().path().join("todo.sock"))
        .filter(|socket| socket.exists())
        .collect();
    assert_eq!(hosts.len(), 1, "one proxy socket: {hosts:?}");
    let mut stream = std::os::unix::net::UnixStream::connect(&hosts[0]).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = serde_json::json!({"hook": hook, "arguments": {}, "timeout_ms": 2500});
    writeln!(stream, "{request}").unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    serde_json::from_str(&answer).unwrap()
}

/// How long the model holds its reply while the test calls a hook on the live connection.
pub const HELD: Duration = Duration::from_secs(5);

/// Whether `text` occurs anywhere in a JSON value's strings.
pub fn mentions(value: &Value, text: &str) -> bool {
    match value {
        Value::String(s) => s.contains(text),
        Value::Array(items) => items.iter().any(|v| mentions(v, text)),
        Value::Object(fields) => fields.values().any(|v| mentions(v, text)),
        _ => false,
    }
}

/// Asserts the pairing invariant on a request: every answer names a call the request holds, and
/// every call is answered exactly once (a host's request never ends on an open call).
pub fn assert_paired(calls: &[String], answers: &[String], request: usize) {
    for answer in answers {
        assert!(
            calls.contains(answer),
            "request {request}: the result for {answer} answers no call"
        );
    }
    for call in calls {
        let n = answers.iter().filter(|a| *a == call).count();
        assert_eq!(n, 1, "request {request}: call {call} answered {n} times");
    }
}

/// A Messages request's body, checked: the route, the dummy key, and the pairing invariant.
/// Takes `(n, request)` as `enumerate` gives them.
pub fn messages_body((n, request): (usize, &Captured)) -> Value {
    assert_eq!(request.method, "POST");
    assert!(request.path.starts_with("/v1/messages"), "{}", request.path);
    assert_eq!(request.header("x-api-key"), Some("sk-test-key"));
    let body = request.json();
    let (mut calls, mut answers) = (Vec::new(), Vec::new());
    for message in body["messages"].as_array().expect("messages") {
        for block in message["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_use") => calls.push(block["id"].as_str().unwrap().to_owned()),
                Some("tool_result") => {
                    answers.push(block["tool_use_id"].as_str().unwrap().to_owned());
                }
                _ => {}
            }
        }
    }
    assert_paired(&calls, &answers, n);
    body
}

/// The first string in a JSON value that holds `text`.
pub fn string_with<'a>(value: &'a Value, text: &str) -> Option<&'a str> {
    match value {
        Value::String(s) => s.contains(text).then_some(s.as_str()),
        Value::Array(items) => items.iter().find_map(|v| string_with(v, text)),
        Value::Object(fields) => fields.values().find_map(|v| string_with(v, text)),
        _ => None,
    }
}

/// The `tool_result` block answering `id` in a Messages request, if any.
pub fn tool_result<'a>(body: &'a Value, id: &str) -> Option<&'a Value> {
    body["messages"]
        .as_array()?
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)
}

/// Runs `hookloop hooks <args…>` in `scratch`'s project with its HOME (and `envs`), and
/// panics unless it succeeds; returns its stdout.
pub fn hooks_cli(scratch: &Scratch, args: &[&str], envs: &[(&str, &Path)]) -> String {
    let output = std::process::Command::new(binary::hookloop())
        .arg("hooks")
        .args(args)
        .env("HOME", scratch.home())
        .env("XDG_RUNTIME_DIR", scratch.runtime())
        .envs(envs.iter().copied())
        .current_dir(scratch.project())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "hookloop hooks {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
