//! Streamed replies: the [`Delta`]s people see as a reply is written, and the decoders that
//! assemble each dialect's stream events into the answer the dialect would have sent whole.
//!
//! The machine sees one reply either way. A decoder does not map stop reasons, usage or
//! arguments itself: once the stream is complete it hands the assembled answer to the same
//! parser a non-streamed answer goes through ([`openai::parse_response`],
//! [`anthropic::parse_response`]), so a streamed reply is the very reply the same answer sent
//! whole would give, and transcripts do not depend on the mode. Tool-call arguments are parsed
//! there, once complete; partial ones are only accumulated.
//!
//! Events are untrusted: a malformed one is an error naming the problem, never a panic.

use serde_json::{Map, Value, json};

use crate::llm::sse::{SseEvent, SseParser};
pub use crate::llm::{Delta, OnDelta};
use crate::llm::{LlmError, Provider, anthropic, openai};
use crate::machine::LlmReply;
use crate::text::{Cut, cut};

/// Turns one dialect's events into deltas and, at the end, the reply.
pub(crate) trait Decoder: Send {
    /// Takes one event's data (and its `event:` name, which Chat Completions does not send).
    fn event(&mut self, name: &str, data: &str, on_delta: &mut OnDelta<'_>)
    -> Result<(), LlmError>;

    /// Whether the stream said it is complete (`[DONE]`, `message_stop`).
    fn complete(&self) -> bool;

    /// Whether the body ending now leaves a complete reply although the stream did not say so
    /// (a server that ends a finished reply without `[DONE]`).
    fn ended_complete(&self) -> bool {
        false
    }

    /// Whether any of the reply has arrived: after that, a broken stream cannot be retried.
    fn has_content(&self) -> bool;

    /// The reply, once [`complete`](Self::complete).
    fn finish(self: Box<Self>) -> Result<LlmReply, LlmError>;
}

/// Parses a whole streamed answer of `provider`'s dialect, arriving in `chunks`, as a client
/// would: for tests and fuzzing. The same code reads streams off the network.
pub fn parse_stream<'a>(
    provider: Provider,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<LlmReply, LlmError> {
    let decoder: Box<dyn Decoder> = match provider {
        Provider::OpenAi => Box::<OpenAiDecoder>::default(),
        Provider::Anthropic => Box::<AnthropicDecoder>::default(),
    };
    let mut assembler = Assembler::new(decoder);
    for chunk in chunks {
        if assembler.complete() {
            break;
        }
        assembler.feed(chunk, &mut |_| {})?;
    }
    if !assembler.complete() && !assembler.ended_complete() {
        return Err(LlmError::InvalidResponse(
            "the stream ended before the reply was complete".into(),
        ));
    }
    assembler.finish()
}

/// Bytes in, deltas out, and the reply at the end: the parser and a dialect's decoder.
pub(crate) struct Assembler {
    parser: SseParser,
    events: Vec<SseEvent>,
    decoder: Box<dyn Decoder>,
}

impl Assembler {
    pub(crate) fn new(decoder: Box<dyn Decoder>) -> Self {
        Self {
            parser: SseParser::new(),
            events: Vec::new(),
            decoder,
        }
    }

    /// Takes the next chunk of the body.
    pub(crate) fn feed(
        &mut self,
        chunk: &[u8],
        on_delta: &mut OnDelta<'_>,
    ) -> Result<(), LlmError> {
        self.parser
            .push(chunk, &mut self.events)
            .map_err(|e| LlmError::InvalidResponse(e.to_string()))?;
        for event in self.events.drain(..) {
            self.decoder.event(&event.event, &event.data, on_delta)?;
        }
        Ok(())
    }

    /// See [`Decoder::complete`].
    pub(crate) fn complete(&self) -> bool {
        self.decoder.complete()
    }

    /// See [`Decoder::ended_complete`].
    pub(crate) fn ended_complete(&self) -> bool {
        self.decoder.ended_complete()
    }

    /// See [`Decoder::has_content`].
    pub(crate) fn has_content(&self) -> bool {
        self.decoder.has_content()
    }

