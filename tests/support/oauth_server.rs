//! The pieces the OAuth-protected test servers share (`tests/mcp_grants.rs`,
//! `tests/mcp_dpop.rs`): one HTTP/1.1 request read from a socket, a JSON answer written back
//! with the connection closed, the MCP side (initialize, the tool list, one `echo` tool), the
//! authorization server's metadata, and a fresh scratch directory.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{Value, json};

/// One request as the server read it; header names lowercased.
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Request {
    /// The value of header `name` (lowercase), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Reads one request from `stream`; `None` when the client went away first.
    pub fn read(stream: &TcpStream) -> Option<Self> {
        let mut reader = BufReader::new(stream.try_clone().ok()?);
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
        let mut headers = Vec::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        Some(Self {
            method,
            path,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

/// Writes `reply` (nothing for `null`) as a JSON answer with `status` and the `extra` header
/// lines (each ending in CRLF), and closes the connection.
pub fn respond(mut stream: TcpStream, status: u16, extra: &str, reply: &Value) {
    let text = if reply.is_null() {
        String::new()
    } else {
        reply.to_string()
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n{extra}\r\n{text}",
        text.len()
    );
}

/// The authorization server's metadata at `base`: a token endpoint taking the
/// client-credentials grant with `client_secret_basic`.
pub fn authorization_metadata(base: &str) -> Value {
    json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
    })
}

/// The MCP side of server `name`: initialize, the tool list, one tool (`echo`, whose texts are
/// kept in `calls`). `None` for a notification.
pub fn mcp(request: &Value, name: &str, calls: &Mutex<Vec<String>>) -> Option<Value> {
    let id = request.get("id")?.clone();
    let result = match request["method"].as_str()? {
        "initialize" => json!({
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": name, "version": "1"},
        }),
        "tools/list" => json!({"tools": [{
            "name": "echo",
            "description": "Echoes its text.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        }]}),
        "tools/call" => {
            let text = request["params"]["arguments"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            calls.lock().unwrap().push(text.clone());
            json!({"content": [{"type": "text", "text": format!("echoed: {text}")}]})
        }
        _ => {
            return Some(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}}),
            );
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// A fresh, empty directory `hookloop-<kind>-<name>-<pid>` under the temporary directory.
pub fn scratch(kind: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hookloop-{kind}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
