//! Property tests of the pure machines with subagents: a top-level agent and the children its
//! `agent` calls start, driven to the end of one prompt by arbitrary model replies and hook
//! answers. Checked on every run: the bound on model requests the crate docs state, every call
//! (an `agent` call included) answered exactly once, no hook answer injected outside the agent
//! it was asked for, `_SubagentStop` never asked of the top-level agent and `_Stop` (or a
//! session's hooks) never of a child, and every hook call of a child naming it; and every
//! machine, each child's as well as the top-level agent's, under the shared invariants
//! (`hookloop::testing::Invariants`) on every fact it is fed.
//!
//! `PROPTEST_CASES` sets the number of cases.

use std::collections::{HashMap, VecDeque};

use hookloop::Hook;
use hookloop::hooks::{HookServers, ServerName};
use hookloop::machine::{
    AGENT_TOOL, AgentRef, CallId, Catalog, Effect, FinishReason, HookReply, Input, LlmReply,
    Machine, Message, Policy, ServerTools, StopReason, Subagents, ToolCall, ToolHints, ToolInfo,
    ToolOutput,
};
use hookloop::testing::Invariants;
use proptest::prelude::*;
use serde_json::json;

/// What the model does at one request.
#[derive(Clone, Debug)]
enum Reply {
    Text,
    /// A call of the server's tool.
    Tool,
    /// This many `agent` calls (some past the limit).
    Agents(usize),
    Fail,
    Cut,
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        3 => Just(Reply::Text),
        2 => Just(Reply::Tool),
        3 => (1..=3usize).prop_map(Reply::Agents),
        1 => Just(Reply::Fail),
        1 => Just(Reply::Cut),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    concurrency: u32,
    budget: u32,
    rounds: u32,
    replies: Vec<Reply>,
    /// Whether each hook answer says something, in the order asked.
    says: Vec<bool>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1..=3u32,
        0..=2u32,
        1..=4u32,
        prop::collection::vec(reply(), 1..40),
        prop::collection::vec(any::<bool>(), 1..60),
    )
        .prop_map(|(concurrency, budget, rounds, replies, says)| Case {
            concurrency,
            budget,
            rounds,
            replies,
            says,
        })
}

fn server() -> ServerName {
    ServerName::new("a").unwrap()
}

fn catalog() -> Catalog {
    let tool = |name: &str| ToolInfo {
        name: name.into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        hints: ToolHints::default(),
    };
    let mut tools = vec![tool("run")];
    tools.extend(Hook::EVERY.iter().map(|hook| tool(hook.tool_name())));
    Catalog {
        servers: vec![ServerTools {
            server: server(),
            tools,
        }],
    }
}

/// The scripted world, shared by every agent of the run.
struct World {
    replies: Vec<Reply>,
    says: Vec<bool>,
    at_reply: usize,
    at_say: usize,
    /// Model requests, every agent's.
    requests: u32,
    /// Children started.
    children: u32,
    /// Parent replies that called tools.
    tool_replies: u32,
    next_call: u32,
}

impl World {
    fn reply(&mut self) -> Reply {
        let reply = self.replies[self.at_reply % self.replies.len()].clone();
        self.at_reply += 1;
        reply
    }

    fn says(&mut self) -> bool {
        let says = self.says[self.at_say % self.says.len()];
        self.at_say += 1;
        says
    }

    fn call(&mut self, name: &str, arguments: serde_json::Value) -> ToolCall {
        self.next_call += 1;
        ToolCall {
            id: CallId(format!("m{}", self.next_call)),
            name: name.into(),
            arguments,
        }
    }
}

/// The marker an agent's hook answers carry: its id, or `top`.
fn marker(agent: Option<&AgentRef>) -> String {
    match agent {
        Some(agent) => format!("<{}>", agent.id),
        None => "<top>".into(),
    }
}

/// One agent's machine under the shared invariants: each fact it is fed is checked with every
/// order it gave, which then wait to be performed.
struct Checked {
    machine: Machine,
    invariants: Invariants,
    orders: VecDeque<Effect>,
}

impl Checked {
    fn new(machine: Machine) -> Self {
        Self {
            invariants: Invariants::new(machine.policy()),
            machine,
            orders: VecDeque::new(),
        }
    }

    fn agent(&self) -> Option<&AgentRef> {
        self.machine.agent()
    }
}

fn feed(agent: &mut Checked, fact: Input) {
    let before = agent.machine.phase();
    let history = agent.machine.history().to_vec();
    if let Err(error) = agent.machine.handle(fact.clone()) {
        panic!("the machine refused a fact of a well-behaved driver: {error}");
    }
    let effects: Vec<Effect> = std::iter::from_fn(|| agent.machine.poll_effect()).collect();
    if let Err(violation) =
        agent
            .invariants
            .check(before, &fact, &agent.machine, &effects, &history)
    {
        panic!(
            "{} broke a rule on {}: {violation}",
            marker(agent.agent()),
            fact.kind()
        );
    }
    agent.orders.extend(effects);
}

