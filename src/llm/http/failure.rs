//! What a failed attempt says and whether another may succeed: the statuses worth a retry, the
//! wait a provider asks for, and an error answer's message, scrubbed of the key and cut.

use std::error::Error as _;
use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use crate::ports::LlmError;
use crate::text::{Cut, cut};

/// The most characters of an error answer quoted in an [`LlmError`].
pub const MAX_ERROR_CHARS: usize = 512;

/// The most bytes of an error answer read: it is only quoted, truncated.
pub(super) const ERROR_BODY_BYTES: usize = 64 * 1024;

/// A failed attempt and whether another may succeed.
pub(super) struct Failure {
    /// What went wrong.
    pub(super) error: LlmError,
    /// Whether to try again.
    pub(super) retry: Retry,
}

/// Whether a failed attempt is worth another.
pub(super) enum Retry {
    /// Not worth another try: the request or the answer is wrong, or the time ran out.
    No,
    /// Worth another try.
    Yes {
        /// The wait the provider asked for, if it did.
        after: Option<Duration>,
    },
}

/// Whether an error status may clear on another try: a timeout, a rate limit, a server error.
pub(super) fn retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// How long the provider asked the client to wait: `retry-after-ms` (OpenAI), else
/// `retry-after` in seconds or as an HTTP date.
pub(super) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
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
pub(super) fn error_message(body: &[u8], secret: Option<&str>) -> String {
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
/// A URL a cause names keeps no query or user info.
pub(super) fn chain(error: &reqwest::Error) -> String {
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
    crate::text::without_url_secrets(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

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
}
