//! Hostile MCP servers over HTTP: giant and endless SSE streams and events, on streamable HTTP
//! (`"type": "http"`) and on the HTTP+SSE transport of 2024-11-05 (`"type": "sse"`). The server
//! is tests/support/hostile_http.py on 127.0.0.1; its `poke` tool misbehaves as the test names.
//!
//! The tests in this process bound what a misbehaviour costs by time against the call's own
//! timeout, by whether the agent closed the stream (the server logs it) and by another server
//! answering meanwhile. The `*_costs_little_memory` tests run the real `hookloop run` against
//! the server and bound the growth of its peak memory (`VmHWM`) over the call at 64 MiB, as
//! tests/hostile_mcp_run.rs does for stdio servers.

mod common;
mod loopback;
#[path = "support/peak_memory.rs"]
mod peak_memory;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hookloop::machine::ToolCall;
use hookloop::mcp::{HostOptions, McpHost, ServerConfig};
use hookloop::ports::ToolHost;
use serde_json::{Value, json};

use common::{HttpServer, Scratch, connect, eventually, eventually_async, fast_options, lines};
use peak_memory::run_poked;

/// Growth of the agent's peak memory a hostile server may cause.
const MAX_GROWTH_KIB: u64 = 64 * 1024;

/// The longest a call may outlive its timeout on a loaded machine.
const MARGIN: Duration = Duration::from_secs(10);

/// One run of tests/support/hostile_http.py, killed when dropped.
struct Hostile {
    child: Child,
    url: String,
    log: String,
    _dir: Scratch,
}

impl Hostile {
    /// Serves `transport` (`http` or `sse`) misbehaving as `behaviour`.
    fn start(transport: &str, behaviour: &str, vars: &[(&str, &str)]) -> Self {
        let dir = Scratch::new(&format!("hostile-http-{transport}-{behaviour}"));
        let log = dir.file("log");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/hostile_http.py");
        let mut child = Command::new("python3")
            .args([script, transport, behaviour])
            .env("HOSTILE_LOG", &log)
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the hostile server");
        let mut url = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout).read_line(&mut url).expect("its url");
        Self {
            child,
            url: url.trim().to_owned(),
            log,
            _dir: dir,
        }
    }

    fn config(&self, transport: &str) -> ServerConfig {
        match transport {
            "sse" => ServerConfig::sse(&self.url),
            _ => ServerConfig::http(&self.url),
        }
    }

    fn log(&self) -> Vec<String> {
        lines(&self.log)
    }

    /// The bytes of the misbehaving stream the server sent, whether it ended or was closed.
    fn sent(&self) -> u64 {
        self.log()
            .iter()
            .filter_map(|l| {
                let n = l
                    .strip_prefix("sent ")
                    .or_else(|| l.strip_prefix("closed "))?;
                n.parse::<u64>().ok()
            })
            .sum()
    }

    /// The bytes of the misbehaving stream, once the server has logged its end: the agent may
    /// exit while the server still writes, and the server sees the closed socket only at its next
    /// write. Waits at most 20 s for that line.
    fn sent_once_ended(&self) -> u64 {
        let ended = |l: &String| l.starts_with("sent ") || l.starts_with("closed ");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log().iter().any(ended) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.sent()
    }

    /// How many answers to the server's requests the agent posted.
    fn answers(&self) -> usize {
        self.log().iter().filter(|l| *l == "answer").count()
    }

    /// Whether the agent closed the misbehaving stream.
    fn closed(&self) -> bool {
        self.log().iter().any(|l| l.starts_with("closed"))
    }

    /// Waits up to 20 s for the server to log that the agent closed the misbehaving stream.
    async fn assert_closed(&self) {
        assert!(
            eventually(Duration::from_secs(20), || self.closed()).await,
            "{:?}",
            self.log()
        );
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn call(name: &str) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments: json!({"n": 1}),
    }
}

fn options(call_timeout: Duration) -> HostOptions {
    fast_options().with_call_timeout(call_timeout)
}

/// What came of a poke beside a good server.
struct Poke {
    /// The poke's output text.
    text: String,
    is_error: bool,
    took: Duration,
    /// How many of the good server's echoes answered while the poke ran.
    echoes: usize,
    /// The host, still connected to both servers.
    host: McpHost,
}

