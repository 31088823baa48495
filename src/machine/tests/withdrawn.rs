//! Calls whose tool left the catalog while they waited.

use super::*;

/// The error result and notice of a call whose tool left the catalog before it ran, and that
/// nothing ran it.
fn assert_withdrawn(m: &Machine, effects: &[Effect], id: &str, name: &str) {
    let output = result_of(m, id);
    assert!(output.is_error);
    assert_eq!(output.joined_text(), withdrawn_text(name));
    assert!(
        output.joined_text().contains("no longer offered") && output.joined_text().contains(name)
    );
    assert!(effects.contains(&Effect::Notify {
        notice: Notice::UnknownToolRefused { name: name.into() }
    }));
    let results = m
        .history()
        .iter()
        .filter(|message| matches!(message, Message::ToolResult { call_id, .. } if call_id.0 == id))
        .count();
    assert_eq!(results, 1, "answered exactly once");
    check_pairing(m.history()).unwrap();
}

#[test]
fn a_tool_removed_while_its_call_waits_on_pre_tool_use_never_runs_and_is_answered_once() {
    let mut m = prompted_with_every_hook(policy());
    feed(
        &mut m,
        calls(&[("t1", "a__run", json!({})), ("t2", "c__run", json!({}))]),
    );
    assert!(matches!(m.phase(), Phase::AwaitingHook(Hook::PreToolUse)));
    // Server `c` leaves (its process ended, say) while the round is out.
    let mut smaller = every_hook_catalog();
    smaller.servers.retain(|entry| entry.server.as_str() != "c");
    assert!(feed(&mut m, Input::CatalogChanged { catalog: smaller }).is_empty());
    both(&mut m, Hook::PreToolUse, Some(0), "", "");
    let effects = both(&mut m, Hook::PreToolUse, Some(1), "", "");
    assert_eq!(ran(&effects), ["t1"], "only the offered tool runs");
    assert_eq!(m.phase(), Phase::RunningTools);
    let effects_after = feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("ok"),
        },
    );
    assert_withdrawn(&m, &effects, "t2", "c__run");
    // `_PostToolUse` is about the call that ran, not the withdrawn one.
    let Some(Effect::CallHooks { subjects, .. }) = effects_after.iter().find(|e| {
        matches!(
            e,
            Effect::CallHooks {
                hook: Hook::PostToolUse,
                ..
            }
        )
    }) else {
        panic!("{effects_after:?}")
    };
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["tool"], "a__run");
}

#[test]
fn a_tool_removed_while_the_user_decides_never_runs_whatever_the_decision() {
    for decision in [
        PermissionDecision::AllowOnce,
        PermissionDecision::AllowAlways,
    ] {
        let mut m = asking_machine();
        prompt(&mut m, "go");
        let effects = feed(
            &mut m,
            calls(&[("c1", "d__rm", json!({})), ("c2", "d__ls", json!({}))]),
        );
        assert_eq!(asked(&effects), ["c1"]);
        // `rm` leaves the catalog while the question is open; `ls` stays.
        let catalog = Catalog {
            servers: vec![ServerTools {
                server: server("d"),
                tools: vec![ToolInfo {
                    name: "ls".into(),
                    description: String::new(),
                    input_schema: json!({"type": "object"}),
                    hints: ToolHints::default(),
                }],
            }],
        };
        assert!(feed(&mut m, Input::CatalogChanged { catalog }).is_empty());
        let effects = feed(&mut m, decided("c1", decision));
        assert_eq!(ran(&effects), ["c2"], "{decision:?}");
        feed(
            &mut m,
            Input::ToolFinished {
                id: "c2".into(),
                output: ToolOutput::text("ok"),
            },
        );
        assert_withdrawn(&m, &effects, "c1", "d__rm");
    }
}

#[test]
fn every_call_withdrawn_asks_the_model_again_at_once() {
    let mut m = asking_machine();
    prompt(&mut m, "go");
    feed(&mut m, calls(&[("c1", "d__rm", json!({}))]));
    assert!(
        feed(
            &mut m,
            Input::CatalogChanged {
                catalog: Catalog::default()
            }
        )
        .is_empty()
    );
    let effects = feed(&mut m, decided("c1", PermissionDecision::AllowOnce));
    assert!(ran(&effects).is_empty());
    assert!(effects.iter().any(is_call_llm), "{effects:?}");
    assert_eq!(m.phase(), Phase::Prompting);
    assert_withdrawn(&m, &effects, "c1", "d__rm");
}
