//! One test per rule, named after it. Property tests over random sessions live in
//! `tests/machine_props.rs`.

use std::collections::HashSet;

use serde_json::json;

use super::*;
use crate::hooks::{self, HookServers};

mod compaction;
mod every_hook;
mod observability;
mod permission;
mod stop;
mod tools;
mod turns;
mod withdrawn;

fn server(name: &str) -> ServerName {
    ServerName::new(name).unwrap()
}

/// Servers `a` and `b`, each with a tool `run` and both hooks; `c` with a tool only.
fn catalog() -> Catalog {
    let tool = |name: &str| ToolInfo {
        name: name.into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        hints: ToolHints::default(),
    };
    let full = |name: &str| ServerTools {
        server: server(name),
        tools: vec![
            tool("run"),
            tool("_Stop"),
            tool("_PostCompact"),
            tool("_Other"),
        ],
    };
    Catalog {
        servers: vec![
            full("a"),
            full("b"),
            ServerTools {
                server: server("c"),
                tools: vec![tool("run")],
            },
        ],
    }
}

fn policy() -> Policy {
    Policy {
        hook_servers: HookServers::All,
        ..Policy::default()
    }
}

fn machine_with(policy: Policy) -> Machine {
    let mut m = Machine::new(policy, None);
    m.handle(Input::CatalogChanged { catalog: catalog() })
        .unwrap();
    assert!(drain(&mut m).is_empty());
    m
}

fn machine() -> Machine {
    machine_with(policy())
}

fn drain(m: &mut Machine) -> Vec<Effect> {
    std::iter::from_fn(|| m.poll_effect()).collect()
}

fn feed(m: &mut Machine, input: Input) -> Vec<Effect> {
    m.handle(input).unwrap();
    drain(m)
}

fn prompt(m: &mut Machine, text: &str) -> Vec<Effect> {
    feed(m, Input::Prompted { text: text.into() })
}

fn reply(text: &str, stop: StopReason) -> Input {
    Input::LlmReplied {
        reply: LlmReply {
            text: text.into(),
            stop,
            ..LlmReply::default()
        },
    }
}

fn end_turn() -> Input {
    reply("done", StopReason::EndTurn)
}

fn calls(calls: &[(&str, &str, serde_json::Value)]) -> Input {
    let tool_calls = calls
        .iter()
        .map(|(id, name, args)| ToolCall {
            id: (*id).into(),
            name: (*name).into(),
            arguments: args.clone(),
        })
        .collect();
    Input::LlmReplied {
        reply: LlmReply {
            text: String::new(),
            tool_calls,
            stop: StopReason::ToolUse,
            usage: None,
        },
    }
}

fn say(name: &str, hook: Hook, text: &str) -> Input {
    Input::HookAnswered {
        server: server(name),
        hook,
        reply: HookReply::Text { text: text.into() },
        subject: None,
    }
}

fn hook_reply(name: &str, hook: Hook, reply: HookReply) -> Input {
    Input::HookAnswered {
        server: server(name),
        hook,
        reply,
        subject: None,
    }
}

fn is_call_llm(e: &Effect) -> bool {
    matches!(
        e,
        Effect::CallLlm {
            purpose: Purpose::Turn,
            ..
        }
    )
}

fn hook_calls(effects: &[Effect]) -> Vec<(Hook, Vec<ServerName>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::CallHooks { hook, servers, .. } => Some((*hook, servers.clone())),
            _ => None,
        })
        .collect()
}

fn finish(effects: &[Effect]) -> Option<FinishReason> {
    effects.iter().find_map(|e| match e {
        Effect::Finish { reason } => Some(reason.clone()),
        _ => None,
    })
}

/// Drives a prompt to an end of turn and answers `_Stop` from `a` and `b`.
fn end_turn_with_answers(m: &mut Machine, a: &str, b: &str) -> Vec<Effect> {
    let effects = feed(m, end_turn());
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::Stop, vec![server("a"), server("b")])]
    );
    assert!(feed(m, say("a", Hook::Stop, a)).is_empty());
    feed(m, say("b", Hook::Stop, b))
}

