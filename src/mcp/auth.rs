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
mod redirect;
mod scrub;
mod secret;
mod server;
mod store;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub(crate) use self::client::{HttpResult, OAuthHttp};
pub use self::flow::FlowError;
pub use self::grant::{
    ClientAuth, Enterprise, GrantError, GrantKind, GrantToken, OAuthGrant, Secret, SecretError,
    SecretSource,
};
pub use self::jose::{Algorithm, KeyError};
use self::server::new_manager;
pub(crate) use self::server::{AccessToken, ServerAuth};
pub use self::store::{ServerTokens, StoreError, TokenStore};

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
    /// Show the authorization URL to the person, open a browser on it (the program `BROWSER`
    /// names, else `open` on macOS, else `xdg-open` when there is a display), and wait for the
    /// redirect on a loopback listener (`hookloop mcp login`). Only an `https:` URL, or an
    /// `http:` one to this machine, is shown or opened; the authorization server's other
    /// choices fail the login, saying why.
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
