//! Asking the client before a destructive tool runs (`session/request_permission`).
//!
//! The rule is the machine's ([`Policy::ask_permission`](crate::Policy::ask_permission)): it
//! asks about each call of a tool its server marks `destructiveHint: true`, keeps the "always"
//! decisions for the session, and answers a rejected call with an error result, so every
//! decision is a fact in the session's transcript. `ClientAsker` only puts the question to the
//! client, with four options (allow once, allow always, reject once, reject always). A client
//! that gives no decision (it cancelled the request, or answered with an error or an option
//! this agent did not offer) rejects, once.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SessionId, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::json;

use super::lock;
use crate::machine::{AgentId, PermissionDecision, ToolCall};
use crate::ports::PermissionAsker;

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

/// The options offered, by id; what each decides.
const OPTIONS: [(&str, &str, PermissionOptionKind, PermissionDecision); 4] = [
    (
        "allow_once",
        "Allow once",
        PermissionOptionKind::AllowOnce,
        PermissionDecision::AllowOnce,
    ),
    (
        "allow_always",
        "Always allow",
        PermissionOptionKind::AllowAlways,
        PermissionDecision::AllowAlways,
    ),
    (
        "reject_once",
        "Reject",
        PermissionOptionKind::RejectOnce,
        PermissionDecision::RejectOnce,
    ),
    (
        "reject_always",
        "Always reject",
        PermissionOptionKind::RejectAlways,
        PermissionDecision::RejectAlways,
    ),
];

/// Puts a session's permission questions to its client with `session/request_permission`.
pub(super) struct ClientAsker {
    pub(super) cx: ConnectionTo<Client>,
    pub(super) session: SessionId,
    /// Each model-facing tool's kind, as the session's catalog says.
    pub(super) kinds: Arc<Mutex<HashMap<String, ToolKind>>>,
}

impl ClientAsker {
    /// Asks about `call`, made by the subagent `agent` when there is one: its question names
    /// the call `<agent>/<call>` (the model's ids are unique within one agent's history only)
    /// and carries the agent in `_meta`.
    async fn ask(&self, agent: Option<&AgentId>, call: &ToolCall) -> PermissionDecision {
        let kind = lock(&self.kinds)
            .get(&call.name)
            .copied()
            .unwrap_or(ToolKind::Other);
        let options = OPTIONS
            .iter()
            .map(|(id, name, kind, _)| PermissionOption::new(*id, *name, *kind))
            .collect();
        let fields = ToolCallUpdateFields::new()
            .kind(kind)
            .raw_input(call.arguments.clone());
        let update = match agent {
            None => ToolCallUpdate::new(call.id.to_string(), fields.title(call.name.clone())),
            Some(agent) => ToolCallUpdate::new(
                format!("{agent}/{}", call.id),
                fields.title(format!("{} (subagent {agent})", call.name)),
            )
            .meta(
                json!({"hookloop/agent": {"id": agent}})
                    .as_object()
                    .cloned(),
            ),
        };
        let request = RequestPermissionRequest::new(self.session.clone(), update, options);
        let outcome = match self.cx.send_request(request).block_task().await {
            Ok(response) => response.outcome,
            Err(e) => {
                tracing::info!(tool = %call.name, error = %e, "no permission decision: rejected");
                return PermissionDecision::RejectOnce;
            }
        };
        match outcome {
            RequestPermissionOutcome::Selected(selected) => decision_of(&selected.option_id.0),
            RequestPermissionOutcome::Cancelled => PermissionDecision::RejectOnce,
            // The outcome enum grows with the protocol; what this agent does not know rejects.
            #[allow(unreachable_patterns)]
            _ => PermissionDecision::RejectOnce,
        }
    }
}

impl PermissionAsker for ClientAsker {
    fn decide<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = PermissionDecision> + Send + 'a>> {
        Box::pin(self.ask(None, call))
    }

    fn decide_in<'a>(
        &'a self,
        agent: &'a AgentId,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = PermissionDecision> + Send + 'a>> {
        Box::pin(self.ask(Some(agent), call))
    }
}

/// The decision an option id stands for; an id this agent did not offer rejects, once.
fn decision_of(option_id: &str) -> PermissionDecision {
    OPTIONS
        .iter()
        .find(|(id, ..)| *id == option_id)
        .map_or(PermissionDecision::RejectOnce, |(.., decision)| *decision)
}
