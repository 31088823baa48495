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
//!   name ([`StopReason::Other`]) for the machine to decide; none at all (servers that copy the
//!   dialect sometimes leave it out) → end of turn.
//! - Usage: `prompt_tokens` (cached tokens included, as the dialect counts them) and
//!   `prompt_tokens_details.cached_tokens`.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use reqwest::header::AUTHORIZATION;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::body::{BodyWriter, RequestBody};
use crate::llm::encode::{self, Dialect, EncodeCache, Lease, Part};
use crate::llm::http::{Endpoint, Transport};
use crate::llm::stream::{self, Decoder, OnDelta, OpenAiDecoder};
use crate::llm::turns::{self, ToolBlocks, Turn, UserPart};
use crate::llm::{LlmClient, LlmError, LlmRequest};
use crate::machine::{CallId, LlmReply, StopReason, ToolCall, ToolSpec, Usage};
use crate::text::{Cut, cut};

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
        if !self.transport.streams() {
            let body = self.encoded(&request, None)?;
            return self
                .transport
                .exchange(&self.model, &request, body, parse_response)
                .await;
        }
        let body = self.encoded(&request, Some(stream::OPENAI_STREAM_FIELDS))?;
        let decoder = |limits| -> Box<dyn Decoder> { Box::new(OpenAiDecoder::new(limits)) };
        self.transport
            .exchange_stream(
                &self.model,
                &request,
                body,
                parse_response,
                decoder,
                on_delta,
            )
            .await
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

/// The body of a Chat Completions request for `request`.
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
    ) -> Result<bool, LlmError> {
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
        Ok(true)
    }

    fn write_tools(&self, tools: &[ToolSpec], out: &mut Vec<u8>) -> Result<(), LlmError> {
        let tools: Vec<WireTool<'_>> = tools.iter().map(wire_tool).collect();
        encode::write_json(out, &tools)
    }
}

/// Parses a Chat Completions answer. Never panics, whatever the bytes.
pub fn parse_response(body: &[u8]) -> Result<LlmReply, LlmError> {
    let response: ChatResponse = serde_json::from_slice(body).map_err(|e| {
        LlmError::InvalidResponse(format!(
            "not a chat completion: {e}; the answer began: {:?}",
            cut(
                &String::from_utf8_lossy(body),
                200,
                Cut::Chars { total: true }
            )
        ))
    })?;
    let Some(choice) = response.choices.into_iter().next() else {
        return Err(LlmError::InvalidResponse(match response.error {
            Some(error) => format!(
                "the provider reported an error: {}",
                cut(&error_text(&error), 512, Cut::Chars { total: true })
            ),
            None => "the answer has no choices".to_owned(),
        }));
    };
    // A choice without a message says nothing about how the turn went: taking it as an empty
    // end of turn would end the prompt (and ask `_Stop`) on a broken answer.
    let Some(message) = choice.message else {
        return Err(LlmError::InvalidResponse(
            "the answer's choice has no message".to_owned(),
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
    Ok(LlmReply {
        text,
        tool_calls,
        stop,
        usage,
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

#[derive(Deserialize)]
struct ChatResponse {
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
