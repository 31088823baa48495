//! The HTTP side both providers share: one POST of a JSON body, bounded in time and size, with
//! retries on the failures that retrying can fix; the answer read whole, or streamed as
//! server-sent events with a first-byte and an idle timeout and a generous whole-reply
//! deadline, decoded a slice at a time so other tasks on the thread keep running.

use std::error::Error as _;
use std::fmt;
use std::time::{Duration, SystemTime};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use reqwest::{StatusCode, Url};

use crate::llm::OnDelta;
use crate::llm::assemble::{Assembler, Decoder};
use crate::llm::body::RequestBody;
use crate::llm::limits::{DECODE_SLICE_BYTES, ReplyLimits};
use crate::llm::{LlmError, LlmRequest, Parsed};
use crate::machine::LlmReply;
use crate::text::{Cut, cut};

/// The most bytes of an answer the client reads; a longer one is an error.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// The most characters of an error answer quoted in an [`LlmError`].
pub const MAX_ERROR_CHARS: usize = 512;

/// An API key. Its `Debug` and `Display` never show it, so it cannot leak into logs or errors.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// When and how often a failed request is tried again.
///
/// Retried: HTTP 408, 429 and 5xx, and failures to connect, send or read the answer. Not
/// retried: other statuses (the request itself is wrong), an answer that is not valid, and a
/// timeout (retrying would multiply the wait the timeout bounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt. Default: 3.
    pub max_retries: u32,
    /// The backoff before the first retry; it doubles with each retry. Default: 500 ms.
    pub initial_backoff: Duration,
    /// The longest backoff. Default: 8 s.
    pub max_backoff: Duration,
    /// The longest wait a `Retry-After` header may ask for; a longer one ends the retries,
    /// since the provider said no useful answer comes sooner. Default: 60 s.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based): exponential, with "equal jitter" (half
    /// fixed, half random) so that clients failing together do not retry together, while the
    /// wait never drops to zero.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(retry.saturating_sub(1)))
            .min(self.max_backoff);
        let half = exp / 2;
        let jitter_ns = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(fastrand::u64(0..=jitter_ns))
    }
}

/// Where and how a provider is reached. Both clients take one.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The base URL; the provider appends its path (`/chat/completions`, `/v1/messages`).
    pub base_url: Url,
    /// Sent as the provider's credential header when set.
    pub api_key: Option<ApiKey>,
    /// Bounds each attempt that is not streamed, from sending to the answer's last byte.
    /// Default: 120 s.
    pub timeout: Duration,
    /// When failed attempts are tried again.
    pub retry: RetryPolicy,
    /// Whether replies are streamed (server-sent events). Default: yes.
    pub stream: bool,
    /// A streamed attempt: from sending to the answer's first byte. Default: 60 s.
    pub first_byte_timeout: Duration,
    /// A streamed attempt: the longest silence between two pieces of the answer, after the
    /// first. Default: 60 s.
    pub idle_timeout: Duration,
    /// A streamed attempt: from sending to the reply's end. Generous, so a long reply that
    /// keeps coming completes, while one that sends keep-alives or trickles bytes forever
    /// ends with [`LlmError::ReplyDeadline`]. Default: 30 min.
    pub reply_timeout: Duration,
    /// What one reply may hold; past a cap it is refused whole.
    pub limits: ReplyLimits,
}

impl Endpoint {
    /// The default request timeout.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

    /// The default first-byte and idle timeouts of a streamed request.
    pub const DEFAULT_STREAM_TIMEOUT: Duration = Duration::from_secs(60);

    /// The default whole-reply deadline of a streamed request.
    pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(30 * 60);

    /// An endpoint at `base_url` with no key and the default timeout and retries.
    pub fn new(base_url: Url) -> Self {
        Self {
            base_url,
            api_key: None,
            timeout: Self::DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            stream: true,
            first_byte_timeout: Self::DEFAULT_STREAM_TIMEOUT,
            idle_timeout: Self::DEFAULT_STREAM_TIMEOUT,
            reply_timeout: Self::DEFAULT_REPLY_TIMEOUT,
            limits: ReplyLimits::default(),
        }
    }

