//! The same Claude Code command hooks under the real Claude Code (`claude -p`, pinned by
//! `.ci/setup.d/45-bridge-hosts.sh`) and under `hookloop run --command-hooks`: one project
//! (`hook_project`'s `.claude/settings.json` and its scripts, with `hookloop-test-server` as
//! `fs`, whose `write` tool writes files), one scripted Messages model per host with the same
//! behaviour, and what each host's model was sent and how each run ended compared. Where the
//! hosts differ by design (README, "Bring your hooks"), each is held to its own documented rule.
//!
//! Needs `HOOKLOOP_CLAUDE_BIN`; without it each test prints one line and passes (under CI a
//! missing variable fails).

mod binary;
mod hook_project;
mod hosts;
mod support;

use std::process::Output;

use serde_json::{Value, json};
use support::anthropic_message;
use support::loopback::{Loopback, Reply};

use hook_project::{CONVENTIONS, FAILURE, HELD, RED, REMINDER};
use hosts::Scratch;

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// The two hosts, and how each names the `fs` server's tools to its model.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Host {
    Claude,
    Hookloop,
}

impl Host {
    fn tool(self, tool: &str) -> String {
        match self {
            Self::Claude => format!("mcp__fs__{tool}"),
            Self::Hookloop => format!("fs__{tool}"),
        }
    }
}

/// One host's run: the request bodies its model received, and how it ended.
struct Ran {
    bodies: Vec<Value>,
    output: Output,
}

