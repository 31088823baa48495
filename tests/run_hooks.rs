//! `hookloop run` with a hook server: what a person watching sees of each hook point, in the
//! progress lines on stderr.

mod loopback;

use std::process::Command;

use loopback::{FakeProvider, Reply};
use serde_json::json;

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

#[test]
fn run_shows_injected_context_and_denials_in_its_progress_lines() {
    let dir = std::env::temp_dir().join(format!("hookloop-run-hooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("mcp.json");
    let gate = json!({
        "command": TEST_SERVER,
        "env": {
            "TS_HOOKS": "_UserPromptSubmit,_PreToolUse,_PostToolUse",
            "TS_USER_PROMPT_SUBMIT": "say:mind the tests",
            // The first call is denied, the second let through.
            "TS_PRE_TOOL_USE": "say:no echo yet|empty",
            "TS_POST_TOOL_USE": "say:echo ran",
        },
    });
    std::fs::write(&config, json!({"mcpServers": {"gate": gate}}).to_string()).unwrap();
    let turn = std::sync::atomic::AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| {
        match turn.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => Reply::tool("gate__echo", json!({"n": 1})),
            1 => Reply::tool("gate__echo", json!({"n": 2})),
            _ => Reply::text("Done."),
        }
    });
    let out = Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap(), "go"])
        .current_dir(&dir)
        .env_remove("HOOKLOOP_LOG")
        .env_remove("SPROUT_AGENT_HOOK_TIMEOUT_MS")
        .env("MCP_HOOK_SERVERS", "gate")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Each line is `[  0.1s] <what happened>`.
    let shown: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split_once("s] ").map(|(_, what)| what))
        .filter(|what| what.starts_with('+') || what.starts_with('⊘'))
        .collect();
    assert_eq!(
        shown,
        [
            "+ _UserPromptSubmit from gate injected as context: mind the tests",
            "⊘ gate__echo denied by _PreToolUse of gate: no echo yet",
            "+ _PostToolUse from gate injected as context: echo ran",
        ],
        "{stderr}"
    );
}
