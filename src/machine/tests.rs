//! One test per rule, named after it. Property tests over random sessions live in
//! `tests/machine_props.rs`.

use std::collections::HashSet;

use serde_json::json;

use super::*;
use crate::hooks::{self, HookServers};

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

#[test]
fn hooks_are_never_offered_to_the_model() {
    for allow in [
        HookServers::All,
        HookServers::Off,
        HookServers::Named(vec![server("a")]),
    ] {
        let m = machine_with(Policy {
            hook_servers: allow,
            ..Policy::default()
        });
        let names: Vec<&str> = m.model_tools().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a__run", "b__run", "c__run"]);
    }
}

#[test]
fn a_model_call_to_a_hook_is_refused_as_unknown_and_not_run() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(
        &mut m,
        calls(&[("1", "a___Stop", json!({})), ("2", "_Stop", json!({}))]),
    );
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::CallTools { .. } | Effect::CallHooks { .. }))
    );
    assert!(
        effects.iter().any(is_call_llm),
        "the model is asked again at once"
    );
    let results: Vec<_> = m
        .history()
        .iter()
        .filter_map(|msg| match msg {
            Message::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ToolOutput::error("unknown tool: a___Stop"),
            ToolOutput::error("unknown tool: _Stop")
        ]
    );
}

#[test]
fn unknown_tools_and_non_object_arguments_are_answered_with_errors() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(
        &mut m,
        calls(&[
            ("1", "nope__run", json!({})),
            ("2", "a__run", json!("{broken")),
            ("3", "a__run", json!([1])),
            ("4", "b__run", json!({"x": 1})),
        ]),
    );
    let Some(Effect::CallTools { calls }) = effects
        .iter()
        .find(|e| matches!(e, Effect::CallTools { .. }))
    else {
        panic!("expected CallTools in {effects:?}");
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "b__run");
    feed(
        &mut m,
        Input::ToolFinished {
            id: "4".into(),
            output: ToolOutput::text("ok"),
        },
    );
    let texts: Vec<String> = m
        .history()
        .iter()
        .filter_map(|msg| match msg {
            Message::ToolResult { output, .. } => Some(output.joined_text()),
            _ => None,
        })
        .collect();
    assert_eq!(texts[0], "unknown tool: nope__run");
    assert!(
        texts[1].contains("not a JSON object") && texts[1].contains("{broken"),
        "{}",
        texts[1]
    );
    assert!(texts[2].contains("got an array"), "{}", texts[2]);
    assert_eq!(texts[3], "ok");
}

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

#[test]
fn over_budget_compacts_with_a_summary_then_post_compact() {
    let mut m = machine_with(Policy {
        max_context_tokens: 2_000,
        max_output_tokens: 500,
        ..policy()
    });
    prompt(&mut m, "the task");
    // A big tool result pushes the history over budget.
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("x".repeat(8_000)),
        },
    );
    let Some(Effect::CallLlm {
        purpose: Purpose::Summary { from },
        ..
    }) = effects.first()
    else {
        panic!("expected a summary request, got {effects:?}");
    };
    let request = m.request(Purpose::Summary { from: *from });
    assert!(
        request.tools.is_empty(),
        "a summary request offers no tools"
    );
    assert_eq!(request.instruction, Some(SUMMARY_INSTRUCTION));
    let effects = feed(&mut m, reply("we did x", StopReason::EndTurn));
    assert_eq!(
        m.history()[..2],
        [
            Message::user(format!("{SUMMARY_PREFIX}we did x")),
            Message::user("the task")
        ]
    );
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::PostCompact, vec![server("a"), server("b")])]
    );
    assert_eq!(m.counters().compactions, 1);
    feed(&mut m, say("a", Hook::PostCompact, "open: y"));
    let effects = feed(&mut m, say("b", Hook::PostCompact, ""));
    assert!(effects.iter().any(is_call_llm));
    assert_eq!(m.history().len(), 4, "summary, prompt, one hook pair");
    let Message::ToolResult { output, .. } = &m.history()[3] else {
        panic!()
    };
    assert_eq!(
        output.joined_text(),
        r#"{"hook":"_PostCompact","server":"a","text":"open: y"}"#
    );
}

