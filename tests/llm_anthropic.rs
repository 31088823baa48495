//! The Messages client against a loopback server answering in the dialect's real shape:
//! request bodies (snapshots), answers of every kind, retries, limits, and whole sessions.

mod binary;
mod support;

use std::time::{Duration, Instant};

use hookloop::llm::{Anthropic, Endpoint, LlmConfig};
use hookloop::machine::{Content, Message, StopReason, ToolCall, ToolOutput, Usage};
use hookloop::ports::{LlmClient, LlmError};
use hookloop::testing::{HookStep, InProcessHost, check_pairing, echo};
use hookloop::{Config, Hook, HookServers, PromptStop, Session};
use serde_json::{Value, json};
use support::anthropic_message as message;
use support::loopback::{Captured, Loopback, Reply};
use support::{tools, turn};

fn text(content: &str) -> Reply {
    Reply::json(&message(
        json!([{"type": "text", "text": content}]),
        "end_turn",
        100,
    ))
}

/// A reply calling tools, each `(id, name, input)`, after some text.
fn calls(list: &[(&str, &str, Value)], input_tokens: u64) -> Reply {
    let mut content = vec![json!({"type": "text", "text": "Let me look."})];
    content.extend(list.iter().map(
        |(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}),
    ));
    Reply::json(&message(Value::Array(content), "tool_use", input_tokens))
}

fn client(server: &Loopback) -> Anthropic {
    Anthropic::new("test-model", &endpoint(server)).unwrap()
}

fn endpoint(server: &Loopback) -> Endpoint {
    support::endpoint(&server.url())
}

/// Every request the server saw, checked: the path, the headers, the pairing invariant on the
/// wire, and the dialect's ordering rules. Returns the bodies.
fn checked(server: &Loopback) -> Vec<Value> {
    server.requests().iter().map(check_request).collect()
}

fn check_request(request: &Captured) -> Value {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-test-key"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    let body = request.json();
    check_pairing(&support::anthropic_messages(&body)).unwrap();
    support::check_anthropic_shape(&body);
    body
}

#[tokio::test]
async fn a_text_reply_ends_the_turn_and_the_request_is_in_the_dialect() {
    let server = Loopback::start([text("Hello.")]).await;
    let messages = [Message::user("Say hello.")];
    let tools = tools();
    let reply = client(&server)
        .complete(turn(&messages, &tools))
        .await
        .unwrap();
    assert_eq!(reply.text, "Hello.");
    assert_eq!(reply.stop, StopReason::EndTurn);
    checked(&server);
    insta::assert_snapshot!("text_request", support::pretty(&server.requests()[0].body));
}

#[tokio::test]
async fn one_and_several_tool_calls_are_parsed_in_order() {
    let server = Loopback::start([
        calls(&[("toolu_1", "fs__read", json!({"path": "a"}))], 100),
        calls(
            &[
                ("toolu_2", "fs__read", json!({"path": "b"})),
                ("toolu_3", "fs__read", json!({"path": "c"})),
            ],
            100,
        ),
    ])
    .await;
    let client = client(&server);
    let messages = [Message::user("Read.")];
    let tools = tools();
    let one = client.complete(turn(&messages, &tools)).await.unwrap();
    assert_eq!(one.stop, StopReason::ToolUse);
    assert_eq!(one.text, "Let me look.");
    assert_eq!(
        one.tool_calls,
        [ToolCall {
            id: "toolu_1".into(),
            name: "fs__read".into(),
            arguments: json!({"path": "a"})
        }]
    );
    let two = client.complete(turn(&messages, &tools)).await.unwrap();
    let ids: Vec<&str> = two.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["toolu_2", "toolu_3"]);
    checked(&server);
}

#[tokio::test]
async fn every_stop_reason_maps() {
    let cases = [
        ("end_turn", StopReason::EndTurn),
        ("stop_sequence", StopReason::StopSequence),
        ("max_tokens", StopReason::MaxTokens),
        ("tool_use", StopReason::ToolUse),
        ("refusal", StopReason::Refusal),
        ("pause_turn", StopReason::PauseTurn),
        (
            "brand_new_reason",
            StopReason::Other("brand_new_reason".into()),
        ),
    ];
    let server = Loopback::start(cases.iter().map(|(reason, _)| {
        Reply::json(&message(json!([{"type": "text", "text": "x"}]), reason, 10))
    }))
    .await;
    let client = client(&server);
    let messages = [Message::user("Go.")];
    for (reason, stop) in cases {
        let reply = client.complete(turn(&messages, &[])).await.unwrap();
        assert_eq!(reply.stop, stop, "{reason}");
    }
    checked(&server);
}

