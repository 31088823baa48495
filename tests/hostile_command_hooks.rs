//! Hostile command hooks against the real `hookloop run`: a hook that floods its output, one
//! that leaves a daemon holding its pipes, one that never reads a large event, and more hooks
//! than run at once. Each bounds what the README's resource table says it bounds.

mod common;
mod hook_project;
mod loopback;
#[path = "support/peak_memory.rs"]
mod peak_memory;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Scratch;
use loopback::{FakeProvider, Reply};
use peak_memory::run_poked_with;
use serde_json::{Value, json};

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// The project: `evil` (the test server with a `poke` tool) and `hooks` as its settings.
fn project(dir: &Path, hooks: Value) -> std::path::PathBuf {
    let evil = json!({"command": TEST_SERVER, "env": {"TS_EXTRA_TOOLS": "poke"}});
    let config = dir.join("mcp.json");
    std::fs::write(&config, json!({"mcpServers": {"evil": evil}}).to_string()).unwrap();
    std::fs::create_dir_all(dir.join(".claude")).unwrap();
    std::fs::write(
        dir.join(".claude/settings.json"),
        json!({"hooks": hooks}).to_string(),
    )
    .unwrap();
    config
}

fn pre_tool_use(command: &str) -> Value {
    json!({"PreToolUse": [{"matcher": "mcp__evil__poke",
        "hooks": [{"type": "command", "command": command}]}]})
}

const ARGS: [&str; 2] = ["--command-hooks", ".claude/settings.json"];
const ENV: [(&str, &str); 2] = [
    ("MCP_HOOK_SERVERS", "*"),
    ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "20000"),
];

#[test]
fn a_hook_that_floods_its_stdout_is_killed_and_costs_little_memory() {
    let dir = Scratch::new("cmdhooks-flood-out");
    let config = project(dir.path(), pre_tool_use("yes"));
    let run = run_poked_with(&config, dir.path(), Duration::ZERO, &ARGS, &ENV);
    run.assert_below(64 * 1024);
    let stderr = run.stderr();
    assert!(stderr.contains("bytes on its stdout; killed"), "{stderr}");
    // It failed open: the call ran.
    assert!(stderr.contains("poke ran"), "{stderr}");
}

#[test]
fn a_hook_that_floods_its_stderr_is_killed_and_costs_little_memory() {
    let dir = Scratch::new("cmdhooks-flood-err");
    let config = project(dir.path(), pre_tool_use("yes >&2"));
    let run = run_poked_with(&config, dir.path(), Duration::ZERO, &ARGS, &ENV);
    run.assert_below(64 * 1024);
    assert!(
        run.stderr().contains("bytes on its stderr; killed"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_hook_that_leaves_a_daemon_holding_its_stdout_does_not_hold_the_round() {
    let dir = Scratch::new("cmdhooks-daemon");
    let deny = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no poking"}}"#;
    let hook = format!("sleep 300 & echo $! > daemon.pid; echo '{deny}'");
    let config = project(dir.path(), pre_tool_use(&hook));
    let started = Instant::now();
    let run = run_poked_with(&config, dir.path(), Duration::ZERO, &ARGS, &ENV);
    let elapsed = started.elapsed();
    let pid: u32 = std::fs::read_to_string(dir.path().join("daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Left running, as the hosts leave it; this test cleans up after it.
    let daemon_ran = common::alive(pid);
    // SAFETY: the pid is the test's own `sleep`, read from the file it wrote.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert_eq!(run.out.status.code(), Some(0), "{}", run.stderr());
    assert!(run.stderr().contains("no poking"), "{}", run.stderr());
    assert!(elapsed < Duration::from_secs(15), "{elapsed:?}");
    assert!(daemon_ran);
}

#[test]
fn a_hook_that_never_reads_a_large_event_does_not_stall_the_round() {
    let dir = Scratch::new("cmdhooks-unread");
    let config = project(dir.path(), pre_tool_use("exit 0"));
    let big = "x".repeat(4 << 20);
    let turn = AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| match turn.fetch_add(1, Ordering::SeqCst) {
        0 => Reply::tool("evil__poke", json!({"blob": big})),
        _ => Reply::text("Done."),
    });
    let started = Instant::now();
    let out = Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap()])
        .args(ARGS)
        .arg("go")
        .current_dir(dir.path())
        .envs(ENV)
        // The 4 MiB call fits the context: no compaction between the two requests.
        .env("HOOKLOOP_MAX_CONTEXT_TOKENS", "8000000")
        .env_remove("HOOKLOOP_LOG")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(provider.requests().len(), 2);
}

#[test]
fn hooks_past_the_concurrency_cap_wait_for_a_slot() {
    let dir = Scratch::new("cmdhooks-cap");
    let running = dir.path().join("running");
    std::fs::create_dir_all(&running).unwrap();
    let hook = format!(
        "f={r}/$$; touch $f; ls {r} | wc -l >> seen; sleep 0.2; rm $f",
        r = running.display()
    );
    let config = project(dir.path(), pre_tool_use(&hook));
    let calls: Vec<(String, Value)> = (0..20)
        .map(|i| ("evil__poke".to_owned(), json!({"i": i})))
        .collect();
    let turn = AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| match turn.fetch_add(1, Ordering::SeqCst) {
        0 => Reply::Tools(calls.clone()),
        _ => Reply::text("Done."),
    });
    let out = Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap()])
        .args(ARGS)
        .arg("go")
        .current_dir(dir.path())
        .envs(ENV)
        .env_remove("HOOKLOOP_LOG")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Vec<usize> = std::fs::read_to_string(dir.path().join("seen"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(seen.len(), 20);
    let cap = hookloop::mcp::command_hooks::MAX_CONCURRENT_COMMANDS;
    assert!(seen.iter().all(|&n| n <= cap), "{seen:?}");
    assert!(seen.iter().any(|&n| n > 1), "they ran at once: {seen:?}");
}
