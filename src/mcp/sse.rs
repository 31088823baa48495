//! The client side of the HTTP+SSE transport of protocol 2024-11-05, as rmcp's `Transport`.
//!
//! That revision's transport section says: the server offers an SSE endpoint and an HTTP POST
//! endpoint; when a client connects to the first, the server sends an `endpoint` event carrying
//! the URI the client posts every message to; the server's messages arrive as `message` events
//! whose data is the JSON-RPC message. So [`SseTransport::connect`] opens the stream (a GET with
//! `Accept: text/event-stream` and the configured headers), waits for the `endpoint` event,
//! resolves it against the stream's URL, and refuses an endpoint on another origin: the
//! configured headers and tokens go only where the user pointed. Then each outgoing message is
//! one POST to the endpoint, in the order the client sent them, and each `message` event is one
//! incoming message.
//!
//! Everything a peer sends is bounded: an event's data at [`MAX_LINE`] (as a stdio line and
//! rmcp's largest HTTP event), the `endpoint` event's wait, each POST's time, and the messages
//! waiting to be posted: past [`MAX_QUEUED_POSTS`] the stream is not read until some are, so a
//! server flooding requests waits on its own answers. A POST that fails,
//! a stream that ends, breaks or sends an oversized event: the connection is broken — `receive`
//! ends, later sends fail — and the host's supervision decides what happens to the server. The
//! transport itself never reconnects.
//!
//! Requests carry the server's OAuth token when the host has one for it (the same client as
//! streamable HTTP's, [`OAuthHttp`]), unless the configuration sends its own `Authorization`.
//! Redirects are not followed: one to another host would carry the headers there.

pub(crate) mod fallback;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use reqwest::Url;
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, StreamableHttpError,
};
use tokio::sync::Notify;

use crate::hooks::ServerName;
use crate::mcp::auth::{HttpResult, OAuthHttp};
use crate::mcp::config::HttpConfig;
use crate::mcp::transport::MAX_LINE;
use crate::net::sse::{SseEvent, SseParser};
use crate::text::lock;

/// The longest wait for the `endpoint` event once the stream is open.
pub(crate) const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest one POST may take. A server of this transport answers a POST as soon as it has
/// taken the message (`202 Accepted`); the answer to a request comes on the stream.
const POST_TIMEOUT: Duration = Duration::from_secs(30);

/// Messages sent and not yet posted, past which the stream is not read: a server that floods
/// requests (each answered by a POST, one at a time) is held back by its own stream, instead
/// of the answers piling up.
const MAX_QUEUED_POSTS: u64 = 64;

/// The longest line of the stream: an event's data at [`MAX_LINE`], with its field name.
const MAX_STREAM_LINE: usize = MAX_LINE + "data: ".len();

/// Why the transport could not connect, or stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SseError {
    /// The stream could not be opened: the GET failed, or its answer is not an event stream.
    #[error("GET {url} failed: {reason}")]
    Open { url: String, reason: String },
    /// The stream opened but sent no `endpoint` event in time.
    #[error("the SSE stream at {url} sent no `endpoint` event within {} ms", waited.as_millis())]
    NoEndpoint { url: String, waited: Duration },
    /// The stream ended or broke before its `endpoint` event.
    #[error("the SSE stream at {url} ended before its `endpoint` event: {reason}")]
    EndedEarly { url: String, reason: String },
    /// The first event was another one.
    #[error("the first event of the SSE stream at {url} is {event:?}; expected `endpoint`")]
    NotEndpoint { url: String, event: String },
    /// The `endpoint` event's data is no URL reference.
    #[error("the `endpoint` event of {url} names {endpoint:?}, which is not a URL: {reason}")]
    BadEndpoint {
        url: String,
        endpoint: String,
        reason: String,
    },
    /// The `endpoint` event names another origin than the stream's.
    #[error(
        "the `endpoint` event of {url} names {endpoint}, on another origin; the server's headers \
         and tokens are sent only to the origin of its configured url"
    )]
    CrossOrigin { url: String, endpoint: String },
    /// A message could not be posted; the connection is broken.
    #[error("POST to {endpoint} failed: {reason}")]
    Post { endpoint: String, reason: String },
    /// The connection broke or was closed earlier.
    #[error("the connection is closed")]
    Closed,
    /// A message could not be encoded.
    #[error("cannot encode the message: {0}")]
    Encode(#[from] serde_json::Error),
}

