//! Streamed replies against loopback servers that send server-sent events: deltas reach
//! observers before the reply is a fact, a stream broken before its content is retried and one
//! broken after it fails, the idle timeout bounds silences but not the whole reply, and a
//! session records the same transcript streamed or not.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookloop::llm::{Anthropic, Endpoint, OpenAi};
use hookloop::machine::{Input, Message, StopReason};
use hookloop::ports::{Delta, LlmClient, LlmError};
use hookloop::testing::InProcessHost;
use hookloop::{Config, Observer, PromptStop, Session};
use serde_json::{Value, json};
use support::loopback::{Loopback, Reply, anthropic_events, openai_events};
use support::{anthropic_message, openai_completion, turn};

fn streamed(server: &Loopback) -> Endpoint {
    support::endpoint(&format!("{}/v1", server.url())).stream(true)
}

fn chat_text(text: &str) -> Value {
    openai_completion(json!({"role": "assistant", "content": text}), "stop", 10)
}

/// Chat Completions events for `text`, each piece its own event.
fn chat_events(text: &str) -> Vec<(String, String)> {
    openai_events(&chat_text(text))
}

/// What an observer saw, in order: deltas and replies.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Observer for Seen {
    fn on_delta(&mut self, _: Duration, delta: &Delta) {
        self.0.lock().unwrap().push(format!("{delta:?}"));
    }

    fn on_fact(&mut self, _: Duration, fact: &Input) {
        if let Input::LlmReplied { reply } = fact {
            self.0
                .lock()
                .unwrap()
                .push(format!("reply {:?}", reply.text));
        }
    }
}

#[tokio::test]
async fn deltas_reach_observers_before_the_reply_which_the_machine_gets_once() {
    let server = Loopback::start([Reply::json(&chat_text("Hello there."))]).await;
    let llm = OpenAi::new("test-model", &streamed(&server)).unwrap();
    let mut session = Session::new(Config::default(), llm, InProcessHost::new());
    let seen = Seen::default();
    session.add_observer(seen.clone());
    assert_eq!(session.prompt("Hi.").await.unwrap(), PromptStop::EndTurn);
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            r#"Text("Hel")"#,
            r#"Text("lo ")"#,
            r#"Text("the")"#,
            r#"Text("re.")"#,
            r#"reply "Hello there.""#
        ]
    );
    let body = server.requests()[0].json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        server.requests()[0].header("accept"),
        Some("text/event-stream")
    );
}

