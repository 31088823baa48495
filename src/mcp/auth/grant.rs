//! Authorization without a person: the grants a server's `oauth` block configures.
//!
//! - the client-credentials grant (RFC 6749 §4.4) with `client_secret_basic`,
//!   `client_secret_post` or `private_key_jwt` (an RFC 7523 client assertion);
//! - the JWT-bearer grant (RFC 7523 §2.1) for workload identity federation: the workload's JWT
//!   comes from an environment variable, a file the platform keeps fresh, or a command;
//! - enterprise-managed authorization: the enterprise identity provider exchanges an ID token
//!   for an identity assertion (RFC 8693, an ID-JAG), which the server's authorization server
//!   takes as a JWT-bearer grant. rmcp's `enterprise` module does both exchanges.
//!
//! Secrets are read when a token is needed, from where the configuration says, never from the
//! configuration itself; they appear in no `Debug` output and no error message (a server's
//! error text that quotes one is scrubbed).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::dpop::{self, Binding};
use super::jose::{self, Algorithm, Signer};
use super::scrub::{self, Scrubber, form_encode};
use super::secret::MAX_SECRET_BYTES;
pub use super::secret::{Secret, SecretError, SecretSource};
use crate::mcp::visit;
use crate::net::body::{Unread, read_capped};

/// How long one token request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const CLIENT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How the client authenticates at a token endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// A public client: its id in the body, nothing else.
    #[default]
    None,
    /// `client_secret_basic`: id and secret in HTTP Basic.
    SecretBasic(SecretSource),
    /// `client_secret_post`: id and secret in the body.
    SecretPost(SecretSource),
    /// `private_key_jwt`: an RFC 7523 assertion signed with the key (PEM, PKCS#8).
    PrivateKeyJwt {
        /// The private key's source.
        key: SecretSource,
        /// The algorithm registered for the client.
        algorithm: Algorithm,
    },
}

/// A grant that needs no person, configured per server (the `oauth` block of `.mcp.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthGrant {
    /// Which grant.
    pub kind: GrantKind,
    /// The client id registered with the server's authorization server.
    pub client_id: String,
    /// How the client authenticates at the server's authorization server.
    pub auth: ClientAuth,
    /// The scopes to ask for, space-separated; none asked when unset.
    pub scope: Option<String>,
    /// The issuer identifier of the only authorization server the grant's credentials go to
    /// (`issuer` in the `oauth` block). Discovery that names another is refused before anything
    /// is sent; the metadata of this one is fetched from its own address, so it also fixes
    /// the token endpoint. Unset, the server's discovery decides.
    pub issuer: Option<String>,
}

/// The grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantKind {
    /// The client-credentials grant.
    ClientCredentials,
    /// The JWT-bearer grant with the workload's JWT.
    JwtBearer {
        /// Where the workload's JWT comes from.
        assertion: SecretSource,
    },
    /// Enterprise-managed authorization.
    Enterprise(Box<Enterprise>),
}

/// The enterprise identity provider of [`GrantKind::Enterprise`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enterprise {
    /// Its issuer identifier.
    pub idp_issuer: String,
    /// Its token endpoint.
    pub idp_token_endpoint: String,
    /// This client's id there.
    pub idp_client_id: String,
    /// How this client authenticates there.
    pub idp_auth: ClientAuth,
    /// Where the user's or workload's ID token comes from.
    pub id_token: SecretSource,
}

/// Why a grant got no token. Never carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// A secret could not be read.
    #[error("{0}")]
    Secret(String),
    /// The authorization server discovery named is not one the credentials may go to: its
    /// token endpoint is not `https`, or it is not the configured issuer. Nothing was sent.
    #[error("{0}; no credentials were sent")]
    Untrusted(String),
    /// The private key could not sign.
    #[error(transparent)]
    Key(#[from] jose::KeyError),
    /// The token request failed or was refused.
    #[error("the token request to {endpoint} failed: {reason}")]
    Token {
        /// The token endpoint asked.
        endpoint: String,
        /// Why it failed, with any secret it quoted replaced.
        reason: String,
    },
    /// The enterprise exchange failed.
    #[error("the enterprise token exchange failed: {0}")]
    Enterprise(String),
}

