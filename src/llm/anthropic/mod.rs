//! The Messages dialect (`POST {base}/v1/messages`, `anthropic-version: 2023-06-01`).
//!
//! Translation, both ways:
//! - The system prompt goes in its own `system` field. Turns are `user` and `assistant`
//!   messages of content blocks: `text`, `tool_use`, and `tool_result` (with `is_error` kept,
//!   and images sent as images). Consecutive user turns — tool results, then a prompt or the
//!   summary instruction — are one message, results first, as the dialect requires.
//! - `tool_use.input` must be an object. A call whose arguments were not one (raw text another
//!   dialect could not parse) is re-sent with input `{}`; its error result, which follows it,
//!   quotes the raw text, so nothing the model sent is lost from view.
//! - Empty text blocks are left out: the dialect rejects them.
//! - The dialect rejects `tool_use` and `tool_result` blocks in a request that defines no tools.
//!   A turn offers none when the only server steers (it exposes `_Stop` and no ordinary tool),
//!   yet its history holds the hook pairs, which must stay tool results. Such a request
//!   declares the tools its history called (name and an open object schema) with
//!   `tool_choice: {"type": "none"}`, the dialect's own way to forbid tool use this turn. A
//!   summary request offers no tools at all, so its calls and results go as plain text.
//! - `stop_reason`: `end_turn` → end of turn, `stop_sequence` → stop sequence (an end of turn
//!   to the machine), `max_tokens` and `model_context_window_exceeded` → output limit,
//!   `tool_use` → tool use, `refusal` → refusal, `pause_turn` → pause (the machine asks again
//!   with the partial turn in the history); any other reason is passed on by name
//!   ([`StopReason::Other`](crate::machine::StopReason::Other)) for the machine to decide; none at all → end of turn.
//! - Usage: `input_tokens` + `cache_read_input_tokens` + `cache_creation_input_tokens` is the
//!   whole prompt; the cache counts are also reported on their own.
//! - Prompt caching: the last block of each request is a cache breakpoint (`cache_control`,
//!   ephemeral). An agent loop re-sends a growing prefix, so each request reads the previous
//!   one's prefix from the cache; the dialect caches nothing without a breakpoint.

use std::borrow::Cow;

use reqwest::header::HeaderName;
use serde::Serialize;
use serde_json::Value;

use crate::llm::body::{BodyWriter, RequestBody};
use crate::llm::encode::{self, Dialect, EncodeCache, Lease, Part, Written};
use crate::llm::http::{Endpoint, Transport, Wire};
use crate::llm::turns::{self, ToolBlocks, Turn, UserPart};
use crate::machine::{
    CallId, Content, LlmReply, LlmRequest, Media, Message, Purpose, ToolCall, ToolOutput, ToolSpec,
};
use crate::ports::{LlmClient, LlmError, OnDelta};

mod parse;
pub(crate) mod stream;

pub use self::parse::parse_response;

/// How the dialect's replies are read: whole, or streamed and decoded.
const WIRE: Wire = Wire {
    stream_fields: stream::STREAM_FIELDS,
    parse: self::parse::parse_answer,
    decoder: stream::decoder,
};

/// The dialect's name, as `HOOKLOOP_PROVIDER` and the traces (`gen_ai.provider.name`) spell
/// it.
pub(crate) const NAME: &str = "anthropic";

/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version sent in the `anthropic-version` header.
pub const API_VERSION: &str = "2023-06-01";

/// The text sent for a user turn that would otherwise have no content.
const EMPTY_TURN: &str = "(empty message)";

/// Image types the dialect accepts as images; others are described in text.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Tokens one image costs at most: the API scales an image down until it is about 1,600
/// tokens (its documented width × height / 750 for images up to 1.15 megapixels).
const MAX_IMAGE_TOKENS: u64 = 1_600;

/// A Messages client.
#[derive(Debug)]
pub struct Anthropic {
    transport: Transport,
    model: String,
    prompt_caching: bool,
    cache: EncodeCache,
}

impl Anthropic {
    /// A client for `model` at `endpoint`.
    pub fn new(model: impl Into<String>, endpoint: &Endpoint) -> Result<Self, LlmError> {
        let transport = Transport::new(
            endpoint,
            "v1/messages",
            |key| (HeaderName::from_static("x-api-key"), key.to_owned()),
            &[(HeaderName::from_static("anthropic-version"), API_VERSION)],
        )?;
        Ok(Self {
            transport,
            model: model.into(),
            prompt_caching: true,
            cache: EncodeCache::default(),
        })
    }

