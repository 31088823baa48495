//! OAuth against a real OAuth-protected MCP server built on the official Python SDK
//! (`tests/interop/oauth_server.py`, on 127.0.0.1): `hookloop mcp login` through the real flow
//! (the test plays the browser: it follows the printed URL's redirects to the loopback
//! listener), a session calling the server's tools with the stored tokens, an expiring token
//! refreshed without anyone, a refused refresh, a server without a login, a login and a session
//! over the HTTP+SSE transport, and tokens kept out of transcripts and logs.
//!
//! The Python SDK comes from `.ci/setup.d/30-mcp-interop.sh` (`HOOKLOOP_INTEROP_PYTHON`);
//! without it these tests say so in one line and do nothing.

mod binary;
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use hookloop::mcp::auth::{Authorize, LoginState, OAuthOptions, TokenStore};
use hookloop::mcp::{HostOptions, McpHost, McpServers, ServerConfig};
use hookloop::testing::{ScriptedLlm, Step};
use hookloop::{Config, PromptStop, Session, ToolHost};
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use common::Scratch;

const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/oauth_server.py");

/// The SDK's Python, or `None` after saying (once) that these tests did not run.
fn python() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("HOOKLOOP_INTEROP_PYTHON") {
        return Some(python.into());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but HOOKLOOP_INTEROP_PYTHON is not: .ci/setup.d/30-mcp-interop.sh did not run"
    );
    static SAID: Once = Once::new();
    SAID.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "OAuth interop tests not run: HOOKLOOP_INTEROP_PYTHON is unset; run .ci/run, or \
             `CI_ENV=/tmp/interop.env bash .ci/setup.d/30-mcp-interop.sh && set -a && \
             . /tmp/interop.env && set +a && cargo test --test mcp_oauth`"
        );
    });
    None
}

/// The Python server, killed when dropped.
struct OAuthServer {
    child: Child,
    url: String,
}

