//! `hookloop run` (the binary) reaching an MCP server protected by the OAuth client-credentials
//! grant, with no person: the `oauth` block of `.mcp.json` names the environment variable that
//! holds the client secret. The server is a small one on 127.0.0.1: protected-resource and
//! authorization-server metadata, a token endpoint taking `client_secret_basic`, and an MCP
//! endpoint (JSON responses) that wants the bearer token it issued.
//!
//! The secret must reach the token endpoint and nothing else: not the transcript `--record`
//! writes, not the logs on stderr, not a stdio server's environment, not an error message (a
//! token endpoint that quotes it back in its refusal is scrubbed).

mod loopback;
#[path = "support/oauth_server.rs"]
mod oauth_server;

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use loopback::{FakeProvider, Reply};
use oauth_server::{Request, authorization_metadata, mcp, respond, scratch};
use serde_json::{Value, json};

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");
const CLIENT_ID: &str = "ci-runner";
const SECRET: &str = "s3cret-e2e-4f1d9c2b-never-logged";

/// What the protected server saw.
#[derive(Default)]
struct Seen {
    token_requests: AtomicUsize,
    granted: AtomicUsize,
    calls: Mutex<Vec<String>>,
    tokens_issued: Mutex<Vec<String>>,
}

struct Protected {
    base: String,
    seen: Arc<Seen>,
}

impl Protected {
    /// Starts the server; its token endpoint takes `secret` and quotes what it got when
    /// refusing.
    fn start(secret: &'static str) -> Self {
        Self::lasting(secret, 3600)
    }

    /// The same, issuing tokens that last `lasts` seconds.
    fn lasting(secret: &'static str, lasts: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let (b, s) = (base.clone(), Arc::clone(&seen));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (b, s) = (b.clone(), Arc::clone(&s));
                std::thread::spawn(move || serve(stream, &b, &s, secret, lasts));
            }
        });
        Self { base, seen }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

fn serve(stream: TcpStream, base: &str, seen: &Seen, secret: &str, lasts: u64) {
    let Some(request) = Request::read(&stream) else {
        return;
    };
    let header = |name: &str| request.header(name).map(str::to_owned);
    let body = &request.body;
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    let (status, extra, reply) = match (request.method.as_str(), request.path.as_str()) {
        ("GET", p) if p.starts_with("/.well-known/oauth-protected-resource") => (
            200,
            String::new(),
            json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]}),
        ),
        ("GET", p) if p.starts_with("/.well-known/oauth-authorization-server") => {
            (200, String::new(), authorization_metadata(base))
        }
        ("POST", "/token") => {
            seen.token_requests.fetch_add(1, Ordering::SeqCst);
            let expected = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{secret}"))
            );
            let got = header("authorization").unwrap_or_default();
            if body.contains("grant_type=client_credentials") && got == expected {
                seen.granted.fetch_add(1, Ordering::SeqCst);
                let token = format!("tok-{}", seen.granted.load(Ordering::SeqCst));
                seen.tokens_issued.lock().unwrap().push(token.clone());
                (
                    200,
                    String::new(),
                    json!({"access_token": token, "token_type": "Bearer", "expires_in": lasts}),
                )
            } else {
                // A careless server: its refusal quotes the credentials it got.
                let got = base64::engine::general_purpose::STANDARD
                    .decode(got.trim_start_matches("Basic "))
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                (
                    401,
                    String::new(),
                    json!({"error": "invalid_client", "error_description": format!("bad credentials {got}")}),
                )
            }
        }
        ("POST", "/mcp") => {
            let authorized = header("authorization").is_some_and(|a| {
                seen.tokens_issued
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|t| a == format!("Bearer {t}"))
            });
            if !authorized {
                (
                    401,
                    format!("WWW-Authenticate: Bearer resource_metadata=\"{metadata_url}\"\r\n"),
                    json!({"error": "unauthorized"}),
                )
            } else {
                let message: Value = serde_json::from_str(body).unwrap_or(Value::Null);
                match mcp(&message, "protected", &seen.calls) {
                    Some(reply) => (200, String::new(), reply),
                    None => (202, String::new(), Value::Null),
                }
            }
        }
        ("DELETE", "/mcp") => (200, String::new(), Value::Null),
        _ => (405, String::new(), json!({"error": "method not allowed"})),
    };
    respond(stream, status, &extra, &reply);
}

