//! The real Claude Code CLI (`@anthropic-ai/claude-code`, pinned by
//! `.ci/setup.d/45-bridge-hosts.sh`), run headless (`claude -p`) and offline against a loopback
//! Messages server, with `hookloop mcp proxy --name todo -- hookloop todo-server` as its MCP
//! server. What the fake model received shows what the host did: its tool list holds the todo
//! server's tools and no hook, and the model's call reached the real server through the proxy.
//!
//! Needs `HOOKLOOP_CLAUDE_BIN`; without it each test prints one line and passes.

mod binary;
mod hosts;
mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::anthropic_message;
use support::loopback::{Loopback, Reply};

use hosts::{OBJECTION, Scratch};

const ADD: &str = "mcp__todo__add";

fn tool_use(id: &str, name: &str, input: Value) -> Reply {
    Reply::json(&anthropic_message(
        json!([{"type": "text", "text": "Noting it."},
               {"type": "tool_use", "id": id, "name": name, "input": input}]),
        "tool_use",
        100,
    ))
}

fn text(content: &str) -> Reply {
    Reply::json(&anthropic_message(
        json!([{"type": "text", "text": content}]),
        "end_turn",
        100,
    ))
}

/// Runs `claude -p` against `model` with the proxied todo server, and `settings` (a
/// settings.json) if given, with the hook command's environment: the servers it may call.
/// Returns the request bodies the model received, each checked.
async fn run_claude(
    bin: &Path,
    scratch: &Scratch,
    model: &Loopback,
    settings: Option<Value>,
) -> Vec<Value> {
    let (command, args) = hosts::proxied_todo_server();
    let mcp = json!({"mcpServers": {"todo": {
        "type": "stdio", "command": command, "args": args,
        "env": {"XDG_RUNTIME_DIR": scratch.runtime()},
    }}});
    let mcp = scratch.write("mcp.json", &mcp.to_string());
    let outside = Loopback::start([]).await;
    let mut claude =
        hosts::claude_command(bin, scratch, &outside, model, "Add a todo: write tests.");
    claude
        .arg("--mcp-config")
        .arg(&mcp)
        .args(["--strict-mcp-config", "--allowedTools", ADD]);
    if let Some(settings) = settings {
        // The hook inherits the host's environment; `hookloop hook` reads the servers there.
        claude
            .env("MCP_HOOK_SERVERS", "todo")
            .arg("--settings")
            .arg(scratch.write("settings.json", &settings.to_string()));
    }
    hosts::run(claude, "claude -p").await;
    hosts::assert_offline(&outside);
    model
        .requests()
        .iter()
        .enumerate()
        .map(hosts::messages_body)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_sees_the_todo_tools_but_no_hook_and_its_call_reaches_the_server() {
    let Some(bin) = hosts::host_bin("HOOKLOOP_CLAUDE_BIN") else {
        return;
    };
    let scratch = Scratch::new("claude-tools");
    let model = Loopback::start([
        tool_use("toolu_add", ADD, json!({"text": "write tests"})),
        text("Added."),
    ])
    .await;
    let bodies = run_claude(&bin, &scratch, &model, None).await;

    assert_eq!(bodies.len(), 2, "one call, one answer after it");
    hosts::assert_todo_tools_without_hooks(&bodies[0]["tools"]);
    hosts::assert_todo_tools_without_hooks(&bodies[1]["tools"]);
    assert!(hosts::tool_result(&bodies[0], "toolu_add").is_none());
    let result = hosts::tool_result(&bodies[1], "toolu_add").expect("the call's result came back");
    assert_ne!(result["is_error"], true, "{result}");
    assert!(hosts::mentions(result, "added #1"), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_s_live_connection_answers_stop_with_the_todo_its_model_added() {
    let Some(bin) = hosts::host_bin("HOOKLOOP_CLAUDE_BIN") else {
        return;
    };
    let scratch = Scratch::new("claude-live");
    let model = Loopback::start([
        tool_use("toolu_add", ADD, json!({"text": "write tests"})),
        text("Added.").after(hosts::HELD),
    ])
    .await;
    // While the model holds its answer to the call's result, the todo is on the server the host
    // started: `_Stop` through the socket sees it.
    let (bodies, answer) = tokio::join!(
        run_claude(&bin, &scratch, &model, None),
        hosts::hook_once(&model, &scratch, 2, "_Stop"),
    );
    assert_eq!(answer["text"], OBJECTION, "{answer}");
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(bodies.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_stop_hook_objects_with_the_open_todo_until_the_budget_is_spent() {
    let Some(bin) = hosts::host_bin("HOOKLOOP_CLAUDE_BIN") else {
        return;
    };
    let scratch = Scratch::new("claude-stop");
    // The model adds a todo and never completes it, calling a tool after each objection (so no
    // end of turn comes right after one): `_Stop` objects at every end of turn, and after the
    // default budget of 3 objections the host stops whatever the server says. PostToolUse is
    // registered too: it is how the hook command learns the model acted since an objection.
    let model = Loopback::start([
        tool_use("toolu_add", ADD, json!({"text": "write tests"})),
        text("Added."),
        tool_use("toolu_2", ADD, json!({"text": "and docs"})),
        text("Still open."),
        tool_use("toolu_3", ADD, json!({"text": "and a bench"})),
        text("Still open."),
        tool_use("toolu_4", ADD, json!({"text": "and a note"})),
        text("Still open."),
    ])
    .await;
    let hook = json!([{"hooks": [
        {"type": "command", "command": hosts::hook_command("claude-code"), "timeout": 30},
    ]}]);
    let settings = json!({"hooks": {"Stop": hook, "PostToolUse": hook}});
    let bodies = run_claude(&bin, &scratch, &model, Some(settings)).await;

    assert_eq!(
        bodies.len(),
        8,
        "the turn, its answer, then a tool call and an end per objection"
    );
    assert_eq!(model.remaining(), 0);
    for (n, body) in bodies.iter().enumerate() {
        hosts::assert_todo_tools_without_hooks(&body["tools"]);
        let objected = hosts::mentions(&body["messages"], OBJECTION);
        assert_eq!(objected, n >= 2, "request {n}: objection seen {objected}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn after_hooks_install_claude_code_s_stop_hook_keeps_it_working_within_the_budget() {
    let Some(bin) = hosts::host_bin("HOOKLOOP_CLAUDE_BIN") else {
        return;
    };
    let scratch = Scratch::new("claude-install");
    // The person's project as it was: the todo server in .mcp.json, run plainly, and a setting
    // of their own. `hookloop hooks install claude-code` writes the rest.
    let hookloop = binary::hookloop();
    let mcp = json!({"mcpServers": {"todo": {"command": hookloop, "args": ["todo-server"]}}});
    std::fs::write(scratch.project().join(".mcp.json"), mcp.to_string()).unwrap();
    std::fs::create_dir_all(scratch.project().join(".claude")).unwrap();
    let mine = json!({"enableAllProjectMcpServers": true});
    std::fs::write(
        scratch.project().join(".claude/settings.json"),
        mine.to_string(),
    )
    .unwrap();
    hosts::hooks_cli(&scratch, &["install", "claude-code"], &[]);
    let again = hosts::hooks_cli(&scratch, &["install", "claude-code"], &[]);
    assert_eq!(again.matches("nothing to change").count(), 2, "{again}");

    let model = Loopback::start([
        tool_use("toolu_add", ADD, json!({"text": "write tests"})),
        text("Added."),
        tool_use("toolu_2", ADD, json!({"text": "and docs"})),
        text("Still open."),
        tool_use("toolu_3", ADD, json!({"text": "and a bench"})),
        text("Still open."),
        tool_use("toolu_4", ADD, json!({"text": "and a note"})),
        text("Still open."),
    ])
    .await;
    let outside = Loopback::start([]).await;
    // No --mcp-config, no --settings, no MCP_HOOK_SERVERS: what the host runs is what the
    // project's files say.
    let mut claude =
        hosts::claude_command(&bin, &scratch, &outside, &model, "Add a todo: write tests.");
    claude.args(["--allowedTools", ADD]);
    hosts::run(claude, "claude -p").await;
    hosts::assert_offline(&outside);
    let bodies: Vec<Value> = model
        .requests()
        .iter()
        .enumerate()
        .map(hosts::messages_body)
        .collect();

    assert_eq!(
        bodies.len(),
        8,
        "the turn, its answer, then a tool call and an end per objection"
    );
    assert_eq!(model.remaining(), 0);
    for (n, body) in bodies.iter().enumerate() {
        hosts::assert_todo_tools_without_hooks(&body["tools"]);
        let objected = hosts::mentions(&body["messages"], OBJECTION);
        assert_eq!(objected, n >= 2, "request {n}: objection seen {objected}");
    }

    hosts::hooks_cli(&scratch, &["uninstall", "claude-code"], &[]);
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(scratch.project().join(name)).unwrap())
            .unwrap()
    };
    assert_eq!(read(".mcp.json"), mcp, "the server's own command is back");
    assert_eq!(
        read(".claude/settings.json"),
        mine,
        "the person's setting alone is left"
    );
}
