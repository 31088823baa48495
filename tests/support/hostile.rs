//! The hostile MCP server of the hostile-peer tests: `TS_HOSTILE=<behaviour>` turns the test
//! server into raw newline-delimited JSON-RPC on stdio that speaks `initialize` (protocol
//! 2025-06-18), lists one tool, `poke`, and misbehaves in one scripted way. It writes what it
//! received to `TS_LOG`, one line each: `list <cursor>`, `call <tool>`, `response <json>` (an
//! answer to one of its own requests), `cancelled`, and `sent <n>` when a flood ends.
//!
//! | behaviour | what it does |
//! |---|---|
//! | `flood:<kind>` | on a call of `poke`, sends messages of `<kind>` as fast as the pipe takes them for `TS_FLOOD_MS` (default 2000) or `TS_FLOOD_COUNT` messages, then answers `ok` |
//! | `endless_pages` | every `tools/list` page holds `TS_PAGE_TOOLS` (default 1000) tools of 1000-byte descriptions and a fresh `nextCursor` |
//! | `endless_pages_after_change` | lists `poke` alone; a call of `poke` is answered, followed by `tools/list_changed`, and from then on pages never end |
//! | `deaf` | stops reading its stdin once it has answered the first `tools/list` |
//! | `trickle` | answers a call one byte every `TS_TRICKLE_MS` (default 1000) |
//! | `giant` | on a call, sends one notification line of `TS_GIANT_MB` (default 64) MiB first |
//! | `elicit_idle` | half a second after it is listed, asks `TS_FLOOD_COUNT` (default 50) questions outside any call; a call of `poke` asks one form question (`TS_SCHEMA`, JSON) and answers with the client's whole answer |
//!
//! `TS_READ_DELAY_US` makes any behaviour read its stdin slowly: it waits that long after each
//! line, so the client's answers to a flood of requests outpace what it reads.
//!
//! Flood kinds: `tools_list_changed`, `resources_list_changed`, `prompts_list_changed`,
//! `progress`, `logging`, `cancelled`, `unknown_notification`, `unknown_response` (answers to
//! ids the client never used), and the requests `ping`, `sampling`, `roots`, `elicitation`,
//! `unknown_request`.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Runs the hostile server until its stdin closes.
pub fn run(behaviour: &str) {
    let server = Arc::new(Hostile {
        behaviour: behaviour.to_owned(),
        out: Mutex::new(std::io::stdout()),
        log: std::env::var("TS_LOG").ok().and_then(|path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .ok()
                .map(Mutex::new)
        }),
        changed: AtomicBool::new(false),
        next_id: AtomicU64::new(1),
        pending: Mutex::new(None),
    });
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = String::new();
    let read_delay = Duration::from_micros(number("TS_READ_DELAY_US", 0));
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !read_delay.is_zero() {
            std::thread::sleep(read_delay);
        }
        let Ok(message) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        if server.handle(&message) {
            // `deaf`: never read again; the client's writes fill the pipe.
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }
}

struct Hostile {
    behaviour: String,
    out: Mutex<std::io::Stdout>,
    log: Option<Mutex<std::fs::File>>,
    /// `endless_pages_after_change`: the list changed, pages never end from now on.
    changed: AtomicBool,
    next_id: AtomicU64,
    /// `elicit_idle`: the id of the call waiting for the answer to its question.
    pending: Mutex<Option<(String, Value)>>,
}

impl Hostile {
    /// Handles one message; true when the server must stop reading.
    fn handle(self: &Arc<Self>, message: &Value) -> bool {
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").cloned();
        match (method, id) {
            (Some(method), Some(id)) => return self.request(method, id, message),
            (Some("notifications/cancelled"), None) => self.log("cancelled"),
            (Some(_), None) => {}
            (None, Some(id)) => self.response(&id, message),
            (None, None) => {}
        }
        false
    }

