//! Asking the client before a destructive tool runs (`session/request_permission`).
//!
//! [`Gated`] wraps a session's tool host: a call to a tool its server marks
//! `destructiveHint: true` first asks the client, with four options (allow once, allow always,
//! reject once, reject always; "always" is remembered for the session). A rejected call does not
//! run: it is answered with an error result, as a denial is, and that answer is the
//! `tool_finished` fact the machine gets, so the decision is in the session's transcript. A
//! client that gives no decision (it cancelled the request, or answered with an error) rejects.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SessionId, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};

use super::lock;
use crate::hooks::{self, ServerName};
use crate::machine::{Catalog, HookReply, ToolCall, ToolOutput};
use crate::mcp::{HookCall, ToolHost};

/// Whether the agent asks before destructive tools run (`HOOKLOOP_ACP_PERMISSIONS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Permissions {
    /// Ask the client (the default).
    #[default]
    Ask,
    /// Never ask: every tool runs.
    Never,
}

impl Permissions {
    /// The variable the setting is read from.
    pub const VAR: &'static str = "HOOKLOOP_ACP_PERMISSIONS";

    /// `ask` or `never`.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "ask" => Some(Self::Ask),
            "never" => Some(Self::Never),
            _ => None,
        }
    }
}

/// The client's standing decisions for one session, by model-facing tool name.
#[derive(Default)]
struct Always {
    tools: HashMap<String, bool>,
}

/// A session's tool host, asking the client before destructive tools run. It asks nothing
/// until the agent has bound it to its session's client (as it does unless permissions are
/// off), so a [`SessionFactory`](super::SessionFactory) wraps its host before the session's id
/// exists.
pub struct Gated<H> {
    inner: H,
    asker: OnceLock<Asker>,
    always: Mutex<Always>,
}

/// How to reach the client of one session.
pub(super) struct Asker {
    pub(super) cx: ConnectionTo<Client>,
    pub(super) session: SessionId,
}

impl<H: ToolHost> Gated<H> {
    /// `inner`, not yet bound to a client.
    pub fn new(inner: H) -> Self {
        Self {
            inner,
            asker: OnceLock::new(),
            always: Mutex::new(Always::default()),
        }
    }

    /// The host it wraps.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// Asks through `asker` from now on. Binding twice keeps the first.
    pub(super) fn bind(&self, asker: Asker) {
        if self.asker.set(asker).is_err() {
            tracing::debug!("the permission gate was bound twice; keeping the first client");
        }
    }

    /// Whether the tool's server marks it destructive.
    fn destructive(&self, name: &str) -> bool {
        let Some((server, tool)) = hooks::split_qualified(name) else {
            return false;
        };
        self.inner
            .catalog()
            .servers
            .iter()
            .filter(|s| s.server.as_str() == server)
            .flat_map(|s| &s.tools)
            .any(|t| t.name == tool && t.hints.destructive == Some(true))
    }

    /// Asks the client about `call`: whether it may run.
    async fn allowed(&self, asker: &Asker, call: &ToolCall) -> bool {
        if let Some(&standing) = lock(&self.always).tools.get(&call.name) {
            return standing;
        }
        let options = [
            ("allow_once", "Allow once", PermissionOptionKind::AllowOnce),
            (
                "allow_always",
                "Always allow",
                PermissionOptionKind::AllowAlways,
            ),
            ("reject_once", "Reject", PermissionOptionKind::RejectOnce),
            (
                "reject_always",
                "Always reject",
                PermissionOptionKind::RejectAlways,
            ),
        ]
        .map(|(id, name, kind)| PermissionOption::new(id, name, kind));
        let fields = ToolCallUpdateFields::new()
            .title(call.name.clone())
            .kind(ToolKind::Edit)
            .raw_input(call.arguments.clone());
        let request = RequestPermissionRequest::new(
            asker.session.clone(),
            ToolCallUpdate::new(call.id.to_string(), fields),
            options.to_vec(),
        );
        let outcome = match asker.cx.send_request(request).block_task().await {
            Ok(response) => response.outcome,
            Err(e) => {
                tracing::info!(tool = %call.name, error = %e, "no permission decision: rejected");
                return false;
            }
        };
        let chosen = match outcome {
            RequestPermissionOutcome::Selected(selected) => selected.option_id.0,
            RequestPermissionOutcome::Cancelled => return false,
            // The outcome enum grows with the protocol; what this agent does not know rejects.
            #[allow(unreachable_patterns)]
            _ => return false,
        };
        let (allowed, remember) = match &*chosen {
            "allow_once" => (true, false),
            "allow_always" => (true, true),
            "reject_always" => (false, true),
            _ => (false, false),
        };
        if remember {
            lock(&self.always).tools.insert(call.name.clone(), allowed);
        }
        allowed
    }
}

impl<H: ToolHost> ToolHost for Gated<H> {
    fn catalog_generation(&self) -> u64 {
        self.inner.catalog_generation()
    }

    fn catalog(&self) -> Catalog {
        self.inner.catalog()
    }

    async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
        if let Some(asker) = self.asker.get()
            && self.destructive(&call.name)
            && !self.allowed(asker, call).await
        {
            return ToolOutput::error(rejected_text(&call.name));
        }
        self.inner.call_tool(call).await
    }

    fn call_hook(&self, call: &HookCall) -> impl Future<Output = HookReply> + Send {
        self.inner.call_hook(call)
    }

    fn kill_server(&self, server: &ServerName) -> impl Future<Output = ()> + Send {
        self.inner.kill_server(server)
    }
}

/// The result a rejected call gets.
pub fn rejected_text(name: &str) -> String {
    format!("the user rejected this call of {name}: it did not run")
}
