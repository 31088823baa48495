//! Subagents as the client sees them: an `agent` call is one tool call (kind `think`, titled
//! with the call's description) whose content follows the child it started — its text as it
//! streams, a line per tool call with its status, what its hooks did — and ends with the call.
//!
//! A `tool_call_update`'s `content` replaces the call's whole content, so each update sends
//! the child's trail again. Two bounds keep that linear in what the child says: the trail
//! shown is at most [`MAX_TRAIL_BYTES`] (the oldest entries give way first), and streamed text
//! is sent again only once it grew by a quarter of what is shown (or at once when the piece
//! ends a reply, or something else happens).
//!
//! A session restored by `session/load` shows a past `agent` call as it ended live: its trail
//! is rebuilt from the child's records ([`Children::replay`]), through the same events.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    SessionUpdate, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind,
};
use serde_json::{Value, json};

use crate::Observer;
use crate::machine::{AGENT_TOOL, AgentId};
use crate::ports::Delta;
use crate::progress::{Event, ProgressObserver};
use crate::text::{Cut, cut, one_line};
use crate::transcript::{Event as Recorded, Record};

/// The most bytes of a child's trail one update carries.
pub(super) const MAX_TRAIL_BYTES: usize = 16 * 1024;

/// Streamed text is sent again after at least this many new bytes, however short the trail.
const MIN_STREAM_STEP: usize = 64;

/// The trail of every `agent` call still running, by its id (which is its child's).
#[derive(Default)]
pub(super) struct Children {
    trails: HashMap<String, Trail>,
}

impl Children {
    /// The `tool_call` that shows an `agent` call, which its child's trail will fill; `None`
    /// for a call of any other tool.
    pub(super) fn started(&mut self, id: &str, name: &str, arguments: &Value) -> Option<ToolCall> {
        if name != AGENT_TOOL {
            return None;
        }
        self.trails.insert(id.to_owned(), Trail::default());
        let title = match arguments.get("description").and_then(Value::as_str) {
            Some(description) if !description.trim().is_empty() => one_line(description, 80),
            _ => "subagent".to_owned(),
        };
        Some(
            ToolCall::new(id.to_owned(), title)
                .kind(ToolKind::Think)
                .status(ToolCallStatus::Pending)
                .raw_input(arguments.clone())
                .meta(agent_meta(id)),
        )
    }

