//! MCP servers' questions (elicitation) forwarded to the client (`elicitation/create`, stable in
//! ACP v1), in the modes the client advertised in `initialize`; any other question is declined.
//! The host has already declined the questions of hook calls: only tools' reach the client.

use std::sync::atomic::{AtomicU64, Ordering};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CreateElicitationRequest, ElicitationAction, ElicitationCapabilities, ElicitationFormMode,
    ElicitationMode as AcpMode, ElicitationSchema, ElicitationSessionScope, ElicitationUrlMode,
    SessionId,
};
use serde_json::Value;

use crate::ports::{Answer, ElicitAnswer, Elicitation, ElicitationMode, Person};

/// The client of one session, as the person its servers' questions go to.
pub(super) struct ClientPerson {
    cx: ConnectionTo<Client>,
    session: SessionId,
    modes: ElicitationCapabilities,
}

impl ClientPerson {
    /// Asks through `cx` about `session`, in the `modes` the client advertised.
    pub(super) fn new(
        cx: ConnectionTo<Client>,
        session: SessionId,
        modes: ElicitationCapabilities,
    ) -> Self {
        Self { cx, session, modes }
    }

    /// The request for `question`, or `None` if the client cannot show it.
    fn request(&self, question: Elicitation) -> Option<CreateElicitationRequest> {
        let scope = ElicitationSessionScope::new(self.session.clone());
        let mode = match question.mode {
            ElicitationMode::Form { schema } if self.modes.supports_form() => {
                // Both protocols carry the same restricted JSON schema.
                let schema: ElicitationSchema = serde_json::from_value(Value::Object(schema))
                    .inspect_err(|e| {
                        tracing::info!(server = %question.server, error = %e, "a form the client could not be sent; declined");
                    })
                    .ok()?;
                AcpMode::Form(ElicitationFormMode::new(scope, schema))
            }
            ElicitationMode::Url { url, id } if self.modes.supports_url() => {
                // Protocol 2026-07-28 dropped the server's id; ACP still wants one.
                let id = if id.is_empty() { fresh_id() } else { id };
                AcpMode::Url(ElicitationUrlMode::new(scope, id, url))
            }
            ElicitationMode::Form { .. } | ElicitationMode::Url { .. } => {
                tracing::info!(server = %question.server, "the client does not take this kind of question; declined");
                return None;
            }
        };
        // The person should know which server asks.
        let message = format!("{} asks: {}", question.server, question.message);
        Some(CreateElicitationRequest::new(mode, message))
    }
}

impl Person for ClientPerson {
    fn elicit(&self, question: Elicitation) -> Answer<'_> {
        Box::pin(async move {
            let Some(request) = self.request(question) else {
                return ElicitAnswer::Decline;
            };
            let response = match self.cx.send_request(request).block_task().await {
                Ok(response) => response,
                Err(e) => {
                    tracing::info!(error = %e, "the client gave no answer to a question; declined");
                    return ElicitAnswer::Decline;
                }
            };
            match response.action {
                ElicitationAction::Accept(accepted) => {
                    let content = accepted.content.unwrap_or_default();
                    let content = content
                        .into_iter()
                        .filter_map(|(name, value)| Some((name, serde_json::to_value(value).ok()?)))
                        .collect();
                    ElicitAnswer::Accept(content)
                }
                ElicitationAction::Decline => ElicitAnswer::Decline,
                ElicitationAction::Cancel => ElicitAnswer::Cancel,
                // An action this agent does not know is no consent.
                _ => ElicitAnswer::Decline,
            }
        })
    }
}

/// An elicitation id unique in this process.
fn fresh_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("hookloop-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
