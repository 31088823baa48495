//! A misbehaving model against the providers' clients: each misbehaviour ends in a clear error
//! within an explicit bound on CPU, bytes or time, never in a hang, a panic or memory without
//! bound. The same through `hookloop acp`, where another session must stay answered, is in
//! `hostile_model_acp.rs`.

mod misbehaving_model;

use std::time::{Duration, Instant};

use hookloop::llm::stream::parse_stream_with;
use hookloop::llm::{Anthropic, ApiKey, Endpoint, OpenAi, Provider, ReplyLimits, RetryPolicy};
use hookloop::machine::{LlmReply, Message, Purpose};
use hookloop::ports::{LlmClient, LlmError};
use misbehaving_model::{
    MisbehavingModel, Script, anthropic_blocks, anthropic_end, anthropic_start, data, openai_end,
    openai_tool_indexes, openai_whole_calls, thread_cpu,
};
use serde_json::json;

/// No retries: each test sees the first attempt's outcome.
fn endpoint_at(base_url: &str) -> Endpoint {
    Endpoint::parse(base_url)
        .unwrap()
        .api_key(ApiKey::new("sk-test"))
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .stream_timeouts(Duration::from_secs(20), Duration::from_secs(20))
}

async fn ask(provider: Provider, endpoint: &Endpoint) -> Result<LlmReply, LlmError> {
    let messages = [Message::user("go")];
    let request = hookloop::machine::LlmRequest {
        purpose: Purpose::Turn,
        system: None,
        messages: &messages,
        tools: &[],
        instruction: None,
        max_output_tokens: 100,
        lineage: None,
    };
    // Every misbehaviour must end on its own; this bound only turns a hang into a failure.
    let reply = tokio::time::timeout(Duration::from_secs(60), async {
        match provider {
            Provider::OpenAi => OpenAi::new("m", endpoint).unwrap().complete(request).await,
            Provider::Anthropic => {
                Anthropic::new("m", endpoint)
                    .unwrap()
                    .complete(request)
                    .await
            }
            other => unreachable!("no test of {other:?}"),
        }
    })
    .await;
    reply.expect("the client ends the reply within 60 s")
}

fn serve(script: Script) -> MisbehavingModel {
    MisbehavingModel::start(move |_| script.clone())
}

fn base(provider: Provider, server: &MisbehavingModel) -> String {
    match provider {
        Provider::OpenAi => server.openai_url(),
        Provider::Anthropic => server.url.clone(),
        other => unreachable!("no test of {other:?}"),
    }
}

fn refused(result: Result<LlmReply, LlmError>, what: &str, cap: usize) {
    match result {
        Err(LlmError::ReplyTooLarge { what: w, cap: c }) if w == what && c == cap => {}
        other => panic!("expected a refusal past {cap} {what}, got {other:?}"),
    }
}

#[tokio::test]
async fn thousands_of_tool_call_indexes_are_refused_at_the_cap_in_both_dialects() {
    // The reply: 144,000 indexes in 16 events, each under the 1 MiB line cap. Before
    // the cap and the index map, it did not finish decoding in 120 s of CPU.
    let openai = openai_tool_indexes(144_000, 16);
    let cases = [
        (Provider::OpenAi, openai, "tool calls", 64),
        (
            Provider::Anthropic,
            anthropic_blocks(5_000, "tool_use"),
            "tool calls",
            64,
        ),
        (
            Provider::Anthropic,
            anthropic_blocks(80_000, "text"),
            "content blocks",
            256,
        ),
    ];
    for (provider, body, what, cap) in cases {
        let server = serve(Script::Sse(body));
        let cpu = thread_cpu();
        let result = ask(provider, &endpoint_at(&base(provider, &server))).await;
        let cpu = thread_cpu() - cpu;
        let message = result.as_ref().map(|_| ()).unwrap_err().to_string();
        assert!(
            message.contains(&format!("more than {cap} {what}")),
            "{message}"
        );
        refused(result, what, cap);
        // The refusal comes at the event past the cap: a few milliseconds of CPU. The bound
        // is hundreds of times that, for a loaded machine and a debug build.
        assert!(cpu < Duration::from_secs(2), "{provider}: {cpu:?} of CPU");
    }
}

#[test]
fn with_the_cap_raised_144000_indexes_decode_in_cpu_linear_in_the_bytes() {
    let body = openai_tool_indexes(144_000, 16);
    let limits = ReplyLimits {
        max_tool_calls: 200_000,
        ..ReplyLimits::default()
    };
    let cpu = thread_cpu();
    let reply = parse_stream_with(Provider::OpenAi, limits, body.chunks(64 * 1024)).unwrap();
    let cpu = thread_cpu() - cpu;
    assert_eq!(reply.tool_calls.len(), 144_000);
    assert_eq!(reply.tool_calls[143_999].id.as_str(), "c143999");
    // 11 MB decoded and parsed twice (events, then the assembled answer): about a second in a
    // debug build. A search per index made it minutes.
    assert!(cpu < Duration::from_secs(30), "{cpu:?} of CPU");

    let mut body = anthropic_start().into_bytes();
    for block in anthropic_blocks(60_000, "text").split(|&b| b == b'\n') {
        if !block.is_empty() && !block.starts_with(b"data: {\"type\":\"message") {
            body.extend_from_slice(block);
            body.extend_from_slice(b"\n\n");
        }
    }
    body.extend_from_slice(anthropic_end().as_bytes());
    let limits = ReplyLimits {
        max_blocks: 100_000,
        ..ReplyLimits::default()
    };
    let cpu = thread_cpu();
    let reply = parse_stream_with(Provider::Anthropic, limits, body.chunks(64 * 1024)).unwrap();
    let cpu = thread_cpu() - cpu;
    assert_eq!(reply.text.len(), 60_000);
    assert!(cpu < Duration::from_secs(30), "{cpu:?} of CPU");
}