#[test]
fn a_failed_summary_falls_back_to_dropping_the_oldest_turns() {
    let mut m = machine_with(Policy {
        max_context_tokens: 2_000,
        max_output_tokens: 500,
        ..policy()
    });
    // Over budget on its own, but with nothing older to drop: no compaction yet.
    let effects = prompt(&mut m, &"old ".repeat(2_000));
    assert!(effects.iter().any(is_call_llm));
    feed(&mut m, reply("ok", StopReason::MaxTokens));
    let effects = prompt(&mut m, "new task");
    assert!(
        matches!(
            effects[..],
            [Effect::CallLlm {
                purpose: Purpose::Summary { from: 1 },
                messages: 3,
                ..
            }]
        ),
        "{effects:?}"
    );
    assert_eq!(m.phase(), Phase::Summarizing);
    let effects = feed(
        &mut m,
        Input::LlmFailed {
            error: "overloaded".into(),
        },
    );
    assert_eq!(m.history(), [Message::user("new task")]);
    assert!(effects.contains(&Effect::Notify {
        notice: Notice::Compacted {
            summarized: false,
            messages_before: 3,
            messages_after: 1
        }
    }));
    assert_eq!(
        hook_calls(&effects).len(),
        1,
        "_PostCompact runs either way"
    );
}

#[test]
fn compaction_happens_at_most_once_between_replies() {
    let mut m = machine_with(Policy {
        max_context_tokens: 200,
        max_output_tokens: 100,
        ..policy()
    });
    // A prompt alone over budget: there is nothing older to drop, so no compaction.
    let effects = prompt(&mut m, &"x".repeat(4_000));
    assert!(effects.iter().any(is_call_llm));
    assert_eq!(m.counters().compactions, 0);
    feed(&mut m, reply("ok", StopReason::MaxTokens));
    // The next prompt is over budget with older turns to drop: one compaction, and even though
    // the fresh context is still over budget, the request that follows it is made, not a
    // second compaction.
    let effects = prompt(&mut m, &"y".repeat(4_000));
    assert!(matches!(
        effects[..],
        [Effect::CallLlm {
            purpose: Purpose::Summary { .. },
            ..
        }]
    ));
    let effects = feed(
        &mut m,
        reply("s".repeat(2_000).as_str(), StopReason::EndTurn),
    );
    assert_eq!(hook_calls(&effects)[0].0, Hook::PostCompact);
    feed(&mut m, say("a", Hook::PostCompact, ""));
    let effects = feed(&mut m, say("b", Hook::PostCompact, ""));
    assert!(effects.iter().any(is_call_llm), "{effects:?}");
    assert_eq!(m.counters().compactions, 1);
    // Once the model has replied, the next over-budget request may compact again.
    feed(&mut m, calls(&[("t1", "c__run", json!({}))]));
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("z".repeat(4_000)),
        },
    );
    assert!(matches!(
        effects[..],
        [Effect::CallLlm {
            purpose: Purpose::Summary { .. },
            ..
        }]
    ));
    assert_eq!(m.counters().compactions, 2);
}

#[test]
fn a_usage_of_zero_input_tokens_measures_nothing_and_leaves_the_byte_estimate() {
    // A budget of 1,000 tokens: the prompt (700) fits, the prompt with the result (1,200) does not.
    let mut m = machine_with(Policy {
        max_context_tokens: 1_100,
        max_output_tokens: 100,
        ..policy()
    });
    prompt(&mut m, &"p".repeat(2_800));
    let Input::LlmReplied { mut reply } = calls(&[("t1", "c__run", json!({}))]) else {
        unreachable!("calls() builds a reply")
    };
    reply.usage = Some(Usage {
        input_tokens: 0,
        output_tokens: 7,
        ..Usage::default()
    });
    feed(&mut m, Input::LlmReplied { reply });
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("r".repeat(2_000)),
        },
    );
    // Anchored on the zero, the estimate would be the result alone (500) and put compaction off.
    assert_eq!(m.counters().compactions, 1);
}

#[test]
fn the_context_estimate_adds_the_system_prompt_and_the_tool_catalog() {
    let system = "s".repeat(40);
    let tools = machine().sm.inner().tools.bytes;
    assert!(tools > 0, "the catalog offers tools");
    // Budget `budget` tokens, with or without the system prompt; the history is empty.
    let over = |system: Option<&str>, budget: u64| {
        let mut m = Machine::new(
            Policy {
                max_context_tokens: budget + 100,
                max_output_tokens: 100,
                ..policy()
            },
            system.map(str::to_owned),
        );
        m.handle(Input::CatalogChanged { catalog: catalog() })
            .unwrap();
        m.sm.inner().over_budget()
    };
    let fixed = (system.len() + tools).div_ceil(BYTES_PER_TOKEN as usize) as u64;
    assert!(
        !over(Some(&system), fixed),
        "the two fit a budget of their sum"
    );
    assert!(over(Some(&system), fixed - 1), "nor less");
    let tools = tools.div_ceil(BYTES_PER_TOKEN as usize) as u64;
    assert!(
        over(None, tools - 1),
        "without a system prompt the catalog still counts"
    );
}

