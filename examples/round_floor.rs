//! The floor under `scripts/cpu_per_round.sh`: the least an agent can do per round of that
//! session, as one thread with blocking system calls and nothing else.
//!
//! It speaks just enough of the script's three conversations to be measured by it: the ACP lines
//! the script sends (`initialize`, `session/new`, `session/prompt`), MCP over stdio to the todo
//! server it is given (the handshake, then per round `_PreToolUse` and the tool call, and `_Stop`
//! at the end), and Chat Completions over HTTP/1.1 keep-alive to the script's model. Each round
//! it sends what the engine sends: the whole history (each message encoded once, appended), three
//! `session/update` lines (the call pending, in progress, completed), two MCP calls. It has no timeouts, no cancellation, no hooks beyond
//! those two, no supervision and no concurrency: what it costs per round is what the operating
//! system and the peers charge for the round's I/O, plus a minimal encoding and decoding. The
//! engine cannot cost less than this on the same machine; how far above it is the measure.
//!
//! ```text
//! cargo build --release --example round_floor --bin hookloop
//! HOOKLOOP_BIN=target/release/examples/round_floor HOOKLOOP_TODO_BIN=target/release/hookloop \
//!     scripts/cpu_per_round.sh 1000 200
//! ```

use std::borrow::Cow;
use std::io::{self, BufRead, BufReader, IoSlice, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let stdin = io::stdin().lock();
    let mut stdout = io::stdout().lock();
    let mut lines = stdin.lines();
    let mut session: Option<Session> = None;
    while let Some(line) = lines.next().transpose()? {
        let frame: Value = serde_json::from_str(&line)?;
        let id = frame["id"].clone();
        let result = match frame["method"].as_str() {
            Some("initialize") => json!({"protocolVersion": 1, "agentCapabilities": {}}),
            Some("session/new") => {
                let server = &frame["params"]["mcpServers"][0];
                session = Some(Session::start(server)?);
                json!({"sessionId": "floor"})
            }
            Some("session/prompt") => {
                let text = frame["params"]["prompt"][0]["text"]
                    .as_str()
                    .unwrap_or_default();
                let session = session
                    .as_mut()
                    .ok_or("session/prompt before session/new")?;
                session.prompt(text, &mut stdout)?;
                json!({"stopReason": "end_turn"})
            }
            _ => continue,
        };
        writeln!(
            stdout,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        )?;
        stdout.flush()?;
    }
    if let Some(mut session) = session {
        drop(session.mcp_in);
        session.child.wait()?;
    }
    Ok(())
}

struct Session {
    child: Child,
    mcp_in: ChildStdin,
    mcp_out: BufReader<ChildStdout>,
    next_id: u64,
    model: TcpStream,
    model_in: BufReader<TcpStream>,
    host: String,
    /// The request body's messages, each encoded once, comma-separated.
    messages: Vec<u8>,
    /// The request body after the messages: `],"tools":[…],"model":…}`, encoded once.
    tail: Vec<u8>,
}

