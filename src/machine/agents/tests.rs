//! The subagent rules, one test each, named after the rule.

use serde_json::{Value, json};

use super::super::*;
use super::{agent_limit_text, agent_total_text};
use crate::hooks::HookServers;

fn server() -> ServerName {
    ServerName::new("a").unwrap()
}

/// Server `a`: a tool `run` and every hook.
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

fn policy(subagents: Option<Subagents>) -> Policy {
    Policy {
        hook_servers: HookServers::All,
        subagents,
        ..Policy::default()
    }
}

fn on() -> Option<Subagents> {
    Some(Subagents::new(2))
}

fn machine(policy: Policy) -> Machine {
    let mut m = Machine::new(policy, Some("system".into()));
    feed(&mut m, Input::CatalogChanged { catalog: catalog() });
    m
}

fn drain(m: &mut Machine) -> Vec<Effect> {
    std::iter::from_fn(|| m.poll_effect()).collect()
}

fn feed(m: &mut Machine, input: Input) -> Vec<Effect> {
    m.handle(input).unwrap();
    drain(m)
}

fn say(hook: Hook, text: &str, subject: Option<u32>) -> Input {
    Input::HookAnswered {
        server: server(),
        hook,
        reply: HookReply::Text { text: text.into() },
        subject,
    }
}

fn reply(text: &str) -> Input {
    Input::LlmReplied {
        reply: LlmReply {
            text: text.into(),
            ..LlmReply::default()
        },
    }
}

fn calls(calls: &[(&str, Value)]) -> Input {
    let tool_calls = calls
        .iter()
        .enumerate()
        .map(|(i, (name, arguments))| ToolCall {
            id: CallId(format!("m{i}")),
            name: (*name).into(),
            arguments: arguments.clone(),
        })
        .collect();
    Input::LlmReplied {
        reply: LlmReply {
            tool_calls,
            stop: StopReason::ToolUse,
            ..LlmReply::default()
        },
    }
}

fn task(prompt: &str) -> Value {
    json!({"description": "look", "prompt": prompt})
}

/// The hook rounds ordered, with their subjects and context.
fn rounds(effects: &[Effect]) -> Vec<(Hook, Vec<Value>, HookContext)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::CallHooks {
                hook,
                subjects,
                context,
                ..
            } => Some((*hook, subjects.clone(), context.clone())),
            _ => None,
        })
        .collect()
}

fn only_round(effects: &[Effect]) -> (Hook, Vec<Value>, HookContext) {
    let mut all = rounds(effects);
    assert_eq!(all.len(), 1, "one hook round in {effects:?}");
    all.remove(0)
}

fn asks_model(effects: &[Effect]) -> bool {
    effects.iter().any(|e| {
        matches!(
            e,
            Effect::CallLlm {
                purpose: Purpose::Turn,
                ..
            }
        )
    })
}

fn finished(effects: &[Effect]) -> Option<FinishReason> {
    effects.iter().find_map(|e| match e {
        Effect::Finish { reason } => Some(reason.clone()),
        _ => None,
    })
}

