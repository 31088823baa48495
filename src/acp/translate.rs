//! What the client is shown: progress events and reply pieces as `session/update`s, and a
//! restored conversation as the updates that would have shown it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, SessionUpdate, ToolCall, ToolCallContent, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use agent_client_protocol::v1::schema::{Notice as AcpNotice, NoticeSeverity};
use serde_json::{Value, json};

use super::agents::Children;
use crate::hooks::Hook;
use crate::machine::{AgentId, Message, SkipReason, ToolHints};
use crate::ports::Delta;
use crate::progress::Event;
use crate::text::lock;
use crate::transcript::Record;

/// A call's kind from its server's hints: a read-only tool reads (or fetches, when it reaches
/// outside the machine), one that changes things edits; with no hints it is `other`. MCP's
/// annotations say nothing that would tell a search, a move or a command apart.
pub(super) fn tool_kind(hints: ToolHints) -> ToolKind {
    match (hints.read_only, hints.destructive, hints.open_world) {
        (Some(true), _, Some(true)) => ToolKind::Fetch,
        (Some(true), _, _) => ToolKind::Read,
        (Some(false), _, _) | (None, Some(true), _) => ToolKind::Edit,
        (None, Some(false) | None, _) => ToolKind::Other,
    }
}

/// Turns progress events into session updates, numbering the synthetic tool calls.
pub(super) struct Translator {
    pub(super) next: u64,
    /// Each model-facing tool's kind, from its server's hints.
    pub(super) kinds: Arc<Mutex<HashMap<String, ToolKind>>>,
    /// Calls already shown as `tool_call`s when the user was asked about them: when they run,
    /// they are not shown again.
    announced: HashSet<String>,
    /// The session's `_Stop` budget, when the client takes `notice` updates: each objection
    /// and a spent budget are then also shown as a notice of the budget's state.
    pub(super) budget: Option<u32>,
    /// The current reply's text has been sent piece by piece, so its whole text is not sent
    /// again. Cleared when a model request starts.
    pub(super) streamed: bool,
    /// The `agent` calls running, each shown with its child's trail.
    children: Children,
}

impl Translator {
    pub(super) fn new(kinds: Arc<Mutex<HashMap<String, ToolKind>>>, budget: Option<u32>) -> Self {
        Self {
            next: 0,
            kinds,
            announced: HashSet::new(),
            budget,
            streamed: false,
            children: Children::default(),
        }
    }

    /// An event of the subagent `agent`: shown in the content of the call that started it.
    pub(super) fn agent_event(&mut self, agent: &AgentId, event: Event) -> Option<SessionUpdate> {
        self.children.event(agent, event)
    }

    /// A piece of the subagent `agent`'s reply, likewise.
    pub(super) fn agent_delta(&mut self, agent: &AgentId, delta: &Delta) -> Option<SessionUpdate> {
        self.children.delta(agent, delta)
    }

