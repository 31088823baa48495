//! Destructive calls and the user's decisions.

use super::*;

#[test]
fn a_destructive_call_waits_for_the_users_decision_and_runs_once_allowed() {
    let mut m = asking_machine();
    prompt(&mut m, "go");
    let effects = feed(&mut m, calls(&[("c1", "d__rm", json!({"path": "/"}))]));
    assert_eq!(asked(&effects), ["c1"]);
    assert!(ran(&effects).is_empty());
    assert_eq!(m.phase(), Phase::AwaitingPermission);
    let effects = feed(&mut m, decided("c1", PermissionDecision::AllowOnce));
    assert_eq!(ran(&effects), ["c1"]);
    assert_eq!(m.phase(), Phase::RunningTools);
}

#[test]
fn a_permission_setting_changed_between_prompts_applies_to_the_next_call_and_is_refused_mid_prompt()
{
    let mut m = asking_machine();
    // Turned off at Idle: a destructive call runs without a question.
    assert!(feed(&mut m, Input::PermissionSettingChanged { ask: false }).is_empty());
    assert!(!m.policy().ask_permission);
    prompt(&mut m, "go");
    let effects = feed(&mut m, calls(&[("c1", "d__rm", json!({}))]));
    assert!(asked(&effects).is_empty());
    assert_eq!(ran(&effects), ["c1"]);
    // A running prompt keeps the setting it started with.
    assert!(matches!(
        m.handle(Input::PermissionSettingChanged { ask: true }),
        Err(MachineError::Unexpected { .. })
    ));
    assert!(!m.policy().ask_permission);
}

#[test]
fn a_rejected_call_never_runs_and_the_model_gets_an_error_result() {
    let mut m = asking_machine();
    prompt(&mut m, "go");
    feed(&mut m, calls(&[("c1", "d__rm", json!({}))]));
    let effects = feed(&mut m, decided("c1", PermissionDecision::RejectOnce));
    assert!(ran(&effects).is_empty());
    assert!(effects.contains(&Effect::Notify {
        notice: Notice::PermissionRejected {
            id: "c1".into(),
            tool: "d__rm".into(),
            standing: false,
        }
    }));
    assert!(effects.iter().any(is_call_llm), "{effects:?}");
    let output = result_of(&m, "c1");
    assert!(output.is_error);
    assert_eq!(output.joined_text(), rejected_text("d__rm"));
    // The model must learn which call was rejected and that it did not run, not only get an
    // error (an empty text compares equal to itself).
    let text = output.joined_text();
    assert!(
        text.contains("rejected") && text.contains("d__rm") && text.contains("did not run"),
        "{text}"
    );
}

#[test]
fn calls_of_tools_not_marked_destructive_and_a_policy_that_does_not_ask_run_unasked() {
    let mut m = asking_machine();
    prompt(&mut m, "go");
    let effects = feed(&mut m, calls(&[("c1", "d__ls", json!({}))]));
    assert!(asked(&effects).is_empty());
    assert_eq!(ran(&effects), ["c1"]);

    // The same catalog under the default policy: nobody is asked about `rm` either.
    let mut m = Machine::new(Policy::default(), None);
    m.handle(Input::CatalogChanged {
        catalog: Catalog {
            servers: vec![ServerTools {
                server: server("d"),
                tools: vec![ToolInfo {
                    name: "rm".into(),
                    description: String::new(),
                    input_schema: json!({"type": "object"}),
                    hints: ToolHints {
                        destructive: Some(true),
                        ..ToolHints::default()
                    },
                }],
            }],
        },
    })
    .unwrap();
    prompt(&mut m, "go");
    let effects = feed(&mut m, calls(&[("c1", "d__rm", json!({}))]));
    assert!(asked(&effects).is_empty());
    assert_eq!(ran(&effects), ["c1"]);
}