fn tool_calls(effects: &[Effect]) -> Vec<ToolCall> {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::CallTools { calls } => Some(calls.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// A parent prompted past its `_SessionStart` and `_UserPromptSubmit`, which has just called
/// `agent` once per prompt in `prompts` and had `_PreToolUse` allow them: the order that runs
/// the calls, and the parent.
fn parent_calling(policy: Policy, prompts: &[&str]) -> (Machine, Vec<ToolCall>) {
    let mut m = machine(policy);
    feed(&mut m, Input::Prompted { text: "go".into() });
    feed(&mut m, say(Hook::SessionStart, "", None));
    let effects = feed(&mut m, say(Hook::UserPromptSubmit, "", Some(0)));
    assert!(asks_model(&effects));
    let list: Vec<(&str, Value)> = prompts.iter().map(|p| (AGENT_TOOL, task(p))).collect();
    let effects = feed(&mut m, calls(&list));
    let (hook, subjects, _) = only_round(&effects);
    assert_eq!(hook, Hook::PreToolUse);
    let mut effects = Vec::new();
    for subject in 0..subjects.len() {
        effects = feed(&mut m, say(Hook::PreToolUse, "", Some(subject as u32)));
    }
    let calls = tool_calls(&effects);
    (m, calls)
}

/// A child of `parent` for `call`, given the catalog and its task, with `_SubagentStart`
/// answered `start`: the orders that follow.
fn start_child(parent: &Machine, call: &ToolCall, start: &str) -> (Machine, Vec<Effect>) {
    let mut child = parent
        .spawn_child(call)
        .expect("an agent call starts a child");
    feed(&mut child, Input::CatalogChanged { catalog: catalog() });
    let text = child.agent_task().unwrap().to_owned();
    let effects = feed(&mut child, Input::Prompted { text });
    let (hook, _, _) = only_round(&effects);
    assert_eq!(hook, Hook::SubagentStart);
    let effects = feed(&mut child, say(Hook::SubagentStart, start, Some(0)));
    (child, effects)
}

fn offers_agent(m: &Machine) -> bool {
    m.model_tools().iter().any(|tool| tool.name == AGENT_TOOL)
}

#[test]
fn the_agent_tool_is_offered_only_when_configured_and_below_the_depth_limit() {
    assert!(!offers_agent(&machine(policy(None))));
    assert!(offers_agent(&machine(policy(on()))));
    // Depth 1 (the default): a child is not offered `agent`.
    let (parent, calls) = parent_calling(policy(on()), &["find x"]);
    let (child, _) = start_child(&parent, &calls[0], "");
    assert!(!offers_agent(&child));
    // Depth 2: it is, and its own child is not.
    let deep = Some(Subagents {
        concurrency: 2,
        max_depth: 2,
        max_total: Subagents::DEFAULT_MAX_TOTAL,
    });
    let (parent, calls) = parent_calling(policy(deep), &["find x"]);
    let (mut child, effects) = start_child(&parent, &calls[0], "");
    assert!(offers_agent(&child));
    assert!(asks_model(&effects));
    let effects = feed(&mut child, calls_one(AGENT_TOOL, task("deeper")));
    let effects = allow_pre_tool_use(&mut child, &effects);
    let grandchild_call = &tool_calls(&effects)[0];
    let (grandchild, _) = start_child(&child, grandchild_call, "");
    assert!(!offers_agent(&grandchild));
}

fn calls_one(name: &str, arguments: Value) -> Input {
    calls(&[(name, arguments)])
}

fn allow_pre_tool_use(m: &mut Machine, effects: &[Effect]) -> Vec<Effect> {
    let (hook, subjects, _) = only_round(effects);
    assert_eq!(hook, Hook::PreToolUse);
    let mut effects = Vec::new();
    for subject in 0..subjects.len() {
        effects = feed(m, say(Hook::PreToolUse, "", Some(subject as u32)));
    }
    effects
}

#[test]
fn agent_ids_are_unique_in_the_session_and_hooks_carry_the_agent_and_its_parent() {
    let deep = Some(Subagents {
        concurrency: 2,
        max_depth: 2,
        max_total: Subagents::DEFAULT_MAX_TOTAL,
    });
    let (parent, calls) = parent_calling(policy(deep), &["one", "two"]);
    let ids: Vec<&str> = calls.iter().map(|c| c.id.0.as_str()).collect();
    assert_eq!(
        ids,
        ["agent-1", "agent-2"],
        "the model's ids m0, m1 are replaced"
    );
    let (mut child, _) = start_child(&parent, &calls[1], "");
    let effects = feed(&mut child, calls_one(AGENT_TOOL, task("deeper")));
    let (_, _, context) = only_round(&effects);
    assert_eq!(
        context.agent,
        Some(AgentRef {
            id: AgentId("agent-2".into()),
            parent: None
        })
    );
    let effects = allow_pre_tool_use(&mut child, &effects);
    let grandchild_call = &tool_calls(&effects)[0];
    assert_eq!(grandchild_call.id.0, "agent-2.1");
    let (grandchild, _) = start_child(&child, grandchild_call, "");
    assert_eq!(
        grandchild.agent(),
        Some(&AgentRef {
            id: AgentId("agent-2.1".into()),
            parent: Some(AgentId("agent-2".into())),
        })
    );
    // Each is started with the prompt of its own call; the top-level agent has no task.
    assert_eq!(parent.agent_task(), None);
    assert_eq!(child.agent_task(), Some("two"));
    assert_eq!(grandchild.agent_task(), Some("deeper"));
}

#[test]
fn subagent_start_is_asked_before_the_childs_first_request_and_its_text_is_context() {
    let (parent, calls) = parent_calling(policy(on()), &["find x"]);
    let mut child = parent.spawn_child(&calls[0]).unwrap();
    feed(&mut child, Input::CatalogChanged { catalog: catalog() });
    let effects = feed(
        &mut child,
        Input::Prompted {
            text: "find x".into(),
        },
    );
    assert!(
        !asks_model(&effects),
        "no request before _SubagentStart answers"
    );
    let (hook, subjects, context) = only_round(&effects);
    assert_eq!(hook, Hook::SubagentStart);
    assert_eq!(
        subjects,
        [json!({"agent": "agent-1", "description": "look", "prompt": "find x"})]
    );
    assert_eq!(context.agent.unwrap().id.0, "agent-1");
    let effects = feed(
        &mut child,
        say(Hook::SubagentStart, "x lives in /srv", Some(0)),
    );
    assert!(asks_model(&effects));
    let request = child.request(Purpose::Turn);
    assert_eq!(request.messages[0], Message::user("find x"));
    let Message::ToolResult { output, .. } = &request.messages[2] else {
        panic!(
            "the answer follows the task as a hook pair: {:?}",
            request.messages
        );
    };
    assert_eq!(
        output.joined_text(),
        r#"{"hook":"_SubagentStart","server":"a","text":"x lives in /srv"}"#
    );
    // The parent's history holds none of it.
    assert!(
        !parent
            .history()
            .iter()
            .any(|m| format!("{m:?}").contains("x lives in /srv"))
    );
}

#[test]
fn a_child_is_never_asked_session_start_user_prompt_submit_or_session_end() {
    let (parent, calls) = parent_calling(policy(on()), &["find x"]);
    let (mut child, effects) = start_child(&parent, &calls[0], "");
    assert!(asks_model(&effects));
    let effects = feed(&mut child, reply("found"));
    let (hook, _, _) = only_round(&effects);
    assert_eq!(hook, Hook::SubagentStop);
    let effects = feed(&mut child, say(Hook::SubagentStop, "", Some(0)));
    assert_eq!(finished(&effects), Some(FinishReason::EndTurn));
    let effects = feed(&mut child, Input::Closed);
    assert!(rounds(&effects).is_empty(), "no _SessionEnd: {effects:?}");
    assert_eq!(child.phase(), Phase::Done);
}

#[test]
fn a_child_is_asked_subagent_stop_in_place_of_stop_and_an_objection_continues_it() {
    let (parent, calls) = parent_calling(policy(on()), &["find x"]);
    let (mut child, _) = start_child(&parent, &calls[0], "");
    let effects = feed(&mut child, reply("half done"));
    let (hook, subjects, context) = only_round(&effects);
    assert_eq!(hook, Hook::SubagentStop);
    assert_eq!(
        subjects,
        [json!({"agent": "agent-1", "result": "half done"})]
    );
    assert_eq!(context.budget_left, Policy::DEFAULT_STOP_MAX_REJECTIONS);
    let effects = feed(
        &mut child,
        say(Hook::SubagentStop, "y is still open", Some(0)),
    );
    assert!(asks_model(&effects), "the objection continues the child");
    assert_eq!(child.counters().objections, 1);
    assert!(matches!(
        effects.iter().find(|e| matches!(e, Effect::Notify { .. })),
        Some(Effect::Notify {
            notice: Notice::Objection { .. }
        })
    ));
    // Ending again right after an objection: it heard and declined; not asked again.
    let effects = feed(&mut child, reply("all done"));
    assert!(rounds(&effects).is_empty());
    assert_eq!(finished(&effects), Some(FinishReason::EndTurn));
    assert_eq!(
        child.agent_result(),
        Some(&ToolOutput::text("all done")),
        "the result is the final text alone"
    );
    assert_eq!(
        parent.counters().objections,
        0,
        "the parent's budget is its own"
    );
}

#[test]
fn a_childs_subagent_stop_budget_is_its_own() {
    let mut with_budget = policy(on());
    with_budget.stop_max_rejections = 1;
    let (parent, calls) = parent_calling(with_budget, &["one", "two"]);
    for call in &calls {
        let (mut child, _) = start_child(&parent, call, "");
        feed(&mut child, reply("a"));
        let effects = feed(&mut child, say(Hook::SubagentStop, "more", Some(0)));
        assert!(asks_model(&effects), "each child gets its own objection");
        // A tool call clears the consecutive-end latch; the budget is then spent.
        let effects = feed(&mut child, calls_one("a__run", json!({})));
        let effects = allow_pre_tool_use(&mut child, &effects);
        let id = tool_calls(&effects)[0].id.clone();
        let effects = feed(
            &mut child,
            Input::ToolFinished {
                id,
                output: ToolOutput::text("ok"),
            },
        );
        let (hook, _, _) = only_round(&effects);
        assert_eq!(hook, Hook::PostToolUse);
        feed(&mut child, say(Hook::PostToolUse, "", Some(0)));
        let effects = feed(&mut child, reply("b"));
        assert!(rounds(&effects).is_empty(), "budget spent: not asked");
        assert!(effects.contains(&Effect::Notify {
            notice: Notice::StopSkipped {
                reason: SkipReason::BudgetSpent
            }
        }));
        assert_eq!(finished(&effects), Some(FinishReason::EndTurn));
    }
}

#[test]
fn the_top_level_agent_is_asked_stop_and_never_subagent_stop() {
    let mut m = machine(policy(on()));
    feed(&mut m, Input::Prompted { text: "go".into() });
    feed(&mut m, say(Hook::SessionStart, "", None));
    feed(&mut m, say(Hook::UserPromptSubmit, "", Some(0)));
    let effects = feed(&mut m, reply("done"));
    let (hook, subjects, context) = only_round(&effects);
    assert_eq!(hook, Hook::Stop);
    assert!(subjects.is_empty());
    assert_eq!(context.agent, None);
}

#[test]
fn tool_hooks_fire_inside_a_child_as_at_top_level_with_its_agent_in_the_context() {
    let (parent, calls) = parent_calling(policy(on()), &["find x"]);
    let (mut child, _) = start_child(&parent, &calls[0], "");
    let effects = feed(&mut child, calls_one("a__run", json!({"n": 1})));
    let (hook, subjects, context) = only_round(&effects);
    assert_eq!(hook, Hook::PreToolUse);
    assert_eq!(subjects, [json!({"tool": "a__run", "arguments": {"n": 1}})]);
    assert_eq!(context.agent.as_ref().unwrap().id.0, "agent-1");
    // A denial works as at top level: the call never runs, and gets an error result.
    let effects = feed(&mut child, say(Hook::PreToolUse, "not here", Some(0)));
    assert!(tool_calls(&effects).is_empty());
    assert!(asks_model(&effects));
    assert!(child.history().iter().any(|m| matches!(
        m,
        Message::ToolResult { output, .. } if output.is_error
            && output.joined_text().contains("not here")
    )));
    let effects = feed(&mut child, calls_one("a__run", json!({})));
    let effects = allow_pre_tool_use(&mut child, &effects);
    let id = tool_calls(&effects)[0].id.clone();
    let effects = feed(
        &mut child,
        Input::ToolFinished {
            id,
            output: ToolOutput::text("ok"),
        },
    );
    let (hook, _, context) = only_round(&effects);
    assert_eq!(hook, Hook::PostToolUse);
    assert_eq!(context.agent.unwrap().id.0, "agent-1");
}

#[test]
fn compaction_hooks_fire_inside_a_child_with_its_agent_in_the_context() {
    let mut small = policy(on());
    small.max_context_tokens = 2_000;
    small.max_output_tokens = 500;
    let (parent, calls) = parent_calling(small, &["find x"]);
    let (mut child, _) = start_child(&parent, &calls[0], "");
    let effects = feed(&mut child, calls_one("a__run", json!({})));
    let effects = allow_pre_tool_use(&mut child, &effects);
    let id = tool_calls(&effects)[0].id.clone();
    feed(
        &mut child,
        Input::ToolFinished {
            id,
            output: ToolOutput::text("x".repeat(8_000)),
        },
    );
    let effects = feed(&mut child, say(Hook::PostToolUse, "", Some(0)));
    let (hook, _, context) = only_round(&effects);
    assert_eq!(hook, Hook::PreCompact);
    assert_eq!(context.agent.as_ref().unwrap().id.0, "agent-1");
    assert_eq!(context.compactions, 1);
    let effects = feed(&mut child, say(Hook::PreCompact, "", None));
    assert!(matches!(
        effects.last(),
        Some(Effect::CallLlm {
            purpose: Purpose::Summary { .. },
            ..
        })
    ));
    let effects = feed(&mut child, reply("we ran a"));
    let (hook, _, context) = only_round(&effects);
    assert_eq!(hook, Hook::PostCompact);
    assert_eq!(context.agent.unwrap().id.0, "agent-1");
    assert_eq!(parent.counters().compactions, 0);
}

#[test]
fn a_childs_end_is_its_calls_result_and_an_error_says_why_it_did_not_finish() {
    let mut capped = policy(on());
    capped.max_rounds = 1;
    let (parent, calls) = parent_calling(capped, &["find x"]);
    // Out of rounds: its one request made, a tool call's result cannot be sent.
    let (mut child, _) = start_child(&parent, &calls[0], "");
    let effects = feed(&mut child, calls_one("a__run", json!({})));
    let effects = allow_pre_tool_use(&mut child, &effects);
    let id = tool_calls(&effects)[0].id.clone();
    feed(
        &mut child,
        Input::ToolFinished {
            id,
            output: ToolOutput::text("ok"),
        },
    );
    let effects = feed(&mut child, say(Hook::PostToolUse, "", Some(0)));
    assert_eq!(finished(&effects), Some(FinishReason::MaxTurnRequests));
    let result = child.agent_result().unwrap();
    assert!(result.is_error);
    assert!(
        result.joined_text().contains("ran out of rounds"),
        "{result:?}"
    );
    // Failed.
    let (mut child, _) = start_child(&parent, &calls[0], "");
    feed(
        &mut child,
        Input::LlmFailed {
            error: "503".into(),
        },
    );
    let result = child.agent_result().unwrap();
    assert!(result.is_error);
    assert_eq!(result.joined_text(), "the subagent failed: 503");
    // Cancelled.
    let (mut child, _) = start_child(&parent, &calls[0], "");
    feed(&mut child, Input::Cancelled);
    let result = child.agent_result().unwrap();
    assert!(result.is_error);
    assert_eq!(result.joined_text(), "the subagent was cancelled");
    // The parent takes the result as the call's, like any tool's.
    let mut parent = parent;
    let (mut child, _) = start_child(&parent, &calls[0], "");
    feed(&mut child, reply("x is 4"));
    feed(&mut child, say(Hook::SubagentStop, "", Some(0)));
    let output = child.agent_result().unwrap().clone();
    let effects = feed(
        &mut parent,
        Input::ToolFinished {
            id: calls[0].id.clone(),
            output,
        },
    );
    let (hook, _, context) = only_round(&effects);
    assert_eq!(hook, Hook::PostToolUse);
    assert_eq!(context.agent, None);
    assert!(parent.history().iter().any(|m| matches!(
        m,
        Message::ToolResult { call_id, output } if *call_id == calls[0].id
            && output.joined_text() == "x is 4"
    )));
}

#[test]
fn agent_calls_past_the_concurrency_limit_are_answered_with_an_error_and_never_run() {
    let (mut parent, calls) = parent_calling(policy(on()), &["one", "two", "three"]);
    assert_eq!(calls.len(), 2, "two of three run: {calls:?}");
    for call in &calls {
        feed(
            &mut parent,
            Input::ToolFinished {
                id: call.id.clone(),
                output: ToolOutput::text("ok"),
            },
        );
    }
    let refused = parent.history().iter().find_map(|m| match m {
        Message::ToolResult { call_id, output } if output.is_error => {
            Some((call_id.clone(), output.clone()))
        }
        _ => None,
    });
    let (id, output) = refused.expect("the third is answered, unrun");
    assert_eq!(id.0, "agent-3");
    assert!(output.is_error);
    // The words the model reads, spelled out: comparing with `agent_limit_text` alone would
    // pass whatever it said.
    let text = "not run: at most 2 agent calls of one reply run; call it again later";
    assert_eq!(output.joined_text(), text);
    assert_eq!(agent_limit_text(2), text);
}

/// Answers every call of `calls` "ok", then the hook round that follows; the orders after it.
fn finish_calls(m: &mut Machine, calls: &[ToolCall]) -> Vec<Effect> {
    let mut effects = Vec::new();
    for call in calls {
        effects = feed(
            m,
            Input::ToolFinished {
                id: call.id.clone(),
                output: ToolOutput::text("ok"),
            },
        );
    }
    for (hook, subjects, _) in rounds(&effects) {
        for subject in 0..subjects.len() {
            effects = feed(m, say(hook, "", Some(subject as u32)));
        }
    }
    effects
}

/// The error results of `m`'s history, in order.
fn error_results(m: &Machine) -> Vec<String> {
    m.history()
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { output, .. } if output.is_error => Some(output.joined_text()),
            _ => None,
        })
        .collect()
}

