//! A scripted HTTP/1.1 server on 127.0.0.1: each request it receives is recorded and answered
//! with the next reply of its script, byte for byte as the test wrote it — so a test can send
//! what a real provider sends, and also what no well-behaved one does (garbage, a cut body, an
//! answer that never comes).
//!
//! A request that asks for a stream (`"stream": true`) gets a scripted 200 JSON answer as the
//! dialect would stream it ([`openai_events`], [`anthropic_events`], [`responses_events`]):
//! server-sent events in a
//! chunked body cut at awkward places (inside `data:`, inside a UTF-8 character, between `\r`
//! and `\n`). So every test of a whole answer also runs streamed, and `HOOKLOOP_STREAM=0`
//! runs them whole.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A complete answer with a `content-length`.
    Http {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A `transfer-encoding: chunked` answer of these chunks.
    Chunked { status: u16, chunks: Vec<Vec<u8>> },
    /// These bytes, as they are, then the connection closes.
    Raw(Vec<u8>),
    /// The reply, after a delay.
    Delay(Duration, Box<Reply>),
    /// Close the connection without answering.
    Close,
    /// A `text/event-stream` answer: these events (`event:` name, data), one chunk each, with
    /// a pause between two; then the body ends, after `cut` bytes of the last event if set.
    Events {
        events: Vec<(String, String)>,
        pause: Duration,
        cut: Option<usize>,
    },
}

impl Reply {
    /// 200 with this JSON.
    pub fn json(value: &Value) -> Self {
        Self::status(200, value)
    }

    /// `status` with this JSON.
    pub fn status(status: u16, value: &Value) -> Self {
        Self::Http {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: value.to_string().into_bytes(),
        }
    }