impl Session {
    fn start(server: &Value) -> Result<Self, Error> {
        let command = server["command"]
            .as_str()
            .ok_or("the MCP server has no command")?;
        let args: Vec<&str> = server["args"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut child = Command::new(command)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mcp_in = child.stdin.take().ok_or("no stdin")?;
        let mcp_out = BufReader::with_capacity(1 << 16, child.stdout.take().ok_or("no stdout")?);
        let base = std::env::var("OPENAI_BASE_URL")?;
        let authority = base
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .ok_or("OPENAI_BASE_URL must be http://host:port/…")?
            .to_owned();
        let model = TcpStream::connect(&authority)?;
        model.set_nodelay(true)?;
        let model_in = BufReader::with_capacity(1 << 16, model.try_clone()?);
        let mut session = Self {
            child,
            mcp_in,
            mcp_out,
            next_id: 0,
            model,
            model_in,
            host: authority,
            messages: Vec::new(),
            tail: Vec::new(),
        };
        session.call(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "round-floor", "version": "0"}}),
        )?;
        session
            .mcp_in
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")?;
        let listed: Value = serde_json::from_str(session.call("tools/list", json!({}))?.get())?;
        let tools: Vec<Value> = listed["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| !t["name"].as_str().unwrap_or("_").starts_with('_'))
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": format!("todo__{}", t["name"].as_str().unwrap_or_default()),
                    "description": t["description"], "parameters": t["inputSchema"]}})
            })
            .collect();
        session.tail = format!(
            "],\"tools\":{},\"model\":\"scripted\"}}",
            Value::Array(tools)
        )
        .into_bytes();
        Ok(session)
    }

    /// One MCP request and its answer's `result`, in line order (the todo server answers in
    /// order). The line is written in one system call.
    fn call(&mut self, method: &str, params: impl Serialize) -> Result<Box<RawValue>, Error> {
        self.next_id += 1;
        let mut line = Vec::with_capacity(256);
        write!(
            line,
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":",
            self.next_id
        )?;
        serde_json::to_writer(&mut line, method)?;
        line.extend_from_slice(b",\"params\":");
        serde_json::to_writer(&mut line, &params)?;
        line.extend_from_slice(b"}\n");
        self.mcp_in.write_all(&line)?;
        let mut answer = String::new();
        loop {
            answer.clear();
            if self.mcp_out.read_line(&mut answer)? == 0 {
                return Err("the MCP server closed its output".into());
            }
            #[derive(Deserialize)]
            struct Answer {
                id: Option<u64>,
                result: Option<Box<RawValue>>,
            }
            let frame: Answer = serde_json::from_str(&answer)?;
            if frame.id == Some(self.next_id) {
                return frame.result.ok_or_else(|| "an MCP call failed".into());
            }
        }
    }

    /// Appends one message, already encoded, to the history.
    fn push(&mut self, encoded: &[u8]) {
        if !self.messages.is_empty() {
            self.messages.push(b',');
        }
        self.messages.extend_from_slice(encoded);
    }

    fn prompt(&mut self, text: &str, acp: &mut impl Write) -> Result<(), Error> {
        let user = serde_json::to_vec(&json!({"role": "user", "content": text}))?;
        self.push(&user);
        let mut line = Vec::with_capacity(512);
        loop {
            let body = self.ask()?;
            #[derive(Deserialize)]
            struct Reply<'a> {
                #[serde(borrow)]
                choices: Vec<Choice<'a>>,
            }
            #[derive(Deserialize)]
            struct Choice<'a> {
                #[serde(borrow)]
                message: &'a RawValue,
            }
            #[derive(Deserialize)]
            struct Message<'a> {
                #[serde(default, borrow)]
                tool_calls: Vec<Call<'a>>,
            }
            #[derive(Deserialize)]
            struct Call<'a> {
                #[serde(borrow)]
                id: Cow<'a, str>,
                #[serde(borrow)]
                function: Function<'a>,
            }
            #[derive(Deserialize)]
            struct Function<'a> {
                #[serde(borrow)]
                name: Cow<'a, str>,
                #[serde(borrow)]
                arguments: Cow<'a, str>,
            }
            let reply: Reply = serde_json::from_slice(&body)?;
            let raw = reply
                .choices
                .first()
                .ok_or("the model's answer has no choice")?
                .message;
            // The model's message goes into the history as it came.
            self.push(raw.get().as_bytes());
            let message: Message = serde_json::from_str(raw.get())?;
            if message.tool_calls.is_empty() {
                self.call("tools/call", json!({"name": "_Stop", "arguments": {}}))?;
                return Ok(());
            }
            for call in &message.tool_calls {
                let (id, name) = (&*call.id, &*call.function.name);
                let arguments: &RawValue = serde_json::from_str(&call.function.arguments)?;
                start_update(&mut line, "tool_call", id)?;
                line.extend_from_slice(b",\"title\":");
                serde_json::to_writer(&mut line, name)?;
                line.extend_from_slice(b",\"status\":\"pending\"}}}\n");
                acp.write_all(&line)?;
                acp.flush()?;
                #[derive(Serialize)]
                struct Pre<'a> {
                    name: &'static str,
                    arguments: PreArguments<'a>,
                }
                #[derive(Serialize)]
                struct PreArguments<'a> {
                    tool: &'a str,
                    arguments: &'a RawValue,
                }
                let pre = Pre {
                    name: "_PreToolUse",
                    arguments: PreArguments {
                        tool: name,
                        arguments,
                    },
                };
                self.call("tools/call", pre)?;
                start_update(&mut line, "tool_call_update", id)?;
                line.extend_from_slice(b",\"status\":\"in_progress\"}}}\n");
                acp.write_all(&line)?;
                acp.flush()?;
                #[derive(Serialize)]
                struct Tool<'a> {
                    name: &'a str,
                    arguments: &'a RawValue,
                }
                let bare = name.strip_prefix("todo__").unwrap_or(name);
                let result = self.call(
                    "tools/call",
                    Tool {
                        name: bare,
                        arguments,
                    },
                )?;
                #[derive(Deserialize)]
                struct ToolResult {
                    content: Vec<Content>,
                }
                #[derive(Deserialize)]
                struct Content {
                    text: Option<String>,
                }
                let result: ToolResult = serde_json::from_str(result.get())?;
                let text = result
                    .content
                    .into_iter()
                    .find_map(|c| c.text)
                    .unwrap_or_default();
                start_update(&mut line, "tool_call_update", id)?;
                line.extend_from_slice(
                    b",\"status\":\"completed\",\"content\":[{\"type\":\"content\",\
                      \"content\":{\"type\":\"text\",\"text\":",
                );
                serde_json::to_writer(&mut line, &text)?;
                line.extend_from_slice(b"}}]}}}\n");
                acp.write_all(&line)?;
                acp.flush()?;
                line.clear();
                line.extend_from_slice(b"{\"role\":\"tool\",\"tool_call_id\":");
                serde_json::to_writer(&mut line, id)?;
                line.extend_from_slice(b",\"content\":");
                serde_json::to_writer(&mut line, &text)?;
                line.push(b'}');
                let tool = std::mem::take(&mut line);
                self.push(&tool);
                line = tool;
            }
        }
    }

    /// One Chat Completions request: the head and the body's pieces in one `writev`; the
    /// answer's body.
    fn ask(&mut self) -> Result<Vec<u8>, Error> {
        const HEAD: &[u8] = b"{\"messages\":[";
        let length = HEAD.len() + self.messages.len() + self.tail.len();
        let header = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             authorization: Bearer none\r\ncontent-length: {length}\r\n\r\n",
            self.host
        );
        let mut pieces = [
            IoSlice::new(header.as_bytes()),
            IoSlice::new(HEAD),
            IoSlice::new(&self.messages),
            IoSlice::new(&self.tail),
        ];
        let mut pieces = &mut pieces[..];
        while !pieces.is_empty() {
            let n = self.model.write_vectored(pieces)?;
            if n == 0 {
                return Err("the model closed the connection".into());
            }
            IoSlice::advance_slices(&mut pieces, n);
        }
        let mut length = None;
        let mut line = String::new();
        loop {
            line.clear();
            if self.model_in.read_line(&mut line)? == 0 {
                return Err("the model closed the connection".into());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = Some(value.trim().parse::<usize>()?);
            }
        }
        let mut body = vec![0; length.ok_or("the model's answer has no content-length")?];
        self.model_in.read_exact(&mut body)?;
        Ok(body)
    }
}

/// Starts a `session/update` line of `kind` for the tool call `id` in `line`, cleared first; the
/// caller writes the update's other fields and closes it.
fn start_update(line: &mut Vec<u8>, kind: &str, id: &str) -> serde_json::Result<()> {
    line.clear();
    line.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":\
          {\"sessionId\":\"floor\",\"update\":{\"sessionUpdate\":",
    );
    serde_json::to_writer(&mut *line, kind)?;
    line.extend_from_slice(b",\"toolCallId\":");
    serde_json::to_writer(line, id)
}