#[test]
fn always_decisions_stand_for_the_rest_of_the_session_and_once_decisions_do_not() {
    let mut m = asking_machine();
    prompt(&mut m, "go");
    // Two calls of `rm` in one reply: asked about the first only, one at a time.
    let effects = feed(
        &mut m,
        calls(&[
            ("c1", "d__rm", json!({"n": 1})),
            ("c2", "d__rm", json!({"n": 2})),
        ]),
    );
    assert_eq!(asked(&effects), ["c1"]);
    let effects = feed(&mut m, decided("c1", PermissionDecision::AllowAlways));
    assert_eq!(ran(&effects), ["c1", "c2"]);
    feed(
        &mut m,
        Input::ToolFinished {
            id: "c1".into(),
            output: ToolOutput::text("ok"),
        },
    );
    feed(
        &mut m,
        Input::ToolFinished {
            id: "c2".into(),
            output: ToolOutput::text("ok"),
        },
    );
    feed(&mut m, end_turn());
    // A later prompt: the standing allowance holds.
    prompt(&mut m, "again");
    let effects = feed(&mut m, calls(&[("c3", "d__rm", json!({}))]));
    assert!(asked(&effects).is_empty());
    assert_eq!(ran(&effects), ["c3"]);

    // Once is once: asked again about the next call.
    let mut m = asking_machine();
    prompt(&mut m, "go");
    feed(
        &mut m,
        calls(&[("c1", "d__rm", json!({})), ("c2", "d__rm", json!({}))]),
    );
    let effects = feed(&mut m, decided("c1", PermissionDecision::RejectOnce));
    assert_eq!(asked(&effects), ["c2"]);

    // A standing rejection answers every later call at once, saying it stood.
    let effects = feed(&mut m, decided("c2", PermissionDecision::RejectAlways));
    assert!(effects.iter().any(is_call_llm));
    feed(&mut m, end_turn());
    prompt(&mut m, "again");
    let effects = feed(&mut m, calls(&[("c3", "d__rm", json!({}))]));
    assert!(asked(&effects).is_empty() && ran(&effects).is_empty());
    assert!(effects.contains(&Effect::Notify {
        notice: Notice::PermissionRejected {
            id: "c3".into(),
            tool: "d__rm".into(),
            standing: true,
        }
    }));
    assert!(result_of(&m, "c3").is_error);
}

#[test]
fn a_decision_about_a_call_not_asked_about_is_refused_and_changes_nothing() {
    let mut m = asking_machine();
    prompt(&mut m, "go");
    feed(&mut m, calls(&[("c1", "d__rm", json!({}))]));
    assert_eq!(
        m.handle(decided("c9", PermissionDecision::AllowOnce)),
        Err(MachineError::UnexpectedDecision("c9".into()))
    );
    assert_eq!(m.phase(), Phase::AwaitingPermission);
    let effects = feed(&mut m, decided("c1", PermissionDecision::AllowOnce));
    assert_eq!(ran(&effects), ["c1"]);
    // Out of place anywhere else.
    assert!(
        m.handle(decided("c1", PermissionDecision::AllowOnce))
            .is_err()
    );
}

#[test]
fn a_cancel_while_awaiting_a_decision_answers_every_call_of_the_reply() {
    let mut m = asking_machine();
    prompt(&mut m, "go");
    feed(
        &mut m,
        calls(&[("c1", "d__ls", json!({})), ("c2", "d__rm", json!({}))]),
    );
    let effects = feed(&mut m, Input::Cancelled);
    assert_eq!(
        effects,
        [Effect::Finish {
            reason: FinishReason::Cancelled
        }]
    );
    assert_eq!(m.phase(), Phase::Idle);
    for id in ["c1", "c2"] {
        let output = result_of(&m, id);
        assert!(output.is_error);
        assert_eq!(output.joined_text(), "cancelled");
    }
}

/// Every sequence of decisions over a reply of three destructive calls: a call runs exactly
/// when it was allowed, by its own decision or a standing one before it; nobody is asked about
/// a call a standing decision covers; and every call gets exactly one result.
#[test]
fn every_sequence_of_decisions_runs_exactly_the_allowed_calls_and_answers_every_call() {
    use PermissionDecision::{AllowAlways, AllowOnce, RejectAlways, RejectOnce};
    let all = [AllowOnce, AllowAlways, RejectOnce, RejectAlways];
    for a in all {
        for b in all {
            for c in all {
                let script = [a, b, c];
                let mut m = asking_machine();
                prompt(&mut m, "go");
                let ids = ["c1", "c2", "c3"];
                let mut effects = feed(&mut m, calls(&ids.map(|id| (id, "d__rm", json!({})))));
                let mut standing: Option<bool> = None;
                let mut expected_run = Vec::new();
                let mut decisions = script.iter();
                for id in ids {
                    match standing {
                        Some(true) => expected_run.push(id),
                        Some(false) => {}
                        None => {
                            assert_eq!(asked(&effects), [id], "{script:?}");
                            let decision = *decisions.next().unwrap();
                            if decision.allows() {
                                expected_run.push(id);
                            }
                            if decision.is_standing() {
                                standing = Some(decision.allows());
                            }
                            effects = feed(&mut m, decided(id, decision));
                        }
                    }
                }
                assert!(asked(&effects).is_empty(), "{script:?}");
                assert_eq!(ran(&effects), expected_run, "{script:?}");
                for id in &expected_run {
                    feed(
                        &mut m,
                        Input::ToolFinished {
                            id: (*id).into(),
                            output: ToolOutput::text("ok"),
                        },
                    );
                }
                for id in ids {
                    let results = m
                        .history()
                        .iter()
                        .filter(|message| matches!(message, Message::ToolResult { call_id, .. } if call_id.0 == id))
                        .count();
                    assert_eq!(results, 1, "{id} in {script:?}");
                    assert_eq!(
                        result_of(&m, id).is_error,
                        !expected_run.contains(&id),
                        "{script:?}"
                    );
                }
            }
        }
    }
}
