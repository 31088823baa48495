//! One authorization: discovery (from the server's challenge), the client's identity
//! (pre-registered, client ID metadata document, or dynamic registration), the authorization
//! code request with PKCE S256 and the resource indicator, the browser step, and the code
//! exchange. rmcp does each step; this file puts them in order and owns the browser step and
//! the loopback redirect listener.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationMetadata,
    AuthorizationRequest, AuthorizationSession,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};
use tracing::instrument::WithSubscriber;

use super::{Authorize, OAuthClient, store::TokenStore};

// The redirect listener's caps. Any local process (or a web page that finds the port) can
// reach the listener, so each of its inputs has a bound, and none of them can end or delay the
// login: only a request with this login's `state` is answered as the redirect. The README's
// "Resource limits" table lists them with the test behind each.

/// How long a person has to finish the login in the browser.
const BROWSER_WAIT: Duration = Duration::from_secs(300);
/// How long a headless authorization may take, redirects included.
const HEADLESS_WAIT: Duration = Duration::from_secs(30);
/// The path of the redirect URI; nothing else ends a login.
const CALLBACK_PATH: &str = "/callback";
/// The longest request head the redirect listener reads.
const MAX_HEAD: usize = 16 * 1024;
/// How long one connection to the redirect listener has to send its request head. A browser
/// sends it at once; an idle connection is dropped after this.
const HEAD_WAIT: Duration = Duration::from_secs(2);
/// Connections the redirect listener serves at once; a new one past it closes the oldest.
const MAX_CONNECTIONS: usize = 32;
/// The longest refusal text of an authorization server kept in the error, in characters.
const MAX_REFUSAL_CHARS: usize = 300;
/// The name hookloop registers under.
const CLIENT_NAME: &str = "hookloop";

/// Why an authorization did not end with tokens.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlowError {
    /// A step of the OAuth exchange failed (discovery, registration, token request...).
    #[error("{0}")]
    OAuth(#[from] AuthError),
    /// The authorization server sent the browser back with an error.
    #[error("the authorization server refused: {0}")]
    Refused(String),
    /// The redirect did not come back in time.
    #[error("no authorization came back within {0} s")]
    TimedOut(u64),
    /// The loopback listener or the headless browser step failed.
    #[error("{0}")]
    Io(String),
}

/// What one authorization needs to know.
pub(super) struct Flow<'a> {
    pub url: &'a str,
    pub store: &'a TokenStore,
    pub authorize: &'a Authorize,
    pub client: &'a OAuthClient,
    /// The `WWW-Authenticate` header of the answer that asked for it, if any.
    pub challenge: Option<&'a str>,
    /// The scopes to ask for; `None` lets discovery choose (challenge, then the resource's
    /// `scopes_supported`, else none).
    pub scopes: Option<Vec<String>>,
    /// Names the server in what a person reads.
    pub server: &'a str,
}

