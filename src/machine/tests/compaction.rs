//! Compaction: the context estimate, the summary, and `_PreCompact`/`_PostCompact` around it.

use super::*;

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