impl Ran {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// The run's final answer: Claude Code's JSON `result`, hookloop's stdout.
    fn answer(&self, host: Host) -> String {
        match host {
            Host::Claude => serde_json::from_slice::<Value>(&self.output.stdout)
                .unwrap_or_else(|_| panic!("claude -p printed no JSON: {}", self.stdout()))
                ["result"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            Host::Hookloop => self.stdout().trim().to_owned(),
        }
    }
}

fn text(content: &str) -> Reply {
    Reply::json(&anthropic_message(
        json!([{"type": "text", "text": content}]),
        "end_turn",
        100,
    ))
}

fn write(host: Host, id: &str, path: &str) -> Reply {
    Reply::json(&anthropic_message(
        json!([{"type": "tool_use", "id": id, "name": host.tool("write"),
                "input": {"path": path, "text": "ok"}}]),
        "tool_use",
        100,
    ))
}

/// A scratch tree whose project is `hook_project`'s, with `fs` in its `.mcp.json`; `edit`
/// changes the settings before the run.
fn project(tag: &str, edit: impl FnOnce(&mut Value)) -> Scratch {
    let scratch = Scratch::new(tag);
    let dir = scratch.project();
    let settings = hook_project::write(&dir);
    let mut value: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(&settings, value.to_string()).unwrap();
    let fs = json!({"type": "stdio", "command": TEST_SERVER, "args": [],
                    "env": {"TS_EXTRA_TOOLS": "write"}});
    std::fs::write(
        dir.join(".mcp.json"),
        json!({"mcpServers": {"fs": fs}}).to_string(),
    )
    .unwrap();
    scratch
}

/// Runs `host` on `prompt` in `scratch`'s project against `model`.
async fn run(
    host: Host,
    bin: &std::path::Path,
    scratch: &Scratch,
    model: &Loopback,
    prompt: &str,
) -> Ran {
    let outside = Loopback::start([]).await;
    let output = match host {
        Host::Claude => {
            let mut claude = hosts::claude_command(bin, scratch, &outside, model, prompt);
            // The project's `.claude/settings.json` is Claude Code's own: its hooks and the
            // permission for `mcp__fs__write` apply as they are.
            claude
                .args(["--mcp-config", ".mcp.json", "--strict-mcp-config"])
                .args(["--allowedTools", "mcp__fs__write"]);
            hosts::run_to_end(claude, "claude -p").await
        }
        Host::Hookloop => {
            let mut hookloop =
                hosts::host_command(std::path::Path::new(binary::hookloop()), scratch, &outside);
            hookloop
                .env("HOOKLOOP_PROVIDER", "anthropic")
                .env("ANTHROPIC_BASE_URL", model.url())
                .env("ANTHROPIC_API_KEY", "sk-test-key")
                .env("HOOKLOOP_MODEL", "loopback")
                .env("MCP_HOOK_SERVERS", "*")
                .env("SPROUT_AGENT_HOOK_TIMEOUT_MS", "20000")
                .args(["run", "--command-hooks", ".claude/settings.json", prompt]);
            hosts::run_to_end(hookloop, "hookloop run").await
        }
    };
    hosts::assert_offline(&outside);
    let bodies = model
        .requests()
        .iter()
        .enumerate()
        .map(hosts::messages_body)
        .collect();
    Ran { bodies, output }
}

/// Both hosts, one after the other, each in a project of its own built by `setup` and with the
/// model `script` gives it; `None` when `HOOKLOOP_CLAUDE_BIN` is unset.
async fn both(
    tag: &str,
    prompt: &str,
    setup: impl Fn(&mut Value),
    prepare: impl Fn(&std::path::Path),
    script: impl Fn(Host) -> Vec<Reply>,
) -> Option<[(Host, Scratch, Ran); 2]> {
    let bin = hosts::host_bin("HOOKLOOP_CLAUDE_BIN")?;
    let mut ran = Vec::new();
    for host in [Host::Claude, Host::Hookloop] {
        let scratch = project(&format!("{tag}-{host:?}"), &setup);
        prepare(&scratch.project());
        let model = Loopback::start(script(host)).await;
        let result = run(host, &bin, &scratch, &model, prompt).await;
        assert_eq!(
            model.remaining(),
            0,
            "{host:?}: the model's script was not used up\nstdout: {}\nstderr: {}",
            result.stdout(),
            result.stderr()
        );
        ran.push((host, scratch, result));
    }
    Some(ran.try_into().ok().unwrap())
}

fn unchanged(_: &mut Value) {}

fn fixed(dir: &std::path::Path) {
    std::fs::write(dir.join("fixed.txt"), "").unwrap();
}

/// What the hooks read: the same events in the same order, and each field hookloop sends holds
/// what Claude Code's holds (ids, paths and the transcript are each host's own).
fn assert_same_events(runs: &[(Host, Scratch, Ran); 2]) {
    let [(_, claude, _), (_, hookloop, _)] = runs;
    let (claude, hookloop) = (
        hook_project::events(&claude.project()),
        hook_project::events(&hookloop.project()),
    );
    let names = |events: &[Value]| -> Vec<Value> {
        events
            .iter()
            .map(|e| e["hook_event_name"].clone())
            .collect()
    };
    assert_eq!(names(&claude), names(&hookloop));
    for (theirs, ours) in claude.iter().zip(&hookloop) {
        for (field, value) in ours.as_object().unwrap() {
            if ["session_id", "transcript_path", "cwd"].contains(&field.as_str()) {
                assert!(theirs.get(field).is_some(), "Claude Code sends no {field}");
                continue;
            }
            assert_eq!(
                &theirs[field], value,
                "{}: {field} differs\nClaude Code: {theirs}\nhookloop: {ours}",
                ours["hook_event_name"]
            );
        }
    }
}

/// Every request's string holding `needle`, for the record of how a host wraps it.
fn wrapping<'a>(body: &'a Value, needle: &str) -> &'a str {
    hosts::string_with(&body["messages"], needle)
        .unwrap_or_else(|| panic!("no message holds {needle:?}: {body}"))
}