/// Drives `machine`'s prompt to its finish, children included; returns how it finished.
fn drive(machine: &mut Checked, world: &mut World) -> FinishReason {
    let me = machine.agent().cloned();
    let top = me.is_none();
    loop {
        let Some(effect) = machine.orders.pop_front() else {
            panic!("the machine stalled");
        };
        match effect {
            Effect::Notify { .. } | Effect::KillServer { .. } => {}
            Effect::Finish { reason } => return reason,
            Effect::AskPermission { call } => feed(
                machine,
                Input::PermissionDecided {
                    id: call.id,
                    decision: hookloop::machine::PermissionDecision::AllowOnce,
                },
            ),
            Effect::CallHooks {
                hook,
                servers,
                context,
                subjects,
                ..
            } => {
                match hook {
                    Hook::SubagentStop | Hook::SubagentStart => {
                        assert!(!top, "{hook} asked of the top-level agent");
                    }
                    Hook::Stop | Hook::SessionStart | Hook::UserPromptSubmit | Hook::SessionEnd => {
                        assert!(top, "{hook} asked of child {me:?}");
                    }
                    Hook::PreToolUse | Hook::PostToolUse | Hook::PreCompact | Hook::PostCompact => {
                    }
                    other => panic!("a hook this test does not know: {other}"),
                }
                assert_eq!(context.agent, me, "a hook call names the agent asking");
                let count = subjects.len().max(1);
                for subject in 0..count {
                    for server in &servers {
                        let text = if world.says() {
                            format!("{} {hook}", marker(me.as_ref()))
                        } else {
                            String::new()
                        };
                        feed(
                            machine,
                            Input::HookAnswered {
                                server: server.clone(),
                                hook,
                                reply: HookReply::Text { text },
                                subject: (!subjects.is_empty()).then_some(subject as u32),
                            },
                        );
                    }
                }
            }
            Effect::CallLlm { .. } => {
                world.requests += 1;
                let fact = match world.reply() {
                    Reply::Text => reply_of("said", Vec::new(), StopReason::EndTurn),
                    Reply::Cut => reply_of("cut", Vec::new(), StopReason::MaxTokens),
                    Reply::Fail => Input::LlmFailed {
                        error: "down".into(),
                    },
                    Reply::Tool => {
                        let call = world.call("a__run", json!({}));
                        reply_of("", vec![call], StopReason::ToolUse)
                    }
                    Reply::Agents(n) => {
                        let calls = (0..n)
                            .map(|i| {
                                world.call(
                                    AGENT_TOOL,
                                    json!({"description": "d", "prompt": format!("task {i}")}),
                                )
                            })
                            .collect();
                        reply_of("", calls, StopReason::ToolUse)
                    }
                };
                feed(machine, fact);
            }
            Effect::CallTools { calls } => {
                if top {
                    world.tool_replies += 1;
                }
                for call in calls {
                    let output = match machine.machine.spawn_child(&call) {
                        Some(child) => {
                            let mut child = Checked::new(child);
                            world.children += 1;
                            feed(&mut child, Input::CatalogChanged { catalog: catalog() });
                            let task = child.machine.agent_task().unwrap().to_owned();
                            feed(&mut child, Input::Prompted { text: task });
                            let reason = drive(&mut child, world);
                            check_history(&child.machine);
                            let output = child.machine.agent_result().unwrap().clone();
                            // A subagent's end is its session's end.
                            feed(&mut child, Input::Closed);
                            assert_eq!(
                                output.is_error,
                                reason != FinishReason::EndTurn,
                                "an error result exactly when the child did not finish its turn"
                            );
                            output
                        }
                        None => {
                            assert_ne!(call.name, AGENT_TOOL, "a run agent call starts a child");
                            ToolOutput::text("ran")
                        }
                    };
                    feed(
                        machine,
                        Input::ToolFinished {
                            id: call.id,
                            output,
                        },
                    );
                }
            }
        }
    }
}

fn reply_of(text: &str, tool_calls: Vec<ToolCall>, stop: StopReason) -> Input {
    Input::LlmReplied {
        reply: LlmReply {
            text: text.into(),
            tool_calls,
            stop,
            usage: None,
        },
    }
}

/// Every call of `machine`'s history answered exactly once, and every hook answer in it its
/// own agent's.
fn check_history(machine: &Machine) {
    let mine = marker(machine.agent());
    let mut answers: HashMap<&CallId, usize> = HashMap::new();
    let mut calls = Vec::new();
    for message in machine.history() {
        match message {
            Message::Assistant { tool_calls, .. } => calls.extend(tool_calls.iter().map(|c| &c.id)),
            Message::ToolResult { call_id, output } => {
                *answers.entry(call_id).or_default() += 1;
                let text = output.joined_text();
                if text.contains("\"hook\"") {
                    assert!(
                        text.contains(&mine),
                        "{mine} holds another agent's hook answer: {text}"
                    );
                }
            }
            Message::User { .. } => {}
        }
    }
    for id in &calls {
        assert_eq!(answers.get(id), Some(&1), "call {id} answered once");
    }
    assert_eq!(answers.len(), calls.len(), "no result without its call");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    })]

    #[test]
    fn subagents_keep_every_rule_and_the_bound(case in case()) {
        let policy = Policy {
            hook_servers: HookServers::All,
            stop_max_rejections: case.budget,
            max_rounds: case.rounds,
            subagents: Some(Subagents::new(case.concurrency)),
            ..Policy::default()
        };
        let mut top = Checked::new(Machine::new(policy, None));
        feed(&mut top, Input::CatalogChanged { catalog: catalog() });
        feed(&mut top, Input::Prompted { text: "go".into() });
        let mut world = World {
            replies: case.replies.clone(),
            says: case.says.clone(),
            at_reply: 0,
            at_say: 0,
            requests: 0,
            children: 0,
            tool_replies: 0,
            next_call: 0,
        };
        drive(&mut top, &mut world);
        check_history(&top.machine);
        // The bound of the crate docs at depth 1 (no compaction in this context): each agent
        // makes at most R requests, and a prompt starts at most N children per reply with
        // tool calls.
        let (r, n) = (case.rounds, case.concurrency);
        prop_assert!(world.children <= n * world.tool_replies);
        prop_assert!(world.tool_replies <= r);
        prop_assert!(
            world.requests <= r + r * n * r,
            "{} requests over the bound {}",
            world.requests,
            r + r * n * r
        );
    }
}
