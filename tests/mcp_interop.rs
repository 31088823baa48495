//! Interop with servers built on the official SDKs, each through a full session: a hook server
//! written with the Python SDK (`examples/todo_server.py`, also over the HTTP+SSE transport of
//! 2024-11-05), and the reference npm servers `server-everything` (over stdio, over streamable
//! HTTP, and over HTTP+SSE, configured as `sse` and reached from an `http` URL),
//! `server-memory`, and `server-filesystem` (which works in the roots its client offers).
//!
//! They need packages that `.ci/setup.d/30-mcp-interop.sh` installs; it exports
//! `HOOKLOOP_INTEROP_PYTHON` and `HOOKLOOP_INTEROP_NODE_MODULES`. Without them these tests say so
//! in one line and do nothing.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Once;
use std::time::Duration;

use hookloop::machine::{Content, Message, ToolCall};
use hookloop::mcp::ServerConfig;
use hookloop::ports::{ToolHost, TransportKind};
use hookloop::testing::{ScriptedLlm, Step};
use hookloop::{Config, Hook, HookServers, PromptStop, Session};
use serde_json::json;

use common::{Scratch, connect, eventually_async, fast_options};

const TESTS: &str = "python_sdk_hook_server, python_sdk_server_with_every_hook, \
                     python_sdk_guard_server_denies, python_sdk_subagent_guard_holds_a_child_to_its_task, \
                     python_sdk_hook_server_over_sse, \
                     everything_over_stdio, everything_over_http, everything_over_sse, \
                     everything_over_sse_from_an_http_url, memory_over_stdio, \
                     filesystem_works_in_the_roots_it_is_offered";

struct Interop {
    python: PathBuf,
    node_modules: PathBuf,
}

/// The installed packages, or `None` after saying (once) which tests did not run.
fn interop() -> Option<Interop> {
    let python = std::env::var_os("HOOKLOOP_INTEROP_PYTHON");
    let node_modules = std::env::var_os("HOOKLOOP_INTEROP_NODE_MODULES");
    match (python, node_modules) {
        (Some(python), Some(node_modules)) => Some(Interop {
            python: python.into(),
            node_modules: node_modules.into(),
        }),
        _ => {
            // In CI the setup script must have run: a missing install is a failure there.
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but the interop packages are not: .ci/setup.d/30-mcp-interop.sh did not run"
            );
            static SAID: Once = Once::new();
            SAID.call_once(|| {
                // Straight to the process's stderr: libtest captures only the print macros,
                // and a skipped test must never pass silently.
                let _ = writeln!(
                    std::io::stderr(),
                    "interop tests not run ({TESTS}): HOOKLOOP_INTEROP_PYTHON and \
                     HOOKLOOP_INTEROP_NODE_MODULES are unset; run .ci/run, or \
                     `CI_ENV=/tmp/interop.env bash .ci/setup.d/30-mcp-interop.sh && set -a && \
                     . /tmp/interop.env && set +a && cargo test --test mcp_interop`"
                );
            });
            None
        }
    }
}

impl Interop {
    fn npm_server(&self, package: &str, args: &[&str]) -> ServerConfig {
        let script = self
            .node_modules
            .join("@modelcontextprotocol")
            .join(package)
            .join("dist/index.js");
        let mut argv = vec![script.to_string_lossy().into_owned()];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        ServerConfig::stdio("node", argv)
    }
}

fn tool_texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { output, .. } => Some(output.joined_text()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn python_sdk_hook_server() {
    let Some(interop) = interop() else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/todo_server.py");
    let server = ServerConfig::stdio(interop.python.to_string_lossy(), [script]);
    todo_session(server).await;
}

#[tokio::test]
async fn python_sdk_hook_server_over_sse() {
    let Some(interop) = interop() else { return };
    let port = free_port();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/sse_todo_server.py"
    );
    let mut python = tokio::process::Command::new(&interop.python);
    python.arg(script).arg(port.to_string());
    let _server = listening(python, port).await;
    todo_session(ServerConfig::sse(format!("http://127.0.0.1:{port}/sse"))).await;
}

