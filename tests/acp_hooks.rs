//! Every hook point end to end through `hookloop acp`: the binary over stdio, a loopback model
//! speaking Chat Completions, and `hookloop-test-server` child processes as the hook servers,
//! each scripted through its environment (`TS_<HOOK>` answers, `TS_LOG` for what it was sent).
//!
//! Each test checks a hook's rule where it shows: in the requests the model got, in what the
//! servers were called with, and in the `session/update`s the client saw.

mod acp_agent;
mod common;
mod loopback;

use hookloop::Hook;
use hookloop::hooks::encode_hook_body;
use loopback::{FakeProvider, Reply, after_tool, last_user_text};
use serde_json::{Value, json};

use acp_agent::{Agent, test_server, thoughts, tool_calls};
use common::{Scratch, count, lines};

/// A request's conversation, one line a message: `user: <text>`, `assistant: <text>`,
/// `call <name>` for each tool call, `tool: <content>` (the system prompt left out).
fn conversation(request: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for message in request["messages"].as_array().expect("messages") {
        let text = message["content"].as_str().unwrap_or_default();
        match message["role"].as_str().expect("role") {
            "system" => {}
            "user" => out.push(format!("user: {text}")),
            "assistant" => {
                if !text.is_empty() {
                    out.push(format!("assistant: {text}"));
                }
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    out.push(format!(
                        "call {}",
                        call["function"]["name"].as_str().unwrap()
                    ));
                }
            }
            "tool" => out.push(format!("tool: {text}")),
            other => panic!("unexpected role {other}"),
        }
    }
    out
}

/// The one `tool_call` update titled `title`.
fn shown<'a>(updates: &'a [Value], title: &str) -> &'a Value {
    let matching: Vec<&Value> = tool_calls(updates)
        .into_iter()
        .filter(|u| u["title"] == title)
        .collect();
    match matching[..] {
        [one] => one,
        _ => panic!("{} tool_calls titled {title}: {updates:?}", matching.len()),
    }
}

/// Checks that a hook's answer reached the client as a completed synthetic call of `kind`,
/// carrying `text`.
fn assert_shown_as(call: &Value, kind: &str, text: &str) {
    // `other` is the protocol's default kind, which the wire may leave out.
    let shown_kind = call["kind"].as_str().unwrap_or("other");
    assert_eq!(shown_kind, kind, "{call}");
    assert_eq!(call["status"], "completed", "{call}");
    assert_eq!(call["content"][0]["content"]["text"], text, "{call}");
}

/// The JSON values a server logged on lines starting `prefix ` (`args`, `meta`).
fn logged(log: &str, prefix: &str) -> Vec<Value> {
    lines(log)
        .iter()
        .filter_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
        .map(|json| serde_json::from_str(json).expect("a logged JSON value"))
        .collect()
}

/// Checks that every hook call in `log` carried the ACP session's id (`session`) and the
/// hook's own name in `_meta`, and that the hooks called were `hooks`, in order.
fn assert_meta(log: &str, session: &str, hooks: &[&str]) {
    let metas = logged(log, "meta");
    let names: Vec<&str> = metas
        .iter()
        .map(|m| {
            m["hookloop/hook"]["name"]
                .as_str()
                .expect("the hook's name")
        })
        .collect();
    assert_eq!(names, hooks, "{metas:?}");
    assert!(
        metas.iter().all(|m| m["hookloop/session"] == session),
        "{session}: {metas:?}"
    );
}

