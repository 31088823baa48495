//! Whole Messages answers: what the dialect sends when a reply is not streamed, and what the
//! stream decoder assembles; stop reasons, usage and tool input are mapped here only.

use serde::Deserialize;
use serde_json::Value;

use crate::llm::Parsed;
use crate::machine::{CallId, LlmReply, StopReason, ToolCall, Usage};
use crate::ports::{LlmError, ResponseFault};
use crate::text::{Cut, cut};

/// Parses a Messages answer. Never panics, whatever the bytes.
pub fn parse_response(body: &[u8]) -> Result<LlmReply, LlmError> {
    parse_answer(body).map(|parsed| parsed.reply)
}

/// [`parse_response`], with the model the answer names.
pub(crate) fn parse_answer(body: &[u8]) -> Result<Parsed, LlmError> {
    let response: MessagesResponse = serde_json::from_slice(body).map_err(|e| {
        LlmError::InvalidResponse(ResponseFault::Unparsable {
            expected: "a message",
            error: e.to_string(),
            began: cut(
                &String::from_utf8_lossy(body),
                200,
                Cut::Chars { total: true },
            ),
        })
    })?;
    if response.kind.as_deref() == Some("error") || response.error.is_some() {
        let message = response
            .error
            .as_ref()
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Err(LlmError::InvalidResponse(ResponseFault::ProviderError {
            message: cut(message, 512, Cut::Chars { total: true }),
        }));
    }
    let Some(content) = response.content else {
        return Err(LlmError::InvalidResponse(ResponseFault::NoContent));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block {
            ResponseBlock::Text { text: segment } => text.push_str(&segment),
            ResponseBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id: CallId(id),
                name,
                arguments: input,
            }),
            // Thinking and server-tool blocks: nothing the machine acts on.
            ResponseBlock::Other => {}
        }
    }
    let stop = match response.stop_reason.as_deref() {
        Some("end_turn") => StopReason::EndTurn,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
        Some("tool_use") => StopReason::ToolUse,
        Some("refusal") => StopReason::Refusal,
        Some("pause_turn") => StopReason::PauseTurn,
        // The machine decides what an unknown reason means.
        Some(other) => StopReason::Other(other.to_owned()),
        None => StopReason::EndTurn,
    };
    let usage = response.usage.map(|u| {
        let cache_read_tokens = u.cache_read_input_tokens.unwrap_or(0);
        let cache_creation_tokens = u.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: u
                .input_tokens
                .saturating_add(cache_read_tokens)
                .saturating_add(cache_creation_tokens),
            output_tokens: u.output_tokens,
            cache_read_tokens,
            cache_creation_tokens,
        }
    });
    Ok(Parsed {
        reply: LlmReply {
            text,
            tool_calls,
            stop,
            usage,
        },
        model: response.model,
    })
}

#[derive(Deserialize)]
struct MessagesResponse {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Option<Vec<ResponseBlock>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<ResponseUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResponseBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct ResponseUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> LlmReply {
        parse_response(value.to_string().as_bytes()).unwrap()
    }

    fn message(content: Value, stop: &str) -> Value {
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
               "content": content, "stop_reason": stop, "stop_sequence": null,
               "usage": {"input_tokens": 10, "output_tokens": 5}})
    }

    #[test]
    fn stop_reasons_map() {
        let cases = [
            ("end_turn", StopReason::EndTurn),
            ("stop_sequence", StopReason::StopSequence),
            ("max_tokens", StopReason::MaxTokens),
            ("model_context_window_exceeded", StopReason::MaxTokens),
            ("tool_use", StopReason::ToolUse),
            ("refusal", StopReason::Refusal),
            ("pause_turn", StopReason::PauseTurn),
            ("something_new", StopReason::Other("something_new".into())),
        ];
        for (reason, stop) in cases {
            let got = parse(message(json!([{"type": "text", "text": "x"}]), reason));
            assert_eq!(got.stop, stop, "{reason}");
        }
    }

    #[test]
    fn usage_counts_the_whole_prompt() {
        let mut value = message(json!([]), "end_turn");
        value["usage"] = json!({"input_tokens": 10, "output_tokens": 5,
            "cache_creation_input_tokens": 200, "cache_read_input_tokens": 3000});
        assert_eq!(
            parse(value).usage,
            Some(Usage {
                input_tokens: 3210,
                output_tokens: 5,
                cache_read_tokens: 3000,
                cache_creation_tokens: 200
            })
        );
        let mut nulls = message(json!([]), "end_turn");
        nulls["usage"] = json!({"input_tokens": 10, "output_tokens": 5,
            "cache_creation_input_tokens": null, "cache_read_input_tokens": null});
        assert_eq!(parse(nulls).usage.unwrap().input_tokens, 10);
    }

    #[test]
    fn unknown_blocks_are_skipped_and_text_is_joined() {
        let got = parse(message(
            json!([
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "a"},
                {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}},
                {"type": "text", "text": "b"},
                {"type": "tool_use", "id": "t1", "name": "fs__read", "input": {"p": 1}}
            ]),
            "tool_use",
        ));
        assert_eq!(got.text, "ab");
        assert_eq!(got.tool_calls.len(), 1);
        assert_eq!(got.tool_calls[0].arguments, json!({"p": 1}));
    }

    #[test]
    fn bad_answers_are_errors_that_say_why() {
        let cases: [(&[u8], &str); 5] = [
            (b"{", "not a message"),
            (b"Bad Gateway", "the answer began: \"Bad Gateway\""),
            (br#"{"type": "message"}"#, "no content"),
            (
                br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
                "Overloaded",
            ),
            (br#"{"content": [{"type": "text"}]}"#, "not a message"),
        ];
        for (body, expected) in cases {
            let err = parse_response(body).unwrap_err();
            assert!(matches!(err, LlmError::InvalidResponse(_)), "{err}");
            assert!(err.to_string().contains(expected), "{err}");
        }
    }
}
