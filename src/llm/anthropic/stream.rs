//! Messages stream decoding: `message_start`, `content_block_start` / `_delta` / `_stop`,
//! `message_delta`, `message_stop`, `ping`, `error`, assembled into the message the dialect
//! would have sent whole and parsed by [`parse_response`](super::parse_response). Each block
//! is found by its index in a map, so decoding costs time linear in the bytes; past a cap of
//! [`ReplyLimits`] the reply is refused at the event that went past it.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::llm::Parsed;
use crate::llm::anthropic::parse::parse_answer;
use crate::llm::assemble::{Decoder, invalid_event};
use crate::llm::limits::{Budget, ReplyLimits, refuse_past};
use crate::ports::{Delta, LlmError, OnDelta, ResponseFault};
use crate::text::{Cut, cut};

/// The field a Messages request streams with.
pub(crate) const STREAM_FIELDS: &str = r#""stream":true"#;

/// A decoder for one streamed reply.
pub(crate) fn decoder(limits: ReplyLimits) -> Box<dyn Decoder> {
    Box::new(EventDecoder::new(limits))
}

/// Messages events: `message_start`, `content_block_start` / `_delta` / `_stop`,
/// `message_delta`, `message_stop`, `ping`, `error`.
pub(crate) struct EventDecoder {
    /// The message of `message_start`, its content filled as blocks complete.
    message: Option<Map<String, Value>>,
    /// Blocks in order of start, with their index and the partial JSON of a `tool_use` block's
    /// input.
    blocks: Vec<(u64, Value, String)>,
    /// Where each block `index` is in `blocks`.
    block_at: HashMap<u64, usize>,
    /// `tool_use` blocks so far.
    tool_calls: usize,
    stopped: bool,
    content: bool,
    limits: ReplyLimits,
    /// Text, thinking and signature bytes so far.
    text_bytes: Budget,
    /// Tool input bytes so far.
    argument_bytes: Budget,
}

impl EventDecoder {
    pub(crate) fn new(limits: ReplyLimits) -> Self {
        Self {
            message: None,
            blocks: Vec::new(),
            block_at: HashMap::new(),
            tool_calls: 0,
            stopped: false,
            content: false,
            limits,
            text_bytes: Budget::new(limits.max_text_bytes, "bytes of text"),
            argument_bytes: Budget::new(limits.max_argument_bytes, "bytes of tool-call arguments"),
        }
    }

    /// The block started at `index`, if one was.
    fn block(&mut self, index: u64) -> Option<&mut (u64, Value, String)> {
        let pos = *self.block_at.get(&index)?;
        self.blocks.get_mut(pos)
    }
}

