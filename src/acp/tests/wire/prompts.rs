//! Prompts over the wire: capabilities, streamed updates, hook injections, queued calls, context use, tool kinds.

use super::*;

#[tokio::test]
async fn initialize_states_honest_capabilities() {
    let (mut peer, _) = start(Vec::new(), DEFAULT_MAX_FRAME_BYTES);
    let reply = peer.initialize().await;
    let result = &reply["result"];
    assert_eq!(result["protocolVersion"], 1);
    assert_eq!(result["agentCapabilities"]["mcpCapabilities"]["http"], true);
    assert_eq!(result["agentCapabilities"]["mcpCapabilities"]["sse"], true);
    // These tests record nothing: nothing could be loaded, listed or resumed.
    assert_eq!(result["agentCapabilities"]["loadSession"], false);
    let sessions = &result["agentCapabilities"]["sessionCapabilities"];
    assert!(sessions["close"].is_object(), "{result}");
    assert!(sessions.get("list").is_none() && sessions.get("resume").is_none());
    assert_eq!(result["agentInfo"]["name"], "hookloop");
    assert_eq!(result["agentInfo"]["version"], env!("CARGO_PKG_VERSION"));
}

#[tokio::test]
async fn a_prompt_streams_tools_objections_and_text_then_ends_the_turn() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({"path": "a"}))]),
        Step::text("All done."),
        Step::text("Still done."),
    ]);
    let host = InProcessHost::new().tool("fs", "read", echo).hook(
        "todo",
        Hook::Stop,
        [HookStep::Say("1 open: write tests".into())],
    );
    let (mut peer, factory) = start(vec![session(config(), llm, host)], DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let session = peer.new_session().await;
    assert_eq!(factory.specs.lock().unwrap()[0].cwd, PathBuf::from("/tmp"));
    let id = peer.prompt(&session, "go").await;
    let (reply, updates) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(
        kinds(&updates),
        [
            "tool_call:pending",
            "tool_call_update:in_progress",
            "tool_call_update:completed",
            "agent_message_chunk",
            "tool_call:completed",
            "agent_message_chunk",
            "agent_thought_chunk",
        ]
    );
    assert!(updates.iter().all(|u| u["sessionId"] == json!(session)));
    assert_eq!(updates[0]["update"]["title"], "fs__read");
    assert_eq!(updates[0]["update"]["rawInput"], json!({"path": "a"}));
    assert_eq!(updates[3]["update"]["content"]["text"], "All done.");
    let objection = &updates[4]["update"];
    // `other` is the protocol's default kind, left out on the wire.
    assert!(
        objection.get("kind").is_none_or(|k| k == "other"),
        "{objection}"
    );
    assert_eq!(objection["title"], "_Stop objection from todo (2 left)");
    assert_eq!(
        objection["content"][0]["content"]["text"],
        "1 open: write tests"
    );
    assert_eq!(objection["rawOutput"]["server"], "todo");
    assert!(
        updates[6]["update"]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("declined")
    );
}

/// The `tool_call` update titled `title`.
fn titled<'a>(updates: &'a [Value], title: &str) -> &'a Value {
    updates
        .iter()
        .map(|u| &u["update"])
        .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == title)
        .unwrap_or_else(|| panic!("no tool_call titled {title}: {updates:?}"))
}

#[tokio::test]
async fn hook_injections_are_completed_think_calls_and_a_denial_a_completed_other_call() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__rm", json!({"path": "/"}))]),
        Step::text("ok, I will not"),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "rm", echo)
        .hook(
            "guard",
            Hook::UserPromptSubmit,
            [HookStep::Say("tests come first".into())],
        )
        .hook(
            "guard",
            Hook::PreToolUse,
            [HookStep::Say("rm is not allowed".into())],
        );
    let (mut peer, _) = start(vec![session(config(), llm, host)], DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "clean up").await;
    let (reply, updates) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");

    let injected = titled(&updates, "_UserPromptSubmit from guard");
    assert_eq!(injected["kind"], "think", "{injected}");
    assert_eq!(injected["status"], "completed", "{injected}");
    assert_eq!(
        injected["rawOutput"],
        json!({"hook": "_UserPromptSubmit", "server": "guard", "text": "tests come first"})
    );
    assert_eq!(
        injected["content"][0]["content"]["text"],
        "tests come first"
    );

    let denied = titled(&updates, "fs__rm denied by _PreToolUse of guard");
    // `other` is the protocol's default kind, left out on the wire.
    assert!(denied.get("kind").is_none_or(|k| k == "other"), "{denied}");
    assert_eq!(denied["status"], "completed", "{denied}");
    assert_eq!(denied["rawOutput"]["hook"], "_PreToolUse");
    assert_eq!(denied["rawOutput"]["tool"], "fs__rm");
    assert_eq!(denied["rawOutput"]["text"], "rm is not allowed");
}