/// Servers `a` and `b`, each with a tool `run` and every hook; `c` with a tool only.
fn machine_with_every_hook(policy: Policy) -> Machine {
    let mut m = Machine::new(policy, None);
    m.handle(Input::CatalogChanged {
        catalog: every_hook_catalog(),
    })
    .unwrap();
    assert!(drain(&mut m).is_empty());
    m
}

/// Servers `a` and `b`, each with a tool `run` and every hook; `c` with a tool only.
fn every_hook_catalog() -> Catalog {
    let tool = |name: &str| ToolInfo {
        name: name.into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        hints: crate::machine::ToolHints::default(),
    };
    let full = |name: &str| ServerTools {
        server: server(name),
        tools: std::iter::once(tool("run"))
            .chain(Hook::ALL.iter().map(|hook| tool(hook.tool_name())))
            .collect(),
    };
    Catalog {
        servers: vec![
            full("a"),
            full("b"),
            ServerTools {
                server: server("c"),
                tools: vec![tool("run")],
            },
        ],
    }
}

fn answer(name: &str, hook: Hook, subject: Option<u32>, text: &str) -> Input {
    Input::HookAnswered {
        server: server(name),
        hook,
        reply: HookReply::Text { text: text.into() },
        subject,
    }
}

/// Both servers answer `hook` (about `subject`) with `a` and `b`.
fn both(m: &mut Machine, hook: Hook, subject: Option<u32>, a: &str, b: &str) -> Vec<Effect> {
    feed(m, answer("a", hook, subject, a));
    feed(m, answer("b", hook, subject, b))
}

fn hook_body(hook: Hook, server: &str, text: &str) -> String {
    hooks::encode_hook_body(hook, server, text)
}

fn result_text(message: &Message) -> String {
    match message {
        Message::ToolResult { output, .. } => output.joined_text(),
        other => panic!("expected a tool result, got {other:?}"),
    }
}

/// A machine past the prompt's hooks, waiting for the model.
fn prompted_with_every_hook(policy: Policy) -> Machine {
    let mut m = machine_with_every_hook(policy);
    prompt(&mut m, "go");
    both(&mut m, Hook::SessionStart, None, "", "");
    both(&mut m, Hook::UserPromptSubmit, Some(0), "", "");
    assert_eq!(m.phase(), Phase::Prompting);
    m
}

/// Server `d` with a destructive `rm` and a plain `ls`, no hooks; the policy asks.
fn asking_machine() -> Machine {
    let tool = |name: &str, destructive: Option<bool>| ToolInfo {
        name: name.into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        hints: ToolHints {
            destructive,
            ..ToolHints::default()
        },
    };
    let mut m = Machine::new(
        Policy {
            ask_permission: true,
            ..Policy::default()
        },
        None,
    );
    let catalog = Catalog {
        servers: vec![ServerTools {
            server: server("d"),
            tools: vec![tool("rm", Some(true)), tool("ls", Some(false))],
        }],
    };
    m.handle(Input::CatalogChanged { catalog }).unwrap();
    assert!(drain(&mut m).is_empty());
    m
}

fn decided(id: &str, decision: PermissionDecision) -> Input {
    Input::PermissionDecided {
        id: id.into(),
        decision,
    }
}

fn asked(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::AskPermission { call } => Some(call.id.to_string()),
            _ => None,
        })
        .collect()
}

fn ran(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::CallTools { calls } => Some(calls.iter().map(|c| c.id.to_string())),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The result the history holds for call `id`.
fn result_of(m: &Machine, id: &str) -> ToolOutput {
    m.history()
        .iter()
        .find_map(|message| match message {
            Message::ToolResult { call_id, output } if call_id.0 == id => Some(output.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}
