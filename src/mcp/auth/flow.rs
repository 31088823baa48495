//! One authorization: discovery (from the server's challenge), the client's identity
//! (pre-registered, client ID metadata document, or dynamic registration), the authorization
//! code request with PKCE S256 and the resource indicator, the browser step, and the code
//! exchange. rmcp does each step; this file puts them in order and owns the browser step; the
//! loopback redirect listener is `redirect`'s.

use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationMetadata,
    AuthorizationRequest, AuthorizationSession,
};
use tokio::net::TcpListener;
use tracing::instrument::WithSubscriber;

use super::redirect::{CALLBACK_PATH, Redirect, Unheard, url_query, wait_for_redirect};
use super::scrub::{self, Scrubber};
use super::{Authorize, OAuthClient, store::TokenStore};
use crate::mcp::visit;

/// How long a person has to finish the login in the browser.
const BROWSER_WAIT: Duration = Duration::from_secs(300);
/// How long a headless authorization may take, redirects included.
const HEADLESS_WAIT: Duration = Duration::from_secs(30);
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
    /// The authorization server named a URL a person must not be sent to, or an endpoint the
    /// login's secrets must not go to. Nothing was opened or sent.
    #[error("{0}")]
    Unsafe(String),
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
        // The code, the PKCE verifier and a confidential client's secret go to the token
        // endpoint: over https only, as the headless grants' credentials.
        visit::check_token_endpoint(self.url, &metadata.token_endpoint).map_err(|refused| {
            FlowError::Unsafe(format!(
                "the authorization server's token endpoint {} is refused: {refused}",
                shown(&metadata.token_endpoint)
            ))
        })?;
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
        let (client_id, client_secret): (String, Option<String>) =
            if let Some(id) = &self.client.client_id {
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
        let registered_secret = client_secret.clone();
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
        // The authorization endpoint is the authorization server's to name: only https (or
        // http to this machine) is shown to a person or opened, and what is is the parsed URL.
        let authorization_url = visit::check_visit(session.get_authorization_url())
            .map_err(|refused| {
                FlowError::Unsafe(format!(
                    "the authorization server's authorization page {} is not opened: {refused}",
                    shown(session.get_authorization_url())
                ))
            })?
            .to_string();
        let state = url_query(&authorization_url)
            .into_iter()
            .find(|(k, _)| k == "state")
            .map(|(_, v)| v)
            .ok_or_else(|| FlowError::Io("the authorization URL carries no state".into()))?;
        let redirect = match self.authorize {
            Authorize::Browser(show) => {
                show.show(self.server, &authorization_url);
                open_browser(&authorization_url, &Opener::from_env());
                wait_for_redirect(&listener, port, &state, BROWSER_WAIT).await?
            }
            Authorize::FollowRedirects => {
                follow_redirects(&listener, port, &state, &authorization_url).await?
            }
            Authorize::Never => {
                return Err(FlowError::Io("this host does not log in".into()));
            }
        };
        let mut secrets = Scrubber::default();
        if let Some(secret) = &self.client.client_secret {
            secrets.secret(secret);
        }
        if let Some(secret) = &registered_secret {
            secrets.secret(secret);
        }
        let outcome = exchange(&session, &redirect.url, &secrets).await;
        // The browser learns how the login ended only once it has: its page never says the
        // login is done before the tokens are in.
        redirect.answer(outcome.is_ok()).await;
        outcome?;
        Ok((session.auth_manager, metadata))
    }
}

/// The code exchange of the redirect `url` (which carries the login's state). The
/// authorization server's words in its failure are scrubbed of `secrets`.
async fn exchange(
    session: &AuthorizationSession,
    url: &str,
    secrets: &Scrubber,
) -> Result<(), FlowError> {
    let parsed = url_query(url);
    if let Some(error) = parsed.iter().find(|(k, _)| k == "error").map(|(_, v)| v) {
        let description = parsed
            .iter()
            .find(|(k, _)| k == "error_description")
            .map(|(_, v)| format!(": {v}"))
            .unwrap_or_default();
        // The authorization server's words go to a person's terminal and into messages.
        return Err(FlowError::Refused(scrub::quote(
            &format!("{error}{description}"),
            secrets,
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
        .await
        .map_err(|error| {
            // rmcp's message may quote the token endpoint's answer, which may quote the secret.
            let said = crate::text::without_url_secrets(&error.to_string()).into_owned();
            FlowError::Refused(scrub::quote(&said, secrets))
        })?;
    Ok(())
}

/// A URL the authorization server named, as an error shows it.
fn shown(url: &str) -> String {
    crate::text::one_line(
        &crate::text::for_terminal(&crate::text::without_url_secrets(url)),
        200,
    )
}

/// What opens a browser: the program `$BROWSER` names (run with the URL as its one argument,
/// no shell), else `open` on macOS, else `xdg-open` when there is a display; else nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Opener(Option<std::ffi::OsString>);

impl Opener {
    /// The opener this process's environment gives.
    fn from_env() -> Self {
        let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        Self(if let Some(browser) = set("BROWSER") {
            Some(browser)
        } else if cfg!(target_os = "macos") {
            Some("open".into())
        } else if set("DISPLAY").is_some() || set("WAYLAND_DISPLAY").is_some() {
            Some("xdg-open".into())
        } else {
            None
        })
    }
}

/// Opens a browser on `url`, which [`visit::check_visit`] passed.
fn open_browser(url: &str, opener: &Opener) {
    if let Some(opener) = &opener.0 {
        let spawned = std::process::Command::new(opener)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(error) = spawned {
            tracing::debug!(%error, opener = %opener.to_string_lossy(), "could not open a browser");
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
    let client = crate::net::tls::client_builder()
        .map_err(|e| FlowError::Io(e.to_string()))?
        .redirect(reqwest::redirect::Policy::limited(10))
        .timeout(HEADLESS_WAIT)
        .build()
        .map_err(|e| FlowError::Io(e.to_string()))?;
    let get = client.get(url).send();
    let wait = wait_for_redirect(listener, port, state, HEADLESS_WAIT);
    tokio::pin!(get);
    tokio::pin!(wait);
    tokio::select! {
        callback = &mut wait => Ok(callback?),
        answer = &mut get => match answer {
            // The redirect chain ended somewhere else; the listener may still be reached.
            Ok(response) => {
                let status = response.status();
                let last = shown(response.url().as_str());
                match tokio::time::timeout(Duration::from_secs(1), wait).await {
                    Ok(callback) => Ok(callback?),
                    Err(_) => Err(FlowError::Io(format!(
                        "the authorization page ended at {last} (HTTP {status}), not at the redirect"
                    ))),
                }
            }
            Err(error) => Err(FlowError::Io(format!(
                "the authorization page failed: {}",
                error.without_url()
            ))),
        },
    }
}

impl From<Unheard> for FlowError {
    fn from(unheard: Unheard) -> Self {
        match unheard {
            Unheard::TimedOut(wait) => Self::TimedOut(wait.as_secs()),
            Unheard::Failed(reason) => Self::Io(reason),
        }
    }
}