impl From<SecretError> for GrantError {
    fn from(error: SecretError) -> Self {
        Self::Secret(error.to_string())
    }
}

/// An access token a grant obtained, as the store keeps it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantToken {
    /// The token.
    pub access_token: String,
    /// `Bearer` or `DPoP`.
    pub token_type: String,
    /// When it expires (seconds since the epoch), if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// When to obtain the next one: a minute before it expires, or a quarter of its lifetime
    /// for a token that lasts less than four minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<u64>,
    /// The scopes granted, if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl std::fmt::Debug for GrantToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantToken")
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .field("renew_at", &self.renew_at)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl GrantToken {
    /// Whether it is still to be used (before its renewal time).
    pub fn fresh(&self) -> bool {
        self.renew_at
            .or(self.expires_at)
            .is_none_or(|at| jose::now_secs() < at)
    }

    /// The expiry and renewal times of a token obtained `now` that lasts `lasts` seconds.
    /// `lasts` is the authorization server's number: any `u64` saturates, never wraps.
    fn renewal(now: u64, lasts: Option<u64>) -> (Option<u64>, Option<u64>) {
        match lasts {
            Some(lasts) => {
                let expires_at = now.saturating_add(lasts);
                let margin = (lasts / 4).min(GRANT_MARGIN_SECS);
                (Some(expires_at), Some(expires_at.saturating_sub(margin)))
            }
            None => (None, None),
        }
    }
}

/// A token is renewed this long before it expires, at most.
const GRANT_MARGIN_SECS: u64 = 60;

/// The authorization server a grant talks to, from discovery.
pub(crate) struct Endpoint<'a> {
    /// Its issuer identifier (the audience of client assertions).
    pub issuer: &'a str,
    pub token_endpoint: &'a str,
    /// The resource indicator of the MCP server (RFC 8707).
    pub resource: &'a str,
}

/// A form body being built, with the secrets it holds in every form they are sent in (to
/// scrub from what the server says back).
#[derive(Default)]
struct Form {
    pairs: Vec<(&'static str, String)>,
    secrets: Scrubber,
    basic: Option<String>,
}

impl OAuthGrant {
    /// Whether the grant's credentials may go to the authorization server of `metadata`, for
    /// the server at `resource`: its token endpoint is `https` (plain `http` only loopback to
    /// loopback), and it is the configured [`issuer`](Self::issuer), if one is. rmcp checks
    /// that discovered metadata names the issuer whose address it was fetched from, so a
    /// matching issuer is the pinned server's own metadata, token endpoint included.
    pub(crate) fn check_server(
        &self,
        resource: &str,
        metadata: &rmcp::transport::auth::AuthorizationMetadata,
    ) -> Result<(), GrantError> {
        let shown = |url: &str| {
            crate::text::for_terminal(&crate::text::without_url_secrets(url)).into_owned()
        };
        if let Some(pinned) = &self.issuer {
            let named = metadata.issuer.as_deref();
            if !named.is_some_and(|named| same_issuer(named, pinned)) {
                let named = named.map_or_else(|| "no issuer".to_owned(), shown);
                return Err(GrantError::Untrusted(format!(
                    "the server's authorization server is {named}, not the configured issuer {}",
                    shown(pinned)
                )));
            }
        }
        check_token_endpoint(resource, &metadata.token_endpoint)
    }

