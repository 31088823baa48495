//! A hostile authorization server, secret source and second process against the real binary
//! (`hookloop run`, `hookloop mcp login`). The server is one on 127.0.0.1 that plays the MCP
//! server and its authorization server (and, as an HTTP proxy, hosts that are not this
//! machine); its metadata names what the test tells it to.
//!
//! What must hold: no URL a browser must not open is opened (`file:`, `steam:`), no credential
//! goes to a token endpoint in clear across the network or to an issuer other than the pinned
//! one, no form of a secret an echoing server quotes back reaches a log or an error, a
//! lifetime of `u64::MAX` does not wrap, a secret source of 400 MB is not read whole, and
//! processes sharing one token store lose no entry.

mod loopback;
#[allow(dead_code)]
#[path = "support/oauth_server.rs"]
mod oauth_server;
#[path = "support/peak_memory.rs"]
mod peak_memory;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use loopback::{FakeProvider, Reply};
use oauth_server::{Request, mcp, respond, scratch};
use serde_json::{Value, json};

const CLIENT_ID: &str = "ci runner";

/// What the token endpoint answers.
#[derive(Clone, Copy)]
enum Tokens {
    /// A bearer token lasting this many seconds, to any request.
    Grant(u64),
    /// A refusal quoting the request back: its `Authorization` header and its body, as sent.
    Echo,
}

/// What the hostile server's metadata says, and how it answers.
#[derive(Clone)]
struct Script {
    /// `authorization_endpoint`; default `<origin>/authorize`.
    authorization_endpoint: Option<String>,
    /// `token_endpoint`; default `<origin>/token`.
    token_endpoint: Option<String>,
    /// The protected resource's `authorization_servers[0]`; default its own origin.
    authorization_server: Option<String>,
    tokens: Tokens,
    /// Token answers are held until this many token requests came (at most 30 s).
    gate: usize,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            authorization_endpoint: None,
            token_endpoint: None,
            authorization_server: None,
            tokens: Tokens::Grant(3600),
            gate: 0,
        }
    }
}

/// One request the server saw: the host it was for (a proxied request names its own), the
/// path, its headers and body.
#[derive(Clone, Debug)]
struct Seen {
    host: String,
    path: String,
    text: String,
}

/// The hostile server on 127.0.0.1.
struct Hostile {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    calls: Arc<Mutex<Vec<String>>>,
}

/// Token requests arrived, shared by servers that hold their answers until all came.
#[derive(Default)]
struct Gate {
    arrived: Mutex<usize>,
    all: Condvar,
}

impl Gate {
    fn wait(&self, count: usize) {
        let mut arrived = self.arrived.lock().unwrap();
        *arrived += 1;
        self.all.notify_all();
        let deadline = Instant::now() + Duration::from_secs(30);
        while *arrived < count && Instant::now() < deadline {
            arrived = self
                .all
                .wait_timeout(arrived, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }
}

impl Hostile {
    fn start(script: Script) -> Self {
        Self::gated(script, Arc::default())
    }

    fn gated(script: Script, gate: Arc<Gate>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (s, c) = (Arc::clone(&seen), Arc::clone(&calls));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (script, s, c, gate) = (
                    script.clone(),
                    Arc::clone(&s),
                    Arc::clone(&c),
                    Arc::clone(&gate),
                );
                std::thread::spawn(move || serve(stream, &script, &s, &c, &gate));
            }
        });
        Self { base, seen, calls }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn token_requests(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path == "/token")
            .collect()
    }
}

