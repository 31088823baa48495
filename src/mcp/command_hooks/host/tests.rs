//! The seam: a source in the catalog, hook calls routed to it, its commands' answers combined
//! into one reply under each host's rules, against real `sh` processes.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::machine::HookContext;
use crate::mcp::command_hooks::SourceSpec;

/// A host of one server, `fs`, with a tool and no hooks; it records the hook calls it gets.
#[derive(Default)]
struct Inner {
    hook_calls: Mutex<Vec<ServerName>>,
    session: Mutex<String>,
}

impl ToolHost for Inner {
    fn catalog_generation(&self) -> u64 {
        7
    }

    fn catalog(&self) -> Catalog {
        Catalog {
            servers: vec![ServerTools {
                server: ServerName::new("fs").unwrap(),
                tools: vec![ToolInfo::new("read", json!({"type": "object"}))],
            }],
        }
    }

    async fn call_tool(&self, _call: &ToolCall) -> ToolOutput {
        ToolOutput::text("read")
    }

    async fn call_hook(&self, call: &HookCall) -> HookReply {
        lock(&self.hook_calls).push(call.server.clone());
        HookReply::Text {
            text: "inner".into(),
        }
    }

    async fn kill_server(&self, _server: &ServerName) {}

    fn set_session_id(&self, id: &str) {
        *lock(&self.session) = id.to_owned();
    }
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("hookloop-seam-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// A host whose `.claude/settings.json` holds `hooks`.
    fn host(&self, hooks: Value) -> WithCommandHooks<Inner> {
        let settings = self.0.join(".claude/settings.json");
        std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
        std::fs::write(&settings, json!({"hooks": hooks}).to_string()).unwrap();
        let spec = SourceSpec::parse(".claude/settings.json").unwrap();
        let hooks = CommandHooks::load(&[spec], &self.0).unwrap();
        WithCommandHooks::new(Inner::default(), hooks, &self.0).unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn commands(event: &str, matcher: Option<&str>, commands: &[&str]) -> Value {
    let hooks: Vec<Value> = commands
        .iter()
        .map(|c| json!({"type": "command", "command": c}))
        .collect();
    let mut group = json!({"hooks": hooks});
    if let Some(m) = matcher {
        group["matcher"] = json!(m);
    }
    json!({ event: [group] })
}

fn call(hook: Hook, arguments: Value, timeout: Duration) -> HookCall {
    HookCall {
        server: ServerName::new("claude-code").unwrap(),
        hook,
        timeout,
        context: HookContext::default(),
        arguments: arguments.as_object().cloned().unwrap_or_default(),
    }
}

fn text(reply: HookReply) -> String {
    match reply {
        HookReply::Text { text } => text,
        other => panic!("expected text, got {other:?}"),
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_source_lists_the_hooks_its_commands_run_at_after_the_inner_servers() {
    let dir = Scratch::new("catalog");
    let mut hooks = commands("SessionStart", Some("startup"), &["cat notes"]);
    hooks["Stop"] = commands("Stop", None, &["true"])["Stop"].clone();
    hooks["Notification"] = commands("Notification", None, &["true"])["Notification"].clone();
    let host = dir.host(hooks);
    let catalog = host.catalog();
    let names: Vec<&str> = catalog.servers.iter().map(|s| s.server.as_str()).collect();
    assert_eq!(names, ["fs", "claude-code"]);
    let listed: Vec<&str> = catalog.servers[1]
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    // A `startup` matcher never takes a compaction's `compact`: no _PostCompact.
    assert_eq!(listed, ["_SessionStart", "_Stop"]);
    assert_eq!(host.catalog_generation(), 7);
}

#[tokio::test]
async fn a_source_named_as_a_server_is_refused() {
    let dir = Scratch::new("clash");
    std::fs::write(dir.0.join("s.json"), json!({"hooks": {}}).to_string()).unwrap();
    let spec = SourceSpec::parse("fs=s.json").unwrap();
    let hooks = CommandHooks::load(&[spec], &dir.0).unwrap();
    let error = WithCommandHooks::new(Inner::default(), hooks, &dir.0)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("as an MCP server is"), "{error}");
}

#[tokio::test]
async fn hook_calls_reach_the_source_or_the_inner_host_by_name() {
    let dir = Scratch::new("route");
    let host = dir.host(commands("Stop", None, &["echo red >&2; exit 2"]));
    assert_eq!(
        text(
            host.call_hook(&call(Hook::Stop, json!({}), 10 * SECOND))
                .await
        ),
        "red"
    );
    let mut to_fs = call(Hook::Stop, json!({}), SECOND);
    to_fs.server = ServerName::new("fs").unwrap();
    assert_eq!(text(host.call_hook(&to_fs).await), "inner");
    assert_eq!(lock(&host.inner().hook_calls).len(), 1);
}

#[tokio::test]
async fn the_session_id_is_one_for_servers_and_commands() {
    let dir = Scratch::new("session");
    let host = dir.host(commands(
        "Stop",
        None,
        &["python3 -c 'import json,sys; print(json.load(sys.stdin)[\"session_id\"], file=sys.stderr)'; exit 2"],
    ));
    let first = lock(&host.inner().session).clone();
    assert_eq!(first.len(), 16);
    assert_eq!(
        text(
            host.call_hook(&call(Hook::Stop, json!({}), 10 * SECOND))
                .await
        ),
        first
    );
    host.set_session_id("acp-7");
    assert_eq!(*lock(&host.inner().session), "acp-7");
    assert_eq!(
        text(
            host.call_hook(&call(Hook::Stop, json!({}), 10 * SECOND))
                .await
        ),
        "acp-7"
    );
}

#[tokio::test]
async fn answers_combine_in_configuration_order_and_an_identical_command_runs_once() {
    let dir = Scratch::new("combine");
    let count = dir.0.join("count");
    let counted = format!("echo x >> {}; echo second >&2; exit 2", count.display());
    let host = dir.host(commands(
        "Stop",
        None,
        &[
            "sleep 0.3; echo first >&2; exit 2",
            &counted,
            &counted,
            "exit 0",
        ],
    ));
    let said = text(
        host.call_hook(&call(Hook::Stop, json!({}), 10 * SECOND))
            .await,
    );
    assert_eq!(said, "first\n\nsecond");
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "x\n");
}

#[tokio::test]
async fn a_block_without_a_reason_still_blocks() {
    let dir = Scratch::new("no-reason");
    let host = dir.host(commands("PreToolUse", Some("mcp__fs__.*"), &["exit 2"]));
    let said = text(
        host.call_hook(&call(
            Hook::PreToolUse,
            json!({"tool": "fs__read", "arguments": {}}),
            10 * SECOND,
        ))
        .await,
    );
    assert!(said.contains("PreToolUse hook"), "{said}");
}

#[tokio::test]
async fn a_matcher_that_does_not_take_the_tool_runs_nothing() {
    let dir = Scratch::new("matcher");
    let host = dir.host(commands("PreToolUse", Some("mcp__git__.*"), &["exit 2"]));
    let reply = host
        .call_hook(&call(
            Hook::PreToolUse,
            json!({"tool": "fs__read", "arguments": {}}),
            10 * SECOND,
        ))
        .await;
    assert_eq!(text(reply), "");
}

#[tokio::test]
async fn errors_time_outs_and_failures_each_come_back_as_what_they_are() {
    let dir = Scratch::new("fail-open");
    let host = dir.host(commands("Stop", None, &["echo broken >&2; exit 1"]));
    let reply = host
        .call_hook(&call(Hook::Stop, json!({}), 10 * SECOND))
        .await;
    match reply {
        HookReply::ErrorResult { text } => assert!(text.contains("exit 1: broken"), "{text}"),
        other => panic!("{other:?}"),
    }
    let host = dir.host(commands("Stop", None, &["sleep 300", "exit 0"]));
    let started = std::time::Instant::now();
    let reply = host
        .call_hook(&call(Hook::Stop, json!({}), Duration::from_millis(400)))
        .await;
    assert_eq!(reply, HookReply::TimedOut);
    assert!(started.elapsed() < 5 * SECOND);
    // A block from one command outweighs another's timeout.
    let host = dir.host(commands(
        "Stop",
        None,
        &["sleep 300", "echo no >&2; exit 2"],
    ));
    let reply = host
        .call_hook(&call(Hook::Stop, json!({}), Duration::from_millis(400)))
        .await;
    assert_eq!(text(reply), "no");
}

#[tokio::test]
async fn a_hooks_own_timeout_applies_when_it_is_stricter() {
    let dir = Scratch::new("own-timeout");
    let settings =
        json!({"Stop": [{"hooks": [{"type": "command", "command": "sleep 300", "timeout": 0.3}]}]});
    let host = dir.host(settings);
    let started = std::time::Instant::now();
    let reply = host
        .call_hook(&call(Hook::Stop, json!({}), 60 * SECOND))
        .await;
    assert_eq!(reply, HookReply::TimedOut);
    assert!(started.elapsed() < 10 * SECOND, "{:?}", started.elapsed());
}

#[tokio::test]
async fn plain_stdout_is_context_at_a_session_start_and_nothing_at_a_stop() {
    let dir = Scratch::new("plain");
    let mut hooks = commands("SessionStart", None, &["echo 'use tabs'"]);
    hooks["Stop"] = commands("Stop", None, &["echo 'all good'"])["Stop"].clone();
    let host = dir.host(hooks);
    assert_eq!(
        text(
            host.call_hook(&call(Hook::SessionStart, json!({}), 10 * SECOND))
                .await
        ),
        "use tabs"
    );
    // A matcherless SessionStart hook also runs after a compaction, as in Claude Code.
    assert_eq!(
        text(
            host.call_hook(&call(Hook::PostCompact, json!({}), 10 * SECOND))
                .await
        ),
        "use tabs"
    );
    assert_eq!(
        text(
            host.call_hook(&call(Hook::Stop, json!({}), 10 * SECOND))
                .await
        ),
        ""
    );
}

#[tokio::test]
async fn what_has_no_equivalent_is_not_done() {
    let dir = Scratch::new("no-equivalent");
    let rewrite = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "allow", "updatedInput": {"path": "/tmp"},
        "additionalContext": "careful"}});
    let host = dir.host(commands(
        "PreToolUse",
        None,
        &[&format!("echo '{rewrite}'")],
    ));
    let reply = host
        .call_hook(&call(
            Hook::PreToolUse,
            json!({"tool": "fs__read", "arguments": {"path": "/etc"}}),
            10 * SECOND,
        ))
        .await;
    // Neither a rewrite nor context becomes a denial.
    assert_eq!(text(reply), "");
}

