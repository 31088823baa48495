//! Interop with servers built on the official SDKs, each through a full session: a hook server
//! written with the Python SDK (`examples/todo_server.py`), and the reference npm servers
//! `server-everything` (over stdio and over streamable HTTP) and `server-memory`.
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

use hookloop::machine::{Content, Message};
use hookloop::mcp::{ServerConfig, ToolHost};
use hookloop::testing::{ScriptedLlm, Step};
use hookloop::{Config, Hook, HookServers, PromptStop, Session};
use serde_json::json;

use common::{Scratch, connect, fast_options};

const TESTS: &str = "python_sdk_hook_server, everything_over_stdio, everything_over_http, \
                     memory_over_stdio";

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

#[tokio::test]
async fn everything_over_http() {
    let Some(interop) = interop() else { return };
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let script = interop
        .node_modules
        .join("@modelcontextprotocol/server-everything/dist/index.js");
    let mut node = tokio::process::Command::new("node")
        .arg(script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start node");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let listening = common::eventually(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    assert!(listening, "server-everything did not listen on {port}");
    echo_session(ServerConfig::http(url)).await;
    let _ = node.kill().await;
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