/// How the transport's requests go out.
#[derive(Clone)]
pub(crate) enum Client {
    /// As configured: the configuration carries its own credentials, or the server needs none.
    Plain(reqwest::Client),
    /// With the server's stored OAuth token, refreshed when it expires, and a login when the
    /// host may run one.
    OAuth(OAuthHttp),
}

impl Client {
    /// A client without OAuth.
    pub(crate) fn plain() -> Result<Self, String> {
        crate::net::tls::client_builder()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map(Self::Plain)
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }

    /// One exchange made by `call` with the client and the token to send, if any.
    pub(crate) async fn send<T, F, Fut>(&self, call: F) -> HttpResult<T>
    where
        F: Fn(reqwest::Client, Option<String>) -> Fut,
        Fut: Future<Output = HttpResult<T>>,
    {
        match self {
            Self::Plain(http) => call(http.clone(), None).await,
            Self::OAuth(oauth) => oauth.send(call).await,
        }
    }
}

/// The client's end of one HTTP+SSE connection.
pub(crate) struct SseTransport {
    server: ServerName,
    events: Events,
    poster: Arc<Poster>,
    order: Arc<Order>,
    /// The client closed the transport: the stream's end is no news.
    closed: bool,
}

impl SseTransport {
    /// Opens the SSE stream at `config.url` and waits up to `endpoint_wait` for its `endpoint`
    /// event (once the stream answered).
    pub(crate) async fn connect(
        server: &ServerName,
        config: &HttpConfig,
        client: Client,
        endpoint_wait: Duration,
    ) -> Result<Self, SseError> {
        let open_error = |reason: String| SseError::Open {
            url: config.url.clone(),
            reason,
        };
        let url = Url::parse(&config.url).map_err(|e| open_error(format!("not a URL: {e}")))?;
        let headers = config.header_map().map_err(open_error)?;
        let response = client
            .send(|http, token| open_stream(http, url.clone(), headers.clone(), token))
            .await
            .map_err(|e| open_error(e.to_string()))?;
        let mut events = Events {
            response: Some(response),
            parser: SseParser::with_limits(MAX_STREAM_LINE, MAX_LINE),
            pending: Vec::new().into_iter(),
        };
        let first = tokio::time::timeout(endpoint_wait, events.next())
            .await
            .map_err(|_| SseError::NoEndpoint {
                url: url.to_string(),
                waited: endpoint_wait,
            })?;
        let ended = |reason: String| SseError::EndedEarly {
            url: url.to_string(),
            reason,
        };
        let first = match first {
            Ok(Some(event)) => event,
            Ok(None) => return Err(ended("the server closed it".into())),
            Err(reason) => return Err(ended(reason)),
        };
        if first.event != "endpoint" {
            return Err(SseError::NotEndpoint {
                url: url.to_string(),
                event: event_type(&first).to_owned(),
            });
        }
        let endpoint = endpoint(&url, &first.data)?;
        tracing::debug!(%server, %endpoint, "the SSE stream named its endpoint");
        Ok(Self {
            server: server.clone(),
            events,
            poster: Arc::new(Poster {
                server: server.clone(),
                endpoint,
                headers,
                client,
                broken: Broken::default(),
            }),
            order: Arc::default(),
            closed: false,
        })
    }

