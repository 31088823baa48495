//! Replay speed and idle-session memory.
//!
//! - `replay/replay/<n>`: machine steps per second through replay (goal ≥ 1M/s); one step is
//!   one record: a fact fed or an effect checked.
//! - `replay/parse_and_replay/<n>`: the time to read and replay a transcript of about 1,000
//!   events from its text (goal < 5 ms).
//! - `replay_cpu/...`: the same, in the thread's CPU time rather than wall-clock time, for
//!   figures that hold on a machine busy with other work.
//! - `replay_suite/1000x1000`: `hookloop replay DIR` as a library call — 1,000 transcript
//!   files of 1,000 records each read, parsed and replayed on one thread per core (goal < 2 s
//!   on two cores). The files are hard links to one recording, so the bench writes it once.
//! - Before the timings, the memory an idle session holds (goal ≤ 64 KiB without MCP
//!   children), measured with a counting global allocator and printed: the bare `Session`.
//! - Then what a real idle ACP session holds besides (its actor, channels, observer, host
//!   handle): `hookloop acp` is started as a child, opens sessions with no MCP servers, and
//!   its resident memory (`VmRSS` in `/proc/<pid>/status`) is read before and after; the
//!   growth per session is printed. Resident memory moves by pages and with the allocator's
//!   arenas, so it is averaged over many sessions.
//!
//! Run: `cargo bench --bench replay` (only the suite: `cargo bench --bench replay -- replay_suite`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use criterion::measurement::Measurement;
use criterion::{Criterion, Throughput};
use hookloop::machine::{Catalog, HookReply, LlmReply, LlmRequest, ToolCall, ToolOutput};
use hookloop::ports::HookCall;
use hookloop::testing::{HookStep, InProcessHost, ScriptedLlm, Step, echo};
use hookloop::transcript::{Recorder, Transcript, default_threads, replay_files};
use hookloop::{Config, Hook, HookServers, LlmClient, LlmError, ServerName, Session, ToolHost};
use serde_json::json;

#[path = "support/cpu_time.rs"]
mod cpu_time;

use cpu_time::CpuTime;

/// Counts live heap bytes, so a bench can tell what a structure holds.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract is System's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Records a session of about `target` events: prompts of three tool rounds, an end of turn,
/// a `_Stop` objection, and the model ending again.
fn record_session(target: usize) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        // Each prompt is 22 records; the catalog and the close are two more.
        let prompts = target.saturating_sub(2).div_ceil(22);
        let llm = ScriptedLlm::new([]);
        let objections = (0..prompts).map(|_| HookStep::Say("open".into()));
        let host =
            InProcessHost::new()
                .tool("fs", "read", echo)
                .hook("todo", Hook::Stop, objections);
        let config = Config::builder()
            .hook_servers(HookServers::All)
            .stop_max_rejections(u32::MAX)
            .build()
            .expect("config");
        let mut session = Session::new(config, llm.clone(), host);
        let recorder = Recorder::in_memory(&session.transcript_header());
        session.record_with(recorder.clone()).expect("fresh");
        let mut n = 0u32;
        for _ in 0..prompts {
            for _ in 0..3 {
                n += 1;
                llm.push([Step::tools(n, &[("fs__read", json!({"path": n}))])]);
            }
            llm.push([Step::text("Done."), Step::text("Done, really.")]);
            session.prompt(format!("prompt {n}")).await.expect("prompt");
        }
        session.close().await.expect("close");
        recorder.text().expect("in memory")
    })
}

fn replay_benches<M: Measurement>(c: &mut Criterion<M>, group: &str, text: &str) {
    let transcript = Transcript::parse(text).expect("parses");
    let records = transcript.records.len();
    transcript.replay().expect("replays");

    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(records as u64));
    group.bench_function(format!("replay/{records}"), |b| {
        b.iter(|| black_box(&transcript).replay().expect("replays"));
    });
    group.bench_function(format!("parse_and_replay/{records}"), |b| {
        b.iter(|| {
            Transcript::parse(black_box(text))
                .expect("parses")
                .replay()
                .expect("replays")
        });
    });
    group.bench_function(format!("parse/{records}"), |b| {
        b.iter(|| Transcript::parse(black_box(text)).expect("parses"));
    });
    group.finish();
}

