//! `hookloop acp` end to end: the binary over stdio, a loopback model speaking the Chat
//! Completions shape, and real MCP servers as child processes (`hookloop-test-server`, whose
//! behaviour each test sets through its environment, and the demo's todo server).

mod acp_agent;
mod common;
mod loopback;

use std::process::Stdio;
use std::time::Duration;

use acp_agent::{Agent, test_server, thoughts};
use loopback::{FakeProvider, Reply, after_tool, last_user_text};
use serde_json::{Value, json};

fn update_kind(update: &Value) -> String {
    let update = &update["update"];
    let kind = update["sessionUpdate"].as_str().unwrap_or("?");
    match update["status"].as_str() {
        Some(status) => format!("{kind}:{status}"),
        None if kind == "tool_call" => "tool_call:pending".into(),
        None => kind.to_owned(),
    }
}

fn titles(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == "tool_call")
        .map(|u| u["update"]["title"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn an_objection_and_a_declined_stop_are_visible_then_the_turn_ends() {
    let provider = FakeProvider::start(|request| {
        if after_tool(request) {
            Reply::text("Still done.")
        } else {
            Reply::text("Done.")
        }
    });
    let mut agent = Agent::spawn(&provider, &[]);
    agent.initialize().await;
    let session = agent
        .new_session(json!([test_server(
            "checks",
            &[("TS_HOOKS", "_Stop"), ("TS_STOP", "say:2 tests fail")]
        )]))
        .await;
    let (reply, updates) = agent.prompt_to_end(&session, "Fix the tests.").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(titles(&updates), ["_Stop objection from checks (2 left)"]);
    let objection = updates
        .iter()
        .find(|u| u["update"]["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(
        objection["update"]["content"][0]["content"]["text"],
        "2 tests fail"
    );
    assert!(
        thoughts(&updates).iter().any(|t| t.contains("declined")),
        "{updates:?}"
    );
    // The model saw the objection as the JSON hook body.
    let second = &provider.requests()[1];
    assert!(
        second.to_string().contains(r#"\"hook\":\"_Stop\""#),
        "{second}"
    );
    agent.close().await;
}

#[tokio::test]
async fn a_spent_budget_and_a_refused_hook_call_are_visible() {
    // Budget of 1: the first objection uses it; the next end of turn is let through.
    let provider = FakeProvider::start(|request| {
        let text = request.to_string();
        let objected = text.contains(r#"\"hook\":\"_Stop\""#);
        let worked = loopback::called(request, "checks__echo");
        match (objected, worked, after_tool(request)) {
            (true, false, true) => Reply::tool("checks__echo", json!({"try": 1})),
            (_, _, _) if last_user_text(request) == "call the hook" && !after_tool(request) => {
                Reply::tool("checks___Stop", json!({}))
            }
            _ => Reply::text("done"),
        }
    });
    let mut agent = Agent::spawn(&provider, &[("SPROUT_AGENT_STOP_MAX_REJECTIONS", "1")]);
    agent.initialize().await;
    let session = agent
        .new_session(json!([test_server(
            "checks",
            &[("TS_HOOKS", "_Stop"), ("TS_STOP", "say:not yet")]
        )]))
        .await;

    let (reply, updates) = agent.prompt_to_end(&session, "budget").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let kinds: Vec<String> = updates.iter().map(update_kind).collect();
    assert!(
        titles(&updates).contains(&"_Stop objection from checks (0 left)".to_owned()),
        "{kinds:?}"
    );
    assert!(
        thoughts(&updates)
            .iter()
            .any(|t| t.contains("budget is spent")),
        "{updates:?}"
    );

    // The budget is session-wide: the next prompt's end of turn is not even asked about.
    let (reply, updates) = agent.prompt_to_end(&session, "call the hook").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    let refused = updates
        .iter()
        .find(|u| u["update"]["sessionUpdate"] == "tool_call")
        .expect("the refused call is shown");
    assert_eq!(refused["update"]["title"], "checks___Stop");
    assert_eq!(refused["update"]["status"], "failed");
    agent.close().await;
}

#[tokio::test]
async fn hook_timeouts_fail_open_and_the_second_in_a_row_kills_the_server() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let mut agent = Agent::spawn(&provider, &[("SPROUT_AGENT_HOOK_TIMEOUT_MS", "300")]);
    agent.initialize().await;
    let session = agent
        .new_session(json!([test_server(
            "slow",
            &[("TS_HOOKS", "_Stop"), ("TS_STOP", "hang|hang")]
        )]))
        .await;
    let (reply, updates) = agent.prompt_to_end(&session, "go").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    assert!(
        thoughts(&updates)
            .iter()
            .any(|t| t.contains("_Stop on slow") && t.contains("no objection")),
        "{updates:?}"
    );
    // The counter of consecutive timeouts is the session's: the second prompt's kills.
    let (reply, updates) = agent.prompt_to_end(&session, "again").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    assert!(
        thoughts(&updates)
            .iter()
            .any(|t| t.contains("Server slow was killed")),
        "{updates:?}"
    );
    agent.close().await;
}

#[tokio::test]
async fn a_compaction_and_the_post_compact_injection_are_visible() {
    let provider = FakeProvider::start(|request| {
        if last_user_text(request).contains("Summarize") {
            Reply::text("Summary: echoed a long text.")
        } else if after_tool(request) || request.to_string().contains("_PostCompact") {
            Reply::text("done")
        } else {
            Reply::tool("mem__echo", json!({"text": "x".repeat(3000)}))
        }
    });
    let mut agent = Agent::spawn(
        &provider,
        &[
            ("HOOKLOOP_MAX_CONTEXT_TOKENS", "1200"),
            ("HOOKLOOP_MAX_OUTPUT_TOKENS", "100"),
        ],
    );
    agent.initialize().await;
    let session = agent
        .new_session(json!([test_server(
            "mem",
            &[
                ("TS_HOOKS", "_PostCompact"),
                ("TS_POST_COMPACT", "say:open: #1 write docs")
            ]
        )]))
        .await;
    let (reply, updates) = agent.prompt_to_end(&session, "remember").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        thoughts(&updates)
            .iter()
            .any(|t| t.contains("History compacted")),
        "{updates:?}"
    );
    assert!(
        titles(&updates).contains(&"_PostCompact from mem".to_owned()),
        "{updates:?}"
    );
    agent.close().await;
}

#[tokio::test]
async fn sessions_are_concurrent_and_a_busy_one_refuses_a_second_prompt() {
    let provider = FakeProvider::start(|request| match last_user_text(request).as_str() {
        "slow" if !after_tool(request) => Reply::tool("tools__hang", json!({})),
        _ => Reply::text("quick answer"),
    });
    let mut agent = Agent::spawn(&provider, &[]);
    agent.initialize().await;
    let a = agent.new_session(json!([test_server("tools", &[])])).await;
    let b = agent.new_session(json!([test_server("tools", &[])])).await;
    assert_ne!(a, b);
    let slow = agent.prompt(&a, "slow").await;
    agent.wait_update(|u| u["status"] == "in_progress").await;
    let (busy, _) = agent
        .call(
            "session/prompt",
            json!({"sessionId": a, "prompt": [{"type": "text", "text": "again"}]}),
        )
        .await;
    assert_eq!(busy["error"]["code"], -32600, "{busy}");
    let (reply, updates) = agent.prompt_to_end(&b, "fast").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    assert!(updates.iter().any(|u| u["sessionId"] == json!(b)));

    // Cancel during the tool call: the prompt ends promptly, the call is failed, the session works.
    let started = std::time::Instant::now();
    agent
        .notify("session/cancel", json!({"sessionId": a}))
        .await;
    let (reply, updates) = agent.reply(slow).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        updates
            .iter()
            .any(|u| u["sessionId"] == json!(a) && update_kind(u) == "tool_call_update:failed")
    );
    let (reply, _) = agent.prompt_to_end(&a, "next").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    agent.close().await;
}

#[tokio::test]
async fn cancel_during_a_hook_call_ends_promptly_and_the_next_prompt_works() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = common::Scratch::new("acp-cancel-hook");
    let log = scratch.file("log");
    let mut agent = Agent::spawn(&provider, &[("SPROUT_AGENT_HOOK_TIMEOUT_MS", "60000")]);
    agent.initialize().await;
    let session = agent
        .new_session(json!([test_server(
            "gate",
            &[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", "hang"),
                ("TS_THEN", "empty"),
                ("TS_LOG", &log)
            ]
        )]))
        .await;
    let id = agent.prompt(&session, "go").await;
    // The cancel goes once the server holds the hook call, so it is the hook it cuts short.
    assert!(
        common::eventually(Duration::from_secs(10), || common::count(
            &log,
            "call _Stop"
        ) == 1)
        .await,
        "{:?}",
        common::lines(&log)
    );
    let started = std::time::Instant::now();
    agent
        .notify("session/cancel", json!({"sessionId": session}))
        .await;
    let (reply, _) = agent.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let (reply, _) = agent.prompt_to_end(&session, "again").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    agent.close().await;
}

#[tokio::test]
async fn malformed_and_oversized_frames_get_errors_while_a_prompt_runs_and_other_sessions_go_on() {
    let provider = FakeProvider::start(|request| match last_user_text(request).as_str() {
        // The first session's tool hangs until cancelled: its prompt is surely running while
        // the bad frames are read.
        "work" if !after_tool(request) => Reply::tool("tools__hang", json!({})),
        "other" if !after_tool(request) => Reply::tool("tools__echo", json!({"x": 1})),
        _ => Reply::text("finished"),
    });
    let mut agent = Agent::spawn(&provider, &[]);
    agent.initialize().await;
    let target = agent.new_session(json!([test_server("tools", &[])])).await;
    let bystander = agent.new_session(json!([test_server("tools", &[])])).await;
    let running = agent.prompt(&target, "work").await;
    agent
        .wait_update(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "tools__hang")
        .await;

    agent.send_raw("{not json").await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":"huge","method":"session/prompt","params":{{"sessionId":"{target}","prompt":[{{"type":"text","text":"{}"}}]}}}}"#,
        "a".repeat(5 * 1024 * 1024)
    );
    agent.send_raw(&big).await;
    // Both refusals come while the first prompt still runs (it cannot end by itself).
    let mut refused = Vec::new();
    while refused.len() < 2 {
        let frame = agent.read().await;
        assert_ne!(frame["id"], json!(running), "the prompt ended: {frame}");
        if frame.get("error").is_some() {
            refused.push(frame);
        } else {
            agent.backlog.push(frame);
        }
    }
    assert!(
        refused.iter().any(|f| f["error"]["code"] == -32700),
        "{refused:?}"
    );
    let oversized = refused.iter().find(|f| f["id"] == "huge");
    let oversized = oversized.expect("the oversized frame is answered with its id");
    assert_eq!(oversized["error"]["code"], -32600);

    // The other session runs a whole prompt meanwhile, tool call and all.
    let (reply, updates) = agent.prompt_to_end(&bystander, "other").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        updates.iter().any(|u| u["sessionId"] == bystander.as_str()
            && update_kind(u) == "tool_call_update:completed"),
        "{updates:?}"
    );
    let (unknown, _) = agent.call("session/fly", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601);

    // And the first prompt is intact: it ends when cancelled, as a running prompt does.
    agent
        .notify("session/cancel", json!({"sessionId": target}))
        .await;
    let (reply, _) = agent.reply(running).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    agent.close().await;
}

