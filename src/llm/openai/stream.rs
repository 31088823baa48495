//! Chat Completions stream decoding: chunks (`chat.completion.chunk`) ended by `data: [DONE]`,
//! assembled into the answer the dialect would have sent whole and parsed by
//! [`parse_response`](super::parse_response). Each tool call is found by its `index` in a map,
//! so decoding costs time linear in the bytes; past a cap of [`ReplyLimits`] the reply is
//! refused at the chunk that went past it.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::llm::Parsed;
use crate::llm::assemble::{Decoder, invalid_event};
use crate::llm::limits::{Budget, ReplyLimits, refuse_past};
use crate::llm::openai::parse::parse_answer;
use crate::ports::{Delta, LlmError, OnDelta, ResponseFault};
use crate::text::{Cut, cut};

/// The fields a Chat Completions request streams with; usage comes in a last chunk.
pub(crate) const STREAM_FIELDS: &str = r#""stream":true,"stream_options":{"include_usage":true}"#;

/// A decoder for one streamed reply.
pub(crate) fn decoder(limits: ReplyLimits) -> Box<dyn Decoder> {
    Box::new(ChunkDecoder::new(limits))
}

/// Chat Completions chunks (`chat.completion.chunk`), ended by `data: [DONE]`.
pub(crate) struct ChunkDecoder {
    text: String,
    refusal: String,
    /// Tool calls in order of first appearance.
    calls: Vec<PartialCall>,
    /// Where each tool-call `index` is in `calls`.
    call_at: HashMap<u64, usize>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    /// The model the first chunk that names one names.
    model: Option<String>,
    done: bool,
    content: bool,
    limits: ReplyLimits,
    /// Text, reasoning and refusal bytes so far.
    text_bytes: Budget,
    /// Tool-call name and argument bytes so far.
    argument_bytes: Budget,
}

impl ChunkDecoder {
    pub(crate) fn new(limits: ReplyLimits) -> Self {
        Self {
            text: String::new(),
            refusal: String::new(),
            calls: Vec::new(),
            call_at: HashMap::new(),
            finish_reason: None,
            usage: None,
            model: None,
            done: false,
            content: false,
            limits,
            text_bytes: Budget::new(limits.max_text_bytes, "bytes of text"),
            argument_bytes: Budget::new(limits.max_argument_bytes, "bytes of tool-call arguments"),
        }
    }

    /// The call at `index`, started if new: past the cap on calls, the reply is refused.
    fn call(&mut self, index: u64) -> Result<&mut PartialCall, LlmError> {
        let pos = match self.call_at.get(&index) {
            Some(&pos) => pos,
            None => {
                refuse_past(
                    self.calls.len() + 1,
                    self.limits.max_tool_calls,
                    "tool calls",
                )?;
                self.calls.push(PartialCall::default());
                self.call_at.insert(index, self.calls.len() - 1);
                self.calls.len() - 1
            }
        };
        // `pos` came from the map, which only holds positions of `calls`.
        Ok(&mut self.calls[pos])
    }
}

