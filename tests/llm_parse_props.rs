//! The providers' answer parsers take untrusted bytes: whatever comes, they return a reply or
//! an error, never a panic. Inputs are random bytes, and real answers cut or corrupted at a
//! random point.

use std::sync::LazyLock;

use hookloop::llm::{anthropic, openai};
use proptest::prelude::*;
use serde_json::json;

static OPENAI: LazyLock<Vec<u8>> = LazyLock::new(openai_answer);
static ANTHROPIC: LazyLock<Vec<u8>> = LazyLock::new(anthropic_answer);

fn openai_answer() -> Vec<u8> {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Reading.", "refusal": null,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "fs__read", "arguments": "{\"path\":\"a\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "fs__read", "arguments": "{bad"}}
            ]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}
    })
    .to_string()
    .into_bytes()
}

fn anthropic_answer() -> Vec<u8> {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "fs__read", "input": {"path": "a"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 1}
    })
    .to_string()
    .into_bytes()
}

/// The answer, cut at `cut` (as a fraction) and with byte `at` replaced by `byte`.
fn damage(answer: &[u8], cut: f64, at: f64, byte: u8) -> Vec<u8> {
    let mut answer = answer.to_vec();
    let len = answer.len();
    let i = ((len as f64) * at) as usize % len;
    answer[i] = byte;
    answer.truncate(((len as f64) * cut) as usize);
    answer
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = openai::parse_response(&bytes);
        let _ = anthropic::parse_response(&bytes);
    }

    #[test]
    fn damaged_answers_never_panic(cut in 0.0..=1.0f64, at in 0.0..1.0f64, byte in any::<u8>()) {
        let _ = openai::parse_response(&damage(&OPENAI, cut, at, byte));
        let _ = anthropic::parse_response(&damage(&ANTHROPIC, cut, at, byte));
    }
}

#[test]
fn the_undamaged_answers_parse() {
    let reply = openai::parse_response(&openai_answer()).unwrap();
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(reply.tool_calls[1].arguments, json!("{bad"));
    let reply = anthropic::parse_response(&anthropic_answer()).unwrap();
    assert_eq!(reply.usage.unwrap().input_tokens, 16);
}