#[tokio::test]
async fn session_close_kills_the_servers_process_groups_and_frees_the_slot() {
    let provider = FakeProvider::start(|request| match last_user_text(request).as_str() {
        "work" if !after_tool(request) => Reply::tool("tools__hang", json!({})),
        _ => Reply::text("finished"),
    });
    let scratch = common::Scratch::new("acp-close");
    let (pids, grandchildren) = (scratch.file("pids"), scratch.file("grandchildren"));
    let mut agent = Agent::spawn(&provider, &[("HOOKLOOP_MAX_SESSIONS", "1")]);
    agent.initialize().await;
    let server = test_server(
        "tools",
        &[
            ("TS_PID_FILE", pids.as_str()),
            ("TS_GRANDCHILD_FILE", grandchildren.as_str()),
        ],
    );
    let session = agent.new_session(json!([server])).await;
    let (refused, _) = agent
        .call(
            "session/new",
            json!({"cwd": std::env::temp_dir(), "mcpServers": []}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HOOKLOOP_MAX_SESSIONS"),
        "{refused}"
    );

    let running = agent.prompt(&session, "work").await;
    agent
        .wait_update(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "tools__hang")
        .await;
    let started: Vec<u32> = common::lines(&pids)
        .iter()
        .chain(&common::lines(&grandchildren))
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(
        started.len(),
        2,
        "the server and its grandchild: {started:?}"
    );
    assert!(started.iter().all(|&pid| common::alive(pid)));

    let close = agent
        .send("session/close", json!({"sessionId": session}))
        .await;
    let (reply, _) = agent.reply(running).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    let (reply, _) = agent.reply(close).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    // The answer comes once the session is dropped, which kills each server's whole group.
    let gone = common::eventually(Duration::from_secs(5), || {
        started.iter().all(|&pid| !common::alive(pid))
    })
    .await;
    assert!(gone, "still running after session/close: {started:?}");

    // Its slot is free again, and the closed session is unknown.
    let again = agent.new_session(json!([])).await;
    assert_ne!(again, session);
    let (reply, _) = agent
        .call("session/close", json!({"sessionId": session}))
        .await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    agent.close().await;
}

#[tokio::test]
async fn a_recorded_session_is_listed_then_loaded_in_a_new_process_with_its_budget_still_spent() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = common::Scratch::new("acp-load");
    let records = scratch.file("records");
    let (first_log, second_log) = (scratch.file("first.log"), scratch.file("second.log"));
    let gate = |log: &str| {
        test_server(
            "checks",
            &[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", "say:not yet"),
                ("TS_THEN", "say:still not"),
                ("TS_LOG", log),
            ],
        )
    };
    let env = [
        ("SPROUT_AGENT_STOP_MAX_REJECTIONS", "1"),
        ("HOOKLOOP_RECORD_DIR", records.as_str()),
    ];
    let cwd = std::env::temp_dir();

    // First process: one objection spends the budget of 1.
    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let session = agent.new_session(json!([gate(&first_log)])).await;
    let (reply, updates) = agent
        .prompt_to_end(&session, "tidy the repo\nand more")
        .await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        updates.iter().any(|u| u["update"]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("_Stop objection"))),
        "{updates:?}"
    );
    agent.close().await;

    // Second process: the session is listed, then loaded by the id `session/new` gave.
    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let (listed, _) = agent.call("session/list", json!({})).await;
    let sessions = listed["result"]["sessions"].as_array().unwrap().clone();
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(sessions[0]["sessionId"], session.as_str());
    assert_eq!(sessions[0]["title"], "tidy the repo");
    assert_eq!(sessions[0]["cwd"], json!(cwd));

    let (loaded, history) = agent
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": [gate(&second_log)]}),
        )
        .await;
    assert_eq!(loaded["result"], json!({}), "{loaded}");
    let kinds: Vec<String> = history.iter().map(update_kind).collect();
    assert_eq!(kinds[0], "user_message_chunk", "{kinds:?}");
    assert_eq!(
        history[0]["update"]["content"]["text"],
        "tidy the repo\nand more"
    );
    assert!(
        kinds.contains(&"agent_message_chunk".to_owned()),
        "{kinds:?}"
    );
    assert!(history.iter().all(|u| u["sessionId"] == session.as_str()));

    // It goes on live, and the budget spent before the restart is still spent: `_Stop` is
    // not even asked.
    let (reply, updates) = agent.prompt_to_end(&session, "one more thing").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        thoughts(&updates)
            .iter()
            .any(|t| t.contains("budget is spent")),
        "{updates:?}"
    );
    assert_eq!(
        common::count(&second_log, "call _Stop"),
        0,
        "{:?}",
        common::lines(&second_log)
    );
    assert!(common::count(&first_log, "call _Stop") >= 1);
    // The model saw the whole conversation, the first process's turns included.
    let last = provider.requests().last().unwrap().to_string();
    assert!(last.contains("tidy the repo"), "{last}");

    // A session that was never recorded is refused with a clear error.
    let (refused, _) = agent
        .call(
            "session/load",
            json!({"sessionId": "1-2-3", "cwd": cwd, "mcpServers": []}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no recorded session"),
        "{refused}"
    );
    agent.close().await;

    // Third process: `session/resume` opens it without sending the conversation back.
    let mut agent = Agent::spawn(&provider, &env);
    let (init, _) = agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    let capabilities = &init["result"]["agentCapabilities"];
    assert_eq!(capabilities["loadSession"], true, "{init}");
    assert!(capabilities["sessionCapabilities"]["resume"].is_object());
    assert!(capabilities["sessionCapabilities"]["list"].is_object());
    let (resumed, history) = agent
        .call(
            "session/resume",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": [gate(&second_log)]}),
        )
        .await;
    assert_eq!(resumed["result"], json!({}), "{resumed}");
    assert!(history.is_empty(), "{history:?}");
    let (reply, _) = agent.prompt_to_end(&session, "and again").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(common::count(&second_log, "call _Stop"), 0);
    agent.close().await;
}