impl Flow<'_> {
    /// Runs the flow; on success the tokens are in the store, and the returned manager holds
    /// the client that got them (for refreshes), with the authorization server's metadata.
    pub async fn run(self) -> Result<(AuthorizationManager, AuthorizationMetadata), FlowError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| FlowError::Io(format!("cannot listen on 127.0.0.1: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| FlowError::Io(e.to_string()))?
            .port();
        let redirect_uri = format!("http://127.0.0.1:{port}{CALLBACK_PATH}");

        let mut manager = super::new_manager(self.url).await?;
        let resolution = manager
            .resolve_metadata_from_challenge(self.challenge)
            .await?;
        let supports_cimd = resolution
            .metadata
            .additional_fields
            .get("client_id_metadata_document_supported")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        let metadata = resolution.metadata;
        manager.set_metadata(metadata.clone());
        let mut scopes = match self.scopes {
            Some(scopes) => scopes,
            None => manager.select_initial_scopes(&[]).await,
        };
        // What earlier logins and step-ups asked for is asked again: a login that drops a
        // scope a step-up added would be refused again on first use.
        let store_error = |e: super::StoreError| FlowError::Io(e.to_string());
        if let Some(entry) = self.store.get(self.url).map_err(store_error)? {
            super::store::union_into(&mut scopes, &entry.requested_scopes);
        }
        self.store
            .remember_scopes(self.url, &scopes)
            .map_err(store_error)?;

        // An authorization server that takes DPoP gets proofs on the token requests, from a
        // manager whose client adds them; discovery (above) stays with rmcp's own client and
        // its address policy.
        if super::dpop::advertised(&metadata) {
            let key = self
                .store
                .dpop_key()
                .map_err(|e| FlowError::Io(e.to_string()))?;
            manager = super::dpop_login::manager(self.url, metadata.clone(), key).await?;
        }

        // The client's identity, in the order the MCP authorization spec gives: pre-registered,
        // then a client ID metadata document where the server takes one, then registration.
        // Registration is done here rather than inside rmcp's session so that the secret it
        // may return is kept for refreshes in later processes.
        let (client_id, client_secret) = if let Some(id) = &self.client.client_id {
            (id.clone(), self.client.client_secret.clone())
        } else if let (true, Some(url)) = (supports_cimd, &self.client.client_metadata_url) {
            (url.clone(), None)
        } else {
            let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
            let registered = manager
                .register_client(CLIENT_NAME, &redirect_uri, &scope_refs)
                .await?;
            (registered.client_id, registered.client_secret)
        };
        manager.set_credential_store(self.store.credentials(self.url, client_secret.clone()));

        let mut request = AuthorizationRequest::new(&redirect_uri)
            .with_initial_scope_selection()
            .with_scopes(scopes)
            .with_preregistered_client(client_id);
        if let Some(secret) = client_secret {
            request = request.with_client_secret(secret);
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| e)?;
        let authorization_url = session.get_authorization_url().to_owned();
        let state = url_query(&authorization_url)
            .into_iter()
            .find(|(k, _)| k == "state")
            .map(|(_, v)| v)
            .ok_or_else(|| FlowError::Io("the authorization URL carries no state".into()))?;
        let redirect = match self.authorize {
            Authorize::Browser(show) => {
                show.show(self.server, &authorization_url);
                open_browser(&authorization_url);
                wait_for_redirect(&listener, port, &state, BROWSER_WAIT).await?
            }
            Authorize::FollowRedirects => {
                follow_redirects(&listener, port, &state, &authorization_url).await?
            }
            Authorize::Never => {
                return Err(FlowError::Io("this host does not log in".into()));
            }
        };
        let outcome = exchange(&session, &redirect.url).await;
        // The browser learns how the login ended only once it has: its page never says the
        // login is done before the tokens are in.
        redirect.answer(outcome.is_ok()).await;
        outcome?;
        Ok((session.auth_manager, metadata))
    }
}

/// The code exchange of the redirect `url` (which carries the login's state).
async fn exchange(session: &AuthorizationSession, url: &str) -> Result<(), FlowError> {
    let parsed = url_query(url);
    if let Some(error) = parsed.iter().find(|(k, _)| k == "error").map(|(_, v)| v) {
        let description = parsed
            .iter()
            .find(|(k, _)| k == "error_description")
            .map(|(_, v)| format!(": {v}"))
            .unwrap_or_default();
        // The authorization server's words go to a person's terminal and into messages.
        let said = crate::text::for_terminal(&format!("{error}{description}")).into_owned();
        return Err(FlowError::Refused(crate::text::one_line(
            &said,
            MAX_REFUSAL_CHARS,
        )));
    }
    let callback = AuthorizationCallback::from_redirect_url(url)?;
    // rmcp logs the authorization code at `debug` while it exchanges it: the exchange runs
    // with no subscriber, so that no filter, ours or an embedder's, can let a secret of the
    // login into a log. Its failure comes back as the error.
    session
        .handle_callback_with_issuer(
            &callback.code,
            &callback.csrf_token,
            callback.issuer.as_deref(),
        )
        .with_subscriber(tracing::subscriber::NoSubscriber::default())
        .await?;
    Ok(())
}

/// Opens a browser on the URL when there is a display to show it on.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        Some("open")
    } else if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
    {
        Some("xdg-open")
    } else {
        None
    };
    if let Some(opener) = opener {
        let spawned = std::process::Command::new(opener)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(error) = spawned {
            tracing::debug!(%error, opener, "could not open a browser");
        }
    }
}

/// The headless browser step: GETs the authorization URL and follows its redirects, which end
/// at the loopback listener as a browser's would.
async fn follow_redirects(
    listener: &TcpListener,
    port: u16,
    state: &str,
    url: &str,
) -> Result<Redirect, FlowError> {
    crate::tls::install_provider();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::limited(10))
        .timeout(HEADLESS_WAIT)
        .build()
        .map_err(|e| FlowError::Io(e.to_string()))?;
    let get = client.get(url).send();
    let wait = wait_for_redirect(listener, port, state, HEADLESS_WAIT);
    tokio::pin!(get);
    tokio::pin!(wait);
    tokio::select! {
        callback = &mut wait => callback,
        answer = &mut get => match answer {
            // The redirect chain ended somewhere else; the listener may still be reached.
            Ok(response) => {
                let status = response.status();
                let last = crate::text::for_terminal(response.url().as_str()).into_owned();
                tokio::time::timeout(Duration::from_secs(1), wait)
                    .await
                    .unwrap_or_else(|_| {
                        Err(FlowError::Io(format!(
                            "the authorization page ended at {last} (HTTP {status}), not at the redirect"
                        )))
                    })
            }
            Err(error) => Err(FlowError::Io(format!("the authorization page failed: {error}"))),
        },
    }
}

