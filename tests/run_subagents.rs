//! Subagents in `hookloop run`: a child's progress lines start with its id, and its `--json`
//! events (streamed pieces included) carry it as `"agent"`; the top-level agent's carry none.
//! The binary runs against a loopback model, with the test MCP server as the hook server.

mod loopback;

use std::process::{Command, Output};

use loopback::{FakeProvider, Reply, called, first_user_text};
use serde_json::{Value, json};

const PROMPT: &str = "Fix the bug.";
const TASK: &str = "Look for the bug.";

/// The parent starts one child, then ends with its own answer; the child echoes, ends, is
/// objected to once by `_SubagentStop`, and ends again with a streamed answer.
fn model(request: &Value) -> Reply {
    if first_user_text(request) == PROMPT {
        return if called(request, "agent") {
            Reply::text("The parent is done.")
        } else {
            Reply::tool("agent", json!({"description": "Find it", "prompt": TASK}))
        };
    }
    if request.to_string().contains("keep looking") {
        let pause = std::time::Duration::from_millis(5);
        Reply::Stream(vec!["found ".into(), "it".into()], pause)
    } else if called(request, "todo__echo") {
        Reply::text("not yet")
    } else {
        Reply::tool("todo__echo", json!({"n": 1}))
    }
}

fn run(json: bool) -> (Output, FakeProvider) {
    let provider = FakeProvider::start(model);
    let dir = std::env::temp_dir().join(format!(
        "hookloop-run-subagents-{}-{json}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("mcp.json");
    let server = json!({"command": env!("CARGO_BIN_EXE_hookloop-test-server"), "env": {
        "TS_HOOKS": "_SubagentStop",
        "TS_SUBAGENT_STOP": "say:keep looking",
    }});
    std::fs::write(&config, json!({"mcpServers": {"todo": server}}).to_string()).unwrap();
    let mut args = vec!["run", "--mcp-config", config.to_str().unwrap()];
    if json {
        args.push("--json");
    }
    args.push(PROMPT);
    let out = Command::new(loopback::hookloop())
        .args(&args)
        .current_dir(&dir)
        .env_remove("HOOKLOOP_LOG")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("MCP_HOOK_SERVERS", "todo")
        .env("HOOKLOOP_SUBAGENTS", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    (out, provider)
}

#[test]
fn a_subagents_progress_lines_start_with_its_id() {
    let (out, _provider) = run(false);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The parent is done.\n"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let has = |needle: &str| lines.iter().any(|l| l.contains(needle));
    // The parent's lines have no prefix; the `agent` call is one of them.
    assert!(has("] → agent {"), "{stderr}");
    assert!(has("] ✓ agent ("), "{stderr}");
    assert!(has("] model: The parent is done."), "{stderr}");
    // The child's carry its id, and name its own end-of-turn hook.
    assert!(has("] [agent-1] → todo__echo {\"n\":1}"), "{stderr}");
    assert!(has("] [agent-1] ✓ todo__echo ("), "{stderr}");
    assert!(has("] [agent-1] model: not yet"), "{stderr}");
    assert!(
        has("] [agent-1] ⚑ _SubagentStop objection from todo (2 left in the budget): keep looking"),
        "{stderr}"
    );
    assert!(has("] [agent-1] model: found it"), "{stderr}");
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("[agent-1]") && l.contains("The parent")),
        "{stderr}"
    );
}

#[test]
fn json_events_of_a_subagent_carry_its_id_and_the_top_level_ones_none() {
    let (out, _provider) = run(true);
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let of = |agent: Option<&str>| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e.get("agent").and_then(Value::as_str) == agent)
            .collect()
    };
    let child = of(Some("agent-1"));
    let top = of(None);
    assert_eq!(child.len() + top.len(), events.len(), "{events:?}");
    let kinds = |events: &[&Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| e["event"].as_str().unwrap().to_owned())
            .collect()
    };
    let child_kinds = kinds(&child);
    for kind in [
        "tool_started",
        "tool_finished",
        "model_text",
        "objection",
        "delta",
    ] {
        assert!(
            child_kinds.iter().any(|k| k == kind),
            "{kind}: {child_kinds:?}"
        );
    }
    assert!(
        child
            .iter()
            .any(|e| e["event"] == "tool_started" && e["name"] == "todo__echo")
    );
    let pieces: String = child
        .iter()
        .filter(|e| e["event"] == "delta")
        .filter_map(|e| e["text"].as_str())
        .collect();
    assert_eq!(pieces, "found it");
    assert!(
        child
            .iter()
            .any(|e| e["event"] == "model_text" && e["text"] == "found it")
    );
    // The `agent` call is the parent's, and its result is the child's last text.
    assert!(
        top.iter()
            .any(|e| e["event"] == "tool_started" && e["name"] == "agent" && e["id"] == "agent-1")
    );
    assert!(top.iter().any(|e| e["event"] == "tool_finished"
        && e["name"] == "agent"
        && e["output"] == "found it"));
    let answer = events.last().unwrap();
    assert_eq!(answer["event"], "answer");
    assert_eq!(answer["text"], "The parent is done.");
    assert!(answer.get("agent").is_none());
}

/// Without a round cap (`HOOKLOOP_MAX_ROUNDS=0`) a model that calls `agent` 100 times in one
/// prompt gets 64 subagents, the session's total, and each call past it the words that say so;
/// the prompt still ends when the model does.
#[test]
fn a_prompt_without_a_round_cap_starts_no_more_than_the_sessions_subagents() {
    const CALLS: usize = 100;
    let provider = FakeProvider::start(|request| {
        if first_user_text(request) == TASK {
            return Reply::text("nothing here");
        }
        let answered = request["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        if answered < CALLS {
            Reply::tool("agent", json!({"description": "Look", "prompt": TASK}))
        } else {
            Reply::text("The parent is done.")
        }
    });
    let dir = std::env::temp_dir().join(format!(
        "hookloop-run-subagent-total-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(loopback::hookloop())
        .args(["run", PROMPT])
        .current_dir(&dir)
        .env_remove("HOOKLOOP_LOG")
        .env_remove("MCP_HOOK_SERVERS")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("HOOKLOOP_SUBAGENTS", "1")
        .env("HOOKLOOP_MAX_ROUNDS", "0")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The parent is done.\n"
    );
    let requests = provider.requests();
    let children = requests
        .iter()
        .filter(|r| first_user_text(r) == TASK)
        .count();
    assert_eq!(children, 64, "one model request per subagent");
    let last = requests
        .iter()
        .rfind(|r| first_user_text(r) == PROMPT)
        .unwrap();
    let results: Vec<String> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(results.len(), CALLS);
    let refused = results
        .iter()
        .filter(|r| r.contains("has started its 64 subagents, the most it may"))
        .count();
    assert_eq!(refused, CALLS - 64, "{:?}", results.last());
}