/// A folder of `files` transcripts, each `text`: hard links to one file, so the page cache
/// holds one copy and the bench measures reading, parsing and replaying, not the disk.
fn suite_dir(text: &str, files: usize) -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
    let dir = std::env::temp_dir().join(format!("hookloop-bench-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let first = dir.join("0000.jsonl");
    std::fs::write(&first, text).expect("write transcript");
    let mut paths = vec![first.clone()];
    for i in 1..files {
        let path = dir.join(format!("{i:04}.jsonl"));
        std::fs::hard_link(&first, &path).expect("hard link");
        paths.push(path);
    }
    (dir, paths)
}

fn suite_bench(c: &mut Criterion, text: &str) {
    const FILES: usize = 1_000;
    let records = Transcript::parse(text).expect("parses").records.len();
    let (dir, files) = suite_dir(text, FILES);
    let threads = default_threads();
    let report = replay_files(&files, threads);
    assert!(report.is_clean(), "{report}");
    println!("replay_suite: {FILES} files of {records} records on {threads} thread(s): {report}");
    let mut group = c.benchmark_group("replay_suite");
    group.sample_size(10);
    group.throughput(Throughput::Elements((FILES * records) as u64));
    group.bench_function(format!("{FILES}x{records}"), |b| {
        b.iter(|| {
            let report = replay_files(black_box(&files), threads);
            assert_eq!(report.passed(), FILES);
        });
    });
    group.finish();
    let _ = std::fs::remove_dir_all(dir);
}

/// A model that answers every request with the same short end of turn.
struct Quiet;

impl LlmClient for Quiet {
    async fn complete(&self, _: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        Ok(LlmReply {
            text: "ok".into(),
            ..LlmReply::default()
        })
    }
}

/// A host with no servers: the session without MCP children.
struct NoServers;

impl ToolHost for NoServers {
    fn catalog_generation(&self) -> u64 {
        0
    }

    fn catalog(&self) -> Catalog {
        Catalog::default()
    }

    async fn call_tool(&self, _: &ToolCall) -> ToolOutput {
        ToolOutput::error("no tools")
    }

    async fn call_hook(&self, _: &HookCall) -> HookReply {
        HookReply::Failed {
            error: "no servers".into(),
        }
    }

    async fn kill_server(&self, _: &ServerName) {}
}

/// Prints the heap an idle session holds, fresh and after one short prompt, averaged over
/// many sessions, plus the session value itself.
fn idle_session_memory() {
    const SESSIONS: usize = 1_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let mut sessions = Vec::with_capacity(SESSIONS);
    let before = live();
    for _ in 0..SESSIONS {
        sessions.push(Session::new(Config::default(), Quiet, NoServers));
    }
    let fresh = (live() - before) as usize / SESSIONS;
    runtime.block_on(async {
        for session in &mut sessions {
            session.prompt("Say ok.").await.expect("prompt");
        }
    });
    let prompted = (live() - before) as usize / SESSIONS;
    let inline = std::mem::size_of::<Session<Quiet, NoServers>>();
    println!(
        "idle session memory: {} bytes fresh, {} bytes after one prompt \
         (heap {fresh} / {prompted} + {inline} inline); goal ≤ 65536",
        fresh + inline,
        prompted + inline,
    );
    drop(sessions);
}

/// The resident memory of process `pid`, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

/// Prints how much resident memory each idle ACP session adds to a running `hookloop acp`.
fn acp_session_memory() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    // Under the per-connection session limit.
    const SESSIONS: usize = 30;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookloop"))
        .arg("acp")
        .env("HOOKLOOP_MODEL", "idle")
        // Never asked: the sessions stay idle.
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .env_remove("HOOKLOOP_RECORD_DIR")
        .env_remove("MCP_HOOK_SERVERS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start hookloop acp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut ask = |id: usize, method: &str, params: serde_json::Value| {
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{frame}").expect("write a frame");
        stdin.flush().expect("flush");
        // Skip notifications until the answer to `id`.
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).expect("read a frame") == 0 {
                panic!("hookloop acp ended before answering {method}");
            }
            let answer: serde_json::Value = serde_json::from_str(&line).expect("a JSON frame");
            if answer["id"] == json!(id) {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return;
            }
        }
    };
    ask(
        0,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    );
    let cwd = std::env::temp_dir();
    let new_session = json!({"cwd": cwd, "mcpServers": []});
    // A first session warms up what every session shares (the runtime's threads, the client).
    ask(1, "session/new", new_session.clone());
    std::thread::sleep(Duration::from_millis(200));
    let pid = child.id();
    let before = resident_kib(pid);
    for id in 0..SESSIONS {
        ask(2 + id, "session/new", new_session.clone());
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = resident_kib(pid);
    let per_session = (after.saturating_sub(before) * 1024) / SESSIONS as u64;
    println!(
        "idle ACP session (hookloop acp, no MCP servers): {per_session} bytes resident each \
         over {SESSIONS} sessions ({before} KiB before, {after} KiB after)"
    );
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    idle_session_memory();
    acp_session_memory();
    let text = record_session(1_000);
    let mut wall = Criterion::default()
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    replay_benches(&mut wall, "replay", &text);
    suite_bench(&mut wall, &text);
    wall.final_summary();
    let mut cpu = Criterion::default()
        .with_measurement(CpuTime::THREAD)
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    replay_benches(&mut cpu, "replay_cpu", &text);
    cpu.final_summary();
}
