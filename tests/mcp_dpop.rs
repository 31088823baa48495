//! `hookloop run` (the binary) reaching an MCP server that binds its tokens with DPoP (RFC 9449),
//! with no person: a client-credentials grant whose secret comes from an environment variable.
//! The server is a small one on 127.0.0.1 that checks every proof the way RFC 9449 §4.3 says a
//! server does: the signature by the key in the proof's header, `typ`, `htm`, `htu`, `iat`,
//! `jti` never seen before, the nonce it asked for, and on the MCP endpoint `ath` (the token's
//! hash) and the key the token was bound to at the token endpoint. Both of its ends ask for a
//! nonce first (the token endpoint's `400`, the MCP endpoint's `401 use_dpop_nonce`), and the
//! MCP endpoint changes its nonce every few requests.
//!
//! A server that does not take DPoP gets bearer tokens, no proof, and no key file is made.

mod loopback;
#[path = "support/oauth_server.rs"]
mod oauth_server;

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use loopback::{FakeProvider, Reply};
use oauth_server::{Request, authorization_metadata, mcp, respond, scratch};
use serde_json::{Value, json};

const CLIENT_ID: &str = "ci-runner";
const SECRET: &str = "dpop-e2e-secret-9b7e1f";
/// Requests the MCP endpoint takes with one nonce before it asks for the next.
const NONCE_USES: usize = 3;

/// What the server saw.
#[derive(Default)]
struct Seen {
    /// Token requests, and those refused for want of the nonce.
    token_requests: AtomicUsize,
    token_nonce_refusals: AtomicUsize,
    /// MCP requests refused for want of the current nonce.
    resource_nonce_refusals: AtomicUsize,
    /// MCP requests with a valid proof and the current nonce.
    resource_ok: AtomicUsize,
    /// Every proof's jti, token endpoint's and MCP endpoint's.
    jtis: Mutex<Vec<String>>,
    /// What was wrong with a proof, per bad one.
    bad_proofs: Mutex<Vec<String>>,
    /// Requests that carried a DPoP header at all.
    dpop_headers: AtomicUsize,
    /// The tokens issued, with the thumbprint of the key each is bound to.
    tokens: Mutex<Vec<(String, Option<String>)>>,
    calls: Mutex<Vec<String>>,
    /// The MCP endpoint's nonce counter.
    resource_nonce: Mutex<(usize, usize)>,
}

struct Server {
    base: String,
    seen: Arc<Seen>,
}

impl Server {
    /// Starts the server; with `dpop` false it is a plain bearer-token server.
    fn start(dpop: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let (b, s) = (base.clone(), Arc::clone(&seen));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (b, s) = (b.clone(), Arc::clone(&s));
                std::thread::spawn(move || serve(stream, &b, &s, dpop));
            }
        });
        Self { base, seen }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

/// A checked proof: its key's thumbprint and its claims.
struct Proof {
    jkt: String,
    claims: Value,
}

