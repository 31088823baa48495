//! Shared by the provider tests: the loopback server, and readers of each dialect's request
//! bodies back into messages, so the pairing invariant is checked on what went on the wire.

#![allow(dead_code)]

pub mod loopback;

use std::time::Duration;

use hookloop::llm::{ApiKey, Endpoint, RetryPolicy};
use hookloop::machine::{CallId, LlmRequest, Message, Purpose, ToolCall, ToolOutput, ToolSpec};
use serde_json::{Value, json};

/// An endpoint at the loopback server with fast retries, so tests do not wait on backoff.
/// The one tool the provider tests offer.
pub fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "fs__read".into(),
        description: "Reads a file.".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }]
}

/// A turn request with a fixed system prompt and output limit.
pub fn turn<'a>(messages: &'a [Message], tools: &'a [ToolSpec]) -> LlmRequest<'a> {
    LlmRequest {
        purpose: Purpose::Turn,
        system: Some("You are terse."),
        messages,
        tools,
        instruction: None,
        max_output_tokens: 1024,
        lineage: None,
    }
}

/// Streamed unless `HOOKLOOP_STREAM=0`, so every provider test runs in both modes.
pub fn endpoint(base_url: &str) -> Endpoint {
    Endpoint::parse(base_url)
        .unwrap()
        .api_key(ApiKey::new("sk-test-key"))
        .timeout(Duration::from_secs(10))
        .stream(streaming())
        .stream_timeouts(Duration::from_secs(10), Duration::from_secs(10))
        .retry(RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(40),
            max_retry_after: Duration::from_secs(5),
        })
}

/// A Chat Completions answer in the shape OpenAI sends.
pub fn openai_completion(message: Value, finish: &str, prompt_tokens: u64) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test-model",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 12,
                  "total_tokens": prompt_tokens + 12,
                  "prompt_tokens_details": {"cached_tokens": 0}}
    })
}

/// A Messages answer in the shape Anthropic sends.
pub fn anthropic_message(content: Value, stop: &str, input_tokens: u64) -> Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "test-model",
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": 12,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    })
}