#[tokio::test]
async fn session_start_context_follows_the_first_prompt_once_per_session() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = Scratch::new("acp-session-start");
    let log = scratch.file("ctx.log");
    let (mut agent, session) = Agent::start(
        &provider,
        &[],
        json!([test_server(
            "ctx",
            &[
                ("TS_HOOKS", "_SessionStart"),
                ("TS_SESSION_START", "say:2 open todos"),
                ("TS_LOG", &log),
            ]
        )]),
    )
    .await;

    let (reply, updates) = agent.prompt_to_end(&session, "first").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_shown_as(
        shown(&updates, "_SessionStart from ctx"),
        "think",
        "2 open todos",
    );
    let body = encode_hook_body(Hook::SessionStart, "ctx", "2 open todos");
    assert_eq!(
        conversation(&provider.requests()[0]),
        [
            "user: first",
            "call ctx___SessionStart",
            &format!("tool: {body}")
        ]
    );

    // The second prompt asks nothing: the context it gave stays where it was injected.
    let (reply, updates) = agent.prompt_to_end(&session, "second").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(tool_calls(&updates).is_empty(), "{updates:?}");
    assert_eq!(
        conversation(&provider.requests()[1]),
        [
            "user: first",
            "call ctx___SessionStart",
            &format!("tool: {body}"),
            "assistant: done",
            "user: second"
        ]
    );
    assert_eq!(count(&log, "call _SessionStart"), 1);
    assert_eq!(logged(&log, "args"), [json!({})]);
    assert_meta(&log, &session, &["_SessionStart"]);
    agent.disconnect().await;
}

#[tokio::test]
async fn user_prompt_submit_sees_each_prompt_and_its_context_follows_that_prompt() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = Scratch::new("acp-user-prompt");
    let log = scratch.file("ctx.log");
    let (mut agent, session) = Agent::start(
        &provider,
        &[],
        json!([test_server(
            "ctx",
            &[
                ("TS_HOOKS", "_UserPromptSubmit"),
                (
                    "TS_USER_PROMPT_SUBMIT",
                    "say:tests come first|say:mind the docs"
                ),
                ("TS_LOG", &log),
            ]
        )]),
    )
    .await;

    let (reply, updates) = agent.prompt_to_end(&session, "fix the bug").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_shown_as(
        shown(&updates, "_UserPromptSubmit from ctx"),
        "think",
        "tests come first",
    );
    let (reply, updates) = agent.prompt_to_end(&session, "now the docs").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_shown_as(
        shown(&updates, "_UserPromptSubmit from ctx"),
        "think",
        "mind the docs",
    );

    let first = encode_hook_body(Hook::UserPromptSubmit, "ctx", "tests come first");
    let second = encode_hook_body(Hook::UserPromptSubmit, "ctx", "mind the docs");
    assert_eq!(
        conversation(&provider.requests()[1]),
        [
            "user: fix the bug",
            "call ctx___UserPromptSubmit",
            &format!("tool: {first}"),
            "assistant: done",
            "user: now the docs",
            "call ctx___UserPromptSubmit",
            &format!("tool: {second}"),
        ]
    );
    assert_eq!(
        logged(&log, "args"),
        [
            json!({"prompt": "fix the bug"}),
            json!({"prompt": "now the docs"})
        ]
    );
    assert_meta(&log, &session, &["_UserPromptSubmit", "_UserPromptSubmit"]);
    agent.disconnect().await;
}

