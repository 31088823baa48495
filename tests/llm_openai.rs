//! The Chat Completions client against a loopback server answering in the dialect's real shape:
//! request bodies (snapshots), answers of every kind, retries, limits, and whole sessions.

mod support;

use std::time::{Duration, Instant};

use hookloop::llm::{Endpoint, LlmConfig, OpenAi};
use hookloop::machine::{Message, StopReason, ToolCall, ToolOutput, Usage};
use hookloop::ports::{LlmClient, LlmError, ResponseFault};
use hookloop::testing::{HookStep, InProcessHost, check_pairing, echo};
use hookloop::{Config, Hook, HookServers, PromptStop, Session};
use serde_json::{Value, json};
use support::loopback::{Captured, Loopback, Reply};
use support::openai_completion as completion;
use support::{tools, turn};

fn text(content: &str) -> Reply {
    Reply::json(&completion(
        json!({"role": "assistant", "content": content, "refusal": null}),
        "stop",
        100,
    ))
}

/// A reply calling tools, each `(id, name, raw arguments)`.
fn calls(list: &[(&str, &str, &str)], prompt_tokens: u64) -> Reply {
    let tool_calls: Vec<Value> = list
        .iter()
        .map(|(id, name, arguments)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    Reply::json(&completion(
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
        "tool_calls",
        prompt_tokens,
    ))
}

fn client(server: &Loopback) -> OpenAi {
    OpenAi::new("test-model", &endpoint(server)).unwrap()
}

fn endpoint(server: &Loopback) -> Endpoint {
    support::endpoint(&format!("{}/v1", server.url()))
}

/// Every request the server saw, checked: the path, the credentials, the pairing invariant on
/// the wire, and the dialect's ordering rules. Returns the bodies.
fn checked(server: &Loopback) -> Vec<Value> {
    server.requests().iter().map(check_request).collect()
}

fn check_request(request: &Captured) -> Value {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test-key"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    let body = request.json();
    check_pairing(&support::openai_messages(&body)).unwrap();
    support::check_openai_shape(&body);
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
    assert!(reply.tool_calls.is_empty());
    checked(&server);
    insta::assert_snapshot!("text_request", support::pretty(&server.requests()[0].body));
}

#[tokio::test]
async fn one_and_several_tool_calls_are_parsed_in_order() {
    let server = Loopback::start([
        calls(&[("call_1", "fs__read", r#"{"path":"a"}"#)], 100),
        calls(
            &[
                ("call_2", "fs__read", r#"{"path":"b"}"#),
                ("call_3", "fs__read", r#"{"path":"c"}"#),
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
    assert_eq!(
        one.tool_calls,
        [ToolCall {
            id: "call_1".into(),
            name: "fs__read".into(),
            arguments: json!({"path": "a"})
        }]
    );
    let two = client.complete(turn(&messages, &tools)).await.unwrap();
    let ids: Vec<&str> = two.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_2", "call_3"]);
    assert_eq!(two.tool_calls[1].arguments, json!({"path": "c"}));
    checked(&server);
}

#[tokio::test]
async fn every_finish_reason_maps_to_its_stop_reason() {
    let cases = [
        ("stop", StopReason::EndTurn),
        ("tool_calls", StopReason::ToolUse),
        ("length", StopReason::MaxTokens),
        ("content_filter", StopReason::ContentFilter),
        ("something_else", StopReason::Other("something_else".into())),
    ];
    let server = Loopback::start(cases.iter().map(|(finish, _)| {
        Reply::json(&completion(
            json!({"role": "assistant", "content": "x"}),
            finish,
            10,
        ))
    }))
    .await;
    let client = client(&server);
    let messages = [Message::user("Go.")];
    for (finish, stop) in cases {
        let reply = client.complete(turn(&messages, &[])).await.unwrap();
        assert_eq!(reply.stop, stop, "{finish}");
    }
    server.push([Reply::json(&completion(
        json!({"role": "assistant", "content": null, "refusal": "I won't."}),
        "stop",
        10,
    ))]);
    let refused = client.complete(turn(&messages, &[])).await.unwrap();
    assert_eq!(refused.stop, StopReason::Refusal);
    assert_eq!(refused.text, "I won't.");
    checked(&server);
}

#[tokio::test]
async fn usage_reports_the_prompt_with_its_cached_part() {
    let mut body = completion(json!({"role": "assistant", "content": "ok"}), "stop", 0);
    body["usage"] = json!({"prompt_tokens": 2006, "completion_tokens": 300,
        "total_tokens": 2306, "prompt_tokens_details": {"cached_tokens": 1920}});
    let server = Loopback::start([Reply::json(&body)]).await;
    let messages = [Message::user("Go.")];
    let reply = client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap();
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 2006,
            output_tokens: 300,
            cache_read_tokens: 1920,
            cache_creation_tokens: 0,
        })
    );
}

#[tokio::test]
async fn a_429_is_retried_after_the_wait_it_asks_for() {
    let server = Loopback::start([
        Reply::status(
            429,
            &json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
        )
        .header("retry-after-ms", "400"),
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
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(checked(&server).len(), 2);
}

#[tokio::test]
async fn a_500_and_a_dropped_connection_are_retried() {
    let server = Loopback::start([
        Reply::status(500, &json!({"error": {"message": "internal"}})),
        Reply::Close,
        text("ok"),
    ])
    .await;
    let messages = [Message::user("Go.")];
    let reply = client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap();
    assert_eq!(reply.text, "ok");
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 3);
    // Every attempt sends the same request.
    assert!(bodies.iter().all(|b| *b == bodies[0]));
}

#[tokio::test]
async fn retries_end_after_the_limit_with_the_last_error() {
    let server = Loopback::start(
        (0..4).map(|_| Reply::status(503, &json!({"error": {"message": "overloaded"}}))),
    )
    .await;
    let messages = [Message::user("Go.")];
    let err = client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LlmError::Status { status: 503, message } if message == "overloaded"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn a_client_error_is_not_retried_and_its_message_is_short_and_keyless() {
    let long = format!(
        "Incorrect API key provided: sk-test-key. {}",
        "x".repeat(5000)
    );
    let server = Loopback::start([Reply::status(401, &json!({"error": {"message": long}}))]).await;
    let messages = [Message::user("Go.")];
    let err = client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap_err();
    let LlmError::Status { status, message } = &err else {
        panic!("{err}")
    };
    assert_eq!(*status, 401);
    assert!(message.len() < 700, "{}", message.len());
    // The provider quoted the key it refused; the error does not.
    assert!(!err.to_string().contains("sk-test-key"), "{err}");
    assert!(
        message.starts_with("Incorrect API key provided: [redacted]. xxx"),
        "{message}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn garbage_and_truncated_answers_are_errors() {
    let cut = completion(json!({"role": "assistant", "content": "ok"}), "stop", 1).to_string();
    let server = Loopback::start([
        Reply::Http {
            status: 200,
            headers: vec![],
            body: b"<html>upstream went away</html>".to_vec(),
        },
        Reply::Http {
            status: 200,
            headers: vec![],
            body: cut.as_bytes()[..cut.len() / 2].to_vec(),
        },
    ])
    .await;
    let client = client(&server);
    let messages = [Message::user("Go.")];
    for expected in ["upstream went away", "EOF"] {
        let err = client.complete(turn(&messages, &[])).await.unwrap_err();
        assert!(matches!(err, LlmError::InvalidResponse(_)), "{err}");
        assert!(err.to_string().contains(expected), "{err}");
    }
    // Not retried: the server answered, and it would answer the same again.
    assert_eq!(server.requests().len(), 2);

    // A body cut short by the connection is a broken transfer: retried, then reported.
    let short = |_| {
        Reply::Raw(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{}",
                cut.len(),
                &cut[..20]
            )
            .into_bytes(),
        )
    };
    let server = Loopback::start((0..4).map(short)).await;
    let err = crate::client(&server)
        .complete(turn(&messages, &[]))
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Transport(_)), "{err}");
    assert!(err.to_string().contains("/v1/chat/completions"), "{err}");
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn an_oversize_answer_is_refused() {
    let mib = 1024 * 1024;
    let server = Loopback::start([
        // Declared too large: refused before reading it.
        Reply::Raw(
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{{", 17 * mib).into_bytes(),
        ),
        // Not declared: refused once the bytes read pass the cap.
        Reply::Chunked {
            status: 200,
            chunks: (0..17).map(|_| vec![b' '; mib]).collect(),
        },
    ])
    .await;
    let client = client(&server);
    let messages = [Message::user("Go.")];
    for _ in 0..2 {
        let err = client.complete(turn(&messages, &[])).await.unwrap_err();
        assert!(
            matches!(
                err,
                LlmError::InvalidResponse(ResponseFault::BodyTooLarge { at_least, cap })
                    if at_least > cap as u64 && cap == 16 * mib
            ),
            "{err}"
        );
        assert!(err.to_string().contains("over the limit"), "{err}");
    }
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_slow_answer_past_the_timeout_is_a_timeout() {
    let server = Loopback::start([text("late").after(Duration::from_secs(5))]).await;
    let client = OpenAi::new(
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
    assert_eq!(server.requests().len(), 1);
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
                ("call_a", "fs__read", r#"{"path":"a.txt"}"#),
                ("call_b", "fs__read", r#"{"path":"b.txt"}"#),
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
    let stop = session.prompt("Read a.txt and b.txt.").await.unwrap();
    assert_eq!(stop, PromptStop::EndTurn);
    assert_eq!(session.counters().objections, 1);
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 3);
    insta::assert_snapshot!("session_objection", support::pretty_all(&server.requests()));
}

#[tokio::test]
async fn malformed_arguments_get_an_error_result_and_go_back_as_sent() {
    let server = Loopback::start([
        calls(&[("call_bad", "fs__read", r#"{"path": "a.txt""#)], 100),
        text("Sorry, fixed."),
    ])
    .await;
    // Built from the environment's variables, as the binary builds it.
    let vars = [
        ("HOOKLOOP_MODEL", "test-model".to_owned()),
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-test-key".to_owned()),
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
    // The tool never ran.
    assert!(session.host().log().is_empty());
    let bodies = checked(&server);
    assert_eq!(bodies.len(), 2);
    let sent = &bodies[1]["messages"][2]["tool_calls"][0]["function"]["arguments"];
    assert_eq!(sent, r#"{"path": "a.txt""#);
    insta::assert_snapshot!(
        "malformed_arguments_followup",
        support::pretty(&server.requests()[1].body)
    );
}

#[tokio::test]
async fn compaction_sends_a_summary_request_then_the_post_compact_pair() {
    let server = Loopback::start([
        // Reports a prompt over the budget (window less output reserve): the next request compacts.
        calls(&[("call_1", "fs__read", r#"{"path":"big.txt"}"#)], 4_100),
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
    // The summary request offers no tools and ends with the instruction.
    assert!(bodies[1].get("tools").is_none());
    let last = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .ends_with(hookloop::machine::SUMMARY_INSTRUCTION)
    );
    insta::assert_snapshot!("compaction", support::pretty_all(&server.requests()));
}

#[tokio::test]
async fn a_turn_without_tools_keeps_hook_pairs_as_tool_messages() {
    // The only server steers (`_Stop`, no ordinary tool): the model is offered no tools, yet
    // the objection must reach it as a tool result, which the dialect takes without a tool list.
    let server = Loopback::start([text("Done."), text("Still done.")]).await;
    let host = InProcessHost::new().hook("todo", Hook::Stop, [HookStep::Say("one more".into())]);
    let mut session = Session::new(config().build().unwrap(), client(&server), host);
    assert_eq!(session.prompt("Go.").await.unwrap(), PromptStop::EndTurn);
    let bodies = checked(&server);
    assert!(bodies[1].get("tools").is_none());
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["name"],
        "todo___Stop"
    );
    assert_eq!(messages[3]["role"], "tool");
    assert!(!bodies[1].to_string().contains("[result of"));
    insta::assert_snapshot!(
        "hook_pair_without_tools",
        support::pretty(&server.requests()[1].body)
    );
}

#[tokio::test]
async fn an_error_result_reaches_the_model_marked() {
    let server = Loopback::start([
        calls(&[("call_1", "fs__fail", "{}")], 10),
        text("The disk is on fire."),
    ])
    .await;
    let host = host().tool("fs", "fail", |_| ToolOutput::error("disk on fire"));
    let mut session = Session::new(config().build().unwrap(), client(&server), host);
    session.prompt("Go.").await.unwrap();
    let bodies = checked(&server);
    // The tool ran and failed: its own error text reaches the model, marked as an error.
    assert_eq!(
        bodies[1]["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "Error: disk on fire"})
    );
}

#[tokio::test]
async fn a_long_sessions_bodies_arrive_whole_with_their_length_as_encoded_from_scratch() {
    // Enough rounds that the reused part of each body is sent in several pieces.
    const ROUNDS: usize = 40;
    let mut replies: Vec<Reply> = (0..ROUNDS)
        .map(|i| {
            let id = format!("call_{i}");
            calls(&[(&id, "fs__read", r#"{"path":"a.txt"}"#)], 100)
        })
        .collect();
    replies.push(text("Done."));
    let server = Loopback::start(replies).await;
    let mut session = Session::new(config().build().unwrap(), client(&server), host());
    let stop = session.prompt("Read a.txt again and again.").await.unwrap();
    assert_eq!(stop, PromptStop::EndTurn);
    let history = session.history().to_vec();
    let tools = session.machine().model_tools().to_vec();
    let max_output_tokens = session.machine().policy().max_output_tokens;
    let requests = server.requests();
    assert_eq!(requests.len(), ROUNDS + 1);
    for (i, request) in requests.iter().enumerate() {
        let length = request.body.len().to_string();
        assert_eq!(request.header("content-length"), Some(length.as_str()));
        assert_eq!(request.header("transfer-encoding"), None);
        // Request `i` follows the prompt and `i` rounds of a call and its result.
        let scratch = hookloop::llm::openai::request_body(
            "test-model",
            Default::default(),
            &hookloop::machine::LlmRequest {
                purpose: hookloop::machine::Purpose::Turn,
                system: Some("You are a careful agent."),
                messages: &history[..1 + 2 * i],
                tools: &tools,
                instruction: None,
                max_output_tokens,
                lineage: None,
            },
        )
        .unwrap();
        let scratch = String::from_utf8(scratch).unwrap();
        let expected = if support::streaming() {
            let rest = scratch.strip_prefix('{').unwrap();
            format!(r#"{{"stream":true,"stream_options":{{"include_usage":true}},{rest}"#)
        } else {
            scratch
        };
        assert_eq!(
            String::from_utf8_lossy(&request.body),
            expected,
            "request {i}"
        );
    }
}
