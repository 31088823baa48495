//! A session's MCP servers in `hookloop acp`: one that fails to start leaves the others
//! serving, and the client is told which failed and why; `HOOKLOOP_ACP_SERVERS=all-or-nothing`
//! makes any failure the session's.

mod acp_agent;
mod common;
mod loopback;

use acp_agent::{Agent, test_server, thoughts};
use loopback::{FakeProvider, Reply, after_tool};
use serde_json::json;

fn servers() -> serde_json::Value {
    json!([
        test_server("good", &[]),
        test_server("broken", &[("TS_STARTUP", "fail")]),
    ])
}

#[tokio::test]
async fn a_server_that_fails_to_start_leaves_the_others_and_the_client_is_told_once() {
    let provider = FakeProvider::start(|request| {
        if after_tool(request) {
            Reply::text("echoed")
        } else {
            Reply::tool("good__echo", json!({"text": "hi"}))
        }
    });
    let mut agent = Agent::spawn(&provider, &[]);
    agent.initialize().await;
    let (reply, mut updates) = agent
        .call(
            "session/new",
            json!({"cwd": std::env::temp_dir(), "mcpServers": servers()}),
        )
        .await;
    let session = reply["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("session/new failed: {reply}"))
        .to_owned();
    // The update may come after the reply: read on until the prompt's end.
    let (done, more) = agent.prompt_to_end(&session, "echo").await;
    updates.extend(more);
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let told: Vec<String> = thoughts(&updates)
        .into_iter()
        .filter(|t| t.contains("did not start"))
        .collect();
    assert_eq!(told.len(), 1, "{updates:?}");
    assert!(
        told[0].contains("broken") && !told[0].contains("good,"),
        "{}",
        told[0]
    );
    // The good server served the call.
    let last = provider.requests().last().unwrap().to_string();
    assert!(last.contains("hi"), "{last}");
    let (_, again) = agent.prompt_to_end(&session, "echo").await;
    assert!(
        thoughts(&again)
            .iter()
            .all(|t| !t.contains("did not start")),
        "told twice: {again:?}"
    );
    agent.close().await;
}

#[tokio::test]
async fn all_or_nothing_makes_one_failing_server_fail_the_session() {
    let provider = FakeProvider::start(|_| Reply::text("unused"));
    let mut agent = Agent::spawn(&provider, &[("HOOKLOOP_ACP_SERVERS", "all-or-nothing")]);
    agent.initialize().await;
    let (reply, _) = agent
        .call(
            "session/new",
            json!({"cwd": std::env::temp_dir(), "mcpServers": servers()}),
        )
        .await;
    let message = reply["error"]["message"].as_str().unwrap_or("").to_owned();
    assert!(message.contains("broken"), "{reply}");
    agent.close().await;
}

#[tokio::test]
async fn an_unknown_setting_is_refused_at_start_naming_the_variable() {
    let out = std::process::Command::new(loopback::hookloop())
        .arg("acp")
        .env("HOOKLOOP_ACP_SERVERS", "most")
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_API_KEY", "unused")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("HOOKLOOP_ACP_SERVERS"), "{stderr}");
}
