//! The offline demo's pieces: a **scripted** model and the story's narration.
//!
//! [`DemoModel`] is not a language model. It is a short deterministic program that reads the
//! conversation it is sent and answers the way a cooperative agent would, so the demo runs with
//! no API key and no network while everything else — the engine, the hooks, the MCP server — is
//! real. It follows one rule per act:
//!
//! - [`Act::WorkThroughTodos`]: with no hook answer in sight it claims to be done (trying to
//!   stop with todos open). Once a hook has listed open todos (`#<id>` in its text, from `_Stop`
//!   or `_PostCompact`), it completes them one per reply through the todo server's `complete`
//!   tool, then ends its turn.
//! - [`Act::Stubborn`]: it ends its turn; after each objection it does one more tool call and
//!   ends again, so only the objection budget can end the prompt.
//!
//! Compaction requests are answered with a fixed summary.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};

use crate::hooks::{self, Hook};
use crate::llm::{LlmClient, LlmError, LlmRequest};
use crate::machine::{CallId, LlmReply, Message, Purpose, StopReason, ToolCall};
use crate::progress::Event;

/// Which behaviour the scripted model follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Claim to be done, then work through the todos a hook lists.
    WorkThroughTodos,
    /// Keep ending the turn, doing one tool call after each objection.
    Stubborn,
}

/// The scripted model of the demo. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct DemoModel {
    act: Act,
    /// The qualified name of the tool that completes a todo: `<server>__complete`.
    complete_tool: String,
    /// The argument naming the todo to complete.
    id_argument: String,
}

/// The summary the scripted model gives when the engine compacts the history.
pub const DEMO_SUMMARY: &str = "The user asked to get the release out by working through the \
todo list. Some todos were completed with the todo server; the rest are still open.";

impl DemoModel {
    /// A scripted model for `act` that completes todos with `<server>__complete {id_argument: n}`.
    pub fn new(act: Act, server: &str, id_argument: &str) -> Self {
        Self {
            act,
            complete_tool: hooks::qualify(server, "complete"),
            id_argument: id_argument.to_owned(),
        }
    }

    /// The reply to one request: a pure function of the request.
    pub fn reply(&self, request: &LlmRequest<'_>) -> LlmReply {
        if let Purpose::Summary { .. } = request.purpose {
            return text(DEMO_SUMMARY);
        }
        match self.act {
            Act::WorkThroughTodos => self.work(request.messages),
            Act::Stubborn => self.stubborn(request.messages),
        }
    }

    fn work(&self, messages: &[Message]) -> LlmReply {
        let Some((at, hook_text)) = last_hook_answer(messages) else {
            return text("Everything on the release checklist looks handled to me. I'm done.");
        };
        let done = self.completed_after(messages, at);
        let open: Vec<u64> = todo_ids(&hook_text)
            .into_iter()
            .filter(|id| !done.contains(id))
            .collect();
        match open.first() {
            Some(&id) => self.complete(
                messages,
                format!("Right — todo #{id} is still open. Completing it now."),
                id,
            ),
            None => {
                text("Every todo on the list is complete. The release is ready; stopping here.")
            }
        }
    }

    fn stubborn(&self, messages: &[Message]) -> LlmReply {
        let last_is_hook = matches!(messages.last(), Some(Message::ToolResult { output, .. })
            if hook_body(&output.joined_text()).is_some());
        match (last_is_hook, last_hook_answer(messages)) {
            (true, Some((_, hook_text))) => {
                let id = todo_ids(&hook_text).into_iter().next().unwrap_or(1);
                self.complete(
                    messages,
                    format!("The hook insists. Trying todo #{id} once more."),
                    id,
                )
            }
            _ => text("I have done what can be done here. I'm finished."),
        }
    }

    fn complete(&self, messages: &[Message], say: String, id: u64) -> LlmReply {
        LlmReply {
            text: say,
            tool_calls: vec![ToolCall {
                id: CallId(format!("demo_{}", messages.len())),
                name: self.complete_tool.clone(),
                arguments: json!({ self.id_argument.as_str(): id }),
            }],
            stop: StopReason::ToolUse,
            usage: None,
        }
    }