/// The redirect that brought the login's state: its URL, and the browser's connection, held
/// open until the flow knows how the login ended.
struct Redirect {
    url: String,
    browser: TcpStream,
}

impl Redirect {
    /// Tells the browser how the login ended, in words of our own (nothing of the request is
    /// echoed into the page).
    async fn answer(mut self, done: bool) {
        let (status, words) = if done {
            ("200 OK", "The login is done; you can close this window.")
        } else {
            (
                "400 Bad Request",
                "The login did not complete; the terminal says why. You can close this window.",
            )
        };
        let body = format!("<!doctype html><title>hookloop</title><p>{words}</p>");
        respond(&mut self.browser, status, &body).await;
    }
}

/// Serves the loopback listener until a request brings the redirect of this login: the exact
/// path `/callback` with `state`. Connections are served at once, each given [`HEAD_WAIT`] for
/// its request head and at most [`MAX_CONNECTIONS`] at a time (a new one closes the oldest), so
/// that idle or slow ones (any local process can connect) cannot delay the browser's. A request to another path gets a
/// 404; one without this login's state, an error response included, a 400, and the listener
/// keeps waiting: nothing but the authorization server's answer to this login ends it.
async fn wait_for_redirect(
    listener: &TcpListener,
    port: u16,
    state: &str,
    wait: Duration,
) -> Result<Redirect, FlowError> {
    let state: Arc<str> = Arc::from(state);
    let accept = async {
        let mut serving = JoinSet::new();
        // Oldest first; finished ones are pruned as they are met.
        let mut order: VecDeque<AbortHandle> = VecDeque::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, _) = accepted.map_err(|e| {
                        FlowError::Io(format!("the redirect listener failed: {e}"))
                    })?;
                    order.retain(|task| !task.is_finished());
                    // At the cap the oldest connection is dropped, not the new one: a browser
                    // sends its request as soon as it connects, so holding connections open
                    // cannot keep its redirect out.
                    if order.len() >= MAX_CONNECTIONS
                        && let Some(oldest) = order.pop_front()
                    {
                        oldest.abort();
                    }
                    order.push_back(serving.spawn(screen(stream, port, state.clone())));
                }
                Some(served) = serving.join_next() => {
                    if let Ok(Some(redirect)) = served {
                        return Ok(redirect);
                    }
                }
            }
        }
    };
    tokio::time::timeout(wait, accept)
        .await
        .unwrap_or(Err(FlowError::TimedOut(wait.as_secs())))
}

/// One connection to the redirect listener: the redirect of this login, or `None` after
/// answering anything else.
async fn screen(mut stream: TcpStream, port: u16, state: Arc<str>) -> Option<Redirect> {
    let Some(target) = read_request_target(&mut stream).await else {
        respond(&mut stream, "400 Bad Request", "").await;
        return None;
    };
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if path != CALLBACK_PATH {
        respond(&mut stream, "404 Not Found", "").await;
        return None;
    }
    let url = format!("http://127.0.0.1:{port}{target}");
    let theirs = url_query(&url)
        .into_iter()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v);
    if theirs.as_deref() != Some(&*state) {
        tracing::debug!("the redirect listener refused a request without the login's state");
        respond(
            &mut stream,
            "400 Bad Request",
            "<!doctype html><title>hookloop</title><p>This is not the answer to the login hookloop waits for.</p>",
        )
        .await;
        return None;
    }
    Some(Redirect {
        url,
        browser: stream,
    })
}

/// Writes a whole answer and closes; a peer that does not read loses it after [`HEAD_WAIT`].
async fn respond(stream: &mut TcpStream, status: &str, body: &str) {
    let content_type = if body.is_empty() {
        ""
    } else {
        "content-type: text/html; charset=utf-8\r\n"
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\n{content_type}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    };
    let _ = tokio::time::timeout(HEAD_WAIT, write).await;
}