/// A Chat Completions body's messages, as the engine's messages.
pub fn openai_messages(body: &Value) -> Vec<Message> {
    let mut out = Vec::new();
    for message in body["messages"].as_array().expect("messages") {
        match message["role"].as_str().expect("role") {
            "system" => {}
            "user" => out.push(Message::user(message["content"].as_str().expect("text"))),
            "assistant" => {
                let tool_calls = message["tool_calls"]
                    .as_array()
                    .map(|calls| {
                        calls
                            .iter()
                            .map(|call| {
                                assert_eq!(call["type"], "function");
                                let raw = call["function"]["arguments"].as_str().expect("string");
                                ToolCall {
                                    id: CallId(call["id"].as_str().expect("id").to_owned()),
                                    name: call["function"]["name"].as_str().unwrap().to_owned(),
                                    arguments: Value::String(raw.to_owned()),
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Message::Assistant {
                    text: message["content"].as_str().unwrap_or_default().to_owned(),
                    tool_calls,
                });
            }
            "tool" => out.push(Message::ToolResult {
                call_id: CallId(message["tool_call_id"].as_str().expect("id").to_owned()),
                output: ToolOutput::text(message["content"].as_str().expect("text")),
            }),
            other => panic!("unexpected role {other}"),
        }
    }
    out
}

/// Checks what Chat Completions requires beyond pairing: tool messages follow their assistant
/// message directly, and the conversation opens with the user.
pub fn check_openai_shape(body: &Value) {
    let messages = body["messages"].as_array().unwrap();
    let mut open = 0usize;
    let mut first = true;
    for message in messages {
        let role = message["role"].as_str().unwrap();
        if role == "system" {
            continue;
        }
        if first {
            assert_eq!(role, "user", "the conversation opens with the user");
            first = false;
        }
        match role {
            "tool" => {
                assert!(open > 0, "a tool message without an open call");
                open -= 1;
            }
            _ => {
                assert_eq!(open, 0, "{role} message before every call was answered");
                if role == "assistant" {
                    open = message["tool_calls"].as_array().map_or(0, Vec::len);
                }
            }
        }
    }
    assert_eq!(open, 0, "calls left unanswered");
}

/// A Messages body's messages, as the engine's messages.
pub fn anthropic_messages(body: &Value) -> Vec<Message> {
    let mut out = Vec::new();
    for message in body["messages"].as_array().expect("messages") {
        let blocks = message["content"].as_array().expect("content blocks");
        match message["role"].as_str().expect("role") {
            "user" => {
                for block in blocks {
                    match block["type"].as_str().unwrap() {
                        "text" => out.push(Message::user(block["text"].as_str().unwrap())),
                        "tool_result" => out.push(Message::ToolResult {
                            call_id: CallId(block["tool_use_id"].as_str().unwrap().to_owned()),
                            output: ToolOutput::text(block["content"].to_string()),
                        }),
                        other => panic!("unexpected user block {other}"),
                    }
                }
            }
            "assistant" => {
                let mut text = String::new();
                let mut tool_calls = Vec::new();
                for block in blocks {
                    match block["type"].as_str().unwrap() {
                        "text" => text.push_str(block["text"].as_str().unwrap()),
                        "tool_use" => tool_calls.push(ToolCall {
                            id: CallId(block["id"].as_str().unwrap().to_owned()),
                            name: block["name"].as_str().unwrap().to_owned(),
                            arguments: block["input"].clone(),
                        }),
                        other => panic!("unexpected assistant block {other}"),
                    }
                }
                out.push(Message::Assistant { text, tool_calls });
            }
            other => panic!("unexpected role {other}"),
        }
    }
    out
}

/// Checks what Messages requires beyond pairing: roles alternate starting with the user, no
/// content is empty, every `tool_use` input is an object, the results of an assistant turn's
/// calls open the next user turn, and tool blocks appear only when tools are defined.
pub fn check_anthropic_shape(body: &Value) {
    let messages = body["messages"].as_array().unwrap();
    let has_tools = body.get("tools").is_some();
    let mut expected_role = "user";
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        let role = message["role"].as_str().unwrap();
        assert_eq!(
            role, expected_role,
            "roles alternate, starting with the user"
        );
        expected_role = if role == "user" { "assistant" } else { "user" };
        let blocks = message["content"].as_array().unwrap();
        assert!(!blocks.is_empty(), "empty content");
        let mut results_done = false;
        for block in blocks {
            let kind = block["type"].as_str().unwrap();
            if kind == "text" {
                assert!(
                    !block["text"].as_str().unwrap().is_empty(),
                    "empty text block"
                );
            }
            if kind == "tool_use" || kind == "tool_result" {
                assert!(has_tools, "{kind} block in a request without tools");
            }
            match (role, kind) {
                ("assistant", "tool_use") => {
                    assert!(block["input"].is_object(), "input must be an object");
                    open.push(block["id"].as_str().unwrap().to_owned());
                }
                ("user", "tool_result") => {
                    assert!(!results_done, "tool results come first in a user turn");
                    let id = block["tool_use_id"].as_str().unwrap();
                    let pos = open
                        .iter()
                        .position(|o| o == id)
                        .expect("result of an open call");
                    open.remove(pos);
                }
                ("user", _) => {
                    assert!(open.is_empty(), "text before every call was answered");
                    results_done = true;
                }
                _ => {}
            }
        }
    }
    assert!(open.is_empty(), "calls left unanswered: {open:?}");
}

/// A compact JSON body laid out one value a line, keys in the order they were sent, so a
/// snapshot pins the exact body (only whitespace is added, outside strings).
pub fn pretty(body: &[u8]) -> String {
    let text = std::str::from_utf8(body).expect("the body is UTF-8");
    let text = without_stream_fields(text);
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                let close = if c == '{' { '}' } else { ']' };
                if chars.peek() == Some(&close) {
                    out.push(close);
                    chars.next();
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth -= 1;
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    // Only whitespace was added: the layout reads back as the very same JSON.
    let back: Value = serde_json::from_str(&out).expect("the layout is JSON");
    assert_eq!(back, serde_json::from_str::<Value>(&text).unwrap());
    out
}

/// Several bodies for one snapshot, numbered.
/// Whether the provider tests stream (`HOOKLOOP_STREAM` is not `0`).
pub fn streaming() -> bool {
    std::env::var("HOOKLOOP_STREAM").map_or(true, |v| v.trim() != "0")
}

/// A body without the fields that ask for a stream, so snapshots are the same in both modes;
/// when streaming, the fields must be there, first, exactly.
fn without_stream_fields(text: &str) -> String {
    const OPENAI: &str = r#"{"stream":true,"stream_options":{"include_usage":true},"#;
    const ANTHROPIC: &str = r#"{"stream":true,"#;
    let stripped = [OPENAI, ANTHROPIC]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix));
    match stripped {
        Some(rest) => {
            assert!(streaming(), "a stream asked for with HOOKLOOP_STREAM=0");
            format!("{{{rest}")
        }
        None => {
            assert!(!streaming(), "no stream asked for: {text}");
            text.to_owned()
        }
    }
}

pub fn pretty_all(requests: &[loopback::Captured]) -> String {
    requests
        .iter()
        .enumerate()
        .map(|(i, r)| format!("// request {}\n{}\n", i + 1, pretty(&r.body)))
        .collect::<Vec<_>>()
        .join("\n")
}