    /// The message an event carries, if it carries one.
    fn decode(&self, event: SseEvent) -> Option<RxJsonRpcMessage<RoleClient>> {
        match event_type(&event) {
            "message" => match serde_json::from_str(&event.data) {
                Ok(message) => Some(message),
                Err(error) => {
                    tracing::debug!(server = %self.server, %error, "ignoring a message event that is no JSON-RPC message");
                    None
                }
            },
            // The endpoint is fixed for the connection: posting elsewhere midway would need
            // the same checks, for no use a server of this transport has.
            "endpoint" => {
                tracing::debug!(server = %self.server, "ignoring a second `endpoint` event");
                None
            }
            other => {
                tracing::trace!(server = %self.server, event = other, "ignoring an event of another type");
                None
            }
        }
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Encoded and given its turn now, while messages are still in the client's order.
        let body = serde_json::to_vec(&item).map(Bytes::from);
        let turn = self.order.take();
        let poster = Arc::clone(&self.poster);
        async move {
            let body = body?;
            turn.wait().await;
            poster.post(body).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let order = &self.order;
            let events = &mut self.events;
            let event = tokio::select! {
                biased;
                () = self.poster.broken.wait() => return None,
                // Cancel-safe: waiting for room takes nothing, and `next` is cancel-safe.
                event = async {
                    order.room(MAX_QUEUED_POSTS).await;
                    events.next().await
                } => event,
            };
            match event {
                Ok(Some(event)) => {
                    if let Some(message) = self.decode(event) {
                        return Some(message);
                    }
                }
                Ok(None) => {
                    if !self.closed {
                        tracing::warn!(server = %self.server, "the server ended its SSE stream; the connection is broken");
                    }
                    self.poster.broken.set();
                    return None;
                }
                Err(reason) => {
                    tracing::warn!(server = %self.server, %reason, "the server's SSE stream broke; the connection is broken");
                    self.poster.broken.set();
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Ending the GET is how a server of this transport learns the client is gone.
        self.closed = true;
        self.events.response = None;
        self.poster.broken.set();
        Ok(())
    }
}

/// The event stream: the GET's body, parsed.
struct Events {
    /// `None` once the stream ended or was closed.
    response: Option<reqwest::Response>,
    parser: SseParser,
    /// Events parsed and not yet handed out.
    pending: std::vec::IntoIter<SseEvent>,
}

impl Events {
    /// The next event; `Ok(None)` at the end of the stream, `Err` when it broke (a read error,
    /// an event past the limit: the parser cannot find the next event boundary after it).
    ///
    /// Cancel-safe: the only await is a read of the body that, when dropped, has taken nothing,
    /// and the parser and the parsed events are kept in `self`.
    async fn next(&mut self) -> Result<Option<SseEvent>, String> {
        loop {
            if let Some(event) = self.pending.next() {
                return Ok(Some(event));
            }
            let Some(response) = &mut self.response else {
                return Ok(None);
            };
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let mut parsed = Vec::new();
                    let pushed = self.parser.push(&chunk, &mut parsed);
                    self.pending = parsed.into_iter();
                    if let Err(error) = pushed {
                        self.response = None;
                        return Err(error.to_string());
                    }
                }
                Ok(None) => {
                    self.response = None;
                    return Ok(None);
                }
                Err(error) => {
                    self.response = None;
                    return Err(format!("reading the stream failed: {error}"));
                }
            }
        }
    }
}

/// The type of an event: `message` when it names none, as the format says.
fn event_type(event: &SseEvent) -> &str {
    if event.event.is_empty() {
        "message"
    } else {
        &event.event
    }
}

/// The endpoint an `endpoint` event names, resolved against the stream's URL, if it is on the
/// stream's origin.
fn endpoint(url: &Url, data: &str) -> Result<Url, SseError> {
    let endpoint = url.join(data.trim()).map_err(|e| SseError::BadEndpoint {
        url: url.to_string(),
        endpoint: data.to_owned(),
        reason: e.to_string(),
    })?;
    // The same scheme, host and port: `//other.host/…` and absolute URLs elsewhere differ.
    if endpoint.origin() != url.origin() {
        return Err(SseError::CrossOrigin {
            url: url.to_string(),
            endpoint: endpoint.to_string(),
        });
    }
    Ok(endpoint)
}

/// Posts the messages of one connection.
struct Poster {
    server: ServerName,
    endpoint: Url,
    headers: HeaderMap,
    client: Client,
    broken: Broken,
}

impl Poster {
    /// Posts one message; a failure breaks the connection.
    async fn post(&self, body: Bytes) -> Result<(), SseError> {
        if self.broken.is_set() {
            return Err(SseError::Closed);
        }
        let exchange = self.client.send(|http, token| {
            post_message(
                http,
                self.endpoint.clone(),
                self.headers.clone(),
                token,
                body.clone(),
            )
        });
        let reason = match tokio::time::timeout(POST_TIMEOUT, exchange).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {} s", POST_TIMEOUT.as_secs()),
        };
        let reason = crate::text::without_url_secrets(&reason).into_owned();
        let shown = crate::text::without_url_secrets(self.endpoint.as_str()).into_owned();
        tracing::warn!(server = %self.server, endpoint = %shown, %reason, "a POST to the server failed; the connection is broken");
        self.broken.set();
        Err(SseError::Post {
            endpoint: self.endpoint.to_string(),
            reason,
        })
    }
}

/// Set once the connection is broken or closed; wakes the reader.
#[derive(Default)]
struct Broken {
    set: AtomicBool,
    /// Only `receive` waits: a permit stored by `notify_one` before it waits is not lost.
    notify: Notify,
}