impl Decoder for EventDecoder {
    fn event(
        &mut self,
        name: &str,
        data: &str,
        on_delta: &mut OnDelta<'_>,
    ) -> Result<(), LlmError> {
        let event: Value =
            serde_json::from_str(data).map_err(|e| invalid_event("a stream event", data, e))?;
        // The `type` in the data is authoritative; the `event:` line names the same.
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(name)
            .to_owned();
        match kind.as_str() {
            "message_start" => {
                let Some(Value::Object(message)) = event.get("message") else {
                    return Err(invalid_event("message_start", data, "no message"));
                };
                self.message = Some(message.clone());
            }
            "content_block_start" => {
                let index = index_of(&event, data)?;
                let Some(block) = event.get("content_block").filter(|b| b.is_object()) else {
                    return Err(invalid_event("content_block_start", data, "no block"));
                };
                if self.block_at.contains_key(&index) {
                    return Err(invalid_event(
                        "content_block_start",
                        data,
                        "a block was already started at its index",
                    ));
                }
                refuse_past(
                    self.blocks.len() + 1,
                    self.limits.max_blocks,
                    "content blocks",
                )?;
                let mut block = block.clone();
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    self.tool_calls += 1;
                    refuse_past(self.tool_calls, self.limits.max_tool_calls, "tool calls")?;
                    self.content = true;
                    // The input arrives as `input_json_delta` pieces; the start holds `{}`.
                    block["input"] = Value::Null;
                }
                for field in ["text", "thinking"] {
                    let size = block.get(field).and_then(Value::as_str).map_or(0, str::len);
                    self.text_bytes.spend(size)?;
                }
                if let Some(text) = block.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    self.content = true;
                    on_delta(Delta::Text(text.to_owned()));
                }
                self.block_at.insert(index, self.blocks.len());
                self.blocks.push((index, block, String::new()));
            }
            "content_block_delta" => {
                let index = index_of(&event, data)?;
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let piece = |field: &str| delta.get(field).and_then(Value::as_str);
                let kind = delta.get("type").and_then(Value::as_str);
                match kind {
                    Some("text_delta") => self.text_bytes.spend(piece("text").map_or(0, str::len)),
                    Some("thinking_delta") => {
                        self.text_bytes.spend(piece("thinking").map_or(0, str::len))
                    }
                    Some("signature_delta") => self
                        .text_bytes
                        .spend(piece("signature").map_or(0, str::len)),
                    Some("input_json_delta") => self
                        .argument_bytes
                        .spend(piece("partial_json").map_or(0, str::len)),
                    _ => Ok(()),
                }?;
                // Fields apart, not through `block()`: `content` is set while the block is held.
                let found = self
                    .block_at
                    .get(&index)
                    .and_then(|&pos| self.blocks.get_mut(pos));
                let Some((_, block, partial)) = found else {
                    return Err(invalid_event(
                        "content_block_delta",
                        data,
                        "no block was started at its index",
                    ));
                };
                match kind {
                    Some("text_delta") => {
                        let text = piece("text").unwrap_or_default();
                        append(block, "text", text);
                        if !text.is_empty() {
                            self.content = true;
                            on_delta(Delta::Text(text.to_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        self.content = true;
                        partial.push_str(piece("partial_json").unwrap_or_default());
                    }
                    Some("thinking_delta") => {
                        let text = piece("thinking").unwrap_or_default();
                        append(block, "thinking", text);
                        if !text.is_empty() {
                            self.content = true;
                            on_delta(Delta::Thinking(text.to_owned()));
                        }
                    }
                    Some("signature_delta") => {
                        append(block, "signature", piece("signature").unwrap_or_default());
                    }
                    // Citations and kinds added later: nothing the reply is made of.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(&event, data)?;
                if let Some((_, block, partial)) = self.block(index)
                    && block.get("type").and_then(Value::as_str) == Some("tool_use")
                {
                    block["input"] = tool_input(std::mem::take(partial));
                }
            }
            "message_delta" => {
                let Some(message) = self.message.as_mut() else {
                    return Err(invalid_event("message_delta", data, "before message_start"));
                };
                if let Some(Value::Object(delta)) = event.get("delta") {
                    for (key, value) in delta {
                        message.insert(key.clone(), value.clone());
                    }
                }
                // Counts in `message_delta` are cumulative: they replace those of the start.
                if let Some(Value::Object(usage)) = event.get("usage") {
                    let merged = message
                        .entry("usage")
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(merged) = merged {
                        for (key, value) in usage.iter().filter(|(_, v)| !v.is_null()) {
                            merged.insert(key.clone(), value.clone());
                        }
                    }
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let message = event
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                return Err(LlmError::InvalidResponse(
                    ResponseFault::ProviderErrorMidStream {
                        message: cut(message, 512, Cut::Chars { total: true }),
                    },
                ));
            }
            // `ping`, and event types added later: keep-alives to this client.
            _ => {}
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        self.stopped
    }

    fn has_content(&self) -> bool {
        self.content
    }

    fn finish(self: Box<Self>) -> Result<Parsed, LlmError> {
        let Some(mut message) = self.message else {
            return Err(LlmError::InvalidResponse(ResponseFault::NoMessageStart));
        };
        let mut blocks = self.blocks;
        // Stable: blocks keep their order of start where indexes tie (they cannot: a repeated
        // start is an error).
        blocks.sort_by_key(|b| b.0);
        let content = blocks
            .into_iter()
            .map(|(_, mut block, partial)| {
                // A tool_use block whose stop never came still has its input pending.
                if block.get("input").is_some_and(Value::is_null) {
                    block["input"] = tool_input(partial);
                }
                block
            })
            .collect();
        message.insert("content".into(), Value::Array(content));
        parse_answer(Value::Object(message).to_string().as_bytes())
    }
}

fn index_of(event: &Value, data: &str) -> Result<u64, LlmError> {
    event
        .get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid_event("a content block event", data, "no index"))
}

fn append(block: &mut Value, field: &str, piece: &str) {
    if let Some(Value::String(text)) = block.get_mut(field) {
        text.push_str(piece);
    } else if let Value::Object(map) = block {
        map.insert(field.to_owned(), Value::String(piece.to_owned()));
    }
}

/// A `tool_use` input from its pieces: `{}` when none came, the parsed object, or the raw text
/// when it is not JSON, which the machine answers with an error naming it.
fn tool_input(partial: String) -> Value {
    if partial.trim().is_empty() {
        return Value::Object(Map::new());
    }
    serde_json::from_str(&partial).unwrap_or(Value::String(partial))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::{LlmReply, StopReason, Usage};

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
    fn messages_events_assemble_text_thinking_tool_input_and_usage() {
        let (reply, deltas) = run(
            EventDecoder::new(ReplyLimits::default()),
            &[
                (
                    "message_start",
                    json!({"type": "message_start", "message": {
                    "id": "msg_1", "type": "message", "role": "assistant", "content": [],
                    "model": "m", "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 5}}}),
                ),
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "Let me see."}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "signature_delta", "signature": "sig"}}),
                ),
                (
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                ),
                ("ping", json!({"type": "ping"})),
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 1,
                    "content_block": {"type": "text", "text": ""}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 1,
                    "delta": {"type": "text_delta", "text": "Reading"}}),
                ),
                (
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 1}),
                ),
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 2,
                    "content_block": {"type": "tool_use", "id": "toolu_1", "name": "fs__read", "input": {}}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 2,
                    "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 2,
                    "delta": {"type": "input_json_delta", "partial_json": "\"a\"}"}}),
                ),
                (
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 2}),
                ),
                (
                    "message_delta",
                    json!({"type": "message_delta",
                    "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                    "usage": {"output_tokens": 30}}),
                ),
                ("message_stop", json!({"type": "message_stop"})),
            ],
        );
        assert_eq!(reply.text, "Reading");
        assert_eq!(reply.stop, StopReason::ToolUse);
        assert_eq!(reply.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 15,
                output_tokens: 30,
                cache_read_tokens: 5,
                cache_creation_tokens: 0
            })
        );
        assert_eq!(
            deltas,
            [
                Delta::Thinking("Let me see.".into()),
                Delta::Text("Reading".into())
            ]
        );
    }

    #[test]
    fn an_error_event_and_a_delta_without_its_block_are_errors() {
        let mut decoder = EventDecoder::new(ReplyLimits::default());
        let err = decoder
            .event(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                &mut |_| {},
            )
            .unwrap_err();
        assert!(err.to_string().contains("Overloaded"), "{err}");
        let err = decoder
            .event(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":7}"#,
                &mut |_| {},
            )
            .unwrap_err();
        assert!(err.to_string().contains("no block was started"), "{err}");
    }

    #[test]
    fn caps_on_text_and_arguments_refuse_the_reply() {
        let limits = ReplyLimits {
            max_text_bytes: 4,
            max_argument_bytes: 4,
            ..ReplyLimits::default()
        };
        let refused = |result: Result<(), LlmError>, what: &str| {
            let err = result.unwrap_err().to_string();
            assert!(err.contains(&format!("more than 4 {what}")), "{err}");
        };
        let mut decoder = EventDecoder::new(limits);
        let start = |index: u64, block: Value| {
            json!({"type": "content_block_start", "index": index, "content_block": block})
                .to_string()
        };
        let delta = |index: u64, delta: Value| {
            json!({"type": "content_block_delta", "index": index, "delta": delta}).to_string()
        };
        decoder
            .event(
                "",
                &start(0, json!({"type": "text", "text": "abc"})),
                &mut |_| {},
            )
            .unwrap();
        refused(
            decoder.event(
                "",
                &delta(0, json!({"type": "text_delta", "text": "de"})),
                &mut |_| {},
            ),
            "bytes of text",
        );
        let mut decoder = EventDecoder::new(limits);
        let tool = json!({"type": "tool_use", "id": "t", "name": "n", "input": {}});
        decoder.event("", &start(0, tool), &mut |_| {}).unwrap();
        refused(
            decoder.event(
                "",
                &delta(
                    0,
                    json!({"type": "input_json_delta", "partial_json": "{\"a\":1}"}),
                ),
                &mut |_| {},
            ),
            "bytes of tool-call arguments",
        );
    }

    #[test]
    fn a_block_started_twice_at_one_index_is_an_error() {
        let mut decoder = EventDecoder::new(ReplyLimits::default());
        let start =
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#;
        decoder.event("", start, &mut |_| {}).unwrap();
        let err = decoder.event("", start, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("already started"), "{err}");
    }

    #[test]
    fn the_answering_model_is_read_from_whole_and_streamed_answers() {
        let message = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5-20250929", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "Hi."}]});
        let parsed = parse_answer(message.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.model.as_deref(), Some("claude-sonnet-4-5-20250929"));

        let mut start = message;
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        let events = [
            (
                "message_start",
                json!({"type": "message_start", "message": start}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": "Hi."}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn"}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ];
        let mut decoder: Box<dyn Decoder> = Box::new(EventDecoder::new(ReplyLimits::default()));
        for (name, data) in events {
            decoder.event(name, &data.to_string(), &mut |_| {}).unwrap();
        }
        let parsed = decoder.finish().unwrap();
        assert_eq!(parsed.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        assert_eq!(parsed.reply.text, "Hi.");
    }
}
