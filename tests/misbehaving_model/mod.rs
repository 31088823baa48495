//! A scriptable misbehaving model server on 127.0.0.1, for the hostile-peer tests: each request
//! is answered with the bytes a script picks (streams of any shape, streams that never end,
//! giant whole answers), in either dialect, and what it sent is counted.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// What the server answers to one request.
#[derive(Clone, Debug)]
pub enum Script {
    /// An event stream of these bytes; then the connection closes.
    Sse(Vec<u8>),
    /// An event stream that never ends: `head`, then `piece` again and again with `pause`
    /// before each, until the client goes away.
    Endless {
        head: Vec<u8>,
        piece: Vec<u8>,
        pause: Duration,
    },
    /// A whole `application/json` answer of these bytes.
    Whole(Vec<u8>),
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub body: Value,
}

type Pick = dyn Fn(&Seen) -> Script + Send + Sync;

/// The server, one thread per connection.
pub struct MisbehavingModel {
    /// `http://127.0.0.1:<port>`; a client's base URL adds the dialect's prefix (`/v1`).
    pub url: String,
    requests: Arc<Mutex<Vec<Seen>>>,
    /// Answers whose first bytes were written.
    begun: Arc<AtomicUsize>,
    /// Bytes of answers written, headers included.
    sent: Arc<AtomicU64>,
}

impl MisbehavingModel {
    /// Starts a server answering each request with the script `pick` returns.
    pub fn start(pick: impl Fn(&Seen) -> Script + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let begun = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let pick: Arc<Pick> = Arc::new(pick);
        let state = (Arc::clone(&requests), Arc::clone(&begun), Arc::clone(&sent));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let pick = Arc::clone(&pick);
                let state = (
                    Arc::clone(&state.0),
                    Arc::clone(&state.1),
                    Arc::clone(&state.2),
                );
                std::thread::spawn(move || {
                    let _ = serve(stream, &*pick, &state.0, &state.1, &state.2);
                });
            }
        });
        Self {
            url,
            requests,
            begun,
            sent,
        }
    }

    /// The base URL of a Chat Completions client.
    pub fn openai_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.requests.lock().unwrap().clone()
    }

    /// How many answers have begun.
    pub fn begun(&self) -> usize {
        self.begun.load(Ordering::SeqCst)
    }

    /// Bytes written so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }
}

fn serve(
    stream: TcpStream,
    pick: &Pick,
    requests: &Mutex<Vec<Seen>>,
    begun: &AtomicUsize,
    sent: &AtomicU64,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let path = line.split(' ').nth(1).unwrap_or("/").to_owned();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header)? == 0 {
                return Ok(());
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let seen = Seen {
            path,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        requests.lock().unwrap().push(seen.clone());
        let mut write = |bytes: &[u8]| -> std::io::Result<()> {
            stream.write_all(bytes)?;
            stream.flush()?;
            sent.fetch_add(bytes.len() as u64, Ordering::SeqCst);
            Ok(())
        };
        // Streams end with the connection (no length, no chunks); a whole answer has a length
        // and the connection stays for the next request.
        const SSE_HEAD: &[u8] =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        match pick(&seen) {
            Script::Sse(bytes) => {
                write(SSE_HEAD)?;
                begun.fetch_add(1, Ordering::SeqCst);
                // In pieces, as a network delivers them.
                for piece in bytes.chunks(64 * 1024) {
                    write(piece)?;
                }
                return Ok(());
            }
            Script::Endless { head, piece, pause } => {
                write(SSE_HEAD)?;
                write(&head)?;
                begun.fetch_add(1, Ordering::SeqCst);
                loop {
                    std::thread::sleep(pause);
                    write(&piece)?;
                }
            }
            Script::Whole(bytes) => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    bytes.len()
                );
                write(head.as_bytes())?;
                begun.fetch_add(1, Ordering::SeqCst);
                write(&bytes)?;
            }
        }
    }
}

