//! Claude Code hooks, unchanged, through `hookloop run`: the project of `hook_project` with a
//! real MCP server (`hookloop-test-server` as `fs`, with a `write` tool) and a loopback model.
//! Each test checks the spec's rules holding for command hooks where they show: in what the
//! model was sent, in the events the hooks read, in the exit status and the record.

mod common;
mod hook_project;
mod loopback;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Scratch;
use hook_project::{
    CONVENTIONS, FAILURE, HELD, RED, REMINDER, events_named, hook_bodies, results_of,
};
use loopback::{FakeProvider, Reply};
use serde_json::{Value, json};

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// `.mcp.json` with the `fs` server, run in the project.
fn mcp_config(dir: &Path) {
    let fs = json!({"command": TEST_SERVER, "env": {"TS_EXTRA_TOOLS": "write"}});
    std::fs::write(
        dir.join(".mcp.json"),
        json!({"mcpServers": {"fs": fs}}).to_string(),
    )
    .unwrap();
}

/// `hookloop run` in `dir` with `args`, the model at `provider`, and `env` on top.
fn run(dir: &Path, provider: &FakeProvider, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(loopback::hookloop());
    command
        .arg("run")
        .args(args)
        .current_dir(dir)
        .env_remove("HOOKLOOP_LOG")
        .env_remove("HOOKLOOP_COMMAND_HOOKS")
        .env_remove("SPROUT_AGENT_STOP_MAX_REJECTIONS")
        .env("SPROUT_AGENT_HOOK_TIMEOUT_MS", "20000")
        .env("MCP_HOOK_SERVERS", "*")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

fn write(path: &str) -> Reply {
    Reply::tool("fs__write", json!({"path": path, "text": "ok"}))
}

/// A model that answers the requests in turn.
fn scripted(replies: Vec<Reply>) -> FakeProvider {
    let turn = AtomicUsize::new(0);
    FakeProvider::start(move |_| {
        let n = turn.fetch_add(1, Ordering::SeqCst);
        replies
            .get(n)
            .cloned()
            .unwrap_or_else(|| Reply::text("out of script"))
    })
}

fn body(hook: &str, text: &str) -> Value {
    json!({"hook": hook, "server": "claude-code", "text": text})
}

#[test]
fn a_claude_code_projects_hooks_run_unchanged_and_the_session_replays() {
    let dir = Scratch::new("cmdhooks-run");
    hook_project::write(dir.path());
    mcp_config(dir.path());
    let provider = scripted(vec![
        write("secrets/key"),
        write("notes.txt"),
        Reply::text("Done."),
        write("fixed.txt"),
        Reply::text("Fixed."),
    ]);
    let out = run(
        dir.path(),
        &provider,
        &[
            "--command-hooks",
            ".claude/settings.json",
            "--record",
            "session.jsonl",
            "tidy up",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Fixed.");
    let requests = provider.requests();
    assert_eq!(requests.len(), 5, "{stderr}");

    // SessionStart's plain stdout is context after the prompt, from the first request on.
    assert_eq!(
        hook_bodies(&requests[0]),
        [body("_SessionStart", CONVENTIONS)]
    );
    // The PreToolUse hook denied the write under secrets/: the call did not run.
    let denied = results_of(&requests[1], "fs__write");
    assert!(
        denied[0].contains("secrets/key is off limits"),
        "{denied:?}"
    );
    assert!(!dir.path().join("secrets").exists());
    // The write that ran got PostToolUse context after its result.
    assert!(hook_bodies(&requests[2]).contains(&body("_PostToolUse", REMINDER)));
    // The Stop hook ran the tests and objected with their output.
    let objection = format!("{RED}\n{FAILURE}");
    assert!(hook_bodies(&requests[3]).contains(&body("_Stop", &objection)));
    assert!(dir.path().join("fixed.txt").exists());

    // What the Stop hook read: the turn's last text, and the latch once it had objected.
    let stops = events_named(dir.path(), "Stop");
    let seen: Vec<(Value, Value)> = stops
        .iter()
        .map(|e| {
            (
                e["stop_hook_active"].clone(),
                e["last_assistant_message"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (json!(false), json!("Done.")),
            (json!(true), json!("Fixed."))
        ]
    );
    let record = dir.path().join("session.jsonl");
    assert_eq!(stops[0]["transcript_path"], json!(record.to_string_lossy()));
    assert_eq!(stops[0]["cwd"], json!(dir.path().to_string_lossy()));
    // What the PreToolUse hook read: the MCP tool as Claude Code names it, with its call id.
    let pre = events_named(dir.path(), "PreToolUse");
    assert_eq!(pre[0]["tool_name"], "mcp__fs__write");
    assert_eq!(
        pre[0]["tool_input"],
        json!({"path": "secrets/key", "text": "ok"})
    );
    assert!(
        pre[0]["tool_use_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    assert_eq!(pre[0]["session_id"], stops[0]["session_id"]);

    // The record replays without running a command.
    let before = hook_project::events(dir.path()).len();
    let replay = Command::new(loopback::hookloop())
        .args(["replay", record.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{}{}",
        String::from_utf8_lossy(&replay.stdout),
        String::from_utf8_lossy(&replay.stderr)
    );
    assert_eq!(hook_project::events(dir.path()).len(), before);
}

#[test]
fn a_blocked_prompt_reaches_the_model_with_the_hooks_reason_as_context() {
    let dir = Scratch::new("cmdhooks-prompt");
    hook_project::write(dir.path());
    std::fs::write(dir.path().join("fixed.txt"), "").unwrap();
    let provider = scripted(vec![Reply::text("I will not use it.")]);
    let out = run(
        dir.path(),
        &provider,
        &[
            "--command-hooks",
            ".claude/settings.json",
            "my password is hunter2",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let requests = provider.requests();
    assert!(
        hook_bodies(&requests[0]).contains(&body("_UserPromptSubmit", HELD)),
        "{:?}",
        requests[0]
    );
    assert!(stderr.contains("does not hold prompts back"), "{stderr}");
}

/// A project whose one Stop hook always blocks.
fn always_red(dir: &Path) {
    let settings = json!({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "cat >> stops.jsonl; echo >> stops.jsonl; echo still red >&2; exit 2"}
    ]}]}});
    std::fs::create_dir_all(dir.join(".claude")).unwrap();
    std::fs::write(dir.join(".claude/settings.json"), settings.to_string()).unwrap();
}

fn stop_count(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("stops.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

#[test]
fn a_stop_hook_that_always_blocks_is_held_to_the_budget() {
    let dir = Scratch::new("cmdhooks-budget");
    always_red(dir.path());
    mcp_config(dir.path());
    // The model works after each objection, then ends again: only the budget stops it.
    let turn = AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| {
        if turn.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            Reply::text("Done.")
        } else {
            write("x.txt")
        }
    });
    let out = run(
        dir.path(),
        &provider,
        &["--command-hooks", ".claude/settings.json", "go"],
        &[("SPROUT_AGENT_STOP_MAX_REJECTIONS", "2")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Two objections, then the spent budget ends the prompt without asking a third time.
    assert_eq!(stop_count(dir.path()), 2, "{stderr}");
    assert_eq!(provider.requests().len(), 5);
}

#[test]
fn a_model_that_ends_again_right_after_an_objection_is_let_stop() {
    let dir = Scratch::new("cmdhooks-declined");
    always_red(dir.path());
    let provider = scripted(vec![Reply::text("Done."), Reply::text("Still done.")]);
    let out = run(
        dir.path(),
        &provider,
        &["--command-hooks", ".claude/settings.json", "go"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stop_count(dir.path()), 1);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Still done.");
}

#[test]
fn a_hook_that_hangs_costs_its_timeout_twice_gets_killed_and_one_that_exits_1_fails_open() {
    let dir = Scratch::new("cmdhooks-hang");
    let settings = json!({"hooks": {
        "PreToolUse": [{"matcher": "mcp__fs__write", "hooks": [
            {"type": "command", "command": "echo $$ >> hung.pids; exec sleep 300"}
        ]}],
        "Stop": [{"hooks": [{"type": "command", "command": "echo broken >&2; exit 1"}]}]
    }});
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    mcp_config(dir.path());
    // Two calls of one reply: one round, whose two timeouts are consecutive.
    let both = Reply::Tools(vec![
        ("fs__write".into(), json!({"path": "a.txt", "text": "ok"})),
        ("fs__write".into(), json!({"path": "b.txt", "text": "ok"})),
    ]);
    let provider = scripted(vec![both, Reply::text("Done.")]);
    let started = Instant::now();
    let out = run(
        dir.path(),
        &provider,
        &["--command-hooks", ".claude/settings.json", "go"],
        &[("SPROUT_AGENT_HOOK_TIMEOUT_MS", "500")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // Each timeout failed open: both writes ran; the Stop hook's exit 1 did too.
    assert!(dir.path().join("a.txt").exists() && dir.path().join("b.txt").exists());
    assert!(
        stderr.contains("killed after two hook timeouts in a row"),
        "{stderr}"
    );
    assert!(stderr.contains("exit 1: broken"), "{stderr}");
    let pids: Vec<u32> = std::fs::read_to_string(dir.path().join("hung.pids"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    // Killed, not waited on (the round does not wait on what a hook left running): on a loaded
    // machine the signal may still be on its way when the run exits.
    let until = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|pid| common::alive(*pid)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(pids.iter().all(|pid| !common::alive(*pid)), "{pids:?}");
}

#[test]
fn command_hooks_run_only_when_mcp_hook_servers_allows_them() {
    let dir = Scratch::new("cmdhooks-allow");
    always_red(dir.path());
    let provider = scripted(vec![Reply::text("Done.")]);
    let out = run(
        dir.path(),
        &provider,
        &["--command-hooks", ".claude/settings.json", "go"],
        &[("MCP_HOOK_SERVERS", "todo")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stop_count(dir.path()), 0);
    assert!(
        stderr.contains("MCP_HOOK_SERVERS does not allow them"),
        "{stderr}"
    );
    // Named like a server, they run.
    let provider = scripted(vec![Reply::text("Done."), Reply::text("Done.")]);
    let out = run(
        dir.path(),
        &provider,
        &["--command-hooks", "guard=.claude/settings.json", "go"],
        &[("MCP_HOOK_SERVERS", "guard")],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stop_count(dir.path()), 1);
}

#[test]
fn a_broken_settings_file_stops_start_up_naming_it() {
    let dir = Scratch::new("cmdhooks-broken");
    let settings = json!({"hooks": {"PreToolUse": [{"matcher": "mcp__(?!fs)__.*",
        "hooks": [{"type": "command", "command": "true"}]}]}});
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    let provider = scripted(vec![]);
    let out = run(
        dir.path(),
        &provider,
        &["--command-hooks", ".claude/settings.json", "go"],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("settings.json: hooks.PreToolUse[0]: matcher"),
        "{stderr}"
    );
    assert!(stderr.contains("look-around"), "{stderr}");
    assert!(provider.requests().is_empty());
    // The variable names them the same way.
    let out = run(
        dir.path(),
        &provider,
        &["go"],
        &[("HOOKLOOP_COMMAND_HOOKS", ".claude/settings.json")],
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_goose_plugin_and_a_codex_config_run_as_their_hosts_run_them() {
    let dir = Scratch::new("cmdhooks-hosts");
    mcp_config(dir.path());
    // An Open Plugins plugin as goose runs it: `event` payloads, `${PLUGIN_ROOT}`, stdout blocks.
    let plugin = dir.path().join("plugins/guard");
    std::fs::create_dir_all(plugin.join("hooks")).unwrap();
    std::fs::write(plugin.join("plugin.json"), r#"{"name": "guard"}"#).unwrap();
    hook_project::script(
        &plugin.join("block.sh"),
        "#!/usr/bin/env bash\npayload=\"$(cat)\"\nprintf '%s\\n' \"$payload\" >> \"$PLUGIN_ROOT/seen.jsonl\"\nprintf '{\"decision\":\"block\",\"reason\":\"no writes today\"}'\n",
    );
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": "fs__write",
        "hooks": [{"type": "command", "command": "${PLUGIN_ROOT}/block.sh"}]}]}});
    std::fs::write(plugin.join("hooks/hooks.json"), hooks.to_string()).unwrap();
    // Codex's config.toml: a Stop hook that objects once.
    std::fs::create_dir_all(dir.path().join(".codex")).unwrap();
    std::fs::write(
        dir.path().join(".codex/config.toml"),
        "model = \"gpt-5\"\n\n[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = \"test -f stopped || { touch stopped; echo 'one more check' >&2; exit 2; }\"\n",
    )
    .unwrap();
    let provider = scripted(vec![
        write("x.txt"),
        Reply::text("Done."),
        write("y.txt"),
        Reply::text("Done."),
    ]);
    let out = run(
        dir.path(),
        &provider,
        &[
            "--command-hooks",
            "plugins/guard",
            "--command-hooks",
            ".codex/config.toml",
            "go",
        ],
        &[("MCP_HOOK_SERVERS", "guard,codex")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let requests = provider.requests();
    let denial = results_of(&requests[1], "fs__write");
    assert!(denial[0].contains("no writes today"), "{denial:?}");
    assert!(!dir.path().join("x.txt").exists());
    let objection = json!({"hook": "_Stop", "server": "codex", "text": "one more check"});
    assert!(hook_bodies(&requests[2]).contains(&objection));
    let seen: Value = serde_json::from_str(
        std::fs::read_to_string(plugin.join("seen.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(seen["event"], "PreToolUse");
    assert_eq!(seen["tool_name"], "fs__write");
    assert_eq!(seen["matcher_context"], "fs__write");
}
