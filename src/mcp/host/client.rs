//! The client side of one life: what hookloop tells a server it can do, and how it answers the
//! server's requests and notifications — elicitation (to the [`Person`], never for a hook),
//! roots (the session's working directory), and tool-list changes.

// Roots are deprecated from protocol 2026-07-28 on (SEP-2577), and servers on earlier versions
// still ask for them.
#![allow(deprecated)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ErrorData, FormElicitationCapability, Implementation, ListRootsResult,
    ProtocolVersion, Root, RootsCapabilities, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use serde_json::Value;

use super::slot::{Slot, refresh_tools};
use crate::mcp::elicit::{ElicitAnswer, Elicitation, ElicitationMode};
use crate::text::lock;

tokio::task_local! {
    /// The kind of call running in this task. rmcp answers a server's `input_required`
    /// requests (protocol 2026-07-28) inside the task that made the call, so this tells
    /// exactly which call a question came from.
    static CALL: CallKind;
}

/// Runs `call`, a call of `kind`: a question it leads to is put to the person for a tool, and
/// declined for a hook.
pub(super) async fn in_call<F: Future>(kind: CallKind, call: F) -> F::Output {
    CALL.scope(kind, call).await
}

/// What kind of call is in flight on a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CallKind {
    Tool,
    Hook,
}

/// Tool and hook calls in flight on one server. On the older protocols a server asks in a
/// request of its own, which names no call: these counts are all that says where it came from.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    tools: AtomicUsize,
    hooks: AtomicUsize,
}

impl InFlight {
    /// Counts a call until the guard is dropped.
    pub(super) fn enter(&self, kind: CallKind) -> InFlightGuard<'_> {
        self.counter(kind).fetch_add(1, Ordering::AcqRel);
        InFlightGuard { calls: self, kind }
    }

    fn counter(&self, kind: CallKind) -> &AtomicUsize {
        match kind {
            CallKind::Tool => &self.tools,
            CallKind::Hook => &self.hooks,
        }
    }

    /// Whether a question that names no call may have come from a hook: a hook call is in
    /// flight. When a tool call is in flight too, the question cannot be placed; it is
    /// declined all the same, since a hook must never wait on a person.
    fn hook_may_ask(&self) -> bool {
        self.hooks.load(Ordering::Acquire) > 0
    }
}

/// Uncounts a call when dropped (the call ended, or its future was dropped).
pub(super) struct InFlightGuard<'a> {
    calls: &'a InFlight,
    kind: CallKind,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.calls.counter(self.kind).fetch_sub(1, Ordering::AcqRel);
    }
}

/// The client side of one life.
pub(super) struct Handler {
    pub(super) slot: Weak<Slot>,
    pub(super) life: u64,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            capabilities(),
            Implementation::new("hookloop", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let Some(slot) = self.slot.upgrade() else {
            return;
        };
        // Listing needs the connection's reader, which is busy delivering this notification:
        // list from a task of its own.
        tokio::spawn(refresh_tools(slot, context.peer, self.life));
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let Some(slot) = self.slot.upgrade() else {
            return Ok(ListRootsResult::default());
        };
        let roots = lock(&slot.shared.roots).iter().map(|p| root(p)).collect();
        Ok(ListRootsResult::new(roots))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let Some(slot) = self.slot.upgrade() else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        // A question outside the task of a call (a server request of its own, before
        // 2026-07-28) names no call: the calls in flight say whether a hook may have asked.
        let from_hook = CALL
            .try_with(|kind| *kind == CallKind::Hook)
            .unwrap_or_else(|_| slot.in_flight.hook_may_ask());
        if from_hook {
            tracing::info!(
                server = %slot.name,
                "declining a question from the server during a hook call: hooks must not wait \
                 on a person"
            );
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        let Some(question) = question(&slot, request) else {
            tracing::info!(server = %slot.name, "declining a question of a kind hookloop does not know");
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        // A URL question's acceptance carries no content; a form's always does.
        let url = matches!(question.mode, ElicitationMode::Url { .. });
        let person = Arc::clone(&*lock(&slot.shared.person));
        // The server may give up on its question (it cancels the request).
        let answer = tokio::select! {
            answer = person.elicit(question) => answer,
            () = context.ct.cancelled() => ElicitAnswer::Cancel,
        };
        Ok(match answer {
            ElicitAnswer::Accept(_) if url => ElicitResult::new(ElicitationAction::Accept),
            ElicitAnswer::Accept(content) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content))
            }
            ElicitAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
            ElicitAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }
}

/// What hookloop can do for a server: answer questions (forms and URLs) and list its roots,
/// saying when they change.
fn capabilities() -> ClientCapabilities {
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation = Some(
        ElicitationCapability::new()
            .with_form(FormElicitationCapability::new())
            .with_url(UrlElicitationCapability::new()),
    );
    let mut roots = RootsCapabilities::default();
    roots.list_changed = Some(true);
    capabilities.roots = Some(roots);
    capabilities
}

/// A server's request in the engine's terms; `None` for a mode this version does not know.
fn question(slot: &Slot, request: ElicitRequestParams) -> Option<Elicitation> {
    let (message, mode) = match request {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => {
            let schema = match serde_json::to_value(requested_schema) {
                Ok(Value::Object(schema)) => schema,
                // rmcp's schema type is a struct: it serialises to an object.
                Ok(_) | Err(_) => serde_json::Map::new(),
            };
            (message, ElicitationMode::Form { schema })
        }
        ElicitRequestParams::UrlElicitationParams {
            message,
            url,
            elicitation_id,
            ..
        } => (
            message,
            ElicitationMode::Url {
                url,
                id: elicitation_id,
            },
        ),
        _ => return None,
    };
    Some(Elicitation {
        server: slot.name.clone(),
        message,
        mode,
    })
}

/// A directory as an MCP root: its `file://` URI, named after its last component.
fn root(path: &Path) -> Root {
    let mut root = Root::new(file_uri(path));
    if let Some(name) = path.file_name() {
        root.name = Some(name.to_string_lossy().into_owned());
    }
    root
}

/// The `file://` URI of an absolute path, each byte outside RFC 3986's unreserved set (and
/// `/`) percent-encoded.
pub(super) fn file_uri(path: &Path) -> String {
    use std::fmt::Write as _;
    use std::os::unix::ffi::OsStrExt as _;

    let mut uri = String::from("file://");
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(uri, "%{byte:02X}");
        }
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uri_percent_encodes_spaces_and_non_ascii_bytes() {
        assert_eq!(
            file_uri(Path::new("/home/ada/my project/é")),
            "file:///home/ada/my%20project/%C3%A9"
        );
    }

    #[test]
    fn in_flight_guard_uncounts_its_call_when_dropped() {
        let calls = InFlight::default();
        let guard = calls.enter(CallKind::Hook);
        assert!(calls.hook_may_ask());
        drop(guard);
        assert!(!calls.hook_may_ask());
    }
}
