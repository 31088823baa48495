//! The HTTP client of a login's token requests when its authorization server takes DPoP: rmcp
//! makes the requests (the code exchange, registration, refreshes) and this client sends them,
//! adding a proof to each token request and answering a `use_dpop_nonce` refusal with one
//! retry that carries the nonce.
//!
//! Discovery is not done here: rmcp's own client, with its address policy, found the
//! authorization server, and this one sends only to the token and registration endpoints that
//! discovery named. Redirects are not followed (one elsewhere would carry the credentials).

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, OAuthHttpClient, OAuthHttpClientError,
    OAuthHttpClientFuture, OAuthHttpRequest,
};

use super::dpop::{self, Binding, DPOP, DpopKey};
use crate::net::body::{Unread, read_capped};

/// The longest token or registration response read.
const MAX_RESPONSE: usize = 1024 * 1024;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A manager of rmcp for the server at `url` whose token requests carry proofs of `key`, for
/// the authorization server of `metadata` (which it is given).
pub(super) async fn manager(
    url: &str,
    metadata: AuthorizationMetadata,
    key: Arc<DpopKey>,
) -> Result<AuthorizationManager, AuthError> {
    let http = crate::net::tls::client_builder()
        .map_err(|e| AuthError::InternalError(format!("cannot build the HTTP client: {e}")))?
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| AuthError::InternalError(format!("cannot build the HTTP client: {e}")))?;
    let client = TokenClient {
        http,
        token_endpoint: metadata.token_endpoint.clone(),
        registration_endpoint: metadata.registration_endpoint.clone(),
        binding: Binding::new(key),
    };
    let mut manager =
        AuthorizationManager::new_with_oauth_http_client(url, Arc::new(client)).await?;
    manager.set_metadata(metadata);
    Ok(manager)
}

/// See the module doc.
struct TokenClient {
    http: reqwest::Client,
    token_endpoint: String,
    registration_endpoint: Option<String>,
    binding: Binding,
}

/// Why the client did not send a request.
#[derive(Debug, thiserror::Error)]
enum TokenClientError {
    #[error("the login's client sends only to the token and registration endpoints, not {0}")]
    Elsewhere(String),
    #[error("the response is over {MAX_RESPONSE} bytes")]
    TooLarge,
    #[error("cannot make the DPoP proof: {0}")]
    Proof(#[from] super::KeyError),
}

impl OAuthHttpClient for TokenClient {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let (parts, body) = request.request.into_parts();
            let url = parts.uri.to_string();
            let to_token_endpoint =
                parts.method == http::Method::POST && same_url(&url, &self.token_endpoint);
            let to_registration = self
                .registration_endpoint
                .as_deref()
                .is_some_and(|r| same_url(&url, r));
            if !to_token_endpoint && !to_registration {
                return Err(boxed(TokenClientError::Elsewhere(url)));
            }
            let mut retried = false;
            loop {
                let mut request = self
                    .http
                    .request(parts.method.clone(), &url)
                    .headers(parts.headers.clone())
                    .body(body.clone());
                if to_token_endpoint {
                    let proof = self
                        .binding
                        .proof(parts.method.as_str(), &url, None)
                        .map_err(|e| boxed(TokenClientError::from(e)))?;
                    request = request.header(DPOP, proof);
                }
                let response = request.send().await.map_err(|e| boxed(e.without_url()))?;
                let status = response.status();
                let learned = self.binding.nonce.learn(response.headers());
                let headers = response.headers().clone();
                let version = response.version();
                let bytes = read_bounded(response).await?;
                if to_token_endpoint
                    && learned
                    && !retried
                    && dpop::token_endpoint_wants_nonce(status, &bytes)
                {
                    retried = true;
                    continue;
                }
                let mut answer = http::Response::builder().status(status).version(version);
                for (name, value) in &headers {
                    answer = answer.header(name, value);
                }
                return answer.body(bytes).map_err(boxed);
            }
        })
    }
}

fn boxed(error: impl std::error::Error + Send + Sync + 'static) -> OAuthHttpClientError {
    Box::new(error)
}

async fn read_bounded(response: reqwest::Response) -> Result<Vec<u8>, OAuthHttpClientError> {
    read_capped(response, MAX_RESPONSE)
        .await
        .map_err(|unread| match unread {
            Unread::TooLarge { .. } => boxed(TokenClientError::TooLarge),
            Unread::Broken(e) => boxed(e.without_url()),
        })
}

/// Whether two absolute URLs name the same resource (as parsed, so that `http::Uri`'s and
/// metadata's spellings of one URL agree).
fn same_url(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