fn serve(
    stream: TcpStream,
    script: &Script,
    seen: &Mutex<Vec<Seen>>,
    calls: &Mutex<Vec<String>>,
    gate: &Gate,
) {
    let Some(request) = Request::read(&stream) else {
        return;
    };
    // A proxied request names its target whole: `http://host/path`.
    let (host, path) = match request.path.strip_prefix("http://") {
        Some(rest) => {
            let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
            (host.to_owned(), format!("/{path}"))
        }
        None => (
            request.header("host").unwrap_or_default().to_owned(),
            request.path.clone(),
        ),
    };
    let text = format!(
        "{}\n{}",
        request
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}"))
            .collect::<Vec<_>>()
            .join("\n"),
        request.body
    );
    seen.lock().unwrap().push(Seen {
        host: host.clone(),
        path: path.clone(),
        text,
    });
    let origin = format!("http://{host}");
    let (status, extra, reply) = match (request.method.as_str(), path.as_str()) {
        ("GET", p) if p.starts_with("/.well-known/oauth-protected-resource") => (
            200,
            String::new(),
            json!({
                "resource": format!("{origin}/mcp"),
                "authorization_servers": [script.authorization_server.clone().unwrap_or_else(|| origin.clone())],
            }),
        ),
        ("GET", p) if p.starts_with("/.well-known/oauth-authorization-server") => (
            200,
            String::new(),
            json!({
                "issuer": origin,
                "authorization_endpoint": script.authorization_endpoint.clone().unwrap_or_else(|| format!("{origin}/authorize")),
                "token_endpoint": script.token_endpoint.clone().unwrap_or_else(|| format!("{origin}/token")),
                "response_types_supported": ["code"],
                "grant_types_supported": ["client_credentials", "authorization_code"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            }),
        ),
        ("POST", "/token") => {
            if script.gate > 0 {
                gate.wait(script.gate);
            }
            match script.tokens {
                Tokens::Grant(lasts) => (
                    200,
                    String::new(),
                    json!({"access_token": format!("tok-{host}"), "token_type": "Bearer", "expires_in": lasts}),
                ),
                Tokens::Echo => {
                    let header = request.header("authorization").unwrap_or_default();
                    let quoted = format!("you sent [{header}] and [{}]", request.body);
                    (
                        401,
                        String::new(),
                        json!({"error": "invalid_client", "error_description": quoted}),
                    )
                }
            }
        }
        ("POST", "/mcp") => {
            let authorized = request
                .header("authorization")
                .is_some_and(|a| a.starts_with("Bearer tok-"));
            if authorized {
                let message: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
                match mcp(&message, "hostile", calls) {
                    Some(reply) => (200, String::new(), reply),
                    None => (202, String::new(), Value::Null),
                }
            } else {
                let metadata = format!("{origin}/.well-known/oauth-protected-resource/mcp");
                (
                    401,
                    format!("WWW-Authenticate: Bearer resource_metadata=\"{metadata}\"\r\n"),
                    json!({"error": "unauthorized"}),
                )
            }
        }
        ("DELETE", "/mcp") => (200, String::new(), Value::Null),
        _ => (404, String::new(), json!({"error": "not found"})),
    };
    respond(stream, status, &extra, &reply);
}

/// An `.mcp.json` with one server `remote` at `url` and this `oauth` block.
fn mcp_json(dir: &Path, url: &str, oauth: Value) -> PathBuf {
    let path = dir.join("mcp.json");
    let config = json!({"mcpServers": {"remote": {"type": "http", "url": url, "oauth": oauth}}});
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// The client-credentials block with the secret in `E2E_SECRET`, sent as `auth`.
fn client_credentials(auth: &str) -> Value {
    json!({"grant": "client_credentials", "client_id": CLIENT_ID, "client_auth": auth,
           "client_secret": {"env": "E2E_SECRET"}})
}

/// `hookloop run` with `config`, its token store in `dir`, logging everything of its own; the
/// model calls `remote__echo` once when it has it.
fn run(dir: &Path, config: &Path, env: &[(&str, &str)]) -> Output {
    let provider = FakeProvider::start(|request| {
        let offered = request.to_string().contains("remote__echo");
        if offered && !loopback::after_tool(request) {
            Reply::tool("remote__echo", json!({"text": "hi"}))
        } else {
            Reply::text("Done.")
        }
    });
    Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap()])
        .arg("--record")
        .arg(dir.join("run.jsonl"))
        .arg("echo hi")
        .current_dir(dir)
        .env("HOOKLOOP_LOG", "trace")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_API_KEY", "test-key")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Everything a run said and wrote: stderr (logs, errors), stdout, the transcript.
