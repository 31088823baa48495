//! The tool seam: [`ToolHost`], the MCP servers of one session as the driver reaches them, the
//! hook calls it makes through it ([`HookCall`]), and the transports a host's servers run on
//! ([`TransportKind`]). `mcp::McpHost` (feature `mcp`) implements it on real servers.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::hooks::{Hook, ServerName};
use crate::machine::{Catalog, HookContext, HookReply, ToolCall, ToolOutput};
use crate::ports::Person;

/// The transport one life of a server runs on (`McpHost::transport`, feature `mcp`).
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
    /// The round's timeout, which the driver enforces: at the deadline it drops the call
    /// (see [`ToolHost`] on dropped calls) and answers [`HookReply::TimedOut`] for it. A host
    /// need not enforce it; one that passes the call on (a shell command, a proxy) may pass it
    /// on too.
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

    /// Calls one hook on one server with the call's arguments (`{}` for most hooks).
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
