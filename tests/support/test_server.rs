//! `hookloop-test-server`: an MCP server (rmcp's server side) whose behaviour the tests set
//! through its environment. Over stdio by default; over streamable HTTP with `TS_HTTP`; over the
//! HTTP+SSE transport of 2024-11-05 with `TS_SSE`.
//!
//! | variable | effect |
//! |---|---|
//! | `TS_HOOKS` | hooks it lists, comma-separated (`_Stop,_PostCompact`); none by default |
//! | `TS_STOP`, `TS_POST_COMPACT`, … | a hook's answers, one step per call, `\|`-separated: `TS_` and the hook's name in upper snake case (`_PreToolUse`: `TS_PRE_TOOL_USE`) |
//! | `TS_THEN` | the step once a script runs out (default `empty`) |
//! | `TS_STATE_DIR` | keep the script position in files here, so it survives restarts |
//! | `TS_EXTRA_TOOLS` | more tool names, comma-separated (invalid or duplicate ones too); `write` listed so writes `{"text"}` to `{"path"}` (relative to its directory) |
//! | `TS_TOOL_COUNT` | this many more tools, `t0`, `t1`… |
//! | `TS_LOG` | append `call <tool>`, `meta <json>`, `args <json>` (a hook's arguments), `traceparent <tool> <value>` (a call's W3C trace context in `_meta`) and `cancelled` (a hung call was) lines here |
//! | `TS_PID_FILE` | append this process's pid at start |
//! | `TS_GRANDCHILD_FILE` | start a `sleep` grandchild and append its pid here |
//! | `TS_SERIAL` | handle one tool call at a time, like a single-threaded server |
//! | `TS_STARTUP` | `fail` (exit at once), `hang` (never answer), `slow:MS` (wait first) or `wait:PATH` (wait until PATH exists) |
//! | `TS_ENV_FILE` | write the environment it got, one `NAME=value` a line |
//! | `TS_HTTP` | serve streamable HTTP on this address; print `http://<addr>/mcp` first |
//! | `TS_LEGACY` | speak protocol versions up to 2025-11-25 only (`initialize`, server requests) |
//! | `TS_SSE` | serve HTTP+SSE on this address (a GET of `/sse` opens a session's stream, whose first event names `/messages?session=N`; a POST of `/sse` is refused with 405, as servers of that transport do); print `http://<addr>/sse` first; list `flood` and `drop_stream` too |
//! | `TS_SSE_ENDPOINT` | over HTTP+SSE, the `endpoint` event's data instead (`never`: send none) |
//! | `TS_SSE_REFUSE` | over HTTP+SSE, how a POST of `/sse` is refused: `405` (default), `404`, `400`, or `400-jsonrpc` (with a JSON-RPC error body, as a modern server refuses) |
//! | `TS_HOSTILE` | be the hostile server of [`hostile`] instead (raw JSON-RPC on stdio, misbehaving as named) |
//! | `TS_ASK_URL` | the URL the `ask_url` tool asks the person to visit (default `https://example.invalid/sign-in`) |
//! | `TS_PARAM_HEADERS` | also list `param_headers` (properties marked `x-mcp-header`) and `bad_header` (an invalid mark); over HTTP, log `params <json>` (the `Mcp-Param-*` headers, names lowercased) for each `tools/call` |
//!
//! Steps: `say:TEXT`, `empty`, `hang` (until cancelled), `crash` (exit 3), `error:TEXT` (an
//! `isError` result), `rpcerror` (a JSON-RPC error), `big` (1 MiB of text), `slow:MS:TEXT`,
//! `after:PATH:TEXT` (says TEXT once PATH exists), `link` (a lone resource link), `image` (a lone image), `ask` (asks the person as the `ask`
//! tool does, and says the answer).
//!
//! Tools: `echo` (its arguments back), `big`, `image` (a small image, or `{"kib": N}` KiB of
//! base64; `{"count": N}`: N of them, empty unless `kib` is given), `big_image` (2 MiB of base64 and a
//! small image after it), `fail` (`isError`), `crash`, `hang`,
//! `slow` (`{"ms": N}`), `add_tool` (lists `extra` from then on and says `list_changed`),
//! `ask` (a form elicitation; says `accept <content>`, `decline` or `cancel`), `ask_url` (a URL
//! elicitation, the same), `roots` (the client's root URIs, one a line), `app_only` (visible
//! to an MCP App's interface only). Questions go as requests of their own before 2026-07-28,
//! in `input_required` rounds from it on. A `roots/list_changed` from the client logs
//! `roots_changed`.
//! `remove` (marked `destructiveHint: true`, so a front end that asks before destructive tools
//! asks about it; answers `removed` and its arguments).
//! Over HTTP+SSE: `flood` (an event of 16 MiB and one byte goes on the stream before its
//! answer), `drop_stream` (the session's stream ends instead of an answer); with `TS_LOG`,
//! `get x-test=… authorization=…` and `post x-test=… authorization=…` lines for each GET of the
//! stream and each POST of a message.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ImageContent,
    InputRequest, InputRequests, InputRequiredResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, ServerRequest, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};

