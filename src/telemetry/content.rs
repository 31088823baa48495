//! Message content on `chat` spans, when the operator opts in: `gen_ai.system_instructions`,
//! `gen_ai.input.messages` and `gen_ai.output.messages`, each a JSON string in the shape the
//! GenAI conventions' JSON schemas give (messages of a `role` and `parts`; a part is `text`,
//! `tool_call`, `tool_call_response` or `blob`). The conventions have instrumentations capture
//! no content by default; the variable the OpenTelemetry instrumentations read turns it on
//! ([`CAPTURE_VARIABLE`]). The values are JSON strings because a `tracing` field holds no
//! structure; the conventions allow a string where structure cannot be recorded.

use std::sync::OnceLock;

use serde_json::{Value, json};
use tracing::Span;

use super::names;
use crate::machine::{Content, LlmReply, LlmRequest, Message, ToolCall, ToolOutput};

/// The variable that opts in to content: `true`, `SPAN_ONLY` or `SPAN_AND_EVENT` (any case)
/// record it on the spans; unset, `false` or `NO_CONTENT` record none. `EVENT_ONLY` asks for
/// the `gen_ai.client.inference.operation.details` event, which the engine does not emit: it
/// records none either.
pub const CAPTURE_VARIABLE: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Whether [`CAPTURE_VARIABLE`] asks for content on spans; read once per process.
pub(super) fn capture_from_env() -> bool {
    static CAPTURE: OnceLock<bool> = OnceLock::new();
    *CAPTURE.get_or_init(|| {
        std::env::var(CAPTURE_VARIABLE)
            .ok()
            .is_some_and(|value| capture_asked(&value))
    })
}

/// Whether a value of [`CAPTURE_VARIABLE`] asks for content on spans.
fn capture_asked(value: &str) -> bool {
    let value = value.trim();
    ["true", "span_only", "span_and_event"]
        .iter()
        .any(|on| value.eq_ignore_ascii_case(on))
}

/// Records what a request sends on its `chat` span: the system prompt and the messages.
pub(super) fn record_input(span: &Span, request: &LlmRequest<'_>) {
    if let Some(system) = request.system {
        let instructions = json!([{"type": "text", "content": system}]);
        span.record(
            names::SYSTEM_INSTRUCTIONS,
            instructions.to_string().as_str(),
        );
    }
    let mut messages: Vec<Value> = request.messages.iter().map(message).collect();
    if let Some(instruction) = request.instruction {
        messages.push(json!({"role": "user", "parts": [text(instruction)]}));
    }
    span.record(
        names::INPUT_MESSAGES,
        Value::Array(messages).to_string().as_str(),
    );
}

/// Records the model's reply on its `chat` span, with the reason it stopped.
pub(super) fn record_output(span: &Span, reply: &LlmReply, finish_reason: &str) {
    let output = json!([{
        "role": "assistant",
        "parts": assistant_parts(&reply.text, &reply.tool_calls),
        "finish_reason": finish_reason,
    }]);
    span.record(names::OUTPUT_MESSAGES, output.to_string().as_str());
}

fn message(message: &Message) -> Value {
    match message {
        Message::User { text: said } => json!({"role": "user", "parts": [text(said)]}),
        Message::Assistant { text, tool_calls } => {
            json!({"role": "assistant", "parts": assistant_parts(text, tool_calls)})
        }
        Message::ToolResult { call_id, output } => json!({
            "role": "tool",
            "parts": [{
                "type": "tool_call_response",
                "id": call_id.as_str(),
                "response": response(output),
            }],
        }),
    }
}

fn assistant_parts(said: &str, calls: &[ToolCall]) -> Vec<Value> {
    let said = (!said.is_empty()).then(|| text(said));
    said.into_iter()
        .chain(calls.iter().map(|call| {
            json!({
                "type": "tool_call",
                "id": call.id.as_str(),
                "name": call.name,
                "arguments": call.arguments,
            })
        }))
        .collect()
}

/// A tool's result: its text, or its blocks when it holds more than one text.
fn response(output: &ToolOutput) -> Value {
    match output.content.as_slice() {
        [Content::Text { text }] => Value::String(text.clone()),
        blocks => Value::Array(blocks.iter().map(block).collect()),
    }
}

fn block(content: &Content) -> Value {
    match content {
        Content::Text { text: said } => text(said),
        Content::Image { mime_type, data } => json!({
            "type": "blob", "modality": "image", "mime_type": mime_type, "content": data,
        }),
        Content::Resource {
            text: Some(said), ..
        } => text(said),
        Content::Resource {
            uri,
            mime_type,
            blob,
            text: None,
        } => json!({
            "type": "blob", "uri": uri, "mime_type": mime_type, "content": blob,
        }),
    }
}

fn text(content: &str) -> Value {
    json!({"type": "text", "content": content})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::CallId;

    #[test]
    fn the_variable_takes_the_instrumentations_values() {
        for on in ["true", "TRUE", "SPAN_ONLY", "span_and_event", " true "] {
            assert!(capture_asked(on), "{on}");
        }
        for off in ["", "false", "NO_CONTENT", "EVENT_ONLY", "1", "yes"] {
            assert!(!capture_asked(off), "{off}");
        }
    }

    #[test]
    fn messages_take_the_conventions_shape() {
        let call = ToolCall {
            id: CallId("c1".into()),
            name: "fs__read".into(),
            arguments: json!({"path": "a"}),
        };
        let history = [
            Message::user("Read a."),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call.clone()],
            },
            Message::ToolResult {
                call_id: CallId("c1".into()),
                output: ToolOutput {
                    content: vec![Content::Text { text: "A.".into() }],
                    is_error: false,
                },
            },
        ];
        let shaped: Vec<Value> = history.iter().map(message).collect();
        assert_eq!(
            Value::Array(shaped),
            json!([
                {"role": "user", "parts": [{"type": "text", "content": "Read a."}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1",
                    "name": "fs__read", "arguments": {"path": "a"}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                    "response": "A."}]},
            ])
        );
    }
}