/// Checks a proof as RFC 9449 §4.3 says; what is wrong with it, else the proof.
fn check_proof(proof: Option<&str>, method: &str, url: &str) -> Result<Proof, String> {
    let proof = proof.ok_or("no DPoP header")?;
    let parts: Vec<&str> = proof.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err("not a compact JWS".into());
    };
    let decode = |part: &str| -> Result<Value, String> {
        let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|e| e.to_string())?;
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    };
    let (head, claims_json) = (decode(header)?, decode(claims)?);
    if head["typ"] != "dpop+jwt" || head["alg"] != "ES256" {
        return Err(format!("header {head}"));
    }
    let jwk = &head["jwk"];
    if jwk.get("d").is_some() {
        return Err("the private key is in the proof".into());
    }
    let coordinate = |name: &str| {
        URL_SAFE_NO_PAD
            .decode(jwk[name].as_str().unwrap_or_default())
            .map_err(|e| e.to_string())
    };
    let point = [vec![4u8], coordinate("x")?, coordinate("y")?].concat();
    let key =
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point);
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|e| e.to_string())?;
    key.verify(format!("{header}.{claims}").as_bytes(), &signature)
        .map_err(|_| "the signature does not verify".to_owned())?;
    if claims_json["htm"] != method {
        return Err(format!("htm {} for {method}", claims_json["htm"]));
    }
    if claims_json["htu"] != url {
        return Err(format!("htu {} for {url}", claims_json["htu"]));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let iat = claims_json["iat"].as_u64().ok_or("no iat")?;
    if iat.abs_diff(now) > 60 {
        return Err(format!("iat {iat} is not now"));
    }
    if !claims_json["jti"].is_string() {
        return Err("no jti".into());
    }
    let canonical = format!(
        r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
        jwk["x"].as_str().unwrap_or_default(),
        jwk["y"].as_str().unwrap_or_default()
    );
    let jkt = URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        canonical.as_bytes(),
    ));
    Ok(Proof {
        jkt,
        claims: claims_json,
    })
}

/// Records the proof's jti; a replayed one is a bad proof.
fn fresh_jti(seen: &Seen, proof: &Proof) -> Result<(), String> {
    let jti = proof.claims["jti"].as_str().unwrap_or_default().to_owned();
    let mut jtis = seen.jtis.lock().unwrap();
    if jtis.contains(&jti) {
        return Err(format!("jti {jti} replayed"));
    }
    jtis.push(jti);
    Ok(())
}

type Answer = (u16, String, Value);

fn serve(stream: TcpStream, base: &str, seen: &Seen, dpop: bool) {
    let Some(request) = Request::read(&stream) else {
        return;
    };
    if request.header("dpop").is_some() {
        seen.dpop_headers.fetch_add(1, Ordering::SeqCst);
    }
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    let (status, extra, reply) = match (request.method.as_str(), request.path.as_str()) {
        ("GET", p) if p.starts_with("/.well-known/oauth-protected-resource") => (
            200,
            String::new(),
            json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]}),
        ),
        ("GET", p) if p.starts_with("/.well-known/oauth-authorization-server") => {
            let mut metadata = authorization_metadata(base);
            if dpop {
                metadata["dpop_signing_alg_values_supported"] = json!(["ES256"]);
            }
            (200, String::new(), metadata)
        }
        ("POST", "/token") => token(&request, base, seen, dpop),
        (method, "/mcp") => resource(&request, method, base, seen, dpop, &metadata_url),
        _ => (405, String::new(), json!({"error": "method not allowed"})),
    };
    respond(stream, status, &extra, &reply);
}

/// The token endpoint: the client's secret, and with `dpop` a valid proof with its nonce.
fn token(request: &Request, base: &str, seen: &Seen, dpop: bool) -> Answer {
    const NONCE: &str = "as-nonce-1";
    seen.token_requests.fetch_add(1, Ordering::SeqCst);
    let expected = format!("Basic {}", STANDARD.encode(format!("{CLIENT_ID}:{SECRET}")));
    if !request.body.contains("grant_type=client_credentials")
        || request.header("authorization") != Some(expected.as_str())
    {
        return (401, String::new(), json!({"error": "invalid_client"}));
    }
    let mut jkt = None;
    if dpop {
        let proof = match check_proof(request.header("dpop"), "POST", &format!("{base}/token"))
            .and_then(|p| fresh_jti(seen, &p).map(|()| p))
        {
            Ok(proof) => proof,
            Err(reason) => {
                seen.bad_proofs
                    .lock()
                    .unwrap()
                    .push(format!("token: {reason}"));
                return (400, String::new(), json!({"error": "invalid_dpop_proof"}));
            }
        };
        if proof.claims.get("ath").is_some() {
            seen.bad_proofs.lock().unwrap().push("token: an ath".into());
        }
        if proof.claims["nonce"] != NONCE {
            seen.token_nonce_refusals.fetch_add(1, Ordering::SeqCst);
            return (
                400,
                format!("DPoP-Nonce: {NONCE}\r\n"),
                json!({"error": "use_dpop_nonce"}),
            );
        }
        jkt = Some(proof.jkt);
    }
    let mut tokens = seen.tokens.lock().unwrap();
    let token = format!("dpop-e2e-token-{}", tokens.len() + 1);
    tokens.push((token.clone(), jkt));
    let token_type = if dpop { "DPoP" } else { "Bearer" };
    (
        200,
        String::new(),
        json!({"access_token": token, "token_type": token_type, "expires_in": 3600}),
    )
}

