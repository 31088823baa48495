//! Hostile MCP servers against the real `hookloop run`: the model (a scripted provider on
//! 127.0.0.1) calls the hostile server's `poke` tool, the server misbehaves until it answers,
//! and the test reads the agent's memory from `/proc` before the call (`VmRSS`) and after it
//! (`VmHWM`, the peak), while the agent waits for the model's next reply. Each bound has a wide
//! margin: the agent's peak grows by a few MiB where the bound is 64.

mod loopback;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopback::{FakeProvider, Reply};
use serde_json::json;

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// Growth of the agent's peak memory a hostile server may cause.
const MAX_GROWTH_KIB: u64 = 64 * 1024;

/// What one run cost.
struct Measured {
    /// `VmRSS` when the model was first asked, before the call.
    before_kib: u64,
    /// `VmHWM` when the model was asked after the call.
    peak_kib: u64,
    /// The hostile server's log.
    log: Vec<String>,
    stderr: String,
    status: Option<i32>,
}

impl Measured {
    fn growth_kib(&self) -> u64 {
        self.peak_kib.saturating_sub(self.before_kib)
    }

    fn starting_with(&self, prefix: &str) -> usize {
        self.log.iter().filter(|l| l.starts_with(prefix)).count()
    }

    fn sent(&self) -> u64 {
        self.log
            .iter()
            .find_map(|l| l.strip_prefix("sent ")?.parse().ok())
            .unwrap_or(0)
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Runs `hookloop run` with the hostile server `behaviour` as server `evil`, the model calling
/// `evil__poke` once and answering the call's result `settle` after it arrived: what the
/// server does after its answer has that long to cost the agent.
fn run_against(behaviour: &str, vars: &[(&str, &str)], settle: Duration) -> Measured {
    let dir = std::env::temp_dir().join(format!(
        "hookloop-hostile-run-{}-{}",
        std::process::id(),
        behaviour.replace(':', "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    let mut env = serde_json::Map::new();
    env.insert("TS_HOSTILE".into(), json!(behaviour));
    env.insert("TS_LOG".into(), json!(log.to_string_lossy()));
    for (name, value) in vars {
        env.insert((*name).into(), json!(value));
    }
    let config = dir.join("mcp.json");
    let server = json!({"command": TEST_SERVER, "env": env});
    std::fs::write(&config, json!({"mcpServers": {"evil": server}}).to_string()).unwrap();
    let pid = Arc::new(AtomicU32::new(0));
    let memory = Arc::new(Mutex::new((0u64, 0u64)));
    let turn = AtomicUsize::new(0);
    let (seen_pid, seen_memory) = (Arc::clone(&pid), Arc::clone(&memory));
    let provider = FakeProvider::start(move |_| {
        let pid = seen_pid.load(Ordering::SeqCst);
        match turn.fetch_add(1, Ordering::SeqCst) {
            0 => {
                seen_memory.lock().unwrap().0 = status_kib(pid, "VmRSS:");
                Reply::tool("evil__poke", json!({}))
            }
            _ => {
                std::thread::sleep(settle);
                seen_memory.lock().unwrap().1 = status_kib(pid, "VmHWM:");
                Reply::text("Done.")
            }
        }
    });
    let child = Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap(), "go"])
        .current_dir(&dir)
        .env_remove("HOOKLOOP_LOG")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    pid.store(child.id(), Ordering::SeqCst);
    let out = child.wait_with_output().unwrap();
    let log = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let (before_kib, peak_kib) = *memory.lock().unwrap();
    let measured = Measured {
        before_kib,
        peak_kib,
        log,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        status: out.status.code(),
    };
    eprintln!(
        "{behaviour}: VmRSS before {} KiB, VmHWM after {} KiB, growth {} KiB; {} sent, {} \
         listings",
        measured.before_kib,
        measured.peak_kib,
        measured.growth_kib(),
        measured.sent(),
        measured.starting_with("list"),
    );
    measured
}

/// The run ended well, the agent's memory was read, and its peak grew by less than the bound.
fn assert_small(measured: &Measured) {
    assert_eq!(measured.status, Some(0), "{}", measured.stderr);
    assert!(measured.before_kib > 0 && measured.peak_kib > 0);
    assert!(
        measured.growth_kib() < MAX_GROWTH_KIB,
        "peak grew by {} KiB",
        measured.growth_kib()
    );
}

#[test]
fn a_list_changed_flood_costs_a_few_listings_and_little_memory() {
    let measured = run_against(
        "flood:tools_list_changed",
        &[("TS_FLOOD_MS", "3000")],
        Duration::ZERO,
    );
    assert_small(&measured);
    assert!(
        measured.sent() > 1000,
        "only {} notifications",
        measured.sent()
    );
    // One listing at start, one at once, one per 500 ms of the 3 s flood, one after it.
    let listings = measured.starting_with("list");
    assert!(listings <= 1 + 1 + 6 + 1, "{listings} listings");
}

#[test]
fn endless_pages_after_list_changed_cost_one_bounded_listing_and_little_memory() {
    let measured = run_against("endless_pages_after_change", &[], Duration::from_secs(3));
    assert_small(&measured);
    // The listing at start, then the refresh's first page, over the tool limit; no more in
    // the 3 s the agent waits.
    assert!(measured.starting_with("list") <= 2, "{:?}", measured.log);
}

#[test]
fn a_giant_line_is_dropped_and_costs_little_memory() {
    let measured = run_against("giant", &[("TS_GIANT_MB", "64")], Duration::ZERO);
    assert_small(&measured);
}

/// One test per kind of message a server can flood the agent with during a call.
macro_rules! flood_tests {
    ($($name:ident: $kind:literal,)*) => {$(
        #[test]
        fn $name() {
            let measured = run_against(
                concat!("flood:", $kind),
                &[("TS_FLOOD_MS", "1500")],
                Duration::ZERO,
            );
            assert_small(&measured);
            assert!(measured.sent() > 100, "only {} sent", measured.sent());
        }
    )*};
}

flood_tests! {
    a_resources_list_changed_flood_costs_little_memory: "resources_list_changed",
    a_prompts_list_changed_flood_costs_little_memory: "prompts_list_changed",
    a_progress_flood_costs_little_memory: "progress",
    a_logging_flood_costs_little_memory: "logging",
    a_cancelled_flood_costs_little_memory: "cancelled",
    an_unknown_notification_flood_costs_little_memory: "unknown_notification",
    a_flood_of_answers_to_unknown_ids_costs_little_memory: "unknown_response",
    a_ping_flood_costs_little_memory: "ping",
    a_sampling_request_flood_costs_little_memory: "sampling",
    a_roots_request_flood_costs_little_memory: "roots",
    an_elicitation_flood_costs_little_memory: "elicitation",
    an_unknown_request_flood_costs_little_memory: "unknown_request",
}