#[tokio::test]
async fn keep_alives_or_a_trickle_forever_end_at_the_whole_reply_deadline() {
    let forever = [
        // Comments only: each resets the idle timeout and none is an event.
        (
            &b": open\n\n"[..],
            b": ping\n\n".to_vec(),
            Duration::from_millis(50),
        ),
        // One byte of an unending data line at a time.
        (&b"data: "[..], b"x".to_vec(), Duration::from_millis(50)),
    ];
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        for (head, piece, pause) in &forever {
            let server = serve(Script::Endless {
                head: head.to_vec(),
                piece: piece.clone(),
                pause: *pause,
            });
            let endpoint =
                endpoint_at(&base(provider, &server)).reply_timeout(Duration::from_secs(2));
            let started = Instant::now();
            let err = ask(provider, &endpoint).await.unwrap_err();
            assert!(matches!(err, LlmError::ReplyDeadline { secs: 2 }), "{err}");
            assert!(err.to_string().contains("within 2 s"), "{err}");
            // The deadline is 2 s; the bound leaves room for a loaded machine.
            assert!(started.elapsed() < Duration::from_secs(20));
        }
    }
}

#[tokio::test]
async fn an_endless_stream_at_full_speed_is_refused_at_a_cap_of_bytes() {
    let piece = |provider: Provider| match provider {
        Provider::OpenAi => data(&json!({"choices": [{"index": 0,
            "delta": {"content": "y".repeat(60_000)}}]})),
        Provider::Anthropic => data(&json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "y".repeat(60_000)}})),
        other => unreachable!("no test of {other:?}"),
    };
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let head = match provider {
            Provider::OpenAi => String::new(),
            Provider::Anthropic => {
                anthropic_start()
                    + &data(&json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}))
            }
            other => unreachable!("no test of {other:?}"),
        };
        let server = serve(Script::Endless {
            head: head.into_bytes(),
            piece: piece(provider).into_bytes(),
            pause: Duration::ZERO,
        });
        let result = ask(provider, &endpoint_at(&base(provider, &server))).await;
        refused(result, "bytes of text", ReplyLimits::DEFAULT_MAX_TEXT_BYTES);
        // What the server got to write: the cap, and what the sockets' buffers hold.
        assert!(server.sent() < 64 * 1024 * 1024, "{} bytes", server.sent());
    }
}

#[tokio::test]
async fn more_events_than_the_cap_are_refused() {
    let mut body = String::new();
    for _ in 0..ReplyLimits::DEFAULT_MAX_EVENTS + 1 {
        body.push_str("data:{}\n\n");
    }
    body.push_str(&openai_end("stop"));
    let server = serve(Script::Sse(body.into_bytes()));
    let result = ask(Provider::OpenAi, &endpoint_at(&server.openai_url())).await;
    refused(result, "stream events", ReplyLimits::DEFAULT_MAX_EVENTS);
}

#[tokio::test]
async fn a_giant_event_and_an_endless_line_are_errors_not_memory() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        // Many lines of one event, 5 MiB in all: past the 4 MiB cap on an event.
        let line = format!("data: {}\n", "z".repeat(512 * 1024));
        let server = serve(Script::Sse(line.repeat(10).into_bytes()));
        let err = ask(provider, &endpoint_at(&base(provider, &server)))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("more than 4194304 bytes of data"),
            "{err}"
        );

        let server = serve(Script::Endless {
            head: b"data: ".to_vec(),
            piece: vec![b'z'; 64 * 1024],
            pause: Duration::ZERO,
        });
        let err = ask(provider, &endpoint_at(&base(provider, &server)))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("longer than 1048576 bytes"),
            "{err}"
        );
        assert!(server.sent() < 64 * 1024 * 1024, "{} bytes", server.sent());
    }
}

#[tokio::test]
async fn garbage_and_truncated_json_are_errors_that_say_so() {
    let cases: [(Provider, &[u8], &str); 5] = [
        (
            Provider::OpenAi,
            b"data: {oops\n\n",
            "a stream chunk is not valid",
        ),
        (
            Provider::OpenAi,
            b"\xff\xfe\x00garbage\n\n",
            "ended before the reply was complete",
        ),
        (
            Provider::OpenAi,
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"cho",
            "the partial reply is not used",
        ),
        (
            Provider::Anthropic,
            b"event: message_start\ndata: [1,2\n\n",
            "a stream event is not valid",
        ),
        (
            Provider::Anthropic,
            b"data: {\"type\":\"content_block_delta\",\"index\":3}\n\n",
            "no block was started",
        ),
    ];
    for (provider, body, says) in cases {
        let server = serve(Script::Sse(body.to_vec()));
        let err = ask(provider, &endpoint_at(&base(provider, &server)))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(says), "{provider}: {err}");
    }
}

#[tokio::test]
async fn a_giant_reply_not_streamed_is_refused() {
    // 144,000 calls in one whole answer, under the 16 MiB cap on an answer's bytes.
    let server = serve(Script::Whole(openai_whole_calls(144_000)));
    let endpoint = endpoint_at(&server.openai_url()).stream(false);
    refused(ask(Provider::OpenAi, &endpoint).await, "tool calls", 64);

    // Past the cap on bytes, the answer is not read whole.
    let server = serve(Script::Whole(vec![b' '; 17 * 1024 * 1024]));
    let err = ask(
        Provider::OpenAi,
        &endpoint_at(&server.openai_url()).stream(false),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("over the limit of 16777216 bytes"),
        "{err}"
    );
}