    /// Todos this model completed, successfully, after message `from`.
    fn completed_after(&self, messages: &[Message], from: usize) -> BTreeSet<u64> {
        let mut asked = Vec::new();
        let mut done = BTreeSet::new();
        for message in &messages[from..] {
            match message {
                Message::Assistant { tool_calls, .. } => {
                    for call in tool_calls.iter().filter(|c| c.name == self.complete_tool) {
                        if let Some(id) = call
                            .arguments
                            .get(&self.id_argument)
                            .and_then(Value::as_u64)
                        {
                            asked.push((call.id.clone(), id));
                        }
                    }
                }
                Message::ToolResult { call_id, output } if !output.is_error => {
                    if let Some((_, id)) = asked.iter().find(|(c, _)| c == call_id) {
                        done.insert(*id);
                    }
                }
                Message::ToolResult { .. } | Message::User { .. } => {}
            }
        }
        done
    }
}

impl LlmClient for DemoModel {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        let reply = self.reply(&request);
        // A short pause, so the demo reads like a session and the spinner has a moment.
        tokio::time::sleep(Duration::from_millis(150)).await;
        Ok(reply)
    }
}

fn text(text: &str) -> LlmReply {
    LlmReply {
        text: text.to_owned(),
        tool_calls: Vec::new(),
        stop: StopReason::EndTurn,
        usage: None,
    }
}

/// The engine injects a hook's answer as a tool result holding `{"hook", "server", "text"}`.
fn hook_body(text: &str) -> Option<(Hook, String)> {
    let value: Value = serde_json::from_str(text).ok()?;
    let hook: Hook = serde_json::from_value(value.get("hook")?.clone()).ok()?;
    let text = value.get("text")?.as_str()?.to_owned();
    Some((hook, text))
}

/// The index and text of the newest hook answer in the conversation.
fn last_hook_answer(messages: &[Message]) -> Option<(usize, String)> {
    messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match m {
            Message::ToolResult { output, .. } => {
                hook_body(&output.joined_text()).map(|(_, t)| (i, t))
            }
            Message::User { .. } | Message::Assistant { .. } => None,
        })
}