#[derive(Clone)]
struct TestServer {
    inner: Arc<Inner>,
}

struct Inner {
    hooks: Vec<String>,
    extra: Vec<String>,
    added: AtomicBool,
    /// Each hook's position in its script.
    counters: Mutex<HashMap<String, usize>>,
    serial: tokio::sync::Mutex<()>,
    is_serial: bool,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn log(line: &str) {
    if let Some(path) = env("TS_LOG") {
        append(&path, line);
    }
}

fn append(path: &str, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    writeln!(file, "{line}").unwrap_or_else(|e| panic!("write {path}: {e}"));
}

fn text(text: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text.into())]).into()
}

impl TestServer {
    fn new() -> Self {
        let list = |name: &str| -> Vec<String> {
            env(name)
                .map(|v| v.split(',').map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let mut extra = list("TS_EXTRA_TOOLS");
        let count: usize = env("TS_TOOL_COUNT").map_or(0, |n| n.parse().expect("TS_TOOL_COUNT"));
        extra.extend((0..count).map(|i| format!("t{i}")));
        Self {
            inner: Arc::new(Inner {
                hooks: list("TS_HOOKS"),
                extra,
                added: AtomicBool::new(false),
                counters: Mutex::new(HashMap::new()),
                serial: tokio::sync::Mutex::new(()),
                is_serial: env("TS_SERIAL").is_some(),
            }),
        }
    }

    /// The next step of `hook`'s script.
    fn next_step(&self, hook: &str) -> String {
        let var = script_var(hook);
        let n = match env("TS_STATE_DIR") {
            Some(dir) => {
                let path = format!("{dir}/{hook}.count");
                let n: usize = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0);
                std::fs::write(&path, (n + 1).to_string()).expect("state file");
                n
            }
            None => {
                let mut counters = self.inner.counters.lock().expect("counters");
                let n = counters.entry(hook.to_owned()).or_default();
                *n += 1;
                *n - 1
            }
        };
        let script = env(&var).unwrap_or_default();
        script
            .split('|')
            .filter(|s| !s.is_empty())
            .nth(n)
            .map(str::to_owned)
            .unwrap_or_else(|| env("TS_THEN").unwrap_or_else(|| "empty".into()))
    }

    async fn run_step(
        &self,
        step: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (kind, rest) = step.split_once(':').unwrap_or((step, ""));
        match kind {
            "say" => Ok(text(rest)),
            "empty" => Ok(text("")),
            "hang" => Err(hang(context).await),
            "crash" => std::process::exit(3),
            "error" => Ok(CallToolResult::error(vec![ContentBlock::text(rest)]).into()),
            "rpcerror" => Err(ErrorData::internal_error("scripted failure", None)),
            "big" => Ok(text("b".repeat(1 << 20))),
            "link" => Ok(CallToolResult::success(vec![ContentBlock::resource_link(
                rmcp::model::Resource::new("file:///report.txt", "report"),
            )])
            .into()),
            "image" => Ok(
                CallToolResult::success(vec![ContentBlock::Image(ImageContent::new(
                    "aGVsbG8=",
                    "image/png",
                ))])
                .into(),
            ),
            "slow" => {
                let (ms, said) = rest.split_once(':').unwrap_or((rest, ""));
                let ms: u64 = ms.parse().expect("slow:MS:TEXT");
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(text(said))
            }
            "after" => {
                let (path, said) = rest.split_once(':').unwrap_or((rest, ""));
                while !std::path::Path::new(path).exists() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok(text(said))
            }
            other => panic!("unknown step {other:?}"),
        }
    }

    fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            "echo",
            "big",
            "image",
            "big_image",
            "fail",
            "crash",
            "hang",
            "slow",
            "add_tool",
            "ask",
            "ask_url",
            "roots",
            "app_only",
            "remove",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        if env("TS_SSE").is_some() {
            names.extend(["flood".to_owned(), "drop_stream".to_owned()]);
        }
        names.extend(self.inner.hooks.iter().cloned());
        names.extend(self.inner.extra.iter().cloned());
        if self.inner.added.load(Ordering::SeqCst) {
            names.push("extra".into());
        }
        names
    }
}