/// The todo hook server's story: two todos added, an objection naming both, both completed.
async fn todo_session(server: ServerConfig) {
    let host = connect(vec![("todo", server)], fast_options()).await;
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                ("todo__add", json!({"text": "write tests"})),
                ("todo__add", json!({"text": "update docs"})),
            ],
        ),
        Step::text("All done."),
        Step::tools(
            3,
            &[
                ("todo__complete", json!({"id": 1})),
                ("todo__complete", json!({"id": 2})),
            ],
        ),
        Step::text("Now really done."),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_secs(5))
        // The server numbers todos as their calls reach it: one call at a time keeps that the
        // order of the reply, which the objection's text below depends on.
        .tool_concurrency(1)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(
        session.prompt("Do the work.").await.unwrap(),
        PromptStop::EndTurn
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let objection =
        hookloop::hooks::encode_hook_body(Hook::Stop, "todo", "2 open: write tests; update docs");
    assert!(
        tool_texts(&requests[2].messages).contains(&objection),
        "{:?}",
        requests[2].messages
    );
    assert_eq!(session.counters().objections, 1);
    assert_eq!(llm.violations(), Vec::<String>::new());
}

/// The hook calls `tests/interop/every_hook_server.py` logged, as `(hook, args)`.
fn hook_log(path: &std::path::Path) -> Vec<(String, serde_json::Value)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let entry: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                entry["hook"].as_str().unwrap().to_owned(),
                entry["args"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn python_sdk_server_with_every_hook() {
    let Some(interop) = interop() else { return };
    let scratch = Scratch::new("every-hook");
    let log = scratch.path().join("hooks.jsonl");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/every_hook_server.py"
    );
    let server = ServerConfig::stdio(
        interop.python.to_string_lossy(),
        [script.to_owned(), log.to_string_lossy().into_owned()],
    );
    let host = connect(vec![("hooks", server)], fast_options()).await;
    let big = "y".repeat(20_000);
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                ("hooks__echo", json!({"text": "forbidden"})),
                ("hooks__echo", json!({"text": "small"})),
            ],
        ),
        Step::tools(3, &[("hooks__echo", json!({"text": big}))]),
        Step::text("Summary of the work."),
        Step::text("Done."),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_secs(5))
        .context_window(4_000, 1_000)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(session.prompt("Start.").await.unwrap(), PromptStop::EndTurn);
    session.close().await.unwrap();

    let calls = hook_log(&log);
    let hooks: Vec<&str> = calls.iter().map(|(hook, _)| hook.as_str()).collect();
    assert_eq!(
        hooks,
        [
            "_SessionStart",
            "_UserPromptSubmit",
            "_PreToolUse",
            "_PreToolUse",
            "_PostToolUse",
            "_PreToolUse",
            "_PostToolUse",
            "_PreCompact",
            "_PostCompact",
            "_Stop",
            "_SessionEnd",
        ],
        "{calls:?}"
    );
    assert_eq!(calls[1].1["prompt"], "Start.");
    assert_eq!(calls[4].1["tool"], "hooks__echo");
    assert_eq!(calls[4].1["isError"], false);
    assert_eq!(calls[4].1["output_bytes"], 5);
    // Capped at 16 KiB (Python counts characters; the elision marker is not ASCII).
    let output = calls[6].1["output_bytes"].as_u64().unwrap();
    assert!((16_000..=16 * 1024).contains(&output), "{output}");

    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    // The denied call was answered with the denial and never ran (only one echo result).
    let denial = hookloop::hooks::encode_hook_body(Hook::PreToolUse, "hooks", "forbidden word");
    let summary = requests[2].instruction.clone().unwrap_or_default();
    assert!(summary.contains("keep the word PINEAPPLE"), "{summary}");
    let fresh = tool_texts(&requests[3].messages);
    assert!(
        fresh.contains(&hookloop::hooks::encode_hook_body(
            Hook::PostCompact,
            "hooks",
            "after compaction"
        )),
        "{fresh:?}"
    );
    let second = tool_texts(&requests[1].messages);
    assert!(second.contains(&"small".to_owned()), "{second:?}");
    assert!(
        !second.contains(&"forbidden".to_owned()),
        "the denied call ran: {second:?}"
    );
    for expected in [
        hookloop::hooks::encode_hook_body(Hook::SessionStart, "hooks", "session context"),
        hookloop::hooks::encode_hook_body(Hook::UserPromptSubmit, "hooks", "prompt seen: Start."),
        denial,
        hookloop::hooks::encode_hook_body(Hook::PostToolUse, "hooks", "post: hooks__echo ran"),
    ] {
        assert!(second.contains(&expected), "{expected} not in {second:?}");
    }
    assert_eq!(llm.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn python_sdk_guard_server_denies() {
    let Some(interop) = interop() else { return };
    let guard = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/guard_server.py");
    let todo = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/todo_server.py");
    let host = connect(
        vec![
            (
                "todo",
                ServerConfig::stdio(interop.python.to_string_lossy(), [todo]),
            ),
            (
                "guard",
                ServerConfig::stdio(interop.python.to_string_lossy(), [guard]),
            ),
        ],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("todo__add", json!({"text": "rm -rf /"}))]),
        Step::text("I will not."),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::parse(Some("guard")).unwrap())
        .hook_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(session.prompt("Go.").await.unwrap(), PromptStop::EndTurn);
    let texts = tool_texts(session.history());
    assert_eq!(
        texts,
        [hookloop::hooks::encode_hook_body(
            Hook::PreToolUse,
            "guard",
            "todo__add denied: its arguments contain rm -rf"
        )]
    );
    assert_eq!(llm.violations(), Vec::<String>::new());
}