    /// Obtains a token from `endpoint`.
    /// With `dpop`, the request carries a proof of its key (and retries once with the nonce
    /// of a `use_dpop_nonce` refusal).
    pub(crate) async fn obtain(
        &self,
        http: &reqwest::Client,
        endpoint: &Endpoint<'_>,
        dpop: Option<&Binding>,
    ) -> Result<GrantToken, GrantError> {
        let mut form = Form::default();
        match &self.kind {
            GrantKind::ClientCredentials => {
                form.pairs.push(("grant_type", "client_credentials".into()));
            }
            GrantKind::JwtBearer { assertion } => {
                let assertion = assertion.read().await?;
                form.pairs.push(("grant_type", JWT_BEARER.into()));
                form.secrets.secret(&assertion.0);
                form.pairs.push(("assertion", assertion.0));
            }
            GrantKind::Enterprise(enterprise) => {
                return self.enterprise(enterprise, endpoint).await;
            }
        }
        if let Some(scope) = &self.scope {
            form.pairs.push(("scope", scope.clone()));
        }
        form.pairs.push(("resource", endpoint.resource.to_owned()));
        authenticate(&mut form, &self.client_id, &self.auth, endpoint.issuer).await?;
        post(http, endpoint.token_endpoint, form, dpop).await
    }

