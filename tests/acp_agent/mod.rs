//! An ACP client for the end-to-end tests of `hookloop acp`: the binary over stdio, talking to a
//! loopback model, with the JSON-RPC frames it writes read back as JSON.

#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::loopback::{self, FakeProvider};

/// The test MCP server, whose behaviour a `session/new` entry sets through its environment.
pub const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// `hookloop acp` as a child process, with every hook server allowed.
pub struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Frames read while waiting for something else, kept for later replies.
    pub backlog: Vec<Value>,
}

impl Agent {
    /// Starts the agent on `provider`, with `env` on top of the defaults.
    pub fn spawn(provider: &FakeProvider, env: &[(&str, &str)]) -> Self {
        Self::spawn_with(provider, env, |_| {})
    }

    /// Starts the agent, initializes it and opens one session with these `mcpServers`.
    pub async fn start(
        provider: &FakeProvider,
        env: &[(&str, &str)],
        servers: Value,
    ) -> (Self, String) {
        let mut agent = Self::spawn(provider, env);
        agent.initialize().await;
        let session = agent.new_session(servers).await;
        (agent, session)
    }

    /// Like [`Agent::spawn`], with `adjust` applied to the command last.
    pub fn spawn_with(
        provider: &FakeProvider,
        env: &[(&str, &str)],
        adjust: impl FnOnce(&mut Command),
    ) -> Self {
        let mut command = Command::new(loopback::hookloop());
        command
            .arg("acp")
            .env("OPENAI_BASE_URL", &provider.base_url)
            .env("HOOKLOOP_MODEL", "loopback")
            .env("MCP_HOOK_SERVERS", "*")
            .env_remove("HOOKLOOP_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        adjust(&mut command);
        let mut child = command.spawn().expect("the binary starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Self {
            child,
            stdin: Some(stdin),
            stdout,
            next_id: 0,
            backlog: Vec::new(),
        }
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the agent is running")
    }

    /// The agent's stdin, for a client that writes on its own (no longer through `send`).
    pub fn take_stdin(&mut self) -> ChildStdin {
        self.stdin.take().expect("the client is still connected")
    }

    /// Writes `line` (a frame, or anything else) to the agent's stdin.
    pub async fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the client is still connected");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Sends a request; its id.
    pub async fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&frame.to_string()).await;
        id
    }

    /// Sends a notification.
    pub async fn notify(&mut self, method: &str, params: Value) {
        let frame = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_raw(&frame.to_string()).await;
    }

    /// The next frame the agent writes; its stdout must still be open.
    pub async fn read(&mut self) -> Value {
        self.next_frame().await.expect("the agent's stdout is open")
    }

    /// The next frame the agent writes, or `None` once its stdout has ended.
    async fn next_frame(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line())
            .await
            .expect("the agent writes within 30 s")
            .unwrap()?;
        Some(
            serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carries a non-frame ({e}): {line}")),
        )
    }

    /// The reply to `id`, and the updates of every session seen meanwhile.
    pub async fn reply(&mut self, id: u64) -> (Value, Vec<Value>) {
        let is_reply = |frame: &Value| frame["id"] == json!(id) && frame.get("method").is_none();
        let mut updates = Vec::new();
        let mut found = None;
        let mut frames = std::mem::take(&mut self.backlog).into_iter();
        while found.is_none() {
            let frame = match frames.next() {
                Some(frame) => frame,
                None => self.next_frame().await.expect("the agent's stdout is open"),
            };
            if found.is_none() && is_reply(&frame) {
                found = Some(frame);
            } else if frame["method"] == "session/update" {
                updates.push(frame["params"].clone());
            } else {
                self.backlog.push(frame);
            }
        }
        self.backlog.extend(frames);
        (found.expect("found above"), updates)
    }

    /// Reads until an update satisfies `pred`; keeps what it read for later replies.
    pub async fn wait_update(&mut self, pred: impl Fn(&Value) -> bool) {
        loop {
            let frame = self.read().await;
            let hit = frame["method"] == "session/update" && pred(&frame["params"]["update"]);
            self.backlog.push(frame);
            if hit {
                return;
            }
        }
    }

    /// Sends a request and waits for its reply.
    pub async fn call(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.send(method, params).await;
        self.reply(id).await
    }

    pub async fn initialize(&mut self) {
        let (reply, _) = self
            .call(
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": {}}),
            )
            .await;
        assert_eq!(reply["result"]["protocolVersion"], 1, "{reply}");
    }

    /// Opens a session with these `mcpServers`; its id.
    pub async fn new_session(&mut self, servers: Value) -> String {
        let cwd = std::env::temp_dir();
        let (reply, _) = self
            .call("session/new", json!({"cwd": cwd, "mcpServers": servers}))
            .await;
        reply["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("session/new failed: {reply}"))
            .to_owned()
    }

    /// Sends a text prompt; its request id.
    pub async fn prompt(&mut self, session: &str, text: &str) -> u64 {
        let params = json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
        self.send("session/prompt", params).await
    }

    /// Runs one prompt to its end: the reply and the updates that came before it.
    pub async fn prompt_to_end(&mut self, session: &str, text: &str) -> (Value, Vec<Value>) {
        let id = self.prompt(session, text).await;
        self.reply(id).await
    }

    /// Kills the agent with SIGKILL, as an OOM killer or a crash would end it, and waits for it.
    pub async fn kill(mut self) {
        self.child.start_kill().expect("the agent is running");
        let status = self.child.wait().await.unwrap();
        assert!(!status.success(), "{status}");
    }

    /// Ends the connection and checks the agent then exits successfully.
    pub async fn close(mut self) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("the agent exits once stdin ends")
            .unwrap();
        assert!(status.success(), "{status}");
    }

    /// Closes the connection (the client goes away): the frames the agent wrote after the ones
    /// already read, once it has exited, successfully.
    pub async fn disconnect(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let mut frames = std::mem::take(&mut self.backlog);
        while let Some(frame) = self.next_frame().await {
            frames.push(frame);
        }
        let status = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("the agent exits once stdin ends")
            .unwrap();
        assert!(status.success(), "{status}");
        frames
    }
}

/// A `hookloop-test-server` entry of `session/new`, with its behaviour in `env`.
pub fn test_server(name: &str, env: &[(&str, &str)]) -> Value {
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    json!({"name": name, "command": TEST_SERVER, "args": [], "env": env})
}

/// The `tool_call` updates (calls announced) among `updates`, as the update objects.
pub fn tool_calls(updates: &[Value]) -> Vec<&Value> {
    updates
        .iter()
        .map(|u| &u["update"])
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .collect()
}

/// The texts of the agent's thoughts among `updates`.
pub fn thoughts(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == "agent_thought_chunk")
        .map(|u| {
            u["update"]["content"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}
