//! Subagents through a full session: the driver runs each `agent` call as a child machine
//! through the session's model client and the rmcp host talking to a real hook server (the
//! `hookloop-test-server` binary). The model is scripted per agent: each request is answered
//! from the script of the task its first message holds, since children run at once and their
//! requests interleave.

mod common;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookloop::machine::{
    AgentId, CallId, Effect, FinishReason, Input, LlmReply, LlmRequest, Message, StopReason,
    Subagents, ToolCall,
};
use hookloop::ports::LlmError;
use hookloop::{Config, HookServers, LlmClient, Observer, PromptStop, Session};
use serde_json::{Value, json};

use common::{Scratch, connect, fast_options, lines, test_server};

/// One scripted answer: a reply, or a wait for the barrier first (every agent that waits on it
/// must have asked before any is answered), or no answer at all.
#[derive(Clone)]
enum Answer {
    Reply(LlmReply),
    AfterBarrier(LlmReply),
    Hang,
}

fn text(text: &str) -> Answer {
    Answer::Reply(LlmReply {
        text: text.into(),
        stop: StopReason::EndTurn,
        ..LlmReply::default()
    })
}

fn call(id: &str, name: &str, arguments: Value) -> Answer {
    Answer::Reply(LlmReply {
        tool_calls: vec![ToolCall {
            id: CallId(id.into()),
            name: name.into(),
            arguments,
        }],
        stop: StopReason::ToolUse,
        ..LlmReply::default()
    })
}

fn agents(tasks: &[&str]) -> Answer {
    Answer::Reply(LlmReply {
        tool_calls: tasks
            .iter()
            .enumerate()
            .map(|(i, task)| ToolCall {
                id: CallId(format!("m{i}")),
                name: "agent".into(),
                arguments: json!({"description": format!("task {task}"), "prompt": task}),
            })
            .collect(),
        stop: StopReason::ToolUse,
        ..LlmReply::default()
    })
}

/// A model whose answers are scripted per task (the text of a request's first message).
#[derive(Clone)]
struct PerTask {
    inner: Arc<Mutex<PerTaskInner>>,
    barrier: Arc<tokio::sync::Barrier>,
}

#[derive(Default)]
struct PerTaskInner {
    scripts: HashMap<String, VecDeque<Answer>>,
    /// Every request, by task, in the order they came.
    seen: Vec<(String, Vec<Message>)>,
}

impl PerTask {
    fn new(scripts: &[(&str, Vec<Answer>)], barrier: usize) -> Self {
        let scripts = scripts
            .iter()
            .map(|(task, answers)| ((*task).to_owned(), answers.iter().cloned().collect()))
            .collect();
        Self {
            inner: Arc::new(Mutex::new(PerTaskInner {
                scripts,
                seen: Vec::new(),
            })),
            barrier: Arc::new(tokio::sync::Barrier::new(barrier.max(1))),
        }
    }

    fn requests(&self, task: &str) -> Vec<Vec<Message>> {
        let inner = self.inner.lock().unwrap();
        inner
            .seen
            .iter()
            .filter(|(t, _)| t == task)
            .map(|(_, messages)| messages.clone())
            .collect()
    }
}

impl LlmClient for PerTask {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        let task = match request.messages.first() {
            Some(Message::User { text }) => text.clone(),
            other => panic!("a request that starts with {other:?}"),
        };
        let answer = {
            let mut inner = self.inner.lock().unwrap();
            inner.seen.push((task.clone(), request.messages.to_vec()));
            inner
                .scripts
                .get_mut(&task)
                .and_then(VecDeque::pop_front)
                .unwrap_or_else(|| panic!("script of {task} ran out"))
        };
        match answer {
            Answer::Reply(reply) => Ok(reply),
            Answer::AfterBarrier(reply) => {
                self.barrier.wait().await;
                Ok(reply)
            }
            Answer::Hang => std::future::pending().await,
        }
    }
}

