//! `OAuthHttp`, the HTTP client of an OAuth-protected server's transport: it presents the
//! server's token (a bearer token, or a DPoP-bound one with a new proof on every request) and
//! reacts to the server's verdict: a refresh, a login or step-up, or for a `use_dpop_nonce`
//! refusal one retry with the server's nonce.
//!
//! rmcp's client reports a `401` by its `WWW-Authenticate` header alone and drops the
//! `DPoP-Nonce` header that comes with a nonce refusal. The nonce is learnt by one request of
//! ours that the server cannot act on: a `POST` without a body, presenting the token and a
//! proof without the nonce, which the server refuses again, this time where the header can be
//! read. The retry then carries the nonce; later requests reuse it until the server refuses
//! it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue, header};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::AuthError;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use super::dpop::{self, DPOP};
use super::{AccessToken, AuthProblem, MAX_AUTHORIZATIONS, ServerAuth};

/// The HTTP client of an OAuth-protected server's transport. See the module doc.
#[derive(Clone)]
pub(crate) struct OAuthHttp {
    http: reqwest::Client,
    auth: Arc<ServerAuth>,
}

/// An attempt of one request; more means the server or the token store keeps changing its
/// mind, and the request fails instead of looping.
const MAX_ATTEMPTS: u32 = 3 + 2 * MAX_AUTHORIZATIONS;

/// What one HTTP exchange of an OAuth-protected server's client gives.
pub(crate) type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

/// Extra headers of one request.
type Headers = HashMap<HeaderName, HeaderValue>;

/// The method and URL of a request, which a DPoP proof names.
#[derive(Clone, Copy)]
struct Target<'a> {
    method: &'static str,
    uri: &'a str,
}

impl OAuthHttp {
    /// A client for the server whose authorization is `auth`.
    pub(crate) fn new(auth: Arc<ServerAuth>) -> Result<Self, String> {
        // Redirects are not followed: a redirect elsewhere would carry the token there.
        let http = crate::net::tls::client_builder()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self { http, auth })
    }

    /// Sends with the current bearer token and reacts to the server's verdict (see the module
    /// doc). `call` makes one exchange with the client and the token it is given. The HTTP+SSE
    /// transport's requests go through here: it takes bearer tokens only.
    pub(crate) async fn send<T, F, Fut>(&self, call: F) -> HttpResult<T>
    where
        F: Fn(reqwest::Client, Option<String>) -> Fut,
        Fut: Future<Output = HttpResult<T>>,
    {
        self.exchange(None, Headers::new(), |http, token, _| call(http, token))
            .await
    }

    /// [`Self::send`] for a request of `target` with `headers`: `call` gets the bearer token
    /// to send, if any, and the headers with a DPoP token's `Authorization` and proof added.
    async fn exchange<T, F, Fut>(
        &self,
        target: Option<Target<'_>>,
        headers: Headers,
        call: F,
    ) -> HttpResult<T>
    where
        F: Fn(reqwest::Client, Option<String>, Headers) -> Fut,
        Fut: Future<Output = HttpResult<T>>,
    {
        let mut refreshed = false;
        let mut nonce_retried = false;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let token = self.auth.token().await?;
            let (bearer, headers) = self.present(token.as_ref(), target, headers.clone())?;
            let result = call(self.http.clone(), bearer, headers).await;
            if attempts >= MAX_ATTEMPTS {
                return result;
            }
            match result {
                Err(StreamableHttpError::AuthRequired(challenge)) => {
                    // A bound token refused for want of the server's nonce: once per request.
                    if let (Some(sent), Some(target)) = (&token, target)
                        && sent.key.is_some()
                        && !nonce_retried
                        && dpop::challenge_wants_nonce(&challenge.www_authenticate_header)
                    {
                        nonce_retried = true;
                        if self.learn_nonce(sent, target).await {
                            continue;
                        }
                    }
                    // Another request may have logged in while this one was out.
                    if self.auth.token().await? != token {
                        continue;
                    }
                    if let Some(sent) = &token
                        && !refreshed
                    {
                        refreshed = true;
                        if self.auth.refresh(&sent.value).await? {
                            continue;
                        }
                    }
                    self.auth
                        .authorize(
                            &challenge.www_authenticate_header,
                            None,
                            AuthProblem::LoginNeeded,
                        )
                        .await?;
                }
                Err(StreamableHttpError::InsufficientScope(error)) => {
                    if self.auth.token().await? != token {
                        continue;
                    }
                    let (scopes, required) = self.auth.step_up_scopes(&error).await;
                    self.auth
                        .authorize(
                            &error.www_authenticate_header,
                            Some(scopes),
                            AuthProblem::MoreScopes(required),
                        )
                        .await?;
                }
                other => return other,
            }
        }
    }

    /// How a request of `target` presents `token`: a bearer token for rmcp to send, or for a
    /// bound one, `Authorization: DPoP` and a new proof among the headers.
    fn present(
        &self,
        token: Option<&AccessToken>,
        target: Option<Target<'_>>,
        mut headers: Headers,
    ) -> HttpResult<(Option<String>, Headers)> {
        let Some(token) = token else {
            return Ok((None, headers));
        };
        let Some(key) = &token.key else {
            return Ok((Some(token.value.clone()), headers));
        };
        let Some(target) = target else {
            return Err(auth_error(
                "the server's token is DPoP-bound, which the HTTP+SSE transport does not send",
            ));
        };
        let nonce = self.auth.resource_nonce.get();
        let proof = key
            .proof(
                target.method,
                target.uri,
                nonce.as_deref(),
                Some(&token.value),
            )
            .map_err(|e| auth_error(&e.to_string()))?;
        let value = |text: String| {
            HeaderValue::from_str(&text).map_err(|_| auth_error("the token is not a header value"))
        };
        headers.insert(
            header::AUTHORIZATION,
            value(format!("DPoP {}", token.value))?,
        );
        headers.insert(HeaderName::from_static("dpop"), value(proof)?);
        Ok((None, headers))
    }

    /// Learns the server's current nonce: a `POST` without a body to `target`'s URL, with the
    /// token and a proof carrying the nonce held so far, which the server refuses with its
    /// `DPoP-Nonce` (see the module doc). Whether a nonce came.
    async fn learn_nonce(&self, token: &AccessToken, target: Target<'_>) -> bool {
        let Some(key) = &token.key else {
            return false;
        };
        let nonce = self.auth.resource_nonce.get();
        let Ok(proof) = key.proof("POST", target.uri, nonce.as_deref(), Some(&token.value)) else {
            return false;
        };
        let response = self
            .http
            .post(target.uri)
            .header(header::AUTHORIZATION, format!("DPoP {}", token.value))
            .header(DPOP, proof)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .send()
            .await;
        match response {
            Ok(response) => self.auth.resource_nonce.learn(response.headers()),
            Err(error) => {
                tracing::debug!(error = %error.without_url(), "learning the server's DPoP nonce failed");
                false
            }
        }
    }
}

