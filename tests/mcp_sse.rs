//! The HTTP+SSE transport of MCP 2024-11-05 against a real server on 127.0.0.1 (the
//! `hookloop-test-server` binary with `TS_SSE`): configured as `sse`, and reached from an
//! `http` URL that refuses streamable HTTP the way such servers do.

mod acp_agent;
mod common;
mod loopback;

use std::time::{Duration, Instant};

use hookloop::hooks::encode_hook_body;
use hookloop::machine::{Message, ToolCall};
use hookloop::mcp::{HostOptions, McpHost, McpServers, ServerConfig};
use hookloop::ports::{ToolHost, TransportKind};
use hookloop::supervisor::{Event, Fact, Order};
use hookloop::testing::{ScriptedLlm, Step};
use hookloop::{Config, Hook, HookServers, PromptStop, Session};
use serde_json::json;

use acp_agent::Agent;
use common::{HttpServer, Scratch, connect, fast_options, lines};
use loopback::{FakeProvider, Reply, after_tool};

fn call(name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments,
    }
}

/// The error each server that failed to start reported, by name.
async fn failures(servers: Vec<(&str, ServerConfig)>, options: HostOptions) -> Vec<String> {
    let mut list = McpServers::new();
    for (name, config) in servers {
        list = list.with(name, config).unwrap();
    }
    let (_, failures) = McpHost::connect(list, options).await.unwrap();
    failures.iter().map(|f| f.error.to_string()).collect()
}

