//! The HTTP side both providers share: one POST of a JSON body, bounded in time and size, with
//! retries on the failures that retrying can fix; the answer read whole, or streamed as
//! server-sent events with a first-byte and an idle timeout and a generous whole-reply
//! deadline, decoded a slice at a time so other tasks on the thread keep running.

use std::fmt;
use std::time::{Duration, SystemTime};

use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT};

use self::failure::{
    ERROR_BODY_BYTES, Failure, Retry, chain, error_message, retry_after, retryable,
};
use crate::llm::Parsed;
use crate::llm::assemble::{Assembler, Decoder};
use crate::llm::body::RequestBody;
use crate::llm::limits::{DECODE_SLICE_BYTES, ReplyLimits};
use crate::machine::{LlmReply, LlmRequest};
use crate::net::body::{Unread, read_capped, read_prefix};
use crate::ports::{LlmError, OnDelta, ResponseFault};

mod endpoint;
mod failure;

pub(crate) use self::endpoint::parse_base_url;
pub use self::endpoint::{ApiKey, Endpoint, RetryPolicy};
pub use self::failure::MAX_ERROR_CHARS;

/// The most bytes of an answer the client reads; a longer one is an error.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// What a dialect gives the transport to read its replies.
pub(crate) struct Wire {
    /// The fields a request streams with, first in its body.
    pub(crate) stream_fields: &'static str,
    /// Parses a whole answer.
    pub(crate) parse: fn(&[u8]) -> Result<Parsed, LlmError>,
    /// Makes the decoder of one streamed reply.
    pub(crate) decoder: fn(ReplyLimits) -> Box<dyn Decoder>,
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

        let client = crate::net::tls::client_builder()
            .map_err(|e| LlmError::Other(format!("cannot build the HTTP client: {e}")))?
            // A redirect to another host would carry the key along; providers do not redirect.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(endpoint.timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| LlmError::Other(format!("cannot build the HTTP client: {}", chain(&e))))?;
        Ok(Self {
            client,
            // Errors and logs show the URL without its user info.
            shown_url: crate::text::without_url_secrets(url.as_str()).into_owned(),
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

    /// Sends one request body and parses the answer: the exchange both dialects share, with
    /// the bodies logged only at `trace`.
    async fn exchange(
        &self,
        model: &str,
        request: &LlmRequest<'_>,
        body: RequestBody,
        parse: fn(&[u8]) -> Result<Parsed, LlmError>,
    ) -> Result<Parsed, LlmError> {
        log_request(model, request, &body, false);
        let answer = self.post(body).await?;
        tracing::trace!(body = %String::from_utf8_lossy(&answer), "answer body");
        let parsed = parse(&answer)?;
        self.limits.check(&parsed.reply)?;
        Ok(parsed)
    }

    /// POSTs `body` and returns the answer's bytes, retrying per the policy.
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
        log_request(model, request, &body, true);
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
        let first_byte = later(sent_at, self.first_byte_timeout);
        let reply_deadline = later(sent_at, self.reply_timeout);
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
                (later(tokio::time::Instant::now(), self.idle_timeout), true)
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
                return Err(fail(LlmError::InvalidResponse(
                    ResponseFault::StreamTooLarge {
                        cap: MAX_RESPONSE_BYTES,
                    },
                )));
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
        response: reqwest::Response,
        cap: usize,
    ) -> Result<Vec<u8>, Failure> {
        read_capped(response, cap)
            .await
            .map_err(|unread| match unread {
                Unread::TooLarge { at_least } => Failure {
                    error: LlmError::InvalidResponse(ResponseFault::BodyTooLarge { at_least, cap }),
                    retry: Retry::No,
                },
                Unread::Broken(error) => self.transport_failure(error),
            })
    }
}

/// Logs a model request at `debug`, and its body only at `trace` (it holds the conversation).
fn log_request(model: &str, request: &LlmRequest<'_>, body: &RequestBody, streamed: bool) {
    tracing::debug!(
        model,
        purpose = ?request.purpose,
        messages = request.messages.len(),
        bytes = body.len(),
        streamed,
        "model request"
    );
    tracing::trace!(body = %body, "request body");
}

/// `at` plus `wait`, or a time past any deadline when the sum is past what a clock holds: a
/// timeout configured as `u64::MAX` seconds is "never", not a panic.
fn later(at: tokio::time::Instant, wait: Duration) -> tokio::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    at.checked_add(wait)
        .unwrap_or_else(|| at.checked_add(CENTURY).unwrap_or(at))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_timeout_at_the_end_of_u64_is_never_not_a_panic() {
        let now = tokio::time::Instant::now();
        assert!(later(now, Duration::from_secs(u64::MAX)) > now + Duration::from_secs(3600));
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
    }

    #[test]
    fn a_password_in_the_base_url_never_shows_in_errors() {
        let endpoint = Endpoint::parse("http://user:hunter2@h/v1").unwrap();
        let transport = Transport::new(&endpoint, "x", |_| unreachable!(), &[]).unwrap();
        assert_eq!(transport.shown_url, "http://h/v1/x");
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