/// The form the `ask` tool and step put to the person: one name, with a default.
fn form_question() -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form",
        "message": "What is your name?",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string", "default": "Ada"}},
            "required": ["name"]
        }
    }})
}

/// Where a question to the client stands.
enum Asked {
    /// The client's answer, as JSON.
    Answer(Value),
    /// Return this to the client first: it asks the question (2026-07-28 on).
    Pending(CallToolResponse),
}

/// Asks the client `question` (a request as JSON) under `key`: as a request of its own before
/// 2026-07-28, in an `input_required` round from it on.
async fn ask(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    key: &str,
    question: Value,
) -> Result<Asked, ErrorData> {
    let legacy = context
        .protocol_version()
        .is_none_or(|version| version.has_initialize());
    if legacy {
        let request: ServerRequest = serde_json::from_value(question)
            .map_err(|e| ErrorData::internal_error(format!("bad question: {e}"), None))?;
        let answer = context
            .peer
            .send_request(request)
            .await
            .map_err(|e| ErrorData::internal_error(format!("asking failed: {e}"), None))?;
        let answer = serde_json::to_value(answer)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        return Ok(Asked::Answer(answer));
    }
    if let Some(answer) = request.input_responses.as_ref().and_then(|r| r.get(key)) {
        return Ok(Asked::Answer(answer.clone()));
    }
    let question: InputRequest = serde_json::from_value(question)
        .map_err(|e| ErrorData::internal_error(format!("bad question: {e}"), None))?;
    let requests = InputRequests::from([(key.to_owned(), question)]);
    Ok(Asked::Pending(
        InputRequiredResult::new(Some(requests), None).into(),
    ))
}

/// An elicitation answer in words: `accept <content>`, `decline` or `cancel`.
fn said(answer: &Value) -> String {
    let action = answer["action"].as_str().unwrap_or("?");
    match answer.get("content") {
        Some(content) if action == "accept" => format!("accept {content}"),
        _ => action.to_owned(),
    }
}

