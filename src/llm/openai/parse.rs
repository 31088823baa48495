//! Whole Chat Completions answers: what the dialect sends when a reply is not streamed, and
//! what the stream decoder assembles; stop reasons, usage and arguments are mapped here only.

use serde::Deserialize;
use serde_json::Value;

use crate::llm::Parsed;
use crate::machine::{CallId, LlmReply, StopReason, ToolCall, Usage};
use crate::ports::{LlmError, ResponseFault};
use crate::text::{Cut, cut};

/// Parses a Chat Completions answer. Never panics, whatever the bytes.
pub fn parse_response(body: &[u8]) -> Result<LlmReply, LlmError> {
    parse_answer(body).map(|parsed| parsed.reply)
}

/// [`parse_response`], with the model the answer names.
pub(crate) fn parse_answer(body: &[u8]) -> Result<Parsed, LlmError> {
    let response: ChatResponse = serde_json::from_slice(body).map_err(|e| {
        LlmError::InvalidResponse(ResponseFault::Unparsable {
            expected: "a chat completion",
            error: e.to_string(),
            began: cut(
                &String::from_utf8_lossy(body),
                200,
                Cut::Chars { total: true },
            ),
        })
    })?;
    let Some(choice) = response.choices.into_iter().next() else {
        return Err(LlmError::InvalidResponse(match response.error {
            Some(error) => ResponseFault::ProviderError {
                message: cut(&error_text(&error), 512, Cut::Chars { total: true }),
            },
            None => ResponseFault::NoChoices,
        }));
    };
    // A choice without a message says nothing about how the turn went: taking it as an empty
    // end of turn would end the prompt (and ask `_Stop`) on a broken answer.
    let Some(message) = choice.message else {
        return Err(LlmError::InvalidResponse(
            ResponseFault::ChoiceWithoutMessage,
        ));
    };
    let mut text = match message.content {
        None => String::new(),
        Some(ResponseContent::Text(text)) => text,
        Some(ResponseContent::Parts(parts)) => parts.into_iter().filter_map(|p| p.text).collect(),
    };
    let tool_calls: Vec<ToolCall> = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|call| ToolCall {
            // An empty id is renamed by the machine, which keeps ids unique.
            id: CallId(call.id.unwrap_or_default()),
            name: call.function.name,
            arguments: parse_arguments(call.function.arguments),
        })
        .collect();
    let refused = message.refusal.filter(|r| !r.is_empty());
    let stop = match (&refused, choice.finish_reason.as_deref()) {
        (Some(_), _) if tool_calls.is_empty() => StopReason::Refusal,
        (_, Some("stop")) => StopReason::EndTurn,
        (_, Some("tool_calls" | "function_call")) => StopReason::ToolUse,
        (_, Some("length")) => StopReason::MaxTokens,
        (_, Some("content_filter")) => StopReason::ContentFilter,
        // The machine decides what an unknown reason means.
        (_, Some(other)) => StopReason::Other(other.to_owned()),
        // Some servers that copy the dialect leave it out of a complete answer.
        (_, None) => StopReason::EndTurn,
    };
    if text.is_empty()
        && let Some(refusal) = refused
    {
        text = refusal;
    }
    let usage = response.usage.map(|u| Usage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
        cache_read_tokens: u
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0),
        cache_creation_tokens: 0,
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

/// Arguments as the model sent them: a JSON object, or the raw text when it is not one.
fn parse_arguments(arguments: Option<Value>) -> Value {
    match arguments {
        None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
        Some(Value::String(raw)) if raw.trim().is_empty() => Value::Object(serde_json::Map::new()),
        Some(Value::String(raw)) => match serde_json::from_str::<Value>(&raw) {
            Ok(parsed @ Value::Object(_)) => parsed,
            // Valid JSON that is not an object stays raw too, so it round-trips exactly.
            Ok(_) | Err(_) => Value::String(raw),
        },
        Some(other) => other,
    }
}

fn error_text(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        other => other
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| other.to_string(), str::to_owned),
    }
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<ResponseMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Default, Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<ResponseContent>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ResponseContent {
    Text(String),
    Parts(Vec<ResponsePart>),
}

#[derive(Deserialize)]
struct ResponsePart {
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct ResponseToolCall {
    #[serde(default)]
    id: Option<String>,
    function: ResponseFunction,
}

#[derive(Deserialize)]
struct ResponseFunction {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> LlmReply {
        parse_response(value.to_string().as_bytes()).unwrap()
    }

    fn reply(message: Value, finish: &str) -> Value {
        json!({"choices": [{"index": 0, "message": message, "finish_reason": finish}]})
    }