/// The first effect after a tool result of `content`, with `media` and a context budget of
/// `budget` tokens.
fn after_binary_result(media: Media, budget: u64, content: Vec<Content>) -> Vec<Effect> {
    let mut m = machine_with(Policy {
        max_context_tokens: budget + 500,
        max_output_tokens: 500,
        media,
        ..policy()
    });
    prompt(&mut m, "look");
    feed(&mut m, calls(&[("t1", "c__run", json!({}))]));
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput {
                content,
                is_error: false,
            },
        },
    )
}

fn compacts(effects: &[Effect]) -> bool {
    matches!(
        effects.first(),
        Some(Effect::CallLlm {
            purpose: Purpose::Summary { .. },
            ..
        })
    )
}

#[test]
fn images_and_blobs_count_as_the_dialect_sends_them() {
    let png = || Content::Image {
        mime_type: "image/png".into(),
        data: "A".repeat(400_000),
    };
    let blob = Content::Resource {
        uri: "file:///shot.bin".into(),
        mime_type: Some("application/octet-stream".into()),
        text: None,
        blob: Some("B".repeat(400_000)),
    };
    let sends_png = || Media {
        image_types: vec!["image/png".into()],
        max_image_tokens: 1_600,
    };
    // A dialect that describes them: a one-line description each, far under the budget.
    assert!(!compacts(&after_binary_result(
        Media::default(),
        1_500,
        vec![png(), blob.clone()]
    )));
    // A dialect that sends the image: it costs at most the provider's per-image tokens ...
    assert!(!compacts(&after_binary_result(
        sends_png(),
        5_000,
        vec![png(), blob]
    )));
    // ... which still counts: over a budget smaller than that, the history is compacted.
    assert!(compacts(&after_binary_result(
        sends_png(),
        1_500,
        vec![png()]
    )));
    // An image type the dialect does not send is described.
    let tiff = Content::Image {
        mime_type: "image/tiff".into(),
        data: "C".repeat(400_000),
    };
    assert!(!compacts(&after_binary_result(
        sends_png(),
        1_500,
        vec![tiff]
    )));
}

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

#[test]
fn session_start_is_asked_once_before_the_first_request_and_injected_after_the_prompt() {
    let mut m = machine_with_every_hook(policy());
    let effects = prompt(&mut m, "first");
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::SessionStart, vec![server("a"), server("b")])]
    );
    assert_eq!(m.phase(), Phase::AwaitingHook(Hook::SessionStart));
    let effects = both(&mut m, Hook::SessionStart, None, "2 open todos", "");
    // `_UserPromptSubmit` follows, then the request.
    assert_eq!(hook_calls(&effects)[0].0, Hook::UserPromptSubmit);
    let effects = both(&mut m, Hook::UserPromptSubmit, Some(0), "", "");
    assert!(effects.iter().any(is_call_llm));
    assert_eq!(m.history()[0], Message::user("first"));
    assert_eq!(
        result_text(&m.history()[2]),
        hook_body(Hook::SessionStart, "a", "2 open todos")
    );
    assert_eq!(m.history().len(), 3);
    // Never again in this session.
    feed(&mut m, reply("ok", StopReason::MaxTokens));
    let effects = prompt(&mut m, "second");
    assert_eq!(hook_calls(&effects)[0].0, Hook::UserPromptSubmit);
}