#[test]
fn agent_calls_past_the_sessions_total_are_answered_with_an_error_over_every_prompt() {
    let total = Some(Subagents {
        max_total: 3,
        ..Subagents::new(2)
    });
    // No bound on a prompt's requests: the total alone ends the subagents.
    let unbounded = Policy {
        max_rounds: 0,
        ..policy(total)
    };
    let (mut m, first) = parent_calling(unbounded, &["one", "two"]);
    assert_eq!(first.len(), 2);
    let effects = finish_calls(&mut m, &first);
    assert!(asks_model(&effects));
    let effects = feed(
        &mut m,
        calls(&[(AGENT_TOOL, task("three")), (AGENT_TOOL, task("four"))]),
    );
    let effects = allow_pre_tool_use(&mut m, &effects);
    let third = tool_calls(&effects);
    assert_eq!(third.len(), 1, "the third runs, the fourth not: {third:?}");
    let effects = finish_calls(&mut m, &third);
    assert!(asks_model(&effects));
    let text = "not run: this session has started its 3 subagents, the most it may; do the rest \
without agent";
    assert_eq!(error_results(&m), [text]);
    assert_eq!(agent_total_text(3), text);
    // The total is the session's: a new prompt does not start it over.
    let effects = feed(&mut m, reply("done"));
    let (hook, _, _) = only_round(&effects);
    assert_eq!(hook, Hook::Stop);
    let effects = feed(&mut m, say(Hook::Stop, "", None));
    assert!(finished(&effects).is_some(), "{effects:?}");
    feed(
        &mut m,
        Input::Prompted {
            text: "again".into(),
        },
    );
    let effects = feed(&mut m, say(Hook::UserPromptSubmit, "", Some(0)));
    assert!(asks_model(&effects));
    let effects = feed(&mut m, calls_one(AGENT_TOOL, task("five")));
    assert!(rounds(&effects).is_empty(), "nothing to gate");
    assert!(asks_model(&effects));
    assert_eq!(error_results(&m), [text, text]);
}