    /// A piece of the current reply: text as a message chunk, reasoning as a thought chunk.
    pub(super) fn delta(&mut self, delta: &Delta) -> Option<SessionUpdate> {
        match delta {
            Delta::Text(text) if text.is_empty() => None,
            Delta::Thinking(text) if text.is_empty() => None,
            Delta::Text(text) => {
                self.streamed = true;
                Some(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                    ContentBlock::from(text.clone()),
                )))
            }
            Delta::Thinking(text) => Some(thought(text)),
        }
    }

    /// A model tool call, `pending` until the session starts it.
    fn pending_call(&mut self, id: String, name: String, arguments: Value) -> SessionUpdate {
        if let Some(call) = self.children.started(&id, &name, &arguments) {
            return SessionUpdate::ToolCall(call);
        }
        let kind = lock(&self.kinds)
            .get(&name)
            .copied()
            .unwrap_or(ToolKind::Other);
        SessionUpdate::ToolCall(
            ToolCall::new(id, name)
                .kind(kind)
                .status(ToolCallStatus::Pending)
                .raw_input(arguments),
        )
    }

    pub(super) fn updates(&mut self, event: Event) -> Vec<SessionUpdate> {
        match event {
            Event::Thinking { summary: false } => {
                self.streamed = false;
                Vec::new()
            }
            Event::HookCalled { .. } | Event::Finished { .. } => Vec::new(),
            Event::Thinking { summary: true } => {
                vec![thought(
                    "The context is full: asking the model for a summary to continue from.",
                )]
            }
            Event::ModelText { text } => {
                if std::mem::take(&mut self.streamed) {
                    return Vec::new();
                }
                vec![SessionUpdate::AgentMessageChunk(ContentChunk::new(
                    ContentBlock::from(text),
                ))]
            }
            Event::PermissionAsked {
                id,
                name,
                arguments,
            } => {
                self.announced.insert(id.clone());
                vec![self.pending_call(id, name, arguments)]
            }
            Event::ToolStarted {
                id,
                name,
                arguments,
            } => {
                if self.announced.remove(&id) {
                    return Vec::new();
                }
                vec![self.pending_call(id, name, arguments)]
            }
            Event::ToolRunning { id } => vec![in_progress(id)],
            Event::ToolRejected { id, tool, .. } => {
                self.announced.remove(&id);
                vec![finished(id, true, crate::machine::rejected_text(&tool))]
            }
            Event::ToolFinished {
                id,
                is_error,
                output,
                ..
            } => match self.children.finished(&id, is_error, &output) {
                Some(update) => vec![update],
                None => vec![finished(id, is_error, output)],
            },
            Event::ToolRefused { name } => {
                let text = crate::machine::unknown_tool_text(&name);
                vec![self.synthetic(name, ToolKind::Other, ToolCallStatus::Failed, text, None)]
            }
            Event::Objection {
                server,
                text,
                budget_left,
            } => {
                let title = format!(
                    "{} objection from {server} ({budget_left} left)",
                    Hook::Stop
                );
                let raw = json!({"hook": Hook::Stop, "server": server, "text": text, "budget_left": budget_left});
                let call = self.synthetic(
                    title,
                    ToolKind::Other,
                    ToolCallStatus::Completed,
                    text,
                    Some(raw),
                );
                std::iter::once(call)
                    .chain(self.budget_notice(budget_left))
                    .collect()
            }
            Event::PostCompactInjected { server, text } => {
                let title = format!("{} from {server}", Hook::PostCompact);
                let raw = json!({"hook": Hook::PostCompact, "server": server, "text": text});
                vec![self.synthetic(
                    title,
                    ToolKind::Other,
                    ToolCallStatus::Completed,
                    text,
                    Some(raw),
                )]
            }
            Event::HookInjected { hook, server, text } => {
                // Context a hook added for the model to weigh: what the model thinks with.
                let title = format!("{hook} from {server}");
                let raw = json!({"hook": hook, "server": server, "text": text});
                vec![self.synthetic(
                    title,
                    ToolKind::Think,
                    ToolCallStatus::Completed,
                    text,
                    Some(raw),
                )]
            }
            Event::ToolDenied { server, tool, text } => {
                let title = format!("{tool} denied by {} of {server}", Hook::PreToolUse);
                let raw =
                    json!({"hook": Hook::PreToolUse, "server": server, "tool": tool, "text": text});
                vec![self.synthetic(
                    title,
                    ToolKind::Other,
                    ToolCallStatus::Completed,
                    text,
                    Some(raw),
                )]
            }
            Event::StopSkipped { reason } => {
                let said = thought(match reason {
                    SkipReason::BudgetSpent => {
                        "The _Stop objection budget is spent: the turn ends whatever the hooks say."
                    }
                    SkipReason::DeclinedObjection => {
                        "The model ended its turn again after an objection: it heard and declined, so the turn ends."
                    }
                });
                let spent = match reason {
                    SkipReason::BudgetSpent => self.budget_notice(0),
                    SkipReason::DeclinedObjection => None,
                };
                std::iter::once(said).chain(spent).collect()
            }
            Event::Compacted {
                summarized,
                messages_before,
                messages_after,
            } => {
                let how = if summarized { "summarized" } else { "trimmed" };
                vec![thought(&format!(
                    "History compacted ({how}): {messages_before} messages became {messages_after}."
                ))]
            }
            Event::HookFailedOpen {
                server,
                hook,
                reason,
            } => vec![thought(&format!(
                "{hook} on {server} gave no usable answer ({reason}); counted as no objection."
            ))],
            Event::HookSkipped {
                server,
                hook,
                reason,
            } => vec![thought(&format!(
                "{hook} on {server} sat this round out ({reason}); the round went on without it."
            ))],
            Event::ServerKilled { server } => vec![thought(&format!(
                "Server {server} was killed after its hooks timed out twice in a row."
            ))],
        }
    }

    /// The `_Stop` budget's state as a `notice`, for a client that takes notices.
    fn budget_notice(&self, left: u32) -> Option<SessionUpdate> {
        let budget = self.budget?;
        let used = budget.saturating_sub(left);
        let severity = if left == 0 {
            NoticeSeverity::Warning
        } else {
            NoticeSeverity::Info
        };
        let notice = AcpNotice::new(
            severity,
            format!("_Stop objections: {used} of {budget} used"),
        )
        .description(if left == 0 {
            "The objection budget is spent: hooks can no longer keep the agent working.".to_owned()
        } else {
            format!("{left} more objection(s) can keep the agent working this session.")
        })
        .meta(
            json!({"hookloop/objections": used, "hookloop/budget": budget})
                .as_object()
                .cloned(),
        );
        Some(SessionUpdate::Notice(notice))
    }

    /// A tool call the model did not make, standing for something the engine did.
    fn synthetic(
        &mut self,
        title: String,
        kind: ToolKind,
        status: ToolCallStatus,
        text: String,
        raw: Option<serde_json::Value>,
    ) -> SessionUpdate {
        self.next += 1;
        let mut call = ToolCall::new(format!("hookloop-{}", self.next), title)
            .kind(kind)
            .status(status)
            .content(vec![ToolCallContent::from(text)]);
        if let Some(raw) = raw {
            call = call.raw_output(raw);
        }
        SessionUpdate::ToolCall(call)
    }
}

