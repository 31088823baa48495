//! OAuth 2.1 for streamable-HTTP servers, on rmcp's `auth` support.
//!
//! rmcp does the protocol: protected-resource metadata (RFC 9728), authorization-server metadata
//! (RFC 8414 and OpenID discovery), dynamic client registration, PKCE S256, the resource
//! indicator (RFC 8707) on every token request, the authorization response's issuer (RFC 9207),
//! refresh. This module adds what a host needs around it:
//!
//! - [`TokenStore`]: one private file of tokens, keyed by server URL (`store`);
//! - the flow in order, with its browser step and loopback redirect listener (`flow`);
//! - `OAuthHttp`, the HTTP client of an OAuth-protected server's transport: it sends the
//!   stored token, refreshes it when it expires or is refused, and on a `401` or a `403
//!   insufficient_scope` either runs the flow again (a login, a step-up to the union of the
//!   granted and the challenged scopes; at most [`MAX_AUTHORIZATIONS`] per connection) or, in a
//!   session, fails the server with a message naming `hookloop mcp login <server>`;
//! - for a server whose configuration has an `oauth` block ([`OAuthGrant`]), the grant instead
//!   of a login: client credentials, JWT bearer, enterprise-managed (`grant`), its token kept
//!   in the store and obtained again before it expires;
//! - DPoP (RFC 9449) where the authorization server takes it: tokens bound to the store's key
//!   pair, a proof on every token and resource request, nonce retries (`dpop`, `client`).

mod client;
mod dpop;
mod dpop_login;
mod flow;
mod grant;
mod grant_config;
mod jose;
mod store;

use std::sync::{Arc, Mutex};

use rmcp::transport::auth::{AuthError, AuthorizationManager, OAuthClientConfig};
use rmcp::transport::streamable_http_client::InsufficientScopeError;
use serde::{Deserialize, Serialize};

pub(crate) use self::client::{HttpResult, OAuthHttp};
pub use self::flow::FlowError;
pub use self::grant::{
    ClientAuth, Enterprise, GrantError, GrantKind, GrantToken, OAuthGrant, Secret, SecretSource,
};
pub use self::jose::{Algorithm, KeyError};
pub use self::store::{ServerTokens, StoreError, TokenStore};
use crate::text::lock;

/// Authorizations (the first login and each scope step-up) one connection may run before it
/// gives up: a server that keeps refusing the scopes it asked for must not loop the client.
pub const MAX_AUTHORIZATIONS: u32 = 3;

/// What the host does when a server asks for an authorization it does not have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Authorize {
    /// Nothing: the server fails to start (or the call fails) with a message naming
    /// `hookloop mcp login <server>`. Sessions never wait on a person.
    #[default]
    Never,
    /// Show the authorization URL to the person, open a browser on it when there is a display,
    /// and wait for the redirect on a loopback listener (`hookloop mcp login`).
    Browser(ShowUrl),
    /// The browser step without a browser: follow the authorization page's redirects to the
    /// loopback listener. For authorization servers that approve without a person (the
    /// conformance suite, tests).
    FollowRedirects,
}

/// Shows a person the authorization URL of a login: `(server, url)`. The library prints
/// nothing itself; `hookloop mcp login` puts it on stderr.
#[derive(Clone)]
pub struct ShowUrl(Arc<ShowFn>);

/// What [`ShowUrl`] calls: `(server, url)`.
type ShowFn = dyn Fn(&str, &str) + Send + Sync;

impl ShowUrl {
    /// Shows the URL with `show`.
    pub fn new(show: impl Fn(&str, &str) + Send + Sync + 'static) -> Self {
        Self(Arc::new(show))
    }

    fn show(&self, server: &str, url: &str) {
        (self.0)(server, url)
    }
}

impl PartialEq for ShowUrl {
    /// The same function.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ShowUrl {}

impl std::fmt::Debug for ShowUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShowUrl")
    }
}

