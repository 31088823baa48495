//! Connecting one life of a server: the handshake over stdio or streamable HTTP (the slot picks
//! the transport; the older HTTP+SSE one is `legacy.rs`'s), the headers the HTTP
//! transport may be configured with, why a handshake failed, and the `list_changed`
//! subscription a server of the stateless protocol needs. Nothing here knows the slot: each
//! function takes what one connection needs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{RequestId, ServerNotification, SubscriptionFilter};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, Peer, RoleClient, RunningService, Subscription,
    serve_client_with_lifecycle,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::client::Handler;
use super::refresh::ListChanged;
use super::traced::{Pending, Traced};
use crate::hooks::ServerName;
use crate::mcp::McpError;
use crate::mcp::auth::{OAuthHttp, OAuthOptions, ServerAuth};
use crate::mcp::backlog::Backlogged;
use crate::mcp::child::{ChildGroup, clean_command};
use crate::mcp::config::{HttpConfig, StdioConfig};
use crate::mcp::transport::LineTransport;
use crate::ports::TransportKind;

/// Connects and negotiates one life of `server` over stdio: runs `config`'s command in a process
/// group of its own and speaks MCP on its stdin and stdout.
pub(super) async fn stdio(
    server: &ServerName,
    config: &StdioConfig,
    handler: Handler,
    pending: &Pending,
    lifecycle: ClientLifecycleMode,
) -> Result<Connected, Handshake> {
    let mut command = clean_command(&config.command);
    command.args(&config.args).envs(&config.env);
    if let Some(cwd) = &config.cwd {
        command.current_dir(cwd);
    }
    let (child, stdout, stdin) = ChildGroup::spawn(server, command)
        .map_err(|e| Handshake::Spawn(format!("could not run {:?}: {e}", config.command)))?;
    // If the handshake fails or times out, dropping `child` kills the group.
    let transport = LineTransport::new(stdout, stdin);
    let service = serve_client_with_lifecycle(handler, Traced::new(transport, pending), lifecycle)
        .await
        .map_err(|e| Handshake::Init(Box::new(e)))?;
    Ok((service, Some(Mutex::new(child)), TransportKind::Stdio))
}

/// Connects and negotiates one life over an in-memory duplex a test made.
#[cfg(test)]
pub(super) async fn duplex(
    stream: tokio::io::DuplexStream,
    handler: Handler,
    pending: &Pending,
    lifecycle: ClientLifecycleMode,
) -> Result<Connected, Handshake> {
    let (read, write) = tokio::io::split(stream);
    let transport = LineTransport::new(read, write);
    let service = serve_client_with_lifecycle(handler, Traced::new(transport, pending), lifecycle)
        .await
        .map_err(|e| Handshake::Init(Box::new(e)))?;
    Ok((service, None, TransportKind::Stdio))
}

/// Connects and negotiates one life of `server` over streamable HTTP. A configured
/// `Authorization` header is the operator's choice of credentials; otherwise the server may ask
/// for OAuth (with `oauth`), and the OAuth client answers.
pub(super) async fn streamable(
    server: &ServerName,
    config: &HttpConfig,
    oauth: OAuthOptions,
    handler: Handler,
    pending: &Pending,
    lifecycle: ClientLifecycleMode,
) -> Result<Connected, Handshake> {
    let transport_config = http_config(config).map_err(Handshake::Spawn)?;
    if config.has_authorization() {
        let client = configured_credentials_client().map_err(Handshake::Spawn)?;
        let transport = StreamableHttpClientTransport::with_client(client, transport_config);
        let transport = Backlogged::new(transport, server);
        let service =
            serve_client_with_lifecycle(handler, Traced::new(transport, pending), lifecycle)
                .await
                .map_err(|e| Handshake::Init(Box::new(e)))?;
        return Ok((service, None, TransportKind::StreamableHttp));
    }
    let auth = ServerAuth::new(server.as_str(), config, oauth);
    let client = OAuthHttp::new(Arc::clone(&auth)).map_err(Handshake::Spawn)?;
    let transport = StreamableHttpClientTransport::with_client(client, transport_config);
    let transport = Backlogged::new(transport, server);
    match serve_client_with_lifecycle(handler, Traced::new(transport, pending), lifecycle).await {
        Ok(service) => Ok((service, None, TransportKind::StreamableHttp)),
        Err(error) => Err(match auth.problem() {
            Some(problem) => Handshake::Auth(problem.describe(server.as_str())),
            None => Handshake::Init(Box::new(error)),
        }),
    }
}

