//! Helpers shared by the MCP integration tests: the test server binary, scratch directories,
//! and reading what a server wrote down.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hookloop::mcp::{HostOptions, McpHost, McpServers, ServerConfig};

/// The test MCP server built by cargo for these tests.
pub const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// A stdio config for the test server with these `TS_*` variables.
pub fn test_server(vars: &[(&str, &str)]) -> ServerConfig {
    vars.iter().fold(
        ServerConfig::stdio(TEST_SERVER, Vec::<String>::new()),
        |config, (k, v)| config.env(*k, *v),
    )
}

/// Options with short timings, so failure paths take milliseconds.
pub fn fast_options() -> HostOptions {
    let options = HostOptions::default().with_startup_timeout(Duration::from_secs(20));
    let max_backoff = options.max_restart_backoff;
    options.with_restart_backoff(Duration::from_millis(20), max_backoff)
}

/// Connects to `servers` (in order), failing the test if any does not start.
pub async fn connect(servers: Vec<(&str, ServerConfig)>, options: HostOptions) -> McpHost {
    let mut list = McpServers::new();
    for (name, config) in servers {
        list = list.with(name, config).expect("valid server name");
    }
    let (host, failures) = McpHost::connect(list, options)
        .await
        .expect("host connects");
    assert!(failures.is_empty(), "servers failed to start: {failures:?}");
    host
}

/// A directory removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "hookloop-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }

    /// A path inside the directory, as text for an environment variable.
    pub fn file(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lines of a file a server appends to; none if it does not exist yet.
pub fn lines(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// How many lines of `path` equal `line`.
pub fn count(path: &str, line: &str) -> usize {
    lines(path).iter().filter(|l| *l == line).count()
}

/// Whether a process is still running (a zombie waiting for its reaper counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits up to `limit` for `condition`.
pub async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits up to `limit` for `condition`, a check that itself waits (a call to a server).
pub async fn eventually_async<F: Future<Output = bool>>(
    limit: Duration,
    mut condition: impl FnMut() -> F,
) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The path of an example binary, built (or found up to date) by cargo on first use: cargo
/// builds examples for `cargo test` but not for `cargo test --test <name>`, and gives tests no
/// `CARGO_BIN_EXE_*` for them.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/examples/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable is in target/<profile>/deps");
    let path = dir.join("examples").join(name);
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !built.iter().any(|b| b == name) {
        let release = dir.file_name().is_some_and(|n| n == "release");
        let mut cargo = std::process::Command::new(env!("CARGO"));
        cargo
            .args(["build", "--quiet", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if release {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("run cargo");
        assert!(status.success(), "cargo build --example {name} failed");
        built.push(name.to_owned());
    }
    path
}

/// The test server over streamable HTTP (or HTTP+SSE) on 127.0.0.1, killed on drop.
pub struct HttpServer {
    child: Child,
    pub url: String,
}

impl HttpServer {
    pub fn start(vars: &[(&str, &str)]) -> Self {
        Self::spawn("TS_HTTP", vars)
    }

    /// The test server over the HTTP+SSE transport of 2024-11-05; `url` is its stream.
    pub fn sse(vars: &[(&str, &str)]) -> Self {
        Self::spawn("TS_SSE", vars)
    }

    fn spawn(mode: &str, vars: &[(&str, &str)]) -> Self {
        let mut command = std::process::Command::new(TEST_SERVER);
        command
            .env(mode, "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        command.envs(vars.iter().copied());
        let mut child = command.spawn().expect("start the http test server");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut url = String::new();
        BufReader::new(stdout).read_line(&mut url).expect("url");
        Self {
            child,
            url: url.trim().to_owned(),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
