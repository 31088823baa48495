//! What a hook round costs on top of MCP itself, over stdio to the test server:
//!
//! - `raw_call_tool`: rmcp's own client calling `_Stop` (the floor);
//! - `host_stop_1`: one `_Stop` round through the host (goal: at most 1.3× the raw call);
//! - `host_stop_8`: `_Stop` fanned out to 8 servers at once, as the driver does (goal: at most
//!   1.5× one server);
//! - `host_stop_8_sequential`: the same eight calls one after another, for scale;
//! - `pre_tool_use_cpu/{servers_1,servers_8}`: one `_PreToolUse` round (with its arguments) to 1
//!   and to 8 allowed servers, measured in CPU time of this process only (the engine's own
//!   work: rmcp framing, JSON, the fan-out; the server children are not counted, since they
//!   share the machine's cores). Goal: 8 servers at most 1.5× one.
//!
//! `cargo bench --bench hooks` prints the ratios after criterion's own report.
//!
//! The CPU-time group runs on the runtime the binary runs on (one thread). Where a round's
//! instructions go, by `callgrind` (see [`PROFILE_VAR`]), with the stdio line transport
//! (`src/mcp/transport.rs`): about 125 k instructions a server (170 k with rmcp's own stream
//! transport). Of a server's share, encoding the `tools/call` request takes about 38 k (on
//! protocol 2026-07-28 its `_meta` carries the client's capabilities and info, written out of
//! `serde_json::Value`s, and the argument text is escaped byte by byte); decoding the answer
//! about 13 k (straight into `CallToolResult`); rmcp's request path about 27 k (building that
//! `_meta`, the capabilities through `serde_json::to_value` on every request; the clone of the
//! parameters; the hop to its service task; a spawned task per write; the responder); hookloop's
//! own code (the slot lookup, `_meta`, the clone of the arguments, the answer's text) about 11 k.
//! The round's fixed part is about 3 k. Each server needs a request and an answer of its own,
//! one pipe write and one read, so eight servers cost close to eight times one: the 1.5× goal
//! is out of reach for any fan-out whose per-server work is a JSON-RPC exchange.

use std::hint::black_box;
use std::process::Stdio;
use std::time::Duration;

use criterion::Criterion;
use futures_util::future::join_all;
use hookloop::machine::{HookContext, HookReply};
use hookloop::mcp::{HostOptions, McpHost, McpServers, ServerConfig};
use hookloop::ports::{HookCall, ToolHost};
use hookloop::{Hook, ServerName};
use rmcp::model::{CallToolRequestParams, JsonObject, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, serve_client_with_lifecycle};

#[path = "support/cpu_time.rs"]
mod cpu_time;

use cpu_time::CpuTime;

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");
const GROUP: &str = "hooks";

fn server(hooks: &str) -> ServerConfig {
    ServerConfig::stdio(TEST_SERVER, Vec::<String>::new()).env("TS_HOOKS", hooks)
}

async fn host(n: usize) -> McpHost {
    hook_host(n, "_Stop").await
}

async fn hook_host(n: usize, hooks: &str) -> McpHost {
    let mut servers = McpServers::new();
    for i in 0..n {
        servers = servers
            .with(&format!("s{i}"), server(hooks))
            .expect("server name");
    }
    let (host, failures) = McpHost::connect(servers, HostOptions::default())
        .await
        .expect("connect");
    assert!(failures.is_empty(), "{failures:?}");
    host
}

fn stop(server: usize) -> HookCall {
    HookCall {
        server: ServerName::new(format!("s{server}")).expect("server name"),
        hook: Hook::Stop,
        timeout: Duration::from_secs(5),
        context: HookContext::default(),
        arguments: serde_json::Map::new(),
    }
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group(GROUP);

    // The floor: rmcp's client, same server, same protocol negotiation as the host.
    let raw = rt.block_on(async {
        let mut child = tokio::process::Command::new(TEST_SERVER)
            .env("TS_HOOKS", "_Stop")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the test server");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::LATEST],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        };
        let client = serve_client_with_lifecycle((), (stdout, stdin), lifecycle)
            .await
            .expect("rmcp client");
        (child, client)
    });
    group.bench_function("raw_call_tool", |b| {
        b.iter(|| {
            rt.block_on(async {
                let params = CallToolRequestParams::new("_Stop").with_arguments(JsonObject::new());
                black_box(raw.1.peer().call_tool(params).await.expect("call"))
            })
        })
    });

    let one = rt.block_on(host(1));
    group.bench_function("host_stop_1", |b| {
        b.iter(|| {
            rt.block_on(async {
                let reply = one.call_hook(&stop(0)).await;
                assert_eq!(
                    reply,
                    HookReply::Text {
                        text: String::new()
                    }
                );
                black_box(reply)
            })
        })
    });

    let eight = rt.block_on(host(8));
    let calls: Vec<HookCall> = (0..8).map(stop).collect();
    group.bench_function("host_stop_8", |b| {
        b.iter(|| {
            rt.block_on(async {
                black_box(join_all(calls.iter().map(|call| eight.call_hook(call))).await)
            })
        })
    });
    // The same eight calls one after another: what the fan-out saves.
    group.bench_function("host_stop_8_sequential", |b| {
        b.iter(|| {
            rt.block_on(async {
                for call in &calls {
                    black_box(eight.call_hook(call).await);
                }
            })
        })
    });
    group.finish();
    drop((one, eight, raw));
}

