//! The Chat Completions dialect (`POST {base}/chat/completions`): OpenAI's, and that of the
//! servers that copy it — Ollama, vLLM, llama.cpp's server, LM Studio, OpenRouter.
//!
//! Translation, both ways:
//! - The system prompt is a `system` message; tools are `function` tools; a tool result is a
//!   `tool` message whose content is text (the dialect has no error flag, so an error result
//!   starts with `Error: `; images and blobs are described, not sent).
//! - Tool-call arguments arrive as a JSON string. Text that is not a JSON object is kept raw, as
//!   a JSON string in [`ToolCall::arguments`](crate::machine::ToolCall::arguments), so the
//!   machine answers it with an error naming the problem; re-sent, it goes back exactly as the
//!   model wrote it. Empty arguments mean `{}` (some servers send `""` for a call without
//!   parameters), and servers that send an object instead of a string are understood.
//! - `finish_reason`: `stop` → end of turn, `tool_calls` → tool use, `length` → output limit,
//!   `content_filter` → content filter; a `refusal` → refusal; any other reason is passed on by
//!   name ([`StopReason::Other`](crate::machine::StopReason::Other)) for the machine to decide; none at all (servers that copy the
//!   dialect sometimes leave it out) → end of turn.
//! - Usage: `prompt_tokens` (cached tokens included, as the dialect counts them) and
//!   `prompt_tokens_details.cached_tokens`.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use reqwest::header::AUTHORIZATION;
use serde::Serialize;
use serde_json::Value;

use crate::llm::body::{BodyWriter, RequestBody};
use crate::llm::encode::{self, Dialect, EncodeCache, Lease, Part, Written};
use crate::llm::http::{Endpoint, Transport, Wire};
use crate::llm::turns::{self, ToolBlocks, Turn, UserPart};
use crate::machine::{LlmReply, LlmRequest, ToolCall, ToolSpec};
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
pub(crate) const NAME: &str = "openai";

/// The default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A Chat Completions client.
#[derive(Debug)]
pub struct OpenAi {
    transport: Transport,
    model: String,
    max_tokens_field: MaxTokensField,
    cache: EncodeCache,
}

impl OpenAi {
    /// A client for `model` at `endpoint`. The output limit goes in
    /// [`MaxTokensField::default_for`] the endpoint's URL; see
    /// [`with_max_tokens_field`](Self::with_max_tokens_field).
    pub fn new(model: impl Into<String>, endpoint: &Endpoint) -> Result<Self, LlmError> {
        let transport = Transport::new(
            endpoint,
            "chat/completions",
            |key| (AUTHORIZATION, format!("Bearer {key}")),
            &[],
        )?;
        Ok(Self {
            max_tokens_field: MaxTokensField::default_for(&endpoint.base_url),
            transport,
            model: model.into(),
            cache: EncodeCache::default(),
        })
    }

    /// The same client, sending the output limit in `field`.
    #[must_use]
    pub fn with_max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.max_tokens_field = field;
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

    /// The body [`complete`](LlmClient::complete) sends for `request`; a streamed request has
    /// `"stream":true,"stream_options":{"include_usage":true}` first.
    pub fn request_body(&self, request: &LlmRequest<'_>) -> Result<Vec<u8>, LlmError> {
        Ok(self.encoded(request, None)?.to_vec())
    }

    /// The body for `request`, with `stream_fields` first when it streams.
    pub(crate) fn encoded(
        &self,
        request: &LlmRequest<'_>,
        stream_fields: Option<&str>,
    ) -> Result<RequestBody, LlmError> {
        let mut lease = self.cache.lease(request, &Chat);
        body(
            &self.model,
            self.max_tokens_field,
            request,
            &mut lease,
            stream_fields,
        )
    }
}

impl LlmClient for OpenAi {
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
}

/// Where the output limit goes. OpenAI's newer models accept only `max_completion_tokens`;
/// Ollama and LM Studio understand only `max_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens`: every compatible server.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: OpenAI itself, vLLM.
    MaxCompletionTokens,
}

impl MaxTokensField {
    /// `max_completion_tokens` for OpenAI's own API, `max_tokens` for everyone else.
    pub fn default_for(base_url: &reqwest::Url) -> Self {
        if base_url.host_str() == Some("api.openai.com") {
            Self::MaxCompletionTokens
        } else {
            Self::MaxTokens
        }
    }

    /// The field's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

impl fmt::Display for MaxTokensField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MaxTokensField {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "max_tokens" => Ok(Self::MaxTokens),
            "max_completion_tokens" => Ok(Self::MaxCompletionTokens),
            _ => Err("expected max_tokens or max_completion_tokens".into()),
        }
    }
}

/// The body of a Chat Completions request for `request`, written from scratch. Public only for
/// the crate's tests and benches; a client writes its bodies with [`OpenAi::request_body`].
#[doc(hidden)]
pub fn request_body(
    model: &str,
    field: MaxTokensField,
    request: &LlmRequest<'_>,
) -> Result<Vec<u8>, LlmError> {
    Ok(body(model, field, request, &mut Lease::none(), None)?.to_vec())
}