/// The URIs of a `roots/list` answer, one a line.
fn root_uris(answer: &Value) -> String {
    let roots = answer["roots"].as_array().cloned().unwrap_or_default();
    roots
        .iter()
        .filter_map(|root| root["uri"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The variable holding `hook`'s script: `_PreToolUse` → `TS_PRE_TOOL_USE`.
fn script_var(hook: &str) -> String {
    let mut var = String::from("TS");
    for c in hook.chars() {
        if c.is_ascii_uppercase() {
            var.push('_');
        }
        if c != '_' {
            var.push(c.to_ascii_uppercase());
        }
    }
    var
}

/// Waits until the client cancels the request (a `notifications/cancelled`, or on the stateless
/// HTTP protocol a closed response stream), and says so in the log.
async fn hang(context: &RequestContext<RoleServer>) -> ErrorData {
    context.ct.cancelled().await;
    log("cancelled");
    ErrorData::internal_error("cancelled", None)
}

impl ServerHandler for TestServer {
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match env("TS_LEGACY") {
            Some(_) => Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25)),
            None => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
        }
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        log("roots_changed");
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object"});
        let Value::Object(schema) = schema else {
            unreachable!("a literal object")
        };
        let schema = Arc::new(schema);
        let mut names = self.tool_names();
        if env("TS_PARAM_HEADERS").is_some() {
            names.extend(["param_headers".to_owned(), "bad_header".to_owned()]);
        }
        let tools = names
            .into_iter()
            .map(|name| {
                let description = format!("test tool {name}");
                let schema = match name.as_str() {
                    "param_headers" => param_headers_schema(),
                    // A header name with a space is not an HTTP token: clients must drop the
                    // tool.
                    "bad_header" => object(json!({"type": "object", "properties": {
                        "region": {"type": "string", "x-mcp-header": "My Region"}
                    }})),
                    _ => Arc::clone(&schema),
                };
                let mut tool = Tool::new(name.clone(), description, schema);
                if name == "app_only" {
                    let Value::Object(meta) = json!({"ui": {"visibility": ["app"]}}) else {
                        unreachable!("a literal object")
                    };
                    tool.meta = Some(meta.into());
                }
                if name == "remove" {
                    tool.annotate(ToolAnnotations::from_raw(
                        None,
                        Some(false),
                        Some(true),
                        None,
                        None,
                    ))
                } else {
                    tool
                }
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _serial = if self.inner.is_serial {
            Some(self.inner.serial.lock().await)
        } else {
            None
        };
        let name = request.name.as_ref();
        log(&format!("call {name}"));
        if let Some(traceparent) = context.meta.0.0.get("traceparent").and_then(Value::as_str) {
            log(&format!("traceparent {name} {traceparent}"));
        }
        if name.starts_with('_') {
            let meta: serde_json::Map<String, Value> = context
                .meta
                .0
                .0
                .iter()
                .filter(|(k, _)| k.starts_with("hookloop/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            log(&format!("meta {}", Value::Object(meta)));
            let arguments = request.arguments.clone().unwrap_or_default();
            log(&format!("args {}", Value::Object(arguments)));
            if !self.inner.hooks.iter().any(|h| h == name) {
                return Err(ErrorData::invalid_params("no such hook", None));
            }
            // A call that brings answers goes on with the `ask` step it was at.
            let step = match request.input_responses {
                Some(_) => "ask".to_owned(),
                None => self.next_step(name),
            };
            if step == "ask" {
                return Ok(
                    match ask(&request, &context, "ask", form_question()).await? {
                        Asked::Answer(answer) => text(said(&answer)),
                        Asked::Pending(response) => response,
                    },
                );
            }
            return self.run_step(&step, &context).await;
        }
        match name {
            "echo" => Ok(text(
                Value::Object(request.arguments.unwrap_or_default()).to_string(),
            )),
            "big" => Ok(text("b".repeat(1 << 20))),
            "image" => {
                let kib = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("kib"))
                    .and_then(Value::as_u64);
                let count = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("count"))
                    .and_then(Value::as_u64);
                let data = match (kib, count) {
                    (Some(kib), _) => "A".repeat(kib as usize * 1024),
                    (None, Some(_)) => String::new(),
                    (None, None) => "aGVsbG8=".to_owned(),
                };
                let image = ContentBlock::Image(ImageContent::new(data, "image/png"));
                let blocks = vec![image; count.unwrap_or(1) as usize];
                Ok(CallToolResult::success(blocks).into())
            }
            "big_image" => Ok(CallToolResult::success(vec![
                ContentBlock::Image(ImageContent::new("A".repeat(2 << 20), "image/png")),
                ContentBlock::Image(ImageContent::new("aGVsbG8=", "image/png")),
            ])
            .into()),
            "fail" => Ok(CallToolResult::error(vec![ContentBlock::text("it failed")]).into()),
            "crash" => std::process::exit(3),
            "hang" => Err(hang(&context).await),
            "slow" => {
                let ms = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("ms"))
                    .and_then(Value::as_u64)
                    .unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(text("slept"))
            }
            "ask" | "ask_url" | "roots" => {
                let question = match name {
                    "ask" => form_question(),
                    "ask_url" => json!({"method": "elicitation/create", "params": {
                        "mode": "url",
                        "message": "Sign in to the test service",
                        "url": env("TS_ASK_URL")
                            .unwrap_or_else(|| "https://example.invalid/sign-in".into()),
                        "elicitationId": "sign-in-1"
                    }}),
                    _ => json!({"method": "roots/list"}),
                };
                Ok(match ask(&request, &context, name, question).await? {
                    Asked::Answer(answer) if name == "roots" => text(root_uris(&answer)),
                    Asked::Answer(answer) => text(said(&answer)),
                    Asked::Pending(response) => response,
                })
            }
            "add_tool" => {
                self.inner.added.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                Ok(text("added"))
            }
            "remove" => Ok(text(format!(
                "removed {}",
                Value::Object(request.arguments.unwrap_or_default())
            ))),
            "write" => {
                let arguments = request.arguments.unwrap_or_default();
                let field = |name: &str| arguments.get(name).and_then(Value::as_str).unwrap_or("");
                match std::fs::write(field("path"), field("text")) {
                    Ok(()) => Ok(text(format!("wrote {}", field("path")))),
                    Err(e) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "cannot write {}: {e}",
                        field("path")
                    ))])
                    .into()),
                }
            }
            other => Ok(text(format!("{other} ran"))),
        }
    }
}