    /// Both exchanges of enterprise-managed authorization, by rmcp.
    async fn enterprise(
        &self,
        enterprise: &Enterprise,
        endpoint: &Endpoint<'_>,
    ) -> Result<GrantToken, GrantError> {
        use rmcp::transport::auth::enterprise::{EmaAuthorizationServer, EmaExchangeRequest};
        // The identity provider's endpoint is configured, not discovered; the same rule holds.
        check_token_endpoint(endpoint.resource, &enterprise.idp_token_endpoint)?;
        let mut secrets = Scrubber::default();
        let idp_auth = ema_auth(
            &mut secrets,
            &enterprise.idp_client_id,
            &enterprise.idp_auth,
        )
        .await?;
        let idp = EmaAuthorizationServer::new(
            &enterprise.idp_issuer,
            &enterprise.idp_token_endpoint,
            &enterprise.idp_client_id,
        )
        .with_client_authentication(idp_auth);
        let resource_auth = ema_auth(&mut secrets, &self.client_id, &self.auth).await?;
        let resource_as =
            EmaAuthorizationServer::new(endpoint.issuer, endpoint.token_endpoint, &self.client_id)
                .with_client_authentication(resource_auth);
        let id_token = enterprise.id_token.read().await?;
        secrets.secret(id_token.expose());
        let scopes: Vec<String> = self
            .scope
            .iter()
            .flat_map(|s| s.split_whitespace())
            .map(str::to_owned)
            .collect();
        let failed = |e: &dyn std::fmt::Display| {
            let said = crate::text::without_url_secrets(&e.to_string()).into_owned();
            GrantError::Enterprise(scrub::quote(&said, &secrets))
        };
        let http = rmcp::transport::auth::default_oauth_http_client().map_err(|e| failed(&e))?;
        let token = EmaExchangeRequest::new_with_id_token(
            idp,
            resource_as,
            endpoint.resource,
            id_token.expose(),
        )
        .with_scopes(scopes)
        .exchange(&http, &http)
        .await
        .map_err(|e| failed(&e))?;
        let mut granted: Vec<String> = token.scopes.into_iter().collect();
        granted.sort();
        let (expires_at, renew_at) =
            GrantToken::renewal(jose::now_secs(), token.expires_in.map(|d| d.as_secs()));
        Ok(GrantToken {
            access_token: token.access_token.secret().clone(),
            token_type: "Bearer".into(),
            expires_at,
            renew_at,
            scope: (!granted.is_empty()).then(|| granted.join(" ")),
        })
    }
}

/// The client authentication of one enterprise exchange, its secret made known to `secrets`.
async fn ema_auth(
    secrets: &mut Scrubber,
    client_id: &str,
    auth: &ClientAuth,
) -> Result<rmcp::transport::auth::enterprise::EmaClientAuthentication, GrantError> {
    use rmcp::transport::auth::enterprise::EmaClientAuthentication;
    Ok(match auth {
        ClientAuth::None => EmaClientAuthentication::None,
        ClientAuth::SecretBasic(source) => {
            let secret = source.read().await?;
            secrets.basic(client_id, secret.expose());
            EmaClientAuthentication::ClientSecretBasic(oauth2::ClientSecret::new(secret.0))
        }
        ClientAuth::SecretPost(source) => {
            let secret = source.read().await?;
            secrets.basic(client_id, secret.expose());
            EmaClientAuthentication::ClientSecretPost(oauth2::ClientSecret::new(secret.0))
        }
        ClientAuth::PrivateKeyJwt { .. } => {
            return Err(GrantError::Enterprise(
                "private_key_jwt is not supported with the enterprise grant".into(),
            ));
        }
    })
}

/// Whether credentials may go to `endpoint` for the server at `resource` ([`visit`]'s rule).
fn check_token_endpoint(resource: &str, endpoint: &str) -> Result<(), GrantError> {
    visit::check_token_endpoint(resource, endpoint).map_err(|refused| {
        let shown =
            crate::text::for_terminal(&crate::text::without_url_secrets(endpoint)).into_owned();
        GrantError::Untrusted(format!("the token endpoint {shown} is refused: {refused}"))
    })
}

/// Whether two issuer identifiers name one authorization server: equal as URLs (so
/// `https://a` and `https://a/` are one; a path, the case of a path, a port are not ignored).
fn same_issuer(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a.trim()), reqwest::Url::parse(b.trim())) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Adds the client's authentication to `form`.
async fn authenticate(
    form: &mut Form,
    client_id: &str,
    auth: &ClientAuth,
    audience: &str,
) -> Result<(), GrantError> {
    match auth {
        ClientAuth::None => form.pairs.push(("client_id", client_id.to_owned())),
        ClientAuth::SecretBasic(source) => {
            let secret = source.read().await?;
            // RFC 6749 §2.3.1: both form-encoded before Basic encoding.
            let pair = format!("{}:{}", form_encode(client_id), form_encode(&secret.0));
            form.secrets.basic(client_id, &secret.0);
            form.basic = Some(format!("Basic {}", STANDARD.encode(pair)));
        }
        ClientAuth::SecretPost(source) => {
            let secret = source.read().await?;
            form.pairs.push(("client_id", client_id.to_owned()));
            form.secrets.secret(&secret.0);
            form.pairs.push(("client_secret", secret.0));
        }
        ClientAuth::PrivateKeyJwt { key, algorithm } => {
            let pem = key.read().await?;
            let signer = Signer::from_pem(&pem.0, *algorithm)?;
            let now = jose::now_secs();
            let assertion = signer.sign(
                json!({"typ": "JWT"}),
                &json!({
                    "iss": client_id,
                    "sub": client_id,
                    "aud": audience,
                    "iat": now,
                    "exp": now + 60,
                    "jti": jose::random_id(),
                }),
            )?;
            form.pairs.push(("client_id", client_id.to_owned()));
            form.pairs
                .push(("client_assertion_type", CLIENT_ASSERTION_TYPE.into()));
            form.pairs.push(("client_assertion", assertion));
        }
    }
    Ok(())
}

