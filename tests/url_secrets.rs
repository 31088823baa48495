//! URLs in what the binary says keep no credential: an MCP server's URL with user info and a
//! presigned query (`sig=`, `X-Amz-Signature=`), an HTTP+SSE server's `endpoint` event with
//! one, a model base URL with a password. Each fails for real (a closed port, an endpoint on
//! another origin), and its error reaches the logs (everything at `trace`), the command's error
//! and an ACP client: the host, the path and the reason stay, the secrets do not.

mod acp_agent;
mod common;
mod loopback;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use loopback::{FakeProvider, Reply};
use serde_json::{Value, json};

use common::{HttpServer, Scratch};

const SECRETS: [&str; 4] = ["pa55word", "SIGSECRET", "AMZSECRET", "FRAGSECRET"];

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A URL with every kind of credential a URL carries, at 127.0.0.1:`port`.
fn secret_url(port: u16, path: &str) -> String {
    format!(
        "http://admin:pa55word@127.0.0.1:{port}{path}?sig=SIGSECRET&X-Amz-Signature=AMZSECRET#FRAGSECRET"
    )
}

/// `hookloop run` with `mcp` as its MCP configuration, logging everything, with `env` on top.
fn run(dir: &Path, mcp: &Value, env: &[(&str, &str)]) -> Output {
    let config = dir.join("mcp.json");
    std::fs::write(&config, mcp.to_string()).unwrap();
    let provider = FakeProvider::start(|_| Reply::text("Done."));
    Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap(), "hi"])
        .current_dir(dir)
        .env("HOOKLOOP_LOG", "trace")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_API_KEY", "test-key")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{secret} is in the {what}: {text}");
    }
}

#[test]
fn a_failing_servers_url_keeps_its_credentials_out_of_logs_and_errors() {
    let dir = Scratch::new("url-secrets-http");
    let port = closed_port();
    let mcp = json!({"mcpServers": {"remote": {"type": "http", "url": secret_url(port, "/mcp")}}});
    let output = run(dir.path(), &mcp, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The failure is said, with the server's address.
    assert!(stderr.contains("remote"), "{stderr}");
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}/mcp")),
        "{stderr}"
    );
    assert_no_secret("logs", &stderr);
    assert_no_secret("output", &String::from_utf8_lossy(&output.stdout));
}

#[test]
fn an_sse_endpoint_event_with_a_presigned_query_is_refused_without_quoting_it() {
    let dir = Scratch::new("url-secrets-sse");
    // The endpoint is on another origin: refused, and the refusal names it.
    let endpoint = "http://other.example/messages?session=1&sig=SIGSECRET#FRAGSECRET";
    let server = HttpServer::sse(&[("TS_SSE_ENDPOINT", endpoint)]);
    let mcp = json!({"mcpServers": {"legacy": {"type": "sse", "url": server.url}}});
    let output = run(dir.path(), &mcp, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("http://other.example/messages"), "{stderr}");
    assert!(stderr.contains("another origin"), "{stderr}");
    assert_no_secret("logs", &stderr);
}

#[test]
fn a_model_base_url_with_a_password_shows_no_user_info_in_its_error() {
    let dir = Scratch::new("url-secrets-model");
    let port = closed_port();
    let base = format!("http://admin:pa55word@127.0.0.1:{port}/v1");
    let output = Command::new(loopback::hookloop())
        .args(["run", "hi"])
        .current_dir(dir.path())
        .env("HOOKLOOP_LOG", "trace")
        .env("OPENAI_BASE_URL", &base)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_API_KEY", "test-key")
        .env("HOOKLOOP_LLM_MAX_RETRIES", "0")
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("http://127.0.0.1:{port}/v1/chat/completions")),
        "{stderr}"
    );
    assert!(!stderr.contains("admin"), "{stderr}");
    assert_no_secret("logs", &stderr);
}

#[tokio::test]
async fn an_acp_client_is_told_of_a_failing_server_without_its_urls_credentials() {
    let provider = FakeProvider::start(|_| Reply::text("Done."));
    let mut agent = acp_agent::Agent::spawn(&provider, &[]);
    agent.initialize().await;
    let port = closed_port();
    let servers =
        json!([{"type": "http", "name": "remote", "url": secret_url(port, "/mcp"), "headers": []}]);
    let cwd = std::env::temp_dir();
    let (reply, updates) = agent
        .call("session/new", json!({"cwd": cwd, "mcpServers": servers}))
        .await;
    // Told in the reply (an error) or in the session's updates, whichever the agent chose.
    let mut told = reply.to_string();
    for update in &updates {
        told.push_str(&update.to_string());
    }
    if let Some(session) = reply["result"]["sessionId"].as_str() {
        let (_, more) = agent.prompt_to_end(session, "hi").await;
        for update in &more {
            told.push_str(&update.to_string());
        }
    }
    assert!(told.contains(&format!("127.0.0.1:{port}")), "{told}");
    assert_no_secret("ACP client's frames", &told);
    agent.close().await;
}
