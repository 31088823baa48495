//! CPU per round of a whole session: the driver, the machine, the real Chat Completions client
//! against a model server on 127.0.0.1, and the real todo MCP server over stdio — at history
//! lengths 10, 1,000 and 5,000 messages.
//!
//! A round is one model request answered by one `todo__list` call, the call, and its result.
//! Each batch of rounds runs in a fresh session whose history is first filled to the length under
//! test (untimed, through an in-process model and host so filling is fast), then primed with one
//! round through the real client, so the batch sees the history of a long session.
//!
//! Two figures are reported per history length, both per round and both less the model server's
//! thread (its own user and kernel time):
//! - `session_round_cpu`: everything this process pays (user + system, every thread): the
//!   engine's code and the kernel's work on its behalf.
//! - `session_round_user_cpu`: the user-mode part of it, the engine's own code.
//!
//! Why both: the provider protocol sends the whole conversation with every request, so a
//! request body at history 5,000 is about 500 KB, and the kernel's cost of sending it grows
//! with the history whatever the engine does (the bytes are fixed by the snapshots). On
//! loopback that cost is inflated: the receiving side's TCP processing runs in a softirq on the
//! sending thread's CPU and is charged to the sender, so about a third of the agent's send is
//! in fact the model server's receive. A profile of the timed rounds at history 5,000 (`perf
//! record`) puts the `writev` of the body at about 30% of the agent's samples, and the
//! engine's own code costs the same as at history 10. The user-mode figure is therefore the one
//! that holds the engine's line; the total says what a long session costs on this machine.
//!
//! The user/system split comes from `getrusage`, which divides the precise CPU time by the
//! proportion of timer ticks that fell in each mode: a batch lasts about one tick, so the
//! user-mode figure is much noisier than the total (its interval is about ±20% on a busy
//! two-core machine); compare estimates over several runs, not single samples.
//!
//! Target: a round at history 5,000 costs at most 1.5× a round at history 10.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use hookloop::llm::{Endpoint, OpenAi};
use hookloop::machine::{
    CallId, Catalog, HookReply, LlmReply, LlmRequest, StopReason, ToolCall, ToolOutput,
};
use hookloop::mcp::{HostOptions, McpHost, McpServers, ServerConfig};
use hookloop::{Config, HookCall, LlmClient, LlmError, ServerName, Session, ToolHost};

/// Rounds timed per fresh session.
const BATCH: u64 = 25;

fn session_rounds(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let model = ModelServer::start();
    for (name, figure) in [
        ("session_round_cpu", Figure::Total),
        ("session_round_user_cpu", Figure::User),
    ] {
        let mut group = c.benchmark_group(name);
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2));
        for history in [10_usize, 1_000, 5_000] {
            group.bench_with_input(BenchmarkId::from_parameter(history), &history, |b, &n| {
                b.iter_custom(|iters| {
                    runtime.block_on(async {
                        let mut cpu = Duration::ZERO;
                        let mut left = iters;
                        while left > 0 {
                            let rounds = left.min(BATCH);
                            cpu += batch(&model, n, rounds, figure).await;
                            left -= rounds;
                        }
                        cpu
                    })
                });
            });
        }
        group.finish();
    }
}

/// Which of the agent's CPU times a group reports; see the module docs.
#[derive(Clone, Copy)]
enum Figure {
    /// User and system time.
    Total,
    /// User-mode time alone.
    User,
}

/// The agent's CPU time (of the kind `figure` names) for `rounds` rounds of a session holding
/// `history` messages.
async fn batch(model: &ModelServer, history: usize, rounds: u64, figure: Figure) -> Duration {
    let endpoint = Endpoint::parse(&model.url).expect("a URL");
    let client = OpenAi::new("bench", &endpoint).expect("a client");
    let llm = BenchLlm {
        real: client,
        filling: AtomicUsize::new(history.saturating_sub(2) / 2),
        next_id: AtomicU64::new(0),
    };
    let host = BenchHost {
        real: todo_host().await,
        filling: AtomicBool::new(true),
    };
    let config = Config::builder().build().expect("a config");
    let mut session = Session::new(config, llm, host);
    // Fill: the in-process model asks for calls the in-process host answers, then the last
    // request of the prompt goes to the real server, which ends the turn.
    model.calls_left.store(0, Ordering::SeqCst);
    session.prompt("fill").await.expect("the fill prompt");
    session.host().filling.store(false, Ordering::Relaxed);
    // Prime: one round through the real client and server.
    model.calls_left.store(1, Ordering::SeqCst);
    session.prompt("prime").await.expect("the priming prompt");
    // Timed: `rounds` rounds, then the request that ends the turn.
    model.calls_left.store(rounds as usize, Ordering::SeqCst);
    let server_before = model.spent(figure);
    let before = process_cpu(figure);
    session.prompt("work").await.expect("the timed prompt");
    let spent = process_cpu(figure) - before;
    let server = model.spent(figure) - server_before;
    session.close().await.expect("close");
    spent.saturating_sub(server)
}

/// The real client, after a number of in-process answers that fill the history.
struct BenchLlm {
    real: OpenAi,
    filling: AtomicUsize,
    next_id: AtomicU64,
}