#[tokio::test]
async fn a_session_records_the_same_transcript_streamed_or_not() {
    let answers = || {
        [
            Reply::json(&openai_completion(
                json!({"role": "assistant", "content": "Reading «é».", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "fs__read", "arguments": "{\"path\":\"ü.txt\"}"}}]}),
                "tool_calls",
                40,
            )),
            Reply::json(&chat_text("Done: 😀.")),
        ]
    };
    let dir = std::env::temp_dir().join(format!("hookloop-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut transcripts = Vec::new();
    for stream in [true, false] {
        let server = Loopback::start(answers()).await;
        let endpoint = support::endpoint(&format!("{}/v1", server.url())).stream(stream);
        let llm = OpenAi::new("test-model", &endpoint).unwrap();
        let host = InProcessHost::new().tool("fs", "read", hookloop::testing::echo);
        let mut session = Session::new(Config::default(), llm, host);
        let path = dir.join(format!("stream-{stream}.jsonl"));
        session.record_to(&path).unwrap();
        assert_eq!(
            session.prompt("Read ü.txt.").await.unwrap(),
            PromptStop::EndTurn
        );
        drop(session);
        assert_eq!(server.requests()[0].json()["stream"] == true, stream);
        let text = std::fs::read_to_string(&path).unwrap();
        // Times aside: every `at_ms` is set to zero.
        let lines: Vec<Value> = text
            .lines()
            .map(|line| {
                let mut value: Value = serde_json::from_str(line).unwrap();
                if value.get("at_ms").is_some() {
                    value["at_ms"] = json!(0);
                }
                value
            })
            .collect();
        transcripts.push(lines);
    }
    assert!(transcripts[0].len() > 5);
    assert_eq!(transcripts[0], transcripts[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_stream_broken_before_its_content_is_retried() {
    let mut cut = chat_events("Hi.");
    cut.truncate(1); // the role chunk only: no content yet
    let server = Loopback::start([
        Reply::Events {
            events: cut,
            pause: Duration::ZERO,
            cut: None,
        },
        Reply::json(&chat_text("Hi.")),
    ])
    .await;
    let llm = OpenAi::new("test-model", &streamed(&server)).unwrap();
    let messages = [Message::user("Go.")];
    let reply = llm.complete(turn(&messages, &[])).await.unwrap();
    assert_eq!(reply.text, "Hi.");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_stream_broken_after_its_content_fails_and_is_not_retried() {
    for dialect in ["openai", "anthropic"] {
        let mut events = match dialect {
            "openai" => chat_events("Half a reply."),
            _ => anthropic_events(&anthropic_message(
                json!([{"type": "text", "text": "Half a reply."}]),
                "end_turn",
                10,
            )),
        };
        events.truncate(4);
        let server = Loopback::start([
            Reply::Events {
                events,
                pause: Duration::ZERO,
                // The last event is cut inside its data.
                cut: Some(12),
            },
            Reply::json(&chat_text("never asked")),
        ])
        .await;
        let deltas = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&deltas);
        let mut on_delta = move |delta: Delta| {
            if let Delta::Text(text) = delta {
                sink.lock().unwrap().push_str(&text);
            }
        };
        let messages = [Message::user("Go.")];
        let result = if dialect == "openai" {
            let llm = OpenAi::new("test-model", &streamed(&server)).unwrap();
            llm.stream(turn(&messages, &[]), &mut on_delta).await
        } else {
            let endpoint = support::endpoint(&server.url()).stream(true);
            let llm = Anthropic::new("test-model", &endpoint).unwrap();
            llm.stream(turn(&messages, &[]), &mut on_delta).await
        };
        let err = result.unwrap_err();
        assert!(matches!(err, LlmError::Transport(_)), "{dialect}: {err}");
        assert!(
            err.to_string().contains("the partial reply is not used"),
            "{dialect}: {err}"
        );
        assert!(!deltas.lock().unwrap().is_empty(), "{dialect}");
        assert_eq!(server.requests().len(), 1, "{dialect}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_long_reply_that_never_pauses_past_the_idle_timeout_completes() {
    // Five minutes in all, an event every 30 s, against a 60 s idle timeout (virtual time).
    let text = "0123456789".repeat(3);
    let events = chat_events(&text);
    assert!(events.len() >= 11, "{}", events.len());
    let pause = Duration::from_secs(300) / u32::try_from(events.len() - 1).unwrap();
    assert!(pause <= Duration::from_secs(30));
    let server = Loopback::start([Reply::Events {
        events,
        pause,
        cut: None,
    }])
    .await;
    let endpoint = streamed(&server)
        .timeout(Duration::from_secs(120))
        .stream_timeouts(Duration::from_secs(60), Duration::from_secs(60));
    let llm = OpenAi::new("test-model", &endpoint).unwrap();
    let messages = [Message::user("Go.")];
    let started = tokio::time::Instant::now();
    let reply = llm.complete(turn(&messages, &[])).await.unwrap();
    assert_eq!(reply.text, text);
    assert_eq!(reply.stop, StopReason::EndTurn);
    assert!(started.elapsed() >= Duration::from_secs(290));
}

#[tokio::test(start_paused = true)]
async fn a_silence_past_the_idle_timeout_is_a_timeout() {
    let server = Loopback::start([Reply::Events {
        events: chat_events("Slow."),
        pause: Duration::from_secs(90),
        cut: None,
    }])
    .await;
    let endpoint =
        streamed(&server).stream_timeouts(Duration::from_secs(120), Duration::from_secs(60));
    let llm = OpenAi::new("test-model", &endpoint).unwrap();
    let messages = [Message::user("Go.")];
    let err = llm.complete(turn(&messages, &[])).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { secs: 60 }), "{err}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_damaged_stream_is_an_error_that_says_why() {
    let cases: [(Vec<(String, String)>, &str); 2] = [
        (
            vec![(String::new(), "{not json".into())],
            "a stream chunk is not valid",
        ),
        (
            vec![(
                String::new(),
                json!({"error": {"message": "upstream overloaded"}}).to_string(),
            )],
            "upstream overloaded",
        ),
    ];
    for (events, expected) in cases {
        let server = Loopback::start([Reply::Events {
            events,
            pause: Duration::ZERO,
            cut: None,
        }])
        .await;
        let llm = OpenAi::new("test-model", &streamed(&server)).unwrap();
        let messages = [Message::user("Go.")];
        let err = llm.complete(turn(&messages, &[])).await.unwrap_err();
        assert!(matches!(err, LlmError::InvalidResponse(_)), "{err}");
        assert!(err.to_string().contains(expected), "{err}");
    }
    // A line longer than the parser's limit is refused there, not held in memory.
    let server = Loopback::start([Reply::Events {
        events: vec![(String::new(), "x".repeat(2 * 1024 * 1024))],
        pause: Duration::ZERO,
        cut: None,
    }])
    .await;
    let llm = OpenAi::new("test-model", &streamed(&server)).unwrap();
    let messages = [Message::user("Go.")];
    let err = llm.complete(turn(&messages, &[])).await.unwrap_err();
    assert!(err.to_string().contains("line is longer than"), "{err}");
}