/// A JSON object literal as a tool schema.
fn object(value: Value) -> Arc<serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("an object literal"),
    }
}

/// The input schema of `param_headers`: every primitive kind marked for an `Mcp-Param-*`
/// header, and one property that is not.
fn param_headers_schema() -> Arc<serde_json::Map<String, Value>> {
    object(json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "priority": {"type": "integer", "x-mcp-header": "Priority"},
        "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
        "note": {"type": "string", "x-mcp-header": "Note"},
        "query": {"type": "string"}
    }}))
}

/// With `TS_PARAM_HEADERS`, logs the `Mcp-Param-*` headers of a `tools/call` request.
fn log_param_headers<B>(request: &hyper::Request<B>) {
    if env("TS_PARAM_HEADERS").is_none()
        || request.headers().get("mcp-method").map(|v| v.as_bytes()) != Some(b"tools/call")
    {
        return;
    }
    let params: serde_json::Map<String, Value> = request
        .headers()
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("mcp-param-"))
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_owned(), Value::String(value))
        })
        .collect();
    log(&format!("params {}", Value::Object(params)));
}

mod hostile;

fn main() {
    if let Some(path) = env("TS_PID_FILE") {
        append(&path, &std::process::id().to_string());
    }
    if let Some(path) = env("TS_ENV_FILE") {
        let lines: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
        std::fs::write(path, lines.join("\n")).expect("env file");
    }
    if let Some(path) = env("TS_GRANDCHILD_FILE") {
        // Left running on purpose: the host must kill it with the server's process group.
        #[allow(clippy::zombie_processes)]
        let child = std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .expect("spawn sleep");
        append(&path, &child.id().to_string());
    }
    if let Some(behaviour) = env("TS_HOSTILE") {
        hostile::run(&behaviour);
        return;
    }
    match env("TS_STARTUP").as_deref() {
        Some("fail") => {
            eprintln!("test server: failing at start-up as asked");
            std::process::exit(1);
        }
        Some("hang") => std::thread::sleep(Duration::from_secs(3600)),
        Some(slow) if slow.starts_with("slow:") => {
            let ms: u64 = slow["slow:".len()..].parse().expect("TS_STARTUP=slow:MS");
            std::thread::sleep(Duration::from_millis(ms));
        }
        Some(wait) if wait.starts_with("wait:") => {
            let path = std::path::Path::new(&wait["wait:".len()..]);
            while !path.exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        match (env("TS_HTTP"), env("TS_SSE")) {
            (Some(addr), _) => serve_http(&addr).await,
            (None, Some(addr)) => legacy_sse::serve(&addr).await,
            (None, None) => {
                let server = TestServer::new()
                    .serve((tokio::io::stdin(), tokio::io::stdout()))
                    .await
                    .expect("serve stdio");
                let _ = server.waiting().await;
            }
        }
    });
}