#[tokio::test]
async fn tools_are_listed_and_called_over_sse() {
    let server = HttpServer::sse(&[]);
    let host = connect(
        vec![("old", ServerConfig::sse(&server.url))],
        fast_options(),
    )
    .await;
    assert_eq!(host.transport("old"), Some(TransportKind::Sse));
    let tools: Vec<String> = host.catalog().servers[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    for tool in ["echo", "slow", "flood", "drop_stream"] {
        assert!(tools.contains(&tool.to_owned()), "{tools:?}");
    }
    let output = host
        .call_tool(&call("old__echo", json!({"said": "hello over sse"})))
        .await;
    assert!(!output.is_error, "{output:?}");
    assert_eq!(output.joined_text(), r#"{"said":"hello over sse"}"#);
    // Calls in flight together each get their own answer.
    let (slow, echo) = (
        call("old__slow", json!({"ms": 200})),
        call("old__echo", json!({"n": 2})),
    );
    let (a, b) = tokio::join!(host.call_tool(&slow), host.call_tool(&echo));
    assert_eq!(
        (a.joined_text(), b.joined_text()),
        ("slept".into(), r#"{"n":2}"#.into())
    );
}

#[tokio::test]
async fn a_stop_objection_round_trips_over_sse() {
    let objection = "1 open: \"write the SSE tests\"";
    let server = HttpServer::sse(&[
        ("TS_HOOKS", "_Stop"),
        ("TS_STOP", &format!("say:{objection}")),
    ]);
    let host = connect(
        vec![("todo", ServerConfig::sse(&server.url))],
        fast_options(),
    )
    .await;
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("really done")]);
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);

    assert_eq!(session.counters().objections, 1);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let texts: Vec<String> = requests[1]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { output, .. } => Some(output.joined_text()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, [encode_hook_body(Hook::Stop, "todo", objection)]);
    assert_eq!(llm.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn configured_headers_go_with_the_get_and_every_post() {
    let dir = Scratch::new("sse-headers");
    let log = dir.file("log");
    let server = HttpServer::sse(&[("TS_LOG", &log)]);
    let config = ServerConfig::sse(&server.url)
        .header("X-Test", "hello")
        .header("Authorization", "Bearer s3cret");
    let host = connect(vec![("old", config)], fast_options()).await;
    host.call_tool(&call("old__echo", json!({}))).await;

    let logged = lines(&log);
    let sent = "x-test=hello authorization=Bearer s3cret";
    assert_eq!(
        logged
            .iter()
            .filter(|l| l.starts_with("get "))
            .collect::<Vec<_>>(),
        [&format!("get {sent}")]
    );
    let posts: Vec<&String> = logged.iter().filter(|l| l.starts_with("post ")).collect();
    // initialize, notifications/initialized, tools/list, tools/call at least.
    assert!(posts.len() >= 4, "{logged:?}");
    assert!(
        posts.iter().all(|l| **l == format!("post {sent}")),
        "{logged:?}"
    );
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused_and_nothing_is_posted() {
    let dir = Scratch::new("sse-origin");
    let log = dir.file("log");
    let server = HttpServer::sse(&[
        ("TS_LOG", &log),
        ("TS_SSE_ENDPOINT", "http://127.0.0.2:9/messages"),
    ]);
    let config = ServerConfig::sse(&server.url).header("Authorization", "Bearer s3cret");
    let errors = failures(vec![("old", config)], fast_options()).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    for needle in [
        "server old",
        "http://127.0.0.2:9/messages",
        "another origin",
    ] {
        assert!(errors[0].contains(needle), "{errors:?} lacks {needle}");
    }
    assert!(
        !lines(&log).iter().any(|l| l.starts_with("post")),
        "{:?}",
        lines(&log)
    );
}

#[tokio::test]
async fn an_endpoint_that_never_comes_fails_start_up_naming_the_server() {
    let server = HttpServer::sse(&[("TS_SSE_ENDPOINT", "never")]);
    let options = fast_options().with_startup_timeout(Duration::from_secs(2));
    let started = Instant::now();
    let errors = failures(vec![("old", ServerConfig::sse(&server.url))], options).await;
    // The endpoint's wait (half the start-up's) ran out, not the start-up's own timeout.
    assert!(
        started.elapsed() < Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    for needle in [
        "server old",
        &server.url,
        "no `endpoint` event within 1000 ms",
    ] {
        assert!(errors[0].contains(needle), "{errors:?} lacks {needle}");
    }
}

/// The supervision records since the last look, without the start facts every host begins
/// with.
fn lives_ended_and_restarted(host: &McpHost) -> (usize, usize) {
    let events = host.take_supervision();
    let exited = events
        .iter()
        .filter(|e| matches!(e, Event::Fact(Fact::ServerExited { .. })))
        .count();
    let restarts = events
        .iter()
        .filter(|e| matches!(e, Event::Order(Order::StartServer { .. })))
        .count();
    (exited, restarts)
}

#[tokio::test]
async fn an_oversized_event_breaks_the_connection_and_the_server_comes_back() {
    let server = HttpServer::sse(&[]);
    let host = connect(
        vec![("old", ServerConfig::sse(&server.url))],
        fast_options(),
    )
    .await;
    let flooded = host.call_tool(&call("old__flood", json!({}))).await;
    assert!(flooded.is_error, "{flooded:?}");
    // The next call waits for the restart the supervisor orders, on a new stream.
    let after = host
        .call_tool(&call("old__echo", json!({"after": 1})))
        .await;
    assert_eq!(after.joined_text(), r#"{"after":1}"#, "{after:?}");
    assert_eq!(lives_ended_and_restarted(&host), (1, 1));
}

#[tokio::test]
async fn a_dropped_stream_breaks_the_connection_and_the_supervisor_restarts_the_server() {
    let server = HttpServer::sse(&[]);
    let host = connect(
        vec![("old", ServerConfig::sse(&server.url))],
        fast_options(),
    )
    .await;
    let dropped = host.call_tool(&call("old__drop_stream", json!({}))).await;
    assert!(dropped.is_error, "{dropped:?}");
    let after = host
        .call_tool(&call("old__echo", json!({"after": 2})))
        .await;
    assert_eq!(after.joined_text(), r#"{"after":2}"#, "{after:?}");
    assert_eq!(host.transport("old"), Some(TransportKind::Sse));
    assert_eq!(lives_ended_and_restarted(&host), (1, 1));
}

#[tokio::test]
async fn an_http_url_refused_with_400_404_or_405_falls_back_to_sse() {
    for refusal in ["405", "404", "400"] {
        let dir = Scratch::new("sse-fallback");
        let log = dir.file("log");
        let server = HttpServer::sse(&[("TS_SSE_REFUSE", refusal), ("TS_LOG", &log)]);
        let host = connect(
            vec![("legacy", ServerConfig::http(&server.url))],
            fast_options(),
        )
        .await;
        assert_eq!(
            host.transport("legacy"),
            Some(TransportKind::Sse),
            "{refusal}"
        );
        let output = host
            .call_tool(&call("legacy__echo", json!({"r": refusal})))
            .await;
        assert_eq!(output.joined_text(), format!(r#"{{"r":"{refusal}"}}"#));
        assert_eq!(
            lines(&log).iter().filter(|l| l.starts_with("get")).count(),
            1
        );
    }
}

#[tokio::test]
async fn a_refusal_with_a_json_rpc_error_is_a_modern_server_and_no_fallback() {
    let dir = Scratch::new("sse-modern");
    let log = dir.file("log");
    let server = HttpServer::sse(&[("TS_SSE_REFUSE", "400-jsonrpc"), ("TS_LOG", &log)]);
    let errors = failures(
        vec![("modern", ServerConfig::http(&server.url))],
        fast_options(),
    )
    .await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("server modern"), "{errors:?}");
    // The stream was never opened.
    assert!(
        !lines(&log).iter().any(|l| l.starts_with("get")),
        "{:?}",
        lines(&log)
    );
}

#[tokio::test]
async fn mcp_list_shows_each_servers_transport() {
    let sse = HttpServer::sse(&[]);
    let legacy = HttpServer::sse(&[]);
    let dir = Scratch::new("sse-list");
    let mcp_json = dir.file(".mcp.json");
    std::fs::write(
        &mcp_json,
        json!({"mcpServers": {
            "old": {"type": "sse", "url": sse.url},
            "legacy": {"type": "http", "url": legacy.url},
        }})
        .to_string(),
    )
    .unwrap();
    let output = std::process::Command::new(loopback::hookloop())
        .args(["mcp", "list", "--mcp-config", &mcp_json])
        .env("XDG_CONFIG_HOME", dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains(&format!("old (sse: {})", sse.url)), "{text}");
    assert!(
        text.contains(&format!("legacy (http: {})", legacy.url)),
        "{text}"
    );
    assert_eq!(text.matches("  transport HTTP+SSE").count(), 2, "{text}");
}

#[tokio::test]
async fn an_acp_client_attaches_an_sse_server_whose_tool_and_stop_hook_run() {
    let dir = Scratch::new("sse-acp");
    let log = dir.file("log");
    let server = HttpServer::sse(&[
        ("TS_HOOKS", "_Stop"),
        ("TS_STOP", "say:one more check"),
        ("TS_LOG", &log),
    ]);
    let provider = FakeProvider::start(|request| {
        if loopback::called(request, "old__echo") {
            Reply::text("Done.")
        } else if after_tool(request) {
            Reply::tool("old__echo", json!({"via": "acp"}))
        } else {
            Reply::text("Done at once.")
        }
    });
    let mut agent = Agent::spawn(&provider, &[]);
    let (reply, _) = agent
        .call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    assert_eq!(
        reply["result"]["agentCapabilities"]["mcpCapabilities"]["sse"], true,
        "{reply}"
    );
    let session = agent
        .new_session(json!([{
            "type": "sse",
            "name": "old",
            "url": server.url,
            "headers": [{"name": "X-Test", "value": "from-acp"}]
        }]))
        .await;
    let (reply, updates) = agent.prompt_to_end(&session, "Check and finish.").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let titles: Vec<&str> = updates
        .iter()
        .filter(|u| u["update"]["sessionUpdate"] == "tool_call")
        .filter_map(|u| u["update"]["title"].as_str())
        .collect();
    assert!(
        titles.contains(&"_Stop objection from old (2 left)"),
        "{titles:?}"
    );
    assert!(
        lines(&log).contains(&"call echo".to_owned()),
        "{:?}",
        lines(&log)
    );
    assert!(
        lines(&log).contains(&"get x-test=from-acp authorization=-".to_owned()),
        "{:?}",
        lines(&log)
    );
    agent.close().await;
}
