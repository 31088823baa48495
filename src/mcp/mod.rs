//! The tool side: the [`ToolHost`] trait the driver calls to run tools and hooks.

use std::future::Future;
use std::time::Duration;

use crate::hooks::{Hook, ServerName};
use crate::machine::{Catalog, HookContext, HookReply, ToolCall, ToolOutput};

/// One hook call on one server, as the driver hands it to the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookCall {
    pub server: ServerName,
    pub hook: Hook,
    /// Answer [`HookReply::TimedOut`] past this; the driver also stops waiting shortly after.
    pub timeout: Duration,
    /// Session facts the host may pass to the server (as `_meta`).
    pub context: HookContext,
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

    /// Kills a server; it may come back through a lazy restart.
    fn kill_server(&self, server: &ServerName) -> impl Future<Output = ()> + Send;
}