#[test]
fn agent_calls_with_bad_arguments_are_answered_with_an_error_and_start_nothing() {
    let mut m = machine(policy(on()));
    feed(&mut m, Input::Prompted { text: "go".into() });
    feed(&mut m, say(Hook::SessionStart, "", None));
    feed(&mut m, say(Hook::UserPromptSubmit, "", Some(0)));
    let effects = feed(
        &mut m,
        calls(&[
            (AGENT_TOOL, json!({"prompt": "no description"})),
            (AGENT_TOOL, json!({"description": "d", "prompt": "  "})),
        ]),
    );
    assert!(rounds(&effects).is_empty(), "nothing to gate");
    assert!(asks_model(&effects));
    let errors: Vec<String> = m
        .history()
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { output, .. } if output.is_error => Some(output.joined_text()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 2);
    assert!(errors[0].contains("description is missing"));
    assert!(errors[1].contains("prompt is empty"));
}

#[test]
fn an_agent_call_is_unknown_when_subagents_are_off() {
    let mut m = machine(policy(None));
    feed(&mut m, Input::Prompted { text: "go".into() });
    feed(&mut m, say(Hook::SessionStart, "", None));
    feed(&mut m, say(Hook::UserPromptSubmit, "", Some(0)));
    let call = ToolCall {
        id: "m0".into(),
        name: AGENT_TOOL.into(),
        arguments: task("x"),
    };
    assert!(m.spawn_child(&call).is_none());
    feed(&mut m, calls_one(AGENT_TOOL, task("x")));
    assert!(m.history().iter().any(|m| matches!(
        m,
        Message::ToolResult { call_id, output } if call_id.0 == "m0"
            && output.joined_text() == unknown_tool_text(AGENT_TOOL)
    )));
}