#[tokio::test]
async fn pre_tool_use_denials_keep_the_tool_from_running_and_answer_its_call_once_with_each() {
    let provider = FakeProvider::start(|request| {
        if after_tool(request) {
            Reply::text("understood")
        } else {
            Reply::tool("tools__echo", json!({"text": "hello"}))
        }
    });
    let scratch = Scratch::new("acp-pre-tool-use");
    let (tools_log, guard_log) = (scratch.file("tools.log"), scratch.file("guard.log"));
    let (mut agent, session) = Agent::start(
        &provider,
        &[],
        json!([
            test_server("tools", &[("TS_LOG", &tools_log)]),
            test_server(
                "guard",
                &[
                    ("TS_HOOKS", "_PreToolUse"),
                    ("TS_PRE_TOOL_USE", "say:no echo today"),
                    ("TS_LOG", &guard_log),
                ]
            ),
            test_server(
                "audit",
                &[
                    ("TS_HOOKS", "_PreToolUse"),
                    ("TS_PRE_TOOL_USE", "say:not audited")
                ]
            ),
        ]),
    )
    .await;

    let (reply, updates) = agent.prompt_to_end(&session, "say hello").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    // The tool never ran, and the client never saw it start.
    assert_eq!(count(&tools_log, "call echo"), 0, "{:?}", lines(&tools_log));
    let titles: Vec<&str> = tool_calls(&updates)
        .iter()
        .map(|u| u["title"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        titles,
        [
            "tools__echo denied by _PreToolUse of guard",
            "tools__echo denied by _PreToolUse of audit"
        ]
    );
    assert_shown_as(
        shown(&updates, "tools__echo denied by _PreToolUse of guard"),
        "other",
        "no echo today",
    );
    assert_shown_as(
        shown(&updates, "tools__echo denied by _PreToolUse of audit"),
        "other",
        "not audited",
    );

    // The model's own call got one error result carrying both denials, in server order.
    let denials = format!(
        "tool: Error: {}\n{}",
        encode_hook_body(Hook::PreToolUse, "guard", "no echo today"),
        encode_hook_body(Hook::PreToolUse, "audit", "not audited")
    );
    assert_eq!(
        conversation(&provider.requests()[1]),
        ["user: say hello", "call tools__echo", &denials]
    );
    assert_eq!(
        logged(&guard_log, "args"),
        [json!({"tool": "tools__echo", "arguments": {"text": "hello"}})]
    );
    assert_meta(&guard_log, &session, &["_PreToolUse"]);
    agent.disconnect().await;
}

#[tokio::test]
async fn pre_tool_use_that_times_out_denies_nothing_and_the_tool_runs() {
    let provider = FakeProvider::start(|request| {
        if after_tool(request) {
            Reply::text("done")
        } else {
            Reply::tool("tools__echo", json!({"text": "hello"}))
        }
    });
    let scratch = Scratch::new("acp-pre-tool-use-timeout");
    let tools_log = scratch.file("tools.log");
    let (mut agent, session) = Agent::start(
        &provider,
        &[("SPROUT_AGENT_HOOK_TIMEOUT_MS", "300")],
        json!([
            test_server("tools", &[("TS_LOG", &tools_log)]),
            test_server(
                "guard",
                &[("TS_HOOKS", "_PreToolUse"), ("TS_PRE_TOOL_USE", "hang")]
            ),
        ]),
    )
    .await;
    let (reply, updates) = agent.prompt_to_end(&session, "say hello").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(count(&tools_log, "call echo"), 1, "{:?}", lines(&tools_log));
    assert!(
        thoughts(&updates)
            .iter()
            .any(|t| t.contains("_PreToolUse on guard gave no usable answer")),
        "{updates:?}"
    );
    assert_eq!(
        conversation(&provider.requests()[1]),
        [
            "user: say hello",
            "call tools__echo",
            r#"tool: {"text":"hello"}"#
        ]
    );
    agent.disconnect().await;
}

#[tokio::test]
async fn post_tool_use_sees_the_call_and_its_output_and_its_context_follows_the_results() {
    let provider = FakeProvider::start(|request| {
        if after_tool(request) {
            Reply::text("done")
        } else {
            Reply::tool("tools__echo", json!({"text": "hi"}))
        }
    });
    let scratch = Scratch::new("acp-post-tool-use");
    let log = scratch.file("notes.log");
    let (mut agent, session) = Agent::start(
        &provider,
        &[],
        json!([
            test_server("tools", &[]),
            test_server(
                "notes",
                &[
                    ("TS_HOOKS", "_PostToolUse"),
                    ("TS_POST_TOOL_USE", "say:echo is deprecated"),
                    ("TS_LOG", &log),
                ]
            ),
        ]),
    )
    .await;
    let (reply, updates) = agent.prompt_to_end(&session, "say hi").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_shown_as(
        shown(&updates, "_PostToolUse from notes"),
        "think",
        "echo is deprecated",
    );
    // Shown once the call it speaks of has finished.
    let finished = updates
        .iter()
        .position(|u| u["update"]["status"] == "completed" && u["update"]["title"].is_null())
        .expect("the echo call's completion");
    let injected = updates
        .iter()
        .position(|u| u["update"]["title"] == "_PostToolUse from notes")
        .unwrap();
    assert!(finished < injected, "{updates:?}");

    let body = encode_hook_body(Hook::PostToolUse, "notes", "echo is deprecated");
    assert_eq!(
        conversation(&provider.requests()[1]),
        [
            "user: say hi",
            "call tools__echo",
            r#"tool: {"text":"hi"}"#,
            "call notes___PostToolUse",
            &format!("tool: {body}"),
        ]
    );
    assert_eq!(
        logged(&log, "args"),
        [json!({
            "tool": "tools__echo",
            "arguments": {"text": "hi"},
            "isError": false,
            "output": r#"{"text":"hi"}"#,
        })]
    );
    assert_meta(&log, &session, &["_PostToolUse"]);
    agent.disconnect().await;
}

#[tokio::test]
async fn pre_compact_guidance_reaches_the_summary_request_and_no_other() {
    let provider = FakeProvider::start(|request| {
        if last_user_text(request).contains("Summarize") {
            Reply::text("Summary: echoed a long text.")
        } else if after_tool(request) || request.to_string().contains("Summary:") {
            Reply::text("done")
        } else {
            Reply::tool("mem__echo", json!({"text": "x".repeat(3000)}))
        }
    });
    let scratch = Scratch::new("acp-pre-compact");
    let log = scratch.file("mem.log");
    let (mut agent, session) = Agent::start(
        &provider,
        &[
            ("HOOKLOOP_MAX_CONTEXT_TOKENS", "1200"),
            ("HOOKLOOP_MAX_OUTPUT_TOKENS", "100"),
        ],
        json!([test_server(
            "mem",
            &[
                ("TS_HOOKS", "_PreCompact"),
                ("TS_PRE_COMPACT", "say:keep the word PINEAPPLE"),
                ("TS_LOG", &log),
            ]
        )]),
    )
    .await;
    let (reply, updates) = agent.prompt_to_end(&session, "remember").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_shown_as(
        shown(&updates, "_PreCompact from mem"),
        "think",
        "keep the word PINEAPPLE",
    );

    let requests = provider.requests();
    let summaries: Vec<usize> = (0..requests.len())
        .filter(|&i| last_user_text(&requests[i]).contains("Summarize"))
        .collect();
    assert_eq!(summaries.len(), 1, "one compaction: {requests:?}");
    let guided: Vec<usize> = (0..requests.len())
        .filter(|&i| requests[i].to_string().contains("PINEAPPLE"))
        .collect();
    assert_eq!(guided, summaries, "{requests:?}");
    assert!(
        requests.len() > summaries[0] + 1,
        "the turn went on after the summary"
    );
    assert_eq!(logged(&log, "args"), [json!({})]);
    assert_meta(&log, &session, &["_PreCompact"]);
    agent.disconnect().await;
}

/// A server with `_SessionEnd` that logs its calls to `log`.
fn session_end_server(log: &str) -> Value {
    test_server(
        "end",
        &[
            ("TS_HOOKS", "_SessionEnd"),
            ("TS_SESSION_END", "say:this answer is ignored"),
            ("TS_LOG", log),
        ],
    )
}

#[tokio::test]
async fn session_end_is_called_once_on_session_close() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = Scratch::new("acp-session-end-close");
    let log = scratch.file("end.log");
    let (mut agent, session) =
        Agent::start(&provider, &[], json!([session_end_server(&log)])).await;
    let (reply, _) = agent.prompt_to_end(&session, "work").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(count(&log, "call _SessionEnd"), 0, "not before the close");

    let (reply, updates) = agent
        .call("session/close", json!({"sessionId": session}))
        .await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    // Answered once the session has ended, `_SessionEnd` and all.
    assert_eq!(count(&log, "call _SessionEnd"), 1, "{:?}", lines(&log));
    assert_eq!(logged(&log, "args"), [json!({})]);
    assert_meta(&log, &session, &["_SessionEnd"]);

    // A notification: its answer is shown nowhere, and leaving does not call it again.
    let after = agent.disconnect().await;
    assert!(tool_calls(&updates).is_empty(), "{updates:?}");
    assert!(
        !after.iter().any(|f| f.to_string().contains("ignored")),
        "{after:?}"
    );
    assert_eq!(count(&log, "call _SessionEnd"), 1, "{:?}", lines(&log));
    assert_eq!(provider.requests().len(), 1, "no model request of its own");
}