impl Broken {
    fn set(&self) {
        self.set.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    async fn wait(&self) {
        while !self.is_set() {
            self.notify.notified().await;
        }
    }
}

/// Puts the POSTs in the order the client sent their messages. rmcp runs each send as a task of
/// its own, and one JSON-RPC connection keeps its order: a server must see `initialized` before
/// the requests after it, and a cancellation after its request.
#[derive(Default)]
struct Order {
    turns: Mutex<Turns>,
    changed: Notify,
}

#[derive(Default)]
struct Turns {
    /// Turns handed out so far.
    issued: u64,
    /// The turn whose message may be posted now.
    current: u64,
    /// Turns given up before they came (their send was dropped): skipped when they come.
    given_up: BTreeSet<u64>,
}

impl Order {
    /// The next turn.
    fn take(self: &Arc<Self>) -> Turn {
        let mut turns = lock(&self.turns);
        let number = turns.issued;
        turns.issued += 1;
        Turn {
            number,
            order: Arc::clone(self),
        }
    }

    /// Waits until fewer than `max` messages are waiting for their turn or being posted.
    async fn room(&self, max: u64) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the turns are read, so a change in between is not missed.
            changed.as_mut().enable();
            {
                let turns = lock(&self.turns);
                if turns.issued.saturating_sub(turns.current) < max {
                    return;
                }
            }
            changed.await;
        }
    }
}

/// A message's place in the order; the next one's turn comes when this is dropped.
struct Turn {
    number: u64,
    order: Arc<Order>,
}

impl Turn {
    /// Waits until every message before this one was posted or given up.
    async fn wait(&self) {
        loop {
            let changed = self.order.changed.notified();
            tokio::pin!(changed);
            // Registered before the turn is read, so a change in between is not missed.
            changed.as_mut().enable();
            if lock(&self.order.turns).current == self.number {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut turns = lock(&self.order.turns);
        if turns.current == self.number {
            turns.current += 1;
            loop {
                let next = turns.current;
                if !turns.given_up.remove(&next) {
                    break;
                }
                turns.current += 1;
            }
        } else {
            turns.given_up.insert(self.number);
        }
        drop(turns);
        self.order.changed.notify_waiters();
    }
}

/// The GET that opens the stream.
async fn open_stream(
    http: reqwest::Client,
    url: Url,
    mut headers: HeaderMap,
    token: Option<String>,
) -> HttpResult<reqwest::Response> {
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static(EVENT_STREAM_MIME_TYPE),
    );
    let mut request = http.get(url).headers(headers);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = checked(request.send().await?)?;
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    match &content_type {
        Some(ct) if is_event_stream(ct) => Ok(response),
        _ => Err(StreamableHttpError::UnexpectedContentType(content_type)),
    }
}

/// The POST of one message.
async fn post_message(
    http: reqwest::Client,
    endpoint: Url,
    mut headers: HeaderMap,
    token: Option<String>,
    body: Bytes,
) -> HttpResult<()> {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let mut request = http.post(endpoint).headers(headers).body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    // The body (`Accepted`, usually) says nothing; it is dropped unread.
    checked(request.send().await?)?;
    Ok(())
}

const EVENT_STREAM_MIME_TYPE: &str = "text/event-stream";

/// Whether a `Content-Type` is `text/event-stream`, whatever its parameters.
fn is_event_stream(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(EVENT_STREAM_MIME_TYPE))
}

/// The response if it succeeded; else its status, or the authorization it asks for in the
/// terms [`OAuthHttp`] answers (as rmcp's own client reports them).
fn checked(response: reqwest::Response) -> HttpResult<reqwest::Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let challenge = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Err(match (status, challenge) {
        (StatusCode::UNAUTHORIZED, Some(challenge)) => {
            StreamableHttpError::AuthRequired(AuthRequiredError::new(challenge))
        }
        (StatusCode::FORBIDDEN, Some(challenge)) => {
            let scope = challenge_scope(&challenge);
            StreamableHttpError::InsufficientScope(InsufficientScopeError::new(challenge, scope))
        }
        _ => StreamableHttpError::HttpStatus(HttpStatusError::new(status.as_u16(), None)),
    })
}

/// The `scope` parameter of a `WWW-Authenticate` challenge, quoted or not.
fn challenge_scope(challenge: &str) -> Option<String> {
    let at = challenge.to_ascii_lowercase().find("scope=")?;
    let value = &challenge[at + "scope=".len()..];
    let scope = match value.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => value
            .split(|c: char| c == ',' || c.is_whitespace())
            .next()
            .unwrap_or_default(),
    };
    (!scope.is_empty()).then(|| scope.to_owned())
}

#[cfg(test)]
mod tests;
