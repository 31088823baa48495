//! The hook details of [`Policy::hook_details`]: what each hook call carries with them on, and
//! that without them every call is as it was.

use serde_json::{Value, json};

use super::*;
use crate::hooks::HookServers;

fn server() -> ServerName {
    ServerName::new("a").unwrap()
}

fn machine(details: bool) -> Machine {
    let tool = |name: &str| ToolInfo::new(name, json!({"type": "object"}));
    let catalog = Catalog {
        servers: vec![ServerTools {
            server: server(),
            tools: ["run", "_Stop", "_PreToolUse", "_PostToolUse"]
                .into_iter()
                .map(tool)
                .collect(),
        }],
    };
    let policy = Policy {
        hook_servers: HookServers::All,
        hook_details: details,
        ..Policy::default()
    };
    let mut m = Machine::new(policy, None);
    m.handle(Input::CatalogChanged { catalog }).unwrap();
    drain(&mut m);
    m
}

fn drain(m: &mut Machine) -> Vec<Effect> {
    std::iter::from_fn(|| m.poll_effect()).collect()
}

fn feed(m: &mut Machine, input: Input) -> Vec<Effect> {
    m.handle(input).unwrap();
    drain(m)
}

fn reply(text: &str, calls: &[&str]) -> Input {
    Input::LlmReplied {
        reply: LlmReply {
            text: text.into(),
            tool_calls: calls
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "a__run".into(),
                    arguments: json!({"n": 1}),
                })
                .collect(),
            stop: if calls.is_empty() {
                StopReason::EndTurn
            } else {
                StopReason::ToolUse
            },
            usage: None,
        },
    }
}

fn answer(hook: Hook, subject: Option<u32>, text: &str) -> Input {
    Input::HookAnswered {
        server: server(),
        hook,
        reply: HookReply::Text { text: text.into() },
        subject,
    }
}

/// The subjects of the one hook round among `effects`.
fn subjects(effects: &[Effect], hook: Hook) -> Vec<Value> {
    let rounds: Vec<&Vec<Value>> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::CallHooks {
                hook: h, subjects, ..
            } if *h == hook => Some(subjects),
            _ => None,
        })
        .collect();
    assert_eq!(rounds.len(), 1, "{effects:?}");
    rounds[0].clone()
}

/// A prompt whose model ends its turn, is objected to, runs a call, and ends again: the
/// effects of each step.
fn objected_then_worked(details: bool) -> [Vec<Effect>; 4] {
    let mut m = machine(details);
    feed(&mut m, Input::Prompted { text: "go".into() });
    let first_stop = feed(&mut m, reply("first end", &[]));
    let subject = details.then_some(0);
    feed(&mut m, answer(Hook::Stop, subject, "tests fail"));
    let pre = feed(&mut m, reply("", &["c1"]));
    let run = feed(&mut m, answer(Hook::PreToolUse, Some(0), ""));
    assert!(run.iter().any(|e| matches!(e, Effect::CallTools { .. })));
    let post = feed(
        &mut m,
        Input::ToolFinished {
            id: "c1".into(),
            output: ToolOutput::text("ran"),
        },
    );
    feed(&mut m, answer(Hook::PostToolUse, Some(0), ""));
    let second_stop = feed(&mut m, reply("second end", &[]));
    [first_stop, pre, post, second_stop]
}

#[test]
fn with_details_stop_carries_the_last_text_and_whether_an_objection_came_before() {
    let [first, _, _, second] = objected_then_worked(true);
    assert_eq!(
        subjects(&first, Hook::Stop),
        [json!({"lastMessage": "first end", "afterObjection": false})]
    );
    assert_eq!(
        subjects(&second, Hook::Stop),
        [json!({"lastMessage": "second end", "afterObjection": true})]
    );
}

#[test]
fn with_details_tool_hooks_name_their_call() {
    let [_, pre, post, _] = objected_then_worked(true);
    assert_eq!(
        subjects(&pre, Hook::PreToolUse),
        [json!({"tool": "a__run", "arguments": {"n": 1}, "id": "c1"})]
    );
    assert_eq!(
        subjects(&post, Hook::PostToolUse)[0]["id"],
        json!("c1"),
        "{post:?}"
    );
}

#[test]
fn without_details_every_hook_call_is_as_the_contract_has_it() {
    let [first, pre, post, second] = objected_then_worked(false);
    assert!(subjects(&first, Hook::Stop).is_empty());
    assert!(subjects(&second, Hook::Stop).is_empty());
    assert_eq!(
        subjects(&pre, Hook::PreToolUse),
        [json!({"tool": "a__run", "arguments": {"n": 1}})]
    );
    assert_eq!(
        subjects(&post, Hook::PostToolUse),
        [json!({"tool": "a__run", "arguments": {"n": 1}, "isError": false, "output": "ran"})]
    );
}

#[test]
fn a_new_prompt_starts_with_no_objection_behind_it() {
    let mut m = machine(true);
    feed(&mut m, Input::Prompted { text: "go".into() });
    feed(&mut m, reply("end", &[]));
    feed(&mut m, answer(Hook::Stop, Some(0), "not yet"));
    // The model declines; the prompt ends without asking again.
    feed(&mut m, reply("still end", &[]));
    assert_eq!(m.phase(), Phase::Idle);
    feed(
        &mut m,
        Input::Prompted {
            text: "again".into(),
        },
    );
    let effects = feed(&mut m, reply("done", &[]));
    assert_eq!(
        subjects(&effects, Hook::Stop),
        [json!({"lastMessage": "done", "afterObjection": false})]
    );
}