/// Runs `hookloop run` with the protected server (and a stdio server that writes down its
/// environment); the secret is in `E2E_MCP_SECRET`.
fn run(dir: &Path, server: &Protected, secret: &str) -> (std::process::Output, FakeProvider) {
    let config = dir.join("mcp.json");
    let env_file = dir.join("child-env.txt");
    let mcp_json = json!({"mcpServers": {
        "remote": {
            "type": "http",
            "url": server.url(),
            "oauth": {
                "grant": "client_credentials",
                "client_id": CLIENT_ID,
                "client_auth": "client_secret_basic",
                "client_secret": {"env": "E2E_MCP_SECRET"},
            },
        },
        "local": {
            "command": "/bin/sh",
            "args": ["-c", format!("env > '{}'; exec '{TEST_SERVER}'", env_file.display())],
        },
    }});
    std::fs::write(&config, mcp_json.to_string()).unwrap();
    let turn = AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| match turn.fetch_add(1, Ordering::SeqCst) {
        0 => Reply::tool("remote__echo", json!({"text": "hi"})),
        _ => Reply::text("Done."),
    });
    let output = Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap()])
        .arg("--record")
        .arg(dir.join("run.jsonl"))
        .arg("echo hi")
        .current_dir(dir)
        .env("HOOKLOOP_LOG", "hookloop=trace")
        .env("E2E_MCP_SECRET", secret)
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_API_KEY", "test-key")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    (output, provider)
}

#[test]
fn run_reaches_a_client_credentials_server_and_the_secret_stays_out() {
    let dir = scratch("grants", "ok");
    let server = Protected::start(SECRET);
    let (output, provider) = run(&dir, &server, SECRET);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // The grant ran once, and its token carried the call.
    assert_eq!(server.seen.granted.load(Ordering::SeqCst), 1, "{stderr}");
    assert_eq!(*server.seen.calls.lock().unwrap(), ["hi"]);
    let answered = provider
        .requests()
        .iter()
        .any(|r| r.to_string().contains("echoed: hi"));
    assert!(answered, "the tool's result reached the model");

    let transcript = std::fs::read_to_string(dir.join("run.jsonl")).unwrap();
    assert!(
        transcript.contains("echoed: hi"),
        "the record is of this run"
    );
    let child_env = std::fs::read_to_string(dir.join("child-env.txt")).unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    for (what, text) in [
        ("transcript", transcript.as_str()),
        ("logs", &*stderr),
        ("output", &*stdout),
        ("child environment", child_env.as_str()),
    ] {
        assert!(!text.contains(SECRET), "the secret is in the {what}");
        assert!(!text.contains("tok-1"), "the access token is in the {what}");
    }
    // The token is kept for the next run, in the store and nowhere else.
    let store = std::fs::read_to_string(dir.join("config/hookloop/mcp-oauth.json")).unwrap();
    assert!(store.contains("tok-1") && !store.contains(SECRET));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_short_lived_token_is_used_until_its_renewal_time() {
    // A 20 s token is renewed 5 s before its end, not obtained again for every request of the
    // session (initialize, the tool list, the call, ...).
    let dir = scratch("grants", "short");
    let server = Protected::lasting(SECRET, 20);
    let (output, _provider) = run(&dir, &server, SECRET);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(*server.seen.calls.lock().unwrap(), ["hi"]);
    assert_eq!(server.seen.granted.load(Ordering::SeqCst), 1, "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_refused_secret_fails_the_server_with_the_secret_scrubbed() {
    let dir = scratch("grants", "refused");
    let server = Protected::start(SECRET);
    let wrong = "wrong-secret-77c1e0a3-quoted-back";
    let (output, _provider) = run(&dir, &server, wrong);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The grant was tried once, refused, and not tried again.
    assert_eq!(
        server.seen.token_requests.load(Ordering::SeqCst),
        1,
        "{stderr}"
    );
    assert!(server.seen.calls.lock().unwrap().is_empty());
    assert!(stderr.contains("invalid_client"), "{stderr}");
    assert!(stderr.contains("<redacted>"), "{stderr}");
    let transcript = std::fs::read_to_string(dir.join("run.jsonl")).unwrap_or_default();
    for text in [
        &*stderr,
        &*String::from_utf8_lossy(&output.stdout),
        &*transcript,
    ] {
        assert!(!text.contains(wrong), "the secret is quoted: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unset_variable_is_named_and_nothing_is_sent() {
    let dir = scratch("grants", "unset");
    let server = Protected::start(SECRET);
    let config = dir.join("mcp.json");
    let mcp_json = json!({"mcpServers": {"remote": {
        "url": server.url(),
        "oauth": {"grant": "client_credentials", "client_id": CLIENT_ID,
                  "client_secret": {"env": "E2E_MCP_SECRET_UNSET"}},
    }}});
    std::fs::write(&config, mcp_json.to_string()).unwrap();
    let provider = FakeProvider::start(|_| Reply::text("Done."));
    let output = Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap(), "hi"])
        .current_dir(&dir)
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_API_KEY", "test-key")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env_remove("E2E_MCP_SECRET_UNSET")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("environment variable E2E_MCP_SECRET_UNSET is not set"),
        "{stderr}"
    );
    assert_eq!(server.seen.token_requests.load(Ordering::SeqCst), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