    /// The update that ends an `agent` call: its child's trail, then its result when that is an
    /// error (an answer is the trail's last text already); `None` for a call of another tool.
    pub(super) fn finished(
        &mut self,
        id: &str,
        is_error: bool,
        output: &str,
    ) -> Option<SessionUpdate> {
        let mut trail = self.trails.remove(id)?;
        // A child that ended its turn answers with its last reply, which ends the trail (after
        // it, its hooks may have said something): shown once, last.
        let answer = trail
            .entries
            .iter()
            .rposition(|e| matches!(e, Entry::Text(t) if t.elided == 0 && t.text == output))
            .filter(|_| !is_error);
        match answer.and_then(|at| trail.entries.remove(at)) {
            Some(entry) => {
                trail.bytes -= entry.size();
                trail.push(entry);
            }
            None => trail.push(Entry::text(output)),
        }
        let status = if is_error {
            ToolCallStatus::Failed
        } else {
            ToolCallStatus::Completed
        };
        Some(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.to_owned(),
            ToolCallUpdateFields::new()
                .status(status)
                .raw_output(json!({"text": output, "isError": is_error}))
                .content(trail.content()),
        )))
    }

    /// What an event of the child `agent` changes in its call's content, if anything.
    pub(super) fn event(&mut self, agent: &AgentId, event: Event) -> Option<SessionUpdate> {
        let trail = self.trails.get_mut(&agent.0)?;
        let changed = match event {
            Event::Thinking { summary } => {
                trail.streaming = false;
                if summary {
                    trail.push(Entry::Note(
                        "compacting: asking the model for a summary".to_owned(),
                    ));
                    true
                } else {
                    false
                }
            }
            Event::ModelText { text } => {
                // The streamed pieces are this text: it takes their place, whole.
                if std::mem::take(&mut trail.streaming) {
                    trail.pop_text();
                }
                trail.push(Entry::text(&text));
                true
            }
            Event::ToolStarted { id, name, .. } => {
                trail.push(Entry::Call {
                    id,
                    name,
                    state: CallState::Pending,
                });
                true
            }
            Event::ToolRunning { id } => trail.set_call(&id, CallState::Running),
            Event::ToolFinished { id, is_error, .. } => trail.set_call(
                &id,
                if is_error {
                    CallState::Failed
                } else {
                    CallState::Done
                },
            ),
            Event::HookCalled { .. } | Event::Finished { .. } => false,
            other => match other.describe_in(Some(agent)) {
                Some(line) => {
                    // The trail is the child's: its id need not lead each line.
                    let prefix = format!("[{agent}] ");
                    let line = line.strip_prefix(&prefix).unwrap_or(&line).to_owned();
                    trail.push(Entry::Note(line));
                    true
                }
                None => false,
            },
        };
        changed.then(|| trail.update(agent))
    }

    /// Rebuilds the trail of the running `agent` call `agent` from `lane`, its child's records
    /// in order, through the events its boundary gave live. The pieces a reply streamed in are
    /// not recorded: each reply shows whole, as it ended up live. Records of other agents are
    /// passed over: a child's own subagents show in its trail as its calls, as they did live.
    pub(super) fn replay<'r>(
        &mut self,
        agent: &AgentId,
        lane: impl IntoIterator<Item = &'r Record>,
    ) {
        let (events, received) = std::sync::mpsc::channel();
        let mut observer = ProgressObserver::new(|_: Duration, _: Event| {}).with_agents(
            move |_, from: &AgentId, event| {
                // The receiver outlives the observer: the send cannot fail.
                let _ = events.send((from.clone(), event));
            },
        );
        for record in lane {
            let at = Duration::from_millis(record.at_ms);
            match &record.event {
                Recorded::AgentEffect {
                    agent: from,
                    effect,
                } if from == agent => {
                    observer.on_agent_effect(at, from, effect);
                }
                Recorded::AgentFact { agent: from, fact } if from == agent => {
                    observer.on_agent_fact(at, from, fact);
                }
                _ => {}
            }
        }
        drop(observer);
        for (from, event) in received {
            // Only the call's last state is shown: the updates on the way are not sent.
            let _ = self.event(&from, event);
        }
    }

    /// What a piece of the child `agent`'s reply changes in its call's content, if anything.
    pub(super) fn delta(&mut self, agent: &AgentId, delta: &Delta) -> Option<SessionUpdate> {
        let trail = self.trails.get_mut(&agent.0)?;
        let Delta::Text(piece) = delta else {
            return None;
        };
        if piece.is_empty() {
            return None;
        }
        if !std::mem::replace(&mut trail.streaming, true) {
            trail.push(Entry::text(""));
        }
        trail.append_text(piece);
        trail.unsent += piece.len();
        let step = (trail.shown / 4).max(MIN_STREAM_STEP);
        (trail.unsent >= step).then(|| trail.update(agent))
    }
}

/// `_meta` naming the subagent a call runs.
fn agent_meta(id: &str) -> Option<serde_json::Map<String, Value>> {
    json!({"hookloop/agent": {"id": id}}).as_object().cloned()
}

/// What the client is shown of one child.
#[derive(Default)]
struct Trail {
    entries: VecDeque<Entry>,
    /// Bytes of the entries, as rendered.
    bytes: usize,
    /// Entries that gave way to newer ones.
    dropped: usize,
    /// The last entry is a reply's text still streaming.
    streaming: bool,
    /// Streamed bytes not yet sent.
    unsent: usize,
    /// Bytes the last update carried.
    shown: usize,
}