/// What the observers saw of each subagent, in order.
#[derive(Clone, Default)]
struct AgentLog(Arc<Mutex<Vec<(AgentId, String)>>>);

impl AgentLog {
    fn of(&self, agent: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, _)| id.0 == agent)
            .map(|(_, what)| what.clone())
            .collect()
    }
}

impl Observer for AgentLog {
    fn on_agent_effect(&mut self, _at: Duration, agent: &AgentId, effect: &Effect) {
        let what = match effect {
            Effect::Finish { reason } => format!("finish {reason:?}"),
            Effect::CallHooks { hook, .. } => format!("hooks {hook}"),
            Effect::CallLlm { .. } => "llm".into(),
            Effect::CallTools { calls } => format!("tools {}", calls.len()),
            other => format!("{other:?}"),
        };
        self.0.lock().unwrap().push((agent.clone(), what));
    }

    fn on_agent_fact(&mut self, _at: Duration, agent: &AgentId, fact: &Input) {
        self.0
            .lock()
            .unwrap()
            .push((agent.clone(), format!("fact {}", fact.kind())));
    }
}

fn config(concurrency: u32) -> Config {
    Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_secs(5))
        .subagents(Subagents::new(concurrency))
        .build()
        .unwrap()
}

/// The result the parent's request carries for `call`.
fn result_of(messages: &[Message], call: &str) -> Option<(bool, String)> {
    messages.iter().find_map(|m| match m {
        Message::ToolResult { call_id, output } if call_id.0 == call => {
            Some((output.is_error, output.joined_text()))
        }
        _ => None,
    })
}

fn mentions(messages: &[Message], text: &str) -> bool {
    messages.iter().any(|m| format!("{m:?}").contains(text))
}

#[tokio::test]
async fn a_child_runs_with_its_own_hooks_and_the_parent_sees_only_its_final_text() {
    let dir = Scratch::new("subagent");
    let log = dir.file("log");
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_SubagentStart,_SubagentStop,_PreToolUse,_Stop"),
                ("TS_SUBAGENT_START", "say:the code is in /srv"),
                ("TS_SUBAGENT_STOP", "say:the test is not written yet"),
                ("TS_LOG", &log),
            ]),
        )],
        fast_options(),
    )
    .await;
    let llm = PerTask::new(
        &[
            (
                "go",
                vec![agents(&["find the code"]), text("the child says 42")],
            ),
            (
                "find the code",
                vec![
                    call("e1", "todo__echo", json!({"n": 1})),
                    text("half done"),
                    text("42, test written"),
                ],
            ),
        ],
        1,
    );
    let mut session = Session::new(config(2), llm.clone(), host);
    let seen = AgentLog::default();
    session.add_observer(seen.clone());
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);

    // `_SubagentStart`'s context reached the child's first request and never the parent's.
    let child = llm.requests("find the code");
    assert_eq!(child.len(), 3);
    assert!(mentions(&child[0], "the code is in /srv"), "{:?}", child[0]);
    let parent = llm.requests("go");
    assert_eq!(parent.len(), 2);
    assert!(!parent.iter().any(|r| mentions(r, "the code is in /srv")));
    // The objection continued the child; the parent got its final text alone.
    assert!(mentions(&child[2], "the test is not written yet"));
    assert_eq!(
        result_of(&parent[1], "agent-1"),
        Some((false, "42, test written".to_owned()))
    );
    assert!(!parent.iter().any(|r| mentions(r, "half done")));
    // Hooks inside the child carry it in `_meta`; the parent's `_Stop` does not.
    let lines = lines(&log);
    let meta_of = |hook: &str| -> Vec<Value> {
        lines
            .iter()
            .zip(lines.iter().skip(1))
            .filter(|(call, _)| *call == &format!("call {hook}"))
            .map(|(_, meta)| serde_json::from_str(meta.strip_prefix("meta ").unwrap()).unwrap())
            .collect()
    };
    let agent = json!({"id": "agent-1", "parent": null});
    let start = meta_of("_SubagentStart");
    assert_eq!(start.len(), 1, "{lines:?}");
    assert_eq!(start[0]["hookloop/agent"], agent);
    // `_PreToolUse` once for the parent's `agent` call, as at top level, once for the child's
    // echo, with the child in it.
    let pre = meta_of("_PreToolUse");
    assert_eq!(pre.len(), 2, "{pre:?}");
    assert!(pre[0].get("hookloop/agent").is_none());
    assert_eq!(pre[1]["hookloop/agent"], agent);
    let stop = meta_of("_SubagentStop");
    assert_eq!(stop.len(), 1, "asked once; the second end declined it");
    assert_eq!(stop[0]["hookloop/agent"], agent);
    let parent_stop = meta_of("_Stop");
    assert_eq!(parent_stop.len(), 1);
    assert!(parent_stop[0].get("hookloop/agent").is_none());
    // The observers saw the child's boundary under its id, ending with its finish.
    let child_seen = seen.of("agent-1");
    assert_eq!(child_seen[0], "fact catalog_changed");
    assert_eq!(child_seen[1], "fact prompted");
    assert!(child_seen.contains(&"hooks _SubagentStop".to_owned()));
    assert!(child_seen.contains(&format!("finish {:?}", FinishReason::EndTurn)));
}

