//! The tool side: the [`ToolHost`] trait the driver calls to run tools and hooks, and
//! [`McpHost`], its implementation on real MCP servers (rmcp's client over child-process stdio,
//! streamable HTTP, and the HTTP+SSE transport of 2024-11-05).
//!
//! rmcp's types stay inside this module: the rest of the engine sees [`Catalog`],
//! [`ToolOutput`] and [`HookReply`] only.

#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod auth;
#[cfg(feature = "mcp")]
mod backlog;
#[cfg(feature = "mcp")]
mod child;
#[cfg(feature = "mcp")]
mod config;
#[cfg(feature = "mcp")]
mod convert;
mod elicit;
#[cfg(feature = "mcp")]
mod host;
#[cfg(feature = "mcp")]
mod options;
#[cfg(feature = "mcp")]
mod sse;
#[cfg(feature = "mcp")]
mod transport;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub use self::config::{CHILD_ENV_PASSTHROUGH, HttpConfig, McpServers, ServerConfig, StdioConfig};
pub use self::elicit::{
    Answer, ElicitAnswer, Elicitation, ElicitationMode, Nobody, Person, schema_defaults,
};
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub use self::host::{McpHost, StartupFailure};
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub use self::options::HostOptions;

use crate::hooks::{Hook, ServerName};
use crate::machine::{Catalog, HookContext, HookReply, ToolCall, ToolOutput};

/// The transport one life of a server runs on ([`McpHost::transport`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportKind {
    /// A child process's stdin and stdout.
    Stdio,
    /// Streamable HTTP (protocol 2025-03-26 on).
    StreamableHttp,
    /// HTTP+SSE, the transport of protocol 2024-11-05: configured as `sse`, or what an `http`
    /// server's URL turned out to speak.
    Sse,
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Stdio => "stdio",
            Self::StreamableHttp => "streamable HTTP",
            Self::Sse => "HTTP+SSE",
        })
    }
}

/// One hook call on one server, as the driver hands it to the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookCall {
    /// The server to call.
    pub server: ServerName,
    /// The hook to call.
    pub hook: Hook,
    /// Answer [`HookReply::TimedOut`] past this; the driver also stops waiting shortly after.
    pub timeout: Duration,
    /// Session facts the host may pass to the server (as `_meta`).
    pub context: HookContext,
    /// The call's arguments: `{}` for most hooks, what the hook is about for the others.
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

/// The MCP servers of one session.
///
/// Every future may be dropped at any await point (the user cancelled); implementations must
/// clean up after a dropped call (tell the server the request is cancelled) on their own.
pub trait ToolHost: Send + Sync {
    /// Changes whenever [`catalog`](Self::catalog) would return something new.
    fn catalog_generation(&self) -> u64;

    /// Every server's tools, hooks included, in server configuration order.
    fn catalog(&self) -> Catalog;

    /// Runs one tool call (qualified name). Failures of every kind come back as an error
    /// output the model can read, never as a panic or a hang past the host's own timeout.
    fn call_tool(&self, call: &ToolCall) -> impl Future<Output = ToolOutput> + Send;

    /// Calls one hook on one server with arguments `{}`.
    fn call_hook(&self, call: &HookCall) -> impl Future<Output = HookReply> + Send;

    /// Kills a server; it comes back if its supervision orders a restart.
    fn kill_server(&self, server: &ServerName) -> impl Future<Output = ()> + Send;

    /// Who answers the servers' questions (MCP elicitation) from now on; the front end's
    /// person. A host whose servers cannot ask ignores it.
    fn set_person(&self, _person: Arc<dyn Person>) {}

    /// The id hook calls carry as `_meta["hookloop/session"]` from now on: the front end's own
    /// name for the session (an ACP session id), so hook servers can relate their calls to the
    /// client's session. A host that sends no hooks ignores it.
    fn set_session_id(&self, _id: &str) {}

    /// The supervision facts and orders since the last call, oldest first, for the driver to
    /// show its observers (a transcript records them). None for a host without supervision.
    fn take_supervision(&self) -> Vec<crate::supervisor::Event> {
        Vec::new()
    }

    /// The restart policy of the host's supervisor, for transcript headers; `None` for a host
    /// without supervision.
    fn supervision_policy(&self) -> Option<crate::supervisor::SupervisorPolicy> {
        None
    }
}

/// Why the MCP host could not start, or could not reach a server.
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
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
    /// The servers offer more tools than the session allows.
    ///
    /// No longer produced: a server whose tools would bring the session past
    /// [`HostOptions::max_tools`] is left out like one that failed to start, a
    /// [`Startup`](Self::Startup) failure that names the count and the limit.
    #[deprecated(
        note = "never produced: a server over the tool limit fails to start (`McpError::Startup`)"
    )]
    #[error("the servers offer {count} tools, more than the limit of {max}")]
    TooManyTools {
        /// Tools offered.
        count: usize,
        /// The limit.
        max: usize,
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

#[cfg(feature = "mcp")]
fn list_failures(failures: &[StartupFailure]) -> String {
    failures
        .iter()
        .map(|f| f.error.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}
