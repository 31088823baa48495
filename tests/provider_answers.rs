//! What the machine makes of what providers report: a usage block that measures nothing.

use hookloop::machine::{Effect, Input, LlmReply, Purpose, StopReason, ToolCall, Usage};
use hookloop::{Machine, Policy};
use serde_json::json;

/// The purpose of the next model request after a reply that reported `usage`, in a session
/// whose prompt alone is over the context budget and whose reply adds little.
fn next_request_after(usage: Usage) -> Purpose {
    let policy = Policy {
        max_context_tokens: 1000,
        max_output_tokens: 200,
        ..Policy::default()
    };
    let mut machine = Machine::new(policy, None);
    // 4,000 bytes: about 1,000 tokens by the byte estimate, over the budget of 800.
    machine
        .handle(Input::Prompted {
            text: "x".repeat(4000),
        })
        .unwrap();
    assert!(matches!(
        machine.poll_effect(),
        Some(Effect::CallLlm {
            purpose: Purpose::Turn,
            ..
        })
    ));
    let reply = LlmReply {
        text: String::new(),
        tool_calls: vec![ToolCall {
            id: "c1".into(),
            name: "nowhere__tool".into(),
            arguments: json!({}),
        }],
        stop: StopReason::ToolUse,
        usage: Some(usage),
    };
    machine.handle(Input::LlmReplied { reply }).unwrap();
    // The unknown tool is answered by the machine itself; the next order is a model request.
    std::iter::from_fn(|| machine.poll_effect())
        .find_map(|effect| match effect {
            Effect::CallLlm { purpose, .. } => Some(purpose),
            _ => None,
        })
        .expect("a next model request")
}

#[test]
fn a_usage_block_with_zero_input_tokens_keeps_the_byte_estimate() {
    let zero = Usage {
        input_tokens: 0,
        output_tokens: 7,
        ..Usage::default()
    };
    assert!(
        matches!(next_request_after(zero), Purpose::Summary { .. }),
        "a zero usage must not erase the estimate of a history over budget"
    );
    // A real measurement still anchors the estimate: the provider says the prompt is small.
    let measured = Usage {
        input_tokens: 100,
        output_tokens: 7,
        ..Usage::default()
    };
    assert_eq!(next_request_after(measured), Purpose::Turn);
}