/// The MCP endpoint: the token, and for a bound one a valid proof of its key with the current
/// nonce.
fn resource(
    request: &Request,
    method: &str,
    base: &str,
    seen: &Seen,
    dpop: bool,
    metadata_url: &str,
) -> Answer {
    let scheme = if dpop { "DPoP" } else { "Bearer" };
    let challenge = |error: &str| {
        format!("WWW-Authenticate: {scheme} {error}resource_metadata=\"{metadata_url}\"\r\n")
    };
    let presented = request
        .header("authorization")
        .and_then(|a| a.strip_prefix(&format!("{scheme} ")))
        .map(str::to_owned);
    let bound = presented.as_ref().and_then(|presented| {
        let tokens = seen.tokens.lock().unwrap();
        tokens
            .iter()
            .find(|(t, _)| t == presented)
            .map(|(_, jkt)| jkt.clone())
    });
    let (Some(token), Some(jkt)) = (presented, bound) else {
        return (401, challenge(""), json!({"error": "unauthorized"}));
    };
    if let Some(jkt) = jkt {
        let checked = check_proof(request.header("dpop"), method, &format!("{base}/mcp"))
            .and_then(|p| fresh_jti(seen, &p).map(|()| p))
            .and_then(|p| {
                let ath = URL_SAFE_NO_PAD.encode(ring::digest::digest(
                    &ring::digest::SHA256,
                    token.as_bytes(),
                ));
                if p.claims["ath"] != ath.as_str() {
                    Err("ath is not the token's".into())
                } else if p.jkt != jkt {
                    Err("the proof's key is not the token's".into())
                } else {
                    Ok(p)
                }
            });
        let proof = match checked {
            Ok(proof) => proof,
            Err(reason) => {
                seen.bad_proofs
                    .lock()
                    .unwrap()
                    .push(format!("{method} /mcp: {reason}"));
                return (
                    401,
                    challenge("error=\"invalid_dpop_proof\", "),
                    json!({"error": "invalid_dpop_proof"}),
                );
            }
        };
        let mut nonce = seen.resource_nonce.lock().unwrap();
        let current = format!("rs-nonce-{}", nonce.0);
        if proof.claims["nonce"] != current.as_str() || nonce.1 >= NONCE_USES {
            // A new nonce once the current one has served its requests.
            if nonce.1 >= NONCE_USES {
                *nonce = (nonce.0 + 1, 0);
            }
            seen.resource_nonce_refusals.fetch_add(1, Ordering::SeqCst);
            return (
                401,
                format!(
                    "{}DPoP-Nonce: rs-nonce-{}\r\n",
                    challenge("error=\"use_dpop_nonce\", "),
                    nonce.0
                ),
                json!({"error": "use_dpop_nonce"}),
            );
        }
        nonce.1 += 1;
        seen.resource_ok.fetch_add(1, Ordering::SeqCst);
    } else if request.header("dpop").is_some() {
        seen.bad_proofs
            .lock()
            .unwrap()
            .push("a proof with a bearer token".into());
    }
    match method {
        "POST" => {
            let message: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
            match mcp(&message, "bound", &seen.calls) {
                Some(reply) => (200, String::new(), reply),
                None => (202, String::new(), Value::Null),
            }
        }
        "DELETE" => (200, String::new(), Value::Null),
        _ => (405, String::new(), Value::Null),
    }
}