#[test]
fn cancelling_the_parent_answers_each_agent_call_cancelled_exactly_once() {
    let (mut parent, calls) = parent_calling(policy(on()), &["one", "two"]);
    let (_child, _) = start_child(&parent, &calls[0], "");
    // One child finished before the cancel; the other had not.
    feed(
        &mut parent,
        Input::ToolFinished {
            id: calls[0].id.clone(),
            output: ToolOutput::text("one done"),
        },
    );
    let effects = feed(&mut parent, Input::Cancelled);
    assert_eq!(finished(&effects), Some(FinishReason::Cancelled));
    for call in &calls {
        let answers: Vec<&ToolOutput> = parent
            .history()
            .iter()
            .filter_map(|m| match m {
                Message::ToolResult { call_id, output } if *call_id == call.id => Some(output),
                _ => None,
            })
            .collect();
        assert_eq!(answers.len(), 1, "{} answered once", call.id);
    }
    let last = parent.history().last().unwrap();
    assert!(matches!(
        last,
        Message::ToolResult { call_id, output } if *call_id == calls[1].id
            && output.joined_text() == "cancelled"
    ));
    // A late result of the cancelled child is refused: its call is answered already.
    assert!(
        parent
            .handle(Input::ToolFinished {
                id: calls[1].id.clone(),
                output: ToolOutput::text("late"),
            })
            .is_err()
    );
}