/// A restored conversation as the updates that would have shown it: each user message as a
/// `user_message_chunk`, the model's text as an `agent_message_chunk`, and each tool call as a
/// `tool_call` ended with its recorded result. An `agent` call shows as it ended live: a think
/// call titled with its description, its content the child's trail rebuilt from the child's
/// lane of `records`, then its result. A compacted session shows its context as the machine
/// holds it: the summary first, as the user message it is.
pub(super) fn history_updates(messages: &[Message], records: &[Record]) -> Vec<SessionUpdate> {
    let mut lanes: HashMap<&AgentId, Vec<&Record>> = HashMap::new();
    for record in records {
        if let Some(agent) = record.event.agent() {
            lanes.entry(agent).or_default().push(record);
        }
    }
    let mut children = Children::default();
    let mut updates = Vec::new();
    for message in messages {
        match message {
            Message::User { text } => updates.push(SessionUpdate::UserMessageChunk(
                ContentChunk::new(ContentBlock::from(text.clone())),
            )),
            Message::Assistant { text, tool_calls } => {
                if !text.trim().is_empty() {
                    updates.push(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                        ContentBlock::from(text.clone()),
                    )));
                }
                for call in tool_calls {
                    let id = call.id.to_string();
                    let shown = children
                        .started(&id, &call.name, &call.arguments)
                        .unwrap_or_else(|| {
                            ToolCall::new(id, call.name.clone())
                                .kind(ToolKind::Other)
                                .raw_input(call.arguments.clone())
                        });
                    updates.push(SessionUpdate::ToolCall(
                        shown.status(ToolCallStatus::InProgress),
                    ));
                }
            }
            Message::ToolResult { call_id, output } => {
                let (id, text) = (call_id.to_string(), output.joined_text());
                let agent = AgentId(id.clone());
                if let Some(lane) = lanes.remove(&agent) {
                    children.replay(&agent, lane);
                }
                let update = children
                    .finished(&id, output.is_error, &text)
                    .unwrap_or_else(|| finished(id, output.is_error, text));
                updates.push(update);
            }
        }
    }
    updates
}

/// A call's end: completed or failed, with its output.
fn finished(id: String, is_error: bool, output: String) -> SessionUpdate {
    let status = if is_error {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Completed
    };
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id,
        ToolCallUpdateFields::new()
            .status(status)
            .raw_output(json!({"text": output, "isError": is_error}))
            .content(vec![ToolCallContent::from(output)]),
    ))
}

pub(super) fn in_progress(id: String) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id,
        ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
    ))
}

pub(super) fn thought(text: &str) -> SessionUpdate {
    SessionUpdate::AgentThoughtChunk(ContentChunk::new(ContentBlock::from(text)))
}