    /// Parses `base_url` first; see [`new`](Self::new).
    pub fn parse(base_url: &str) -> Result<Self, LlmError> {
        Ok(Self::new(parse_base_url(base_url)?))
    }

    /// The same endpoint with this key.
    #[must_use]
    pub fn api_key(mut self, key: ApiKey) -> Self {
        self.api_key = Some(key);
        self
    }

    /// The same endpoint with this timeout per attempt.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same endpoint with this retry policy.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The same endpoint, streaming replies or not.
    #[must_use]
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// The same endpoint with these first-byte and idle timeouts for streamed replies.
    #[must_use]
    pub fn stream_timeouts(mut self, first_byte: Duration, idle: Duration) -> Self {
        self.first_byte_timeout = first_byte;
        self.idle_timeout = idle;
        self
    }

    /// The same endpoint with this whole-reply deadline for streamed replies.
    #[must_use]
    pub fn reply_timeout(mut self, timeout: Duration) -> Self {
        self.reply_timeout = timeout;
        self
    }

    /// The same endpoint with these caps on one reply.
    #[must_use]
    pub fn limits(mut self, limits: ReplyLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// What a dialect gives the transport to read its replies.
pub(crate) struct Wire {
    /// The fields a request streams with, first in its body.
    pub(crate) stream_fields: &'static str,
    /// Parses a whole answer.
    pub(crate) parse: fn(&[u8]) -> Result<Parsed, LlmError>,
    /// Makes the decoder of one streamed reply.
    pub(crate) decoder: fn(ReplyLimits) -> Box<dyn Decoder>,
}

/// Parses a base URL: absolute, `http` or `https`, without query or fragment.
pub(crate) fn parse_base_url(text: &str) -> Result<Url, LlmError> {
    let url = Url::parse(text.trim())
        .map_err(|e| LlmError::Other(format!("invalid base URL {text:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LlmError::Other(format!(
            "invalid base URL {text:?}: the scheme must be http or https"
        )));
    }
    if url.query().is_some() || url.fragment().is_some() || url.cannot_be_a_base() {
        return Err(LlmError::Other(format!(
            "invalid base URL {text:?}: expected scheme, host and path only"
        )));
    }
    Ok(url)
}

/// One provider's HTTP client: a URL, fixed headers, and the limits.
pub(crate) struct Transport {
    client: reqwest::Client,
    url: Url,
    /// The URL as errors show it: without a password, should the base URL carry one.
    shown_url: String,
    /// The key, to scrub from error answers: some providers quote the key they refused.
    secret: Option<String>,
    headers: HeaderMap,
    timeout: Duration,
    retry: RetryPolicy,
    stream: bool,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
    reply_timeout: Duration,
    limits: ReplyLimits,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The headers hold the key: left out on purpose.
        f.debug_struct("Transport")
            .field("url", &self.shown_url)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// A client that POSTs to `path` under the endpoint's base URL. `auth` turns the key into
    /// the provider's credential header; `extra` are fixed headers of the dialect.
    pub(crate) fn new(
        endpoint: &Endpoint,
        path: &str,
        auth: impl FnOnce(&str) -> (HeaderName, String),
        extra: &[(HeaderName, &'static str)],
    ) -> Result<Self, LlmError> {
        let mut url = endpoint.base_url.clone();
        let joined = format!("{}/{}", url.path().trim_end_matches('/'), path);
        url.set_path(&joined);

        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("hookloop/", env!("CARGO_PKG_VERSION"))),
        );
        for (name, value) in extra {
            headers.insert(name.clone(), HeaderValue::from_static(value));
        }
        if let Some(key) = &endpoint.api_key {
            let (name, value) = auth(key.expose());
            // Never echo the value: the error names the header only.
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                LlmError::Other(format!(
                    "the API key cannot be sent in the {name} header: it has characters \
                     not allowed there"
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }

        crate::tls::install_provider();
        let client = reqwest::Client::builder()
            // A redirect to another host would carry the key along; providers do not redirect.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(endpoint.timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| LlmError::Other(format!("cannot build the HTTP client: {}", chain(&e))))?;
        let mut shown = url.clone();
        if shown.password().is_some() {
            // Only fails for URLs that cannot have a password, and this one has one.
            let _ = shown.set_password(Some("redacted"));
        }
        Ok(Self {
            client,
            shown_url: shown.to_string(),
            url,
            secret: endpoint.api_key.as_ref().map(|k| k.expose().to_owned()),
            headers,
            timeout: endpoint.timeout,
            retry: endpoint.retry,
            stream: endpoint.stream,
            first_byte_timeout: endpoint.first_byte_timeout,
            idle_timeout: endpoint.idle_timeout,
            reply_timeout: endpoint.reply_timeout,
            limits: endpoint.limits,
        })
    }

    /// The URL requests go to, as errors show it.
    pub(crate) fn url(&self) -> &str {
        &self.shown_url
    }

    /// One reply to `request`, in the dialect `wire` reads: streamed when the endpoint
    /// streams (the body `encode` makes with the dialect's stream fields), else whole. The one
    /// way both providers ask.
    pub(crate) async fn reply(
        &self,
        model: &str,
        request: &LlmRequest<'_>,
        wire: &Wire,
        encode: impl FnOnce(Option<&str>) -> Result<RequestBody, LlmError>,
        on_delta: &mut OnDelta<'_>,
    ) -> Result<LlmReply, LlmError> {
        let parsed = if self.stream {
            let body = encode(Some(wire.stream_fields))?;
            self.exchange_stream(model, request, body, wire.parse, wire.decoder, on_delta)
                .await?
        } else {
            let body = encode(None)?;
            self.exchange(model, request, body, wire.parse).await?
        };
        crate::telemetry::response_model(parsed.model.as_deref());
        Ok(parsed.reply)
    }

    /// POSTs `body` and returns the answer's bytes, retrying per the policy.
    /// Sends one request body and parses the answer: the exchange both dialects share, with
    /// the bodies logged only at `trace`.
    async fn exchange(
        &self,
        model: &str,
        request: &LlmRequest<'_>,
        body: RequestBody,
        parse: fn(&[u8]) -> Result<Parsed, LlmError>,
    ) -> Result<Parsed, LlmError> {
        tracing::debug!(
            model,
            purpose = ?request.purpose,
            messages = request.messages.len(),
            bytes = body.len(),
            "model request"
        );
        tracing::trace!(body = %body, "request body");
        let answer = self.post(body).await?;
        tracing::trace!(body = %String::from_utf8_lossy(&answer), "answer body");
        let parsed = parse(&answer)?;
        self.limits.check(&parsed.reply)?;
        Ok(parsed)
    }

    async fn post(&self, body: RequestBody) -> Result<Vec<u8>, LlmError> {
        let mut retries = 0;
        loop {
            let failure = match self.attempt(body.to_reqwest()).await {
                Ok(answer) => return Ok(answer),
                Err(failure) => failure,
            };
            let wait = self.retry_wait(failure, &mut retries)?;
            tokio::time::sleep(wait).await;
        }
    }

    /// Sends one request body asking for a stream and assembles the reply with the decoder
    /// `decoder` makes (one per attempt), handing each delta to `on_delta` as it arrives. A
    /// server that answers whole instead (it ignored `stream`) is parsed with `parse`.
    ///
    /// A stream that breaks before any of the reply arrived is retried like a failed request;
    /// one that breaks after is a failure: a half-reply is never taken as complete.
    async fn exchange_stream(
        &self,
        model: &str,
        request: &LlmRequest<'_>,
        body: RequestBody,
        parse: fn(&[u8]) -> Result<Parsed, LlmError>,
        decoder: fn(ReplyLimits) -> Box<dyn Decoder>,
        on_delta: &mut OnDelta<'_>,
    ) -> Result<Parsed, LlmError> {
        tracing::debug!(
            model,
            purpose = ?request.purpose,
            messages = request.messages.len(),
            bytes = body.len(),
            "model request, streamed"
        );
        tracing::trace!(body = %body, "request body");
        let mut retries = 0;
        loop {
            let failure = match self
                .attempt_stream(body.to_reqwest(), parse, decoder(self.limits), on_delta)
                .await
            {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            let wait = self.retry_wait(failure, &mut retries)?;
            tokio::time::sleep(wait).await;
        }
    }

    /// The wait before the next attempt after `failure`, or the error to give up with.
    fn retry_wait(&self, failure: Failure, retries: &mut u32) -> Result<Duration, LlmError> {
        let wait = match failure.retry {
            Retry::No => return Err(failure.error),
            Retry::Yes { .. } if *retries >= self.retry.max_retries => {
                return Err(failure.error);
            }
            Retry::Yes { after: Some(after) } if after > self.retry.max_retry_after => {
                tracing::warn!(
                    error = %failure.error,
                    retry_after_ms = after.as_millis(),
                    "the provider asked to wait longer than allowed; not retrying"
                );
                return Err(failure.error);
            }
            Retry::Yes { after } => {
                *retries += 1;
                after.unwrap_or_else(|| self.retry.backoff(*retries))
            }
        };
        tracing::warn!(
            error = %failure.error,
            retry = *retries,
            of = self.retry.max_retries,
            wait_ms = wait.as_millis(),
            "model request failed; retrying"
        );
        Ok(wait)
    }

    async fn attempt_stream(
        &self,
        body: reqwest::Body,
        parse: fn(&[u8]) -> Result<Parsed, LlmError>,
        decoder: Box<dyn Decoder>,
        on_delta: &mut OnDelta<'_>,
    ) -> Result<Parsed, Failure> {
        let fail = |error: LlmError| Failure {
            error,
            retry: Retry::No,
        };
        let sent_at = tokio::time::Instant::now();
        let first_byte = sent_at + self.first_byte_timeout;
        let reply_deadline = sent_at + self.reply_timeout;
        let timed_out = |limit: Duration| {
            fail(LlmError::Timeout {
                secs: limit.as_secs_f64().ceil() as u64,
            })
        };
        let sent = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body)
            .send();
        let mut response = match tokio::time::timeout_at(first_byte, sent).await {
            Err(_) => return Err(timed_out(self.first_byte_timeout)),
            Ok(Err(e)) => return Err(self.transport_failure(e)),
            Ok(Ok(response)) => response,
        };
        if !response.status().is_success() {
            return Err(self.status_failure(response).await);
        }
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !is_stream {
            // A server that ignores `stream` answers whole, within the whole-answer timeout.
            let answer =
                tokio::time::timeout(self.timeout, self.read_capped(response, MAX_RESPONSE_BYTES))
                    .await
                    .map_err(|_| timed_out(self.timeout))??;
            tracing::trace!(body = %String::from_utf8_lossy(&answer), "answer body");
            let parsed = parse(&answer).map_err(fail)?;
            self.limits.check(&parsed.reply).map_err(fail)?;
            return Ok(parsed);
        }
        let mut decoder = Assembler::new(decoder, self.limits);
        let mut read = 0usize;
        let mut since_yield = 0usize;
        let mut first = true;
        while !decoder.complete() {
            let (wait_until, idle) = if first {
                (first_byte, false)
            } else {
                (tokio::time::Instant::now() + self.idle_timeout, true)
            };
            let past_deadline = wait_until >= reply_deadline;
            let next =
                tokio::time::timeout_at(wait_until.min(reply_deadline), response.chunk()).await;
            let chunk = match next {
                Err(_) if past_deadline => {
                    return Err(fail(LlmError::ReplyDeadline {
                        secs: self.reply_timeout.as_secs_f64().ceil() as u64,
                    }));
                }
                Err(_) if !idle => return Err(timed_out(self.first_byte_timeout)),
                Err(_) => return Err(timed_out(self.idle_timeout)),
                Ok(Err(e)) if decoder.has_content() => {
                    return Err(fail(LlmError::Transport(format!(
                        "{}: the stream broke after the reply had begun; the partial reply is \
                         not used: {}",
                        self.shown_url,
                        chain(&e.without_url())
                    ))));
                }
                Ok(Err(e)) => return Err(self.transport_failure(e)),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) => chunk,
            };
            first = false;
            read += chunk.len();
            if read > MAX_RESPONSE_BYTES {
                return Err(fail(LlmError::InvalidResponse(format!(
                    "the streamed answer is over the limit of {MAX_RESPONSE_BYTES} bytes"
                ))));
            }
            tracing::trace!(chunk = %String::from_utf8_lossy(&chunk), "answer chunk");
            // At most a slice is decoded per poll: the runtime's other tasks (the other
            // sessions of `hookloop acp`, which share one thread) run once a slice's worth has
            // been decoded, however much the chunks hold. A slice completes at most one event
            // larger than itself, and an event's size is capped, so the longest stretch
            // without a yield is bounded. Small chunks, the usual case, add up to a slice
            // before a yield, so a yield is not paid per chunk.
            for slice in chunk.chunks(DECODE_SLICE_BYTES) {
                decoder.feed(slice, on_delta).map_err(fail)?;
                if decoder.complete() {
                    break;
                }
                since_yield += slice.len();
                if since_yield >= DECODE_SLICE_BYTES {
                    since_yield = 0;
                    tokio::task::yield_now().await;
                }
            }
        }
        if !decoder.complete() && !decoder.ended_complete() {
            let error = LlmError::Transport(format!(
                "{}: the stream ended before the reply was complete{}",
                self.shown_url,
                if decoder.has_content() {
                    "; the partial reply is not used"
                } else {
                    ""
                }
            ));
            let retry = if decoder.has_content() {
                Retry::No
            } else {
                Retry::Yes { after: None }
            };
            return Err(Failure { error, retry });
        }
        decoder.finish().map_err(fail)
    }

    async fn attempt(&self, body: reqwest::Body) -> Result<Vec<u8>, Failure> {
        let send = async {
            let response = self
                .client
                .post(self.url.clone())
                .headers(self.headers.clone())
                .body(body)
                .send()
                .await
                .map_err(|e| self.transport_failure(e))?;
            let status = response.status();
            if status.is_success() {
                return self.read_capped(response, MAX_RESPONSE_BYTES).await;
            }
            Err(self.status_failure(response).await)
        };
        match tokio::time::timeout(self.timeout, send).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure {
                error: LlmError::Timeout {
                    secs: self.timeout.as_secs_f64().ceil() as u64,
                },
                retry: Retry::No,
            }),
        }
    }
}