#[tokio::test]
async fn two_children_of_one_reply_run_at_once() {
    let host = connect(vec![("todo", test_server(&[]))], fast_options()).await;
    let llm = PerTask::new(
        &[
            ("go", vec![agents(&["left", "right"]), text("both done")]),
            (
                "left",
                vec![Answer::AfterBarrier(text("left done").into_reply())],
            ),
            (
                "right",
                vec![Answer::AfterBarrier(text("right done").into_reply())],
            ),
        ],
        2,
    );
    let mut session = Session::new(config(2), llm.clone(), host);
    // Each child's request waits until the other's came: run one after the other, they would
    // wait for ever.
    let stop = tokio::time::timeout(Duration::from_secs(30), session.prompt("go"))
        .await
        .expect("the children ran at once");
    assert_eq!(stop.unwrap(), PromptStop::EndTurn);
    let parent = llm.requests("go");
    assert_eq!(
        result_of(&parent[1], "agent-1"),
        Some((false, "left done".to_owned()))
    );
    assert_eq!(
        result_of(&parent[1], "agent-2"),
        Some((false, "right done".to_owned()))
    );
}

#[tokio::test]
async fn cancelling_the_prompt_cancels_its_children_and_answers_each_call_once() {
    let host = connect(vec![("todo", test_server(&[]))], fast_options()).await;
    let llm = PerTask::new(
        &[
            ("go", vec![agents(&["stuck"]), text("after")]),
            ("stuck", vec![Answer::Hang]),
        ],
        1,
    );
    let mut session = Session::new(config(1), llm.clone(), host);
    let seen = AgentLog::default();
    session.add_observer(seen.clone());
    let cancel = session.cancel_handle();
    let waiter = {
        let llm = llm.clone();
        tokio::spawn(async move {
            while llm.requests("stuck").is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cancel.cancel();
        })
    };
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::Cancelled);
    waiter.await.unwrap();
    let answers: Vec<&Message> = session
        .history()
        .iter()
        .filter(|m| matches!(m, Message::ToolResult { call_id, .. } if call_id.0 == "agent-1"))
        .collect();
    assert_eq!(answers.len(), 1, "{:?}", session.history());
    assert_eq!(
        result_of(session.history(), "agent-1"),
        Some((true, "cancelled".to_owned()))
    );
    let child_seen = seen.of("agent-1");
    assert!(
        child_seen.contains(&"fact cancelled".to_owned()),
        "{child_seen:?}"
    );
    assert!(child_seen.contains(&format!("finish {:?}", FinishReason::Cancelled)));
}

impl Answer {
    fn into_reply(self) -> LlmReply {
        match self {
            Self::Reply(reply) | Self::AfterBarrier(reply) => reply,
            Self::Hang => LlmReply::default(),
        }
    }
}
