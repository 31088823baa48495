//! `hookloop acp` driven by two independent clients — the official TypeScript ACP SDK (npm
//! `@agentclientprotocol/sdk`, tests/interop/acp_client.mjs) and the Python one (PyPI
//! `agent-client-protocol`, tests/interop/acp_client.py) — with a loopback model and the real
//! hook server `hookloop-test-server`.
//!
//! The TypeScript test needs `HOOKLOOP_ACP_SDK_DIR`, a folder whose node_modules holds the SDK:
//! `CI_ENV=/dev/stdout bash .ci/setup.d/40-acp-interop.sh` installs it and prints the variable.

mod loopback;

use std::path::PathBuf;
use std::process::Command;

use loopback::{FakeProvider, Reply};
use serde_json::Value;

/// The official TypeScript ACP SDK as a client: a session with a real MCP hook server through
/// an objection, a permission request answered "always reject", a cancel and `session/close`,
/// then `session/load` of the recorded session in a new agent process, where the spent budget
/// stays spent and the standing rejection still holds.
#[test]
fn the_typescript_sdk_objects_asks_cancels_closes_and_loads_a_session() {
    let Some(dir) = std::env::var_os("HOOKLOOP_ACP_SDK_DIR").map(PathBuf::from) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but HOOKLOOP_ACP_SDK_DIR is not: .ci/setup.d/40-acp-interop.sh did not run"
        );
        // Straight to the process's stderr: the test harness captures `println!`, and this
        // line is for whoever runs `cargo test`.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"acp interop skipped: HOOKLOOP_ACP_SDK_DIR is unset; run `CI_ENV=/dev/stdout bash \
              .ci/setup.d/40-acp-interop.sh` and export the variable it prints\n",
        );
        return;
    };
    assert!(
        dir.join("node_modules/@agentclientprotocol/sdk").is_dir(),
        "HOOKLOOP_ACP_SDK_DIR={} has no node_modules/@agentclientprotocol/sdk",
        dir.display()
    );
    // Node resolves the SDK from the script's own folder, so the script runs from there.
    let script = dir.join("acp_client.mjs");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/acp_client.mjs"),
        &script,
    )
    .unwrap();
    let provider = scripted_provider();
    let records = record_dir("ts");
    let output = Command::new("node")
        .arg(&script)
        .arg(loopback::hookloop())
        .arg(env!("CARGO_BIN_EXE_hookloop-test-server"))
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("MCP_HOOK_SERVERS", "*")
        .env("SPROUT_AGENT_STOP_MAX_REJECTIONS", "1")
        .env("HOOKLOOP_RECORD_DIR", &records)
        .output()
        .expect("node runs");
    let _ = std::fs::remove_dir_all(&records);
    let seen = printed(&output, "node");
    let first = &seen["first"];
    assert_eq!(first["protocolVersion"], 1, "{first}");
    assert_eq!(first["agentName"], "hookloop");
    assert_eq!(first["loadSession"], true);
    assert_eq!(first["mcpHttp"], true);
    assert_eq!(first["worked"], "end_turn");
    assert_eq!(first["removed"], "end_turn");
    assert_eq!(first["cancelled"], "cancelled");
    assert_eq!(first["listed"][0], first["sessionId"]);
    assert_eq!(first["closedError"], -32602, "a closed session is unknown");
    let updates = first["updates"].as_array().unwrap();
    assert!(
        titles(updates)
            .iter()
            .any(|t| t.starts_with("_Stop objection from gate")),
        "{updates:?}"
    );
    // The client takes notices: the objection, and the spent budget at the next end of turn,
    // came with the budget's state.
    let notices: Vec<&Value> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "notice")
        .collect();
    assert_eq!(notices.len(), 2, "{updates:?}");
    for notice in notices {
        assert_eq!(notice["title"], "_Stop objections: 1 of 1 used", "{notice}");
        assert_eq!(notice["severity"], "warning", "{notice}");
    }
    // Asked about the destructive tool with the four options; rejected, it did not run.
    let asked = first["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["title"], "gate__remove");
    assert_eq!(asked[0]["rawInput"]["path"], "/tmp/x");
    assert_eq!(
        asked[0]["options"],
        serde_json::json!(["allow_once", "allow_always", "reject_once", "reject_always"])
    );
    let rejected = updates
        .iter()
        .find(|u| u["toolCallId"] == asked[0]["toolCallId"] && u["status"] == "failed")
        .unwrap_or_else(|| panic!("the rejected call shows failed: {updates:?}"));
    assert!(
        rejected["rawOutput"]["text"]
            .as_str()
            .unwrap()
            .contains("the user rejected this call of gate__remove"),
        "{rejected}"
    );
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update"
                && u["status"] == "failed"
                && u["toolCallId"] != asked[0]["toolCallId"]),
        "the hanging call ends failed when cancelled: {updates:?}"
    );

    let second = &seen["second"];
    let history = second["history"].as_array().unwrap();
    assert_eq!(
        history[0]["sessionUpdate"], "user_message_chunk",
        "{second}"
    );
    assert_eq!(history[0]["content"]["text"], "work");
    assert_eq!(second["again"], "end_turn");
    assert_eq!(second["removedAgain"], "end_turn");
    let later = second["updates"].as_array().unwrap();
    // The budget of 1 was spent before the restart: no objection now.
    assert!(
        !titles(later)
            .iter()
            .any(|t| t.starts_with("_Stop objection")),
        "{later:?}"
    );
    // The "always reject" was restored with the session: not asked again, and refused.
    assert_eq!(second["permissions"], serde_json::json!([]), "{second}");
    assert!(
        later.iter().any(|u| u["status"] == "failed"
            && u["rawOutput"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("the user rejected this call of gate__remove"))),
        "{later:?}"
    );
    assert!(!provider.requests().is_empty());
}

/// The model both clients talk to: each prompt's word picks its tool call.
fn scripted_provider() -> FakeProvider {
    FakeProvider::start(|request| {
        match (
            loopback::last_user_text(request).as_str(),
            loopback::after_tool(request),
        ) {
            ("work", false) => Reply::tool("gate__echo", serde_json::json!({"x": 1})),
            ("hang", false) => Reply::tool("gate__hang", serde_json::json!({})),
            ("remove", false) => Reply::tool("gate__remove", serde_json::json!({"path": "/tmp/x"})),
            _ => Reply::text("done"),
        }
    })
}

/// A fresh record directory for one client's run.
fn record_dir(client: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hookloop-acp-{client}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The one JSON line a client script printed.
fn printed(output: &std::process::Output, what: &str) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The titles of the tool calls among `updates`.
fn titles(updates: &[Value]) -> Vec<&str> {
    updates.iter().filter_map(|u| u["title"].as_str()).collect()
}

/// The Python ACP SDK (PyPI `agent-client-protocol`) as a second, independent client: a session
/// with a real MCP hook server through an objection, a tool call, a permission request answered
/// "allow once", a cancel and `session/close`, then `session/load` of the recorded session in a
/// new agent process, where the spent budget stays spent.
///
/// Needs `HOOKLOOP_ACP_PYTHON`, a Python with the SDK: `CI_ENV=/dev/stdout bash
/// .ci/setup.d/41-acp-python-interop.sh` installs it and prints the variable.
#[test]
fn the_python_sdk_objects_asks_cancels_closes_and_loads_a_session() {
    let Some(python) = std::env::var_os("HOOKLOOP_ACP_PYTHON").map(PathBuf::from) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but HOOKLOOP_ACP_PYTHON is not: .ci/setup.d/41-acp-python-interop.sh did not run"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"acp python interop skipped: HOOKLOOP_ACP_PYTHON is unset; run `CI_ENV=/dev/stdout \
              bash .ci/setup.d/41-acp-python-interop.sh` and export the variable it prints\n",
        );
        return;
    };
    let provider = scripted_provider();
    let records = record_dir("py");
    let output = Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/acp_client.py"
        ))
        .arg(loopback::hookloop())
        .arg(env!("CARGO_BIN_EXE_hookloop-test-server"))
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("MCP_HOOK_SERVERS", "*")
        .env("SPROUT_AGENT_STOP_MAX_REJECTIONS", "1")
        .env("HOOKLOOP_RECORD_DIR", &records)
        .output()
        .expect("python runs");
    let _ = std::fs::remove_dir_all(&records);
    let seen = printed(&output, "python");
    let first = &seen["first"];
    assert_eq!(first["protocolVersion"], 1, "{first}");
    assert_eq!(first["agentName"], "hookloop");
    assert_eq!(first["loadSession"], true);
    assert_eq!(first["worked"], "end_turn");
    assert_eq!(first["cancelled"], "cancelled");
    // The destructive tool was asked about, with the four options, and ran once allowed.
    assert_eq!(first["removed"], "end_turn");
    let asked = first["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["title"], "gate__remove");
    assert_eq!(asked[0]["rawInput"]["path"], "/tmp/x");
    assert_eq!(
        asked[0]["options"],
        serde_json::json!(["allow_once", "allow_always", "reject_once", "reject_always"])
    );
    assert_eq!(first["listed"][0], first["sessionId"]);
    assert_eq!(first["titles"][0], "work");
    assert_eq!(first["closedError"], -32602, "a closed session is unknown");
    let updates = first["updates"].as_array().unwrap();
    let titles: Vec<&str> = updates.iter().filter_map(|u| u["title"].as_str()).collect();
    assert!(titles.contains(&"gate__echo"), "{titles:?}");
    let removed = updates
        .iter()
        .find(|u| u["toolCallId"] == asked[0]["toolCallId"] && u["status"] == "completed")
        .unwrap_or_else(|| panic!("the allowed call completes: {updates:?}"));
    assert!(
        removed["rawOutput"]["text"]
            .as_str()
            .unwrap()
            .starts_with("removed"),
        "{removed}"
    );
    assert!(
        titles
            .iter()
            .any(|t| t.starts_with("_Stop objection from gate")),
        "{titles:?}"
    );
    assert!(
        updates
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed"),
        "the hanging call ends failed when cancelled: {updates:?}"
    );

    let second = &seen["second"];
    let history = second["history"].as_array().unwrap();
    assert_eq!(
        history[0]["sessionUpdate"], "user_message_chunk",
        "{second}"
    );
    assert_eq!(history[0]["content"]["text"], "work");
    assert_eq!(second["again"], "end_turn");
    // The budget of 1 was spent before the restart: no objection now.
    let later: Vec<&str> = second["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["title"].as_str())
        .collect();
    assert!(
        !later.iter().any(|t| t.starts_with("_Stop objection")),
        "{later:?}"
    );
}