#[tokio::test]
async fn session_end_is_called_once_per_session_when_the_client_disconnects() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = Scratch::new("acp-session-end-disconnect");
    let (worked, idle) = (scratch.file("worked.log"), scratch.file("idle.log"));
    let (mut agent, session) =
        Agent::start(&provider, &[], json!([session_end_server(&worked)])).await;
    // A session that never ran a prompt ends too.
    let idle_session = agent.new_session(json!([session_end_server(&idle)])).await;
    let (reply, _) = agent.prompt_to_end(&session, "work").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");

    let after = agent.disconnect().await;
    for (log, session) in [(&worked, &session), (&idle, &idle_session)] {
        assert_eq!(count(log, "call _SessionEnd"), 1, "{:?}", lines(log));
        assert_meta(log, session, &["_SessionEnd"]);
    }
    assert!(
        !after.iter().any(|f| f.to_string().contains("ignored")),
        "{after:?}"
    );
    assert_eq!(provider.requests().len(), 1, "no model request of its own");
}

#[tokio::test]
async fn a_loaded_session_keeps_its_acp_id_in_hook_calls() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = Scratch::new("acp-load-meta");
    let records = scratch.file("records");
    let (before, after) = (scratch.file("before.log"), scratch.file("after.log"));
    let server =
        |log: &str| test_server("ctx", &[("TS_HOOKS", "_UserPromptSubmit"), ("TS_LOG", log)]);
    let env = [("HOOKLOOP_RECORD_DIR", records.as_str())];

    let (mut agent, session) = Agent::start(&provider, &env, json!([server(&before)])).await;
    let (reply, _) = agent.prompt_to_end(&session, "first").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    agent.disconnect().await;
    assert_meta(&before, &session, &["_UserPromptSubmit"]);

    // Another process loads it by its id: its hook calls still carry that id.
    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let (loaded, _) = agent
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": std::env::temp_dir(), "mcpServers": [server(&after)]}),
        )
        .await;
    assert_eq!(loaded["result"], json!({}), "{loaded}");
    let (reply, _) = agent.prompt_to_end(&session, "second").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    agent.disconnect().await;
    assert_meta(&after, &session, &["_UserPromptSubmit"]);
}