enum Entry {
    Text(Tail),
    Call {
        id: String,
        name: String,
        state: CallState,
    },
    Note(String),
}

/// A text's tail, at most twice the trail's bound: what streams in past it pushes its head out.
struct Tail {
    text: String,
    elided: usize,
}

impl Tail {
    fn push(&mut self, piece: &str) {
        self.text.push_str(piece);
        if self.text.len() > 2 * MAX_TRAIL_BYTES {
            let mut from = self.text.len() - MAX_TRAIL_BYTES;
            while !self.text.is_char_boundary(from) {
                from += 1;
            }
            self.text.drain(..from);
            self.elided += from;
        }
    }
}

#[derive(Clone, Copy)]
enum CallState {
    Pending,
    Running,
    Done,
    Failed,
}

impl Entry {
    fn text(text: &str) -> Self {
        let mut tail = Tail {
            text: String::new(),
            elided: 0,
        };
        tail.push(text);
        Self::Text(tail)
    }

    fn render(&self) -> String {
        match self {
            Self::Text(Tail { text, elided: 0 }) => text.clone(),
            Self::Text(Tail { text, elided }) => format!("[… {elided} bytes left out …]\n{text}"),
            Self::Call { name, state, .. } => {
                let (mark, word) = match state {
                    CallState::Pending => ("·", "pending"),
                    CallState::Running => ("→", "running"),
                    CallState::Done => ("✓", "completed"),
                    CallState::Failed => ("✗", "failed"),
                };
                format!("{mark} {name}: {word}")
            }
            Self::Note(line) => line.clone(),
        }
    }

    fn size(&self) -> usize {
        match self {
            Self::Text(Tail { text, .. }) | Self::Note(text) => text.len(),
            Self::Call { name, .. } => name.len() + 16,
        }
    }
}

impl Trail {
    fn push(&mut self, entry: Entry) {
        self.bytes += entry.size();
        self.entries.push_back(entry);
        self.trim();
    }