/// The target of a `GET` request, from its head (at most [`MAX_HEAD`] bytes, read within
/// [`HEAD_WAIT`]).
async fn read_request_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = async {
        while head.len() < MAX_HEAD {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            // Only the new bytes (and the three before them) can complete the blank line: a
            // head sent a byte at a time costs linear work.
            let from = head.len().saturating_sub(3);
            head.extend_from_slice(&buf[..n]);
            if head[from..].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        Some(())
    };
    tokio::time::timeout(HEAD_WAIT, read).await.ok()??;
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.split(' ');
    match (parts.next(), parts.next()) {
        (Some("GET"), Some(target)) if target.starts_with('/') => Some(target.to_owned()),
        _ => None,
    }
}

/// The query pairs of a URL, decoded; empty when it does not parse.
fn url_query(url: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(url)
        .map(|u| u.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A raw GET of `target` from a local process; the status line of the answer.
    fn get(port: u16, target: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(stream, "GET {target} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn the_listener_ignores_other_paths_and_returns_the_callback() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            assert!(get(port, "/favicon.ico").contains("404"));
            get(port, "/callback?code=c&state=s")
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            redirect.url,
            format!("http://127.0.0.1:{port}/callback?code=c&state=s")
        );
        redirect.answer(true).await;
        assert!(client.await.unwrap().contains("200"));
    }

    #[tokio::test]
    async fn a_request_without_the_logins_state_or_path_is_refused_and_the_wait_goes_on() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            let refused = [
                // An error response of another (or no) login: it used to end this one.
                get(
                    port,
                    "/callback?error=access_denied&error_description=%1b%5d52%3bc%3bAA%07",
                ),
                get(port, "/callback?error=access_denied&state=wrong"),
                get(port, "/callback?code=bogus&state=wrong"),
                get(port, "/callback?code=bogus"),
            ];
            // A path that only starts like the callback's, with the right state.
            let elsewhere = [
                get(port, "/callbackx?code=c&state=s"),
                get(port, "/callback/x?code=c&state=s"),
            ];
            let real = get(port, "/callback?code=c&state=s");
            (refused, elsewhere, real)
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(redirect.url.ends_with("/callback?code=c&state=s"));
        redirect.answer(true).await;
        let (refused, elsewhere, real) = client.await.unwrap();
        for status in refused {
            assert!(status.contains("400"), "{status}");
        }
        for status in elsewhere {
            assert!(status.contains("404"), "{status}");
        }
        assert!(real.contains("200"), "{real}");
    }

    #[tokio::test]
    async fn idle_connections_do_not_delay_the_redirect() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Fewer than the cap: every one is still waiting for its head when the browser comes.
        let idle: Vec<_> = (0..MAX_CONNECTIONS - 1)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let started = std::time::Instant::now();
        let client = tokio::task::spawn_blocking(move || get(port, "/callback?code=c&state=s"));
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(60))
            .await
            .unwrap();
        // Served one at a time, the first idle connection alone held it for its head wait.
        assert!(started.elapsed() < HEAD_WAIT, "{:?}", started.elapsed());
        redirect.answer(true).await;
        assert!(client.await.unwrap().contains("200"));
        drop(idle);
    }

    #[tokio::test]
    async fn connections_past_the_cap_close_the_oldest_not_the_browsers() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            let idle: Vec<_> = (0..3 * MAX_CONNECTIONS)
                .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
                .collect();
            let status = get(port, "/callback?code=c&state=s");
            drop(idle);
            status
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(30))
            .await
            .unwrap();
        redirect.answer(true).await;
        assert!(client.await.unwrap().contains("200"));
    }

    #[tokio::test]
    async fn the_page_says_the_login_is_done_only_when_it_is() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(
                stream,
                "GET /callback?error=denied&state=s HTTP/1.1\r\n\r\n"
            )
            .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(5))
            .await
            .unwrap();
        redirect.answer(false).await;
        let page = client.await.unwrap();
        assert!(page.starts_with("HTTP/1.1 400"), "{page}");
        assert!(!page.contains("done"), "{page}");
    }

    #[tokio::test]
    async fn a_byte_at_a_time_head_is_read_within_its_cap() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.set_nodelay(true).unwrap();
            for byte in b"GET /callback?code=c&state=s HTTP/1.1\r\n\r\n" {
                stream.write_all(&[*byte]).unwrap();
            }
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(5))
            .await
            .unwrap();
        redirect.answer(true).await;
        assert!(client.await.unwrap().starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn a_redirect_that_never_comes_times_out() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let error = wait_for_redirect(&listener, port, "s", Duration::from_millis(50))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(error, FlowError::TimedOut(_)), "{error}");
    }
}