impl OAuthServer {
    fn start(python: &Path, args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python)
            .arg(SERVER)
            .arg(port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python runs");
        let path = if args.contains(&"--sse") {
            "sse"
        } else {
            "mcp"
        };
        let server = Self {
            child,
            url: format!("http://127.0.0.1:{port}/{path}"),
        };
        // Up once its metadata answers.
        let metadata = format!("http://127.0.0.1:{port}/.well-known/oauth-authorization-server");
        for _ in 0..200 {
            if answers_ok(&metadata) {
                return server;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the OAuth server did not come up at {metadata}");
    }

    fn mcp_json(&self, dir: &Scratch) -> String {
        let path = dir.file("mcp.json");
        let config = json!({"mcpServers": {"secure": {"type": "http", "url": self.url}}});
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }
}

impl Drop for OAuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a GET of `url` answers 200: a readiness check, blocking, without a blocking HTTP
/// client in the dependencies.
fn answers_ok(url: &str) -> bool {
    use std::io::Read;
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut stream) = std::net::TcpStream::connect(host) else {
        return false;
    };
    let request = format!("GET /{path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Runs `hookloop mcp login secure` with its config folder in `dir`, playing the browser: the
/// URL it prints is fetched, redirects followed, which ends at its loopback listener.
async fn login_with_the_binary(dir: &Scratch, mcp_json: &str) -> String {
    login_showing_the_url(dir, mcp_json).await.0
}

/// [`login_with_the_binary`], and the authorization URL it printed.
async fn login_showing_the_url(dir: &Scratch, mcp_json: &str) -> (String, String) {
    let login = Login::start(dir, mcp_json, &[]).await;
    // The browser: follows the authorization page's redirect to the loopback listener. reqwest
    // has no TLS provider of its own here (hookloop builds it without one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let page = reqwest::get(&login.url).await.unwrap();
    assert_eq!(page.status(), 200);
    let url = login.url.clone();
    let (success, stdout, said) = login.finish().await;
    assert!(success, "login failed: {stdout}{said}");
    (stdout, url)
}

/// `hookloop mcp login secure` running, waiting for its redirect.
struct Login {
    child: tokio::process::Child,
    /// The authorization URL it printed.
    url: String,
    /// Everything it wrote on stderr, the URL's lines included.
    said: tokio::task::JoinHandle<Vec<String>>,
}

impl Login {
    async fn start(dir: &Scratch, mcp_json: &str, env: &[(&str, &str)]) -> Self {
        let mut child = tokio::process::Command::new(binary::hookloop())
            .args(["mcp", "login", "secure", "--mcp-config", mcp_json])
            .env("XDG_CONFIG_HOME", dir.path())
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let mut before = Vec::new();
        let url = loop {
            let line = tokio::time::timeout(Duration::from_secs(30), stderr.next_line())
                .await
                .expect("login prints the authorization URL in time")
                .unwrap()
                .expect("login prints the authorization URL");
            before.push(line.clone());
            let line = line.trim();
            if line.starts_with("http://") {
                break line.to_owned();
            }
        };
        // Keep reading what it says, so that it never writes into a closed pipe.
        let said = tokio::spawn(async move {
            let mut rest = before;
            while let Ok(Some(line)) = stderr.next_line().await {
                rest.push(line);
            }
            rest
        });
        assert!(url.contains("code_challenge_method=S256"), "{url}");
        assert!(url.contains("resource="), "the resource indicator: {url}");
        Self { child, url, said }
    }

    /// A query parameter of the authorization URL.
    fn param(&self, name: &str) -> String {
        reqwest::Url::parse(&self.url)
            .unwrap()
            .query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
            .unwrap_or_else(|| panic!("no {name} in {}", self.url))
    }

    /// The port of its redirect listener.
    fn port(&self) -> u16 {
        reqwest::Url::parse(&self.param("redirect_uri"))
            .unwrap()
            .port()
            .unwrap()
    }

    /// Waits for it to end: whether it succeeded, its stdout and its stderr.
    async fn finish(self) -> (bool, String, String) {
        let output = tokio::time::timeout(Duration::from_secs(30), self.child.wait_with_output())
            .await
            .expect("login ends in time")
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let said = self.said.await.unwrap().join("\n");
        (output.status.success(), stdout, said)
    }
}

/// A GET of `target` on the loopback `port` from a local process, as raw as such a process
/// may send it; the whole answer.
async fn local_get(port: u16, target: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!("GET {target} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("the listener answers")
        .unwrap();
    answer
}

/// An OSC 52 sequence (it writes the clipboard in many terminals), percent-encoded.
const OSC_52: &str = "%1b%5d52%3bc%3baGVsbG8%3d%07";

/// The scopes an authorization URL asks for.
fn asked_scopes(url: &str) -> Vec<String> {
    let url = reqwest::Url::parse(url).unwrap();
    let scope = url
        .query_pairs()
        .find(|(k, _)| k == "scope")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    scope.split_whitespace().map(str::to_owned).collect()
}

fn store_path(dir: &Scratch) -> PathBuf {
    dir.path().join("hookloop").join("mcp-oauth.json")
}

fn options(store: TokenStore) -> HostOptions {
    common::fast_options().with_oauth(OAuthOptions {
        store,
        ..OAuthOptions::default()
    })
}

fn servers(url: &str) -> McpServers {
    McpServers::new()
        .with("secure", ServerConfig::http(url))
        .unwrap()
}

/// Every secret of the stored login.
fn stored_secrets(store: &TokenStore, url: &str) -> Vec<String> {
    let entry = store.get(url).unwrap().expect("a stored login");
    let text = serde_json::to_value(entry.credentials.unwrap()).unwrap();
    let response = &text["token_response"];
    let mut secrets = vec![response["access_token"].as_str().unwrap().to_owned()];
    if let Some(refresh) = response["refresh_token"].as_str() {
        secrets.push(refresh.to_owned());
    }
    secrets
}

/// A `tracing` writer into a shared buffer, to read what a session logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn login_then_a_session_calls_tools_and_an_expired_token_is_refreshed() {
    let Some(python) = python() else { return };
    let server = OAuthServer::start(&python, &["--token-secs", "2"]);
    let dir = Scratch::new("oauth-login");
    let mcp_json = server.mcp_json(&dir);

    let said = login_with_the_binary(&dir, &mcp_json).await;
    assert!(said.contains("secure: logged in (todo)"), "{said}");
    assert!(said.contains("2 tools"), "{said}");
    let path = store_path(&dir);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the token store is private");
    }
    let store = TokenStore::file(&path);
    let first_secrets = stored_secrets(&store, &server.url);

    // Everything the session logs, at the most verbose level, goes into `logs`.
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("trace")
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let (host, failures) = McpHost::connect(servers(&server.url), options(store.clone()))
        .await
        .unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("secure__add", json!({"a": 2, "b": 3}))]),
        Step::text("five"),
        Step::tools(2, &[("secure__stats", json!({}))]),
        Step::text("done"),
    ]);
    let transcript = dir.file("session.jsonl");
    let mut session = Session::new(Config::builder().build().unwrap(), llm.clone(), host);
    let recorder = session.record_to(&transcript).unwrap();
    assert_eq!(session.prompt("Add.").await.unwrap(), PromptStop::EndTurn);
    // The token lasts 2 s; past that the next call refreshes it first.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(session.prompt("Stats.").await.unwrap(), PromptStop::EndTurn);
    session.close().await.unwrap();
    recorder.check().unwrap();

    let results: Vec<String> = llm
        .requests()
        .iter()
        .flat_map(|r| r.messages.iter())
        .filter_map(|m| match m {
            hookloop::machine::Message::ToolResult { output, .. } => Some(output.joined_text()),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], "5", "{results:?}");
    let stats: serde_json::Value = serde_json::from_str(results.last().unwrap()).unwrap();
    assert_eq!(stats["codes"], 1, "one login: {stats}");
    assert!(
        stats["refreshes"].as_u64().unwrap() >= 1,
        "a refresh: {stats}"
    );

    // The refreshed tokens were stored, and no token, old or new, is in the transcript or logs.
    let mut secrets = first_secrets;
    secrets.extend(stored_secrets(&store, &server.url));
    assert_ne!(secrets[0], secrets[2], "the access token changed");
    let recorded = std::fs::read_to_string(&transcript).unwrap();
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("secure"), "the capture saw the session");
    for secret in &secrets {
        assert!(
            !recorded.contains(secret.as_str()),
            "a token in the transcript"
        );
        assert!(!logged.contains(secret.as_str()), "a token in the logs");
    }
}