    /// The same reply with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let Self::Http { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// The same reply after `delay`.
    pub fn after(self, delay: Duration) -> Self {
        Self::Delay(delay, Box::new(self))
    }
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Captured {
    pub method: String,
    pub path: String,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Captured {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    seen: Vec<Captured>,
}

/// The server. It runs until the test's runtime ends.
#[derive(Clone)]
pub struct Loopback {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl Loopback {
    /// Starts a server answering with `replies` in turn. Past the script's end it answers 400,
    /// which clients do not retry, so a test that expected fewer requests fails at once.
    pub async fn start(replies: impl IntoIterator<Item = Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            replies: replies.into_iter().collect(),
            seen: Vec::new(),
        }));
        let shared = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    let _ = serve(stream, state).await;
                });
            }
        });
        Self { addr, state }
    }

    /// The base URL, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds replies to the script.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.lock().unwrap().replies.extend(replies);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Captured> {
        self.state.lock().unwrap().seen.clone()
    }

    /// Replies not yet sent.
    pub fn remaining(&self) -> usize {
        self.state.lock().unwrap().replies.len()
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(pos) = find(&buf, b"\r\n\r\n") {
            break pos + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let streamed = serde_json::from_slice::<Value>(&body)
        .ok()
        .filter(|b| b["stream"] == true)
        .map(|_| {
            // Claude Code asks for `/v1/messages?beta=true`: the query does not change the dialect.
            let route = path.split('?').next().unwrap_or_default();
            if route.ends_with("/v1/messages") {
                Dialect::Anthropic
            } else if route.ends_with("/responses") {
                Dialect::Responses
            } else {
                Dialect::OpenAi
            }
        });
    let reply = {
        let mut state = state.lock().unwrap();
        state.seen.push(Captured {
            method,
            path,
            headers,
            body,
        });
        state.replies.pop_front()
    };
    let reply = reply.unwrap_or_else(|| Reply::Http {
        status: 400,
        headers: vec![],
        body: b"loopback: the script is exhausted".to_vec(),
    });
    write_reply(&mut stream, reply, streamed).await
}

/// Which dialect a streamed request speaks, by its path.
#[derive(Clone, Copy)]
enum Dialect {
    OpenAi,
    Anthropic,
    Responses,
}

async fn write_reply(
    stream: &mut TcpStream,
    mut reply: Reply,
    streamed: Option<Dialect>,
) -> std::io::Result<()> {
    while let Reply::Delay(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    if let (
        Some(dialect),
        Reply::Http {
            status: 200, body, ..
        },
    ) = (streamed, &reply)
        && let Ok(answer) = serde_json::from_slice::<Value>(body)
    {
        let events = match dialect {
            Dialect::OpenAi => openai_events(&answer),
            Dialect::Anthropic => anthropic_events(&answer),
            Dialect::Responses => responses_events(&answer),
        };
        let mut sse = Vec::new();
        for (name, data) in events {
            sse.extend_from_slice(sse_event(&name, &data).as_bytes());
        }
        // Awkward cuts: sizes that drift across every boundary the format has.
        let mut chunks = Vec::new();
        let mut rest = &sse[..];
        for size in [1usize, 7, 2, 13, 5, 3].iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (chunk, tail) = rest.split_at((*size).min(rest.len()));
            chunks.push(chunk.to_vec());
            rest = tail;
        }
        return write_chunked(stream, 200, "text/event-stream", chunks, Duration::ZERO).await;
    }
    match reply {
        Reply::Http {
            status,
            headers,
            body,
        } => {
            let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
            for (name, value) in headers {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            out.push_str(&format!(
                "content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            ));
            stream.write_all(out.as_bytes()).await?;
            stream.write_all(&body).await?;
        }
        Reply::Chunked { status, chunks } => {
            return write_chunked(stream, status, "application/json", chunks, Duration::ZERO).await;
        }
        Reply::Events { events, pause, cut } => {
            let mut chunks: Vec<Vec<u8>> = events
                .iter()
                .map(|(name, data)| sse_event(name, data).into_bytes())
                .collect();
            if let (Some(cut), Some(last)) = (cut, chunks.last_mut()) {
                last.truncate(cut);
            }
            return write_chunked(stream, 200, "text/event-stream", chunks, pause).await;
        }
        Reply::Raw(bytes) => stream.write_all(&bytes).await?,
        Reply::Close => {}
        Reply::Delay(..) => unreachable!("delays are unwrapped above"),
    }
    stream.flush().await?;
    stream.shutdown().await
}

/// A chunked answer, each chunk flushed, `pause` between two. The body ends with the last
/// chunk; the terminating zero chunk is sent, so the client sees a clean end.
async fn write_chunked(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    chunks: Vec<Vec<u8>>,
    pause: Duration,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\n\
         transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        reason(status)
    );
    stream.write_all(head.as_bytes()).await?;
    stream.flush().await?;
    for (i, chunk) in chunks.into_iter().enumerate() {
        if i > 0 && !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await?;
        stream.write_all(&chunk).await?;
        stream.write_all(b"\r\n").await?;
        stream.flush().await?;
    }
    stream.write_all(b"0\r\n\r\n").await?;
    stream.flush().await?;
    stream.shutdown().await
}

/// One server-sent event, lines ended by `\r\n`.
pub fn sse_event(name: &str, data: &str) -> String {
    let mut out = String::new();
    if !name.is_empty() {
        out.push_str(&format!("event: {name}\r\n"));
    }
    for line in data.split('\n') {
        out.push_str(&format!("data: {line}\r\n"));
    }
    out.push_str("\r\n");
    out
}

/// Pieces of `text` of about three characters, as a model streams it.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(3).map(|c| c.iter().collect()).collect()
}

/// A Chat Completions answer as the dialect streams it: `chat.completion.chunk`s (role, text
/// in pieces, refusal, each tool call's name then its arguments in two pieces, the finish
/// reason), a last chunk with the usage, and `[DONE]`.
pub fn openai_events(answer: &Value) -> Vec<(String, String)> {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": answer["model"].as_str().unwrap_or("test-model"),
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        (String::new(), chunk.to_string())
    };
    let choice = &answer["choices"][0];
    let message = &choice["message"];
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let text = match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    };
    for piece in pieces(&text) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    if let Some(refusal) = message["refusal"].as_str() {
        events.push(chunk(json!({"refusal": refusal}), Value::Null));
    }
    for (i, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut start = json!({"index": i, "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}});
        if let Some(id) = call.get("id") {
            start["id"] = id.clone();
        }
        events.push(chunk(json!({"tool_calls": [start]}), Value::Null));
        let arguments = match &call["function"]["arguments"] {
            Value::String(raw) => raw.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let half = arguments
            .char_indices()
            .nth(arguments.chars().count() / 2)
            .map_or(arguments.len(), |(i, _)| i);
        for piece in [&arguments[..half], &arguments[half..]] {
            events.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    events.push(chunk(json!({}), choice["finish_reason"].clone()));
    if let Some(usage) = answer.get("usage") {
        let last = json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": answer["model"].as_str().unwrap_or("test-model"),
            "choices": [], "usage": usage,
        });
        events.push((String::new(), last.to_string()));
    }
    events.push((String::new(), "[DONE]".into()));
    events
}

/// A Messages answer as the dialect streams it: `message_start`, each block started, its text
/// or input in pieces, stopped, a `ping`, `message_delta` with the stop reason and output
/// count, `message_stop`.
pub fn anthropic_events(answer: &Value) -> Vec<(String, String)> {
    let event = |kind: &str, value: Value| (kind.to_owned(), value.to_string());
    let mut start = answer.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["stop_sequence"] = Value::Null;
    let mut events = vec![event(
        "message_start",
        json!({"type": "message_start", "message": start}),
    )];
    for (i, block) in answer["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let delta = |delta: Value| {
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": delta}),
            )
        };
        match block["type"].as_str() {
            Some("text") => {
                events.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start",
                    "index": i, "content_block": {"type": "text", "text": ""}}),
                ));
                for piece in pieces(block["text"].as_str().unwrap_or_default()) {
                    events.push(delta(json!({"type": "text_delta", "text": piece})));
                }
            }
            Some("tool_use") => {
                let mut empty = block.clone();
                empty["input"] = json!({});
                events.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start",
                    "index": i, "content_block": empty}),
                ));
                let input = block["input"].to_string();
                let half = input.len() / 2;
                let half = (0..=half)
                    .rev()
                    .find(|&h| input.is_char_boundary(h))
                    .unwrap_or(0);
                for piece in [&input[..half], &input[half..]] {
                    events.push(delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
            _ => {
                events.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start",
                    "index": i, "content_block": block}),
                ));
            }
        }
        events.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        ));
        events.push(event("ping", json!({"type": "ping"})));
    }
    events.push(event(
        "message_delta",
        json!({"type": "message_delta",
        "delta": {"stop_reason": answer["stop_reason"], "stop_sequence": answer["stop_sequence"]},
        "usage": {"output_tokens": answer["usage"]["output_tokens"]}}),
    ));
    events.push(event("message_stop", json!({"type": "message_stop"})));
    events
}

