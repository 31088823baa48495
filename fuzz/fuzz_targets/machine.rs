//! Arbitrary sequences of facts applied to the pure machine, valid or not. The machine must
//! never panic, must refuse what it does not expect without changing, must keep every
//! invariant the explorer checks (`hookloop::testing::Invariants`, judged from the facts fed)
//! on every fact it accepts, and must send well-paired requests without hook tools.

#![no_main]

use arbitrary::Arbitrary;
use hookloop::hooks::{self, Hook, HookServers, ServerName};
use hookloop::machine::{
    CallId, Catalog, Effect, HookReply, Input, LlmReply, Machine, PermissionDecision, Policy,
    ServerTools, StopReason, ToolCall, ToolHints, ToolInfo, ToolOutput, Usage,
};
use hookloop::testing::{Invariants, check_pairing};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

#[derive(Arbitrary, Debug)]
struct Session {
    budget: u8,
    max_rounds: u8,
    context: u16,
    allow: u8,
    /// Ask before destructive tools (`s1__run` and `s3__run` are).
    ask: bool,
    /// Per server (at most 4): bit 0 = has `_Stop`, bit 1 = has `_PostCompact`.
    servers: Vec<u8>,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Prompt(u8),
    Reply { text: u16, calls: Vec<(u8, u8, bool)>, stop: u8, input_tokens: Option<u16> },
    LlmFailed,
    /// Answer the n-th outstanding call (or an id nobody asked for).
    ToolFinished { which: u8, bytes: u16, error: bool },
    Hook { server: u8, post_compact: bool, kind: u8, text: u8 },
    Cancel,
    Close,
    Catalog,
    /// Decide about the call last asked about (or one nobody asked about).
    Decide { ghost: bool, decision: u8 },
}

fn server(i: u8) -> ServerName {
    ServerName::new(format!("s{}", i % 4)).expect("valid name")
}

fn stop(n: u8) -> StopReason {
    match n % 7 {
        0 => StopReason::EndTurn,
        1 => StopReason::StopSequence,
        2 => StopReason::ToolUse,
        3 => StopReason::MaxTokens,
        4 => StopReason::Refusal,
        5 => StopReason::ContentFilter,
        _ => StopReason::PauseTurn,
    }
}