#[tokio::test]
async fn usage_counts_cache_reads_and_writes_in_the_prompt() {
    let mut body = message(json!([{"type": "text", "text": "ok"}]), "end_turn", 0);
    body["usage"] = json!({"input_tokens": 21, "output_tokens": 393,
        "cache_creation_input_tokens": 188, "cache_read_input_tokens": 1800});
    let server = Loopback::start([Reply::json(&body)]).await;
    let messages = [Message::user("Go.")];
    let reply = client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap();
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 2009,
            output_tokens: 393,
            cache_read_tokens: 1800,
            cache_creation_tokens: 188,
        })
    );
}

#[tokio::test]
async fn a_429_is_retried_after_the_seconds_it_asks_for() {
    let error = json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}});
    let server = Loopback::start([
        Reply::status(429, &error).header("retry-after", "1"),
        text("ok"),
    ])
    .await;
    let messages = [Message::user("Go.")];
    let started = Instant::now();
    let reply = client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap();
    assert_eq!(reply.text, "ok");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(checked(&server).len(), 2);
}

#[tokio::test]
async fn a_retry_after_beyond_the_limit_ends_the_retries() {
    let error =
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}});
    let server = Loopback::start([Reply::status(429, &error).header("retry-after", "3600")]).await;
    let messages = [Message::user("Go.")];
    let err = client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LlmError::Status { status: 429, message } if message == "slow down"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn overloaded_and_server_errors_are_retried() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let server = Loopback::start([
        Reply::status(529, &overloaded),
        Reply::status(500, &json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}})),
        text("ok"),
    ])
    .await;
    let messages = [Message::user("Go.")];
    let reply = client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap();
    assert_eq!(reply.text, "ok");
    assert_eq!(checked(&server).len(), 3);

    let server = Loopback::start((0..4).map(|_| Reply::status(529, &overloaded))).await;
    let err = crate::client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LlmError::Status { status: 529, message } if message == "Overloaded"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn garbage_truncated_and_oversize_answers_are_errors() {
    let full = message(json!([{"type": "text", "text": "ok"}]), "end_turn", 1).to_string();
    let server = Loopback::start([
        Reply::Http {
            status: 200,
            headers: vec![],
            body: b"\x00\xffnot json".to_vec(),
        },
        Reply::Http {
            status: 200,
            headers: vec![],
            body: full.as_bytes()[..full.len() - 10].to_vec(),
        },
        Reply::Chunked {
            status: 200,
            chunks: (0..17).map(|_| vec![b' '; 1024 * 1024]).collect(),
        },
    ])
    .await;
    let client = client(&server);
    let messages = [Message::user("Go.")];
    for expected in ["not a message", "EOF", "over the limit"] {
        let err = client.complete(turn(&messages, &[])).await.unwrap_err();
        assert!(matches!(err, LlmError::InvalidResponse(_)), "{err}");
        assert!(err.to_string().contains(expected), "{err}");
    }
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_slow_answer_past_the_timeout_is_a_timeout() {
    let server = Loopback::start([text("late").after(Duration::from_secs(5))]).await;
    let client = Anthropic::new(
        "test-model",
        &endpoint(&server)
            .timeout(Duration::from_millis(300))
            .stream_timeouts(Duration::from_millis(300), Duration::from_millis(300)),
    )
    .unwrap();
    let messages = [Message::user("Go.")];
    let started = Instant::now();
    let err = client.complete(turn(&messages, &[])).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { secs: 1 }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn tool_results_keep_their_error_flag_and_images() {
    let server = Loopback::start([text("Seen.")]).await;
    let messages = [
        Message::user("Look."),
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "toolu_1".into(),
                    name: "fs__shot".into(),
                    arguments: json!({}),
                },
                ToolCall {
                    id: "toolu_2".into(),
                    name: "fs__read".into(),
                    arguments: Value::String("{not json".into()),
                },
            ],
        },
        Message::ToolResult {
            call_id: "toolu_1".into(),
            output: ToolOutput {
                content: vec![
                    Content::Text {
                        text: "a screenshot".into(),
                    },
                    Content::Image {
                        mime_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    },
                ],
                is_error: false,
            },
        },
        Message::ToolResult {
            call_id: "toolu_2".into(),
            output: ToolOutput::error("invalid arguments for fs__read: not a JSON object"),
        },
    ];
    let tools = tools();
    client(&server)
        .complete(turn(&messages, &tools))
        .await
        .unwrap();
    checked(&server);
    insta::assert_snapshot!("tool_results", support::pretty(&server.requests()[0].body));
}

fn host() -> InProcessHost {
    InProcessHost::new().tool("fs", "read", echo)
}

fn config() -> hookloop::ConfigBuilder {
    Config::builder()
        .hook_servers(HookServers::All)
        .system_prompt("You are a careful agent.")
}