fn auth_error(reason: &str) -> StreamableHttpError<reqwest::Error> {
    StreamableHttpError::Auth(AuthError::InternalError(reason.to_owned()))
}

impl StreamableHttpClient for OAuthHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let target = Target {
            method: "POST",
            uri: &uri,
        };
        self.exchange(Some(target), custom_headers, |http, token, headers| {
            let (uri, message, session_id) = (uri.clone(), message.clone(), session_id.clone());
            async move {
                http.post_message(uri, message, session_id, token, headers)
                    .await
            }
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let target = Target {
            method: "POST",
            uri: &uri,
        };
        self.exchange(Some(target), custom_headers, |http, token, headers| {
            let (uri, message, session_id) = (uri.clone(), message.clone(), session_id.clone());
            async move {
                http.post_message_with_response_limits(
                    uri, message, session_id, token, headers, limits,
                )
                .await
            }
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<()> {
        // Closing a session is no reason to log in: one try with the current token.
        let token = self.auth.token().await?;
        let target = Target {
            method: "DELETE",
            uri: &uri,
        };
        let (token, headers) = self.present(token.as_ref(), Some(target), custom_headers)?;
        self.http
            .delete_session(uri, session_id, token, headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: Headers,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        let target = Target {
            method: "GET",
            uri: &uri,
        };
        self.exchange(Some(target), custom_headers, |http, token, headers| {
            let (uri, session_id) = (uri.clone(), session_id.clone());
            let last_event_id = last_event_id.clone();
            async move {
                http.get_stream(uri, session_id, last_event_id, token, headers)
                    .await
            }
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<sse_stream::Sse, SseError>>> {
        let target = Target {
            method: "GET",
            uri: &uri,
        };
        self.exchange(Some(target), custom_headers, |http, token, headers| {
            let (uri, session_id) = (uri.clone(), session_id.clone());
            let last_event_id = last_event_id.clone();
            async move {
                http.get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    token,
                    headers,
                    max_sse_event_size,
                )
                .await
            }
        })
        .await
    }
}
