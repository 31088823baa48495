//! Lives on the HTTP+SSE transport of 2024-11-05: a server configured as `sse`, and an `http`
//! server whose URL refuses streamable HTTP the way servers of the old transport do (see
//! [`fallback`]).

use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{ClientInitializeError, ClientLifecycleMode, serve_client_with_lifecycle};

use super::connect::{Connected, Handshake};
use super::refresh::ListChanged;
use super::slot::Slot;
use super::traced::Traced;
use crate::mcp::auth::{OAuthHttp, ServerAuth};
use crate::mcp::config::HttpConfig;
use crate::mcp::sse::fallback::{self, Refusal};
use crate::mcp::sse::{Client, ENDPOINT_TIMEOUT, SseTransport};
use crate::mcp::{HostOptions, TransportKind};

impl Slot {
    /// Connects and negotiates one life over HTTP+SSE.
    pub(super) async fn sse(
        self: &Arc<Self>,
        changed: &ListChanged,
        config: &HttpConfig,
    ) -> Result<Connected, Handshake> {
        let (client, auth) = self.sse_client(config).map_err(Handshake::Spawn)?;
        let stopped = |reason: String| match auth.as_ref().and_then(|auth| auth.problem()) {
            Some(problem) => Handshake::Auth(problem.describe(self.name.as_str())),
            None => Handshake::Spawn(reason),
        };
        let wait = endpoint_wait(&self.shared.options);
        let transport = SseTransport::connect(&self.name, config, client, wait)
            .await
            .map_err(|e| stopped(e.to_string()))?;
        let handler = self.handler(changed);
        let transport = Traced::new(transport, &self.pending);
        // The transport's servers predate `server/discover` (2026-07-28): they negotiate with
        // `initialize`, and asking them to discover first costs a round trip for nothing.
        match serve_client_with_lifecycle(handler, transport, ClientLifecycleMode::Initialize).await
        {
            Ok(service) => Ok((service, None, TransportKind::Sse)),
            Err(error) => Err(match auth.and_then(|auth| auth.problem()) {
                Some(problem) => Handshake::Auth(problem.describe(self.name.as_str())),
                None => Handshake::Init(Box::new(error)),
            }),
        }
    }

    /// After the streamable handshake at `config.url` failed with `error`: a life over
    /// HTTP+SSE if the server's answer calls for it, else `error`.
    pub(super) async fn fall_back_to_sse(
        self: &Arc<Self>,
        changed: &ListChanged,
        config: &HttpConfig,
        error: Box<ClientInitializeError>,
    ) -> Result<Connected, Handshake> {
        let status = match fallback::refusal(&error) {
            None => None,
            Some(Refusal::Status(status)) => Some(status),
            Some(Refusal::Unsaid) => {
                let probed = match self.sse_client(config) {
                    Ok((client, _)) => fallback::probe(&client, config).await,
                    Err(reason) => Err(reason),
                };
                probed.unwrap_or_else(|reason| {
                    tracing::debug!(server = %self.name, %reason, "could not ask the server why it refused streamable HTTP");
                    None
                })
            }
        };
        let Some(status) = status.filter(|&status| fallback::calls_for_sse(status)) else {
            return Err(Handshake::Init(error));
        };
        tracing::info!(
            server = %self.name,
            url = %config.url,
            status,
            "the server refused streamable HTTP as servers of the HTTP+SSE transport do; trying that"
        );
        match self.sse(changed, config).await {
            Ok(connected) => {
                tracing::info!(server = %self.name, url = %config.url, "the server speaks the HTTP+SSE transport of 2024-11-05; using it");
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

    /// The client of the server's HTTP+SSE requests, and its authorization when it has no
    /// configured `Authorization` header (the operator's choice, which OAuth leaves alone).
    fn sse_client(&self, config: &HttpConfig) -> Result<(Client, Option<Arc<ServerAuth>>), String> {
        if config.has_authorization() {
            return Ok((Client::plain()?, None));
        }
        let options = self.shared.options.oauth.clone();
        let auth = ServerAuth::new(self.name.as_str(), config, options);
        let client = OAuthHttp::new(Arc::clone(&auth))?;
        Ok((Client::OAuth(client), Some(auth)))
    }
}

/// How long a life waits for the `endpoint` event: at most half the start-up's time, so that a
/// stream that never names it fails with that said, not with the start-up's timeout.
fn endpoint_wait(options: &HostOptions) -> Duration {
    ENDPOINT_TIMEOUT.min(options.startup_timeout / 2)
}
