//! `_Stop`: when it is asked, objections, the budget, the latch, timeouts and kills.

use super::*;

#[test]
fn stop_is_consulted_only_on_a_genuine_end_of_turn() {
    for stop in [StopReason::EndTurn, StopReason::StopSequence] {
        let mut m = machine();
        prompt(&mut m, "go");
        assert_eq!(
            hook_calls(&feed(&mut m, reply("x", stop.clone()))).len(),
            1,
            "{stop:?}"
        );
    }
    for (stop, reason) in [
        (StopReason::MaxTokens, FinishReason::MaxTokens),
        (StopReason::Refusal, FinishReason::Refusal),
        (StopReason::ContentFilter, FinishReason::Refusal),
    ] {
        let mut m = machine();
        prompt(&mut m, "go");
        let effects = feed(&mut m, reply("x", stop.clone()));
        assert!(hook_calls(&effects).is_empty(), "{stop:?}");
        assert_eq!(finish(&effects), Some(reason));
    }
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(
        &mut m,
        Input::LlmFailed {
            error: "boom".into(),
        },
    );
    assert!(hook_calls(&effects).is_empty());
    assert_eq!(
        finish(&effects),
        Some(FinishReason::Failed {
            error: "boom".into()
        })
    );
}

#[test]
fn an_unknown_stop_reason_ends_the_prompt_without_stop_and_answers_its_calls_unrun() {
    let other = || StopReason::Other("model_context_window_exceeded_v2".into());
    let expected = FinishReason::OtherStop {
        stop_reason: "model_context_window_exceeded_v2".into(),
    };
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(&mut m, reply("x", other()));
    assert!(hook_calls(&effects).is_empty(), "{effects:?}");
    assert_eq!(finish(&effects), Some(expected.clone()));
    assert_eq!(m.phase(), Phase::Idle);
    // With tool calls: nothing runs, every call is answered, and `_Stop` is not asked.
    prompt(&mut m, "again");
    let mut with_calls = calls(&[("t1", "a__run", json!({}))]);
    if let Input::LlmReplied { reply } = &mut with_calls {
        reply.stop = other();
    }
    let effects = feed(&mut m, with_calls);
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::CallTools { .. } | Effect::CallHooks { .. }))
    );
    assert_eq!(finish(&effects), Some(expected));
    assert!(matches!(
        m.history().last(),
        Some(Message::ToolResult { output, .. }) if output.is_error
    ));
}

#[test]
fn hooks_are_off_unless_the_allowlist_names_the_server() {
    let mut m = machine_with(Policy {
        hook_servers: HookServers::Off,
        ..Policy::default()
    });
    prompt(&mut m, "go");
    let effects = feed(&mut m, end_turn());
    assert!(hook_calls(&effects).is_empty());
    assert_eq!(finish(&effects), Some(FinishReason::EndTurn));

    let mut m = machine_with(Policy {
        hook_servers: HookServers::Named(vec![server("b")]),
        ..Policy::default()
    });
    prompt(&mut m, "go");
    assert_eq!(
        hook_calls(&feed(&mut m, end_turn())),
        vec![(Hook::Stop, vec![server("b")])]
    );
}

#[test]
fn objections_are_injected_as_json_tool_results_in_server_order() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(&mut m, end_turn());
    assert_eq!(hook_calls(&effects).len(), 1);
    // b answers first; injection still follows configuration order.
    feed(&mut m, say("b", Hook::Stop, " tests are red \n"));
    let effects = feed(&mut m, say("a", Hook::Stop, "2 open: x; y"));
    assert!(effects.iter().any(is_call_llm));
    assert_eq!(m.phase(), Phase::Objected);
    assert_eq!(
        m.counters().objections,
        1,
        "one round counts once, however many servers object"
    );
    let tail = &m.history()[m.history().len() - 4..];
    let Message::Assistant { tool_calls, .. } = &tail[0] else {
        panic!("{tail:?}")
    };
    assert_eq!(tool_calls[0].name, "a___Stop");
    assert_eq!(tool_calls[0].arguments, json!({}));
    let Message::ToolResult { call_id, output } = &tail[1] else {
        panic!("{tail:?}")
    };
    assert_eq!(call_id, &tool_calls[0].id);
    assert_eq!(
        output.joined_text(),
        r#"{"hook":"_Stop","server":"a","text":"2 open: x; y"}"#
    );
    let Message::ToolResult { output, .. } = &tail[3] else {
        panic!("{tail:?}")
    };
    assert_eq!(
        output.joined_text(),
        r#"{"hook":"_Stop","server":"b","text":"tests are red"}"#
    );
}

