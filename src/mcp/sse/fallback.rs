//! The specification's way for a client to reach a server of either HTTP transport at one URL
//! (2025-03-26 on, "Backwards compatibility"; 2026-07-28, "HTTP+SSE Transport (2024-11-05)"):
//! POST a request to the URL; if that fails with `400 Bad Request`, `404 Not Found` or `405
//! Method Not Allowed` and the body is not a JSON-RPC error of a modern server, GET the URL
//! expecting an SSE stream whose first event is `endpoint`, and use the old transport.
//!
//! rmcp's streamable client makes that POST, but reports a `4xx` answer to it only in the text
//! of an error ([`StreamableHttpError::UnexpectedServerResponse`]); it reports `429` and `5xx`
//! structurally ([`StreamableHttpError::HttpStatus`]). So when rmcp says the server answered
//! the `initialize` POST unexpectedly, [`probe`] POSTs an `initialize` once more and reads the
//! status itself, rather than guess it from rmcp's words.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};
use reqwest::Url;
use rmcp::model::ProtocolVersion;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

use super::{Client, checked};
use crate::mcp::auth::HttpResult;
use crate::mcp::config::HttpConfig;
use crate::net::body::read_prefix;

/// The most of a refusal's body read, to tell a modern server's JSON-RPC error from the page
/// of a server that has no such endpoint.
const MAX_REFUSAL_BODY: usize = 64 * 1024;

/// What a failed streamable-HTTP handshake says about the status the server answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// rmcp read the status.
    Status(u16),
    /// The server answered with something rmcp did not expect, and the status is not said.
    Unsaid,
}

/// The refusal in a failed handshake, when the failure was the server's answer to a POST.
pub(crate) fn refusal(error: &ClientInitializeError) -> Option<Refusal> {
    let error = match error {
        ClientInitializeError::TransportError { error, .. } => error,
        // `server/discover` was refused, then `initialize`: the second says what the server is.
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => return refusal(fallback),
        _ => return None,
    };
    match error
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()?
    {
        StreamableHttpError::HttpStatus(status) => Some(Refusal::Status(status.status)),
        StreamableHttpError::UnexpectedServerResponse(_) => Some(Refusal::Unsaid),
        _ => None,
    }
}

/// Whether a status answering the streamable POST sends the client to the HTTP+SSE transport.
/// 2025-03-26 and 2025-06-18 said any `4xx`; 2025-11-25 and 2026-07-28 name these three (the
/// others, `401` and `403` among them, are a modern server's answers).
pub(crate) fn calls_for_sse(status: u16) -> bool {
    matches!(status, 400 | 404 | 405)
}

/// POSTs an `initialize` request to `config.url` and returns the status when it calls for the
/// HTTP+SSE transport: `400`, `404` or `405` with a body that is no JSON-RPC error.
pub(crate) async fn probe(client: &Client, config: &HttpConfig) -> Result<Option<u16>, String> {
    let url = Url::parse(&config.url).map_err(|e| format!("{:?} is not a URL: {e}", config.url))?;
    let headers = config.header_map()?;
    let body = Bytes::from(initialize_request().to_string());
    client
        .send(|http, token| probe_once(http, url.clone(), headers.clone(), token, body.clone()))
        .await
        .map_err(|e| e.to_string())
}

async fn probe_once(
    http: reqwest::Client,
    url: Url,
    mut headers: HeaderMap,
    token: Option<String>,
    body: Bytes,
) -> HttpResult<Option<u16>> {
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let mut request = http.post(url).headers(headers).body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    if !calls_for_sse(status) {
        // An authorization challenge goes back to the OAuth client; any other answer, a
        // success too, says the URL is no endpoint of the old transport's kind.
        return checked(response).map(|_| None);
    }
    let body = read_prefix(response, MAX_REFUSAL_BODY).await;
    Ok((!is_json_rpc_error(&body)).then_some(status))
}

/// The `initialize` request of the probe: the newest version that has one, as rmcp's own.
fn initialize_request() -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": ProtocolVersion::LATEST_WITH_INITIALIZE.as_str(),
            "capabilities": {},
            "clientInfo": {"name": "hookloop", "version": env!("CARGO_PKG_VERSION")}
        }
    })
}

/// Whether `body` is a JSON-RPC error response: a modern server's refusal (an unsupported
/// version, an unknown method, a header that does not match), after which falling back would
/// hide the real problem. Every such error counts, not only the codes 2026-07-28 lists: a
/// server of the old transport answers with a page of its web framework, never with JSON-RPC.
fn is_json_rpc_error(body: &[u8]) -> bool {
    let Ok(serde_json::Value::Object(message)) = serde_json::from_slice(body) else {
        return false;
    };
    message.get("jsonrpc").and_then(serde_json::Value::as_str) == Some("2.0")
        && message
            .get("error")
            .is_some_and(serde_json::Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_400_404_and_405_call_for_the_old_transport() {
        for status in [400, 404, 405] {
            assert!(calls_for_sse(status), "{status}");
        }
        for status in [200, 202, 401, 403, 406, 415, 429, 500, 503] {
            assert!(!calls_for_sse(status), "{status}");
        }
    }

    #[test]
    fn a_json_rpc_error_is_a_modern_refusal_and_a_page_is_not() {
        assert!(is_json_rpc_error(
            br#"{"jsonrpc":"2.0","id":0,"error":{"code":-32602,"message":"Unsupported protocol version"}}"#
        ));
        assert!(is_json_rpc_error(
            br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#
        ));
        for page in [
            &b"Method Not Allowed"[..],
            b"<!DOCTYPE html><pre>Cannot POST /sse</pre>",
            b"",
            br#"{"detail":"Not Found"}"#,
        ] {
            assert!(
                !is_json_rpc_error(page),
                "{}",
                String::from_utf8_lossy(page)
            );
        }
    }
}
