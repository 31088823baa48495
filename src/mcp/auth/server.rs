//! How one server authorizes: the state its [`OAuthHttp`] clients share (the login's manager,
//! the grant's token, the DPoP nonces) and the steps that fill it.

use std::sync::{Arc, Mutex};

use rmcp::transport::auth::{AuthError, AuthorizationManager, OAuthClientConfig};
use rmcp::transport::streamable_http_client::InsufficientScopeError;

use super::*;
use crate::text::lock;
/// How one server authorizes: the shared half of its [`OAuthHttp`] clients.
pub(crate) struct ServerAuth {
    pub(super) server: String,
    pub(super) url: String,
    pub(super) options: OAuthOptions,
    /// The configured grant, which replaces the login.
    pub(super) grant: Option<OAuthGrant>,
    /// The client of the grant's token requests.
    pub(super) grant_http: Option<reqwest::Client>,
    pub(super) state: tokio::sync::Mutex<State>,
    pub(super) problem: Mutex<Option<AuthProblem>>,
    /// The latest DPoP nonce of the grant's token endpoint.
    pub(super) token_nonce: Arc<dpop::Nonce>,
    /// The latest DPoP nonce of the server itself.
    pub(super) resource_nonce: dpop::Nonce,
}

#[derive(Default)]
pub(super) struct State {
    /// The authorized client, once a login ran or the stored one was restored.
    pub(super) manager: Option<AuthorizationManager>,
    /// Whether the store was looked at (once per connection).
    pub(super) restored: bool,
    /// Authorizations run so far.
    pub(super) authorizations: u32,
    /// The grant's token, once obtained or restored.
    pub(super) grant_token: Option<GrantToken>,
    /// The grant's authorization server, once discovered or restored.
    pub(super) grant_metadata: Option<rmcp::transport::auth::AuthorizationMetadata>,
    /// The key the login's token is bound to, when it is a DPoP token.
    pub(super) login_key: Option<Arc<dpop::DpopKey>>,
}

/// An access token and, for a DPoP-bound one, the key whose proofs go with it.
#[derive(Clone)]
pub(crate) struct AccessToken {
    pub(super) value: String,
    pub(super) key: Option<Arc<dpop::DpopKey>>,
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
            // Token requests follow no redirect: one elsewhere would carry the credentials.
            crate::net::tls::client_builder()
                .ok()?
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
    pub(super) async fn token(&self) -> Result<Option<AccessToken>, AuthError> {
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
        // Before anything is sent, or a DPoP key made: the server's discovery may point the
        // credentials anywhere.
        if let Err(refused) = grant.check_server(&self.url, metadata) {
            return Err(self.grant_failed(state, &refused));
        }
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
            Err(error) => return Err(self.grant_failed(state, &error)),
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

    /// Stops the server after its grant failed: the session does not retry a refused grant.
    fn grant_failed(&self, state: &mut State, error: &GrantError) -> AuthError {
        state.authorizations = MAX_AUTHORIZATIONS;
        self.failed(&error.to_string())
    }

    /// Records that the authorization failed for `reason`, and the error that says so; the URLs
    /// in it (rmcp's and reqwest's messages name them) keep no query or user info.
    fn failed(&self, reason: &str) -> AuthError {
        let reason = crate::text::without_url_secrets(reason).into_owned();
        self.note(AuthProblem::Failed(reason.clone()));
        AuthError::AuthorizationFailed(reason)
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
            Err(error) => return Err(self.failed(&error.to_string())),
        };
        self.run_grant(&mut state, &metadata).await
    }

    /// Refreshes after the server refused a token; whether a new one came.
    pub(super) async fn refresh(&self, refused: &str) -> Result<bool, AuthError> {
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
    pub(super) async fn authorize(
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
            Err(error) => Err(self.failed(&error.to_string())),
        }
    }

    /// The scopes granted so far joined with those a `403 insufficient_scope` asks for.
    pub(super) async fn step_up_scopes(
        &self,
        error: &InsufficientScopeError,
    ) -> (Vec<String>, String) {
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
pub(super) async fn new_manager(url: &str) -> Result<AuthorizationManager, AuthError> {
    // rmcp builds its own clients for discovery and tokens.
    crate::net::tls::install_provider();
    AuthorizationManager::new_allowing_private_addresses(url).await
}