impl Transport {
    /// An error status: its message, and whether another try may succeed.
    async fn status_failure(&self, response: reqwest::Response) -> Failure {
        let status = response.status();
        let after = retry_after(response.headers(), SystemTime::now());
        let text = read_prefix(response, ERROR_BODY_BYTES).await;
        let message = error_message(&text, self.secret.as_deref());
        let error = LlmError::Status {
            status: status.as_u16(),
            message,
        };
        let retry = if retryable(status) {
            Retry::Yes { after }
        } else {
            Retry::No
        };
        Failure { error, retry }
    }

    /// The connection could not be made, or broke: worth another try.
    fn transport_failure(&self, error: reqwest::Error) -> Failure {
        let retry = if error.is_builder() {
            Retry::No
        } else {
            Retry::Yes { after: None }
        };
        Failure {
            error: LlmError::Transport(format!(
                "{}: {}",
                self.shown_url,
                chain(&error.without_url())
            )),
            retry,
        }
    }

    /// Reads an answer's body, refusing more than `cap` bytes without reading them all.
    async fn read_capped(
        &self,
        mut response: reqwest::Response,
        cap: usize,
    ) -> Result<Vec<u8>, Failure> {
        let too_large = |len: u64| Failure {
            error: LlmError::InvalidResponse(format!(
                "the answer is {len} bytes or more, over the limit of {cap} bytes"
            )),
            retry: Retry::No,
        };
        let declared = response.content_length();
        if let Some(len) = declared.filter(|&len| len > cap as u64) {
            return Err(too_large(len));
        }
        let mut body = Vec::with_capacity(declared.map_or(0, |len| len as usize));
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport_failure(e))?
        {
            if body.len() + chunk.len() > cap {
                return Err(too_large((body.len() + chunk.len()) as u64));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// The most bytes of an error answer read: it is only quoted, truncated.
const ERROR_BODY_BYTES: usize = 64 * 1024;

/// Up to `cap` bytes of an answer's body; whatever arrived if the transfer breaks, since the
/// status alone is still worth reporting.
async fn read_prefix(mut response: reqwest::Response, cap: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < cap {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = cap - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}

/// A failed attempt and whether another may succeed.
struct Failure {
    error: LlmError,
    retry: Retry,
}

enum Retry {
    No,
    /// Worth another try, after the wait the provider asked for, if it did.
    Yes {
        after: Option<Duration>,
    },
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// How long the provider asked the client to wait: `retry-after-ms` (OpenAI), else
/// `retry-after` in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // `try_from`: the header is the peer's; a huge, negative or NaN value must not panic.
    if let Some(wait) = header("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
    {
        return Some(wait);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The message of an error answer: the provider's own `error.message` when the body is the
/// usual JSON, else the body's text; with `secret` (the key) scrubbed, then truncated. Scrubbed
/// first: a key that straddled the cut would otherwise leave its prefix in the message.
pub(crate) fn error_message(body: &[u8], secret: Option<&str>) -> String {
    let parsed: Option<String> = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let error = v.get("error")?;
            match error {
                serde_json::Value::String(s) => Some(s.clone()),
                other => other.get("message")?.as_str().map(str::to_owned),
            }
        });
    let mut text = parsed.unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    if let Some(secret) = secret.filter(|s| !s.is_empty()) {
        text = text.replace(secret, "[redacted]");
    }
    if text.is_empty() {
        return "(empty answer)".to_owned();
    }
    cut(&text, MAX_ERROR_CHARS, Cut::Chars { total: true })
}

/// An error and its causes on one line: reqwest's own message alone rarely says what failed.
fn chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "250")]), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", " 2 ")]), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1.5")]), now),
            Some(Duration::from_millis(1500))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &later)]), now),
            Some(Duration::from_secs(30))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &earlier)]), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1e300")]), now),
            None
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "NaN")]), now), None);
        assert_eq!(
            retry_after(
                &headers(&[("retry-after-ms", "inf"), ("retry-after", "3")]),
                now
            ),
            Some(Duration::from_secs(3))
        );
        assert_eq!(retry_after(&headers(&[]), now), None);
    }

    #[test]
    fn backoff_doubles_within_its_bounds_and_never_reaches_zero() {
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
            ..RetryPolicy::default()
        };
        for _ in 0..200 {
            let first = policy.backoff(1);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let second = policy.backoff(2);
            assert!(second >= Duration::from_millis(100) && second <= Duration::from_millis(200));
            let capped = policy.backoff(30);
            assert!(capped >= Duration::from_millis(150) && capped <= Duration::from_millis(300));
        }
    }

    #[test]
    fn error_messages_prefer_the_providers_message_and_are_truncated() {
        assert_eq!(
            error_message(
                br#"{"error":{"message":"bad model","type":"invalid_request_error"}}"#,
                None
            ),
            "bad model"
        );
        assert_eq!(
            error_message(
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                None
            ),
            "Overloaded"
        );
        assert_eq!(error_message(br#"{"error":"plain"}"#, None), "plain");
        assert_eq!(
            error_message(b"  <html>oops</html> ", None),
            "<html>oops</html>"
        );
        assert_eq!(error_message(b"", None), "(empty answer)");
        let long = "é".repeat(2000);
        let cut = error_message(long.as_bytes(), None);
        assert!(cut.starts_with(&"é".repeat(MAX_ERROR_CHARS)));
        assert!(cut.ends_with("… (4000 bytes in all)"), "{cut}");
    }

    #[test]
    fn a_key_across_the_cut_is_scrubbed_before_the_message_is_cut() {
        let key = "sk-live-0123456789abcdef";
        // The key starts a few characters before the cut: scrubbing after cutting would
        // find no whole key and leave its prefix.
        let body = format!("{}{key} is not valid", "x".repeat(MAX_ERROR_CHARS - 6));
        let message = error_message(body.as_bytes(), Some(key));
        assert!(!message.contains("sk-liv"), "{message}");
        assert!(
            message.starts_with(&"x".repeat(MAX_ERROR_CHARS - 6)),
            "{message}"
        );
        assert!(
            message[MAX_ERROR_CHARS - 6..].starts_with("[redac"),
            "{message}"
        );
    }

    #[test]
    fn base_urls_must_be_http_with_a_host() {
        assert!(parse_base_url("https://api.openai.com/v1").is_ok());
        assert!(parse_base_url("http://127.0.0.1:11434/v1/").is_ok());
        for bad in ["ftp://x", "not a url", "https://x/v1?key=1", "mailto:a@b"] {
            let err = parse_base_url(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn paths_join_the_base_url_with_one_slash() {
        for base in ["http://h/v1", "http://h/v1/"] {
            let endpoint = Endpoint::parse(base).unwrap();
            let transport =
                Transport::new(&endpoint, "chat/completions", |_| unreachable!(), &[]).unwrap();
            assert_eq!(transport.url(), "http://h/v1/chat/completions");
        }
        let endpoint = Endpoint::parse("http://h").unwrap();
        let transport = Transport::new(&endpoint, "v1/messages", |_| unreachable!(), &[]).unwrap();
        assert_eq!(transport.url(), "http://h/v1/messages");
    }

    #[test]
    fn a_password_in_the_base_url_never_shows_in_errors() {
        let endpoint = Endpoint::parse("http://user:hunter2@h/v1").unwrap();
        let transport = Transport::new(&endpoint, "x", |_| unreachable!(), &[]).unwrap();
        assert_eq!(transport.shown_url, "http://user:redacted@h/v1/x");
        assert!(!format!("{transport:?}").contains("hunter2"));
    }

    #[test]
    fn keys_never_show_in_debug_output() {
        let key = ApiKey::new("sk-secret");
        assert!(!format!("{key:?}").contains("secret"));
        let endpoint = Endpoint::parse("http://h").unwrap().api_key(key);
        assert!(!format!("{endpoint:?}").contains("secret"));
        let transport = Transport::new(
            &endpoint,
            "x",
            |key| (HeaderName::from_static("x-api-key"), key.to_owned()),
            &[],
        )
        .unwrap();
        assert!(!format!("{transport:?}").contains("secret"));
        let bad = Endpoint::parse("http://h")
            .unwrap()
            .api_key(ApiKey::new("sk-secret\nnewline"));
        let err = Transport::new(
            &bad,
            "x",
            |key| (HeaderName::from_static("x-api-key"), key.to_owned()),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(!err.contains("secret"), "{err}");
    }
}
