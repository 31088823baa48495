//! Hostile MCP servers against the host, in this process: each test runs the test server as
//! one misbehaving peer (`TS_HOSTILE`, see tests/support/hostile.rs) and bounds what it costs
//! the agent by counting the work it got the agent to do — listings, pages, questions — and
//! by the time a call takes to end.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookloop::machine::ToolCall;
use hookloop::mcp::{HostOptions, McpError, McpHost, McpServers, ServerConfig};
use hookloop::ports::{Answer, ElicitAnswer, Elicitation, Person, ToolHost};
use serde_json::{Value, json};

use common::{Scratch, eventually, fast_options, lines, test_server};

fn hostile(behaviour: &str, log: &str, vars: &[(&str, &str)]) -> ServerConfig {
    let mut all = vec![("TS_HOSTILE", behaviour), ("TS_LOG", log)];
    all.extend_from_slice(vars);
    test_server(&all)
}

async fn start(
    servers: Vec<(&str, ServerConfig)>,
    options: HostOptions,
) -> (McpHost, Vec<hookloop::mcp::StartupFailure>) {
    let mut list = McpServers::new();
    for (name, config) in servers {
        list = list.with(name, config).expect("valid server name");
    }
    McpHost::connect(list, options)
        .await
        .expect("the session starts")
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments,
    }
}

fn tool_names(host: &McpHost, server: &str) -> Vec<String> {
    host.catalog()
        .servers
        .iter()
        .filter(|s| s.server.as_str() == server)
        .flat_map(|s| s.tools.iter().map(|t| t.name.clone()))
        .collect()
}

fn starting_with(log: &str, prefix: &str) -> usize {
    lines(log).iter().filter(|l| l.starts_with(prefix)).count()
}

fn text(output: &hookloop::machine::ToolOutput) -> String {
    serde_json::to_string(&output.content).unwrap()
}

#[tokio::test]
async fn a_server_over_the_tool_limit_is_left_out_and_the_others_start() {
    let (host, failures) = start(
        vec![
            ("good", test_server(&[])),
            ("many", test_server(&[("TS_TOOL_COUNT", "300")])),
        ],
        fast_options(),
    )
    .await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].server.as_str(), "many");
    let reason = failures[0].error.to_string();
    assert!(reason.contains("more than 256 tools"), "{reason}");
    assert!(tool_names(&host, "good").contains(&"echo".to_owned()));
    assert!(tool_names(&host, "many").is_empty());
    let output = host.call_tool(&call("good__echo", json!({"n": 1}))).await;
    assert!(!output.is_error, "{output:?}");
}

#[tokio::test]
async fn servers_that_together_pass_the_tool_limit_leave_the_later_one_out() {
    let (host, failures) = start(
        vec![
            ("first", test_server(&[("TS_TOOL_COUNT", "200")])),
            ("second", test_server(&[("TS_TOOL_COUNT", "200")])),
        ],
        fast_options(),
    )
    .await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].server.as_str(), "second");
    assert!(matches!(failures[0].error, McpError::Startup { .. }));
    assert!(tool_names(&host, "first").len() > 200);
}

#[tokio::test]
async fn endless_tool_pages_at_start_leave_the_server_out_after_a_few_pages() {
    let scratch = Scratch::new("hostile-pages");
    let log = scratch.file("log");
    let started = Instant::now();
    let (host, failures) = start(
        vec![
            ("good", test_server(&[])),
            ("evil", hostile("endless_pages", &log, &[])),
        ],
        fast_options(),
    )
    .await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].server.as_str(), "evil");
    // Pages of a thousand tools: the tool limit stops the listing at the first page.
    let pages = starting_with(&log, "list");
    assert_eq!(pages, 1, "pages asked for");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(!tool_names(&host, "good").is_empty());
}

#[tokio::test]
async fn endless_small_pages_at_start_stop_at_the_page_cap() {
    let scratch = Scratch::new("hostile-small-pages");
    let log = scratch.file("log");
    let (_host, failures) = start(
        vec![(
            "evil",
            hostile("endless_pages", &log, &[("TS_PAGE_TOOLS", "0")]),
        )],
        fast_options(),
    )
    .await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    let reason = failures[0].error.to_string();
    assert!(reason.contains("pages"), "{reason}");
    assert_eq!(starting_with(&log, "list"), 128);
}