/// The client identity to use where no registration is stored.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OAuthClient {
    /// A client id registered with the authorization server beforehand; no registration then.
    pub client_id: Option<String>,
    /// Its secret, for a confidential client.
    pub client_secret: Option<String>,
    /// The HTTPS URL of this client's metadata document, used as the client id where the
    /// authorization server accepts such documents (`client_id_metadata_document_supported`).
    pub client_metadata_url: Option<String>,
}

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("client_metadata_url", &self.client_metadata_url)
            .finish()
    }
}

/// OAuth settings of a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthOptions {
    /// Where tokens are read and written. Default: the file at [`TokenStore::default_path`]
    /// (memory when neither `XDG_CONFIG_HOME` nor `HOME` is set).
    pub store: TokenStore,
    /// What to do when a server needs an authorization. Default: [`Authorize::Never`].
    pub authorize: Authorize,
    /// The client identity where none is stored.
    pub client: OAuthClient,
}

impl Default for OAuthOptions {
    fn default() -> Self {
        Self {
            store: TokenStore::default_path()
                .map(TokenStore::file)
                .unwrap_or_else(|_| TokenStore::memory()),
            authorize: Authorize::Never,
            client: OAuthClient::default(),
        }
    }
}

impl PartialEq for TokenStore {
    /// Two handles are equal when they share one store.
    fn eq(&self, other: &Self) -> bool {
        self.same(other)
    }
}

impl Eq for TokenStore {}

/// Why a server's authorization stopped it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthProblem {
    /// It asked for a login and none is stored.
    LoginNeeded,
    /// Its token expired and could not be refreshed (no refresh token, or the refresh was
    /// refused).
    LoginExpired,
    /// It asked for more scopes than the login granted.
    MoreScopes(String),
    /// The authorization flow failed.
    Failed(String),
}

impl AuthProblem {
    /// The problem in words, with what to do about it.
    pub fn describe(&self, server: &str) -> String {
        match self {
            Self::LoginNeeded => {
                format!("it needs a login: run `hookloop mcp login {server}`")
            }
            Self::LoginExpired => format!(
                "its login expired and could not be refreshed: run `hookloop mcp login {server}` again"
            ),
            Self::MoreScopes(scope) => format!(
                "it asks for more access ({scope}) than the login granted: run `hookloop mcp login {server}` again"
            ),
            Self::Failed(reason) => format!("its authorization failed: {reason}"),
        }
    }
}

/// How one server authorizes: the shared half of its [`OAuthHttp`] clients.
pub(crate) struct ServerAuth {
    server: String,
    url: String,
    options: OAuthOptions,
    /// The configured grant, which replaces the login.
    grant: Option<OAuthGrant>,
    /// The client of the grant's token requests.
    grant_http: Option<reqwest::Client>,
    state: tokio::sync::Mutex<State>,
    problem: Mutex<Option<AuthProblem>>,
    /// The latest DPoP nonce of the grant's token endpoint.
    token_nonce: Arc<dpop::Nonce>,
    /// The latest DPoP nonce of the server itself.
    resource_nonce: dpop::Nonce,
}

#[derive(Default)]
struct State {
    /// The authorized client, once a login ran or the stored one was restored.
    manager: Option<AuthorizationManager>,
    /// Whether the store was looked at (once per connection).
    restored: bool,
    /// Authorizations run so far.
    authorizations: u32,
    /// The grant's token, once obtained or restored.
    grant_token: Option<GrantToken>,
    /// The grant's authorization server, once discovered or restored.
    grant_metadata: Option<rmcp::transport::auth::AuthorizationMetadata>,
    /// The key the login's token is bound to, when it is a DPoP token.
    login_key: Option<Arc<dpop::DpopKey>>,
}

/// An access token and, for a DPoP-bound one, the key whose proofs go with it.
#[derive(Clone)]
pub(crate) struct AccessToken {
    value: String,
    key: Option<Arc<dpop::DpopKey>>,
}

