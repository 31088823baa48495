//! Lives on the HTTP+SSE transport of 2024-11-05: a server configured as `sse`, and an `http`
//! server whose URL refuses streamable HTTP the way servers of the old transport do (see
//! [`fallback`]). As in `connect.rs`, nothing here knows the slot: each function takes what one
//! connection needs.

use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{ClientInitializeError, ClientLifecycleMode, serve_client_with_lifecycle};

use super::client::Handler;
use super::connect::{Connected, Handshake};
use super::traced::{Pending, Traced};
use crate::hooks::ServerName;
use crate::mcp::HostOptions;
use crate::mcp::auth::{OAuthHttp, ServerAuth};
use crate::mcp::config::HttpConfig;
use crate::mcp::sse::fallback::{self, Refusal};
use crate::mcp::sse::{Client, ENDPOINT_TIMEOUT, SseTransport};
use crate::ports::TransportKind;

/// Connects and negotiates one life of `server` over HTTP+SSE.
pub(super) async fn sse(
    server: &ServerName,
    config: &HttpConfig,
    options: &HostOptions,
    handler: Handler,
    pending: &Pending,
) -> Result<Connected, Handshake> {
    let (client, auth) = sse_client(server, config, options).map_err(Handshake::Spawn)?;
    let stopped = |reason: String| match auth.as_ref().and_then(|auth| auth.problem()) {
        Some(problem) => Handshake::Auth(problem.describe(server.as_str())),
        None => Handshake::Spawn(reason),
    };
    let wait = endpoint_wait(options);
    let transport = SseTransport::connect(server, config, client, wait)
        .await
        .map_err(|e| stopped(e.to_string()))?;
    let transport = Traced::new(transport, pending);
    // The transport's servers predate `server/discover` (2026-07-28): they negotiate with
    // `initialize`, and asking them to discover first costs a round trip for nothing.
    match serve_client_with_lifecycle(handler, transport, ClientLifecycleMode::Initialize).await {
        Ok(service) => Ok((service, None, TransportKind::Sse)),
        Err(error) => Err(match auth.and_then(|auth| auth.problem()) {
            Some(problem) => Handshake::Auth(problem.describe(server.as_str())),
            None => Handshake::Init(Box::new(error)),
        }),
    }
}

/// After the streamable handshake at `config.url` failed with `error`: a life of `server` over
/// HTTP+SSE (with `handler`) if the server's answer calls for it, else `error`.
pub(super) async fn fall_back_to_sse(
    server: &ServerName,
    config: &HttpConfig,
    options: &HostOptions,
    handler: Handler,
    pending: &Pending,
    error: Box<ClientInitializeError>,
) -> Result<Connected, Handshake> {
    let status = match fallback::refusal(&error) {
        None => None,
        Some(Refusal::Status(status)) => Some(status),
        Some(Refusal::Unsaid) => {
            let probed = match sse_client(server, config, options) {
                Ok((client, _)) => fallback::probe(&client, config).await,
                Err(reason) => Err(reason),
            };
            probed.unwrap_or_else(|reason| {
                    tracing::debug!(server = %server, %reason, "could not ask the server why it refused streamable HTTP");
                    None
                })
        }
    };
    let Some(status) = status.filter(|&status| fallback::calls_for_sse(status)) else {
        return Err(Handshake::Init(error));
    };
    tracing::info!(
        server = %server,
        url = %crate::text::without_url_secrets(&config.url),
        status,
        "the server refused streamable HTTP as servers of the HTTP+SSE transport do; trying that"
    );
    match sse(server, config, options, handler, pending).await {
        Ok(connected) => {
            tracing::info!(server = %server, url = %crate::text::without_url_secrets(&config.url), "the server speaks the HTTP+SSE transport of 2024-11-05; using it");
            Ok(connected)
        }
        Err(Handshake::Auth(reason)) => Err(Handshake::Auth(reason)),
        Err(sse) => Err(Handshake::Spawn(format!(
            "it answered streamable HTTP's initialize with HTTP {status}, and the HTTP+SSE \
                 transport failed too: {}",
            sse.reason()
        ))),
    }
}

/// The client of `server`'s HTTP+SSE requests, and its authorization when it has no
/// configured `Authorization` header (the operator's choice, which OAuth leaves alone).
fn sse_client(
    server: &ServerName,
    config: &HttpConfig,
    options: &HostOptions,
) -> Result<(Client, Option<Arc<ServerAuth>>), String> {
    if config.has_authorization() {
        return Ok((Client::plain()?, None));
    }
    let auth = ServerAuth::new(server.as_str(), config, options.oauth.clone());
    let client = OAuthHttp::new(Arc::clone(&auth))?;
    Ok((Client::OAuth(client), Some(auth)))
}

/// How long a life waits for the `endpoint` event: at most half the start-up's time, so that a
/// stream that never names it fails with that said, not with the start-up's timeout.
fn endpoint_wait(options: &HostOptions) -> Duration {
    ENDPOINT_TIMEOUT.min(options.startup_timeout / 2)
}