#[tokio::test]
async fn a_refused_step_up_is_kept_and_the_next_login_asks_for_its_scopes() {
    let Some(python) = python() else { return };
    let dir = Scratch::new("oauth-step-up");
    let demand = dir.file("demand-admin");
    let server = OAuthServer::start(&python, &["--demand-admin-when", &demand]);
    let mcp_json = server.mcp_json(&dir);
    let (said, url) = login_showing_the_url(&dir, &mcp_json).await;
    assert_eq!(asked_scopes(&url), ["todo"], "{url}");
    assert!(said.contains("secure: logged in (todo)"), "{said}");

    // The server now wants `admin` as well. A session does not log in: the server is left
    // out, and the scopes it asked for are kept.
    std::fs::write(&demand, "").unwrap();
    let store = TokenStore::file(store_path(&dir));
    let (_host, failures) = McpHost::connect(servers(&server.url), options(store.clone()))
        .await
        .unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let message = failures[0].error.to_string();
    assert!(message.contains("more access (todo admin)"), "{message}");
    let entry = store.get(&server.url).unwrap().unwrap();
    assert_eq!(entry.requested_scopes, ["todo", "admin"]);

    // The next login asks for their union at once, and a session then gets in.
    let (said, url) = login_showing_the_url(&dir, &mcp_json).await;
    assert_eq!(asked_scopes(&url), ["todo", "admin"], "{url}");
    assert!(said.contains("secure: logged in (todo admin)"), "{said}");
    let (host, failures) = McpHost::connect(servers(&server.url), options(store))
        .await
        .unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(host.catalog().servers.len(), 1);
}

#[tokio::test]
async fn a_server_without_a_login_is_left_out_with_the_login_command() {
    let Some(python) = python() else { return };
    let server = OAuthServer::start(&python, &[]);
    let mut list = servers(&server.url);
    list.push(
        hookloop::ServerName::new("plain").unwrap(),
        common::test_server(&[]),
    )
    .unwrap();
    let (host, failures) = McpHost::connect(list, options(TokenStore::memory()))
        .await
        .unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let message = failures[0].error.to_string();
    assert!(
        message.contains("run `hookloop mcp login secure`"),
        "{message}"
    );
    // The session runs without it.
    let catalog = host.catalog();
    let names: Vec<_> = catalog.servers.iter().map(|s| s.server.as_str()).collect();
    assert_eq!(names, ["plain"]);
}