#[tokio::test]
async fn a_session_runs_tools_and_hears_a_stop_objection() {
    let server = Loopback::start([
        calls(
            &[
                ("toolu_a", "fs__read", json!({"path": "a.txt"})),
                ("toolu_b", "fs__read", json!({"path": "b.txt"})),
            ],
            200,
        ),
        text("All done."),
        text("Tests written; done."),
    ])
    .await;
    let host = host().hook(
        "todo",
        Hook::Stop,
        [HookStep::Say("1 open: write tests".into())],
    );
    let mut session = Session::new(config().build().unwrap(), client(&server), host);
    assert_eq!(
        session.prompt("Read a.txt and b.txt.").await.unwrap(),
        PromptStop::EndTurn
    );
    assert_eq!(session.counters().objections, 1);
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 3);
    insta::assert_snapshot!("session_objection", support::pretty_all(&server.requests()));
}

#[tokio::test]
async fn a_paused_turn_is_asked_again_with_the_partial_turn() {
    let server = Loopback::start([
        Reply::json(&message(
            json!([{"type": "text", "text": "Working on it... "}]),
            "pause_turn",
            50,
        )),
        text("Finished."),
    ])
    .await;
    let mut session = Session::new(config().build().unwrap(), client(&server), host());
    assert_eq!(session.prompt("Go.").await.unwrap(), PromptStop::EndTurn);
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 2);
    // The partial turn goes back last, without its trailing space, for the model to continue.
    assert_eq!(
        bodies[1]["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Working on it...",
                                                   "cache_control": {"type": "ephemeral"}}]})
    );
}

#[tokio::test]
async fn a_non_object_input_gets_an_error_result_and_goes_back_as_an_empty_object() {
    let server = Loopback::start([
        calls(&[("toolu_bad", "fs__read", json!("a.txt"))], 100),
        text("Sorry."),
    ])
    .await;
    let vars = [
        ("HOOKLOOP_PROVIDER", "anthropic".to_owned()),
        ("HOOKLOOP_MODEL", "test-model".to_owned()),
        ("ANTHROPIC_BASE_URL", server.url()),
        ("ANTHROPIC_API_KEY", "sk-test-key".to_owned()),
        (
            "HOOKLOOP_STREAM",
            u8::from(support::streaming()).to_string(),
        ),
    ];
    let llm = LlmConfig::from_lookup(|var| {
        Ok(vars.iter().find(|(k, _)| *k == var).map(|(_, v)| v.clone()))
    })
    .unwrap()
    .client()
    .unwrap();
    let mut session = Session::new(config().build().unwrap(), llm, host());
    assert_eq!(
        session.prompt("Read a.txt.").await.unwrap(),
        PromptStop::EndTurn
    );
    assert!(session.host().log().is_empty());
    checked(&server);
    insta::assert_snapshot!(
        "malformed_input_followup",
        support::pretty(&server.requests()[1].body)
    );
}

#[tokio::test]
async fn compaction_sends_a_summary_request_then_the_post_compact_pair() {
    let server = Loopback::start([
        calls(
            &[("toolu_1", "fs__read", json!({"path": "big.txt"}))],
            4_100,
        ),
        text("The user asked to read big.txt; it was read. Next: report on it."),
        text("big.txt holds the text; done."),
    ])
    .await;
    let host = host().hook(
        "todo",
        Hook::PostCompact,
        [HookStep::Say("Open todos: report on big.txt".into())],
    );
    let config = config().context_window(5_000, 1_000).build().unwrap();
    let mut session = Session::new(config, client(&server), host);
    assert_eq!(
        session.prompt("Read big.txt.").await.unwrap(),
        PromptStop::EndTurn
    );
    assert_eq!(session.counters().compactions, 1);
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 3);
    // The summary request defines no tools, so it holds no tool blocks.
    assert!(bodies[1].get("tools").is_none());
    insta::assert_snapshot!("compaction", support::pretty_all(&server.requests()));
}

