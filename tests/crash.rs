//! Crash points: the real `hookloop acp` killed with SIGKILL at each kind of moment of a prompt,
//! then its session loaded by a fresh process on the same `HOOKLOOP_RECORD_DIR`. Each kill waits
//! for the moment itself (the test server received the call, the loopback model is holding its
//! stream or its summary, the client was asked about a call), never for a sleep. After the load:
//! the session is open, the client was told once what was cut, the original record is kept
//! beside the new one, the next prompt works and the request the model gets for it pairs every
//! call with exactly one result and holds every finished prompt, and the record replays whole.

mod acp_agent;
mod common;
mod loopback;

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use acp_agent::{Agent, test_server, thoughts};
use loopback::{FakeProvider, Gate, Reply, after_tool, first_user_text, last_user_text};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    ToolCall,
    HookRound,
    StreamedReply,
    SummaryRequested,
    PostCompactPending,
    InsideSubagent,
    PermissionQuestion,
    BetweenRecords,
}

/// The model: a first prompt that finishes, then the cut prompt as `moment` needs it, then
/// plain answers.
fn model(moment: Moment, gate: Gate) -> FakeProvider {
    let held = AtomicBool::new(false);
    FakeProvider::start(move |request| {
        let last = last_user_text(request);
        if last.contains("Summarize") {
            // The first summary is held until the agent is killed; the next is answered.
            let hold = moment == Moment::SummaryRequested && !held.swap(true, Ordering::SeqCst);
            return if hold {
                Reply::Hang
            } else {
                Reply::text("Summary: a first task, then a long echo.")
            };
        }
        if first_user_text(request) == "sub task" {
            return if after_tool(request) {
                Reply::text("sub done")
            } else {
                Reply::tool("t__hang", json!({}))
            };
        }
        match last.as_str() {
            "first task" => Reply::text("first done"),
            "cut task" if after_tool(request) => Reply::text("cut done"),
            "cut task" => match moment {
                Moment::ToolCall => Reply::tool("t__hang", json!({})),
                Moment::HookRound | Moment::BetweenRecords => Reply::text("cut done"),
                Moment::StreamedReply => {
                    Reply::Held(vec!["partial ".into(), "rest".into()], gate.clone())
                }
                Moment::SummaryRequested | Moment::PostCompactPending => {
                    Reply::tool("t__echo", json!({"text": "x".repeat(3000)}))
                }
                Moment::InsideSubagent => {
                    Reply::tool("agent", json!({"description": "sub", "prompt": "sub task"}))
                }
                Moment::PermissionQuestion => Reply::tool("t__remove", json!({"path": "a"})),
            },
            _ => Reply::text("back"),
        }
    })
}

/// The session's server in the first process: its hooks hang where the moment needs it.
fn first_server(moment: Moment, log: &str) -> Value {
    let mut env = vec![("TS_LOG", log)];
    match moment {
        Moment::HookRound => env.extend([("TS_HOOKS", "_Stop"), ("TS_STOP", "empty|hang")]),
        Moment::PostCompactPending => {
            env.extend([("TS_HOOKS", "_PostCompact"), ("TS_POST_COMPACT", "hang")]);
        }
        _ => {}
    }
    test_server("t", &env)
}

/// The same server in the process that loads the session, answering every hook with nothing.
fn second_server(moment: Moment, log: &str) -> Value {
    let mut env = vec![("TS_LOG", log)];
    match moment {
        Moment::HookRound => env.push(("TS_HOOKS", "_Stop")),
        Moment::PostCompactPending => env.push(("TS_HOOKS", "_PostCompact")),
        _ => {}
    }
    test_server("t", &env)
}