#[tokio::test]
async fn endless_pages_after_list_changed_keep_the_old_tools_after_a_bounded_listing() {
    let scratch = Scratch::new("hostile-pages-after");
    let log = scratch.file("log");
    let (host, failures) = start(
        vec![("evil", hostile("endless_pages_after_change", &log, &[]))],
        fast_options(),
    )
    .await;
    assert!(failures.is_empty(), "{failures:?}");
    let output = host.call_tool(&call("evil__poke", json!({}))).await;
    assert!(!output.is_error, "{output:?}");
    // The refresh asks for its first page and stops there (a thousand tools, over the limit).
    assert!(eventually(Duration::from_secs(10), || starting_with(&log, "list") >= 2).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(starting_with(&log, "list"), 2, "{:?}", lines(&log));
    assert_eq!(tool_names(&host, "evil"), ["poke"]);
}

#[tokio::test]
async fn a_list_changed_flood_leads_to_a_few_listings_at_most_two_a_second() {
    let scratch = Scratch::new("hostile-list-flood");
    let log = scratch.file("log");
    let (host, _) = start(
        vec![(
            "evil",
            hostile("flood:tools_list_changed", &log, &[("TS_FLOOD_MS", "2000")]),
        )],
        fast_options(),
    )
    .await;
    let output = host.call_tool(&call("evil__poke", json!({}))).await;
    assert!(!output.is_error, "{output:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let sent = lines(&log)
        .iter()
        .find_map(|l| l.strip_prefix("sent ")?.parse::<u64>().ok())
        .expect("the flood ended");
    let listings = starting_with(&log, "list");
    // One listing at start, then at most one at once and one per 500 ms for 2 s of flood,
    // and the one a change during the last listing leads to.
    assert!(sent > 1000, "the flood was only {sent} notifications");
    assert!(
        listings <= 1 + 1 + 4 + 1,
        "{listings} listings for {sent} notifications"
    );
}

/// A person who never answers, counting the questions that reach them.
#[derive(Clone, Default)]
struct Silent {
    asked: Arc<AtomicUsize>,
}

impl Person for Silent {
    fn elicit(&self, _question: Elicitation) -> Answer<'_> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
    }
}

/// A person who gives one answer to every question and remembers how many were asked.
#[derive(Clone)]
struct Answers {
    answer: ElicitAnswer,
    asked: Arc<Mutex<usize>>,
}

impl Person for Answers {
    fn elicit(&self, _question: Elicitation) -> Answer<'_> {
        *self.asked.lock().unwrap() += 1;
        Box::pin(std::future::ready(self.answer.clone()))
    }
}

fn accept(content: Value) -> Answers {
    let Value::Object(content) = content else {
        panic!("content must be an object")
    };
    Answers {
        answer: ElicitAnswer::Accept(content),
        asked: Arc::default(),
    }
}

/// The `response` lines of the hostile server's log, as the JSON they hold.
fn responses(log: &str) -> Vec<Value> {
    lines(log)
        .iter()
        .filter_map(|l| serde_json::from_str(l.strip_prefix("response ")?).ok())
        .collect()
}

#[tokio::test]
async fn questions_outside_any_call_are_declined_without_reaching_the_person() {
    let scratch = Scratch::new("hostile-idle-questions");
    let log = scratch.file("log");
    let (host, _) = start(
        vec![(
            "evil",
            hostile("elicit_idle", &log, &[("TS_FLOOD_COUNT", "50")]),
        )],
        fast_options(),
    )
    .await;
    let person = accept(json!({}));
    host.set_person(Arc::new(person.clone()));
    assert!(eventually(Duration::from_secs(10), || responses(&log).len() >= 50).await);
    for response in responses(&log) {
        assert_eq!(response["body"]["action"], "decline", "{response}");
    }
    assert_eq!(*person.asked.lock().unwrap(), 0);
}

const FORM: &str = r#"{"type":"object","properties":{"name":{"type":"string","maxLength":5},"age":{"type":"integer","minimum":0}},"required":["name"]}"#;

#[tokio::test]
async fn an_answer_that_fits_the_form_reaches_the_server() {
    let scratch = Scratch::new("hostile-form-fits");
    let log = scratch.file("log");
    let (host, _) = start(
        vec![(
            "evil",
            hostile(
                "elicit_idle",
                &log,
                &[("TS_FLOOD_COUNT", "0"), ("TS_SCHEMA", FORM)],
            ),
        )],
        fast_options(),
    )
    .await;
    host.set_person(Arc::new(accept(json!({"name": "Ada", "age": 36}))));
    let output = host.call_tool(&call("evil__poke", json!({}))).await;
    let said = text(&output);
    assert!(said.contains("accept") && said.contains("Ada"), "{said}");
}

