//! Hostile MCP servers against the real `hookloop run`: the model (a scripted provider on
//! 127.0.0.1) calls the hostile server's `poke` tool, the server misbehaves until it answers,
//! and the test reads the agent's memory from `/proc` before the call (`VmRSS`) and after it
//! (`VmHWM`, the peak), while the agent waits for the model's next reply. Each bound has a wide
//! margin: the agent's peak grows by a few MiB where the bound is 64.

mod loopback;
#[path = "support/peak_memory.rs"]
mod peak_memory;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use peak_memory::{PeakMemory, run_poked};

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// Growth of the agent's peak memory a hostile server may cause.
const MAX_GROWTH_KIB: u64 = 64 * 1024;

/// What one run cost, and the hostile server's log.
struct Measured {
    run: PeakMemory,
    log: Vec<String>,
}

impl Measured {
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

/// Runs `hookloop run` with the hostile server `behaviour` as server `evil`, the model calling
/// `evil__poke` once and answering the call's result `settle` after it arrived: what the
/// server does after its answer has that long to cost the agent.
fn run_against(behaviour: &str, vars: &[(&str, &str)], settle: Duration) -> Measured {
    // Two tests may run one behaviour at once: each run has a directory (and a log) of its own.
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "hookloop-hostile-run-{}-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed),
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
    let run = run_poked(&config, &dir, settle);
    let log = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let measured = Measured { run, log };
    eprintln!(
        "{behaviour}: VmRSS before {} KiB, VmHWM after {} KiB, growth {} KiB; {} sent, {} \
         listings",
        measured.run.before_kib,
        measured.run.peak_kib,
        measured.run.growth_kib(),
        measured.sent(),
        measured.starting_with("list"),
    );
    measured
}

/// The run ended well, the agent's memory was read, and its peak grew by less than the bound.
fn assert_small(measured: &Measured) {
    measured.run.assert_below(MAX_GROWTH_KIB);
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

/// One test per kind of message a server can flood the agent with during a call: the server
/// reads at the pace `vars` set.
macro_rules! flood_tests {
    ($vars:expr, $max_growth_kib:expr; $($name:ident: $kind:literal,)*) => {$(
        #[test]
        fn $name() {
            let measured = run_against(concat!("flood:", $kind), $vars, Duration::ZERO);
            measured.run.assert_below($max_growth_kib);
            assert!(measured.sent() > 100, "only {} sent", measured.sent());
        }
    )*};
}

/// A flood for 1.5 s.
const FLOOD: &[(&str, &str)] = &[("TS_FLOOD_MS", "1500")];

/// A flood of requests for 2 s by a server that reads a line of its stdin every 300 µs at
/// most: the agent's answers come faster than they are read, and must wait in a bounded number
/// (the pipe full, the agent reads no more requests) rather than pile up in the agent.
const FLOOD_READ_SLOWLY: &[(&str, &str)] = &[("TS_FLOOD_MS", "2000"), ("TS_READ_DELAY_US", "300")];

/// What the slow reader's flood may cost: the agent holds at most 64 answers and the requests
/// they answer (it grows by about 1 MiB); a few KiB per answer the server has not read would
/// pass the wide bound of the other floods, but not this one.
const MAX_GROWTH_SLOW_READER_KIB: u64 = 8 * 1024;

flood_tests! {
    FLOOD, MAX_GROWTH_KIB;
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

flood_tests! {
    FLOOD_READ_SLOWLY, MAX_GROWTH_SLOW_READER_KIB;
    a_ping_flood_by_a_slow_reader_costs_little_memory: "ping",
    a_sampling_request_flood_by_a_slow_reader_costs_little_memory: "sampling",
    a_roots_request_flood_by_a_slow_reader_costs_little_memory: "roots",
    an_elicitation_flood_by_a_slow_reader_costs_little_memory: "elicitation",
    an_unknown_request_flood_by_a_slow_reader_costs_little_memory: "unknown_request",
}

/// A server whose result is 200,000 empty images: the model is sent 256 blocks and one line
/// counting the rest, not 200,000 blocks (9.6 MB of request), and the empty blocks are not free
/// in the context budget, so the next request is small and no compaction follows.
#[test]
fn a_result_of_200000_empty_images_reaches_the_model_as_256_blocks_and_a_count() {
    use loopback::{FakeProvider, Reply, called};
    let provider = FakeProvider::start(|request| {
        if called(request, "t__image") {
            Reply::text("seen")
        } else {
            Reply::tool("t__image", json!({"count": 200_000}))
        }
    });
    let dir = std::env::temp_dir().join(format!("hookloop-empty-images-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("mcp.json");
    let server = json!({"command": TEST_SERVER});
    std::fs::write(&config, json!({"mcpServers": {"t": server}}).to_string()).unwrap();
    let out = std::process::Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap(), "Look."])
        .current_dir(&dir)
        .env_remove("HOOKLOOP_LOG")
        .env_remove("MCP_HOOK_SERVERS")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let requests = provider.requests();
    assert_eq!(
        requests.len(),
        2,
        "no compaction: {} requests",
        requests.len()
    );
    let sent = requests[1].to_string();
    assert!(
        sent.len() < 256 * 1024,
        "the second request is {} bytes",
        sent.len()
    );
    assert!(
        sent.contains("199744 more"),
        "the rest are counted: {}",
        &sent[sent.len().saturating_sub(2000)..]
    );
}