#[test]
fn user_prompt_submit_gets_the_prompt_and_its_answer_follows_it() {
    let mut m = machine_with_every_hook(policy());
    prompt(&mut m, "first");
    both(&mut m, Hook::SessionStart, None, "", "");
    let effects = m.handle(Input::Cancelled).map(|()| drain(&mut m)).unwrap();
    assert_eq!(finish(&effects), Some(FinishReason::Cancelled));
    let effects = prompt(&mut m, "fix the bug");
    let Some(Effect::CallHooks {
        hook: Hook::UserPromptSubmit,
        subjects,
        ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    assert_eq!(subjects, &vec![json!({"prompt": "fix the bug"})]);
    let effects = both(&mut m, Hook::UserPromptSubmit, Some(0), "", "see ISSUE-7");
    assert!(effects.iter().any(is_call_llm));
    let history = m.history();
    assert_eq!(history[history.len() - 3], Message::user("fix the bug"));
    assert_eq!(
        result_text(&history[history.len() - 1]),
        hook_body(Hook::UserPromptSubmit, "b", "see ISSUE-7")
    );
    assert!(effects.contains(&Effect::Notify {
        notice: Notice::HookInjected {
            hook: Hook::UserPromptSubmit,
            server: server("b"),
            text: "see ISSUE-7".into()
        }
    }));
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

#[test]
fn pre_tool_use_gates_every_call_of_a_reply_in_one_round_and_a_denied_call_never_runs() {
    let mut m = prompted_with_every_hook(policy());
    let effects = feed(
        &mut m,
        calls(&[
            ("t1", "a__run", json!({"x": 1})),
            ("t2", "c__run", json!({})),
            ("t3", "nowhere__run", json!({})),
        ]),
    );
    // One round: each server once per call that would run (the unknown one is refused first).
    let Some(Effect::CallHooks {
        hook: Hook::PreToolUse,
        servers,
        subjects,
        ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    assert_eq!(servers, &vec![server("a"), server("b")]);
    assert_eq!(
        subjects,
        &vec![
            json!({"tool": "a__run", "arguments": {"x": 1}}),
            json!({"tool": "c__run", "arguments": {}}),
        ]
    );
    // Both servers deny the first call; nobody denies the second.
    feed(&mut m, answer("b", Hook::PreToolUse, Some(0), "no x"));
    feed(&mut m, answer("a", Hook::PreToolUse, Some(1), ""));
    feed(&mut m, answer("a", Hook::PreToolUse, Some(0), "never"));
    let effects = feed(&mut m, answer("b", Hook::PreToolUse, Some(1), " "));
    let Some(Effect::CallTools { calls }) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, CallId::from("t2"));
    let denied = effects
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Notify {
                    notice: Notice::ToolDenied { .. }
                }
            )
        })
        .count();
    assert_eq!(denied, 2);
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t2".into(),
            output: ToolOutput::text("ran"),
        },
    );
    assert_eq!(hook_calls(&effects)[0].0, Hook::PostToolUse);
    // The denied call is answered exactly once, with every denial, as an error.
    let results: Vec<&Message> = m
        .history()
        .iter()
        .filter(|msg| matches!(msg, Message::ToolResult { call_id, .. } if call_id.0 == "t1"))
        .collect();
    assert_eq!(results.len(), 1);
    let Message::ToolResult { output, .. } = results[0] else {
        unreachable!()
    };
    assert!(output.is_error);
    assert_eq!(
        output.content,
        vec![
            Content::Text {
                text: hook_body(Hook::PreToolUse, "a", "never")
            },
            Content::Text {
                text: hook_body(Hook::PreToolUse, "b", "no x")
            },
        ]
    );
}

#[test]
fn pre_tool_use_failing_open_denies_nothing() {
    let mut m = prompted_with_every_hook(policy());
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    feed(
        &mut m,
        Input::HookAnswered {
            server: server("a"),
            hook: Hook::PreToolUse,
            reply: HookReply::TimedOut,
            subject: Some(0),
        },
    );
    let effects = feed(
        &mut m,
        Input::HookAnswered {
            server: server("b"),
            hook: Hook::PreToolUse,
            reply: HookReply::ErrorResult {
                text: "boom".into(),
            },
            subject: Some(0),
        },
    );
    assert!(matches!(effects.last(), Some(Effect::CallTools { calls }) if calls.len() == 1));
}