    /// Drops the oldest entries while the trail is over its bound; the last one stays, cut
    /// when it alone is over it.
    fn trim(&mut self) {
        while self.bytes > MAX_TRAIL_BYTES && self.entries.len() > 1 {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.size();
                self.dropped += 1;
            }
        }
    }

    fn pop_text(&mut self) {
        if let Some(Entry::Text(_)) = self.entries.back()
            && let Some(old) = self.entries.pop_back()
        {
            self.bytes -= old.size();
        }
    }

    fn append_text(&mut self, piece: &str) {
        if let Some(Entry::Text(tail)) = self.entries.back_mut() {
            // `bytes` counts this entry's text: it is at least `before`.
            let before = tail.text.len();
            tail.push(piece);
            self.bytes = self.bytes - before + tail.text.len();
        }
        self.trim();
    }

    fn set_call(&mut self, id: &str, to: CallState) -> bool {
        for entry in self.entries.iter_mut().rev() {
            if let Entry::Call {
                id: call, state, ..
            } = entry
                && call == id
            {
                *state = to;
                return true;
            }
        }
        false
    }

    /// The content the client is shown: a block per entry, within the bound.
    fn content(&self) -> Vec<ToolCallContent> {
        let mut blocks = Vec::with_capacity(self.entries.len() + 1);
        if self.dropped > 0 {
            blocks.push(ToolCallContent::from(format!(
                "[{} earlier entries left out]",
                self.dropped
            )));
        }
        blocks.extend(self.entries.iter().map(|entry| {
            ToolCallContent::from(cut(&entry.render(), MAX_TRAIL_BYTES, Cut::Middle))
        }));
        blocks
    }

    /// The update that shows the trail as it is now.
    fn update(&mut self, agent: &AgentId) -> SessionUpdate {
        self.unsent = 0;
        self.shown = self.bytes.min(MAX_TRAIL_BYTES);
        SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            agent.0.clone(),
            ToolCallUpdateFields::new()
                .status(ToolCallStatus::InProgress)
                .content(self.content()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> AgentId {
        AgentId("agent-1".into())
    }

    fn texts(update: &SessionUpdate) -> Vec<String> {
        let value = serde_json::to_value(update).unwrap();
        value["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["content"]["text"].as_str().unwrap().to_owned())
            .collect()
    }

    fn started(children: &mut Children) -> ToolCall {
        let arguments = json!({"description": "find the bug", "prompt": "look in src"});
        children
            .started("agent-1", AGENT_TOOL, &arguments)
            .expect("an agent call")
    }

    #[test]
    fn an_agent_call_is_a_think_call_titled_with_its_description() {
        let mut children = Children::default();
        let call = started(&mut children);
        let value = serde_json::to_value(&call).unwrap();
        assert_eq!(value["title"], "find the bug");
        assert_eq!(value["kind"], "think");
        assert_eq!(value["_meta"]["hookloop/agent"]["id"], "agent-1");
        assert!(
            children
                .started("c1", "fs__read", &json!({"description": "x"}))
                .is_none()
        );
    }

    #[test]
    fn the_trail_follows_text_calls_and_hooks_then_the_end() {
        let mut children = Children::default();
        started(&mut children);
        let a = agent();
        children.event(&a, Event::Thinking { summary: false });
        let streamed = children.delta(&a, &Delta::Text("x".repeat(100)));
        assert_eq!(texts(&streamed.unwrap()), ["x".repeat(100)]);
        children.event(
            &a,
            Event::ModelText {
                text: "x".repeat(100),
            },
        );
        children.event(
            &a,
            Event::ToolStarted {
                id: "c1".into(),
                name: "fs__read".into(),
                arguments: json!({}),
            },
        );
        let done = children.event(
            &a,
            Event::ToolFinished {
                id: "c1".into(),
                name: "fs__read".into(),
                is_error: false,
                output: "ok".into(),
                duration_ms: 1,
            },
        );
        assert_eq!(
            texts(&done.unwrap()),
            ["x".repeat(100), "✓ fs__read: completed".to_owned()]
        );
        let objection = children.event(
            &a,
            Event::Objection {
                server: crate::ServerName::new("todo").unwrap(),
                text: "not yet".into(),
                budget_left: 2,
            },
        );
        let lines = texts(&objection.unwrap());
        assert!(
            lines[2].starts_with("⚑ _SubagentStop objection from todo"),
            "{lines:?}"
        );
        children.event(&a, Event::ModelText { text: "42".into() });
        let end = children.finished("agent-1", false, "42").unwrap();
        let lines = texts(&end);
        assert_eq!(lines.last().unwrap(), "42", "the answer is not repeated");
        assert_eq!(lines.len(), 4);
        assert!(
            children
                .event(
                    &a,
                    Event::ModelText {
                        text: "late".into()
                    }
                )
                .is_none()
        );
    }

    #[test]
    fn streamed_text_is_resent_in_steps_and_the_trail_stays_bounded() {
        let mut children = Children::default();
        started(&mut children);
        let a = agent();
        let (mut updates, mut sent) = (0usize, 0usize);
        let piece = "y".repeat(10);
        for _ in 0..100_000 {
            if let Some(update) = children.delta(&a, &Delta::Text(piece.clone())) {
                updates += 1;
                sent += texts(&update).iter().map(String::len).sum::<usize>();
            }
        }
        let received = 100_000 * piece.len();
        // Each update carries at most the bound, and follows a quarter of it in new text.
        assert!(sent <= 5 * received, "{sent} bytes sent for {received}");
        assert!(updates < 10_000, "{updates} updates");
        let end = children.finished("agent-1", false, "done").unwrap();
        let total: usize = texts(&end).iter().map(String::len).sum();
        assert!(total <= MAX_TRAIL_BYTES + 256, "{total}");
    }
}
