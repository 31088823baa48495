//! The providers' pure work per model request: rendering the history into the dialect's body
//! and parsing the answer. Both run once per request, so they must stay far below a network
//! round trip at any history length (target: under 5 ms for 1000 messages, where a model takes
//! seconds).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hookloop::llm::{anthropic, openai};
use hookloop::machine::{CallId, LlmRequest, Message, Purpose, ToolCall, ToolOutput, ToolSpec};
use serde_json::json;

/// A history of `turns` rounds: a tool call with its result and a text reply, after a prompt.
fn history(turns: usize) -> Vec<Message> {
    let mut messages = vec![Message::user(
        "Refactor the parser and keep the tests green.",
    )];
    for i in 0..turns {
        let id = CallId(format!("call_{i}"));
        messages.push(Message::Assistant {
            text: "Reading the next file.".into(),
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: "fs__read".into(),
                arguments: json!({"path": format!("src/module_{i}.rs")}),
            }],
        });
        messages.push(Message::ToolResult {
            call_id: id,
            output: ToolOutput::text(
                "fn parse(input: &str) -> Result<Ast, Error> { /* … */ }\n".repeat(8),
            ),
        });
    }
    messages
}

fn tools() -> Vec<ToolSpec> {
    (0..20)
        .map(|i| ToolSpec {
            name: format!("fs__tool_{i}"),
            description: "Does one thing to a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        })
        .collect()
}

fn request_bodies(c: &mut Criterion) {
    let tools = tools();
    let mut group = c.benchmark_group("request_body");
    for turns in [10, 500] {
        let messages = history(turns);
        let request = LlmRequest {
            purpose: Purpose::Turn,
            system: Some("You are a careful agent."),
            messages: &messages,
            tools: &tools,
            instruction: None,
            max_output_tokens: 8192,
            lineage: None,
        };
        let size = messages.len();
        group.bench_with_input(BenchmarkId::new("openai", size), &request, |b, r| {
            b.iter(|| openai::request_body("m", openai::MaxTokensField::MaxTokens, r).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("anthropic", size), &request, |b, r| {
            b.iter(|| anthropic::request_body("m", true, r).unwrap())
        });
    }
    group.finish();
}

fn parse_answers(c: &mut Criterion) {
    let calls: Vec<_> = (0..10)
        .map(|i| json!({"id": format!("call_{i}"), "type": "function",
                        "function": {"name": "fs__read", "arguments": format!("{{\"path\":\"src/{i}.rs\"}}")}}))
        .collect();
    let openai_answer = json!({"id": "x", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": "Reading.", "tool_calls": calls}}],
        "usage": {"prompt_tokens": 90000, "completion_tokens": 300}})
    .to_string();
    let blocks: Vec<_> = (0..10)
        .map(|i| {
            json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": "fs__read",
                        "input": {"path": format!("src/{i}.rs")}})
        })
        .collect();
    let anthropic_answer = json!({"id": "x", "type": "message", "role": "assistant", "model": "m",
        "content": blocks, "stop_reason": "tool_use",
        "usage": {"input_tokens": 90000, "output_tokens": 300}})
    .to_string();
    let mut group = c.benchmark_group("parse_response");
    group.bench_function("openai_10_calls", |b| {
        b.iter(|| openai::parse_response(openai_answer.as_bytes()).unwrap())
    });
    group.bench_function("anthropic_10_calls", |b| {
        b.iter(|| anthropic::parse_response(anthropic_answer.as_bytes()).unwrap())
    });
    group.finish();
}

criterion_group!(benches, request_bodies, parse_answers);
criterion_main!(benches);