#[tokio::test]
async fn a_streamed_reply_reaches_the_client_in_pieces_before_the_prompt_answers() {
    let pieces: Vec<String> = ["The ", "answer ", "is ", "42."]
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    let stream = pieces.clone();
    let provider =
        FakeProvider::start(move |_| Reply::Stream(stream.clone(), Duration::from_millis(50)));
    let mut agent = Agent::spawn(&provider, &[]);
    agent.initialize().await;
    let session = agent.new_session(json!([])).await;
    let (reply, updates) = agent.prompt_to_end(&session, "What is it?").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    // `reply` collects the updates that came before the answer.
    let chunks: Vec<&str> = updates
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["update"]["content"]["text"].as_str().unwrap_or(""))
        .collect();
    assert!(chunks.len() >= 2, "{updates:?}");
    // The pieces make the reply once: the whole text is not sent again after them.
    assert_eq!(chunks.concat(), "The answer is 42.", "{updates:?}");
    agent.close().await;
}

#[tokio::test]
async fn a_transcript_that_cannot_be_written_whole_is_reported_to_the_client() {
    let provider = FakeProvider::start(|_| Reply::text("The answer is 42."));
    let dir = std::env::temp_dir().join(format!(
        "hookloop-acp-fsize-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let record_dir = dir.to_str().unwrap().to_owned();
    let mut agent = Agent::spawn_with(
        &provider,
        &[("HOOKLOOP_RECORD_DIR", &record_dir)],
        |command| {
            // The limit below holds for every file the agent writes to, its stderr too when
            // that is a file (a CI log): keep its log out of the way.
            command.stderr(Stdio::null());
            // Files the agent writes may not grow past 600 bytes: the header fits, the reply's
            // records do not. Writes past the limit fail with EFBIG instead of raising SIGXFSZ.
            unsafe {
                command.pre_exec(|| {
                    let limit = libc::rlimit {
                        rlim_cur: 600,
                        rlim_max: 600,
                    };
                    if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0
                        || libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        },
    );
    agent.initialize().await;
    let session = agent.new_session(json!([])).await;
    let (reply, updates) = agent.prompt_to_end(&session, "What is it?").await;
    // The answer still reaches the client, and so does why its transcript is incomplete.
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let notices: Vec<String> = thoughts(&updates)
        .into_iter()
        .filter(|t| t.contains("transcript of this session is incomplete"))
        .collect();
    assert_eq!(notices.len(), 1, "{updates:?}");
    assert!(
        notices[0].contains("could not write transcript"),
        "{notices:?}"
    );
    // Said once: the transcript stays incomplete, the client already knows.
    let (_, updates) = agent.prompt_to_end(&session, "Again?").await;
    assert!(
        !thoughts(&updates).iter().any(|t| t.contains("incomplete")),
        "{updates:?}"
    );
    agent.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model that calls `tool` once, then ends its turn.
fn asking_provider(tool: &'static str) -> FakeProvider {
    FakeProvider::start(move |request| {
        if after_tool(request) {
            Reply::text("Done.")
        } else {
            Reply::tool(tool, json!({}))
        }
    })
}

/// An agent whose client advertised `elicitation` in `initialize`.
async fn agent_taking(provider: &FakeProvider, elicitation: Value) -> Agent {
    let mut agent = Agent::spawn(provider, &[]);
    let capabilities = json!({"elicitation": elicitation});
    let (reply, _) = agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": capabilities}),
        )
        .await;
    assert_eq!(reply["result"]["protocolVersion"], 1, "{reply}");
    agent
}

/// Reads frames until the agent asks a question; keeps the others for later replies.
async fn next_question(agent: &mut Agent) -> Value {
    loop {
        let frame = agent.read().await;
        if frame["method"] == "elicitation/create" {
            return frame;
        }
        agent.backlog.push(frame);
    }
}

/// The text of the last tool result the model got.
fn last_tool_result(provider: &FakeProvider) -> Value {
    let requests = provider.requests();
    let messages = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").unwrap();
    result["content"].clone()
}

#[tokio::test]
async fn a_servers_question_goes_to_a_client_that_takes_forms_and_its_answer_back() {
    let provider = asking_provider("srv__ask");
    let mut agent = agent_taking(&provider, json!({"form": {}})).await;
    let session = agent.new_session(json!([test_server("srv", &[])])).await;
    let prompt = agent.prompt(&session, "Ask me.").await;
    let question = next_question(&mut agent).await;
    let params = &question["params"];
    assert_eq!(params["mode"], "form", "{question}");
    assert_eq!(params["sessionId"], json!(session), "{question}");
    assert_eq!(params["message"], "srv asks: What is your name?");
    assert_eq!(
        params["requestedSchema"]["properties"]["name"]["default"],
        "Ada"
    );
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {
        "action": "accept", "content": {"name": "Grace"}
    }});
    agent.send_raw(&answer.to_string()).await;
    let (reply, _) = agent.reply(prompt).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(last_tool_result(&provider), r#"accept {"name":"Grace"}"#);
    agent.close().await;
}

#[tokio::test]
async fn a_servers_question_is_declined_for_a_client_without_elicitation() {
    let provider = asking_provider("srv__ask");
    let mut agent = Agent::spawn(&provider, &[]);
    agent.initialize().await;
    let session = agent.new_session(json!([test_server("srv", &[])])).await;
    let prompt = agent.prompt(&session, "Ask me.").await;
    let (reply, _) = agent.reply(prompt).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        agent
            .backlog
            .iter()
            .all(|f| f["method"] != "elicitation/create"),
        "{:?}",
        agent.backlog
    );
    assert_eq!(last_tool_result(&provider), "decline");
    agent.close().await;
}

/// A session whose agent logs every event (`HOOKLOOP_LOG=trace`) answers two prompts: whatever
/// happens to the agent's stderr must not end it.
async fn two_prompts_answered(mut agent: Agent) {
    agent.initialize().await;
    let session = agent.new_session(json!([])).await;
    for text in ["What is it?", "Again?"] {
        let (reply, _) = agent.prompt_to_end(&session, text).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    }
    agent.close().await;
}

#[tokio::test]
async fn a_url_question_goes_only_to_a_client_that_takes_urls() {
    // Forms only: the URL question is declined without reaching the client.
    let provider = asking_provider("srv__ask_url");
    let mut agent = agent_taking(&provider, json!({"form": {}})).await;
    let session = agent.new_session(json!([test_server("srv", &[])])).await;
    let (reply, _) = agent.prompt_to_end(&session, "Sign in.").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        agent
            .backlog
            .iter()
            .all(|f| f["method"] != "elicitation/create")
    );
    assert_eq!(last_tool_result(&provider), "decline");
    agent.close().await;

    let provider = asking_provider("srv__ask_url");
    let mut agent = agent_taking(&provider, json!({"url": {}})).await;
    let session = agent.new_session(json!([test_server("srv", &[])])).await;
    let prompt = agent.prompt(&session, "Sign in.").await;
    let question = next_question(&mut agent).await;
    let params = &question["params"];
    assert_eq!(params["mode"], "url", "{question}");
    assert_eq!(params["url"], "https://example.invalid/sign-in");
    assert!(
        params["elicitationId"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept"}});
    agent.send_raw(&answer.to_string()).await;
    let (reply, _) = agent.reply(prompt).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(last_tool_result(&provider), "accept");
    agent.close().await;
}

#[tokio::test]
async fn the_agent_lives_on_when_its_stderr_pipe_is_closed() {
    let provider = FakeProvider::start(|_| Reply::text("The answer is 42."));
    let (reader, writer) = std::io::pipe().unwrap();
    let agent = Agent::spawn_with(&provider, &[("HOOKLOOP_LOG", "trace")], |command| {
        command.stderr(writer);
    });
    // Nobody reads the agent's log: every write to it fails with a broken pipe.
    drop(reader);
    two_prompts_answered(agent).await;
}

#[tokio::test]
async fn the_agent_lives_on_when_its_stderr_file_reaches_the_size_limit() {
    let provider = FakeProvider::start(|_| Reply::text("The answer is 42."));
    let path = std::env::temp_dir().join(format!(
        "hookloop-acp-stderr-{}-{}.log",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let log = std::fs::File::create(&path).unwrap();
    let agent = Agent::spawn_with(&provider, &[("HOOKLOOP_LOG", "trace")], |command| {
        command.stderr(log);
        // Files the agent writes may not grow past 200 bytes, its stderr included; the signal
        // such a write raises (SIGXFSZ) is left at its default, which ends the process.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 200,
                    rlim_max: 200,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    two_prompts_answered(agent).await;
    let written = std::fs::metadata(&path).unwrap().len();
    let _ = std::fs::remove_file(&path);
    assert!(written <= 200, "{written}");
}

/// The text of the last message of the last request the model got.
fn last_message_text(provider: &FakeProvider) -> String {
    let requests = provider.requests();
    let last = requests.last().expect("a request");
    let messages = last["messages"].as_array().expect("messages");
    messages.last().expect("a message")["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn permissions_never_applies_to_a_loaded_session_recorded_while_asking() {
    let provider = FakeProvider::start(|request| {
        if after_tool(request) {
            Reply::text("done")
        } else {
            Reply::tool("tools__remove", json!({"path": "a"}))
        }
    });
    let scratch = common::Scratch::new("acp-load-permissions");
    let records = scratch.file("records");
    let cwd = std::env::temp_dir();
    let tools = || test_server("tools", &[]);

    // First process asks (the default); the client rejects `remove` for good.
    let mut agent = Agent::spawn(&provider, &[("HOOKLOOP_RECORD_DIR", &records)]);
    agent.initialize().await;
    let session = agent.new_session(json!([tools()])).await;
    let prompt = agent.prompt(&session, "remove a").await;
    let asked = loop {
        let frame = agent.read().await;
        if frame["method"] == "session/request_permission" {
            break frame;
        }
        agent.backlog.push(frame);
    };
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "reject_always"}}});
    agent.send_raw(&answer.to_string()).await;
    let (reply, _) = agent.reply(prompt).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        !last_message_text(&provider).starts_with("removed"),
        "rejected: {}",
        last_message_text(&provider)
    );
    agent.close().await;

    // Loaded where the agent never asks: the recorded decisions replay, and the tool now runs
    // without a question, the standing rejection notwithstanding.
    for _ in 0..2 {
        let env = [
            ("HOOKLOOP_RECORD_DIR", records.as_str()),
            ("HOOKLOOP_ACP_PERMISSIONS", "never"),
        ];
        let mut agent = Agent::spawn(&provider, &env);
        agent.initialize().await;
        let (loaded, _) = agent
            .call(
                "session/load",
                json!({"sessionId": session, "cwd": cwd, "mcpServers": [tools()]}),
            )
            .await;
        assert_eq!(loaded["result"], json!({}), "{loaded}");
        let (reply, _) = agent.prompt_to_end(&session, "remove a").await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
        assert_eq!(last_message_text(&provider), r#"removed {"path":"a"}"#);
        assert!(
            !agent
                .backlog
                .iter()
                .any(|f| f["method"] == "session/request_permission"),
            "{:?}",
            agent.backlog
        );
        agent.close().await;
    }
}

#[tokio::test]
async fn two_loads_of_one_session_at_once_open_it_once_and_leak_no_slot() {
    let provider = FakeProvider::start(|_| Reply::text("done"));
    let scratch = common::Scratch::new("acp-double-load");
    let records = scratch.file("records");
    let env = [
        ("HOOKLOOP_RECORD_DIR", records.as_str()),
        ("HOOKLOOP_MAX_SESSIONS", "2"),
    ];
    let cwd = std::env::temp_dir();

    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let session = agent.new_session(json!([])).await;
    let (reply, _) = agent.prompt_to_end(&session, "hello").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    agent.close().await;

    // A server slow to start keeps each load under way while the other arrives.
    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let slow = test_server("slow", &[("TS_STARTUP", "slow:500")]);
    let params = json!({"sessionId": session, "cwd": cwd, "mcpServers": [slow]});
    let first = agent.send("session/resume", params.clone()).await;
    let second = agent.send("session/load", params).await;
    let (a, _) = agent.reply(first).await;
    let (b, _) = agent.reply(second).await;
    let opened = [&a, &b]
        .iter()
        .filter(|r| r.get("result").is_some())
        .count();
    assert_eq!(opened, 1, "one load opens it:\n{a}\n{b}");
    let refused = if a.get("error").is_some() { &a } else { &b };
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already open"),
        "{refused}"
    );
    // The refused load gave its slot back: once the session is closed, both are free.
    let (closed, _) = agent
        .call("session/close", json!({"sessionId": session}))
        .await;
    assert!(closed.get("result").is_some(), "{closed}");
    agent.new_session(json!([])).await;
    agent.new_session(json!([])).await;
    agent.close().await;
}