#[tokio::test]
async fn an_sse_server_behind_oauth_needs_a_login_then_runs_on_its_tokens() {
    let Some(python) = python() else { return };
    let server = OAuthServer::start(&python, &["--sse"]);
    let sse = || {
        McpServers::new()
            .with("secure", ServerConfig::sse(&server.url))
            .unwrap()
    };
    let store = TokenStore::memory();
    let (_host, failures) = McpHost::connect(sse(), options(store.clone()))
        .await
        .unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let message = failures[0].error.to_string();
    assert!(
        message.contains("run `hookloop mcp login secure`"),
        "{message}"
    );

    // The flow `mcp login` runs, on the stream's challenge, the browser step headless.
    let login = common::fast_options().with_oauth(OAuthOptions {
        store: store.clone(),
        authorize: Authorize::FollowRedirects,
        ..OAuthOptions::default()
    });
    let (host, failures) = McpHost::connect(sse(), login).await.unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    drop(host);
    assert!(matches!(
        LoginState::of(&store, &server.url).unwrap(),
        LoginState::LoggedIn { .. }
    ));
    // A session sends the stored token on the GET and on every POST.
    let (host, failures) = McpHost::connect(sse(), options(store)).await.unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    let call = hookloop::machine::ToolCall {
        id: "c1".into(),
        name: "secure__add".into(),
        arguments: json!({"a": 2, "b": 3}),
    };
    assert_eq!(host.call_tool(&call).await.joined_text(), "5");
}