impl PartialEq for AccessToken {
    /// The same token (a token is bound to one key).
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl ServerAuth {
    /// The authorization of the server `server` configured as `config`.
    pub(crate) fn new(
        server: &str,
        config: &crate::mcp::HttpConfig,
        options: OAuthOptions,
    ) -> Arc<Self> {
        let grant_http = config.oauth.as_ref().and_then(|_| {
            crate::tls::install_provider();
            // Token requests follow no redirect: one elsewhere would carry the credentials.
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .ok()
        });
        Arc::new(Self {
            server: server.to_owned(),
            url: config.url.clone(),
            options,
            grant: config.oauth.clone(),
            grant_http,
            state: tokio::sync::Mutex::new(State::default()),
            problem: Mutex::new(None),
            token_nonce: Arc::default(),
            resource_nonce: dpop::Nonce::default(),
        })
    }

    /// What stopped the server, if its authorization did.
    pub(crate) fn problem(&self) -> Option<AuthProblem> {
        lock(&self.problem).clone()
    }

    fn note(&self, problem: AuthProblem) {
        let mut slot = lock(&self.problem);
        // An expired login is the more useful thing to say than "needs a login", which
        // follows from it.
        if !(problem == AuthProblem::LoginNeeded && *slot == Some(AuthProblem::LoginExpired)) {
            *slot = Some(problem);
        }
    }

    /// The access token to send, refreshed first when it has expired; `None` when there is
    /// none (the request goes without, and the server's challenge decides).
    async fn token(&self) -> Result<Option<AccessToken>, AuthError> {
        if self.grant.is_some() {
            return self.grant_token().await;
        }
        let mut state = self.state.lock().await;
        if !state.restored {
            state.restored = true;
            // Every HTTP server's requests come here, OAuth or not: a store that cannot be
            // read must cost its logins, not the servers that need none.
            (state.manager, state.login_key) = match self.restore().await {
                Ok(Some((manager, key))) => (Some(manager), key),
                Ok(None) => (None, None),
                Err(error) => {
                    tracing::warn!(server = %self.server, %error, "the stored login cannot be used; going on without it");
                    (None, None)
                }
            };
        }
        let Some(manager) = &state.manager else {
            return Ok(None);
        };
        match manager.get_access_token().await {
            Ok(value) => Ok(Some(AccessToken {
                value,
                key: state.login_key.clone(),
            })),
            Err(AuthError::AuthorizationRequired) => {
                self.note(AuthProblem::LoginExpired);
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// The client of the stored login, without touching the network (the authorization
    /// server's metadata was stored with the tokens), and the key its token is bound to.
    async fn restore(
        &self,
    ) -> Result<Option<(AuthorizationManager, Option<Arc<dpop::DpopKey>>)>, AuthError> {
        let store_error = |e: StoreError| AuthError::CredentialStoreError(e.to_string());
        let Some(entry) = self.options.store.get(&self.url).map_err(store_error)? else {
            return Ok(None);
        };
        let (Some(credentials), Some(metadata)) = (&entry.credentials, entry.metadata.clone())
        else {
            return Ok(None);
        };
        let Some(response) = &credentials.token_response else {
            self.note(AuthProblem::LoginExpired);
            return Ok(None);
        };
        let key = self.key_for(oauth2::TokenResponse::token_type(response).as_ref())?;
        // A bound token's refreshes carry proofs of its key.
        let mut manager = match &key {
            Some(key) => dpop_login::manager(&self.url, metadata, Arc::clone(key)).await?,
            None => {
                let mut manager = new_manager(&self.url).await?;
                manager.set_metadata(metadata);
                manager
            }
        };
        let mut config = OAuthClientConfig::new(credentials.client_id.clone(), self.url.clone());
        if let Some(secret) = &entry.client_secret {
            config = config.with_client_secret(secret.clone());
        }
        manager.configure_client(config)?;
        manager.set_credential_store(self.options.store.credentials(&self.url, None));
        Ok(Some((manager, key)))
    }

    /// The store's DPoP key when a token of `token_type` is bound to it.
    fn key_for(&self, token_type: &str) -> Result<Option<Arc<dpop::DpopKey>>, AuthError> {
        if !dpop::is_dpop_type(token_type) {
            return Ok(None);
        }
        self.options
            .store
            .dpop_key()
            .map(Some)
            .map_err(|e| AuthError::InternalError(e.to_string()))
    }

    /// The key of the login just stored, when its token is bound to one.
    fn stored_login_key(&self) -> Result<Option<Arc<dpop::DpopKey>>, AuthError> {
        let entry = self
            .options
            .store
            .get(&self.url)
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?;
        let token_type = entry
            .as_ref()
            .and_then(|e| e.credentials.as_ref())
            .and_then(|c| c.token_response.as_ref())
            .map(|r| oauth2::TokenResponse::token_type(r).as_ref().to_owned());
        self.key_for(token_type.as_deref().unwrap_or_default())
    }

    /// The grant's token: the one held or stored while it has a minute left, else a new one
    /// when the authorization server is known; `None` lets the server's challenge start it.
    async fn grant_token(&self) -> Result<Option<AccessToken>, AuthError> {
        let mut state = self.state.lock().await;
        if !state.restored {
            state.restored = true;
            match self.options.store.get(&self.url) {
                Ok(Some(entry)) => {
                    state.grant_token = entry.grant_token;
                    state.grant_metadata = entry.metadata;
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(server = %self.server, %error, "the stored token cannot be used; going on without it");
                }
            }
        }
        let fresh = state.grant_token.as_ref().is_some_and(GrantToken::fresh);
        if !fresh {
            let Some(metadata) = state.grant_metadata.clone() else {
                return Ok(None);
            };
            self.run_grant(&mut state, &metadata).await?;
        }
        let Some(token) = &state.grant_token else {
            return Ok(None);
        };
        Ok(Some(AccessToken {
            value: token.access_token.clone(),
            key: self.key_for(&token.token_type)?,
        }))
    }

    /// Counts one more authorization of this server, or refuses it past [`MAX_AUTHORIZATIONS`]:
    /// a server that refuses every token it is given must not make the agent authorize forever.
    fn count_authorization(&self, state: &mut State) -> Result<(), AuthError> {
        if state.authorizations >= MAX_AUTHORIZATIONS {
            let reason =
                format!("the server still refuses after {MAX_AUTHORIZATIONS} authorizations");
            self.note(AuthProblem::Failed(reason.clone()));
            return Err(AuthError::AuthorizationFailed(reason));
        }
        state.authorizations += 1;
        Ok(())
    }

    /// Obtains a token with the grant from the authorization server of `metadata`, and keeps
    /// it. A refusal is final for this connection: the grant is not tried again and no other
    /// grant is tried.
    async fn run_grant(
        &self,
        state: &mut State,
        metadata: &rmcp::transport::auth::AuthorizationMetadata,
    ) -> Result<(), AuthError> {
        let (Some(grant), Some(http)) = (&self.grant, &self.grant_http) else {
            return Err(AuthError::InternalError("no grant is configured".into()));
        };
        self.count_authorization(state)?;
        let endpoint = grant::Endpoint {
            issuer: metadata
                .issuer
                .as_deref()
                .unwrap_or(&metadata.token_endpoint),
            token_endpoint: &metadata.token_endpoint,
            resource: &self.url,
        };
        // A token endpoint that takes DPoP gets proofs: its token is then bound to the key.
        let binding = if dpop::advertised(metadata) {
            let key = self
                .options
                .store
                .dpop_key()
                .map_err(|e| AuthError::InternalError(e.to_string()))?;
            Some(dpop::Binding {
                key,
                nonce: Arc::clone(&self.token_nonce),
            })
        } else {
            None
        };
        let token = match grant.obtain(http, &endpoint, binding.as_ref()).await {
            Ok(token) => token,
            Err(error) => {
                // Stops the server: the session does not retry a refused grant.
                state.authorizations = MAX_AUTHORIZATIONS;
                self.note(AuthProblem::Failed(error.to_string()));
                return Err(AuthError::AuthorizationFailed(error.to_string()));
            }
        };
        let stored = self.options.store.update(&self.url, |entry| {
            let mut entry = entry.unwrap_or_default();
            entry.grant_token = Some(token.clone());
            entry.metadata = Some(metadata.clone());
            Some(entry)
        });
        if let Err(error) = stored {
            tracing::warn!(server = %self.server, %error, "cannot keep the token in the store");
        }
        state.grant_token = Some(token);
        state.grant_metadata = Some(metadata.clone());
        Ok(())
    }

    /// Discovers the authorization server from the server's challenge and runs the grant.
    async fn authorize_with_grant(&self, challenge: &str) -> Result<(), AuthError> {
        let mut state = self.state.lock().await;
        if state.authorizations >= MAX_AUTHORIZATIONS {
            let reason = lock(&self.problem)
                .as_ref()
                .map(|p| p.describe(&self.server))
                .unwrap_or_else(|| {
                    format!("the server still refuses after {MAX_AUTHORIZATIONS} authorizations")
                });
            return Err(AuthError::AuthorizationFailed(reason));
        }
        let manager = new_manager(&self.url).await?;
        let metadata = match manager
            .resolve_metadata_from_challenge(Some(challenge))
            .await
        {
            Ok(resolution) => resolution.metadata,
            Err(error) => {
                self.note(AuthProblem::Failed(error.to_string()));
                return Err(error);
            }
        };
        self.run_grant(&mut state, &metadata).await
    }

    /// Refreshes after the server refused a token; whether a new one came.
    async fn refresh(&self, refused: &str) -> Result<bool, AuthError> {
        if self.grant.is_some() {
            // A grant has no refresh token: the challenge runs the grant again.
            return Ok(false);
        }
        let mut state = self.state.lock().await;
        let Some(manager) = &state.manager else {
            return Ok(false);
        };
        match manager.refresh_token().await {
            Ok(response) => {
                state.login_key =
                    self.key_for(oauth2::TokenResponse::token_type(&response).as_ref())?;
                Ok(store::rmcp_token(&response) != refused)
            }
            Err(AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)) => {
                self.note(AuthProblem::LoginExpired);
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// Runs the flow (a login, or a step-up to `scopes`) when the host may, else records why
    /// the server stops.
    async fn authorize(
        &self,
        challenge: &str,
        scopes: Option<Vec<String>>,
        problem: AuthProblem,
    ) -> Result<(), AuthError> {
        if self.grant.is_some() {
            return self.authorize_with_grant(challenge).await;
        }
        let mut state = self.state.lock().await;
        // A step-up's scopes are kept even when this host cannot log in: the next login (of
        // `hookloop mcp login`) asks for them, rather than for the ones the server refused.
        if let Some(scopes) = &scopes
            && let Err(error) = self.options.store.remember_scopes(&self.url, scopes)
        {
            tracing::warn!(server = %self.server, %error, "cannot keep the scopes the server asks for");
        }
        if matches!(self.options.authorize, Authorize::Never) {
            self.note(problem.clone());
            return Err(AuthError::AuthorizationFailed(
                problem.describe(&self.server),
            ));
        }
        self.count_authorization(&mut state)?;
        let flow = flow::Flow {
            url: &self.url,
            store: &self.options.store,
            authorize: &self.options.authorize,
            client: &self.options.client,
            challenge: Some(challenge),
            scopes,
            server: &self.server,
        };
        match flow.run().await {
            Ok((manager, metadata)) => {
                self.options
                    .store
                    .update(&self.url, |entry| {
                        let mut entry = entry.unwrap_or_default();
                        entry.metadata = Some(metadata);
                        Some(entry)
                    })
                    .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?;
                state.manager = Some(manager);
                state.login_key = self.stored_login_key()?;
                state.restored = true;
                Ok(())
            }
            Err(error) => {
                self.note(AuthProblem::Failed(error.to_string()));
                Err(AuthError::AuthorizationFailed(error.to_string()))
            }
        }
    }

    /// The scopes granted so far joined with those a `403 insufficient_scope` asks for.
    async fn step_up_scopes(&self, error: &InsufficientScopeError) -> (Vec<String>, String) {
        let required = error
            .get_required_scope()
            .map(str::to_owned)
            .unwrap_or_default();
        let state = self.state.lock().await;
        let mut scopes = match &state.manager {
            Some(manager) => manager.get_current_scopes().await,
            None => Vec::new(),
        };
        let required_scopes: Vec<String> = required.split_whitespace().map(str::to_owned).collect();
        store::union_into(&mut scopes, &required_scopes);
        (scopes, required)
    }
}

/// A fresh rmcp manager for `url`. Its metadata may name hosts at private addresses (an
/// authorization server inside a company network); loopback ones only when `url` is loopback.
async fn new_manager(url: &str) -> Result<AuthorizationManager, AuthError> {
    // rmcp builds its own clients for discovery and tokens.
    crate::tls::install_provider();
    AuthorizationManager::new_allowing_private_addresses(url).await
}

/// What `hookloop mcp list` says of a server's login.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoginState {
    /// No login is stored.
    None,
    /// A token is stored; `expires_in_secs` is what was left of it when read, if known.
    LoggedIn {
        /// Seconds until the access token expires, when known.
        expires_in_secs: Option<u64>,
        /// A refresh token is stored.
        refreshable: bool,
        /// The scopes granted.
        scopes: Vec<String>,
    },
    /// The login's token was dropped (its refresh was refused); log in again.
    Expired,
}

impl LoginState {
    /// The login stored for `url`.
    pub fn of(store: &TokenStore, url: &str) -> Result<Self, StoreError> {
        use oauth2::TokenResponse;
        let Some(entry) = store.get(url)? else {
            return Ok(Self::None);
        };
        let Some(credentials) = &entry.credentials else {
            return Ok(Self::None);
        };
        let Some(response) = &credentials.token_response else {
            return Ok(Self::Expired);
        };
        let expires_in_secs = response
            .expires_in()
            .zip(credentials.token_received_at)
            .map(|(lasts, received)| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                // Both numbers come from the store's file: any u64 must not overflow.
                received.saturating_add(lasts.as_secs()).saturating_sub(now)
            });
        Ok(Self::LoggedIn {
            expires_in_secs,
            refreshable: response.refresh_token().is_some(),
            scopes: credentials.granted_scopes.clone(),
        })
    }
}

impl std::fmt::Display for LoginState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("not logged in"),
            Self::Expired => f.write_str("login expired (log in again)"),
            Self::LoggedIn {
                expires_in_secs,
                refreshable,
                scopes,
            } => {
                f.write_str("logged in")?;
                if !scopes.is_empty() {
                    write!(f, " ({})", scopes.join(" "))?;
                }
                match (expires_in_secs, refreshable) {
                    (Some(0), true) => f.write_str(", token expired, refreshed on next use"),
                    (Some(0), false) => f.write_str(", token expired"),
                    (Some(secs), _) => write!(f, ", token valid for {secs} s"),
                    (None, _) => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_receipt_time_near_the_end_of_time_does_not_overflow() {
        let response: rmcp::transport::auth::OAuthTokenResponse = serde_json::from_value(
            serde_json::json!({"access_token": "t", "token_type": "Bearer", "expires_in": 60}),
        )
        .unwrap();
        let credentials = rmcp::transport::auth::StoredCredentials::new(
            "client".into(),
            Some(response),
            Vec::new(),
            Some(u64::MAX),
        );
        let store = TokenStore::memory();
        store
            .update("http://a/mcp", |_| {
                Some(ServerTokens {
                    credentials: Some(credentials),
                    ..ServerTokens::default()
                })
            })
            .unwrap();
        let state = LoginState::of(&store, "http://a/mcp").unwrap();
        assert!(
            matches!(state, LoginState::LoggedIn { expires_in_secs: Some(secs), .. } if secs > 0),
            "{state:?}"
        );
    }
}