/// `examples/subagent_guard.py` as the hook server of a session with subagents: its
/// `_SubagentStart` tells the child how to end, and its `_SubagentStop` objects until the
/// child's answer says `TASK COMPLETE`; the parent gets that answer alone.
#[tokio::test]
async fn python_sdk_subagent_guard_holds_a_child_to_its_task() {
    let Some(interop) = interop() else { return };
    let guard = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/subagent_guard.py");
    let host = connect(
        vec![(
            "guard",
            ServerConfig::stdio(interop.python.to_string_lossy(), [guard]),
        )],
        fast_options(),
    )
    .await;
    let task = json!({"description": "the changelog", "prompt": "Write the changelog."});
    // One child, so the requests come in order: the parent's call, the child's two answers,
    // the parent's end.
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("agent", task)]),
        Step::text("The changelog is half written."),
        Step::text("The changelog is written.\nTASK COMPLETE"),
        Step::text("The subagent wrote it."),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::parse(Some("guard")).unwrap())
        .hook_timeout(Duration::from_secs(5))
        .subagents(hookloop::machine::Subagents::new(2))
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(session.prompt("Go.").await.unwrap(), PromptStop::EndTurn);
    let requests = llm.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    let texts = |n: usize| format!("{:?}", requests[n].messages);
    // `_SubagentStart` reached the child's first request, and only the child's.
    let start = "When the changelog is done, end your answer with the line TASK COMPLETE.";
    assert!(texts(1).contains(start), "{}", texts(1));
    assert!(!texts(0).contains(start) && !texts(3).contains(start));
    // `_SubagentStop` objected to the unfinished answer, naming the child, and let the
    // finished one through.
    let objection =
        "agent-1: the task is unfinished; finish it, then end with the line TASK COMPLETE.";
    assert!(texts(2).contains(objection), "{}", texts(2));
    // The parent got the child's final answer as the call's result, and nothing before it.
    let results = tool_texts(&requests[3].messages);
    assert_eq!(results, ["The changelog is written.\nTASK COMPLETE"]);
    assert!(!texts(3).contains("half written") && !texts(3).contains(objection));
    assert_eq!(llm.violations(), Vec::<String>::new());
}

