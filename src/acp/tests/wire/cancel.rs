//! Cancellation: a busy session, a cancel during a tool or a hook call, a cancel racing a prompt.

use super::*;

#[tokio::test]
async fn a_busy_session_refuses_a_second_prompt_and_cancel_frees_it() {
    let llm = ScriptedLlm::new([Step::Hang, Step::text("fresh")]);
    let (mut peer, _) = start(
        vec![session(config(), llm, InProcessHost::new())],
        DEFAULT_MAX_FRAME_BYTES,
    );
    peer.initialize().await;
    let session = peer.new_session().await;
    let first = peer.prompt(&session, "one").await;
    // The first prompt is in the actor once the second is refused... or refused itself
    // only if it came first; ids tell them apart.
    let second = peer.prompt(&session, "two").await;
    let (reply, _) = peer.reply(second).await;
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already running")
    );

    peer.notify("session/cancel", json!({"sessionId": session}))
        .await;
    let (reply, _) = peer.reply(first).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled");

    let third = peer.prompt(&session, "three").await;
    let (reply, updates) = peer.reply(third).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    assert_eq!(updates[0]["update"]["content"]["text"], "fresh");
}

#[tokio::test]
async fn cancel_during_a_tool_call_fails_the_call_and_ends_cancelled() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({}))]),
        Step::text("after"),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "read", echo)
        .tool_delay(Duration::from_secs(3600));
    let (mut peer, _) = start(vec![session(config(), llm, host)], DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;
    // Wait until the tool is running, then cancel.
    loop {
        let frame = peer.read().await;
        if frame["params"]["update"]["status"] == "in_progress" {
            break;
        }
    }
    peer.notify("session/cancel", json!({"sessionId": session}))
        .await;
    let (reply, updates) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled");
    assert_eq!(kinds(&updates), ["tool_call_update:failed"]);
}

#[tokio::test]
async fn cancel_during_a_hook_call_ends_cancelled_and_the_next_prompt_works() {
    let llm = ScriptedLlm::new([Step::text("done?"), Step::text("next")]);
    let host = InProcessHost::new().hook("todo", Hook::Stop, [HookStep::Hang]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_secs(3600))
        .build()
        .unwrap();
    let (mut peer, _) = start(vec![session(config, llm, host)], DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;
    loop {
        let frame = peer.read().await;
        if frame["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            break;
        }
    }
    peer.notify("session/cancel", json!({"sessionId": session}))
        .await;
    let (reply, _) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled");
    let id = peer.prompt(&session, "again").await;
    let (reply, _) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
}

#[tokio::test]
async fn a_cancel_sent_right_after_a_prompt_always_cancels_it() {
    const ROUNDS: usize = 50;
    let sessions = (0..ROUNDS)
        .map(|_| {
            let llm = ScriptedLlm::new([Step::tools(1, &[("fs__read", json!({}))])]);
            let host = InProcessHost::new()
                .tool("fs", "read", echo)
                .tool_delay(Duration::from_secs(3600));
            session(config(), llm, host)
        })
        .collect();
    let (mut peer, _) = start(sessions, DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    for round in 0..ROUNDS {
        let session = peer.new_session().await;
        // Both frames in one write: the cancel lands while the prompt is still queued.
        peer.next_id += 1;
        let id = peer.next_id;
        let prompt = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}});
        let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel",
            "params": {"sessionId": session}});
        peer.send_raw(&format!("{prompt}\n{cancel}")).await;
        let (reply, _) = peer.reply(id).await;
        assert_eq!(
            reply["result"]["stopReason"], "cancelled",
            "round {round}: {reply}"
        );
        let (reply, _) = peer
            .call("session/close", json!({"sessionId": session}))
            .await;
        assert!(reply.get("result").is_some(), "{reply}");
    }
}

#[tokio::test]
async fn a_cancel_with_no_prompt_running_does_not_cancel_the_next_prompt() {
    let llm = ScriptedLlm::new([Step::text("fine")]);
    let (mut peer, _) = start(
        vec![session(config(), llm, InProcessHost::new())],
        DEFAULT_MAX_FRAME_BYTES,
    );
    peer.initialize().await;
    let session = peer.new_session().await;
    peer.notify("session/cancel", json!({"sessionId": session}))
        .await;
    let id = peer.prompt(&session, "go").await;
    let (reply, _) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
}