#[tokio::test]
async fn a_screenshot_costs_what_the_dialect_sends_and_forces_no_compaction() {
    // The provider reports no usage, so the machine's own estimate decides.
    let server = Loopback::start([
        calls(&[("t1", "fs__shot", json!({}))], 0),
        text("I see it."),
    ])
    .await;
    let host = InProcessHost::new().tool("fs", "shot", |_| ToolOutput {
        content: vec![Content::Image {
            mime_type: "image/png".into(),
            data: "A".repeat(400_000),
        }],
        is_error: false,
    });
    let config = config().context_window(8_000, 1_000).build().unwrap();
    let mut session = Session::new(config, client(&server), host);
    assert_eq!(
        session.prompt("Take a screenshot.").await.unwrap(),
        PromptStop::EndTurn
    );
    assert_eq!(session.counters().compactions, 0);
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 2, "no summary request");
    assert!(bodies[1].to_string().contains(r#""type":"image""#));
}

#[tokio::test]
async fn a_turn_without_tools_keeps_hook_pairs_native_with_tool_choice_none() {
    // The only server steers (`_Stop`, no ordinary tool): the model is offered nothing, yet
    // the objection must reach it as a tool result. The dialect refuses tool blocks without a
    // tool list, so the request declares the called hook and forbids tool use this turn.
    let server = Loopback::start([text("Done."), text("Still done.")]).await;
    let host = InProcessHost::new().hook("gate", Hook::Stop, [HookStep::Say("lint fails".into())]);
    let mut session = Session::new(config().build().unwrap(), client(&server), host);
    assert_eq!(session.prompt("Go.").await.unwrap(), PromptStop::EndTurn);
    let bodies = checked(&server);
    assert!(bodies[0].get("tools").is_none());
    assert!(bodies[0].get("tool_choice").is_none());
    assert_eq!(bodies[1]["tool_choice"], json!({"type": "none"}));
    assert_eq!(
        bodies[1]["tools"],
        json!([{"name": "gate___Stop", "input_schema": {"type": "object"}}])
    );
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages[1]["content"][1]["type"], "tool_use");
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert!(!bodies[1].to_string().contains("[result of"));
    insta::assert_snapshot!(
        "hook_pair_without_tools",
        support::pretty(&server.requests()[1].body)
    );
}

/// `hookloop run PROMPT` with the test server as server `t` and `server` as Anthropic, each
/// `(name, value)` of `env` set too; the run must end well.
async fn run_binary(server: &Loopback, prompt: &str, env: &[(&str, &str)]) {
    let dir = std::env::temp_dir().join(format!(
        "hookloop-image-{}-{}",
        std::process::id(),
        server.url().rsplit(':').next().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"t": {"command": env!("CARGO_BIN_EXE_hookloop-test-server")}}})
            .to_string(),
    )
    .unwrap();
    let out = tokio::process::Command::new(binary::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap(), prompt])
        .current_dir(&dir)
        .env_remove("MCP_HOOK_SERVERS")
        .env_remove("HOOKLOOP_LOG")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("HOOKLOOP_MAX_CONTEXT_TOKENS")
        .env_remove("HOOKLOOP_MAX_OUTPUT_TOKENS")
        .env("HOOKLOOP_PROVIDER", "anthropic")
        .env("HOOKLOOP_MODEL", "test-model")
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "sk-test-key")
        .env(
            "HOOKLOOP_STREAM",
            u8::from(support::streaming()).to_string(),
        )
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// Through the binary's shared provider client: an image a tool returns reaches Anthropic as
/// an image block, not as a line describing it.
#[tokio::test(flavor = "multi_thread")]
async fn run_sends_a_tool_image_to_anthropic_as_an_image() {
    let server = Loopback::start([
        calls(&[("toolu_1", "t__image", json!({}))], 100),
        text("A picture."),
    ])
    .await;
    run_binary(&server, "Look.", &[]).await;
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 2);
    let result = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .find(|block| block["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool result: {}", bodies[1]));
    let kinds: Vec<&str> = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| block["type"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"image"), "{result}");
}

/// Through the binary's shared provider client: the context estimate counts a tool image as
/// Anthropic is sent it (1,600 tokens at most), so an image that overflows the window compacts
/// before the next request. Counted as its one-line description (about 15 tokens), the same
/// image would leave the estimate far under the budget and no summary would be asked for.
#[tokio::test(flavor = "multi_thread")]
async fn run_counts_a_tool_image_as_anthropic_is_sent_it_and_compacts() {
    // The budget is 3,000 tokens; the first request is reported at 2,000. A 64 KiB image costs
    // the cap, 1,600 tokens, and passes it; its description would cost about 15.
    let server = Loopback::start([
        calls(&[("toolu_1", "t__image", json!({"kib": 64}))], 2_000),
        text("The user asked to look; a 64 KiB picture came back."),
        text("A picture."),
    ])
    .await;
    run_binary(
        &server,
        "Look.",
        &[
            ("HOOKLOOP_MAX_CONTEXT_TOKENS", "4000"),
            ("HOOKLOOP_MAX_OUTPUT_TOKENS", "1000"),
        ],
    )
    .await;
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 3, "a summary request between the two turns");
    // The summary request offers no tools; the request after it does.
    assert!(bodies[1].get("tools").is_none(), "{}", bodies[1]);
    assert!(bodies[2].get("tools").is_some(), "{}", bodies[2]);
}