/// What the Stop hook read each time, as `stop_hook_active`.
fn stop_latches(dir: &std::path::Path) -> Vec<Value> {
    hook_project::events_named(dir, "Stop")
        .iter()
        .map(|e| e["stop_hook_active"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_hook_that_blocks_while_red_sends_its_reason_and_the_model_is_asked_again() {
    let Some(runs) = both(
        "stop",
        "tidy up",
        unchanged,
        |_| {},
        |host| {
            vec![
                text("Done."),
                write(host, "toolu_fix", "fixed.txt"),
                text("Fixed."),
            ]
        },
    )
    .await
    else {
        return;
    };
    for (host, scratch, ran) in &runs {
        assert!(ran.output.status.success(), "{host:?}: {}", ran.stderr());
        assert_eq!(ran.answer(*host), "Fixed.", "{host:?}: {}", ran.stdout());
        assert_eq!(
            ran.bodies.len(),
            3,
            "{host:?}: the turn, the objection, the fix's result"
        );
        assert!(
            !hosts::mentions(&ran.bodies[0]["messages"], RED),
            "{host:?}"
        );
        // The hook's words reach the model, in each host's wrapping.
        let objection = wrapping(&ran.bodies[1], RED);
        assert!(objection.contains(FAILURE), "{host:?}: {objection}");
        eprintln!("{host:?} sends the Stop block as: {objection:?}");
        assert!(scratch.project().join("fixed.txt").exists(), "{host:?}");
        // The PostToolUse hook's `additionalContext` follows the fix's result.
        let reminder = wrapping(&ran.bodies[2], REMINDER);
        eprintln!("{host:?} sends PostToolUse's additionalContext as: {reminder:?}");
        // The second Stop ran after the model worked on, and let it stop.
        assert_eq!(
            stop_latches(&scratch.project()),
            [json!(false), json!(true)],
            "{host:?}"
        );
    }
    assert_same_events(&runs);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pre_tool_use_deny_keeps_the_tool_from_running_and_tells_the_model_why() {
    let Some(runs) = both("deny", "write the key", unchanged, fixed, |host| {
        vec![
            write(host, "toolu_key", "secrets/key"),
            text("I left it alone."),
        ]
    })
    .await
    else {
        return;
    };
    for (host, scratch, ran) in &runs {
        assert!(ran.output.status.success(), "{host:?}: {}", ran.stderr());
        assert_eq!(ran.answer(*host), "I left it alone.");
        assert_eq!(ran.bodies.len(), 2, "{host:?}");
        assert!(
            !scratch.project().join("secrets").exists(),
            "{host:?}: the write ran"
        );
        // The reason is the denied call's result.
        let result = hosts::tool_result(&ran.bodies[1], "toolu_key").expect("the call's result");
        let denied = hosts::string_with(result, "secrets/key is off limits")
            .unwrap_or_else(|| panic!("{host:?}: no reason in {result}"));
        eprintln!("{host:?} sends the PreToolUse deny as: {denied:?}");
    }
    assert_same_events(&runs);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_start_hooks_plain_stdout_reaches_the_first_request() {
    let Some(runs) = both("start", "hello", unchanged, fixed, |_| vec![text("Hello.")]).await
    else {
        return;
    };
    for (host, _, ran) in &runs {
        assert!(ran.output.status.success(), "{host:?}: {}", ran.stderr());
        assert_eq!(ran.bodies.len(), 1, "{host:?}");
        let context = hosts::string_with(&ran.bodies[0], CONVENTIONS)
            .unwrap_or_else(|| panic!("{host:?}: no conventions in {}", ran.bodies[0]));
        let line = context.lines().next().unwrap_or_default();
        eprintln!("{host:?} sends SessionStart's stdout as: {line:?}");
    }
    assert_same_events(&runs);
}

/// The Stop hook of the project, blocking with JSON on stdout instead of exit 2.
fn json_stop(settings: &mut Value) {
    settings["hooks"]["Stop"] = json!([{"hooks": [{"type": "command", "command": format!(
        "cat > /dev/null; test -f fixed.txt || echo '{{\"decision\": \"block\", \"reason\": \"{RED} {FAILURE}\"}}'"
    )}]}]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_hook_that_blocks_with_json_sends_its_reason_and_the_model_is_asked_again() {
    let Some(runs) = both(
        "stop-json",
        "tidy up",
        json_stop,
        |_| {},
        |host| {
            vec![
                text("Done."),
                write(host, "toolu_fix", "fixed.txt"),
                text("Fixed."),
            ]
        },
    )
    .await
    else {
        return;
    };
    for (host, _, ran) in &runs {
        assert!(ran.output.status.success(), "{host:?}: {}", ran.stderr());
        assert_eq!(ran.answer(*host), "Fixed.", "{host:?}");
        assert_eq!(ran.bodies.len(), 3, "{host:?}");
        let objection = wrapping(&ran.bodies[1], RED);
        assert!(objection.contains(FAILURE), "{host:?}: {objection}");
        eprintln!("{host:?} sends the JSON Stop block as: {objection:?}");
    }
}

/// A documented difference: Claude Code keeps a blocked prompt from its model and ends the run
/// with the reason; hookloop sends the prompt, the reason after it as context, and says so.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_prompt_submit_block_claude_code_holds_the_prompt_hookloop_adds_the_reason() {
    let prompt = "my password is hunter2";
    let Some(runs) = both("prompt", prompt, unchanged, fixed, |host| match host {
        Host::Claude => vec![],
        Host::Hookloop => vec![text("I will not use it.")],
    })
    .await
    else {
        return;
    };
    for (host, _, ran) in &runs {
        assert!(ran.output.status.success(), "{host:?}: {}", ran.stderr());
        let answer = ran.answer(*host);
        match host {
            Host::Claude => {
                assert!(ran.bodies.is_empty(), "the prompt reached the model");
                assert!(answer.contains(HELD), "{answer}");
                eprintln!("Claude ends a blocked prompt with: {answer:?}");
            }
            Host::Hookloop => {
                assert_eq!(ran.bodies.len(), 1);
                assert!(hosts::mentions(&ran.bodies[0]["messages"], prompt));
                let context = wrapping(&ran.bodies[0], HELD);
                eprintln!("Hookloop sends the prompt block as: {context:?}");
                assert_eq!(answer, "I will not use it.");
                assert!(
                    ran.stderr().contains("does not hold prompts back"),
                    "{}",
                    ran.stderr()
                );
            }
        }
    }
}

/// Adds `hook` (a command) to the settings' hooks of `event`, with `matcher`.
fn add_hook(settings: &mut Value, event: &str, matcher: &str, hook: &str) {
    settings["hooks"][event]
        .as_array_mut()
        .unwrap()
        .push(json!({"matcher": matcher, "hooks": [{"type": "command", "command": hook}]}));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_that_exits_1_fails_open_and_its_stderr_never_reaches_the_model() {
    let crash = |s: &mut Value| {
        add_hook(
            s,
            "PreToolUse",
            "mcp__fs__write",
            "echo 'guard crashed' >&2; exit 1",
        );
        add_hook(s, "Stop", "", "echo 'linter crashed' >&2; exit 1");
    };
    let Some(runs) = both("crash", "take notes", crash, fixed, |host| {
        vec![write(host, "toolu_notes", "notes.txt"), text("Done.")]
    })
    .await
    else {
        return;
    };
    for (host, scratch, ran) in &runs {
        assert!(ran.output.status.success(), "{host:?}: {}", ran.stderr());
        assert_eq!(ran.answer(*host), "Done.", "{host:?}");
        assert_eq!(
            ran.bodies.len(),
            2,
            "{host:?}: the Stop error did not ask again"
        );
        assert!(
            scratch.project().join("notes.txt").exists(),
            "{host:?}: the PreToolUse error kept the write from running"
        );
        let result = hosts::tool_result(&ran.bodies[1], "toolu_notes").unwrap();
        assert!(
            hosts::mentions(result, "wrote notes.txt"),
            "{host:?}: {result}"
        );
        for body in &ran.bodies {
            for said in ["guard crashed", "linter crashed"] {
                assert!(
                    !hosts::mentions(body, said),
                    "{host:?}: {said} reached the model"
                );
            }
        }
    }
}

/// The settings with one Stop hook, which always blocks.
fn never_done(settings: &mut Value) {
    settings["hooks"]["Stop"] = json!([{"hooks": [{"type": "command",
        "command": "cat > /dev/null; echo 'never done' >&2; exit 2"}]}]);
}

/// How many times each host asked the model again after a block, when the model only ends its
/// turn: Claude Code 8 times, then lets it stop; hookloop never (the consecutive rule).
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_hook_that_always_blocks_a_model_that_only_ends_each_hosts_cap() {
    let Some(runs) = both("cap", "finish", never_done, fixed, |host| {
        let ends = match host {
            Host::Claude => 9,
            Host::Hookloop => 2,
        };
        (0..ends).map(|n| text(&format!("End {n}."))).collect()
    })
    .await
    else {
        return;
    };
    for (host, _, ran) in &runs {
        assert!(ran.output.status.success(), "{host:?}: {}", ran.stderr());
        for body in &ran.bodies[1..] {
            assert!(hosts::mentions(&body["messages"], "never done"), "{host:?}");
        }
        match host {
            Host::Claude => {
                assert_eq!(ran.bodies.len(), 9, "the turn and 8 blocks");
                eprintln!("Claude ends its capped run with: {:?}", ran.answer(*host));
            }
            Host::Hookloop => {
                assert_eq!(ran.bodies.len(), 2, "the turn and one objection");
                assert_eq!(ran.answer(*host), "End 1.");
            }
        }
    }
}

/// When the model works (a tool call) between its ends, Claude Code asks it again at every
/// block (here until the model's script runs out); hookloop asks at most the `_Stop` budget's
/// 3 times, then ends the turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_hook_that_always_blocks_a_model_that_works_between_each_hosts_budget() {
    const ROUNDS: usize = 10;
    let Some(runs) = both("budget", "finish", never_done, fixed, |host| {
        let rounds = match host {
            Host::Claude => ROUNDS,
            Host::Hookloop => 4,
        };
        (0..rounds)
            .flat_map(|n| {
                [
                    write(host, &format!("toolu_{n}"), &format!("f{n}.txt")),
                    text(&format!("End {n}.")),
                ]
            })
            .collect()
    })
    .await
    else {
        return;
    };
    for (host, scratch, ran) in &runs {
        let files = (0..ROUNDS)
            .filter(|n| scratch.project().join(format!("f{n}.txt")).exists())
            .count();
        match host {
            Host::Claude => {
                // Still blocked after ROUNDS rounds: the next request found the script spent.
                assert!(!ran.output.status.success());
                assert!(
                    ran.answer(*host).contains("script is exhausted"),
                    "{}",
                    ran.stdout()
                );
                assert_eq!(files, ROUNDS);
            }
            Host::Hookloop => {
                assert!(ran.output.status.success(), "{}", ran.stderr());
                assert_eq!(ran.bodies.len(), 8, "4 rounds of a call and an end");
                assert_eq!(ran.answer(*host), "End 3.");
                assert!(
                    ran.stderr().contains("_Stop budget spent"),
                    "{}",
                    ran.stderr()
                );
                assert_eq!(files, 4);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pre_tool_use_hook_that_exits_2_denies_the_call_with_its_stderr() {
    let guard = |s: &mut Value| {
        add_hook(
            s,
            "PreToolUse",
            "mcp__fs__write",
            "cat > /dev/null; echo 'writes are frozen today' >&2; exit 2",
        );
    };
    let Some(runs) = both("deny-exit", "take notes", guard, fixed, |host| {
        vec![write(host, "toolu_notes", "notes.txt"), text("Frozen.")]
    })
    .await
    else {
        return;
    };
    for (host, scratch, ran) in &runs {
        assert!(ran.output.status.success(), "{host:?}: {}", ran.stderr());
        assert_eq!(ran.answer(*host), "Frozen.");
        assert!(
            !scratch.project().join("notes.txt").exists(),
            "{host:?}: the write ran"
        );
        let result = hosts::tool_result(&ran.bodies[1], "toolu_notes").expect("the call's result");
        let denied = hosts::string_with(result, "writes are frozen today")
            .unwrap_or_else(|| panic!("{host:?}: no reason in {result}"));
        eprintln!("{host:?} sends a PreToolUse exit 2 as: {denied:?}");
    }
    assert_same_events(&runs);
}