impl LlmClient for BenchLlm {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        let fill = self
            .filling
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if !fill {
            return self.real.complete(request).await;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(LlmReply {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: CallId(format!("fill_{id}")),
                name: "todo__list".into(),
                arguments: serde_json::json!({}),
            }],
            stop: StopReason::ToolUse,
            usage: None,
        })
    }
}

/// The real todo server, after a number of in-process answers that fill the history.
struct BenchHost {
    real: McpHost,
    filling: AtomicBool,
}

impl ToolHost for BenchHost {
    fn catalog_generation(&self) -> u64 {
        self.real.catalog_generation()
    }

    fn catalog(&self) -> Catalog {
        self.real.catalog()
    }

    async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
        if self.filling.load(Ordering::Relaxed) {
            return ToolOutput::text("No todos yet.");
        }
        self.real.call_tool(call).await
    }

    async fn call_hook(&self, call: &HookCall) -> HookReply {
        self.real.call_hook(call).await
    }

    async fn kill_server(&self, server: &ServerName) {
        self.real.kill_server(server).await;
    }
}

/// The demo's todo server over stdio: this crate's binary, run as `hookloop todo-server`.
async fn todo_host() -> McpHost {
    let config = ServerConfig::stdio(env!("CARGO_BIN_EXE_hookloop"), ["todo-server"]);
    let servers = McpServers::new()
        .with("todo", config)
        .expect("a server name");
    let options = HostOptions::default().with_all_or_nothing(true);
    let (host, _) = McpHost::connect(servers, options)
        .await
        .expect("the todo server starts");
    host
}

/// A Chat Completions server on 127.0.0.1 that answers with one `todo__list` call while
/// `calls_left` is above zero, and ends the turn otherwise. Its threads' CPU time is counted
/// in `spent`, so the agent's can be told apart.
struct ModelServer {
    url: String,
    calls_left: Arc<AtomicUsize>,
    spent: Arc<ServerCpu>,
}

/// The model server's CPU time so far, in ns.
#[derive(Default)]
struct ServerCpu {
    total: AtomicU64,
    user: AtomicU64,
}

impl ModelServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let url = format!("http://{}/v1", listener.local_addr().expect("an address"));
        let calls_left = Arc::new(AtomicUsize::new(0));
        let spent = Arc::new(ServerCpu::default());
        let (left, cpu) = (Arc::clone(&calls_left), Arc::clone(&spent));
        std::thread::spawn(move || {
            let next_id = AtomicU64::new(0);
            for stream in listener.incoming().flatten() {
                let (left, cpu) = (Arc::clone(&left), Arc::clone(&cpu));
                // Connections are few (one client per batch); one thread each keeps it simple.
                let next = next_id.fetch_add(1_000_000, Ordering::Relaxed);
                std::thread::spawn(move || serve(stream, &left, &cpu, next));
            }
        });
        Self {
            url,
            calls_left,
            spent,
        }
    }

    /// The server's CPU time so far, of the kind `figure` names.
    fn spent(&self, figure: Figure) -> Duration {
        let ns = match figure {
            Figure::Total => &self.spent.total,
            Figure::User => &self.spent.user,
        };
        Duration::from_nanos(ns.load(Ordering::SeqCst))
    }
}

fn serve(stream: TcpStream, calls_left: &AtomicUsize, spent: &ServerCpu, mut next_id: u64) {
    let mut reader = BufReader::new(stream.try_clone().expect("a stream"));
    let mut writer = stream;
    let mut body = Vec::new();
    let mut accounted = (thread_cpu(), user_cpu(libc::RUSAGE_THREAD));
    loop {
        let mut length = 0;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        body.resize(length, 0);
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let call = calls_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let answer = if call {
            next_id += 1;
            format!(
                r#"{{"choices":[{{"index":0,"message":{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{next_id}","type":"function","function":{{"name":"todo__list","arguments":"{{}}"}}}}]}},"finish_reason":"tool_calls"}}]}}"#
            )
        } else {
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}"#.to_owned()
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        // Counted before the answer leaves, so the agent never reads the counter stale.
        let now = (thread_cpu(), user_cpu(libc::RUSAGE_THREAD));
        let add = |counter: &AtomicU64, d: Duration| {
            counter.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
        };
        add(&spent.total, now.0 - accounted.0);
        add(&spent.user, now.1.saturating_sub(accounted.1));
        accounted = now;
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// This process's CPU time, of the kind `figure` names.
fn process_cpu(figure: Figure) -> Duration {
    match figure {
        Figure::Total => clock(libc::CLOCK_PROCESS_CPUTIME_ID),
        Figure::User => user_cpu(libc::RUSAGE_SELF),
    }
}

/// The user-mode CPU time of the process or the calling thread (`who`).
fn user_cpu(who: libc::c_int) -> Duration {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; both `who` values used exist on Linux.
    let rc = unsafe { libc::getrusage(who, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let time = usage.ru_utime;
    Duration::new(time.tv_sec as u64, time.tv_usec as u32 * 1_000)
}

fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clock ids exist on Linux.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

criterion_group!(benches, session_rounds);
criterion_main!(benches);