/// Runs `hookloop run` against the server; the model calls the tool twice.
fn run(dir: &Path, server: &Server) -> std::process::Output {
    let config = dir.join("mcp.json");
    let mcp_json = json!({"mcpServers": {"remote": {
        "type": "http",
        "url": server.url(),
        "oauth": {
            "grant": "client_credentials",
            "client_id": CLIENT_ID,
            "client_auth": "client_secret_basic",
            "client_secret": {"env": "E2E_DPOP_SECRET"},
        },
    }}});
    std::fs::write(&config, mcp_json.to_string()).unwrap();
    let turn = AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| match turn.fetch_add(1, Ordering::SeqCst) {
        0 => Reply::tool("remote__echo", json!({"text": "one"})),
        1 => Reply::tool("remote__echo", json!({"text": "two"})),
        _ => Reply::text("Done."),
    });
    Command::new(loopback::hookloop())
        .args(["run", "--mcp-config", config.to_str().unwrap()])
        .arg("--record")
        .arg(dir.join("run.jsonl"))
        .arg("echo twice")
        .current_dir(dir)
        .env("HOOKLOOP_LOG", "hookloop=trace")
        .env("E2E_DPOP_SECRET", SECRET)
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("OPENAI_API_KEY", "test-key")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap()
}

#[test]
fn run_binds_its_token_to_the_stores_key_and_answers_both_nonce_challenges() {
    let dir = scratch("dpop", "bound");
    let server = Server::start(true);
    let output = run(&dir, &server);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let seen = &server.seen;
    assert_eq!(*seen.calls.lock().unwrap(), ["one", "two"], "{stderr}");
    assert!(
        seen.bad_proofs.lock().unwrap().is_empty(),
        "{:?}",
        seen.bad_proofs.lock().unwrap()
    );
    // The token endpoint asked for its nonce once and got it on the one retry.
    assert_eq!(seen.token_nonce_refusals.load(Ordering::SeqCst), 1);
    assert_eq!(seen.token_requests.load(Ordering::SeqCst), 2);
    // The MCP endpoint asked at the start and at each change of nonce, and each time the
    // request went through with it: more requests went through than one nonce serves.
    let ok = seen.resource_ok.load(Ordering::SeqCst);
    let refusals = seen.resource_nonce_refusals.load(Ordering::SeqCst);
    assert!(ok > NONCE_USES, "{ok} requests went through");
    assert!(refusals >= 2, "{refusals} nonce refusals");
    // The token is bound to the store's key, kept beside the store, the owner's alone.
    let key_file = dir.join("config/hookloop/mcp-oauth.json.dpop-key.pem");
    let pem = std::fs::read_to_string(&key_file).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let key_body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(key_body.len() > 40, "{pem}");
    let transcript = std::fs::read_to_string(dir.join("run.jsonl")).unwrap();
    assert!(
        transcript.contains("echoed: two"),
        "the record is of this run"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    for (what, text) in [
        ("transcript", transcript.as_str()),
        ("logs", &*stderr),
        ("output", &*stdout),
    ] {
        for line in pem.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!text.contains(line), "the private key is in the {what}");
        }
        assert!(
            !text.contains("dpop-e2e-token-"),
            "the token is in the {what}"
        );
        assert!(!text.contains(SECRET), "the secret is in the {what}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_that_does_not_take_dpop_gets_bearer_tokens_and_no_proof() {
    let dir = scratch("dpop", "bearer");
    let server = Server::start(false);
    let output = run(&dir, &server);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        *server.seen.calls.lock().unwrap(),
        ["one", "two"],
        "{stderr}"
    );
    assert_eq!(server.seen.dpop_headers.load(Ordering::SeqCst), 0);
    assert!(server.seen.bad_proofs.lock().unwrap().is_empty());
    assert!(
        !dir.join("config/hookloop/mcp-oauth.json.dpop-key.pem")
            .exists()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