#[test]
fn an_empty_or_blank_answer_is_no_objection() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = end_turn_with_answers(&mut m, "", " \n\t ");
    assert_eq!(finish(&effects), Some(FinishReason::EndTurn));
    assert_eq!(m.counters().objections, 0);
    assert_eq!(m.phase(), Phase::Idle);
}

#[test]
fn timeouts_errors_and_failures_fail_open() {
    let mut m = machine();
    prompt(&mut m, "go");
    feed(&mut m, end_turn());
    let e1 = feed(&mut m, hook_reply("a", Hook::Stop, HookReply::TimedOut));
    assert!(e1.iter().any(|e| matches!(
        e,
        Effect::Notify {
            notice: Notice::HookFailedOpen { .. }
        }
    )));
    let e2 = feed(
        &mut m,
        hook_reply(
            "b",
            Hook::Stop,
            HookReply::ErrorResult {
                text: "objecting!".into(),
            },
        ),
    );
    assert_eq!(
        finish(&e2),
        Some(FinishReason::EndTurn),
        "an isError result's text is not an objection"
    );

    let mut m = machine();
    prompt(&mut m, "go");
    feed(&mut m, end_turn());
    feed(
        &mut m,
        hook_reply(
            "a",
            Hook::Stop,
            HookReply::Failed {
                error: "broken pipe".into(),
            },
        ),
    );
    let effects = feed(&mut m, hook_reply("b", Hook::Stop, HookReply::TimedOut));
    assert_eq!(finish(&effects), Some(FinishReason::EndTurn));
}

#[test]
fn a_skipped_server_is_no_objection_no_timeout_and_a_notice() {
    let mut m = machine();
    prompt(&mut m, "go");
    feed(&mut m, end_turn());
    // `a` timed out once; a skipped round between two timeouts is not a second one.
    feed(&mut m, hook_reply("a", Hook::Stop, HookReply::TimedOut));
    feed(&mut m, say("b", Hook::Stop, ""));
    prompt(&mut m, "again");
    feed(&mut m, end_turn());
    let skipped = HookReply::Skipped {
        reason: "it is restarting".into(),
    };
    let effects = feed(&mut m, hook_reply("a", Hook::Stop, skipped));
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Notify {
            notice: Notice::HookSkipped { server, reason, .. }
        } if server.as_str() == "a" && reason == "it is restarting"
    )));
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::KillServer { .. }))
    );
    let effects = feed(&mut m, say("b", Hook::Stop, ""));
    assert_eq!(finish(&effects), Some(FinishReason::EndTurn));
    assert_eq!(m.counters().objections, 0);
    assert_eq!(
        m.counters().consecutive_timeouts.get(&server("a")),
        Some(&1)
    );
}

#[test]
fn the_budget_is_session_wide_and_survives_across_prompts() {
    let mut m = machine_with(Policy {
        stop_max_rejections: 2,
        ..policy()
    });
    for _ in 0..2 {
        prompt(&mut m, "go");
        let effects = end_turn_with_answers(&mut m, "no", "");
        assert!(effects.iter().any(is_call_llm));
        // The model works (tool call), then ends again: that clears the latch and gets its
        // own `_Stop` round only while budget remains.
        let effects = feed(&mut m, end_turn());
        assert_eq!(finish(&effects), Some(FinishReason::EndTurn));
    }
    assert_eq!(m.counters().objections, 2);
    prompt(&mut m, "third");
    let effects = feed(&mut m, end_turn());
    assert!(
        hook_calls(&effects).is_empty(),
        "a spent budget is never asked again"
    );
    assert!(effects.contains(&Effect::Notify {
        notice: Notice::StopSkipped {
            reason: SkipReason::BudgetSpent
        }
    }));
    assert_eq!(finish(&effects), Some(FinishReason::EndTurn));
}

