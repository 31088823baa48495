//! Sessions: concurrency, close, the session limit, a failed setup, the end of input.

use super::*;

#[tokio::test]
async fn sessions_run_concurrently_and_independently() {
    let slow = session(
        config(),
        ScriptedLlm::new([Step::Hang]),
        InProcessHost::new(),
    );
    let fast = session(
        config(),
        ScriptedLlm::new([Step::text("quick")]),
        InProcessHost::new(),
    );
    let (mut peer, _) = start(vec![slow, fast], DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let a = peer.new_session().await;
    let b = peer.new_session().await;
    assert_ne!(a, b);
    let slow_id = peer.prompt(&a, "slow").await;
    let fast_id = peer.prompt(&b, "fast").await;
    let (reply, updates) = peer.reply(fast_id).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    assert!(updates.iter().all(|u| u["sessionId"] == json!(b)));
    peer.notify("session/cancel", json!({"sessionId": a})).await;
    let (reply, _) = peer.reply(slow_id).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled");
}

#[tokio::test]
async fn closing_a_session_cancels_its_prompt_frees_its_slot_and_forgets_it() {
    let busy = || {
        let llm = ScriptedLlm::new([Step::tools(1, &[("fs__read", json!({}))])]);
        let host = InProcessHost::new()
            .tool("fs", "read", echo)
            .tool_delay(Duration::from_secs(3600));
        session(config(), llm, host)
    };
    let options = AgentOptions {
        max_sessions: 1,
        ..AgentOptions::default()
    };
    let (mut peer, _) = start_with(vec![busy(), busy()], options, 1 << 16);
    peer.initialize().await;
    let first = peer.new_session().await;
    let prompt = peer.prompt(&first, "go").await;
    let (refused, _) = peer
        .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
        .await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");

    let close = peer
        .send_request("session/close", json!({"sessionId": first}))
        .await;
    let (reply, _) = peer.reply(prompt).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    let (reply, _) = peer.reply(close).await;
    assert_eq!(reply["result"], json!({}), "{reply}");

    // The slot is free again, and the closed session is gone.
    let second = peer.new_session().await;
    assert_ne!(second, first);
    let (reply, _) = peer
        .call(
            "session/prompt",
            json!({"sessionId": first, "prompt": [{"type": "text", "text": "x"}]}),
        )
        .await;
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown session"),
        "{reply}"
    );
    let (reply, _) = peer
        .call("session/close", json!({"sessionId": first}))
        .await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
}

#[tokio::test]
async fn over_the_session_limit_session_new_is_an_error_that_names_the_limit() {
    let sessions = (0..3)
        .map(|_| session(config(), ScriptedLlm::new([]), InProcessHost::new()))
        .collect();
    let options = AgentOptions {
        max_sessions: 2,
        ..AgentOptions::default()
    };
    let (mut peer, factory) = start_with(sessions, options, 1 << 16);
    peer.initialize().await;
    peer.new_session().await;
    peer.new_session().await;
    let (reply, _) = peer
        .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
        .await;
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("session limit") && message.contains("HOOKLOOP_MAX_SESSIONS"),
        "{message}"
    );
    // Refused before any server was started for it.
    assert_eq!(factory.specs.lock().unwrap().len(), 2);
}

#[test]
fn the_session_limit_is_read_from_its_variable_and_checked() {
    let lookup = |value: &'static str| {
        move |var: &str| Ok((var == AgentOptions::MAX_SESSIONS_VAR).then(|| value.to_owned()))
    };
    assert_eq!(
        AgentOptions::from_lookup(&lookup("5"))
            .unwrap()
            .max_sessions,
        5
    );
    assert_eq!(
        AgentOptions::from_lookup(&|_: &str| Ok(None))
            .unwrap()
            .max_sessions,
        32
    );
    for bad in ["0", "-1", "many"] {
        let err = AgentOptions::from_lookup(&lookup(bad)).unwrap_err();
        assert!(err.to_string().contains("HOOKLOOP_MAX_SESSIONS"), "{err}");
    }
}

#[tokio::test]
async fn a_failed_session_setup_is_an_error_reply() {
    let (mut peer, _) = start(Vec::new(), DEFAULT_MAX_FRAME_BYTES);
    peer.initialize().await;
    let (reply, _) = peer
        .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
        .await;
    assert_eq!(reply["error"]["code"], -32603);
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no more sessions")
    );
}

#[tokio::test]
async fn the_end_of_input_cancels_running_prompts_and_ends_the_agent() {
    let (mut peer, _) = start(
        vec![session(
            config(),
            ScriptedLlm::new([Step::Hang]),
            InProcessHost::new(),
        )],
        DEFAULT_MAX_FRAME_BYTES,
    );
    peer.initialize().await;
    let session = peer.new_session().await;
    peer.prompt(&session, "hang").await;
    peer.tx.shutdown().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), &mut peer.agent)
        .await
        .expect("the agent ends once its input does");
    ended.unwrap().unwrap();
}
