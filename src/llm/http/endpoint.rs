//! Where a provider is reached and how hard the client tries: the base URL, the key, the
//! timeouts, the retry policy and the reply limits an [`Endpoint`] holds.

use std::fmt;
use std::time::Duration;

use reqwest::Url;

use crate::llm::limits::ReplyLimits;
use crate::ports::LlmError;

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

/// Parses a base URL: absolute, `http` or `https`, without query or fragment.
pub(crate) fn parse_base_url(text: &str) -> Result<Url, LlmError> {
    // The refusal quotes the URL without what may be a credential in it.
    let shown = crate::text::without_url_secrets(text);
    let url = Url::parse(text.trim())
        .map_err(|e| LlmError::Other(format!("invalid base URL {shown:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LlmError::Other(format!(
            "invalid base URL {shown:?}: the scheme must be http or https"
        )));
    }
    if url.query().is_some() || url.fragment().is_some() || url.cannot_be_a_base() {
        return Err(LlmError::Other(format!(
            "invalid base URL {shown:?}: expected scheme, host and path only"
        )));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn base_urls_must_be_http_with_a_host() {
        assert!(parse_base_url("https://api.openai.com/v1").is_ok());
        assert!(parse_base_url("http://127.0.0.1:11434/v1/").is_ok());
        for bad in ["ftp://x", "not a url", "mailto:a@b"] {
            let err = parse_base_url(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
        // What may be a credential is not quoted back.
        for (bad, shown) in [
            ("https://x/v1?key=sk-1", "\"https://x/v1\""),
            ("https://u:pw@x/v1#sig=2", "\"https://x/v1\""),
        ] {
            let err = parse_base_url(bad).unwrap_err().to_string();
            assert!(err.contains(shown), "{err}");
            assert!(
                !err.contains("sk-1") && !err.contains("pw") && !err.contains("sig"),
                "{err}"
            );
        }
    }
}
