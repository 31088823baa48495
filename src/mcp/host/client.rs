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
use serde_json::{Map, Value};
use tokio::sync::Semaphore;

use super::refresh::ListChanged;
use super::shared::Shared;
use crate::hooks::ServerName;
use crate::mcp::elicit;
use crate::ports::{ElicitAnswer, Elicitation, ElicitationMode};
use crate::text::lock;

/// Questions one server may have open with the person at once; one more is declined. A
/// person answers one question at a time: a server that asks faster gains nothing.
pub(crate) const MAX_OPEN_QUESTIONS: usize = 2;

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

/// Tool and hook calls in flight on one server, and its open questions. On the older
/// protocols a server asks in a request of its own, which names no call: these counts are all
/// that says where it came from.
#[derive(Debug)]
pub(super) struct InFlight {
    tools: AtomicUsize,
    hooks: AtomicUsize,
    questions: Semaphore,
}

impl Default for InFlight {
    fn default() -> Self {
        Self {
            tools: AtomicUsize::new(0),
            hooks: AtomicUsize::new(0),
            questions: Semaphore::new(MAX_OPEN_QUESTIONS),
        }
    }
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

    /// Whether a tool call is in flight: a question outside every call is the server's own
    /// idea, and no one asked it to ask.
    fn tool_running(&self) -> bool {
        self.tools.load(Ordering::Acquire) > 0
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
    pub(super) server: ServerName,
    pub(super) shared: Weak<Shared>,
    /// The server's calls in flight (its slot's, shared by all its lives).
    pub(super) calls: Arc<InFlight>,
    /// Set on every `tools/list_changed` of this life.
    pub(super) list_changed: ListChanged,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            capabilities(),
            Implementation::new("hookloop", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // The life's listing task lists again; a flood of these sets one flag.
        self.list_changed.set();
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let Some(shared) = self.shared.upgrade() else {
            return Ok(ListRootsResult::default());
        };
        let roots = lock(&shared.roots).iter().map(|p| root(p)).collect();
        Ok(ListRootsResult::new(roots))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let decline = || Ok(ElicitResult::new(ElicitationAction::Decline));
        let Some(shared) = self.shared.upgrade() else {
            return decline();
        };
        let server = &self.server;
        // A question outside the task of a call (a server request of its own, before
        // 2026-07-28) names no call: the calls in flight say whether a hook may have asked,
        // and whether any call may have.
        match CALL.try_with(|kind| *kind).ok() {
            Some(CallKind::Hook) => return decline_for_hook(server),
            None if self.calls.hook_may_ask() => return decline_for_hook(server),
            None if !self.calls.tool_running() => {
                tracing::warn!(
                    %server,
                    "declining a question the server asked while none of its calls was running"
                );
                return decline();
            }
            Some(CallKind::Tool) | None => {}
        }
        let Ok(_open) = self.calls.questions.try_acquire() else {
            tracing::warn!(
                %server,
                "declining a question: the server already has {MAX_OPEN_QUESTIONS} open"
            );
            return decline();
        };
        let Some(mut question) = question(server, request) else {
            tracing::info!(%server, "declining a question of a kind hookloop does not know");
            return decline();
        };
        // A person is sent only where a browser may safely go, and is shown the parsed URL,
        // not the server's raw text.
        if let ElicitationMode::Url { url, .. } = &mut question.mode {
            match crate::mcp::visit::check_visit(url) {
                Ok(checked) => *url = checked.to_string(),
                Err(refused) => {
                    tracing::warn!(%server, %refused, "declining a question whose URL is not opened");
                    return decline();
                }
            }
        }
        // A URL question's acceptance carries no content; a form's always does, and must fit
        // the form.
        let schema = match &question.mode {
            ElicitationMode::Url { .. } => None,
            ElicitationMode::Form { schema } => Some(schema.clone()),
        };
        let person = Arc::clone(&*lock(&shared.person));
        drop(shared);
        // The server may give up on its question (it cancels the request).
        let answer = tokio::select! {
            answer = person.elicit(question) => answer,
            () = context.ct.cancelled() => ElicitAnswer::Cancel,
        };
        Ok(match answer {
            ElicitAnswer::Accept(content) => match schema {
                None => ElicitResult::new(ElicitationAction::Accept),
                Some(schema) => accepted_form(server, &schema, content),
            },
            ElicitAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
            ElicitAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }
}

fn decline_for_hook(server: &ServerName) -> Result<ElicitResult, ErrorData> {
    tracing::info!(
        %server,
        "declining a question from the server during a hook call: hooks must not wait on a \
         person"
    );
    Ok(ElicitResult::new(ElicitationAction::Decline))
}

/// The answer to a form: its content, with the form's defaults where the person left a field
/// as it was shown, if it fits the requested schema; else a decline, since the server asked
/// for exactly that shape and must never get another.
fn accepted_form(
    server: &ServerName,
    schema: &Map<String, Value>,
    mut content: Map<String, Value>,
) -> ElicitResult {
    for (name, default) in elicit::schema_defaults(schema) {
        content.entry(name).or_insert(default);
    }
    match elicit::check_answer(schema, &content) {
        Ok(()) => ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content)),
        Err(problem) => {
            tracing::warn!(%server, %problem, "declining an answer that does not fit the server's form");
            ElicitResult::new(ElicitationAction::Decline)
        }
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
fn question(server: &ServerName, request: ElicitRequestParams) -> Option<Elicitation> {
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
        server: server.clone(),
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