fn said(dir: &Path, output: &Output) -> String {
    format!(
        "{}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout),
        std::fs::read_to_string(dir.join("run.jsonl")).unwrap_or_default()
    )
}

#[test]
fn a_cleartext_token_endpoint_across_the_network_gets_no_credentials() {
    // The MCP server is `mcp.test`, not this machine, reached through a proxy the test plays;
    // its authorization server names a plain-http token endpoint on another host.
    let dir = scratch("hostile-oauth", "cleartext");
    let proxy = Hostile::start(Script {
        authorization_server: Some("http://tokens.test".into()),
        ..Script::default()
    });
    let config = mcp_json(
        &dir,
        "http://mcp.test/mcp",
        client_credentials("client_secret_basic"),
    );
    let output = run(
        &dir,
        &config,
        &[
            ("E2E_SECRET", "cleartext-secret-1b2c"),
            ("HTTP_PROXY", &proxy.base),
            ("NO_PROXY", "127.0.0.1,localhost"),
        ],
    );
    let said = said(&dir, &output);
    assert!(
        proxy.seen().iter().any(|s| s.host == "tokens.test"),
        "discovery went through the proxy: {:?}",
        proxy.seen()
    );
    let sent = proxy.token_requests();
    assert!(sent.is_empty(), "credentials went in clear: {sent:?}");
    assert!(
        said.contains("token endpoint http://tokens.test/token is refused"),
        "{said}"
    );
    assert!(said.contains("no credentials were sent"), "{said}");
    assert!(proxy.calls.lock().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pinned_issuer_refuses_the_authorization_server_another_names() {
    let dir = scratch("hostile-oauth", "pinned");
    let hostile = Hostile::start(Script::default());
    let elsewhere = Hostile::start(Script::default());
    let mut oauth = client_credentials("client_secret_basic");
    oauth["issuer"] = json!(elsewhere.base);
    let config = mcp_json(&dir, &hostile.url(), oauth);
    let output = run(&dir, &config, &[("E2E_SECRET", "pinned-secret-9a8b")]);
    let text = said(&dir, &output);
    assert!(
        hostile.token_requests().is_empty(),
        "{:?}",
        hostile.token_requests()
    );
    assert!(
        elsewhere.seen().is_empty(),
        "the pin is not asked for metadata of its own"
    );
    assert!(
        text.contains(&format!(
            "the server's authorization server is {}, not the configured issuer {}",
            hostile.base, elsewhere.base
        )),
        "{text}"
    );
    assert!(!text.contains("pinned-secret-9a8b"), "{text}");

    // Pinned to the issuer the server names, the grant runs.
    let dir = scratch("hostile-oauth", "pinned-ok");
    let mut oauth = client_credentials("client_secret_basic");
    oauth["issuer"] = json!(hostile.base);
    let config = mcp_json(&dir, &hostile.url(), oauth);
    let output = run(&dir, &config, &[("E2E_SECRET", "pinned-secret-9a8b")]);
    assert!(output.status.success(), "{}", said(&dir, &output));
    assert_eq!(hostile.token_requests().len(), 1);
    assert_eq!(*hostile.calls.lock().unwrap(), ["hi"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_echoing_token_endpoint_quotes_no_form_of_the_secret_into_logs_or_errors() {
    // Characters that every encoding changes: form-encoding, percent-encoding, JSON, base64.
    let secret = "p@ss w/rd+x&y=z\"é";
    let form: String = form_urlencoded::byte_serialize(secret.as_bytes()).collect();
    let id_form: String = form_urlencoded::byte_serialize(CLIENT_ID.as_bytes()).collect();
    let basic = STANDARD.encode(format!("{id_form}:{form}"));
    for auth in ["client_secret_basic", "client_secret_post"] {
        let dir = scratch("hostile-oauth", &format!("echo-{auth}"));
        let server = Hostile::start(Script {
            tokens: Tokens::Echo,
            ..Script::default()
        });
        let config = mcp_json(&dir, &server.url(), client_credentials(auth));
        let output = run(&dir, &config, &[("E2E_SECRET", secret)]);
        let said = said(&dir, &output);
        // The server did quote it back, and the refusal reached the person.
        let sent = server.token_requests();
        assert_eq!(sent.len(), 1, "{said}");
        assert!(
            sent[0].text.contains(&basic) || sent[0].text.contains(&form),
            "{:?}",
            sent[0]
        );
        for form_sent in [
            secret.to_owned(),
            form.clone(),
            basic.clone(),
            serde_json::to_string(secret).unwrap(),
            "p%40ss".to_owned(),
            "p@ss".to_owned(),
        ] {
            assert!(
                !said.contains(&form_sent),
                "{auth}: {form_sent} is in {said}"
            );
        }
        assert!(said.contains("invalid_client"), "{said}");
        assert!(said.contains("<redacted>"), "{said}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_token_lasting_u64_max_seconds_is_used_without_wrapping() {
    let dir = scratch("hostile-oauth", "forever");
    let server = Hostile::start(Script {
        tokens: Tokens::Grant(u64::MAX),
        ..Script::default()
    });
    let config = mcp_json(
        &dir,
        &server.url(),
        client_credentials("client_secret_basic"),
    );
    let output = run(&dir, &config, &[("E2E_SECRET", "forever-secret")]);
    let said = said(&dir, &output);
    assert!(output.status.success(), "{said}");
    assert!(!said.contains("panicked"), "{said}");
    // One grant for the whole session: the token is still fresh, not renewed at a wrapped time.
    assert_eq!(server.token_requests().len(), 1, "{said}");
    assert_eq!(*server.calls.lock().unwrap(), ["hi"]);
    let store = std::fs::read_to_string(dir.join("config/hookloop/mcp-oauth.json")).unwrap();
    assert!(store.contains("18446744073709551615"), "{store}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_secret_file_of_400_mb_is_refused_without_being_read() {
    let dir = scratch("hostile-oauth", "big-secret");
    let server = Hostile::start(Script::default());
    let secret = dir.join("secret");
    // Sparse: no disk, but 400 MB of memory to whatever reads it whole.
    std::fs::File::create(&secret)
        .unwrap()
        .set_len(400_000_000)
        .unwrap();
    let oauth = json!({"grant": "client_credentials", "client_id": CLIENT_ID,
                       "client_secret": {"file": secret}});
    let config = mcp_json(&dir, &server.url(), oauth);
    let pid = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let (seen_pid, seen_peak) = (Arc::clone(&pid), Arc::clone(&peak));
    // The secret is read while the server starts, before the model is first asked.
    let provider = FakeProvider::start(move |_| {
        let kib = peak_memory::status_kib(seen_pid.load(Ordering::SeqCst), "VmHWM:");
        let kib = u32::try_from(kib).unwrap_or(u32::MAX);
        seen_peak.store(kib, Ordering::SeqCst);
        Reply::text("Done.")
    });
    let child = Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap(), "hi"])
        .current_dir(&dir)
        .env_remove("HOOKLOOP_LOG")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_API_KEY", "test-key")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    pid.store(child.id(), Ordering::SeqCst);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is over 65536 bytes"), "{stderr}");
    assert!(server.token_requests().is_empty());
    let peak_kib = peak.load(Ordering::SeqCst);
    assert!(peak_kib > 0, "the peak was not read");
    // The whole agent, a debug build: far below the 400 MB a whole read costs.
    assert!(peak_kib < 200 * 1024, "peak {peak_kib} KiB");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn processes_sharing_one_token_store_lose_no_entry() {
    // Twelve runs, each with a server of its own, write the store at once: every token
    // endpoint holds its answer until all twelve asked.
    const RUNS: usize = 12;
    let dir = scratch("hostile-oauth", "shared-store");
    let gate = Arc::new(Gate::default());
    let servers: Vec<Hostile> = (0..RUNS)
        .map(|_| {
            Hostile::gated(
                Script {
                    gate: RUNS,
                    ..Script::default()
                },
                Arc::clone(&gate),
            )
        })
        .collect();
    let done = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for (i, server) in servers.iter().enumerate() {
            let (dir, done) = (&dir, &done);
            scope.spawn(move || {
                let own = dir.join(format!("run-{i}"));
                std::fs::create_dir_all(&own).unwrap();
                let config = mcp_json(
                    &own,
                    &server.url(),
                    client_credentials("client_secret_basic"),
                );
                let output = run(
                    &own,
                    &config,
                    &[
                        ("E2E_SECRET", "shared-secret"),
                        ("XDG_CONFIG_HOME", dir.join("config").to_str().unwrap()),
                    ],
                );
                assert!(output.status.success(), "{}", said(&own, &output));
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    assert_eq!(done.load(Ordering::SeqCst), RUNS);
    let store: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("config/hookloop/mcp-oauth.json")).unwrap(),
    )
    .unwrap();
    let kept = store["servers"].as_object().map_or(0, |s| s.len());
    for server in &servers {
        assert!(
            store["servers"].get(server.url()).is_some(),
            "{} of {RUNS} entries kept; {} lost",
            kept,
            server.url()
        );
    }
    // No temporary file is left behind.
    let names: Vec<String> = std::fs::read_dir(dir.join("config/hookloop"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `hookloop mcp login remote` with a display and a recorder for a browser: a script that
/// appends each URL it is asked to open to `opened`, named by `BROWSER` and found on `PATH` as
/// `xdg-open`.
fn login(dir: &Path, url: &str) -> (std::process::Child, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"remote": {"type": "http", "url": url}}}).to_string(),
    )
    .unwrap();
    let opened = dir.join("opened");
    let browser = dir.join("browser.sh");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{}'\n",
            opened.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&browser, bin.join("xdg-open")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = Command::new(loopback::hookloop())
        .args(["mcp", "login", "remote", "--client-id", "hookloop-test"])
        .arg("--mcp-config")
        .arg(&config)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("BROWSER", &browser)
        .env("PATH", path)
        .env("DISPLAY", ":0")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("HOOKLOOP_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, opened)
}

#[test]
fn login_opens_no_uri_but_https_or_this_machines_http_and_says_why() {
    for endpoint in [
        "file:///etc/passwd",
        "steam://run/1",
        "javascript:alert(1)",
        "http://auth.example.com/authorize",
    ] {
        let dir = scratch("hostile-oauth", "login-refused");
        let server = Hostile::start(Script {
            authorization_endpoint: Some(endpoint.into()),
            ..Script::default()
        });
        let (mut child, opened) = login(&dir, &server.url());
        // A login that went on to wait for its redirect is ended here, and fails the test.
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !opened.exists(),
            "{endpoint}: the browser was launched on {:?}",
            std::fs::read_to_string(&opened)
        );
        assert!(!output.status.success(), "{endpoint}: {stderr}");
        assert!(stderr.contains("is not opened"), "{endpoint}: {stderr}");
        assert!(
            stderr.contains("only https (or http to this machine) is opened"),
            "{endpoint}: {stderr}"
        );
        assert!(
            !stderr.contains("open this address"),
            "{endpoint} was shown: {stderr}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    // The seam is live: an authorization page on this machine is opened, as the person is
    // shown it.
    let dir = scratch("hostile-oauth", "login-opened");
    let server = Hostile::start(Script::default());
    let (mut child, opened) = login(&dir, &server.url());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !opened.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let url = std::fs::read_to_string(&opened).expect("the browser was opened");
    assert!(
        url.starts_with(&format!("{}/authorize?", server.base)),
        "{url}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
