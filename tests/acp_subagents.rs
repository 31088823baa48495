//! Subagents through `hookloop acp` end to end: the binary over stdio with subagents on, a
//! loopback model (streaming, Chat Completions shape) whose answers depend on which agent asks
//! (the first user message is the prompt, or a child's task), and the test MCP server as the
//! hook server, logging each hook call with its `_meta`.

mod acp_agent;
mod common;
mod loopback;

use acp_agent::{Agent, test_server};
use loopback::{FakeProvider, Reply, called, first_user_text};
use serde_json::{Value, json};

const PROMPT: &str = "Fix the bug.";
const TASK: &str = "Look for the bug and write a test.";
const CONTEXT: &str = "the code is in /srv";
const OBJECTION: &str = "the test is not written yet";
/// The child's answer, streamed in two pieces: the first is long enough to be shown alone.
const ANSWER: [&str; 2] = [
    "The cause is the parser, which drops the last line of a file when it has no newline at its end; ",
    "42, test written.",
];

/// The model: the parent starts one child and then answers with what it got; the child removes
/// a file (a destructive tool), ends early, and after the objection ends with its answer.
fn model(request: &Value) -> Reply {
    let text = request.to_string();
    if first_user_text(request) == PROMPT {
        return if called(request, "agent") {
            Reply::text("The subagent fixed it.")
        } else {
            Reply::tool(
                "agent",
                json!({"description": "Find the bug", "prompt": TASK}),
            )
        };
    }
    assert_eq!(
        first_user_text(request),
        TASK,
        "a request of no known agent"
    );
    let pause = std::time::Duration::from_millis(20);
    if text.contains(OBJECTION) {
        Reply::Stream(ANSWER.iter().map(|s| (*s).to_owned()).collect(), pause)
    } else if called(request, "todo__remove") {
        Reply::Stream(vec!["half ".into(), "done".into()], pause)
    } else {
        Reply::tool("todo__remove", json!({"path": "a"}))
    }
}