#[tokio::test]
async fn an_answer_that_breaks_the_form_is_declined() {
    let scratch = Scratch::new("hostile-form-breaks");
    let log = scratch.file("log");
    let (host, _) = start(
        vec![(
            "evil",
            hostile(
                "elicit_idle",
                &log,
                &[("TS_FLOOD_COUNT", "0"), ("TS_SCHEMA", FORM)],
            ),
        )],
        fast_options(),
    )
    .await;
    for bad in [
        json!({"name": "Adaline"}),
        json!({"age": 3}),
        json!({"name": "Ada", "age": -1}),
        json!({"name": "Ada", "extra": true}),
    ] {
        host.set_person(Arc::new(accept(bad.clone())));
        let output = host.call_tool(&call("evil__poke", json!({}))).await;
        let said = text(&output);
        assert!(
            said.contains("decline") && !said.contains("accept"),
            "{bad}: {said}"
        );
    }
}

#[tokio::test]
async fn a_server_gets_at_most_two_open_questions_during_a_call() {
    let scratch = Scratch::new("hostile-open-questions");
    let log = scratch.file("log");
    let (host, _) = start(
        vec![(
            "evil",
            hostile(
                "flood:elicitation",
                &log,
                &[("TS_FLOOD_COUNT", "200"), ("TS_FLOOD_MS", "5000")],
            ),
        )],
        fast_options(),
    )
    .await;
    let person = Silent::default();
    host.set_person(Arc::new(person.clone()));
    let output = host.call_tool(&call("evil__poke", json!({}))).await;
    assert!(!output.is_error, "{output:?}");
    // The two open questions wait on the person; the other 198 are declined at once.
    assert!(eventually(Duration::from_secs(10), || responses(&log).len() >= 198).await);
    assert_eq!(person.asked.load(Ordering::SeqCst), 2);
    assert!(
        responses(&log)
            .iter()
            .all(|r| r["body"]["action"] == "decline")
    );
}

/// Options whose call timeout is short.
fn short_calls() -> HostOptions {
    fast_options().with_call_timeout(Duration::from_secs(2))
}

/// A call to `name` ends by the call timeout, a dropped call ends at once, and another server
/// answers meanwhile.
async fn call_ends_by_its_timeout(host: &McpHost, name: &str, arguments: Value) {
    let started = Instant::now();
    let output = host.call_tool(&call(name, arguments.clone())).await;
    let took = started.elapsed();
    assert!(output.is_error, "{output:?}");
    assert!(
        text(&output).contains("did not answer"),
        "{}",
        text(&output)
    );
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A cancel (the caller drops the call) is honoured at once.
    let started = Instant::now();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        host.call_tool(&call(name, arguments)),
    )
    .await;
    assert!(cancelled.is_err());
    assert!(started.elapsed() < Duration::from_millis(500));
    let started = Instant::now();
    let other = host.call_tool(&call("good__echo", json!({"n": 1}))).await;
    assert!(!other.is_error, "{other:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_server_that_stops_reading_its_stdin_times_the_call_out() {
    let scratch = Scratch::new("hostile-deaf");
    let log = scratch.file("log");
    let (host, failures) = start(
        vec![
            ("good", test_server(&[])),
            ("evil", hostile("deaf", &log, &[])),
        ],
        short_calls(),
    )
    .await;
    assert!(failures.is_empty(), "{failures:?}");
    // More than a pipe holds: the write itself blocks.
    let big = json!({"fill": "x".repeat(1024 * 1024)});
    call_ends_by_its_timeout(&host, "evil__poke", big).await;
}

#[tokio::test]
async fn a_server_that_answers_a_byte_a_second_times_the_call_out() {
    let scratch = Scratch::new("hostile-trickle");
    let log = scratch.file("log");
    let (host, failures) = start(
        vec![
            ("good", test_server(&[])),
            ("evil", hostile("trickle", &log, &[])),
        ],
        short_calls(),
    )
    .await;
    assert!(failures.is_empty(), "{failures:?}");
    call_ends_by_its_timeout(&host, "evil__poke", json!({})).await;
}
