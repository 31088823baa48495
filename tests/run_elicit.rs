//! `hookloop run` puts a server's question to the person on the terminal when stdin is one
//! (through a real pseudo-terminal), and declines it when it is not.

mod common;
mod loopback;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loopback::{FakeProvider, Reply};
use serde_json::{Value, json};

/// A `hookloop run go` whose model calls the test server's `ask` tool once, then ends.
fn run_asking(dir: &common::Scratch) -> (Command, FakeProvider) {
    let config = dir.path().join("mcp.json");
    let servers = json!({"mcpServers": {"srv": {"command": common::TEST_SERVER}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let provider = FakeProvider::start(|request| {
        if loopback::after_tool(request) {
            Reply::text("Done.")
        } else {
            Reply::tool("srv__ask", json!({}))
        }
    });
    let mut command = Command::new(loopback::hookloop());
    command
        .args(["run", "--mcp-config", config.to_str().unwrap(), "go"])
        .env_remove("MCP_HOOK_SERVERS")
        .env_remove("HOOKLOOP_LOG")
        .env_remove("OPENAI_API_KEY")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .current_dir(dir.path())
        .stdout(Stdio::piped());
    (command, provider)
}

/// The text of the tool result the model got.
fn tool_result(provider: &FakeProvider) -> String {
    let requests = provider.requests();
    let last = requests.last().expect("the model was asked");
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .expect("a tool result")
}

/// Waits until the terminal shows `text`.
fn wait_for(shown: &Arc<Mutex<Vec<u8>>>, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
        if seen.contains(text) {
            return;
        }
        assert!(Instant::now() < deadline, "never showed {text:?}: {seen:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn run_asks_a_servers_question_on_the_terminal_and_passes_the_answer_on() {
    let dir = common::Scratch::new("run-ask");
    let (mut command, provider) = run_asking(&dir);
    let pty = loopback::Pty::open();
    let child = command
        .stdin(pty.stdio())
        .stderr(pty.stdio())
        .spawn()
        .unwrap();
    let mut keyboard = pty.keyboard();
    let shown = pty.reader();
    wait_for(&shown, "server srv asks: What is your name?");
    wait_for(&shown, "Answer? ");
    keyboard.write_all(b"y\n").unwrap();
    wait_for(&shown, "name (string) [\"Ada\"]: ");
    keyboard.write_all(b"Grace\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Done.\n");
    assert_eq!(tool_result(&provider), r#"accept {"name":"Grace"}"#);
}

#[test]
fn run_declines_a_servers_question_when_stdin_is_not_a_terminal() {
    let dir = common::Scratch::new("run-decline");
    let (mut command, provider) = run_asking(&dir);
    let out = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("asks:"));
    assert_eq!(tool_result(&provider), "decline");
}