/// Waits until `ready` holds, looking again every 20 ms, for at most 30 s.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "never reached: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends the cut prompt and returns once the agent is at `moment`.
async fn reach(
    moment: Moment,
    agent: &mut Agent,
    session: &str,
    provider: &FakeProvider,
    log: &str,
) {
    let _ = agent.prompt(session, "cut task").await;
    match moment {
        Moment::ToolCall | Moment::InsideSubagent => {
            until("the server got the hung call", || {
                common::count(log, "call hang") >= 1
            })
            .await;
        }
        Moment::HookRound => {
            until("the server got the second _Stop", || {
                common::count(log, "call _Stop") >= 2
            })
            .await;
        }
        Moment::PostCompactPending => {
            until("the server got _PostCompact", || {
                common::count(log, "call _PostCompact") >= 1
            })
            .await;
        }
        Moment::SummaryRequested => {
            until("the model got the summary request", || {
                provider
                    .requests()
                    .iter()
                    .any(|r| last_user_text(r).contains("Summarize"))
            })
            .await;
        }
        Moment::StreamedReply => {
            agent
                .wait_update(|u| {
                    u["sessionUpdate"] == "agent_message_chunk"
                        && u["content"]["text"] == "partial "
                })
                .await;
        }
        Moment::PermissionQuestion => loop {
            let frame = agent.read().await;
            if frame["method"] == "session/request_permission" {
                break;
            }
        },
        Moment::BetweenRecords => {}
    }
}

/// The record of `session` in `dir`.
fn record(dir: &str, session: &str) -> PathBuf {
    Path::new(dir).join(format!("{session}.jsonl"))
}

/// Cuts the record right after the line of the cut prompt's `prompted` fact: the file a crash
/// leaves between writing that fact and writing the orders it led to.
fn cut_after_the_prompt(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut kept = String::new();
    for line in text.split_inclusive('\n') {
        kept.push_str(line);
        if line.contains(r#""fact":"prompted","text":"cut task""#) {
            std::fs::write(path, kept).unwrap();
            return;
        }
    }
    panic!("no cut prompt in {text}");
}

/// Every tool call of a Chat Completions request is answered exactly once, after it.
fn assert_paired(request: &Value) {
    let mut open = HashSet::new();
    let mut answered = HashSet::new();
    for message in request["messages"].as_array().unwrap() {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            assert!(
                open.insert(call["id"].clone()),
                "call made twice: {request}"
            );
        }
        if message["role"] == "tool" {
            let id = message["tool_call_id"].clone();
            assert!(open.contains(&id), "a result for no call: {request}");
            assert!(answered.insert(id), "a call answered twice: {request}");
        }
    }
    assert_eq!(open, answered, "a call left unanswered: {request}");
}

