//! Frames from a hostile or slow client: bad JSON, oversize, not UTF-8, a client that stops reading.

use super::*;

#[tokio::test]
async fn bad_frames_get_errors_and_the_connection_survives() {
    let (mut peer, _) = start(Vec::new(), 1024);
    peer.send_raw("this is not json").await;
    let frame = peer.read().await;
    assert_eq!(frame["error"]["code"], -32700, "{frame}");

    let big = format!(
        r#"{{"jsonrpc":"2.0","id":77,"method":"session/prompt","params":{{"pad":"{}"}}}}"#,
        "x".repeat(4096)
    );
    peer.send_raw(&big).await;
    let frame = peer.read().await;
    assert_eq!(frame["id"], 77, "{frame}");
    assert_eq!(frame["error"]["code"], -32600);
    assert!(
        frame["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1024 byte limit")
    );

    // The protocol crate refuses every request before `initialize` has been answered.
    let (reply, _) = peer.call("no/such/method", json!({})).await;
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    let reply = peer.initialize().await;
    assert_eq!(reply["result"]["protocolVersion"], 1);

    let (reply, _) = peer.call("no/such/method", json!({})).await;
    assert_eq!(reply["error"]["code"], -32601, "{reply}");

    let (reply, _) = peer
        .call(
            "session/prompt",
            json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "x"}]}),
        )
        .await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown session")
    );

    let (reply, _) = peer.call("session/prompt", json!({"sessionId": 5})).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
}

#[tokio::test]
async fn an_oversized_frame_is_refused_while_a_prompt_runs_and_the_prompt_goes_on() {
    // The tool never ends on its own: the prompt is still running when the refusal comes.
    let llm = ScriptedLlm::new([Step::tools(1, &[("fs__read", json!({}))]), Step::text("ok")]);
    let host = InProcessHost::new()
        .tool("fs", "read", echo)
        .tool_delay(Duration::from_secs(3600));
    let (mut peer, _) = start(vec![session(config(), llm, host)], 2048);
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;
    peer.send_raw(&format!(r#"{{"id":"big","x":"{}"}}"#, "y".repeat(10_000)))
        .await;
    loop {
        let frame = peer.read().await;
        assert_ne!(frame["id"], json!(id), "the prompt ended first: {frame}");
        if frame["id"] == "big" {
            assert_eq!(frame["error"]["code"], -32600, "{frame}");
            break;
        }
    }
    // The prompt is unharmed: it is still running, and a cancel ends it as it should.
    peer.notify("session/cancel", json!({"sessionId": session}))
        .await;
    let (reply, updates) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    assert!(kinds(&updates).contains(&"tool_call_update:failed".to_owned()));
}

#[tokio::test]
async fn a_frame_that_is_not_utf8_is_a_parse_error_and_reaches_no_session() {
    let llm = ScriptedLlm::new([Step::text("ok")]);
    let (mut peer, _) = start(
        vec![session(config(), llm.clone(), InProcessHost::new())],
        DEFAULT_MAX_FRAME_BYTES,
    );
    peer.initialize().await;
    let session = peer.new_session().await;
    let frame = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"session/prompt","params":{{"sessionId":"{session}","prompt":[{{"type":"text","text":"caf"#
    );
    let mut bytes = frame.into_bytes();
    bytes.extend_from_slice(b"\xe9\"}]}}\n");
    peer.tx.write_all(&bytes).await.unwrap();
    let reply = peer.read().await;
    assert_eq!(reply["id"], 9, "{reply}");
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert!(
        llm.requests().is_empty(),
        "an altered prompt reached the model"
    );

    // The connection and the session go on.
    let id = peer.prompt(&session, "café").await;
    let (reply, _) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    assert_eq!(llm.requests().len(), 1);
}

// The clock is paused: it moves only when every task waits, so once the hour below has
// passed the session has done all it could; one merely slow would have gone on.
#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_holds_the_session_back_and_loses_no_frame() {
    const CALLS: usize = 20;
    let calls: Vec<(&str, Value)> = (0..CALLS).map(|i| ("fs__read", json!({"n": i}))).collect();
    let llm = ScriptedLlm::new([Step::tools(1, &calls), Step::text("done")]);
    let host = InProcessHost::new()
        .tool("fs", "read", echo)
        .tool_delay(Duration::from_millis(20));
    let options = AgentOptions {
        max_queued_frames: 4,
        ..AgentOptions::default()
    };
    // A pipe of 512 bytes: a few frames fill it.
    let (mut peer, _) = start_with(vec![session(config(), llm.clone(), host)], options, 512);
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;

    // Not reading: an hour later the tools are long done, but the session may not go on to
    // its next model request while its frames wait.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        llm.remaining(),
        1,
        "the session ran on while nothing was read"
    );

    let (reply, updates) = peer.reply(id).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(llm.remaining(), 0);
    // Every call's three updates arrived, none dropped.
    let kinds = kinds(&updates);
    for kind in [
        "tool_call:pending",
        "tool_call_update:in_progress",
        "tool_call_update:completed",
    ] {
        assert_eq!(
            kinds.iter().filter(|k| *k == kind).count(),
            CALLS,
            "{kinds:?}"
        );
    }
    assert_eq!(updates.last().unwrap()["update"]["content"]["text"], "done");
}