    /// The same client, with or without a prompt-cache breakpoint on the last block of each
    /// request (default: with). Servers that copy the dialect without caching may reject it.
    #[must_use]
    pub fn with_prompt_caching(mut self, enabled: bool) -> Self {
        self.prompt_caching = enabled;
        self
    }

    /// The model requests name.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The URL requests go to.
    pub fn url(&self) -> &str {
        self.transport.url()
    }

    /// Whether requests carry a prompt-cache breakpoint.
    pub fn prompt_caching(&self) -> bool {
        self.prompt_caching
    }

    /// The body [`complete`](LlmClient::complete) sends for `request`; a streamed request has
    /// `"stream":true` first.
    pub fn request_body(&self, request: &LlmRequest<'_>) -> Result<Vec<u8>, LlmError> {
        Ok(self.encoded(request, None)?.to_vec())
    }

    /// The body for `request`, with `stream_fields` first when it streams.
    pub(crate) fn encoded(
        &self,
        request: &LlmRequest<'_>,
        stream_fields: Option<&str>,
    ) -> Result<RequestBody, LlmError> {
        let dialect = Messages {
            prompt_caching: self.prompt_caching,
        };
        let mut lease = self.cache.lease(request, &dialect);
        body(
            &self.model,
            self.prompt_caching,
            request,
            &mut lease,
            stream_fields,
        )
    }
}

impl LlmClient for Anthropic {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        self.stream(request, &mut |_| {}).await
    }

    async fn stream(
        &self,
        request: LlmRequest<'_>,
        on_delta: &mut OnDelta<'_>,
    ) -> Result<LlmReply, LlmError> {
        let encode = |stream_fields: Option<&str>| self.encoded(&request, stream_fields);
        self.transport
            .reply(&self.model, &request, &WIRE, encode, on_delta)
            .await
    }

    fn model_name(&self) -> Option<(&str, &str)> {
        Some((NAME, &self.model))
    }

    fn media(&self) -> Media {
        Media {
            image_types: IMAGE_TYPES.iter().map(|t| (*t).to_owned()).collect(),
            max_image_tokens: MAX_IMAGE_TOKENS,
        }
    }
}

/// The body of a Messages request for `request`.
///
/// With `prompt_caching`, the last block carries a cache breakpoint, so the next request —
/// the same prefix plus a few blocks — reads tools, system prompt and history from the
/// provider's cache instead of paying for them again. Public only for the crate's benches; a
/// client writes its bodies with [`Anthropic::request_body`].
#[doc(hidden)]
pub fn request_body(
    model: &str,
    prompt_caching: bool,
    request: &LlmRequest<'_>,
) -> Result<Vec<u8>, LlmError> {
    Ok(body(model, prompt_caching, request, &mut Lease::none(), None)?.to_vec())
}