#[tokio::test]
async fn calls_queued_behind_the_concurrency_limit_stay_pending_until_they_start() {
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                ("fs__read", json!({"n": 1})),
                ("fs__read", json!({"n": 2})),
                ("fs__read", json!({"n": 3})),
            ],
        ),
        Step::text("done"),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "read", echo)
        .tool_delay(Duration::from_millis(20));
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .tool_concurrency(1)
        .build()
        .unwrap();
    let (mut peer, _) = start(vec![session(config, llm, host)], DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;
    let (reply, updates) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let calls: Vec<String> = updates
        .iter()
        .zip(kinds(&updates))
        .filter(|(u, _)| u["update"]["toolCallId"].is_string())
        .map(|(u, kind)| format!("{} {kind}", u["update"]["toolCallId"].as_str().unwrap()))
        .collect();
    // One at a time: each call starts only once the one before it has ended, as the
    // session says when it starts each.
    let ids: Vec<String> = updates
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == "tool_call")
        .map(|u| u["update"]["toolCallId"].as_str().unwrap().to_owned())
        .collect();
    let [a, b, c] = &ids[..] else {
        panic!("{calls:?}")
    };
    assert_eq!(
        calls,
        [
            format!("{a} tool_call:pending"),
            format!("{b} tool_call:pending"),
            format!("{c} tool_call:pending"),
            format!("{a} tool_call_update:in_progress"),
            format!("{a} tool_call_update:completed"),
            format!("{b} tool_call_update:in_progress"),
            format!("{b} tool_call_update:completed"),
            format!("{c} tool_call_update:in_progress"),
            format!("{c} tool_call_update:completed"),
        ]
    );
    assert_eq!(
        updates
            .iter()
            .find(|u| u["update"]["status"] == "completed")
            .unwrap()["update"]["rawOutput"]["isError"],
        false
    );
}

#[tokio::test]
async fn queued_calls_of_a_cancelled_prompt_never_show_as_started() {
    let llm = ScriptedLlm::new([Step::tools(
        1,
        &[("fs__read", json!({"n": 1})), ("fs__read", json!({"n": 2}))],
    )]);
    let host = InProcessHost::new()
        .tool("fs", "read", echo)
        .tool_delay(Duration::from_secs(3600));
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .tool_concurrency(1)
        .build()
        .unwrap();
    let (mut peer, _) = start(vec![session(config, llm, host)], DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;
    // Cancel once the first call has started (it never ends): the second is still queued.
    peer.read_until(|frame| {
        frame["method"] == "session/update" && frame["params"]["update"]["status"] == "in_progress"
    })
    .await;
    peer.notify("session/cancel", json!({"sessionId": session}))
        .await;
    let (reply, updates) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    let kinds = kinds(&updates);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "tool_call_update:in_progress")
            .count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "tool_call_update:failed")
            .count(),
        2,
        "{kinds:?}"
    );
}

#[tokio::test]
async fn each_reply_of_a_turn_reports_the_context_used_against_the_window() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({}))]).with_input_tokens(1200),
        Step::text("done").with_input_tokens(1500),
    ]);
    let host = InProcessHost::new().tool("fs", "read", echo);
    let session = session(config(), llm, host);
    let window = session.machine().policy().max_context_tokens;
    let (mut peer, _) = start(vec![session], DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;
    let (_, updates) = peer.reply(id).await;
    let usage: Vec<(u64, u64)> = updates
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == "usage_update")
        .map(|u| {
            let u = &u["update"];
            (u["used"].as_u64().unwrap(), u["size"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(usage, [(1210, window), (1510, window)]);
}

#[tokio::test]
async fn tool_calls_carry_the_kind_their_servers_hints_give() {
    use crate::machine::ToolHints;
    let hint = |read_only, destructive, open_world| ToolHints {
        read_only,
        destructive,
        open_world,
    };
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                ("fs__read", json!({})),
                ("fs__write", json!({})),
                ("web__get", json!({})),
                ("misc__run", json!({})),
            ],
        ),
        Step::text("done"),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "read", echo)
        .tool("fs", "write", echo)
        .tool("web", "get", echo)
        .tool("misc", "run", echo)
        .hints("fs", "read", hint(Some(true), None, Some(false)))
        .hints("fs", "write", hint(Some(false), Some(true), None))
        .hints("web", "get", hint(Some(true), None, Some(true)));
    // Not asking: the destructive `fs__write` would wait for an answer.
    let options = AgentOptions {
        permissions: Permissions::Never,
        ..AgentOptions::default()
    };
    let (mut peer, _) = start_with(
        vec![session(config_without_asking(), llm, host)],
        options,
        1 << 16,
    );
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;
    let (_, updates) = peer.reply(id).await;
    let kinds: Vec<(String, String)> = updates
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == "tool_call")
        .map(|u| {
            let u = &u["update"];
            let kind = u["kind"].as_str().unwrap_or("other").to_owned();
            (u["title"].as_str().unwrap().to_owned(), kind)
        })
        .collect();
    let expected = [
        ("fs__read", "read"),
        ("fs__write", "edit"),
        ("web__get", "fetch"),
        ("misc__run", "other"),
    ]
    .map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(kinds, expected);
}

#[tokio::test]
async fn a_prompt_with_an_image_is_invalid_params() {
    let (mut peer, _) = start(
        vec![session(
            config(),
            ScriptedLlm::new([]),
            InProcessHost::new(),
        )],
        DEFAULT_MAX_FRAME_BYTES,
    );
    peer.initialize().await;
    let session = peer.new_session().await;
    let (reply, _) = peer
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]}),
        )
        .await;
    assert_eq!(reply["error"]["code"], -32602);
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("image")
    );
}