/// A Responses answer (the final `response` object) as the dialect streams it:
/// `response.created`, `response.in_progress`, each output item added, its text or arguments in
/// pieces and done, the item done, then `response.completed` with the whole answer. Every event
/// carries its `sequence_number`.
pub fn responses_events(answer: &Value) -> Vec<(String, String)> {
    let mut events = Vec::new();
    let mut push = |mut value: Value| {
        value["sequence_number"] = json!(events.len());
        let kind = value["type"].as_str().unwrap_or_default().to_owned();
        events.push((kind, value.to_string()));
    };
    let mut started = answer.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    push(json!({"type": "response.created", "response": started}));
    push(json!({"type": "response.in_progress", "response": started}));
    for (i, item) in answer["output"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = item["id"].clone();
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        match item["type"].as_str() {
            Some("message") => {
                added["content"] = json!([]);
                push(
                    json!({"type": "response.output_item.added", "output_index": i, "item": added}),
                );
                for (c, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                    let text = part["text"].as_str().unwrap_or_default();
                    let empty = json!({"type": "output_text", "text": "", "annotations": []});
                    push(json!({"type": "response.content_part.added", "item_id": id,
                        "output_index": i, "content_index": c, "part": empty}));
                    for piece in pieces(text) {
                        push(json!({"type": "response.output_text.delta", "item_id": id,
                            "output_index": i, "content_index": c, "delta": piece}));
                    }
                    push(json!({"type": "response.output_text.done", "item_id": id,
                        "output_index": i, "content_index": c, "text": text}));
                    push(json!({"type": "response.content_part.done", "item_id": id,
                        "output_index": i, "content_index": c, "part": part}));
                }
            }
            Some("function_call") => {
                added["arguments"] = json!("");
                push(
                    json!({"type": "response.output_item.added", "output_index": i, "item": added}),
                );
                let arguments = item["arguments"].as_str().unwrap_or_default();
                let half = arguments
                    .char_indices()
                    .nth(arguments.chars().count() / 2)
                    .map_or(arguments.len(), |(i, _)| i);
                for piece in [&arguments[..half], &arguments[half..]] {
                    push(json!({"type": "response.function_call_arguments.delta",
                        "item_id": id, "output_index": i, "delta": piece}));
                }
                push(
                    json!({"type": "response.function_call_arguments.done", "item_id": id,
                    "output_index": i, "arguments": arguments}),
                );
            }
            _ => push(
                json!({"type": "response.output_item.added", "output_index": i, "item": added}),
            ),
        }
        push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    push(json!({"type": "response.completed", "response": answer}));
    events
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Status",
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
