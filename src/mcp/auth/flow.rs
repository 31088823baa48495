//! One authorization: discovery (from the server's challenge), the client's identity
//! (pre-registered, client ID metadata document, or dynamic registration), the authorization
//! code request with PKCE S256 and the resource indicator, the browser step, and the code
//! exchange. rmcp does each step; this file puts them in order and owns the browser step and
//! the loopback redirect listener.

use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationMetadata,
    AuthorizationRequest, AuthorizationSession,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{Authorize, OAuthClient, store::TokenStore};

/// How long a person has to finish the login in the browser.
const BROWSER_WAIT: Duration = Duration::from_secs(300);
/// How long a headless authorization may take, redirects included.
const HEADLESS_WAIT: Duration = Duration::from_secs(30);
/// The longest request head the redirect listener reads.
const MAX_HEAD: usize = 16 * 1024;
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
        let redirect_uri = format!("http://127.0.0.1:{port}/callback");

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
        let callback = match self.authorize {
            Authorize::Browser(show) => {
                show.show(self.server, session.get_authorization_url());
                open_browser(session.get_authorization_url());
                wait_for_redirect(&listener, port, BROWSER_WAIT).await?
            }
            Authorize::FollowRedirects => {
                follow_redirects(&listener, port, session.get_authorization_url()).await?
            }
            Authorize::Never => {
                return Err(FlowError::Io("this host does not log in".into()));
            }
        };
        let parsed = url_query(&callback);
        if let Some(error) = parsed.iter().find(|(k, _)| k == "error").map(|(_, v)| v) {
            let description = parsed
                .iter()
                .find(|(k, _)| k == "error_description")
                .map(|(_, v)| format!(": {v}"))
                .unwrap_or_default();
            return Err(FlowError::Refused(format!("{error}{description}")));
        }
        let callback = AuthorizationCallback::from_redirect_url(&callback)?;
        session
            .handle_callback_with_issuer(
                &callback.code,
                &callback.csrf_token,
                callback.issuer.as_deref(),
            )
            .await?;
        Ok((session.auth_manager, metadata))
    }
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
    url: &str,
) -> Result<String, FlowError> {
    crate::tls::install_provider();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::limited(10))
        .timeout(HEADLESS_WAIT)
        .build()
        .map_err(|e| FlowError::Io(e.to_string()))?;
    let get = client.get(url).send();
    let wait = wait_for_redirect(listener, port, HEADLESS_WAIT);
    tokio::pin!(get);
    tokio::pin!(wait);
    tokio::select! {
        callback = &mut wait => callback,
        answer = &mut get => match answer {
            // The redirect chain ended somewhere else; the listener may still be reached.
            Ok(response) => {
                let status = response.status();
                let last = response.url().to_string();
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

/// Accepts connections on the loopback listener until one brings `/callback`, answers it with
/// a page the person can close, and returns the full redirect URL.
async fn wait_for_redirect(
    listener: &TcpListener,
    port: u16,
    wait: Duration,
) -> Result<String, FlowError> {
    let accept = async {
        loop {
            let (mut stream, _) = listener
                .accept()
                .await
                .map_err(|e| FlowError::Io(format!("the redirect listener failed: {e}")))?;
            let Some(target) = read_request_target(&mut stream).await else {
                continue;
            };
            if !target.starts_with("/callback") {
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await;
                continue;
            }
            let body = "<!doctype html><title>hookloop</title><p>The login is done; you can close this window.</p>";
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
            return Ok(format!("http://127.0.0.1:{port}{target}"));
        }
    };
    tokio::time::timeout(wait, accept)
        .await
        .unwrap_or(Err(FlowError::TimedOut(wait.as_secs())))
}

/// The target of a `GET` request, from its head (bounded, and only what is read within 10 s).
async fn read_request_target(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Some(())
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .ok()??;
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
    use super::*;

    #[tokio::test]
    async fn the_listener_ignores_other_paths_and_returns_the_callback() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::spawn(async move {
            crate::tls::install_provider();
            let http = reqwest::Client::new();
            let favicon = http
                .get(format!("http://127.0.0.1:{port}/favicon.ico"))
                .send()
                .await
                .unwrap();
            assert_eq!(favicon.status(), 404);
            let page = http
                .get(format!("http://127.0.0.1:{port}/callback?code=c&state=s"))
                .send()
                .await
                .unwrap();
            assert_eq!(page.status(), 200);
        });
        let url = wait_for_redirect(&listener, port, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            url,
            format!("http://127.0.0.1:{port}/callback?code=c&state=s")
        );
        client.await.unwrap();
    }

    #[tokio::test]
    async fn a_redirect_that_never_comes_times_out() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let error = wait_for_redirect(&listener, port, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(matches!(error, FlowError::TimedOut(_)), "{error}");
    }
}