/// The body, written field by field in the order the dialect's documentation shows (after
/// `stream_fields`, if any), with the messages and tools `lease` already holds shared.
fn body(
    model: &str,
    field: MaxTokensField,
    request: &LlmRequest<'_>,
    lease: &mut Lease<'_>,
    stream_fields: Option<&str>,
) -> Result<RequestBody, LlmError> {
    let mut out = BodyWriter::default();
    let head = out.buf();
    encode::open_body(head, stream_fields, model)?;
    head.extend_from_slice(br#","messages":["#);
    if let Some(system) = request.system.filter(|s| !s.is_empty()) {
        encode::write_json(head, &ChatMessage::System { content: system })?;
        head.push(b',');
    }
    lease.write_messages(request, &Chat, &mut out)?;
    out.close_list();
    if !request.tools.is_empty() {
        out.buf().extend_from_slice(br#","tools":"#);
        lease.write_tools(request, &Chat, &mut out)?;
    }
    let end = out.buf();
    end.push(b',');
    encode::write_json(end, field.as_str())?;
    end.push(b':');
    encode::write_json(end, &request.max_output_tokens)?;
    end.push(b'}');
    Ok(out.finish())
}

/// The Chat Completions wire form of turns and tools.
struct Chat;

impl Dialect for Chat {
    /// Always native: the dialect takes tool messages in a request without tools, so hook
    /// pairs stay native even when a server only steers and the model is offered nothing.
    fn tool_blocks(&self, _request: &LlmRequest<'_>) -> ToolBlocks {
        ToolBlocks::Native
    }

    fn write_turns(
        &self,
        turns: Vec<Turn<'_>>,
        _part: Part,
        out: &mut Vec<u8>,
    ) -> Result<Written, LlmError> {
        let mut messages = Vec::with_capacity(turns.len());
        for turn in turns {
            match turn {
                Turn::User(parts) => {
                    let mut texts: Vec<Cow<'_, str>> = Vec::new();
                    for part in parts {
                        match part {
                            UserPart::Text(text) => texts.push(text),
                            UserPart::Result { call_id, output } => {
                                flush_user(&mut messages, &mut texts);
                                messages.push(ChatMessage::Tool {
                                    tool_call_id: call_id.as_str(),
                                    content: turns::output_text(output),
                                });
                            }
                        }
                    }
                    flush_user(&mut messages, &mut texts);
                }
                Turn::Assistant { texts, calls } => {
                    let text = turns::join_texts(&texts);
                    messages.push(ChatMessage::Assistant {
                        // The dialect wants `null`, not "", beside tool calls.
                        content: (!text.is_empty() || calls.is_empty()).then_some(text),
                        tool_calls: calls.into_iter().map(wire_call).collect(),
                    });
                }
            }
        }
        // Every message stands alone: nothing is fixed up at the end of a request.
        for message in &messages {
            encode::write_json(out, message)?;
            out.push(b',');
        }
        Ok(Written::AsSettled)
    }

    fn write_tools(&self, tools: &[ToolSpec], out: &mut Vec<u8>) -> Result<(), LlmError> {
        let tools: Vec<WireTool<'_>> = tools.iter().map(wire_tool).collect();
        encode::write_json(out, &tools)
    }
}

fn flush_user<'a>(messages: &mut Vec<ChatMessage<'a>>, texts: &mut Vec<Cow<'a, str>>) {
    match texts.len() {
        0 => {}
        1 => messages.push(ChatMessage::User {
            content: texts.pop().unwrap_or_default(),
        }),
        _ => {
            let content = Cow::Owned(turns::join_texts(texts));
            texts.clear();
            messages.push(ChatMessage::User { content });
        }
    }
}

fn wire_call(call: &ToolCall) -> WireToolCall<'_> {
    WireToolCall {
        id: call.id.as_str(),
        kind: "function",
        function: WireFunctionCall {
            name: &call.name,
            arguments: match &call.arguments {
                // Raw text the model sent goes back exactly as it was.
                Value::String(raw) => Cow::Borrowed(raw),
                other => Cow::Owned(other.to_string()),
            },
        },
    }
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunction {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.input_schema,
        },
    }
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum ChatMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: Cow<'a, str>,
    },
    Assistant {
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: Cow<'a, str>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: &'a Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_max_tokens_field_follows_the_host() {
        let official = reqwest::Url::parse(DEFAULT_BASE_URL).unwrap();
        let local = reqwest::Url::parse("http://127.0.0.1:11434/v1").unwrap();
        assert_eq!(
            MaxTokensField::default_for(&official),
            MaxTokensField::MaxCompletionTokens
        );
        assert_eq!(
            MaxTokensField::default_for(&local),
            MaxTokensField::MaxTokens
        );
        assert_eq!("max_tokens".parse(), Ok(MaxTokensField::MaxTokens));
        assert!("tokens".parse::<MaxTokensField>().is_err());
    }
}