/// Posts the token request and reads the token response; with `dpop`, each try carries a new
/// proof, and a `use_dpop_nonce` refusal that brings a nonce is tried once more with it.
async fn post(
    http: &reqwest::Client,
    endpoint: &str,
    form: Form,
    dpop: Option<&Binding>,
) -> Result<GrantToken, GrantError> {
    let failed = |reason: String| GrantError::Token {
        endpoint: crate::text::without_url_secrets(endpoint).into_owned(),
        reason: scrub::quote(&reason, &form.secrets),
    };
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.pairs.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    let mut retried = false;
    let (status, bytes) = loop {
        let mut request = http
            .post(endpoint)
            .timeout(REQUEST_TIMEOUT)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(body.clone());
        if let Some(basic) = &form.basic {
            request = request.header(http::header::AUTHORIZATION, basic);
        }
        if let Some(binding) = dpop {
            request = request.header(dpop::DPOP, binding.proof("POST", endpoint, None)?);
        }
        let response = request
            .send()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        let status = response.status();
        let learned = dpop.is_some_and(|binding| binding.nonce.learn(response.headers()));
        let bytes =
            read_capped(response, MAX_SECRET_BYTES)
                .await
                .map_err(|unread| match unread {
                    Unread::TooLarge { .. } => {
                        failed(format!("the response is over {MAX_SECRET_BYTES} bytes"))
                    }
                    Unread::Broken(e) => failed(e.without_url().to_string()),
                })?;
        if learned && !retried && dpop::token_endpoint_wants_nonce(status, &bytes) {
            retried = true;
            continue;
        }
        break (status, bytes);
    };
    let json: Value = serde_json::from_slice(&bytes)
        .map_err(|_| failed(format!("HTTP {status} with a body that is not JSON")))?;
    if !status.is_success() {
        let error = json["error"].as_str().unwrap_or("no error code");
        let reason = match json["error_description"].as_str() {
            Some(description) => format!("HTTP {status}: {error} ({description})"),
            None => format!("HTTP {status}: {error}"),
        };
        return Err(failed(reason));
    }
    let access_token = json["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| failed("the response has no access_token".into()))?;
    let (expires_at, renew_at) = GrantToken::renewal(jose::now_secs(), json["expires_in"].as_u64());
    Ok(GrantToken {
        access_token: access_token.to_owned(),
        token_type: json["token_type"].as_str().unwrap_or("Bearer").to_owned(),
        expires_at,
        renew_at,
        scope: json["scope"].as_str().map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_renewed_before_they_expire_and_short_ones_are_still_used() {
        // An hour's token: renewed a minute before its end.
        assert_eq!(
            GrantToken::renewal(1000, Some(3600)),
            (Some(4600), Some(4540))
        );
        // A 20 s token: used for 15 s, not obtained again for every request.
        assert_eq!(
            GrantToken::renewal(1000, Some(20)),
            (Some(1020), Some(1015))
        );
        assert_eq!(GrantToken::renewal(1000, None), (None, None));
        let token = |renew_at: Option<u64>, expires_at: Option<u64>| GrantToken {
            access_token: "t".into(),
            token_type: "Bearer".into(),
            expires_at,
            renew_at,
            scope: None,
        };
        let now = jose::now_secs();
        assert!(token(Some(now + 30), Some(now + 40)).fresh());
        assert!(!token(Some(now - 1), Some(now + 40)).fresh());
        // A token stored before renewal times were kept goes by its expiry.
        assert!(!token(None, Some(now - 1)).fresh());
        assert!(token(None, None).fresh());
    }

    #[test]
    fn a_lifetime_near_the_end_of_u64_saturates_and_the_token_stays_fresh() {
        let now = jose::now_secs();
        let (expires_at, renew_at) = GrantToken::renewal(now, Some(u64::MAX));
        assert_eq!(expires_at, Some(u64::MAX));
        assert_eq!(renew_at, Some(u64::MAX - GRANT_MARGIN_SECS));
        let token = GrantToken {
            access_token: "t".into(),
            token_type: "Bearer".into(),
            expires_at,
            renew_at,
            scope: None,
        };
        assert!(token.fresh());
        assert_eq!(
            GrantToken::renewal(u64::MAX, Some(1)),
            (Some(u64::MAX), Some(u64::MAX))
        );
    }

    #[test]
    fn secrets_are_not_debugged() {
        assert_eq!(format!("{:?}", Secret::new("hunter2")), "<redacted>");
        let source = SecretSource::Value(Secret::new("hunter2"));
        assert!(!format!("{source:?}").contains("hunter2"));
    }
}