/// The `_PreToolUse` call one model tool call makes to server `server`.
fn pre_tool_use(server: usize) -> HookCall {
    let mut arguments = serde_json::Map::new();
    arguments.insert("tool".into(), "fs__write".into());
    arguments.insert(
        "arguments".into(),
        serde_json::json!({"path": "src/lib.rs", "text": "x".repeat(512)}),
    );
    HookCall {
        hook: Hook::PreToolUse,
        arguments,
        ..stop(server)
    }
}

const CPU_GROUP: &str = "pre_tool_use_cpu";

/// One `_PreToolUse` round to 1 and to 8 servers, in the engine's CPU time.
fn cpu_benches(c: &mut Criterion<CpuTime>) {
    // The runtime the binary runs every command on (`runtime()` in src/main.rs): one thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group(CPU_GROUP);
    for n in [1, 8] {
        let host = rt.block_on(hook_host(n, "_PreToolUse"));
        let calls: Vec<HookCall> = (0..n).map(pre_tool_use).collect();
        group.bench_function(format!("servers_{n}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let replies = join_all(calls.iter().map(|call| host.call_hook(call))).await;
                    assert!(replies.iter().all(|r| matches!(r, HookReply::Text { .. })));
                    black_box(replies)
                })
            })
        });
        drop(host);
    }
    group.finish();
}

/// Runs `<servers>:<rounds>` `_PreToolUse` rounds on the engine's runtime and nothing else, for
/// an instruction count that does not depend on the machine's load:
/// `HOOKS_BENCH_ROUNDS=8:1000 valgrind --tool=callgrind <the bench binary>` (the same with
/// `8:0` gives the start-up to subtract).
const PROFILE_VAR: &str = "HOOKS_BENCH_ROUNDS";

fn profile_rounds(spec: &str) {
    let parsed = spec
        .split_once(':')
        .and_then(|(n, rounds)| Some((n.parse::<usize>().ok()?, rounds.parse::<usize>().ok()?)));
    let Some((n, rounds)) = parsed else {
        panic!("{PROFILE_VAR} is <servers>:<rounds>, not {spec:?}");
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let host = rt.block_on(hook_host(n, "_PreToolUse"));
    let calls: Vec<HookCall> = (0..n).map(pre_tool_use).collect();
    for _ in 0..rounds {
        rt.block_on(async {
            black_box(join_all(calls.iter().map(|call| host.call_hook(call))).await)
        });
    }
}

/// Criterion's mean estimate for one benchmark of the group, in nanoseconds, if this run wrote
/// it (`since`: when the run started). A benchmark left out of this run (a filter, `--test`)
/// still has the estimate of an earlier run on disk, on another day's load: a ratio that mixed
/// the two would compare runs, not code.
fn mean_ns(id: &str, since: std::time::SystemTime) -> Option<f64> {
    mean_ns_in(GROUP, id, since)
}

fn mean_ns_in(group: &str, id: &str, since: std::time::SystemTime) -> Option<f64> {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{target}/criterion/{group}/{id}/new/estimates.json");
    let written = std::fs::metadata(&path).ok()?.modified().ok()?;
    if written < since {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn main() {
    if let Some(spec) = std::env::var_os(PROFILE_VAR) {
        return profile_rounds(&spec.to_string_lossy());
    }
    let started = std::time::SystemTime::now();
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
    let mut cpu = Criterion::default()
        .with_measurement(CpuTime::PROCESS)
        .configure_from_args();
    cpu_benches(&mut cpu);
    cpu.final_summary();
    if let (Some(one), Some(eight)) = (
        mean_ns_in(CPU_GROUP, "servers_1", started),
        mean_ns_in(CPU_GROUP, "servers_8", started),
    ) {
        println!(
            "_PreToolUse round in engine CPU time: 8 servers {:.2}x one (goal <= 1.5); \
             one {:.1} us, eight {:.1} us",
            eight / one,
            one / 1e3,
            eight / 1e3
        );
    }
    let (Some(raw), Some(one), Some(eight), Some(sequential)) = (
        mean_ns("raw_call_tool", started),
        mean_ns("host_stop_1", started),
        mean_ns("host_stop_8", started),
        mean_ns("host_stop_8_sequential", started),
    ) else {
        // `cargo test --benches` runs each benchmark once and writes no estimates; a filtered
        // run leaves some out. Ratios come from one run or not at all.
        println!("hook round ratios: not printed, this run did not measure all four benchmarks");
        return;
    };
    println!(
        "hook round through the host: {:.2}x the raw rmcp call (goal <= 1.3); \
         fan-out to 8 servers: {:.2}x one (goal <= 1.5), {:.2}x the same calls in sequence; \
         raw {:.1} us, one {:.1} us, eight {:.1} us, eight in sequence {:.1} us",
        one / raw,
        eight / one,
        eight / sequential,
        raw / 1e3,
        one / 1e3,
        eight / 1e3,
        sequential / 1e3
    );
}