    fn request(self: &Arc<Self>, method: &str, id: Value, message: &Value) -> bool {
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match method {
            "initialize" => {
                self.answer(
                    &id,
                    json!({
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {"listChanged": true}, "logging": {}},
                        "serverInfo": {"name": "hostile", "version": "0"},
                    }),
                );
            }
            "ping" => self.answer(&id, json!({})),
            "tools/list" => {
                let cursor = params.get("cursor").and_then(Value::as_str).unwrap_or("");
                self.log(&format!("list {cursor}"));
                let page = self.page(cursor);
                self.answer(&id, page);
                if self.behaviour == "deaf" {
                    return true;
                }
                if self.behaviour == "elicit_idle" && cursor.is_empty() {
                    // Once the client has settled in (its person set), while no call runs.
                    let server = Arc::clone(self);
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(500));
                        server.ask_idle();
                    });
                }
            }
            "tools/call" => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                self.log(&format!("call {name}"));
                self.call(id, &params);
            }
            _ => {
                self.send(&json!({
                    "jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": format!("no method {method}")},
                }));
            }
        }
        false
    }

    fn page(&self, cursor: &str) -> Value {
        let endless = match self.behaviour.as_str() {
            "endless_pages" => true,
            "endless_pages_after_change" => self.changed.load(Ordering::Acquire),
            _ => false,
        };
        if !endless {
            return json!({"tools": [tool("poke", "Pokes the server.")]});
        }
        let per_page: usize = number("TS_PAGE_TOOLS", 1000);
        let page: u64 = cursor.parse().unwrap_or(0);
        let description = "d".repeat(1000);
        let tools: Vec<Value> = (0..per_page)
            .map(|i| tool(&format!("t{page}_{i}"), &description))
            .collect();
        json!({"tools": tools, "nextCursor": (page + 1).to_string()})
    }

    fn call(self: &Arc<Self>, id: Value, params: &Value) {
        let ok = json!({"content": [{"type": "text", "text": "ok"}]});
        match self.behaviour.as_str() {
            kind if kind.starts_with("flood:") => {
                let kind = kind["flood:".len()..].to_owned();
                let token = params
                    .pointer("/_meta/progressToken")
                    .cloned()
                    .unwrap_or(json!("p"));
                let server = Arc::clone(self);
                std::thread::spawn(move || {
                    let sent = server.flood(&kind, &token);
                    server.log(&format!("sent {sent}"));
                    server.answer(&id, ok);
                });
            }
            "endless_pages_after_change" => {
                self.answer(&id, ok);
                self.changed.store(true, Ordering::Release);
                self.notify("notifications/tools/list_changed", json!({}));
            }
            "trickle" => {
                let every = Duration::from_millis(number("TS_TRICKLE_MS", 1000));
                let server = Arc::clone(self);
                std::thread::spawn(move || {
                    let bytes = response(&id, ok).to_string();
                    let mut out = server.out.lock().expect("stdout lock");
                    for byte in bytes.bytes().chain(std::iter::once(b'\n')) {
                        if out.write_all(&[byte]).and_then(|()| out.flush()).is_err() {
                            return;
                        }
                        std::thread::sleep(every);
                    }
                });
            }
            "giant" => {
                let mib: usize = number("TS_GIANT_MB", 64);
                let mut out = self.out.lock().expect("stdout lock");
                let head = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":""#;
                let _ = out.write_all(head);
                let chunk = vec![b'g'; 1024 * 1024];
                for _ in 0..mib {
                    let _ = out.write_all(&chunk);
                }
                let _ = out.write_all(b"\"}}\n");
                drop(out);
                self.answer(&id, ok);
            }
            "elicit_idle" => {
                let schema: Value = std::env::var("TS_SCHEMA")
                    .ok()
                    .and_then(|s| serde_json::from_str(&s).ok())
                    .unwrap_or(json!({"type": "object", "properties": {}}));
                let ask = self.next_id.fetch_add(1, Ordering::Relaxed);
                let ask_id = format!("call-ask-{ask}");
                *self.pending.lock().expect("pending lock") = Some((ask_id.clone(), id));
                self.send(&json!({
                    "jsonrpc": "2.0", "id": ask_id, "method": "elicitation/create",
                    "params": {"message": "Your details?", "requestedSchema": schema},
                }));
            }
            _ => self.answer(&id, ok),
        }
    }

    /// `elicit_idle`: questions while no call runs.
    fn ask_idle(&self) {
        let count: u64 = number("TS_FLOOD_COUNT", 50);
        for _ in 0..count {
            let n = self.next_id.fetch_add(1, Ordering::Relaxed);
            self.send(&json!({
                "jsonrpc": "2.0", "id": format!("idle-{n}"), "method": "elicitation/create",
                "params": {"message": "Anything?", "requestedSchema": {"type": "object", "properties": {}}},
            }));
        }
    }

    fn response(&self, id: &Value, message: &Value) {
        let body = message.get("result").or_else(|| message.get("error"));
        let body = body.cloned().unwrap_or(Value::Null);
        self.log(&format!("response {}", json!({"id": id, "body": body})));
        let pending = {
            let mut pending = self.pending.lock().expect("pending lock");
            match pending.take() {
                Some((ask, call)) if json!(ask) == *id => Some(call),
                other => {
                    *pending = other;
                    None
                }
            }
        };
        if let Some(call) = pending {
            let text = body.to_string();
            self.answer(&call, json!({"content": [{"type": "text", "text": text}]}));
        }
    }

    /// Sends messages of `kind` until the flood's time or count runs out; how many it sent.
    fn flood(&self, kind: &str, token: &Value) -> u64 {
        let until = Instant::now() + Duration::from_millis(number("TS_FLOOD_MS", 2000));
        let count: u64 = number("TS_FLOOD_COUNT", u64::MAX);
        let mut sent = 0;
        while sent < count && Instant::now() < until {
            let n = self.next_id.fetch_add(1, Ordering::Relaxed);
            let message = match kind {
                "tools_list_changed" => notification("notifications/tools/list_changed", json!({})),
                "resources_list_changed" => {
                    notification("notifications/resources/list_changed", json!({}))
                }
                "prompts_list_changed" => {
                    notification("notifications/prompts/list_changed", json!({}))
                }
                "progress" => notification(
                    "notifications/progress",
                    json!({"progressToken": token, "progress": n, "message": "x".repeat(512)}),
                ),
                "logging" => notification(
                    "notifications/message",
                    json!({"level": "info", "data": "x".repeat(1024)}),
                ),
                "cancelled" => notification(
                    "notifications/cancelled",
                    json!({"requestId": n, "reason": "flood"}),
                ),
                "unknown_notification" => {
                    notification("notifications/hostile/unknown", json!({"n": n}))
                }
                "unknown_response" => json!({"jsonrpc": "2.0", "id": 1_000_000 + n, "result": {}}),
                "ping" => request(n, "ping", json!({})),
                "sampling" => request(
                    n,
                    "sampling/createMessage",
                    json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 10}),
                ),
                "roots" => request(n, "roots/list", json!({})),
                "elicitation" => request(
                    n,
                    "elicitation/create",
                    json!({"message": "?", "requestedSchema": {"type": "object", "properties": {}}}),
                ),
                "unknown_request" => request(n, "hostile/unknown", json!({})),
                other => panic!("unknown flood kind {other}"),
            };
            if !self.send(&message) {
                break;
            }
            sent += 1;
        }
        sent
    }

    fn answer(&self, id: &Value, result: Value) {
        self.send(&response(id, result));
    }

    fn notify(&self, method: &str, params: Value) {
        self.send(&notification(method, params));
    }

    /// Writes one message; false once stdout is gone.
    fn send(&self, message: &Value) -> bool {
        let mut bytes = message.to_string().into_bytes();
        bytes.push(b'\n');
        let mut out = self.out.lock().expect("stdout lock");
        out.write_all(&bytes).and_then(|()| out.flush()).is_ok()
    }

    fn log(&self, line: &str) {
        if let Some(file) = &self.log {
            let mut file = file.lock().expect("log lock");
            let _ = writeln!(file, "{line}");
        }
    }
}

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object"}})
}

fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

fn request(n: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": format!("h{n}"), "method": method, "params": params})
}

fn number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
