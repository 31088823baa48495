//! Plumbing the model providers and the MCP host share: the TLS provider of every HTTP client,
//! the reader of server-sent events, and bounded reads of an answer's body.

#[cfg(any(feature = "providers", feature = "mcp"))]
pub(crate) mod body;
#[cfg(any(feature = "providers", feature = "mcp"))]
pub(crate) mod sse;
pub(crate) mod tls;