#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl Decoder for ChunkDecoder {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        on_delta: &mut OnDelta<'_>,
    ) -> Result<(), LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|e| invalid_event("a stream chunk", data, e))?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(LlmError::InvalidResponse(
                ResponseFault::ProviderErrorMidStream {
                    message: cut(&message, 512, Cut::Chars { total: true }),
                },
            ));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        // Every chunk names the model; the first says it for the reply.
        if self.model.is_none()
            && let Some(model) = chunk.get("model").and_then(Value::as_str)
        {
            self.model = Some(model.to_owned());
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            // One reply is asked for; other choices cannot occur and are ignored.
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
            let Some(delta) = choice.get("delta").filter(|d| d.is_object()) else {
                continue;
            };
            if let Some(text) = delta.get("content").and_then(Value::as_str)
                && !text.is_empty()
            {
                self.content = true;
                self.text_bytes.spend(text.len())?;
                self.text.push_str(text);
                on_delta(Delta::Text(text.to_owned()));
            }
            for field in ["reasoning_content", "reasoning"] {
                if let Some(text) = delta.get(field).and_then(Value::as_str)
                    && !text.is_empty()
                {
                    self.content = true;
                    self.text_bytes.spend(text.len())?;
                    on_delta(Delta::Thinking(text.to_owned()));
                }
            }
            if let Some(text) = delta.get("refusal").and_then(Value::as_str) {
                self.content = true;
                self.text_bytes.spend(text.len())?;
                self.refusal.push_str(text);
            }
            let calls = delta.get("tool_calls").and_then(Value::as_array);
            for call in calls.into_iter().flatten() {
                self.content = true;
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                let function = call.get("function");
                let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
                let arguments = match function.and_then(|f| f.get("arguments")) {
                    Some(Value::String(piece)) => Some(std::borrow::Cow::Borrowed(piece.as_str())),
                    // Servers that send an object at once: kept as its text.
                    Some(other @ Value::Object(_)) => Some(other.to_string().into()),
                    _ => None,
                };
                let added = name.map_or(0, str::len) + arguments.as_ref().map_or(0, |a| a.len());
                self.argument_bytes.spend(added)?;
                let slot = self.call(index)?;
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    slot.id = Some(id.to_owned());
                }
                if let Some(name) = name {
                    slot.name.push_str(name);
                }
                if let Some(arguments) = arguments {
                    slot.arguments.push_str(&arguments);
                }
            }
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        self.done
    }

    fn ended_complete(&self) -> bool {
        // The model said it finished; only the `[DONE]` line (and perhaps usage) is missing.
        self.finish_reason.is_some()
    }

    fn has_content(&self) -> bool {
        self.content
    }

    fn finish(self: Box<Self>) -> Result<Parsed, LlmError> {
        let calls: Vec<Value> = self
            .calls
            .into_iter()
            .map(|call| {
                let mut wire = json!({
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                });
                if let Some(id) = call.id {
                    wire["id"] = Value::String(id);
                }
                wire
            })
            .collect();
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert(
            "content".into(),
            if self.text.is_empty() && !calls.is_empty() {
                Value::Null
            } else {
                Value::String(self.text)
            },
        );
        if !self.refusal.is_empty() {
            message.insert("refusal".into(), Value::String(self.refusal));
        }
        if !calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut whole = json!({
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        });
        if let Some(usage) = self.usage {
            whole["usage"] = usage;
        }
        if let Some(model) = self.model {
            whole["model"] = Value::String(model);
        }
        parse_answer(whole.to_string().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{LlmReply, StopReason};

    fn run(decoder: impl Decoder + 'static, events: &[(&str, Value)]) -> (LlmReply, Vec<Delta>) {
        let mut decoder: Box<dyn Decoder> = Box::new(decoder);
        let mut deltas = Vec::new();
        for (name, data) in events {
            let data = match data {
                Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            decoder.event(name, &data, &mut |d| deltas.push(d)).unwrap();
        }
        assert!(decoder.complete());
        (decoder.finish().unwrap().reply, deltas)
    }

    #[test]
    fn chat_chunks_assemble_text_calls_and_usage() {
        let chunk = |delta: Value, finish: Value| {
            (
                "",
                json!({"object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
            )
        };
        let (reply, deltas) = run(
            ChunkDecoder::new(ReplyLimits::default()),
            &[
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chunk(json!({"reasoning_content": "hmm"}), Value::Null),
                chunk(json!({"content": "Hel"}), Value::Null),
                chunk(json!({"content": "lo."}), Value::Null),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                        "function": {"name": "fs__read", "arguments": ""}}]}),
                    Value::Null,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"pa"}}]}),
                    Value::Null,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "th\":\"a\"}"}}]}),
                    Value::Null,
                ),
                chunk(json!({}), json!("tool_calls")),
                (
                    "",
                    json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}),
                ),
                ("", Value::String("[DONE]".into())),
            ],
        );
        assert_eq!(reply.text, "Hello.");
        assert_eq!(reply.stop, StopReason::ToolUse);
        assert_eq!(reply.tool_calls.len(), 1);
        assert_eq!(reply.tool_calls[0].id.as_str(), "call_1");
        assert_eq!(reply.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!(reply.usage.map(|u| u.input_tokens), Some(9));
        assert_eq!(
            deltas,
            [
                Delta::Thinking("hmm".into()),
                Delta::Text("Hel".into()),
                Delta::Text("lo.".into())
            ]
        );
    }

    #[test]
    fn damaged_chunks_and_errors_mid_stream_are_errors() {
        let mut decoder = ChunkDecoder::new(ReplyLimits::default());
        assert!(decoder.event("", "{oops", &mut |_| {}).is_err());
        let err = decoder
            .event("", r#"{"error":{"message":"upstream died"}}"#, &mut |_| {})
            .unwrap_err();
        assert!(err.to_string().contains("upstream died"), "{err}");
    }

    #[test]
    fn caps_on_text_and_arguments_refuse_the_reply() {
        let limits = ReplyLimits {
            max_text_bytes: 4,
            max_argument_bytes: 4,
            ..ReplyLimits::default()
        };
        let chat = |delta: Value| json!({"choices": [{"index": 0, "delta": delta}]}).to_string();
        let refused = |result: Result<(), LlmError>, what: &str| {
            let err = result.unwrap_err().to_string();
            assert!(err.contains(&format!("more than 4 {what}")), "{err}");
        };
        let mut decoder = ChunkDecoder::new(limits);
        decoder
            .event("", &chat(json!({"content": "abcd"})), &mut |_| {})
            .unwrap();
        refused(
            decoder.event("", &chat(json!({"reasoning_content": "e"})), &mut |_| {}),
            "bytes of text",
        );
        let mut decoder = ChunkDecoder::new(limits);
        let call =
            json!({"tool_calls": [{"index": 0, "function": {"name": "ab", "arguments": "{}x"}}]});
        refused(
            decoder.event("", &chat(call), &mut |_| {}),
            "bytes of tool-call arguments",
        );
    }

    #[test]
    fn the_answering_model_is_read_from_whole_and_streamed_answers() {
        let whole = json!({"object": "chat.completion", "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."},
            "finish_reason": "stop"}]});
        let parsed = parse_answer(whole.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.model.as_deref(), Some("gpt-4o-2024-08-06"));
        let mut without = whole;
        without.as_object_mut().unwrap().remove("model");
        let parsed = parse_answer(without.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.model, None);

        let mut decoder: Box<dyn Decoder> = Box::new(ChunkDecoder::new(ReplyLimits::default()));
        let chunks = [
            json!({"model": "gpt-4o-2024-08-06",
                "choices": [{"index": 0, "delta": {"content": "Hi."}, "finish_reason": null}]}),
            json!({"model": "another",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ];
        for chunk in chunks {
            decoder.event("", &chunk.to_string(), &mut |_| {}).unwrap();
        }
        decoder.event("", "[DONE]", &mut |_| {}).unwrap();
        let parsed = decoder.finish().unwrap();
        assert_eq!(parsed.model.as_deref(), Some("gpt-4o-2024-08-06"));
        assert_eq!(parsed.reply.text, "Hi.");
    }
}