#[tokio::test]
async fn no_more_than_the_cap_of_commands_run_at_once() {
    let dir = Scratch::new("cap");
    let running = dir.0.join("running");
    std::fs::create_dir_all(&running).unwrap();
    let seen = dir.0.join("seen");
    let one = |i: usize| {
        format!(
            "touch {r}/{i}; ls {r} | wc -l >> {s}; sleep 0.2; rm {r}/{i}",
            r = running.display(),
            s = seen.display()
        )
    };
    let many: Vec<String> = (0..20).map(one).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let host = dir.host(commands("Stop", None, &many));
    let reply = host
        .call_hook(&call(Hook::Stop, json!({}), 30 * SECOND))
        .await;
    assert_eq!(text(reply), "");
    let counts: Vec<usize> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 20, "every command ran");
    assert!(
        counts.iter().all(|&n| n <= MAX_CONCURRENT_COMMANDS),
        "{counts:?}"
    );
}

#[tokio::test]
async fn killing_the_source_ends_its_running_commands() {
    let dir = Scratch::new("kill");
    let host = dir.host(commands("Stop", None, &["sleep 300"]));
    let server = ServerName::new("claude-code").unwrap();
    let stop = call(Hook::Stop, json!({}), 60 * SECOND);
    let asked = host.call_hook(&stop);
    let kill = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        host.kill_server(&server).await;
        std::future::pending::<()>().await;
    };
    let reply = tokio::select! {
        reply = asked => reply,
        () = kill => unreachable!(),
    };
    match reply {
        HookReply::Failed {
            error: HookFault::Commands(error),
        } => assert!(error.contains("engine's order"), "{error}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_commands_answers_together_are_capped_with_their_middle_elided() {
    let dir = Scratch::new("answer-cap");
    let loud = "head -c 10000 /dev/zero | tr '\\0' r >&2; exit 2";
    let host = dir.host(commands("Stop", None, &[loud, &format!("{loud} ")]));
    let said = text(
        host.call_hook(&call(Hook::Stop, json!({}), 10 * SECOND))
            .await,
    );
    assert!(said.len() <= MAX_HOOK_TEXT_BYTES, "{}", said.len());
    assert!(said.contains("bytes elided"), "{said}");
    assert!(said.starts_with('r') && said.ends_with('r'));
}