#[tokio::test]
async fn session_end_slower_than_five_seconds_answers_when_the_hook_timeout_allows_it() {
    // Closing a session once had a fixed 5 s grace, which cut `_SessionEnd` short whenever
    // the hook timeout was set above it.
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = Scratch::new("acp-session-end-slow");
    let records = scratch.file("records");
    let log = scratch.file("end.log");
    let env = [
        ("HOOKLOOP_RECORD_DIR", records.as_str()),
        ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "12000"),
    ];
    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let server = test_server(
        "end",
        &[
            ("TS_HOOKS", "_SessionEnd"),
            ("TS_SESSION_END", "slow:6000:said goodbye"),
            ("TS_LOG", &log),
        ],
    );
    let session = agent.new_session(json!([server])).await;
    let (reply, _) = agent
        .call("session/close", json!({"sessionId": session}))
        .await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    assert_eq!(count(&log, "call _SessionEnd"), 1, "{:?}", lines(&log));
    agent.disconnect().await;

    // The answer came in and was recorded: the session was not dropped before it.
    let transcript = std::path::Path::new(&records).join(format!("{session}.jsonl"));
    let recorded = std::fs::read_to_string(&transcript).unwrap();
    assert!(
        recorded
            .lines()
            .any(|l| l.contains(r#""fact":"hook_answered""#)
                && l.contains("_SessionEnd")
                && l.contains("said goodbye")),
        "{recorded}"
    );
}