    #[test]
    fn finish_reasons_map_to_stop_reasons() {
        let cases = [
            ("stop", StopReason::EndTurn),
            ("tool_calls", StopReason::ToolUse),
            ("function_call", StopReason::ToolUse),
            ("length", StopReason::MaxTokens),
            ("content_filter", StopReason::ContentFilter),
            ("eos", StopReason::Other("eos".into())),
        ];
        for (finish, stop) in cases {
            let got = parse(reply(json!({"role": "assistant", "content": "x"}), finish));
            assert_eq!(got.stop, stop, "{finish}");
        }
        let none =
            parse(json!({"choices": [{"message": {"content": "x"}, "finish_reason": null}]}));
        assert_eq!(none.stop, StopReason::EndTurn);
    }

    #[test]
    fn a_refusal_is_a_refusal_with_its_text() {
        let got = parse(reply(
            json!({"role": "assistant", "content": null, "refusal": "I can't help with that."}),
            "stop",
        ));
        assert_eq!(got.stop, StopReason::Refusal);
        assert_eq!(got.text, "I can't help with that.");
    }

    #[test]
    fn arguments_that_are_not_an_object_stay_raw() {
        let got = parse(reply(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{\"x\": 1"}},
                {"id": "b", "type": "function", "function": {"name": "t", "arguments": "[1]"}},
                {"id": "c", "type": "function", "function": {"name": "t", "arguments": ""}},
                {"id": "d", "type": "function", "function": {"name": "t", "arguments": {"y": 2}}},
                {"id": "e", "type": "function", "function": {"name": "t"}},
                {"type": "function", "function": {"name": "t", "arguments": "{\"z\":3}"}}
            ]}),
            "tool_calls",
        ));
        let args: Vec<&Value> = got.tool_calls.iter().map(|c| &c.arguments).collect();
        assert_eq!(
            args,
            [
                &json!("{\"x\": 1"),
                &json!("[1]"),
                &json!({}),
                &json!({"y": 2}),
                &json!({}),
                &json!({"z": 3}),
            ]
        );
        assert_eq!(got.tool_calls[5].id.as_str(), "");
    }

    #[test]
    fn content_parts_are_joined_and_usage_counts_cached_tokens() {
        let mut value = reply(
            json!({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            "stop",
        );
        value["usage"] = json!({"prompt_tokens": 100, "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 60}});
        let got = parse(value);
        assert_eq!(got.text, "ab");
        assert_eq!(
            got.usage,
            Some(Usage {
                input_tokens: 100,
                output_tokens: 7,
                cache_read_tokens: 60,
                cache_creation_tokens: 0
            })
        );
    }

    #[test]
    fn bad_answers_are_errors_that_say_why() {
        let cases: [(&[u8], &str); 6] = [
            (b"", "not a chat completion"),
            // A 200 whose choice holds no message is broken, not an empty end of turn.
            (
                br#"{"choices": [{"finish_reason": "stop"}]}"#,
                "the answer's choice has no message",
            ),
            (
                b"<html>502</html>",
                "the answer began: \"<html>502</html>\"",
            ),
            (br#"{"choices": []}"#, "no choices"),
            (
                br#"{"error": {"message": "upstream failed"}}"#,
                "upstream failed",
            ),
            (
                br#"{"choices": [{"message": {"content": 5}}]}"#,
                "not a chat completion",
            ),
        ];
        for (body, expected) in cases {
            let err = parse_response(body).unwrap_err();
            assert!(matches!(err, LlmError::InvalidResponse(_)), "{err}");
            assert!(err.to_string().contains(expected), "{err}");
        }
    }

    #[test]
    fn an_embedder_tells_bad_answers_apart_by_their_fault_not_their_text() {
        let fault = |body: &[u8]| match parse_response(body) {
            Err(LlmError::InvalidResponse(fault)) => fault,
            other => panic!("expected an invalid response, got {other:?}"),
        };
        assert_eq!(fault(br#"{"choices": []}"#), ResponseFault::NoChoices);
        assert_eq!(
            fault(br#"{"choices": [{"finish_reason": "stop"}]}"#),
            ResponseFault::ChoiceWithoutMessage
        );
        assert_eq!(
            fault(br#"{"error": {"message": "upstream failed"}}"#),
            ResponseFault::ProviderError {
                message: "upstream failed".into()
            }
        );
        let ResponseFault::Unparsable {
            expected, began, ..
        } = fault(b"<html>502</html>")
        else {
            panic!("not JSON is unparsable");
        };
        assert_eq!(
            (expected, began.as_str()),
            ("a chat completion", "<html>502</html>")
        );
        // The message is the one the prose variant gave: transcripts hold it as it was.
        assert_eq!(
            parse_response(br#"{"choices": []}"#)
                .unwrap_err()
                .to_string(),
            "the provider's answer is not valid: the answer has no choices"
        );
    }
}
