//! Permission requests over the wire, and the setting that turns them on.

use super::*;

/// Runs `prompt` on a fresh session, answering each permission request with `answer`
/// (an option id); returns the requests, the updates and the prompt's reply.
async fn prompt_answering(peer: &mut Peer, answer: &str) -> (Vec<Value>, Vec<Value>, Value) {
    peer.initialize().await;
    let session = peer.new_session().await;
    let id = peer.prompt(&session, "go").await;
    let (mut asked, mut updates) = (Vec::new(), Vec::new());
    loop {
        let frame = peer.read().await;
        if frame["method"] == "session/request_permission" {
            let reply = json!({"jsonrpc": "2.0", "id": frame["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": answer}}});
            peer.send_raw(&reply.to_string()).await;
            asked.push(frame["params"].clone());
        } else if frame["method"] == "session/update" {
            updates.push(frame["params"].clone());
        } else if frame["id"] == json!(id) {
            return (asked, updates, frame);
        }
    }
}

/// A session with a destructive `fs__rm`; `config` says whether it asks.
fn destructive_session(
    config: Config,
    llm: ScriptedLlm,
) -> (Session<ScriptedLlm, InProcessHost>, InProcessHost) {
    let host = InProcessHost::new()
        .tool("fs", "rm", echo)
        .tool("fs", "read", echo)
        .hints(
            "fs",
            "rm",
            crate::machine::ToolHints {
                destructive: Some(true),
                ..Default::default()
            },
        );
    (session(config, llm, host.clone()), host)
}

fn tools_run(host: &InProcessHost) -> Vec<String> {
    host.log()
        .into_iter()
        .filter_map(|e| match e {
            crate::testing::HostEvent::Tool { name, .. } => Some(name),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_destructive_tool_asks_first_and_always_reject_is_remembered_for_the_session() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__rm", json!({"path": "/"}))]),
        Step::tools(2, &[("fs__rm", json!({"path": "/tmp"}))]),
        Step::tools(3, &[("fs__read", json!({}))]),
        Step::text("done"),
    ]);
    let (session, host) = destructive_session(config(), llm.clone());
    let (mut peer, _) = start(vec![session], DEFAULT_MAX_FRAME_BYTES);
    let (asked, updates, reply) = prompt_answering(&mut peer, "reject_always").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    // Asked once: the second call of the same tool takes the standing answer.
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["toolCall"]["title"], "fs__rm");
    assert_eq!(asked[0]["toolCall"]["rawInput"], json!({"path": "/"}));
    let kinds: Vec<&str> = asked[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    // Neither call ran; each was answered with an error result, which the model saw.
    assert_eq!(tools_run(&host), ["fs__read"]);
    let failed = updates
        .iter()
        .filter(|u| u["update"]["status"] == "failed")
        .count();
    assert_eq!(failed, 2, "{updates:?}");
    let seen = format!("{:?}", llm.requests());
    assert!(
        seen.contains("the user rejected this call of fs__rm"),
        "{seen}"
    );
}

#[tokio::test]
async fn allow_once_runs_the_call_and_asks_again_next_time() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__rm", json!({}))]),
        Step::tools(2, &[("fs__rm", json!({}))]),
        Step::text("done"),
    ]);
    let (session, host) = destructive_session(config(), llm);
    let (mut peer, _) = start(vec![session], DEFAULT_MAX_FRAME_BYTES);
    let (asked, _, reply) = prompt_answering(&mut peer, "allow_once").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(asked.len(), 2);
    assert_eq!(tools_run(&host), ["fs__rm", "fs__rm"]);
}

#[tokio::test]
async fn with_permissions_off_destructive_tools_run_without_asking() {
    let llm = ScriptedLlm::new([Step::tools(1, &[("fs__rm", json!({}))]), Step::text("done")]);
    let (session, host) = destructive_session(config_without_asking(), llm);
    let options = AgentOptions {
        permissions: Permissions::Never,
        ..AgentOptions::default()
    };
    let (mut peer, factory) = start_with(vec![session], options, 1 << 16);
    let (asked, _, reply) = prompt_answering(&mut peer, "reject_once").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(asked.is_empty());
    assert_eq!(tools_run(&host), ["fs__rm"]);
    assert_eq!(
        factory.specs.lock().unwrap()[0].permissions,
        Permissions::Never
    );
}

#[test]
fn the_permission_setting_is_ask_or_never_and_anything_else_is_an_error() {
    let lookup = |value: &'static str| {
        move |var: &str| Ok((var == Permissions::VAR).then(|| value.to_owned()))
    };
    let read = |value| AgentOptions::from_lookup(&lookup(value)).map(|o| o.permissions);
    assert_eq!(AgentOptions::default().permissions, Permissions::Ask);
    assert_eq!(read("never").unwrap(), Permissions::Never);
    assert_eq!(read(" ask ").unwrap(), Permissions::Ask);
    let err = read("always").unwrap_err();
    assert!(
        err.to_string().contains("HOOKLOOP_ACP_PERMISSIONS"),
        "{err}"
    );
}
