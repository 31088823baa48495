//! The cost of one loop round (model reply with a tool call → tool result → next model request),
//! through the bare machine and through the driver with in-process fakes, at history lengths 10
//! and 10,000. Appending is O(1) in the history's length, so the two should cost the same.
//!
//! A round adds two messages, so the measured machine or session is rebuilt at its nominal
//! length before it has grown by more than a tenth (the machine) or by one short prompt (the
//! driver): each figure is the cost at that length, not at whatever length the loop reached.
//!
//! Run: `cargo bench --bench machine`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hookloop::machine::{
    CallId, Catalog, Effect, HookReply, Input, LlmReply, LlmRequest, Machine, Policy, ServerTools,
    StopReason, ToolCall, ToolHints, ToolInfo, ToolOutput,
};
use hookloop::ports::{HookCall, LlmClient, LlmError, ToolHost};
use hookloop::{Config, ServerName, Session};
use serde_json::json;

const LENGTHS: [usize; 2] = [10, 10_000];

fn catalog() -> Catalog {
    Catalog {
        servers: vec![ServerTools {
            server: ServerName::new("s").expect("valid"),
            tools: vec![ToolInfo {
                name: "t".into(),
                description: "a tool".into(),
                input_schema: json!({"type": "object"}),
                hints: ToolHints::default(),
            }],
        }],
    }
}

fn policy() -> Policy {
    // A window large enough that 10,000 messages never trigger compaction.
    Policy {
        max_context_tokens: 1 << 40,
        ..Policy::default()
    }
}

fn tool_reply(n: u64) -> LlmReply {
    LlmReply {
        text: String::new(),
        tool_calls: vec![ToolCall {
            id: CallId(format!("c{n}")),
            name: "s__t".into(),
            arguments: json!({"n": 1}),
        }],
        stop: StopReason::ToolUse,
        usage: None,
    }
}

/// One round through the bare machine.
fn machine_round(m: &mut Machine, n: u64) {
    m.handle(Input::LlmReplied {
        reply: tool_reply(n),
    })
    .expect("a reply is expected");
    while let Some(effect) = m.poll_effect() {
        black_box(&effect);
    }
    m.handle(Input::ToolFinished {
        id: CallId(format!("c{n}")),
        output: ToolOutput::text("ok"),
    })
    .expect("the result is expected");
    while let Some(effect) = m.poll_effect() {
        if let Effect::CallLlm { purpose, .. } = effect {
            black_box(m.request(purpose));
        }
    }
}

/// A machine in the middle of a prompt with `len` messages of history.
fn machine_at(len: usize) -> (Machine, u64) {
    let mut m = Machine::new(policy(), None);
    m.handle(Input::CatalogChanged { catalog: catalog() })
        .expect("catalog");
    m.handle(Input::Prompted { text: "go".into() })
        .expect("prompt");
    while m.poll_effect().is_some() {}
    let mut n = 0;
    while m.history().len() < len {
        n += 1;
        machine_round(&mut m, n);
    }
    (m, n)
}

fn bench_machine(c: &mut Criterion) {
    let mut group = c.benchmark_group("machine_round");
    for len in LENGTHS {
        group.bench_with_input(BenchmarkId::from_parameter(len), &len, |b, &len| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                // Two messages a round: `len / 20` rounds grow the history by a tenth at most.
                let rounds_per_build = (len as u64 / 20).max(1);
                while left > 0 {
                    let (mut m, mut n) = machine_at(len);
                    let batch = left.min(rounds_per_build);
                    let start = Instant::now();
                    for _ in 0..batch {
                        n += 1;
                        machine_round(&mut m, n);
                    }
                    total += start.elapsed();
                    left -= batch;
                }
                total
            });
        });
    }
    group.finish();
}

/// A model that calls the tool `rounds` times, then ends its turn. Costs O(1) per request.
struct LoopLlm {
    calls: AtomicU64,
    rounds: u64,
}

impl LlmClient for LoopLlm {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        black_box(request.messages.len());
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(self.rounds + 1) {
            Ok(LlmReply {
                text: "done".into(),
                ..LlmReply::default()
            })
        } else {
            Ok(tool_reply(n))
        }
    }
}

struct FixedHost(Catalog);

impl ToolHost for FixedHost {
    fn catalog_generation(&self) -> u64 {
        0
    }
    fn catalog(&self) -> Catalog {
        self.0.clone()
    }
    async fn call_tool(&self, _call: &ToolCall) -> ToolOutput {
        ToolOutput::text("ok")
    }
    async fn call_hook(&self, _call: &HookCall) -> HookReply {
        HookReply::Text {
            text: String::new(),
        }
    }
    async fn kill_server(&self, _server: &ServerName) {}
}

/// Rounds of each measured prompt: few, so that a prompt moves the history little (12 messages).
const ROUNDS_PER_PROMPT: u64 = 5;

fn session_at(rt: &tokio::runtime::Runtime, len: usize) -> Session<LoopLlm, FixedHost> {
    let config = Config::builder()
        .context_window(1 << 40, 8_192)
        .build()
        .expect("config");
    let llm = LoopLlm {
        calls: AtomicU64::new(0),
        rounds: ROUNDS_PER_PROMPT,
    };
    let mut session = Session::new(config, llm, FixedHost(catalog()));
    while session.history().len() < len {
        rt.block_on(session.prompt("go")).expect("prompt");
    }
    session
}

fn bench_driver(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("driver_round");
    for len in LENGTHS {
        group.bench_with_input(BenchmarkId::from_parameter(len), &len, |b, &len| {
            b.iter_custom(|iters| {
                // One prompt runs ROUNDS_PER_PROMPT rounds; report the time per round.
                let prompts = iters.div_ceil(ROUNDS_PER_PROMPT);
                let mut total = Duration::ZERO;
                let mut session = session_at(&rt, len);
                // Rebuilt once the history has grown a tenth (at least one prompt's worth).
                let limit = len + (len / 10).max(1);
                for _ in 0..prompts {
                    if session.history().len() > limit {
                        session = session_at(&rt, len);
                    }
                    let start = Instant::now();
                    rt.block_on(session.prompt("go")).expect("prompt");
                    total += start.elapsed();
                }
                total.mul_f64(iters as f64 / (prompts * ROUNDS_PER_PROMPT) as f64)
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(4));
    targets = bench_machine, bench_driver
}
criterion_main!(benches);