async fn echo_session(server: ServerConfig) {
    let host = connect(vec![("everything", server)], fast_options()).await;
    let tools: Vec<String> = host.catalog().servers[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(tools.contains(&"echo".to_owned()), "{tools:?}");
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                (
                    "everything__echo",
                    json!({"message": "hello from hookloop"}),
                ),
                ("everything__get-tiny-image", json!({})),
            ],
        ),
        Step::text("done"),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(session.prompt("echo").await.unwrap(), PromptStop::EndTurn);

    let second = &llm.requests()[1].messages;
    let texts = tool_texts(second);
    assert!(texts[0].contains("hello from hookloop"), "{texts:?}");
    let image = second.iter().any(|m| {
        matches!(m, Message::ToolResult { output, .. }
            if output.content.iter().any(|c| matches!(c, Content::Image { mime_type, .. } if mime_type == "image/png")))
    });
    assert!(image, "{second:?}");
    assert_eq!(llm.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn everything_over_stdio() {
    let Some(interop) = interop() else { return };
    echo_session(interop.npm_server("server-everything", &["stdio"])).await;
}

/// A port of 127.0.0.1 free a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Starts `command`, a server that listens on `port` of 127.0.0.1, and waits until it does;
/// killed when dropped.
async fn listening(mut command: tokio::process::Command, port: u16) -> tokio::process::Child {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the server");
    let up = common::eventually(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    assert!(up, "the server did not listen on {port}");
    child
}

/// `server-everything` over `transport` (its command-line word) on a free port.
async fn everything(interop: &Interop, transport: &str) -> (tokio::process::Child, u16) {
    let port = free_port();
    let script = interop
        .node_modules
        .join("@modelcontextprotocol/server-everything/dist/index.js");
    let mut node = tokio::process::Command::new("node");
    node.arg(script)
        .arg(transport)
        .env("PORT", port.to_string());
    (listening(node, port).await, port)
}

#[tokio::test]
async fn everything_over_http() {
    let Some(interop) = interop() else { return };
    let (_node, port) = everything(&interop, "streamableHttp").await;
    echo_session(ServerConfig::http(format!("http://127.0.0.1:{port}/mcp"))).await;
}

#[tokio::test]
async fn everything_over_sse() {
    let Some(interop) = interop() else { return };
    let (_node, port) = everything(&interop, "sse").await;
    echo_session(ServerConfig::sse(format!("http://127.0.0.1:{port}/sse"))).await;
}

#[tokio::test]
async fn everything_over_sse_from_an_http_url() {
    let Some(interop) = interop() else { return };
    let (_node, port) = everything(&interop, "sse").await;
    // Its `POST /sse` is answered 404: the spec's cue to try the old transport.
    let url = format!("http://127.0.0.1:{port}/sse");
    let host = connect(
        vec![("everything", ServerConfig::http(url.clone()))],
        fast_options(),
    )
    .await;
    assert_eq!(host.transport("everything"), Some(TransportKind::Sse));
    drop(host);
    echo_session(ServerConfig::http(url)).await;
}

#[tokio::test]
async fn memory_over_stdio() {
    let Some(interop) = interop() else { return };
    let dir = Scratch::new("memory");
    let server = interop
        .npm_server("server-memory", &[])
        .env("MEMORY_FILE_PATH", dir.file("memory.jsonl"));
    let host = connect(vec![("memory", server)], fast_options()).await;
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[(
                "memory__create_entities",
                json!({"entities": [{"name": "hookloop", "entityType": "project",
                                     "observations": ["steered by hooks"]}]}),
            )],
        ),
        Step::tools(2, &[("memory__read_graph", json!({}))]),
        Step::text("done"),
    ]);
    let config = Config::builder().build().unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(
        session.prompt("remember").await.unwrap(),
        PromptStop::EndTurn
    );
    let texts = tool_texts(&llm.requests()[2].messages);
    assert!(
        texts.last().unwrap().contains("steered by hooks"),
        "{texts:?}"
    );
    assert_eq!(llm.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn filesystem_works_in_the_roots_it_is_offered() {
    let Some(interop) = interop() else { return };
    let scratch = Scratch::new("fs-roots");
    // The server resolves symbolic links (a temporary folder may sit behind one).
    let base = scratch.path().canonicalize().unwrap();
    let (first, second) = (base.join("first"), base.join("second"));
    for dir in [&first, &second] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(first.join("note.txt"), "hello from the first root").unwrap();
    std::fs::write(second.join("note.txt"), "hello from the second root").unwrap();
    // No folder on its command line: the server works only in the roots the client offers.
    let options = fast_options().with_roots([first.clone()]);
    let host = connect(
        vec![("fs", interop.npm_server("server-filesystem", &[]))],
        options,
    )
    .await;
    let call = |name: &str, arguments: serde_json::Value| ToolCall {
        id: "c1".into(),
        name: format!("fs__{name}"),
        arguments,
    };
    let allowed = || async {
        host.call_tool(&call("list_allowed_directories", json!({})))
            .await
            .joined_text()
    };
    let first_text = first.to_string_lossy().into_owned();
    let second_text = second.to_string_lossy().into_owned();
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            allowed().await.contains(&first_text)
        })
        .await,
        "{}",
        allowed().await
    );
    let read = |path: PathBuf| call("read_text_file", json!({"path": path}));
    let inside = host.call_tool(&read(first.join("note.txt"))).await;
    assert!(!inside.is_error, "{inside:?}");
    assert_eq!(inside.joined_text(), "hello from the first root");
    let outside = host.call_tool(&read(second.join("note.txt"))).await;
    assert!(outside.is_error, "{outside:?}");

    // A new root replaces the old one once the server hears they changed.
    host.set_roots(vec![second.clone()]).await;
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            let now = allowed().await;
            now.contains(&second_text) && !now.contains(&first_text)
        })
        .await,
        "{}",
        allowed().await
    );
    let moved = host.call_tool(&read(second.join("note.txt"))).await;
    assert_eq!(moved.joined_text(), "hello from the second root");
    assert!(host.call_tool(&read(first.join("note.txt"))).await.is_error);
}