/// The client of a server whose configuration carries its credentials: the one rmcp would
/// build for the transport (no idle connection kept: reusing one whose last answer was not read
/// to its end stalls on the delayed ACK), with the crate's TLS.
///
/// It follows a redirect only when it is a 307 or 308 (which keep the POST's body: a 301, 302 or
/// 303 would turn the message into a bodyless GET) to the origin of the configured URL (another
/// origin would be sent the session id and the credentials), at most [`MAX_REDIRECTS`] of them;
/// any other redirect is the answer the transport gets.
fn configured_credentials_client() -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|configured| configured.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    crate::net::tls::client_builder()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?
        .pool_max_idle_per_host(0)
        .redirect(policy)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The redirects [`configured_credentials_client`] follows for one request.
const MAX_REDIRECTS: usize = 10;

/// A negotiated connection, for stdio its process group, and its transport.
pub(super) type Connected = (
    RunningService<RoleClient, Handler>,
    Option<Mutex<ChildGroup>>,
    TransportKind,
);

/// Why a handshake failed.
pub(super) enum Handshake {
    /// The server could not be started or reached at all.
    Spawn(String),
    /// The MCP handshake failed.
    Init(Box<ClientInitializeError>),
    /// The server's authorization stopped it (no login, an expired one, too few scopes).
    Auth(String),
}

impl Handshake {
    /// The start-up error of `server` this failure makes.
    pub(super) fn into_error(self, server: &ServerName) -> McpError {
        McpError::Startup {
            server: server.clone(),
            reason: self.reason(),
        }
    }

    /// What went wrong, in words; the URLs in it (rmcp's and reqwest's messages name them)
    /// keep no query or user info.
    pub(super) fn reason(self) -> String {
        let reason = match self {
            Self::Spawn(reason) | Self::Auth(reason) => reason,
            Self::Init(error) => error.to_string(),
        };
        crate::text::without_url_secrets(&reason).into_owned()
    }
}

/// Whether `error` is the answer to an earlier request of the handshake arriving while the
/// client waits for a later one: in rmcp's probing lifecycle, the answer to `server/discover`
/// (the handshake's first requests) after the probe gave up on it and sent `initialize`.
pub(super) fn answered_discovery_late(error: &ClientInitializeError) -> bool {
    match error {
        ClientInitializeError::ConflictInitResponseId(
            RequestId::Number(expected),
            RequestId::Number(got),
        ) => got < expected,
        _ => false,
    }
}

/// Whether a failed discovery is worth an `initialize` handshake: a protocol-level answer the
/// client did not expect, as opposed to a transport that broke (or refused authorization).
pub(super) fn falls_back(error: &ClientInitializeError) -> bool {
    matches!(
        error,
        ClientInitializeError::ExpectedInitResponse(_)
            | ClientInitializeError::ExpectedInitResult(_)
            | ClientInitializeError::ConflictInitResponseId(..)
            | ClientInitializeError::UncorrelatedErrorResponse { .. }
            | ClientInitializeError::JsonRpcError(_)
            | ClientInitializeError::NoCompatibleProtocolVersion { .. }
    )
}

/// The streamable HTTP transport's settings for `config`: its URL and its headers, refusing a
/// header the transport derives from each request.
fn http_config(config: &HttpConfig) -> Result<StreamableHttpClientTransportConfig, String> {
    if let Some(name) = config.headers.keys().find(|n| is_request_mirror_header(n)) {
        return Err(format!(
            "header {name:?} cannot be configured: the client derives it from each request \
             (a fixed one would contradict the request body)"
        ));
    }
    let headers: HashMap<_, _> = config
        .header_map()?
        .into_iter()
        .filter_map(|(name, value)| Some((name?, value)))
        .collect();
    Ok(StreamableHttpClientTransportConfig::with_uri(config.url.as_str()).custom_headers(headers))
}

/// Whether `name` is one of the headers that mirror a request's body (SEP-2243, protocol
/// 2026-07-28): `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`. The transport sets them per request
/// and leaves a configured one in place where it sets none, so a configured `Mcp-Param-Region`
/// would be sent for a call whose `region` is null or absent.
fn is_request_mirror_header(name: &str) -> bool {
    const PARAM: &str = "mcp-param-";
    name.eq_ignore_ascii_case("mcp-method")
        || name.eq_ignore_ascii_case("mcp-name")
        || name
            .get(..PARAM.len())
            .is_some_and(|prefix| prefix.eq_ignore_ascii_case(PARAM))
}

