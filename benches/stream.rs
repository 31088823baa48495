//! Time to the first visible token: a session (the path `hookloop run` takes, up to the
//! observer that prints) asks a loopback Chat Completions server that streams 200 events
//! 10 ms apart, and the clock stops at the first text delta an observer sees. The whole reply
//! takes about 2 s; the first token must come within 50 ms of the prompt (target), since it is
//! the first event the server sends.

#[allow(dead_code)]
#[path = "../tests/support/loopback.rs"]
mod loopback;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use hookloop::llm::{Endpoint, OpenAi};
use hookloop::ports::Delta;
use hookloop::testing::InProcessHost;
use hookloop::{Config, Observer, Session};
use loopback::{Loopback, Reply};
use serde_json::json;

/// Sends the instant of the first text delta.
struct FirstToken(Arc<Mutex<Option<tokio::sync::oneshot::Sender<Instant>>>>);

impl Observer for FirstToken {
    fn on_delta(&mut self, _: Duration, delta: &Delta) {
        if let Delta::Text(_) = delta
            && let Some(tx) = self.0.lock().unwrap().take()
        {
            let _ = tx.send(Instant::now());
        }
    }
}

/// 200 content events, 10 ms apart, then the finish and `[DONE]`.
fn events() -> Vec<(String, String)> {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 0,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        (String::new(), chunk.to_string())
    };
    let mut events: Vec<_> = (0..200)
        .map(|i| chunk(json!({"content": format!("word{i} ")}), json!(null)))
        .collect();
    events.push(chunk(json!({}), json!("stop")));
    events.push((String::new(), "[DONE]".into()));
    events
}

fn first_token(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("stream");
    group.sample_size(20);
    group.bench_function("time_to_first_token_200_events_10ms_apart", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let server = Loopback::start([Reply::Events {
                        events: events(),
                        pause: Duration::from_millis(10),
                        cut: None,
                    }])
                    .await;
                    let endpoint = Endpoint::parse(&format!("{}/v1", server.url())).unwrap();
                    let llm = OpenAi::new("m", &endpoint).unwrap();
                    let mut session = Session::new(Config::default(), llm, InProcessHost::new());
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    session.add_observer(FirstToken(Arc::new(Mutex::new(Some(tx)))));
                    let cancel = session.cancel_handle();
                    let started = Instant::now();
                    let prompt = tokio::spawn(async move {
                        let _ = session.prompt("Go.").await;
                    });
                    let first = rx.await.expect("a first token");
                    total += first - started;
                    // The rest of the reply is not what is measured.
                    cancel.cancel();
                    let _ = prompt.await;
                }
                total
            })
        });
    });
    group.finish();
}

criterion_group!(benches, first_token);
criterion_main!(benches);