/// The body, written field by field in the order the dialect's documentation shows (after
/// `stream_fields`, if any), with the messages and tools `lease` already holds shared.
fn body(
    model: &str,
    prompt_caching: bool,
    request: &LlmRequest<'_>,
    lease: &mut Lease<'_>,
    stream_fields: Option<&str>,
) -> Result<RequestBody, LlmError> {
    let mut out = BodyWriter::default();
    let head = out.buf();
    encode::open_body(head, stream_fields, model)?;
    head.extend_from_slice(br#","max_tokens":"#);
    encode::write_json(head, &request.max_output_tokens)?;
    if let Some(system) = request.system.filter(|s| !s.is_empty()) {
        head.extend_from_slice(br#","system":"#);
        encode::write_json(head, system)?;
    }
    let dialect = Messages { prompt_caching };
    head.extend_from_slice(br#","messages":["#);
    lease.write_messages(request, &dialect, &mut out)?;
    out.close_list();
    if !request.tools.is_empty() {
        out.buf().extend_from_slice(br#","tools":"#);
        lease.write_tools(request, &dialect, &mut out)?;
    } else if dialect.tool_blocks(request) == ToolBlocks::Native {
        // A turn offered no tools whose history holds tool pairs (a steering-only server):
        // declare the tools it called and forbid their use (see the module docs). Both depend
        // on the whole history, so they are written afresh with every request, never cached.
        let called = called_tools(request.messages);
        if !called.is_empty() {
            let end = out.buf();
            end.extend_from_slice(br#","tools":"#);
            encode::write_json(end, &called)?;
            end.extend_from_slice(br#","tool_choice":"#);
            encode::write_json(end, &ToolChoice { kind: "none" })?;
        }
    }
    out.buf().push(b'}');
    Ok(out.finish())
}

/// The Messages wire form of turns and tools.
struct Messages {
    prompt_caching: bool,
}

impl Dialect for Messages {
    /// Native blocks, except in a summary request, which offers no tools at all (see the
    /// module docs).
    fn tool_blocks(&self, request: &LlmRequest<'_>) -> ToolBlocks {
        match (request.tools.is_empty(), request.purpose) {
            (true, Purpose::Summary { .. }) => ToolBlocks::Text,
            (false, _) | (true, Purpose::Turn) => ToolBlocks::Native,
        }
    }

    fn write_turns(
        &self,
        turns: Vec<Turn<'_>>,
        part: Part,
        out: &mut Vec<u8>,
    ) -> Result<Written, LlmError> {
        let mut messages: Vec<WireMessage<'_>> = turns.into_iter().map(wire_message).collect();
        let mut written = Written::AsSettled;
        if part != Part::Settled {
            if messages.last().is_some_and(|m| m.role == "assistant") {
                // Settled turns never end with an assistant turn, so whether the trim changed
                // anything does not matter: these bytes are never taken as settled.
                written = Written::FixedUp;
                finish_last(&mut messages);
            }
            if part == Part::Tail && messages.is_empty() {
                // The breakpoint would belong on a block written before.
                return Ok(Written::Nothing);
            }
            if self.prompt_caching
                && let Some(block) = messages.last_mut().and_then(|m| m.content.last_mut())
            {
                *block.cache_control() = Some(EPHEMERAL);
                written = Written::FixedUp;
            }
        }
        for message in &messages {
            encode::write_json(out, message)?;
            out.push(b',');
        }
        Ok(written)
    }

    fn write_tools(&self, tools: &[ToolSpec], out: &mut Vec<u8>) -> Result<(), LlmError> {
        let tools: Vec<WireTool<'_>> = tools.iter().map(wire_tool).collect();
        encode::write_json(out, &tools)
    }
}

fn wire_message(turn: Turn<'_>) -> WireMessage<'_> {
    match turn {
        Turn::User(parts) => {
            let mut content = Vec::with_capacity(parts.len());
            for part in parts {
                match part {
                    UserPart::Text(text) => push_text(&mut content, text),
                    UserPart::Result { call_id, output } => {
                        content.push(tool_result(call_id, output));
                    }
                }
            }
            if content.is_empty() {
                content.push(Block::Text {
                    text: Cow::Borrowed(EMPTY_TURN),
                    cache_control: None,
                });
            }
            WireMessage {
                role: "user",
                content,
            }
        }
        Turn::Assistant { texts, calls } => {
            let mut content = Vec::with_capacity(texts.len() + calls.len());
            for text in texts {
                push_text(&mut content, text);
            }
            content.extend(calls.into_iter().map(tool_use));
            WireMessage {
                role: "assistant",
                content,
            }
        }
    }
}

/// A final assistant turn is continued by the model (after `pause_turn`); the dialect rejects
/// one that ends in whitespace.
fn finish_last(messages: &mut Vec<WireMessage<'_>>) {
    if let Some(last) = messages.last_mut().filter(|m| m.role == "assistant") {
        if let Some(Block::Text { text, .. }) = last.content.last_mut() {
            let trimmed = text.trim_end().len();
            if trimmed < text.len() {
                text.to_mut().truncate(trimmed);
            }
        }
        last.content
            .retain(|block| !matches!(block, Block::Text { text, .. } if text.is_empty()));
        if last.content.is_empty() {
            messages.pop();
        }
    }
}

fn push_text<'a>(content: &mut Vec<Block<'a>>, text: Cow<'a, str>) {
    if !text.is_empty() {
        content.push(Block::Text {
            text,
            cache_control: None,
        });
    }
}

fn tool_use(call: &ToolCall) -> Block<'_> {
    let input = if call.arguments.is_object() {
        Cow::Borrowed(&call.arguments)
    } else {
        Cow::Owned(Value::Object(serde_json::Map::new()))
    };
    Block::ToolUse {
        id: call.id.as_str(),
        name: &call.name,
        input,
        cache_control: None,
    }
}

fn tool_result<'a>(call_id: &'a CallId, output: &'a ToolOutput) -> Block<'a> {
    let mut content = Vec::with_capacity(output.content.len());
    for block in &output.content {
        match block {
            Content::Text { text } if text.is_empty() => {}
            Content::Text { text } => content.push(ResultBlock::Text {
                text: Cow::Borrowed(text),
            }),
            Content::Image { mime_type, data } if IMAGE_TYPES.contains(&mime_type.as_str()) => {
                content.push(ResultBlock::Image {
                    source: ImageSource {
                        kind: "base64",
                        media_type: mime_type,
                        data,
                    },
                });
            }
            other => {
                let mut text = String::new();
                turns::content_text(other, &mut text);
                content.push(ResultBlock::Text {
                    text: Cow::Owned(text),
                });
            }
        }
    }
    Block::ToolResult {
        tool_use_id: call_id.as_str(),
        content,
        is_error: output.is_error,
        cache_control: None,
    }
}

/// A definition for each tool the history called, in order of first call, for a request that
/// offers no tools but must carry tool blocks. The schema accepts any object: the definition
/// only names what the history used; `tool_choice: none` keeps the model from calling it.
fn called_tools(messages: &[Message]) -> Vec<WireTool<'_>> {
    let mut tools: Vec<WireTool<'_>> = Vec::new();
    for message in messages {
        let Message::Assistant { tool_calls, .. } = message else {
            continue;
        };
        for call in tool_calls {
            if !tools.iter().any(|tool| tool.name == call.name) {
                tools.push(WireTool {
                    name: &call.name,
                    description: "",
                    input_schema: Cow::Owned(serde_json::json!({"type": "object"})),
                });
            }
        }
    }
    tools
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    WireTool {
        name: &tool.name,
        description: &tool.description,
        input_schema: Cow::Borrowed(&tool.input_schema),
    }
}

#[derive(Serialize)]
/// How the model may use the tools; only `none` is sent (see [`called_tools`]).
struct ToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        content: Vec<ResultBlock<'a>>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl Block<'_> {
    fn cache_control(&mut self) -> &mut Option<CacheControl> {
        match self {
            Self::Text { cache_control, .. }
            | Self::ToolUse { cache_control, .. }
            | Self::ToolResult { cache_control, .. } => cache_control,
        }
    }
}

/// A prompt-cache breakpoint: the prefix up to and including its block is cached.
#[derive(Clone, Copy, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResultBlock<'a> {
    Text { text: Cow<'a, str> },
    Image { source: ImageSource<'a> },
}

#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    input_schema: Cow<'a, Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn prompt_caching_marks_only_the_last_block() {
        let messages = [
            Message::user("go"),
            Message::Assistant {
                text: "ok".into(),
                tool_calls: vec![],
            },
            Message::user("more"),
        ];
        let request = LlmRequest {
            purpose: Purpose::Turn,
            system: Some("sys"),
            messages: &messages,
            tools: &[],
            instruction: None,
            max_output_tokens: 10,
            lineage: None,
        };
        let cached = String::from_utf8(request_body("m", true, &request).unwrap()).unwrap();
        assert_eq!(cached.matches("cache_control").count(), 1);
        let body: Value = serde_json::from_str(&cached).unwrap();
        assert_eq!(
            body["messages"][2]["content"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        let plain = String::from_utf8(request_body("m", false, &request).unwrap()).unwrap();
        assert!(!plain.contains("cache_control"));
    }

    #[test]
    fn a_final_assistant_turn_loses_trailing_whitespace() {
        let messages = [
            Message::user("go"),
            Message::Assistant {
                text: "partial  \n".into(),
                tool_calls: vec![],
            },
        ];
        let request = LlmRequest {
            purpose: Purpose::Turn,
            system: None,
            messages: &messages,
            tools: &[],
            instruction: None,
            max_output_tokens: 10,
            lineage: None,
        };
        let body: Value =
            serde_json::from_slice(&request_body("m", false, &request).unwrap()).unwrap();
        assert_eq!(body["messages"][1]["content"][0]["text"], "partial");
    }
}