async fn crash_then_load(moment: Moment) {
    let gate = Gate::default();
    let provider = model(moment, gate.clone());
    let scratch = common::Scratch::new(&format!("crash-{moment:?}"));
    let records = scratch.file("records");
    let (first_log, second_log) = (scratch.file("first.log"), scratch.file("second.log"));
    let env = [
        ("HOOKLOOP_RECORD_DIR", records.as_str()),
        ("HOOKLOOP_MAX_CONTEXT_TOKENS", "1200"),
        ("HOOKLOOP_MAX_OUTPUT_TOKENS", "100"),
        ("HOOKLOOP_SUBAGENTS", "1"),
    ];
    let cwd = std::env::temp_dir();

    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let session = agent
        .new_session(json!([first_server(moment, &first_log)]))
        .await;
    let (reply, _) = agent.prompt_to_end(&session, "first task").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    if moment == Moment::BetweenRecords {
        let (reply, _) = agent.prompt_to_end(&session, "cut task").await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    } else {
        reach(moment, &mut agent, &session, &provider, &first_log).await;
    }
    agent.kill().await;
    let path = record(&records, &session);
    if moment == Moment::BetweenRecords {
        cut_after_the_prompt(&path);
    }
    let cut = std::fs::read(&path).unwrap();

    // A fresh process lists the session once and loads it.
    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let (listed, _) = agent.call("session/list", json!({})).await;
    let listed = listed["result"]["sessions"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1, "{moment:?}: {listed:?}");
    let (loaded, history) = agent
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": [second_server(moment, &second_log)]}),
        )
        .await;
    assert_eq!(loaded["result"], json!({}), "{moment:?}: {loaded}");
    let told: Vec<String> = thoughts(&history)
        .into_iter()
        .filter(|t| t.contains("restored after the agent stopped"))
        .collect();
    assert_eq!(told.len(), 1, "{moment:?}: {history:?}");
    assert!(told[0].contains(".crashed-1"), "{moment:?}: {}", told[0]);
    // The first prompt's words and answer come back, and the cut prompt's words.
    let said: Vec<&str> = history
        .iter()
        .filter_map(|u| u["update"]["content"]["text"].as_str())
        .collect();
    let compacted = matches!(
        moment,
        Moment::SummaryRequested | Moment::PostCompactPending
    );
    let finished: &[&str] = if compacted {
        // The first prompt is in the summary that replaced it.
        &["cut task"]
    } else {
        &["first task", "first done", "cut task"]
    };
    for words in finished {
        assert!(said.contains(words), "{moment:?}: {words} not in {said:?}");
    }

    // The original is kept beside the record, whole and the user's alone.
    let kept = PathBuf::from(format!("{}.crashed-1", path.display()));
    assert_eq!(std::fs::read(&kept).unwrap(), cut, "{moment:?}");
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{moment:?}");

    // The session goes on: the model gets every finished prompt, every call paired.
    let before = provider.requests().len();
    let (reply, _) = agent.prompt_to_end(&session, "after the crash").await;
    assert_eq!(
        reply["result"]["stopReason"], "end_turn",
        "{moment:?}: {reply}"
    );
    let requests = provider.requests();
    assert!(requests.len() > before, "{moment:?}");
    for request in &requests[before..] {
        assert_paired(request);
    }
    let last = requests.last().unwrap();
    // A cut prompt the model never answered runs into the next one: the person's words of
    // both, in one user message, as the dialect sends two in a row.
    assert!(
        last_user_text(last).ends_with("after the crash"),
        "{moment:?}: {last}"
    );
    let sent = last.to_string();
    if !compacted {
        // A compaction summarises the earlier prompts away; elsewhere they are sent as they were.
        for words in ["first task", "first done", "cut task"] {
            assert!(sent.contains(words), "{moment:?}: {words} not in {sent}");
        }
    }
    if matches!(
        moment,
        Moment::ToolCall | Moment::InsideSubagent | Moment::PermissionQuestion
    ) {
        assert!(
            sent.contains("interrupted: the agent stopped"),
            "{moment:?}: {sent}"
        );
    }
    agent.close().await;
    gate.open();

    // The record, closed and recorded on, replays whole.
    let out = std::process::Command::new(loopback::hookloop())
        .arg("replay")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{moment:?}: {out:?}");
    // The original is what a crash left: it replays as far as it goes, and is not whole
    // (`PARTIAL`); one that stops after a fact, before its orders, ends diverged, since the
    // replay cannot tell a crash there from an engine that orders more.
    let out = std::process::Command::new(loopback::hookloop())
        .arg("replay")
        .arg(&kept)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{moment:?}: {out:?}");
    let verdict = if moment == Moment::BetweenRecords {
        "DIVERGED"
    } else {
        "PARTIAL"
    };
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(verdict),
        "{moment:?}: {out:?}"
    );
}

#[tokio::test]
async fn killed_mid_tool_call_the_session_loads_with_the_call_answered_interrupted() {
    crash_then_load(Moment::ToolCall).await;
}

#[tokio::test]
async fn killed_mid_hook_round_the_session_loads_and_goes_on() {
    crash_then_load(Moment::HookRound).await;
}

#[tokio::test]
async fn killed_mid_streamed_reply_the_session_loads_without_the_half_reply() {
    crash_then_load(Moment::StreamedReply).await;
}

#[tokio::test]
async fn killed_with_a_summary_requested_the_session_loads_and_compacts_again() {
    crash_then_load(Moment::SummaryRequested).await;
}

#[tokio::test]
async fn killed_with_post_compact_pending_the_session_loads_and_asks_it_again() {
    crash_then_load(Moment::PostCompactPending).await;
}

#[tokio::test]
async fn killed_inside_a_subagent_the_session_loads_with_the_agent_call_answered() {
    crash_then_load(Moment::InsideSubagent).await;
}

#[tokio::test]
async fn killed_during_a_permission_question_the_session_loads_with_the_call_not_run() {
    crash_then_load(Moment::PermissionQuestion).await;
}

#[tokio::test]
async fn killed_between_two_records_the_session_loads_with_the_missing_orders_written() {
    crash_then_load(Moment::BetweenRecords).await;
}