#[test]
fn budget_zero_never_calls_stop() {
    let mut m = machine_with(Policy {
        stop_max_rejections: 0,
        ..policy()
    });
    prompt(&mut m, "go");
    let effects = feed(&mut m, end_turn());
    assert!(hook_calls(&effects).is_empty());
    assert_eq!(finish(&effects), Some(FinishReason::EndTurn));
    // `_Stop` is off, not spent: nothing says it was skipped.
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Notify { .. })),
        "{effects:?}"
    );
}

#[test]
fn a_second_end_turn_right_after_an_objection_ends_the_prompt() {
    let mut m = machine();
    prompt(&mut m, "go");
    end_turn_with_answers(&mut m, "open todos", "");
    let effects = feed(&mut m, end_turn());
    assert!(hook_calls(&effects).is_empty());
    assert!(effects.contains(&Effect::Notify {
        notice: Notice::StopSkipped {
            reason: SkipReason::DeclinedObjection
        }
    }));
    assert_eq!(finish(&effects), Some(FinishReason::EndTurn));
    assert_eq!(m.counters().objections, 1);
}

#[test]
fn tool_calls_after_an_objection_clear_the_latch() {
    let mut m = machine();
    prompt(&mut m, "go");
    end_turn_with_answers(&mut m, "open todos", "");
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    assert_eq!(m.phase(), Phase::RunningTools);
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("done"),
        },
    );
    assert!(effects.iter().any(is_call_llm));
    assert_eq!(m.phase(), Phase::Prompting);
    let effects = feed(&mut m, end_turn());
    assert_eq!(
        hook_calls(&effects).len(),
        1,
        "a new end of turn after work is asked about again"
    );
}

#[test]
fn the_second_consecutive_timeout_kills_the_server() {
    let mut m = machine_with(Policy {
        stop_max_rejections: 10,
        ..policy()
    });
    let kills = |effects: &[Effect]| {
        effects
            .iter()
            .filter(|e| matches!(e, Effect::KillServer { .. }))
            .count()
    };
    prompt(&mut m, "go");
    feed(&mut m, end_turn());
    assert_eq!(
        kills(&feed(
            &mut m,
            hook_reply("a", Hook::Stop, HookReply::TimedOut)
        )),
        0
    );
    feed(&mut m, say("b", Hook::Stop, ""));
    prompt(&mut m, "again");
    feed(&mut m, end_turn());
    let effects = feed(&mut m, hook_reply("a", Hook::Stop, HookReply::TimedOut));
    assert_eq!(
        effects
            .iter()
            .find(|e| matches!(e, Effect::KillServer { .. })),
        Some(&Effect::KillServer {
            server: server("a")
        })
    );
    feed(&mut m, say("b", Hook::Stop, ""));
    // After the kill the count starts over: one more timeout is tolerated.
    prompt(&mut m, "third");
    feed(&mut m, end_turn());
    assert_eq!(
        kills(&feed(
            &mut m,
            hook_reply("a", Hook::Stop, HookReply::TimedOut)
        )),
        0
    );
}

#[test]
fn a_good_answer_resets_the_timeout_count() {
    let mut m = machine_with(Policy {
        stop_max_rejections: 10,
        ..policy()
    });
    for answer in [
        HookReply::TimedOut,
        HookReply::Text {
            text: String::new(),
        },
        HookReply::TimedOut,
    ] {
        prompt(&mut m, "go");
        feed(&mut m, end_turn());
        let effects = feed(&mut m, hook_reply("a", Hook::Stop, answer));
        assert!(
            !effects
                .iter()
                .any(|e| matches!(e, Effect::KillServer { .. }))
        );
        feed(&mut m, say("b", Hook::Stop, ""));
    }
}
