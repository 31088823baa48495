//! Claude Code hooks, unchanged, through `hookloop acp`: `HOOKLOOP_COMMAND_HOOKS` names the
//! project's `.claude/settings.json`, read in each session's directory; a real MCP server and a
//! loopback model, as in `tests/command_hooks_run.rs`.

mod acp_agent;
mod common;
mod hook_project;
mod loopback;

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use acp_agent::{Agent, test_server, tool_calls};
use common::Scratch;
use hook_project::{CONVENTIONS, FAILURE, RED, REMINDER, events_named, hook_bodies, results_of};
use loopback::{FakeProvider, Reply};
use serde_json::{Value, json};

fn body(hook: &str, text: &str) -> Value {
    json!({"hook": hook, "server": "claude-code", "text": text})
}

fn write(path: &str) -> Reply {
    Reply::tool("fs__write", json!({"path": path, "text": "ok"}))
}

#[tokio::test]
async fn a_sessions_project_hooks_run_unchanged_and_its_record_replays() {
    let dir = Scratch::new("cmdhooks-acp");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    hook_project::write(&project);
    let records = dir.file("records");
    let replies = [
        write("secrets/key"),
        write("notes.txt"),
        Reply::text("Done."),
        write("fixed.txt"),
        Reply::text("Fixed."),
    ];
    let turn = AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| {
        let n = turn.fetch_add(1, Ordering::SeqCst);
        replies
            .get(n)
            .cloned()
            .unwrap_or_else(|| Reply::text("out of script"))
    });
    let mut agent = Agent::spawn(
        &provider,
        &[
            ("HOOKLOOP_COMMAND_HOOKS", ".claude/settings.json"),
            ("HOOKLOOP_RECORD_DIR", &records),
            ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "20000"),
        ],
    );
    agent.initialize().await;
    // The server writes in its own directory, which is the session's.
    let fs = test_server("fs", &[("TS_EXTRA_TOOLS", "write")]);
    let (reply, _) = agent
        .call("session/new", json!({"cwd": project, "mcpServers": [fs]}))
        .await;
    let session = reply["result"]["sessionId"]
        .as_str()
        .expect("a session")
        .to_owned();
    let (reply, updates) = agent.prompt_to_end(&session, "tidy up").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");

    let requests = provider.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(
        hook_bodies(&requests[0]),
        [body("_SessionStart", CONVENTIONS)]
    );
    assert!(results_of(&requests[1], "fs__write")[0].contains("secrets/key is off limits"));
    assert!(hook_bodies(&requests[2]).contains(&body("_PostToolUse", REMINDER)));
    assert!(hook_bodies(&requests[3]).contains(&body("_Stop", &format!("{RED}\n{FAILURE}"))));
    assert!(project.join("fixed.txt").exists() && !project.join("secrets").exists());
    // The client saw the objection and the denial as the hooks of any server.
    let titles: Vec<&str> = tool_calls(&updates)
        .iter()
        .filter_map(|u| u["title"].as_str())
        .collect();
    assert!(
        titles
            .iter()
            .any(|t| t.starts_with("_Stop objection from claude-code")),
        "{titles:?}"
    );
    assert!(
        titles.contains(&"fs__write denied by _PreToolUse of claude-code"),
        "{titles:?}"
    );

    let stops = events_named(&project, "Stop");
    assert_eq!(stops.len(), 2);
    assert_eq!(stops[0]["session_id"], json!(session));
    assert_eq!(stops[1]["stop_hook_active"], true);
    let record = std::path::Path::new(&records).join(format!("{session}.jsonl"));
    assert_eq!(stops[0]["transcript_path"], json!(record.to_string_lossy()));
    agent.close().await;

    let before = hook_project::events(&project).len();
    let replay = Command::new(loopback::hookloop())
        .args(["replay", record.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert_eq!(hook_project::events(&project).len(), before);
}

#[tokio::test]
async fn a_session_whose_directory_lacks_the_file_runs_without_command_hooks() {
    let dir = Scratch::new("cmdhooks-acp-none");
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let mut agent = Agent::spawn(
        &provider,
        &[("HOOKLOOP_COMMAND_HOOKS", ".claude/settings.json")],
    );
    agent.initialize().await;
    let (reply, _) = agent
        .call("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let session = reply["result"]["sessionId"]
        .as_str()
        .expect("a session")
        .to_owned();
    let (reply, _) = agent.prompt_to_end(&session, "hi").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(hook_bodies(&provider.requests()[0]).is_empty());
    agent.close().await;
}

#[tokio::test]
async fn a_broken_settings_file_in_a_sessions_directory_fails_its_session_new() {
    let dir = Scratch::new("cmdhooks-acp-broken");
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(dir.path().join(".claude/settings.json"), "{not json").unwrap();
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let mut agent = Agent::spawn(
        &provider,
        &[("HOOKLOOP_COMMAND_HOOKS", ".claude/settings.json")],
    );
    agent.initialize().await;
    let (reply, _) = agent
        .call("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("settings.json: not JSON"), "{reply}");
    agent.close().await;
}

#[test]
fn an_absolute_path_that_does_not_load_stops_the_agent_before_the_first_frame() {
    let out = Command::new(loopback::hookloop())
        .arg("acp")
        .env("HOOKLOOP_COMMAND_HOOKS", "/no/such/settings.json")
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/settings.json: no such file"));
}