    /// The reply; only once complete.
    pub(crate) fn finish(self) -> Result<LlmReply, LlmError> {
        self.decoder.finish()
    }
}

fn invalid_event(what: &str, data: &str, error: impl std::fmt::Display) -> LlmError {
    LlmError::InvalidResponse(format!(
        "{what} is not valid: {error}; it began: {:?}",
        cut(data, 200, Cut::Chars { total: true })
    ))
}

/// The fields a Chat Completions request streams with; usage comes in a last chunk.
pub(crate) const OPENAI_STREAM_FIELDS: &str =
    r#""stream":true,"stream_options":{"include_usage":true}"#;

/// The field a Messages request streams with.
pub(crate) const ANTHROPIC_STREAM_FIELDS: &str = r#""stream":true"#;

/// Chat Completions chunks (`chat.completion.chunk`), ended by `data: [DONE]`.
#[derive(Default)]
pub(crate) struct OpenAiDecoder {
    text: String,
    refusal: String,
    /// Tool calls by their `index`, in order of first appearance.
    calls: Vec<(u64, PartialCall)>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    done: bool,
    content: bool,
}

#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl Decoder for OpenAiDecoder {
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
            return Err(LlmError::InvalidResponse(format!(
                "the provider reported an error mid-stream: {}",
                cut(&message, 512, Cut::Chars { total: true })
            )));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
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
                self.text.push_str(text);
                on_delta(Delta::Text(text.to_owned()));
            }
            for field in ["reasoning_content", "reasoning"] {
                if let Some(text) = delta.get(field).and_then(Value::as_str)
                    && !text.is_empty()
                {
                    self.content = true;
                    on_delta(Delta::Thinking(text.to_owned()));
                }
            }
            if let Some(text) = delta.get("refusal").and_then(Value::as_str) {
                self.content = true;
                self.refusal.push_str(text);
            }
            let calls = delta.get("tool_calls").and_then(Value::as_array);
            for call in calls.into_iter().flatten() {
                self.content = true;
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                let pos = match self.calls.iter().position(|(i, _)| *i == index) {
                    Some(pos) => pos,
                    None => {
                        self.calls.push((index, PartialCall::default()));
                        self.calls.len() - 1
                    }
                };
                let slot = &mut self.calls[pos].1;
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    slot.id = Some(id.to_owned());
                }
                let function = call.get("function");
                if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                    slot.name.push_str(name);
                }
                match function.and_then(|f| f.get("arguments")) {
                    Some(Value::String(piece)) => slot.arguments.push_str(piece),
                    // Servers that send an object at once: kept as its text.
                    Some(other @ Value::Object(_)) => slot.arguments.push_str(&other.to_string()),
                    _ => {}
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

    fn finish(self: Box<Self>) -> Result<LlmReply, LlmError> {
        let calls: Vec<Value> = self
            .calls
            .into_iter()
            .map(|(_, call)| {
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
        openai::parse_response(whole.to_string().as_bytes())
    }
}

/// Messages events: `message_start`, `content_block_start` / `_delta` / `_stop`,
/// `message_delta`, `message_stop`, `ping`, `error`.
#[derive(Default)]
pub(crate) struct AnthropicDecoder {
    /// The message of `message_start`, its content filled as blocks complete.
    message: Option<Map<String, Value>>,
    /// Blocks by index, with the partial JSON of a `tool_use` block's input.
    blocks: Vec<(u64, Value, String)>,
    stopped: bool,
    content: bool,
}

impl Decoder for AnthropicDecoder {
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
                let mut block = block.clone();
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    self.content = true;
                    // The input arrives as `input_json_delta` pieces; the start holds `{}`.
                    block["input"] = Value::Null;
                }
                if let Some(text) = block.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    self.content = true;
                    on_delta(Delta::Text(text.to_owned()));
                }
                self.blocks.push((index, block, String::new()));
            }
            "content_block_delta" => {
                let index = index_of(&event, data)?;
                let Some((_, block, partial)) = self.blocks.iter_mut().find(|b| b.0 == index)
                else {
                    return Err(invalid_event(
                        "content_block_delta",
                        data,
                        "no block was started at its index",
                    ));
                };
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let piece = |field: &str| delta.get(field).and_then(Value::as_str);
                match delta.get("type").and_then(Value::as_str) {
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
                if let Some((_, block, partial)) = self.blocks.iter_mut().find(|b| b.0 == index)
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
                return Err(LlmError::InvalidResponse(format!(
                    "the provider reported an error mid-stream: {}",
                    cut(message, 512, Cut::Chars { total: true })
                )));
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

    fn finish(self: Box<Self>) -> Result<LlmReply, LlmError> {
        let Some(mut message) = self.message else {
            return Err(LlmError::InvalidResponse(
                "the stream ended without a message_start".into(),
            ));
        };
        let mut blocks = self.blocks;
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
        anthropic::parse_response(Value::Object(message).to_string().as_bytes())
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
    use super::*;
    use crate::machine::{StopReason, Usage};

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
        (decoder.finish().unwrap(), deltas)
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
            OpenAiDecoder::default(),
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
    fn messages_events_assemble_text_thinking_tool_input_and_usage() {
        let (reply, deltas) = run(
            AnthropicDecoder::default(),
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
    fn errors_mid_stream_and_damaged_events_are_errors() {
        let mut decoder = AnthropicDecoder::default();
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
        let mut decoder = OpenAiDecoder::default();
        assert!(decoder.event("", "{oops", &mut |_| {}).is_err());
        let err = decoder
            .event("", r#"{"error":{"message":"upstream died"}}"#, &mut |_| {})
            .unwrap_err();
        assert!(err.to_string().contains("upstream died"), "{err}");
    }

    #[test]
    fn the_fuzz_seeds_parse_the_same_at_every_chunk_size() {
        let seeds = [
            (
                Provider::OpenAi,
                &include_bytes!("../../fuzz/seeds/provider_parse/openai_stream")[..],
            ),
            (
                Provider::Anthropic,
                &include_bytes!("../../fuzz/seeds/provider_parse/anthropic_stream")[..],
            ),
        ];
        for (provider, seed) in seeds {
            // The fuzz target's first byte picks the chunk size; the rest is the body.
            let body = &seed[1..];
            let whole = parse_stream(provider, [body]).unwrap();
            assert_eq!(whole.text, "Hé");
            assert_eq!(whole.stop, StopReason::ToolUse);
            assert_eq!(whole.tool_calls[0].arguments, json!({"p": 1}));
            for size in 1..=16 {
                assert_eq!(parse_stream(provider, body.chunks(size)).unwrap(), whole);
            }
            // Cut before the model said it finished, a stream is an error, never a reply.
            let finished = match provider {
                Provider::OpenAi => r#""finish_reason": "tool_calls""#,
                Provider::Anthropic => "event: message_stop",
            };
            let finished = String::from_utf8_lossy(body).find(finished).unwrap();
            for cut in 0..finished {
                assert!(parse_stream(provider, [&body[..cut]]).is_err(), "{cut}");
            }
        }
    }
}
