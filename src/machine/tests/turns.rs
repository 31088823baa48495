//! The running prompt: its caps, cancellation, refused facts, the close, and call ids.

use super::*;

#[test]
fn the_round_cap_ends_the_prompt_with_max_turn_requests() {
    let mut m = machine_with(Policy {
        max_rounds: 2,
        ..policy()
    });
    prompt(&mut m, "go");
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text(""),
        },
    );
    assert!(effects.iter().any(is_call_llm));
    feed(&mut m, calls(&[("t2", "a__run", json!({}))]));
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t2".into(),
            output: ToolOutput::text(""),
        },
    );
    assert_eq!(finish(&effects), Some(FinishReason::MaxTurnRequests));
    assert_eq!(m.phase(), Phase::Idle);
}

#[test]
fn cancellation_answers_every_outstanding_call() {
    let mut m = machine();
    prompt(&mut m, "go");
    feed(
        &mut m,
        calls(&[("t1", "a__run", json!({})), ("t2", "b__run", json!({}))]),
    );
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t2".into(),
            output: ToolOutput::text("real"),
        },
    );
    let effects = feed(&mut m, Input::Cancelled);
    assert_eq!(finish(&effects), Some(FinishReason::Cancelled));
    let tail = &m.history()[m.history().len() - 2..];
    assert_eq!(
        tail[0],
        Message::ToolResult {
            call_id: "t1".into(),
            output: ToolOutput::error("cancelled")
        }
    );
    assert_eq!(
        tail[1],
        Message::ToolResult {
            call_id: "t2".into(),
            output: ToolOutput::text("real")
        }
    );
    // The next prompt starts from a valid history.
    assert!(prompt(&mut m, "next").iter().any(is_call_llm));
}

#[test]
fn cancellation_during_a_hook_round_or_summary_ends_the_prompt() {
    let mut m = machine_with(Policy {
        max_context_tokens: 2_000,
        max_output_tokens: 500,
        ..policy()
    });
    prompt(&mut m, "go");
    feed(&mut m, end_turn());
    assert_eq!(m.phase(), Phase::AwaitingStop);
    assert_eq!(
        finish(&feed(&mut m, Input::Cancelled)),
        Some(FinishReason::Cancelled)
    );
    assert_eq!(m.phase(), Phase::Idle);
    // Late answers of the cancelled round are refused, not applied.
    assert!(m.handle(say("a", Hook::Stop, "late")).is_err());
    assert_eq!(m.counters().objections, 0);
    // A summary: the history is left as it was, and the late summary is refused.
    prompt(&mut m, &"x".repeat(8_000));
    let before = m.history().to_vec();
    assert_eq!(m.phase(), Phase::Summarizing);
    assert_eq!(
        finish(&feed(&mut m, Input::Cancelled)),
        Some(FinishReason::Cancelled)
    );
    assert_eq!(m.phase(), Phase::Idle);
    assert_eq!(m.history(), before);
    assert!(
        m.handle(reply("late summary", StopReason::EndTurn))
            .is_err()
    );
}

#[test]
fn a_post_compact_round_cut_by_a_cancel_is_asked_again_at_the_next_prompt() {
    let mut m = machine_with(Policy {
        max_context_tokens: 2_000,
        max_output_tokens: 500,
        ..policy()
    });
    prompt(&mut m, "task");
    feed(&mut m, calls(&[("t1", "c__run", json!({}))]));
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("x".repeat(8_000)),
        },
    );
    let effects = feed(&mut m, reply("the summary", StopReason::EndTurn));
    assert_eq!(hook_calls(&effects)[0].0, Hook::PostCompact);
    feed(&mut m, say("a", Hook::PostCompact, "lost?"));
    assert_eq!(
        finish(&feed(&mut m, Input::Cancelled)),
        Some(FinishReason::Cancelled)
    );
    // The next prompt asks `_PostCompact` before its first request, and injects the answers.
    let effects = prompt(&mut m, "next");
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::PostCompact, vec![server("a"), server("b")])]
    );
    assert!(!effects.iter().any(is_call_llm));
    feed(&mut m, say("a", Hook::PostCompact, "open: y"));
    let effects = feed(&mut m, say("b", Hook::PostCompact, ""));
    assert!(effects.iter().any(is_call_llm));
    let Some(Message::ToolResult { output, .. }) = m.history().last() else {
        panic!("expected the injected pair last: {:?}", m.history())
    };
    assert_eq!(
        output.joined_text(),
        r#"{"hook":"_PostCompact","server":"a","text":"open: y"}"#
    );
    // Asked once more only: the prompt after that goes straight to the model.
    feed(&mut m, reply("ok", StopReason::MaxTokens));
    assert!(prompt(&mut m, "third").iter().any(is_call_llm));
}

