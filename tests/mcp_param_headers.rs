//! SEP-2243 custom headers (protocol 2026-07-28) against a real streamable-HTTP server on
//! 127.0.0.1 (the test server, rmcp's server side, which also checks the headers against the
//! body): a tool call mirrors each argument whose property is marked `x-mcp-header` into an
//! `Mcp-Param-<Name>` header, encoded as the transport spec says, and a tool whose marks are
//! invalid is left out of the catalog.

mod common;

use hookloop::ToolHost;
use hookloop::machine::{CallId, ToolCall};
use hookloop::mcp::{McpHost, McpServers, ServerConfig};
use serde_json::{Value, json};

use common::{HttpServer, Scratch};

/// Connects to the test server at `config` and calls `param_headers` with `arguments`; the
/// `Mcp-Param-*` headers the server saw on that call.
async fn headers_of_a_call(config: ServerConfig, log: &str, arguments: Value) -> Value {
    let servers = McpServers::new().with("web", config).unwrap();
    let (host, failures) = McpHost::connect(servers, common::fast_options())
        .await
        .unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    let version = host.protocol_version("web");
    assert_eq!(
        version.as_deref(),
        Some("2026-07-28"),
        "headers need 2026-07-28"
    );
    let output = host
        .call_tool(&ToolCall {
            id: CallId("c1".into()),
            name: "web__param_headers".into(),
            arguments,
        })
        .await;
    assert!(!output.is_error, "{}", output.joined_text());
    let logged = common::lines(log);
    let params: Vec<&String> = logged.iter().filter(|l| l.starts_with("params ")).collect();
    assert_eq!(params.len(), 1, "{logged:?}");
    serde_json::from_str(&params[0]["params ".len()..]).unwrap()
}

#[tokio::test]
async fn marked_arguments_are_mirrored_into_mcp_param_headers_with_their_encodings() {
    let dir = Scratch::new("param-headers");
    let log = dir.file("server.log");
    let server = HttpServer::start(&[("TS_PARAM_HEADERS", "1"), ("TS_LOG", log.as_str())]);
    let arguments = json!({
        "region": "us-west1",
        "priority": 42,
        "verbose": null,
        "note": " padded é",
        "query": "SELECT 1"
    });
    let seen = headers_of_a_call(ServerConfig::http(&server.url), &log, arguments).await;
    assert_eq!(
        seen,
        json!({
            // Plain ASCII as it is, numbers as text.
            "mcp-param-region": "us-west1",
            "mcp-param-priority": "42",
            // Leading whitespace and non-ASCII go base64-wrapped.
            "mcp-param-note": "=?base64?IHBhZGRlZCDDqQ==?=",
            // `verbose` is null: no header; `query` is not marked: no header.
        })
    );
}

#[tokio::test]
async fn a_configured_authorization_header_does_not_stop_the_mcp_param_headers() {
    // A configured `Authorization` header takes the plain HTTP client instead of the OAuth
    // one: both must mirror the arguments.
    let dir = Scratch::new("param-headers-auth");
    let log = dir.file("server.log");
    let server = HttpServer::start(&[("TS_PARAM_HEADERS", "1"), ("TS_LOG", log.as_str())]);
    let config = ServerConfig::http(&server.url).header("Authorization", "Bearer static");
    let seen = headers_of_a_call(config, &log, json!({"verbose": true, "priority": 0})).await;
    assert_eq!(
        seen,
        json!({"mcp-param-verbose": "true", "mcp-param-priority": "0"})
    );
}

#[tokio::test]
async fn a_tool_with_an_invalid_x_mcp_header_is_left_out_of_the_catalog() {
    let server = HttpServer::start(&[("TS_PARAM_HEADERS", "1")]);
    let host = common::connect(
        vec![("web", ServerConfig::http(&server.url))],
        common::fast_options(),
    )
    .await;
    let catalog = host.catalog();
    let names: Vec<&str> = catalog.servers[0]
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert!(names.contains(&"param_headers"), "{names:?}");
    assert!(!names.contains(&"bad_header"), "{names:?}");
    // The other tools stay.
    assert!(names.contains(&"echo"), "{names:?}");
}

#[tokio::test]
async fn a_configured_mcp_param_header_is_refused_rather_than_sent_for_every_call() {
    // Sent with every request, it would stand in for an argument a call leaves null.
    let server = HttpServer::start(&[("TS_PARAM_HEADERS", "1")]);
    let config = ServerConfig::http(&server.url).header("mcp-param-Region", "eu-west1");
    let servers = McpServers::new().with("web", config).unwrap();
    let (host, failures) = McpHost::connect(servers, common::fast_options())
        .await
        .unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let message = failures[0].error.to_string();
    assert!(
        message.contains(r#"header "mcp-param-Region" cannot be configured"#),
        "{message}"
    );
    assert!(host.catalog().servers.is_empty());
}