#[tokio::test]
async fn a_refused_refresh_says_to_log_in_again() {
    let Some(python) = python() else { return };
    let server = OAuthServer::start(&python, &["--token-secs", "1", "--refuse-refresh"]);
    let dir = Scratch::new("oauth-refused");
    let store = TokenStore::file(store_path(&dir));
    // A login through the same flow `mcp login` runs, the browser step headless.
    let login = common::fast_options().with_oauth(OAuthOptions {
        store: store.clone(),
        authorize: Authorize::FollowRedirects,
        ..OAuthOptions::default()
    });
    let (host, failures) = McpHost::connect(servers(&server.url), login).await.unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    drop(host);
    assert!(matches!(
        LoginState::of(&store, &server.url).unwrap(),
        LoginState::LoggedIn { .. }
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let (_host, failures) = McpHost::connect(servers(&server.url), options(store.clone()))
        .await
        .unwrap();
    assert_eq!(failures.len(), 1);
    let message = failures[0].error.to_string();
    assert!(
        message.contains("could not be refreshed: run `hookloop mcp login secure` again"),
        "{message}"
    );
    // The refused tokens are dropped: the store says to log in again.
    assert_eq!(
        LoginState::of(&store, &server.url).unwrap(),
        LoginState::Expired
    );
}

#[tokio::test]
async fn list_shows_the_login_and_logout_forgets_it() {
    let Some(python) = python() else { return };
    let server = OAuthServer::start(&python, &[]);
    let dir = Scratch::new("oauth-list");
    let mcp_json = server.mcp_json(&dir);
    let run = |args: &[&str]| {
        let output = Command::new(binary::hookloop())
            .args(args)
            .args(["--mcp-config", &mcp_json])
            .env("XDG_CONFIG_HOME", dir.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let before = run(&["mcp", "list"]);
    assert!(
        before.contains(&format!("secure (http: {})", server.url)),
        "{before}"
    );
    assert!(
        before.contains("run `hookloop mcp login secure`"),
        "{before}"
    );
    assert!(before.contains("login: not logged in"), "{before}");

    login_with_the_binary(&dir, &mcp_json).await;
    let after = run(&["mcp", "list"]);
    assert!(after.contains("tools (2): add, stats"), "{after}");
    assert!(after.contains("protocol "), "{after}");
    assert!(after.contains("login: logged in (todo)"), "{after}");

    assert!(run(&["mcp", "logout", "secure"]).contains("logged out of secure"));
    let gone = run(&["mcp", "list"]);
    assert!(gone.contains("login: not logged in"), "{gone}");
}

/// The test server over streamable HTTP on 127.0.0.1 (no OAuth), killed on drop.
struct PlainHttpServer {
    child: Child,
    url: String,
}

impl PlainHttpServer {
    fn start() -> Self {
        use std::io::BufRead;
        let mut child = Command::new(common::TEST_SERVER)
            .env("TS_HTTP", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the http test server");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut url = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut url)
            .expect("url");
        Self {
            child,
            url: url.trim().to_owned(),
        }
    }
}

impl Drop for PlainHttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn an_unreadable_token_store_does_not_stop_a_server_that_needs_no_login() {
    let server = PlainHttpServer::start();
    let dir = Scratch::new("oauth-bad-store");
    let path = dir.path().join("mcp-oauth.json");
    std::fs::write(&path, r#"{"version": 9, "servers": {}}"#).unwrap();
    let (host, failures) = McpHost::connect(servers(&server.url), options(TokenStore::file(&path)))
        .await
        .unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(host.catalog().servers.len(), 1);
}

#[tokio::test]
async fn a_hostile_local_process_at_the_callback_neither_ends_nor_stalls_a_login() {
    let Some(python) = python() else { return };
    let server = OAuthServer::start(&python, &[]);
    let dir = Scratch::new("oauth-hostile-callback");
    let mcp_json = server.mcp_json(&dir);
    login_with_the_binary(&dir, &mcp_json).await;
    let store = TokenStore::file(store_path(&dir));
    let old = stored_secrets(&store, &server.url);

    // A second login, logging everything it may.
    let login = Login::start(&dir, &mcp_json, &[("HOOKLOOP_LOG", "trace")]).await;
    let port = login.port();
    let state = login.param("state");
    // Idle connections, held open while the rest happens.
    let idle: Vec<_> = (0..8)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let refused = [
        format!("/callback?error=access_denied&error_description={OSC_52}"),
        format!("/callback?error={OSC_52}&state=wrong"),
        "/callback?code=bogus&state=wrong".to_owned(),
        "/callback?code=bogus".to_owned(),
    ];
    for target in &refused {
        let answer = local_get(port, target).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{target}: {answer}");
        assert!(!answer.contains("done"), "{target}: {answer}");
    }
    for target in [
        format!("/callbackx?code=bogus&state={state}"),
        format!("/callback/x?code=bogus&state={state}"),
    ] {
        let answer = local_get(port, &target).await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{target}: {answer}");
    }
    // The stored login is untouched while the new one runs.
    assert_eq!(stored_secrets(&store, &server.url), old);

    // The browser: the authorization page's redirect, then the listener.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let authorized = no_redirects.get(&login.url).send().await.unwrap();
    let location = authorized.headers()["location"]
        .to_str()
        .unwrap()
        .to_owned();
    let code = reqwest::Url::parse(&location)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .expect("the redirect carries a code");
    let page = no_redirects.get(&location).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("The login is done"));
    let (success, stdout, said) = login.finish().await;
    assert!(success, "login failed: {stdout}{said}");
    drop(idle);

    let new = stored_secrets(&store, &server.url);
    assert_ne!(new[0], old[0], "the new login replaced the old");
    assert!(said.contains("TRACE"), "the capture saw the trace logs");
    for secret in new.iter().chain([&code]) {
        assert!(
            !said.contains(secret.as_str()),
            "a secret in the logs: {said}"
        );
    }
    assert!(
        !said.contains('\u{1b}') && !stdout.contains('\u{1b}'),
        "{said}"
    );
}

#[tokio::test]
async fn a_refused_login_keeps_the_stored_one_and_shows_no_terminal_escapes() {
    let Some(python) = python() else { return };
    let server = OAuthServer::start(&python, &[]);
    let dir = Scratch::new("oauth-refused-login");
    let mcp_json = server.mcp_json(&dir);
    login_with_the_binary(&dir, &mcp_json).await;
    let store = TokenStore::file(store_path(&dir));
    let old = stored_secrets(&store, &server.url);

    let login = Login::start(&dir, &mcp_json, &[]).await;
    // The authorization server's refusal, with this login's state: the login fails.
    let target = format!(
        "/callback?error=access_denied&error_description={OSC_52}&state={}",
        login.param("state")
    );
    let answer = local_get(login.port(), &target).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(!answer.contains("done"), "{answer}");
    let (success, stdout, said) = login.finish().await;
    assert!(!success, "{stdout}{said}");
    assert!(said.contains("access_denied"), "{said}");
    assert!(
        !said.contains('\u{1b}') && !said.contains('\u{7}'),
        "{said:?}"
    );
    // The old login is still there, and still works.
    assert_eq!(stored_secrets(&store, &server.url), old);
    let (host, failures) = McpHost::connect(servers(&server.url), options(store.clone()))
        .await
        .unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert!(!host.catalog().servers.is_empty());
}