/// One `data:` event.
pub fn data(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// A Chat Completions stream whose one reply opens `calls` tool-call indexes, spread over
/// `events` chunks, then finishes with `tool_calls` and `[DONE]`.
pub fn openai_tool_indexes(calls: usize, events: usize) -> Vec<u8> {
    let per_event = calls.div_ceil(events);
    let mut out = String::new();
    for first in (0..calls).step_by(per_event) {
        let batch: Vec<Value> = (first..(first + per_event).min(calls))
            .map(|i| {
                json!({"index": i, "id": format!("c{i}"), "type": "function",
                       "function": {"name": "t", "arguments": "{}"}})
            })
            .collect();
        out.push_str(&data(
            &json!({"choices": [{"index": 0, "delta": {"tool_calls": batch}}]}),
        ));
    }
    out.push_str(&openai_end("tool_calls"));
    out.into_bytes()
}

/// A Chat Completions stream of one text reply.
pub fn openai_text(text: &str) -> Vec<u8> {
    let mut out = data(&json!({"choices": [{"index": 0, "delta": {"content": text}}]}));
    out.push_str(&openai_end("stop"));
    out.into_bytes()
}

/// The last chunk (finish reason and usage) and `[DONE]`.
pub fn openai_end(finish: &str) -> String {
    let mut out = data(&json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}));
    out.push_str(&data(
        &json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
    ));
    out.push_str("data: [DONE]\n\n");
    out
}

/// A whole Chat Completions answer with `calls` tool calls.
pub fn openai_whole_calls(calls: usize) -> Vec<u8> {
    let calls: Vec<Value> = (0..calls)
        .map(|i| {
            json!({"id": format!("c{i}"), "type": "function",
                   "function": {"name": "t", "arguments": "{}"}})
        })
        .collect();
    json!({"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": calls}}]})
    .to_string()
    .into_bytes()
}

/// A whole Chat Completions answer of `text`.
pub fn openai_whole_text(text: &str) -> Vec<u8> {
    json!({"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    .to_string()
    .into_bytes()
}

/// A Messages stream whose reply opens `blocks` blocks of `kind` (`text` or `tool_use`), each
/// given one delta, then stops.
pub fn anthropic_blocks(blocks: usize, kind: &str) -> Vec<u8> {
    let mut out = anthropic_start();
    for i in 0..blocks {
        let (block, delta) = if kind == "tool_use" {
            (
                json!({"type": "tool_use", "id": format!("t{i}"), "name": "t", "input": {}}),
                json!({"type": "input_json_delta", "partial_json": "{}"}),
            )
        } else {
            (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": "x"}),
            )
        };
        out.push_str(&data(
            &json!({"type": "content_block_start", "index": i, "content_block": block}),
        ));
        out.push_str(&data(
            &json!({"type": "content_block_delta", "index": i, "delta": delta}),
        ));
    }
    out.push_str(&anthropic_end());
    out.into_bytes()
}

/// `message_start`.
pub fn anthropic_start() -> String {
    data(
        &json!({"type": "message_start", "message": {"id": "m", "type": "message",
        "role": "assistant", "content": [], "model": "m", "stop_reason": null,
        "usage": {"input_tokens": 1, "output_tokens": 1}}}),
    )
}

/// `message_delta` and `message_stop`.
pub fn anthropic_end() -> String {
    let mut out = data(&json!({"type": "message_delta",
        "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}));
    out.push_str(&data(&json!({"type": "message_stop"})));
    out
}

/// A whole Messages answer of `text`.
pub fn anthropic_whole_text(text: &str) -> Vec<u8> {
    json!({"id": "m", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1}})
    .to_string()
    .into_bytes()
}

/// The CPU time the calling thread has used.
pub fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a plain libc call writing into a timespec this function owns.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The CPU time (user and system) a process has used, from `/proc/<pid>/stat`.
pub fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_sec)
}

/// The peak resident set of a process (`VmHWM`), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kib * 1024
}