/// Runs the prompt, allowing each permission question once; the reply, the updates before it
/// and the questions asked.
async fn prompt_allowing(agent: &mut Agent, session: &str) -> (Value, Vec<Value>, Vec<Value>) {
    let id = agent.prompt(session, PROMPT).await;
    let (mut updates, mut questions) = (Vec::new(), Vec::new());
    loop {
        let frame = agent.read().await;
        if frame["id"] == json!(id) && frame.get("method").is_none() {
            return (frame, updates, questions);
        }
        match frame["method"].as_str() {
            Some("session/update") => updates.push(frame["params"]["update"].clone()),
            Some("session/request_permission") => {
                let answer = json!({"jsonrpc": "2.0", "id": frame["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}});
                agent.send_raw(&answer.to_string()).await;
                questions.push(frame["params"].clone());
            }
            _ => agent.backlog.push(frame),
        }
    }
}

/// The texts of an update's content blocks.
fn content(update: &Value) -> Vec<String> {
    update["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// The hook server: `_SubagentStart` gives the child [`CONTEXT`], `_SubagentStop` objects with
/// [`OBJECTION`], each call logged to `log`.
fn hook_server(log: &str) -> Value {
    test_server(
        "todo",
        &[
            ("TS_HOOKS", "_SubagentStart,_SubagentStop,_PreToolUse,_Stop"),
            ("TS_SUBAGENT_START", &format!("say:{CONTEXT}")),
            ("TS_SUBAGENT_STOP", &format!("say:{OBJECTION}")),
            ("TS_LOG", log),
        ],
    )
}

/// The updates about the call `id`: the `tool_call`s that show it and the `tool_call_update`s
/// that follow it.
fn about<'a>(updates: &'a [Value], id: &str) -> (Vec<&'a Value>, Vec<&'a Value>) {
    let of = |kind: &str| -> Vec<&Value> {
        updates
            .iter()
            .filter(|u| u["sessionUpdate"] == kind && u["toolCallId"] == id)
            .collect()
    };
    (of("tool_call"), of("tool_call_update"))
}

#[tokio::test]
async fn a_subagent_runs_under_its_call_with_its_own_hooks_through_the_client() {
    let scratch = common::Scratch::new("acp-subagents");
    let log = scratch.file("log");
    let provider = FakeProvider::start(model);
    let server = hook_server(&log);
    let (mut agent, session) =
        Agent::start(&provider, &[("HOOKLOOP_SUBAGENTS", "2")], json!([server])).await;
    let (reply, updates, questions) = prompt_allowing(&mut agent, &session).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");

    // `_SubagentStart`'s context reached the child's first request, never the parent's.
    let requests = provider.requests();
    let (parent, child): (Vec<&Value>, Vec<&Value>) =
        requests.iter().partition(|r| first_user_text(r) == PROMPT);
    assert_eq!((parent.len(), child.len()), (2, 3), "{requests:?}");
    assert!(child[0].to_string().contains(CONTEXT), "{}", child[0]);
    assert!(!parent.iter().any(|r| r.to_string().contains(CONTEXT)));
    // The objection continued the child; the parent saw its final text alone.
    assert!(child[2].to_string().contains(OBJECTION));
    let last = parent[1].to_string();
    assert!(last.contains(&ANSWER.concat()), "{last}");
    assert!(
        !last.contains("half done") && !last.contains(OBJECTION),
        "{last}"
    );

    // The child's destructive tool was asked about through the same client, as its own call,
    // and ran once allowed.
    assert_eq!(questions.len(), 1, "{questions:?}");
    let asked = &questions[0]["toolCall"];
    assert!(
        asked["toolCallId"]
            .as_str()
            .is_some_and(|id| id.starts_with("agent-1/")),
        "{asked}"
    );
    assert_eq!(asked["title"], "todo__remove (subagent agent-1)");
    assert_eq!(asked["_meta"]["hookloop/agent"]["id"], "agent-1");
    assert!(child[1].to_string().contains("removed"), "{}", child[1]);

    // Hooks inside the child carry it in `_meta`; the parent's do not.
    let lines = common::lines(&log);
    let meta_of = |hook: &str| -> Vec<Value> {
        lines
            .iter()
            .zip(lines.iter().skip(1))
            .filter(|(call, _)| *call == &format!("call {hook}"))
            .map(|(_, meta)| serde_json::from_str(meta.strip_prefix("meta ").unwrap()).unwrap())
            .collect()
    };
    let me = json!({"id": "agent-1", "parent": null});
    for hook in ["_SubagentStart", "_SubagentStop"] {
        let metas = meta_of(hook);
        assert_eq!(metas.len(), 1, "{hook}: {lines:?}");
        assert_eq!(metas[0]["hookloop/agent"], me, "{hook}");
    }
    let pre = meta_of("_PreToolUse");
    assert_eq!(
        pre.len(),
        2,
        "the parent's agent call, the child's remove: {pre:?}"
    );
    assert!(pre[0].get("hookloop/agent").is_none());
    assert_eq!(pre[1]["hookloop/agent"], me);
    let stop = meta_of("_Stop");
    assert_eq!(stop.len(), 1);
    assert!(stop[0].get("hookloop/agent").is_none());

    // The client saw the agent call as one think call, titled with its description, whose
    // content followed the child: its tool call, its text as it streamed, the objection, and
    // its answer at the end.
    let (calls, trail) = about(&updates, "agent-1");
    assert_eq!(calls.len(), 1, "{updates:?}");
    assert_eq!(calls[0]["kind"], "think");
    assert_eq!(calls[0]["title"], "Find the bug");
    let shown: Vec<Vec<String>> = trail.iter().map(|u| content(u)).collect();
    assert!(
        shown
            .iter()
            .any(|c| c.contains(&"✓ todo__remove: completed".to_owned())),
        "{shown:?}"
    );
    assert!(
        shown
            .iter()
            .any(|c| c.last() == Some(&ANSWER[0].to_owned())),
        "the first piece of the answer is shown before the whole: {shown:?}"
    );
    assert!(
        shown.iter().any(|c| c
            .iter()
            .any(|line| line.starts_with("⚑ _SubagentStop objection from todo"))),
        "{shown:?}"
    );
    let end = trail.last().expect("the call ends");
    assert_eq!(end["status"], "completed", "{end}");
    let end_content = content(end);
    assert_eq!(
        end_content.last(),
        Some(&ANSWER.concat()),
        "{end_content:?}"
    );
    assert!(
        end_content.contains(&"half done".to_owned()),
        "{end_content:?}"
    );
    // The child's calls are summarised under its call, never shown as calls of the session.
    assert!(
        !updates
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "todo__remove"),
        "{updates:?}"
    );
    // Nor is the child's text the parent's message.
    let said: String = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(said, "The subagent fixed it.");
    agent.close().await;
}

#[tokio::test]
async fn a_loaded_session_shows_a_past_agent_call_with_its_childs_trail_as_it_ended_live() {
    let scratch = common::Scratch::new("acp-subagents-load");
    let (log, records) = (scratch.file("log"), scratch.file("records"));
    let provider = FakeProvider::start(model);
    let env = [
        ("HOOKLOOP_SUBAGENTS", "2"),
        ("HOOKLOOP_RECORD_DIR", &records),
    ];
    let (mut agent, session) = Agent::start(&provider, &env, json!([hook_server(&log)])).await;
    let (reply, live, _) = prompt_allowing(&mut agent, &session).await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    agent.disconnect().await;

    // Another process loads the session: the history comes back before the answer.
    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let (loaded, params) = agent
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": std::env::temp_dir(),
                   "mcpServers": [hook_server(&log)]}),
        )
        .await;
    assert_eq!(loaded["result"], json!({}), "{loaded}");
    let replayed: Vec<Value> = params.iter().map(|p| p["update"].clone()).collect();

    // The call shows as it did live: one think call titled with its description, ended with
    // the child's whole trail (its tool call, its first reply, the objection, its answer last).
    let (live_calls, live_trail) = about(&live, "agent-1");
    let (calls, trail) = about(&replayed, "agent-1");
    assert_eq!(calls.len(), 1, "{replayed:?}");
    for key in ["kind", "title", "rawInput", "_meta"] {
        assert_eq!(calls[0][key], live_calls[0][key], "{key}");
    }
    let (live_end, end) = (
        live_trail.last().unwrap(),
        trail.last().expect("the call ends"),
    );
    assert_eq!(end["status"], "completed", "{end}");
    assert_eq!(end["rawOutput"], live_end["rawOutput"]);
    assert_eq!(
        content(end),
        content(live_end),
        "the trail as it ended live"
    );
    assert!(
        content(end).contains(&"✓ todo__remove: completed".to_owned()),
        "{end}"
    );
    // The child's calls and text stay in its trail, as they did live.
    assert!(
        !replayed
            .iter()
            .any(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "todo__remove"),
        "{replayed:?}"
    );
    let said: Vec<&str> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(said, ["The subagent fixed it."]);
    agent.close().await;
}