/// On the stateless protocol (2026-07-28 on), a server sends `list_changed` only on a
/// subscription the client opened. Opens one when the server offers the notification; the
/// subscription is open once this returns, so no change after start-up is missed.
pub(super) async fn subscribe_tool_list(peer: &Peer<RoleClient>) -> Option<Subscription> {
    let info = peer.peer_info()?;
    let offers = info
        .capabilities
        .tools
        .as_ref()
        .and_then(|tools| tools.list_changed)
        .unwrap_or(false);
    if info.protocol_version.has_initialize() || !offers {
        return None;
    }
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    match peer.listen(filter).await {
        Ok(subscription) => Some(subscription),
        Err(error) => {
            tracing::debug!(%error, "the server refused a list_changed subscription");
            None
        }
    }
}

/// Notes each `list_changed` of a subscription in `changed` until the life ends.
pub(super) async fn watch_tool_list(mut subscription: Subscription, changed: ListChanged) {
    while let Ok(Some(notification)) = subscription.next().await {
        if matches!(
            notification,
            ServerNotification::ToolListChangedNotification(_)
        ) {
            changed.set();
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server on 127.0.0.1 that answers each request with the next of `answers` (a status
    /// line and headers), one connection each, and returns each request's method, path and body.
    async fn server(answers: Vec<String>) -> (u16, tokio::task::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut paths = Vec::new();
            for answer in answers {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let n = socket.read(&mut buf).await.unwrap();
                    assert!(n > 0, "the client closed before its request ended");
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let Some((head, body)) = text.split_once("\r\n\r\n") else {
                        continue;
                    };
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |n| n.parse().unwrap());
                    if body.len() >= length {
                        break (head.to_owned(), body.to_owned());
                    }
                };
                let line = head.lines().next().unwrap();
                paths.push(format!("{} {body}", line.rsplit_once(' ').unwrap().0));
                let answer = format!("{answer}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                socket.write_all(answer.as_bytes()).await.unwrap();
            }
            paths
        });
        (port, task)
    }

    async fn post(port: u16) -> reqwest::StatusCode {
        let client = super::configured_credentials_client().unwrap();
        let answer = client
            .post(format!("http://127.0.0.1:{port}/mcp"))
            .body("{}")
            .send()
            .await
            .unwrap();
        answer.status()
    }

    #[tokio::test]
    async fn a_307_or_308_to_the_same_origin_is_followed_with_the_body() {
        for status in ["307 Temporary Redirect", "308 Permanent Redirect"] {
            let (port, server) = server(vec![
                format!("HTTP/1.1 {status}\r\nlocation: /moved"),
                "HTTP/1.1 200 OK".to_owned(),
            ])
            .await;
            assert_eq!(post(port).await, 200, "{status}");
            assert_eq!(
                server.await.unwrap(),
                ["POST /mcp {}", "POST /moved {}"],
                "{status}"
            );
        }
    }

    #[tokio::test]
    async fn a_302_or_a_redirect_to_another_origin_is_the_answer() {
        let (other, _unused) = server(vec![]).await;
        for (status, location) in [
            ("302 Found", "/moved".to_owned()),
            (
                "307 Temporary Redirect",
                format!("http://127.0.0.1:{other}/mcp"),
            ),
        ] {
            let (port, server) =
                server(vec![format!("HTTP/1.1 {status}\r\nlocation: {location}")]).await;
            assert_eq!(
                post(port).await.as_str(),
                &status[..3],
                "{status} {location}"
            );
            assert_eq!(
                server.await.unwrap(),
                ["POST /mcp {}"],
                "{status} {location}"
            );
        }
    }

    #[tokio::test]
    async fn redirects_past_the_cap_are_an_error() {
        let answers = (0..=super::MAX_REDIRECTS)
            .map(|i| format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: /hop{i}"))
            .collect();
        let (port, server) = server(answers).await;
        let client = super::configured_credentials_client().unwrap();
        let answer = client
            .post(format!("http://127.0.0.1:{port}/mcp"))
            .body("{}")
            .send()
            .await;
        let error = answer.expect_err("an endless redirect was followed to its end");
        assert!(error.is_redirect(), "{error:?}");
        assert_eq!(server.await.unwrap().len(), super::MAX_REDIRECTS + 1);
    }
}