impl Poke {
    /// The poke ended in an error result within `limit`, and the good server answered
    /// meanwhile.
    fn assert_failed_within(&self, limit: Duration) {
        assert!(self.is_error, "{}", self.text);
        assert!(self.took < limit, "{:?}", self.took);
        assert!(self.echoes > 0, "the other server did not answer meanwhile");
    }

    /// The poke answered `text`, and the good server answered meanwhile.
    fn assert_answered(&self, text: &str) {
        assert!(!self.is_error, "{}", self.text);
        assert_eq!(self.text, text);
        assert!(self.echoes > 0, "the other server did not answer meanwhile");
    }
}

/// Connects to the hostile server as `evil` and to a well-behaved streamable HTTP server as
/// `good`; calls `evil__poke` and, while it runs, `good__echo` until the poke ends.
async fn poke_beside_a_good_server(
    transport: &str,
    hostile: &Hostile,
    call_timeout: Duration,
) -> Poke {
    let good = HttpServer::start(&[]);
    let host = connect(
        vec![
            ("evil", hostile.config(transport)),
            ("good", ServerConfig::http(&good.url)),
        ],
        options(call_timeout),
    )
    .await;
    let started = Instant::now();
    let (poke, echo) = (call("evil__poke"), call("good__echo"));
    let mut echoes = 0;
    let output = {
        let mut poke = std::pin::pin!(host.call_tool(&poke));
        loop {
            tokio::select! {
                output = &mut poke => break output,
                answer = host.call_tool(&echo) => {
                    assert!(!answer.is_error, "{answer:?}");
                    echoes += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    };
    let took = started.elapsed();
    eprintln!(
        "{transport}: poke took {took:?}, {echoes} echoes meanwhile, {} bytes sent; {:?}",
        hostile.sent(),
        output.joined_text()
    );
    Poke {
        text: output.joined_text(),
        is_error: output.is_error,
        took,
        echoes,
        host,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalive_forever_answer_ends_by_the_call_timeout_and_the_stream_is_closed() {
    let hostile = Hostile::start("http", "keepalive", &[]);
    let timeout = Duration::from_secs(2);
    let poke = poke_beside_a_good_server("http", &hostile, timeout).await;
    poke.assert_failed_within(timeout + MARGIN);
    assert!(poke.took >= timeout, "{:?}", poke.took);
    hostile.assert_closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_on_a_keepalive_forever_answer_closes_its_stream() {
    let hostile = Hostile::start("http", "keepalive", &[]);
    let host = connect(
        vec![("evil", hostile.config("http"))],
        options(Duration::from_secs(600)),
    )
    .await;
    let poke = call("evil__poke");
    let dropped = tokio::time::timeout(Duration::from_millis(300), host.call_tool(&poke)).await;
    assert!(dropped.is_err(), "the call ended: {dropped:?}");
    // The agent stops reading the stream it no longer needs: the server sees it closed.
    hostile.assert_closed().await;
    let echo = host.call_tool(&call("evil__echo")).await;
    assert_eq!(echo.joined_text(), r#"{"n":1}"#, "{echo:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_event_over_streamable_http_ends_the_call_and_the_stream() {
    let hostile = Hostile::start("http", "endless", &[]);
    let timeout = Duration::from_secs(5);
    let poke = poke_beside_a_good_server("http", &hostile, timeout).await;
    poke.assert_failed_within(timeout + MARGIN);
    hostile.assert_closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_giant_event_over_streamable_http_ends_the_call_before_its_timeout() {
    let hostile = Hostile::start("http", "giant", &[("HOSTILE_MB", "24")]);
    let timeout = Duration::from_secs(30);
    let poke = poke_beside_a_good_server("http", &hostile, timeout).await;
    assert!(poke.is_error, "{}", poke.text);
    assert!(poke.took < timeout, "{:?}", poke.took);
    // The server is still there for the next call.
    let echo = poke.host.call_tool(&call("evil__echo")).await;
    assert_eq!(echo.joined_text(), r#"{"n":1}"#, "{echo:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_flood_on_the_get_stream_does_not_hold_up_calls() {
    let hostile = Hostile::start("http", "flood", &[("HOSTILE_MS", "2000")]);
    let poke = poke_beside_a_good_server("http", &hostile, Duration::from_secs(30)).await;
    poke.assert_answered(r#"{"n":1}"#);
    assert!(
        hostile.log().contains(&"get".to_owned()),
        "{:?}",
        hostile.log()
    );
    let flooded = eventually(Duration::from_secs(20), || hostile.sent() > 1 << 20).await;
    assert!(flooded, "only {} bytes", hostile.sent());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_event_over_sse_breaks_the_connection_and_the_server_comes_back() {
    let hostile = Hostile::start("sse", "endless", &[]);
    let timeout = Duration::from_secs(5);
    let poke = poke_beside_a_good_server("sse", &hostile, timeout).await;
    poke.assert_failed_within(timeout + MARGIN);
    hostile.assert_closed().await;
    // Closed at the 16 MiB cap, not after reading on.
    assert!(hostile.sent() < 64 << 20, "{} bytes read", hostile.sent());
    let came_back = eventually_async(Duration::from_secs(20), || async {
        poke.host.call_tool(&call("evil__echo")).await.joined_text() == r#"{"n":1}"#
    })
    .await;
    assert!(came_back, "{:?}", hostile.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_flood_on_the_sse_stream_does_not_hold_up_calls() {
    let hostile = Hostile::start("sse", "flood", &[("HOSTILE_MS", "2000")]);
    let poke = poke_beside_a_good_server("sse", &hostile, Duration::from_secs(30)).await;
    poke.assert_answered("poked");
    assert!(hostile.sent() > 1 << 20, "only {} bytes", hostile.sent());
}

/// Runs `hookloop run` with the hostile server as server `evil` over `transport`, the model
/// calling `evil__poke` once; asserts the run ends well, the agent's peak memory over the call
/// grew by less than [`MAX_GROWTH_KIB`], and the server sent more than `at_least` bytes (the
/// misbehaviour really happened).
fn run_costs_little_memory(transport: &str, behaviour: &str, vars: &[(&str, &str)], at_least: u64) {
    let hostile = Hostile::start(transport, behaviour, vars);
    let dir = Scratch::new(&format!("hostile-http-run-{transport}-{behaviour}"));
    let config = dir.file("mcp.json");
    let server: Value = json!({"type": transport, "url": hostile.url});
    std::fs::write(&config, json!({"mcpServers": {"evil": server}}).to_string()).unwrap();
    let run = run_poked(Path::new(&config), dir.path(), Duration::ZERO);
    let (before, peak, growth) = (run.before_kib, run.peak_kib, run.growth_kib());
    let sent = hostile.sent_once_ended();
    eprintln!(
        "{transport} {behaviour}: VmRSS before {before} KiB, VmHWM after {peak} KiB, growth \
         {growth} KiB; {sent} bytes sent; {} answers posted; {:?}",
        hostile.answers(),
        hostile
            .log()
            .iter()
            .filter(|l| *l != "answer")
            .collect::<Vec<_>>()
    );
    run.assert_below(MAX_GROWTH_KIB);
    assert!(sent > at_least, "only {sent} bytes");
}

#[test]
fn an_endless_event_over_streamable_http_costs_little_memory() {
    run_costs_little_memory("http", "endless", &[("HOSTILE_MS", "3000")], 16 << 20);
}

#[test]
fn a_giant_event_over_streamable_http_costs_little_memory() {
    run_costs_little_memory("http", "giant", &[("HOSTILE_MB", "64")], 16 << 20);
}

#[test]
fn a_get_stream_notification_flood_costs_little_memory() {
    run_costs_little_memory("http", "flood", &[("HOSTILE_MS", "3000")], 1 << 20);
}

#[test]
fn an_endless_event_over_sse_costs_little_memory() {
    run_costs_little_memory("sse", "endless", &[("HOSTILE_MS", "3000")], 16 << 20);
}

#[test]
fn a_notification_flood_over_sse_costs_little_memory() {
    run_costs_little_memory("sse", "flood", &[("HOSTILE_MS", "3000")], 1 << 20);
}

/// Each ping is answered by a POST of its own, one at a time: the agent reads the stream no
/// faster than it posts, so the pings wait in the server's socket, not in the agent.
#[test]
fn a_ping_flood_over_sse_costs_little_memory() {
    run_costs_little_memory(
        "sse",
        "pings",
        &[("HOSTILE_MS", "3000"), ("HOSTILE_COUNT", "12000")],
        512 << 10,
    );
}

/// Answers past 64 waiting to be sent are dropped: the flood costs no more memory as it goes on.
#[test]
fn a_get_stream_ping_flood_costs_little_memory() {
    run_costs_little_memory("http", "pings", &[("HOSTILE_MS", "10000")], 1 << 20);
}