async fn serve_http(addr: &str) {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };

    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let local = listener.local_addr().expect("local addr");
    let server = TestServer::new();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    println!("http://{local}/mcp");
    std::io::stdout().flush().expect("flush");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let service = service.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let handler = hyper::service::service_fn(move |request| {
                log_param_headers(&request);
                let service = service.clone();
                async move { Ok::<_, std::convert::Infallible>(service.handle(request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, handler)
                .await;
        });
    }
}

/// The HTTP+SSE transport of 2024-11-05, server side: each GET of `/sse` starts a session of the
/// test server (rmcp's server over an in-memory pipe) whose messages go out as `message` events;
/// each POST of `/messages?session=N` goes into that session's pipe.
mod legacy_sse {
    use std::collections::HashMap;
    use std::convert::Infallible;
    use std::io::Write;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use http_body::{Body, Frame};
    use hyper::body::Incoming;
    use hyper::{Method, Request, Response, StatusCode};
    use rmcp::ServiceExt;
    use serde_json::Value;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, WriteHalf};
    use tokio::sync::mpsc;

    use super::{TestServer, env, log};

    /// One client's session: where its POSTs go, and its stream.
    struct Session {
        to_server: Arc<tokio::sync::Mutex<WriteHalf<tokio::io::DuplexStream>>>,
        stream: mpsc::Sender<Bytes>,
        /// The task that turns the server's lines into events; ending it ends the stream.
        forward: tokio::task::AbortHandle,
    }

    type Sessions = Arc<Mutex<HashMap<u64, Session>>>;

    /// A response body: one piece, or the events of a stream until it ends.
    enum Out {
        Once(Option<Bytes>),
        Stream(mpsc::Receiver<Bytes>),
    }

    impl Body for Out {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.get_mut() {
                Out::Once(piece) => Poll::Ready(piece.take().map(|b| Ok(Frame::data(b)))),
                Out::Stream(events) => events.poll_recv(cx).map(|e| e.map(|b| Ok(Frame::data(b)))),
            }
        }
    }

    fn answer(status: StatusCode, content_type: &str, body: &str) -> Response<Out> {
        let mut response = Response::new(Out::Once(Some(Bytes::from(body.to_owned()))));
        *response.status_mut() = status;
        response.headers_mut().insert(
            "content-type",
            content_type.parse().expect("a content type"),
        );
        response
    }

    fn event(kind: &str, data: &str) -> Bytes {
        Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
    }

    fn log_headers(what: &str, request: &Request<Incoming>) {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_else(|| "-".into())
        };
        log(&format!(
            "{what} x-test={} authorization={}",
            header("x-test"),
            header("authorization")
        ));
    }

    pub async fn serve(addr: &str) {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        let local = listener.local_addr().expect("local addr");
        println!("http://{local}/sse");
        std::io::stdout().flush().expect("flush");
        let sessions: Sessions = Arc::default();
        let next = Arc::new(AtomicU64::new(1));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (sessions, next) = (Arc::clone(&sessions), Arc::clone(&next));
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let handler = hyper::service::service_fn(move |request| {
                    let (sessions, next) = (Arc::clone(&sessions), Arc::clone(&next));
                    async move { Ok::<_, Infallible>(handle(request, sessions, next).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, handler)
                    .await;
            });
        }
    }

    async fn handle(
        request: Request<Incoming>,
        sessions: Sessions,
        next: Arc<AtomicU64>,
    ) -> Response<Out> {
        match (request.method(), request.uri().path()) {
            (&Method::GET, "/sse") => open(request, sessions, &next),
            (&Method::POST, "/sse") => refuse(),
            (&Method::POST, "/messages") => post(request, sessions).await,
            _ => answer(StatusCode::NOT_FOUND, "text/plain", "Not Found"),
        }
    }

    /// How a POST of the stream's URL is refused (the spec's fallback reads it).
    fn refuse() -> Response<Out> {
        match env("TS_SSE_REFUSE").as_deref() {
            Some("404") => answer(
                StatusCode::NOT_FOUND,
                "text/html",
                "<pre>Cannot POST /sse</pre>",
            ),
            Some("400") => answer(StatusCode::BAD_REQUEST, "text/plain", "Bad Request"),
            Some("400-jsonrpc") => answer(
                StatusCode::BAD_REQUEST,
                "application/json",
                r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32602,"message":"Unsupported protocol version","data":{"supported":["2099-01-01"]}}}"#,
            ),
            _ => answer(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "Method Not Allowed",
            ),
        }
    }

    fn open(request: Request<Incoming>, sessions: Sessions, next: &AtomicU64) -> Response<Out> {
        log_headers("get", &request);
        let id = next.fetch_add(1, Ordering::SeqCst);
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            if let Ok(running) = TestServer::new().serve(server).await {
                let _ = running.waiting().await;
            }
        });
        let (from_server, to_server) = tokio::io::split(client);
        let (stream, events) = mpsc::channel(64);
        let endpoint = env("TS_SSE_ENDPOINT").unwrap_or_else(|| format!("/messages?session={id}"));
        let first = stream.clone();
        let forward = tokio::spawn(async move {
            if endpoint != "never" && first.send(event("endpoint", &endpoint)).await.is_err() {
                return;
            }
            let mut lines = BufReader::new(from_server).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if first.send(event("message", &line)).await.is_err() {
                    return;
                }
            }
        })
        .abort_handle();
        sessions.lock().expect("sessions").insert(
            id,
            Session {
                to_server: Arc::new(tokio::sync::Mutex::new(to_server)),
                stream,
                forward,
            },
        );
        let mut response = Response::new(Out::Stream(events));
        response.headers_mut().insert(
            "content-type",
            "text/event-stream".parse().expect("a content type"),
        );
        response
    }

    async fn post(mut request: Request<Incoming>, sessions: Sessions) -> Response<Out> {
        log_headers("post", &request);
        let id = request
            .uri()
            .query()
            .and_then(|q| q.strip_prefix("session="))
            .and_then(|n| n.parse::<u64>().ok());
        let mut body = Vec::new();
        while let Some(frame) =
            std::future::poll_fn(|cx| Pin::new(request.body_mut()).poll_frame(cx)).await
        {
            let Ok(frame) = frame else {
                return answer(StatusCode::BAD_REQUEST, "text/plain", "unreadable body");
            };
            if let Ok(data) = frame.into_data() {
                body.extend_from_slice(&data);
            }
        }
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let tool = (message["method"] == "tools/call")
            .then(|| message["params"]["name"].as_str())
            .flatten();
        let (to_server, stream) = {
            let mut sessions = sessions.lock().expect("sessions");
            let Some(session) = id.and_then(|id| sessions.get(&id)) else {
                return answer(StatusCode::NOT_FOUND, "text/plain", "no such session");
            };
            if tool == Some("drop_stream") {
                if let Some(session) = id.and_then(|id| sessions.remove(&id)) {
                    session.forward.abort();
                }
                return answer(StatusCode::ACCEPTED, "text/plain", "Accepted");
            }
            (Arc::clone(&session.to_server), session.stream.clone())
        };
        if tool == Some("flood") {
            let data = "x".repeat(16 * 1024 * 1024 + 1);
            let _ = stream.send(event("message", &data)).await;
        }
        let mut to_server = to_server.lock().await;
        body.push(b'\n');
        if to_server.write_all(&body).await.is_err() {
            return answer(StatusCode::GONE, "text/plain", "the session ended");
        }
        answer(StatusCode::ACCEPTED, "text/plain", "Accepted")
    }
}
