//! Test support shared by the binary's end-to-end tests: a model provider on 127.0.0.1 that
//! speaks the OpenAI Chat Completions shape and answers from a closure, and helpers to run the
//! `hookloop` binary.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// What the fake model answers to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Text that ends the turn.
    Text(String),
    /// Tool calls, each `(qualified name, arguments)`.
    Tools(Vec<(String, Value)>),
    /// No answer until the client gives up (the test cancels).
    Hang,
    /// Text with this `finish_reason`.
    Stopped(String, &'static str),
    /// Text that ends the turn, streamed in these pieces with a pause before each when the
    /// request asks for a stream (else sent whole after the pauses).
    Stream(Vec<String>, Duration),
    /// Text that ends the turn, streamed in these pieces: the first at once, the others once
    /// the gate is open (else sent whole once it is).
    Held(Vec<String>, Gate),
}

/// A latch a test opens once; replies held by it wait until then.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    pub fn open(&self) {
        *self.0.0.lock().unwrap() = true;
        self.0.1.notify_all();
    }

    fn wait(&self) {
        let mut open = self.0.0.lock().unwrap();
        while !*open {
            open = self.0.1.wait(open).unwrap();
        }
    }
}

impl Reply {
    pub fn text(text: &str) -> Self {
        Self::Text(text.to_owned())
    }

    pub fn tool(name: &str, arguments: Value) -> Self {
        Self::Tools(vec![(name.to_owned(), arguments)])
    }
}

type Answer = dyn Fn(&Value) -> Reply + Send + Sync;

/// A Chat Completions server on 127.0.0.1, one thread per connection.
pub struct FakeProvider {
    pub base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeProvider {
    /// Starts a server answering each request body with `answer`.
    pub fn start(answer: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let answer: Arc<Answer> = Arc::new(answer);
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            let mut n = 0u64;
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (answer, seen) = (Arc::clone(&answer), Arc::clone(&seen));
                n += 1;
                let id = n;
                std::thread::spawn(move || serve(stream, id, &*answer, &seen));
            }
        });
        Self { base_url, requests }
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, id: u64, answer: &Answer, seen: &Mutex<Vec<Value>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    let mut call = 0u64;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
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
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        seen.lock().unwrap().push(request.clone());
        call += 1;
        let reply = answer(&request);
        if request["stream"] == true {
            let streamed = match &reply {
                Reply::Stream(pieces, pause) => Some(stream_sse(&mut stream, id, pieces, &|_| {
                    std::thread::sleep(*pause)
                })),
                Reply::Held(pieces, gate) => Some(stream_sse(&mut stream, id, pieces, &|i| {
                    if i > 0 {
                        gate.wait();
                    }
                })),
                _ => None,
            };
            match streamed {
                Some(Ok(())) => continue,
                Some(Err(_)) => return,
                None => {}
            }
        }
        let message = match reply {
            Reply::Stream(pieces, pause) => {
                std::thread::sleep(pause * u32::try_from(pieces.len()).unwrap_or(1));
                (
                    json!({"role": "assistant", "content": pieces.concat()}),
                    "stop",
                )
            }
            Reply::Held(pieces, gate) => {
                gate.wait();
                (
                    json!({"role": "assistant", "content": pieces.concat()}),
                    "stop",
                )
            }
            Reply::Hang => {
                // Hold the connection until the client drops it.
                std::thread::sleep(Duration::from_secs(600));
                return;
            }
            Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
            Reply::Stopped(text, reason) => (json!({"role": "assistant", "content": text}), reason),
            Reply::Tools(calls) => {
                let calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, arguments))| {
                        json!({
                            "id": format!("call_{id}_{call}_{i}"),
                            "type": "function",
                            "function": {"name": name, "arguments": arguments.to_string()},
                        })
                    })
                    .collect();
                (
                    json!({"role": "assistant", "content": null, "tool_calls": calls}),
                    "tool_calls",
                )
            }
        };
        let body = json!({
            "id": format!("chatcmpl-{id}-{call}"),
            "object": "chat.completion",
            "created": 0,
            "model": request["model"],
            "choices": [{"index": 0, "message": message.0, "finish_reason": message.1}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })
        .to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if stream.write_all(head.as_bytes()).is_err() || stream.write_all(body.as_bytes()).is_err()
        {
            return;
        }
    }
}