#[test]
fn unexpected_facts_are_refused_with_what_was_expected() {
    let mut m = machine();
    let err = m.handle(end_turn()).unwrap_err();
    assert_eq!(
        err,
        MachineError::Unexpected {
            phase: Phase::Idle,
            expected: &[InputKind::Prompted],
            got: InputKind::LlmReplied
        }
    );
    assert_eq!(
        err.to_string(),
        "unexpected llm_replied while idle: expected prompted"
    );
    prompt(&mut m, "go");
    assert!(
        m.handle(Input::Prompted {
            text: "again".into()
        })
        .is_err()
    );
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    let err = m
        .handle(Input::ToolFinished {
            id: "zz".into(),
            output: ToolOutput::text(""),
        })
        .unwrap_err();
    assert_eq!(err, MachineError::UnknownCall("zz".into()));
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text(""),
        },
    );
    let err = m
        .handle(Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text(""),
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            MachineError::Unexpected {
                phase: Phase::Prompting,
                expected,
                got: InputKind::ToolFinished,
            } if expected.contains(&InputKind::LlmReplied) && expected.contains(&InputKind::LlmFailed)
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "unexpected tool_finished while prompting: expected llm_replied or llm_failed"
    );
    feed(&mut m, end_turn());
    let err = m.handle(say("c", Hook::Stop, "x")).unwrap_err();
    assert_eq!(
        err,
        MachineError::UnexpectedHookAnswer {
            server: server("c"),
            hook: Hook::Stop
        }
    );
}

#[test]
fn closed_is_absorbing() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(&mut m, Input::Closed);
    assert_eq!(finish(&effects), Some(FinishReason::Cancelled));
    assert_eq!(m.phase(), Phase::Done);
    m.handle(Input::Closed).unwrap();
    assert_eq!(
        m.handle(Input::Prompted { text: "x".into() }),
        Err(MachineError::Closed {
            got: InputKind::Prompted
        })
    );
    assert!(drain(&mut m).is_empty());
}

#[test]
fn repeated_or_empty_call_ids_are_renamed_so_results_pair_exactly() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(
        &mut m,
        calls(&[
            ("x", "a__run", json!({})),
            ("x", "b__run", json!({})),
            ("", "c__run", json!({})),
        ]),
    );
    let Some(Effect::CallTools { calls }) = effects.last() else {
        panic!("{effects:?}")
    };
    let ids: HashSet<_> = calls.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.contains(&CallId::from("x")));
}

#[test]
fn a_paused_turn_is_asked_again() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(&mut m, reply("partial", StopReason::PauseTurn));
    assert!(effects.iter().any(is_call_llm));
    assert!(hook_calls(&effects).is_empty());
    assert_eq!(m.phase(), Phase::Prompting);
}

#[test]
fn calls_in_a_reply_cut_short_are_answered_unrun() {
    let mut m = machine();
    prompt(&mut m, "go");
    let mut input = calls(&[("t1", "a__run", json!({}))]);
    if let Input::LlmReplied { reply } = &mut input {
        reply.stop = StopReason::MaxTokens;
    }
    let effects = feed(&mut m, input);
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::CallTools { .. }))
    );
    assert_eq!(finish(&effects), Some(FinishReason::MaxTokens));
    assert!(
        matches!(m.history().last(), Some(Message::ToolResult { output, .. }) if output.is_error)
    );
}

#[test]
fn hook_context_reports_the_session_counters() {
    let mut m = machine_with(Policy {
        stop_max_rejections: 3,
        ..policy()
    });
    prompt(&mut m, "go");
    end_turn_with_answers(&mut m, "no", "");
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text(""),
        },
    );
    let effects = feed(&mut m, end_turn());
    let Some(Effect::CallHooks {
        context, timeout, ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    assert_eq!(*timeout, std::time::Duration::from_millis(2_500));
    assert_eq!(
        *context,
        HookContext {
            objections_so_far: 1,
            budget_left: 2,
            compactions: 0,
            agent: None,
        }
    );
}