/// The todo ids a hook's text names, as `#<digits>`, in order, without repeats.
pub fn todo_ids(text: &str) -> Vec<u64> {
    let mut ids = Vec::new();
    for (i, _) in text.match_indices('#') {
        let digits: String = text[i + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(id) = digits.parse::<u64>()
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    ids
}

/// Writes the story as it happens: one line per event worth seeing.
pub struct Narrator<W> {
    out: W,
}

impl<W: Write> Narrator<W> {
    /// A narrator writing to `out`.
    pub fn new(out: W) -> Self {
        Self { out }
    }

    /// Narrates one event.
    pub fn event(&mut self, event: &Event) -> std::io::Result<()> {
        let line = match event {
            Event::HookCalled { hook, servers } => {
                let names: Vec<&str> = servers.iter().map(|s| s.as_str()).collect();
                format!("  · engine calls {hook} on {}", names.join(", "))
            }
            Event::Finished { reason } => {
                format!(
                    "  ■ prompt finished: {}",
                    serde_json::to_value(reason)
                        .ok()
                        .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_else(|| format!("{reason:?}"))
                )
            }
            other => match other.describe() {
                Some(line) => format!("  {line}"),
                None => return Ok(()),
            },
        };
        writeln!(self.out, "{line}")
    }

    /// Writes a line of narration.
    pub fn say(&mut self, text: &str) -> std::io::Result<()> {
        writeln!(self.out, "{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::ToolOutput;

    fn hook_result(id: &str, hook: Hook, text: &str) -> Vec<Message> {
        vec![
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: CallId(id.into()),
                    name: format!("todo__{hook}"),
                    arguments: json!({}),
                }],
            },
            Message::ToolResult {
                call_id: CallId(id.into()),
                output: ToolOutput::text(hooks::encode_hook_body(hook, "todo", text)),
            },
        ]
    }

    fn request(messages: &[Message]) -> LlmRequest<'_> {
        LlmRequest {
            purpose: Purpose::Turn,
            system: None,
            messages,
            tools: &[],
            instruction: None,
            max_output_tokens: 100,
        }
    }

    #[test]
    fn ids_are_read_from_hook_text() {
        assert_eq!(
            todo_ids("2 open: #1 tests, #12 docs; #1 again, # nothing"),
            [1, 12]
        );
        assert!(todo_ids("no todos").is_empty());
    }

    #[test]
    fn the_model_claims_done_then_completes_what_the_hook_lists() {
        let model = DemoModel::new(Act::WorkThroughTodos, "todo", "id");
        let mut messages = vec![Message::user("ship it")];
        let first = model.reply(&request(&messages));
        assert!(first.tool_calls.is_empty());
        assert_eq!(first.stop, StopReason::EndTurn);

        messages.push(Message::Assistant {
            text: first.text,
            tool_calls: vec![],
        });
        messages.extend(hook_result("h1", Hook::Stop, "2 open: #4 tests, #7 docs"));
        let second = model.reply(&request(&messages));
        assert_eq!(second.tool_calls[0].name, "todo__complete");
        assert_eq!(second.tool_calls[0].arguments, json!({"id": 4}));

        messages.push(Message::Assistant {
            text: second.text,
            tool_calls: second.tool_calls.clone(),
        });
        messages.push(Message::ToolResult {
            call_id: second.tool_calls[0].id.clone(),
            output: ToolOutput::text("completed #4"),
        });
        let third = model.reply(&request(&messages));
        assert_eq!(third.tool_calls[0].arguments, json!({"id": 7}));

        messages.push(Message::Assistant {
            text: third.text,
            tool_calls: third.tool_calls.clone(),
        });
        messages.push(Message::ToolResult {
            call_id: third.tool_calls[0].id.clone(),
            output: ToolOutput::text("completed #7"),
        });
        let fourth = model.reply(&request(&messages));
        assert!(fourth.tool_calls.is_empty());
        assert_eq!(fourth.stop, StopReason::EndTurn);
    }

    #[test]
    fn a_post_compact_list_replaces_what_came_before() {
        let model = DemoModel::new(Act::WorkThroughTodos, "todo", "id");
        let mut messages = vec![Message::user("summary"), Message::user("ship it")];
        messages.extend(hook_result("h9", Hook::PostCompact, "open: #3 changelog"));
        let reply = model.reply(&request(&messages));
        assert_eq!(reply.tool_calls[0].arguments, json!({"id": 3}));
    }

    #[test]
    fn the_stubborn_act_calls_a_tool_after_each_objection_only() {
        let model = DemoModel::new(Act::Stubborn, "todo", "id");
        let mut messages = vec![Message::user("ship it")];
        assert!(model.reply(&request(&messages)).tool_calls.is_empty());
        messages.extend(hook_result("h1", Hook::Stop, "#5 still open"));
        let reply = model.reply(&request(&messages));
        assert_eq!(reply.tool_calls[0].arguments, json!({"id": 5}));
        messages.push(Message::Assistant {
            text: reply.text,
            tool_calls: reply.tool_calls.clone(),
        });
        messages.push(Message::ToolResult {
            call_id: reply.tool_calls[0].id.clone(),
            output: ToolOutput::text("reopened"),
        });
        assert!(model.reply(&request(&messages)).tool_calls.is_empty());
    }

    #[test]
    fn summaries_are_fixed() {
        let model = DemoModel::new(Act::WorkThroughTodos, "todo", "id");
        let messages = [Message::user("x")];
        let mut req = request(&messages);
        req.purpose = Purpose::Summary { from: 0 };
        assert_eq!(model.reply(&req).text, DEMO_SUMMARY);
    }
}