#[test]
fn post_tool_use_sees_each_output_and_its_answers_follow_the_results() {
    let mut m = prompted_with_every_hook(policy());
    feed(
        &mut m,
        calls(&[("t1", "a__run", json!({})), ("t2", "b__run", json!({}))]),
    );
    both(&mut m, Hook::PreToolUse, Some(0), "", "");
    both(&mut m, Hook::PreToolUse, Some(1), "", "");
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t2".into(),
            output: ToolOutput::error("bad"),
        },
    );
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("good"),
        },
    );
    let Some(Effect::CallHooks {
        hook: Hook::PostToolUse,
        subjects,
        ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    assert_eq!(
        subjects,
        &vec![
            json!({"tool": "a__run", "arguments": {}, "isError": false, "output": "good"}),
            json!({"tool": "b__run", "arguments": {}, "isError": true, "output": "bad"}),
        ]
    );
    feed(&mut m, answer("a", Hook::PostToolUse, Some(1), "retry b"));
    feed(&mut m, answer("b", Hook::PostToolUse, Some(0), ""));
    feed(&mut m, answer("a", Hook::PostToolUse, Some(0), ""));
    let effects = feed(&mut m, answer("b", Hook::PostToolUse, Some(1), ""));
    assert!(effects.iter().any(is_call_llm));
    let history = m.history();
    assert_eq!(result_text(&history[history.len() - 3]), "bad");
    assert_eq!(
        result_text(&history[history.len() - 1]),
        hook_body(Hook::PostToolUse, "a", "retry b")
    );
}

#[test]
fn pre_compact_guidance_reaches_only_the_summary_request() {
    let mut m = prompted_with_every_hook(Policy {
        max_context_tokens: 2_000,
        max_output_tokens: 500,
        ..policy()
    });
    feed(&mut m, calls(&[("t1", "c__run", json!({}))]));
    both(&mut m, Hook::PreToolUse, Some(0), "", "");
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("x".repeat(8_000)),
        },
    );
    let effects = both(&mut m, Hook::PostToolUse, Some(0), "", "");
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::PreCompact, vec![server("a"), server("b")])]
    );
    let before = m.history().len();
    let effects = both(&mut m, Hook::PreCompact, None, "keep the todo ids", "");
    let Some(Effect::CallLlm {
        purpose: purpose @ Purpose::Summary { .. },
        ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    let instruction = m.request(*purpose).instruction.unwrap().to_owned();
    assert!(instruction.starts_with(SUMMARY_INSTRUCTION));
    assert!(instruction.contains("keep the todo ids"));
    assert_eq!(
        m.history().len(),
        before,
        "guidance never enters the history"
    );
    assert!(
        m.request(Purpose::Turn)
            .messages
            .iter()
            .all(|msg| !format!("{msg:?}").contains("keep the todo ids"))
    );
}

#[test]
fn session_end_is_called_once_at_close_and_its_answers_are_ignored() {
    let mut m = prompted_with_every_hook(policy());
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    // Closing mid-prompt: the gated call is answered, the prompt finishes, then `_SessionEnd`.
    let effects = feed(&mut m, Input::Closed);
    assert_eq!(finish(&effects), Some(FinishReason::Cancelled));
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::SessionEnd, vec![server("a"), server("b")])]
    );
    assert!(matches!(
        m.history().last(),
        Some(Message::ToolResult { output, .. }) if output.joined_text() == "cancelled"
    ));
    assert!(feed(&mut m, Input::Closed).is_empty());
    let effects = both(&mut m, Hook::SessionEnd, None, "bye", "objection!");
    assert!(effects.is_empty(), "{effects:?}");
    assert_eq!(m.phase(), Phase::Done);
    assert!(feed(&mut m, Input::Closed).is_empty());
}

#[test]
fn closing_an_idle_session_calls_session_end_and_a_cancel_stops_waiting() {
    let mut m = machine_with_every_hook(policy());
    let effects = feed(&mut m, Input::Closed);
    assert_eq!(hook_calls(&effects)[0].0, Hook::SessionEnd);
    assert!(finish(&effects).is_none());
    feed(&mut m, Input::Cancelled);
    assert_eq!(m.phase(), Phase::Done);
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

#[test]
fn a_machine_debugs_as_its_phase_history_counters_and_pending_orders() {
    let mut m = machine();
    m.handle(Input::Prompted {
        text: "hello".into(),
    })
    .unwrap();
    let shown = format!("{m:?}");
    assert!(shown.starts_with("Machine {"), "{shown}");
    for field in [
        "phase: Prompting",
        "messages: 1",
        "counters: Counters {",
        "pending_effects: 1",
    ] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
}

/// The events of the machine's own targets, each as its `field=value` pairs in order.
#[derive(Clone, Default)]
struct Transitions(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Transitions {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(Vec<String>);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
                self.0.push(format!("{}={value:?}", field.name()));
            }
        }
        if !event.metadata().target().starts_with("hookloop::machine") {
            return;
        }
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0.join(" "));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn each_transition_is_traced_with_the_phases_it_joins() {
    let session = || {
        let mut m = machine();
        prompt(&mut m, "hello");
        feed(&mut m, reply("hi", StopReason::EndTurn));
    };
    let seen = Transitions::default();
    tracing::subscriber::with_default(seen.clone(), || {
        // A callsite caches its interest when first hit, asking that thread's subscriber while
        // only one exists: another test thread may have cached "never" for the line under test.
        // The first session registers every line on its path; the cache is then recomputed
        // under this subscriber, and the second session is the one judged.
        session();
        tracing::callsite::rebuild_interest_cache();
        seen.0.lock().unwrap().clear();
        session();
    });
    let seen = seen.0.lock().unwrap();
    for transition in [
        "message=transition from=idle to=prompting",
        "message=transition from=prompting to=awaiting _Stop",
    ] {
        assert!(
            seen.iter().any(|line| line == transition),
            "{transition} in {seen:#?}"
        );
    }
}

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
