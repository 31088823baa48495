//! The MCP host (feature `mcp`): [`McpHost`], the implementation of
//! [`ToolHost`](crate::ToolHost) on real MCP servers (rmcp's client over child-process stdio,
//! streamable HTTP, and the HTTP+SSE transport of 2024-11-05).
//!
//! rmcp's types stay inside this module: the rest of the engine sees
//! [`Catalog`](crate::machine::Catalog), [`ToolOutput`](crate::machine::ToolOutput) and
//! [`HookReply`](crate::machine::HookReply) only.

pub mod auth;
mod backlog;
mod child;
#[cfg(feature = "command-hooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "command-hooks")))]
pub mod command_hooks;
mod config;
mod convert;
mod elicit;
mod host;
mod options;
mod sse;
mod transport;
#[cfg(feature = "mcp")]
mod visit;

pub use self::child::CHILD_ENV_PASSTHROUGH;
pub use self::config::{HttpConfig, McpServers, ServerConfig, StdioConfig};
pub use self::elicit::{Nobody, schema_defaults};
pub use self::host::{McpHost, StartupFailure};
pub use self::options::HostOptions;

use crate::hooks::ServerName;

/// Why the MCP host could not start, or could not reach a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server configuration is unusable.
    #[error("invalid mcp configuration: {0}")]
    Config(String),
    /// A server could not be started: spawn, connect, initialize or `tools/list` failed.
    #[error("server {server} failed to start: {reason}")]
    Startup {
        /// The server.
        server: ServerName,
        /// What failed.
        reason: String,
    },
    /// A server did not finish starting within the start-up timeout.
    #[error("server {server} did not start within {secs} s")]
    StartupTimeout {
        /// The server.
        server: ServerName,
        /// The start-up timeout, in seconds.
        secs: u64,
    },
    /// A server listed two tools under one qualified name.
    #[error("server {server} lists two tools named {tool:?} (both would be {qualified:?})")]
    DuplicateTool {
        /// The server.
        server: ServerName,
        /// The second tool's bare name.
        tool: String,
        /// The qualified name both would have.
        qualified: String,
    },
    /// Some servers failed to start and the embedder asked for all or nothing.
    #[error("{} of the servers failed to start: {}", failures.len(), list_failures(failures))]
    NotAllStarted {
        /// Each server that failed, with why.
        failures: Vec<StartupFailure>,
    },
    /// A server is gone: killed, crashed, or out of restarts.
    #[error("server {server} is unavailable: {reason}")]
    Unavailable {
        /// The server.
        server: ServerName,
        /// Why it is gone.
        reason: String,
    },
}

fn list_failures(failures: &[StartupFailure]) -> String {
    failures
        .iter()
        .map(|f| f.error.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}
