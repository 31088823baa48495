//! Each hook call as each host's events: what they read back as, their targets, their fields.

use serde_json::json;

use super::*;
use crate::machine::{AgentId, AgentRef};

fn facts() -> Facts {
    Facts {
        session_id: "s1".into(),
        transcript_path: Some("/r/s1.jsonl".into()),
        cwd: "/work".into(),
    }
}

fn stdin(invocation: &Invocation) -> Value {
    serde_json::from_str(&invocation.event.to_json()).unwrap()
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn calls() -> Vec<(Hook, Map<String, Value>)> {
    vec![
        (Hook::SessionStart, Map::new()),
        (Hook::PostCompact, Map::new()),
        (Hook::UserPromptSubmit, args(json!({"prompt": "fix it"}))),
        (
            Hook::PreToolUse,
            args(json!({"tool": "fs__read", "arguments": {"path": "/etc"}, "id": "c1"})),
        ),
        (
            Hook::PostToolUse,
            args(json!({"tool": "fs__read", "arguments": {}, "id": "c1",
                "isError": false, "output": "text"})),
        ),
        (
            Hook::PostToolUse,
            args(json!({"tool": "fs__read", "arguments": {}, "id": "c1",
                "isError": true, "output": "no such file"})),
        ),
        (
            Hook::Stop,
            args(json!({"lastMessage": "Done.", "afterObjection": true})),
        ),
        (Hook::PreCompact, Map::new()),
        (Hook::SessionEnd, Map::new()),
        (
            Hook::SubagentStart,
            args(json!({"agent": "agent-1", "description": "d", "prompt": "p"})),
        ),
        (
            Hook::SubagentStop,
            args(json!({"agent": "agent-1", "result": "r", "afterObjection": false})),
        ),
    ]
}

#[test]
fn every_invocation_is_an_event_its_host_reads_with_the_listed_target() {
    for host in [Host::ClaudeCode, Host::Codex, Host::Goose] {
        for (hook, arguments) in calls() {
            let listed = events_of(host, hook);
            let made = invocations(host, hook, &arguments, &HookContext::default(), &facts());
            for invocation in &made {
                let json = invocation.event.to_json();
                // What the host would read back is the same event.
                let read = host.read_event(json.as_bytes()).unwrap();
                assert_eq!(read, invocation.event, "{host} {hook}");
                let (_, target) = listed
                    .iter()
                    .find(|(name, _)| *name == invocation.event.name())
                    .unwrap_or_else(|| panic!("{host} {hook}: {json}"));
                match target {
                    Target::None => assert_eq!(invocation.target, None, "{json}"),
                    Target::Fixed(value) => {
                        assert_eq!(invocation.target.as_deref(), Some(*value), "{json}");
                    }
                    Target::Varies => assert!(invocation.target.is_some(), "{json}"),
                }
            }
            assert!(made.len() <= listed.len(), "{host} {hook}");
        }
    }
}

#[test]
fn a_tool_call_reads_as_claude_code_writes_it_with_the_mcp_prefix() {
    let (_, arguments) = &calls()[3];
    let made = invocations(
        Host::ClaudeCode,
        Hook::PreToolUse,
        arguments,
        &HookContext::default(),
        &facts(),
    );
    assert_eq!(
        stdin(&made[0]),
        json!({"session_id": "s1", "transcript_path": "/r/s1.jsonl", "cwd": "/work",
            "hook_event_name": "PreToolUse", "tool_name": "mcp__fs__read",
            "tool_input": {"path": "/etc"}, "tool_use_id": "c1"})
    );
    assert_eq!(made[0].target.as_deref(), Some("mcp__fs__read"));
}

#[test]
fn stop_carries_the_latch_and_the_last_text() {
    let (_, arguments) = &calls()[6];
    let made = invocations(
        Host::Codex,
        Hook::Stop,
        arguments,
        &HookContext::default(),
        &facts(),
    );
    let json = stdin(&made[0]);
    assert_eq!(json["stop_hook_active"], true);
    assert_eq!(json["last_assistant_message"], "Done.");
    // Without the details the call carries, the event says no more than it knows.
    let made = invocations(
        Host::Codex,
        Hook::Stop,
        &Map::new(),
        &HookContext::default(),
        &facts(),
    );
    let json = stdin(&made[0]);
    assert_eq!(json["stop_hook_active"], false);
    assert_eq!(json["last_assistant_message"], Value::Null);
}

#[test]
fn post_compact_is_a_compact_session_start_and_a_post_compact_event() {
    let made = invocations(
        Host::ClaudeCode,
        Hook::PostCompact,
        &Map::new(),
        &HookContext::default(),
        &facts(),
    );
    let names: Vec<(&str, Option<&str>)> = made
        .iter()
        .map(|i| (i.event.name(), i.target.as_deref()))
        .collect();
    assert_eq!(
        names,
        [
            ("SessionStart", Some("compact")),
            ("PostCompact", Some("auto"))
        ]
    );
    assert_eq!(stdin(&made[0])["source"], "compact");
    assert!(made[0].takes.context && !made[1].takes.context);
}

#[test]
fn a_results_text_reads_as_claude_code_sends_an_mcp_tools_content_and_as_codex_sends_text() {
    let (_, arguments) = &calls()[4];
    let response = |host| {
        stdin(
            &invocations(
                host,
                Hook::PostToolUse,
                arguments,
                &HookContext::default(),
                &facts(),
            )[0],
        )["tool_response"]
            .clone()
    };
    assert_eq!(
        response(Host::ClaudeCode),
        json!([{"type": "text", "text": "text"}])
    );
    assert_eq!(response(Host::Codex), json!("text"));
}

#[test]
fn a_failed_call_is_post_tool_use_failure_for_claude_code_and_post_tool_use_for_codex() {
    let (_, arguments) = &calls()[5];
    let event = |host| {
        invocations(
            host,
            Hook::PostToolUse,
            arguments,
            &HookContext::default(),
            &facts(),
        )[0]
        .event
        .name()
        .to_owned()
    };
    assert_eq!(event(Host::ClaudeCode), "PostToolUseFailure");
    assert_eq!(event(Host::Codex), "PostToolUse");
    assert_eq!(event(Host::Goose), "PostToolUseFailure");
}

#[test]
fn inside_a_subagent_events_name_the_agent_once() {
    let context = HookContext {
        agent: Some(AgentRef {
            id: AgentId("agent-1".into()),
            parent: None,
        }),
        ..HookContext::default()
    };
    let (_, arguments) = &calls()[3];
    let made = invocations(
        Host::ClaudeCode,
        Hook::PreToolUse,
        arguments,
        &context,
        &facts(),
    );
    let json = stdin(&made[0]);
    assert_eq!(json["agent_id"], "agent-1");
    assert_eq!(json["agent_type"], AGENT_TYPE);
    let (_, arguments) = &calls()[10];
    let made = invocations(
        Host::ClaudeCode,
        Hook::SubagentStop,
        arguments,
        &context,
        &facts(),
    );
    let json = made[0].event.to_json();
    assert_eq!(json.matches("\"agent_id\"").count(), 1, "{json}");
    assert_eq!(stdin(&made[0])["last_assistant_message"], "r");
}

#[test]
fn goose_events_are_flat_with_the_fields_that_apply() {
    let (_, arguments) = &calls()[3];
    let made = invocations(
        Host::Goose,
        Hook::PreToolUse,
        arguments,
        &HookContext::default(),
        &facts(),
    );
    assert_eq!(
        stdin(&made[0]),
        json!({"event": "PreToolUse", "session_id": "s1", "matcher_context": "fs__read",
            "tool_name": "fs__read", "tool_input": {"path": "/etc"}, "working_dir": "/work",
            "tool_call_id": "c1"})
    );
    let (_, arguments) = &calls()[2];
    let made = invocations(
        Host::Goose,
        Hook::UserPromptSubmit,
        arguments,
        &HookContext::default(),
        &facts(),
    );
    assert_eq!(stdin(&made[0])["message"], "fix it");
    assert_eq!(made[0].target.as_deref(), Some("fix it"));
    for hook in [Hook::PostCompact, Hook::SubagentStart] {
        assert!(
            invocations(
                Host::Goose,
                hook,
                &Map::new(),
                &HookContext::default(),
                &facts()
            )
            .is_empty()
        );
    }
}

#[test]
fn events_with_no_hookloop_point_never_run() {
    assert!(runs_here(Host::ClaudeCode, "PostToolUseFailure"));
    assert!(!runs_here(Host::Codex, "PostToolUseFailure"));
    for event in ["Notification", "PermissionRequest", "TeammateIdle"] {
        assert!(!runs_here(Host::ClaudeCode, event), "{event}");
    }
    assert!(!runs_here(Host::Goose, "AfterFileEdit"));
}