fuzz_target!(|s: Session| {
    let servers: Vec<u8> = s.servers.iter().take(4).copied().collect();
    let allow = match s.allow % 3 {
        0 => HookServers::Off,
        1 => HookServers::All,
        _ => HookServers::Named(vec![server(0), server(2)]),
    };
    let policy = Policy {
        hook_servers: allow,
        hook_timeout_ms: 2_500,
        stop_max_rejections: u32::from(s.budget % 5),
        max_rounds: u32::from(s.max_rounds % 8),
        max_context_tokens: u64::from(s.context) + 1_001,
        max_output_tokens: 1_000,
        media: Default::default(),
        ask_permission: s.ask,
        subagents: None,
        hook_details: false,
    };
    let catalog = Catalog {
        servers: servers
            .iter()
            .enumerate()
            .map(|(i, bits)| {
                let info = |name: &str| ToolInfo { name: name.into(), description: String::new(), input_schema: json!({}), hints: Default::default() };
                let destructive = ToolHints { destructive: Some(i % 2 == 1), ..ToolHints::default() };
                let mut tools = vec![ToolInfo { hints: destructive, ..info("run") }];
                if bits & 1 != 0 {
                    tools.push(info("_Stop"));
                }
                if bits & 2 != 0 {
                    tools.push(info("_PostCompact"));
                }
                ServerTools { server: server(i as u8), tools }
            })
            .collect(),
    };
    let budget = policy.stop_max_rejections;
    let mut invariants = Invariants::new(&policy);
    let mut m = Machine::new(policy, None);
    let mut outstanding: Vec<CallId> = Vec::new();
    let mut asked: Option<CallId> = None;
    let mut next = 0u32;
    // The first fact is the catalog, then the fuzzer's.
    let ops = std::iter::once(Op::Catalog).chain(s.ops.into_iter().take(256));
    for op in ops {
        let input = match op {
            Op::Prompt(n) => Input::Prompted { text: format!("p{n}") },
            Op::Reply { text, calls, stop: st, input_tokens } => Input::LlmReplied {
                reply: LlmReply {
                    text: "t".repeat(usize::from(text % 4_096)),
                    tool_calls: calls
                        .into_iter()
                        .take(6)
                        .map(|(srv, id, hook)| {
                            next += 1;
                            ToolCall {
                                id: CallId(format!("i{}", id % 4)),
                                name: if hook { format!("s{}___Stop", srv % 4) } else { format!("s{}__run", srv % 5) },
                                arguments: if next % 7 == 0 { json!("raw") } else { json!({}) },
                            }
                        })
                        .collect(),
                    stop: stop(st),
                    usage: input_tokens.map(|t| Usage { input_tokens: u64::from(t), ..Usage::default() }),
                },
            },
            Op::LlmFailed => Input::LlmFailed { error: "e".into() },
            Op::ToolFinished { which, bytes, error } => {
                let id = outstanding.get(usize::from(which)).cloned().unwrap_or_else(|| CallId("ghost".into()));
                let body = "r".repeat(usize::from(bytes % 8_192));
                Input::ToolFinished { id, output: if error { ToolOutput::error(body) } else { ToolOutput::text(body) } }
            }
            Op::Hook { server: srv, post_compact, kind, text } => Input::HookAnswered {
                server: server(srv),
                hook: if post_compact { Hook::PostCompact } else { Hook::Stop },
                subject: None,
                reply: match kind % 5 {
                    0 => HookReply::Text { text: " x".repeat(usize::from(text % 3)) },
                    1 => HookReply::ErrorResult { text: "e".into() },
                    2 => HookReply::Failed { error: "f".into() },
                    3 => HookReply::Skipped { reason: "r".into() },
                    _ => HookReply::TimedOut,
                },
            },
            Op::Cancel => Input::Cancelled,
            Op::Close => Input::Closed,
            Op::Catalog => Input::CatalogChanged { catalog: catalog.clone() },
            Op::Decide { ghost, decision } => Input::PermissionDecided {
                id: match (&asked, ghost) {
                    (Some(id), false) => id.clone(),
                    _ => CallId("ghost".into()),
                },
                decision: match decision % 4 {
                    0 => PermissionDecision::AllowOnce,
                    1 => PermissionDecision::AllowAlways,
                    2 => PermissionDecision::RejectOnce,
                    _ => PermissionDecision::RejectAlways,
                },
            },
        };
        let phase = m.phase();
        let history_before = m.history().to_vec();
        if m.handle(input.clone()).is_err() {
            assert_eq!(m.history().len(), history_before.len(), "a refused fact changed the history");
            assert_eq!(m.pending_effects(), 0, "a refused fact emitted orders");
            continue;
        }
        let effects: Vec<Effect> = std::iter::from_fn(|| m.poll_effect()).collect();
        if let Err(violation) = invariants.check(phase, &input, &m, &effects, &history_before) {
            panic!("{} after {}: {}", violation.rule, input.kind(), violation.detail);
        }
        for effect in &effects {
            match effect {
                Effect::CallLlm { purpose, messages, .. } => {
                    assert_eq!(*messages, m.history().len());
                    let request = m.request(*purpose);
                    if let Err(e) = check_pairing(request.messages) {
                        panic!("pairing broken: {e}");
                    }
                    assert!(request.tools.iter().all(|t| !hooks::is_hook(hooks::bare_name(&t.name))));
                }
                Effect::CallTools { calls } => {
                    assert!(calls.iter().all(|c| !hooks::is_hook(hooks::bare_name(&c.name))));
                    outstanding = calls.iter().map(|c| c.id.clone()).collect();
                }
                Effect::AskPermission { call } => {
                    assert!(s.ask, "asked permission with asking off");
                    asked = Some(call.id.clone());
                }
                Effect::CallHooks { .. } | Effect::KillServer { .. } | Effect::Notify { .. } | Effect::Finish { .. } => {}
            }
        }
        assert!(m.counters().objections <= budget);
    }
});
