//! The agent over the wire: a peer speaking raw JSON lines to a running agent.

use std::sync::Mutex as StdMutex;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, DuplexStream, Lines};

use super::*;
use crate::testing::{HookStep, InProcessHost, ScriptedLlm, Step, echo};
use crate::{Config, HookServers};

mod cancel;
mod frames;
mod permission;
mod prompts;
mod sessions;

/// Hands out prepared sessions, one per `session/new`, and records the specs.
struct Prepared {
    sessions: StdMutex<Vec<Session<ScriptedLlm, InProcessHost>>>,
    specs: StdMutex<Vec<SessionSpec>>,
}

impl SessionFactory for Arc<Prepared> {
    type Llm = ScriptedLlm;
    type Host = InProcessHost;
    type Error = String;

    async fn create(
        &self,
        spec: SessionSpec,
    ) -> Result<Created<ScriptedLlm, InProcessHost>, String> {
        self.specs.lock().unwrap().push(spec);
        let mut sessions = self.sessions.lock().unwrap();
        if sessions.is_empty() {
            return Err("no more sessions".into());
        }
        Ok(Created::new(sessions.remove(0)))
    }

    async fn restore(
        &self,
        _spec: SessionSpec,
        _machine: Machine,
    ) -> Result<Created<ScriptedLlm, InProcessHost>, String> {
        Err("these tests record nothing".into())
    }

    fn record_dir(&self) -> Option<&std::path::Path> {
        None
    }
}

struct Peer {
    tx: DuplexStream,
    rx: Lines<tokio::io::BufReader<DuplexStream>>,
    next_id: u64,
    /// Notifications and replies read while waiting for something else.
    backlog: Vec<Value>,
    agent: tokio::task::JoinHandle<Result<(), AcpError>>,
}

fn start(
    sessions: Vec<Session<ScriptedLlm, InProcessHost>>,
    max_frame_bytes: usize,
) -> (Peer, Arc<Prepared>) {
    let options = AgentOptions {
        max_frame_bytes,
        ..AgentOptions::default()
    };
    start_with(sessions, options, 1 << 16)
}

/// An agent with these options, writing to a pipe that holds `pipe` bytes.
fn start_with(
    sessions: Vec<Session<ScriptedLlm, InProcessHost>>,
    options: AgentOptions,
    pipe: usize,
) -> (Peer, Arc<Prepared>) {
    let factory = Arc::new(Prepared {
        sessions: StdMutex::new(sessions),
        specs: StdMutex::new(Vec::new()),
    });
    // One pipe each way: the client writes `tx`, the agent reads its other end, and so on.
    let (tx, agent_in) = tokio::io::duplex(1 << 16);
    let (agent_out, rx) = tokio::io::duplex(pipe);
    let agent = tokio::spawn(serve(Arc::clone(&factory), options, agent_in, agent_out));
    let peer = Peer {
        tx,
        rx: tokio::io::BufReader::new(rx).lines(),
        next_id: 0,
        backlog: Vec::new(),
        agent,
    };
    (peer, factory)
}

impl Peer {
    async fn send_raw(&mut self, line: &str) {
        self.tx.write_all(line.as_bytes()).await.unwrap();
        self.tx.write_all(b"\n").await.unwrap();
    }

    async fn send_request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&frame.to_string()).await;
        id
    }

    async fn notify(&mut self, method: &str, params: Value) {
        let frame = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_raw(&frame.to_string()).await;
    }

    async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.rx.next_line())
            .await
            .expect("the agent answers within 10 s")
            .unwrap()
            .expect("the agent's output is open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Waits for the reply to `id`; returns it and the session updates seen meanwhile
    /// (other frames stay in the backlog).
    async fn reply(&mut self, id: u64) -> (Value, Vec<Value>) {
        let mut updates = Vec::new();
        let mut keep = Vec::new();
        let mut found = None;
        for frame in std::mem::take(&mut self.backlog) {
            if found.is_none() && frame["id"] == json!(id) {
                found = Some(frame);
            } else if found.is_none() && frame["method"] == "session/update" {
                updates.push(frame["params"].clone());
            } else {
                keep.push(frame);
            }
        }
        self.backlog = keep;
        while found.is_none() {
            let frame = self.read().await;
            if frame["id"] == json!(id) && frame.get("method").is_none() {
                found = Some(frame);
            } else if frame["method"] == "session/update" {
                updates.push(frame["params"].clone());
            } else {
                self.backlog.push(frame);
            }
        }
        (found.unwrap(), updates)
    }

    /// Reads frames into the backlog up to and including the first that `seen` accepts.
    async fn read_until(&mut self, seen: impl Fn(&Value) -> bool) {
        loop {
            let frame = self.read().await;
            let done = seen(&frame);
            self.backlog.push(frame);
            if done {
                return;
            }
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        let id = self.send_request(method, params).await;
        self.reply(id).await
    }

    async fn initialize(&mut self) -> Value {
        let (reply, _) = self
            .call(
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": {}}),
            )
            .await;
        reply
    }

    async fn new_session(&mut self) -> String {
        let (reply, _) = self
            .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
            .await;
        reply["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {reply}"))
            .to_owned()
    }

    async fn prompt(&mut self, session: &str, text: &str) -> u64 {
        self.send_request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        )
        .await
    }
}

fn session(
    config: Config,
    llm: ScriptedLlm,
    host: InProcessHost,
) -> Session<ScriptedLlm, InProcessHost> {
    Session::new(config, llm, host)
}

/// A session's configuration as the agent's factory makes it by default: destructive tools
/// ask first.
fn config() -> Config {
    Config::builder()
        .hook_servers(HookServers::All)
        .ask_permission(true)
        .build()
        .unwrap()
}

/// A session's configuration as the agent's factory makes it with permissions `never`.
fn config_without_asking() -> Config {
    Config::builder()
        .hook_servers(HookServers::All)
        .build()
        .unwrap()
}

fn kinds(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .map(|u| {
            let update = &u["update"];
            let kind = update["sessionUpdate"].as_str().unwrap().to_owned();
            // `pending` is the protocol's default status, left out on the wire.
            match (update["status"].as_str(), kind.as_str()) {
                (Some(status), _) => format!("{kind}:{status}"),
                (None, "tool_call") => "tool_call:pending".to_owned(),
                (None, _) => kind,
            }
        })
        .collect()
}
