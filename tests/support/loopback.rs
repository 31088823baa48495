//! A scripted HTTP/1.1 server on 127.0.0.1: each request it receives is recorded and answered
//! with the next reply of its script, byte for byte as the test wrote it — so a test can send
//! what a real provider sends, and also what no well-behaved one does (garbage, a cut body, an
//! answer that never comes).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
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
    write_reply(&mut stream, reply).await
}

async fn write_reply(stream: &mut TcpStream, mut reply: Reply) -> std::io::Result<()> {
    while let Reply::Delay(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
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
            let head = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\n\
                 transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
                reason(status)
            );
            stream.write_all(head.as_bytes()).await?;
            for chunk in chunks {
                stream
                    .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .await?;
                stream.write_all(&chunk).await?;
                stream.write_all(b"\r\n").await?;
            }
            stream.write_all(b"0\r\n\r\n").await?;
        }
        Reply::Raw(bytes) => stream.write_all(&bytes).await?,
        Reply::Close => {}
        Reply::Delay(..) => unreachable!("delays are unwrapped above"),
    }
    stream.flush().await?;
    stream.shutdown().await
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