/// A streamed Chat Completions answer: a chunk per piece, each after `pause`, then `[DONE]`.
fn stream_sse(
    stream: &mut TcpStream,
    id: u64,
    pieces: &[String],
    before_piece: &dyn Fn(usize),
) -> std::io::Result<()> {
    stream.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    )?;
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion.chunk",
            "created": 0, "model": "loopback",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let mut write_chunk = |text: &str| -> std::io::Result<()> {
        stream.write_all(format!("{:x}\r\n{text}\r\n", text.len()).as_bytes())?;
        stream.flush()
    };
    write_chunk(&chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    ))?;
    for (i, piece) in pieces.iter().enumerate() {
        before_piece(i);
        write_chunk(&chunk(json!({"content": piece}), Value::Null))?;
    }
    write_chunk(&chunk(json!({}), json!("stop")))?;
    write_chunk("data: [DONE]\n\n")?;
    stream.write_all(b"0\r\n\r\n")?;
    stream.flush()
}

/// The text of a message's content: a string, or the text parts of an array.
fn content_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn user_texts(request: &Value) -> impl DoubleEndedIterator<Item = String> + '_ {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(content_text)
}

/// The text of the last user message of a Chat Completions request.
pub fn last_user_text(request: &Value) -> String {
    user_texts(request).next_back().unwrap_or_default()
}

/// The first user message of a request: the prompt, for routing replies per session.
pub fn first_user_text(request: &Value) -> String {
    user_texts(request).next().unwrap_or_default()
}

/// Whether an assistant message of the request called `tool`.
pub fn called(request: &Value, tool: &str) -> bool {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .any(|c| c["function"]["name"] == tool)
}

/// Whether the last message of a request is a tool result (the model sees tool output).
pub fn after_tool(request: &Value) -> bool {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool")
}

/// The hookloop binary under test (`HOOKLOOP_TEST_BIN`, else the one built for these tests).
pub use binary::hookloop;

#[path = "../binary/mod.rs"]
mod binary;

/// A pseudo-terminal, so a test can run the binary with a terminal as its stdout or stderr
/// and read what a person would see, as it is written.
pub struct Pty {
    master: std::fs::File,
    slave: std::fs::File,
}

impl Pty {
    /// Opens a new pseudo-terminal pair.
    pub fn open() -> Self {
        use std::os::fd::FromRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        // SAFETY: plain libc calls on a descriptor this function owns; each result is checked.
        unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(master >= 0, "posix_openpt failed");
            let master = std::fs::File::from_raw_fd(master);
            let fd = std::os::fd::AsRawFd::as_raw_fd(&master);
            assert_eq!(libc::grantpt(fd), 0, "grantpt failed");
            assert_eq!(libc::unlockpt(fd), 0, "unlockpt failed");
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
            let path = std::ffi::CStr::from_ptr(name.as_ptr())
                .to_str()
                .unwrap()
                .to_owned();
            let slave = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY)
                .open(path)
                .unwrap();
            Self { master, slave }
        }
    }

    /// The terminal's side, for a child's stdout or stderr.
    pub fn stdio(&self) -> std::process::Stdio {
        std::process::Stdio::from(self.slave.try_clone().unwrap())
    }

    /// The keyboard's side: what is written here is typed on the terminal.
    pub fn keyboard(&self) -> std::fs::File {
        self.master.try_clone().unwrap()
    }

    /// Starts reading what the terminal shows; call after spawning the child. Everything read
    /// so far is in the returned buffer; the reader ends when the child closes the terminal.
    pub fn reader(self) -> Arc<Mutex<Vec<u8>>> {
        // Our copy of the child's side must go, or the reader never sees the end.
        drop(self.slave);
        let shown = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&shown);
        let mut master = self.master;
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // A read fails (EIO) once the last holder of the other side closes it.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        shown
    }
}
