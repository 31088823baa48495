//! The offline demo's pieces: a **scripted** model and the story's narration.
//!
//! [`DemoModel`] is not a language model. It is a short deterministic program that reads the
//! conversation it is sent and answers the way a cooperative agent would, so the demo runs with
//! no API key and no network while everything else — the engine, the hooks, the todo MCP server
//! (`examples/todo_server.rs`: tools `add`, `complete`, `list`; hooks `_Stop`, `_PostCompact`) —
//! is real. Its rules, one set per act:
//!
//! - [`Act::WorkThroughTodos`]: plan the work as todos (`add`), then claim to be done — trying to
//!   stop with todos open. Once a hook has spoken (a `_Stop` objection, or a `_PostCompact`
//!   re-injection after a compaction), `list` the todos and `complete` the open ones, one per
//!   reply, then end the turn.
//! - [`Act::Stubborn`]: add a todo only a person can do, then claim to be done; after each
//!   objection, `list` the todos (it can do nothing else) and end the turn again, so only the
//!   objection budget can end the prompt.
//! - [`Act::Gated`]: add one todo, then `complete` a todo number that does not exist, which the
//!   todo server's `_PreToolUse` denies before it runs; after the denial, `list` and complete
//!   the real one, then end the turn.
//! - [`Act::Delegate`]: add one todo and hand it to a subagent (the built-in `agent` tool). The
//!   subagent claims to be done at once; after the todo server's `_SubagentStop` objects, it
//!   works as in act one (`list`, then `complete`) and ends its turn; the parent then ends its own.
//!
//! Compaction requests are answered with a fixed summary.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};

use hookloop::hooks;
use hookloop::machine::{
    AGENT_TOOL, AgentId, CallId, LlmReply, LlmRequest, Message, Purpose, SUMMARY_PREFIX,
    StopReason, ToolCall,
};
use hookloop::ports::{LlmClient, LlmError};
use hookloop::progress::Event;

/// Which behaviour the scripted model follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Plan todos, claim to be done, then work through what the hooks say is open.
    WorkThroughTodos,
    /// Plan a todo it cannot do, and keep claiming to be done.
    Stubborn,
    /// Plan a todo, then complete the wrong number: a `_PreToolUse` denial sets it right.
    Gated,
    /// Plan a todo and hand it to a subagent, which a `_SubagentStop` objection keeps at it.
    Delegate,
}

/// The todo the model plans in act four, and hands to a subagent.
pub const DELEGATED_TODO: &str = "write the upgrade guide";

/// The task the model gives the subagent in act four.
pub const DELEGATED_TASK: &str =
    "Write the upgrade guide, then complete its todo in the todo server.";

/// The todo the model plans in act three.
pub const GATED_TODO: &str = "write the release notes";

/// The todo number the model gets wrong in act three (only #1 exists).
pub const WRONG_TODO: u64 = 2;

/// The todos the model plans in act one.
pub const RELEASE_TODOS: [&str; 3] = ["write the changelog", "tag v1.0", "publish the crate"];

/// The todo the model plans in act two, which no tool can get done.
pub const HUMAN_TODO: &str = "get sign-off from legal";

/// The summary the scripted model gives when the engine compacts the history.
pub const DEMO_SUMMARY: &str = "The user asked to get the release out. The work was planned as todos in the todo server and is being worked through.";

/// The scripted model of the demo. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct DemoModel {
    act: Act,
    server: String,
}

impl DemoModel {
    /// A scripted model for `act`, using the todo server named `server`.
    pub fn new(act: Act, server: &str) -> Self {
        Self {
            act,
            server: server.to_owned(),
        }
    }

    fn tool(&self, name: &str) -> String {
        hooks::qualify(&self.server, name)
    }

    /// The reply to one request: a pure function of the request.
    pub fn reply(&self, request: &LlmRequest<'_>) -> LlmReply {
        if let Purpose::Summary { .. } = request.purpose {
            return text(DEMO_SUMMARY);
        }
        let messages = request.messages;
        let hook = last_hook_answer(messages);
        // After a compaction the `add` calls are gone, but the summary says the work is planned.
        let planned = messages.iter().any(|m| {
            self.calls(m, "add").next().is_some()
                || matches!(m, Message::User { text } if text.starts_with(SUMMARY_PREFIX))
        });
        match (self.act, hook) {
            (Act::WorkThroughTodos, None) if !planned => {
                let calls = RELEASE_TODOS
                    .iter()
                    .map(|todo| (self.tool("add"), json!({ "text": todo })))
                    .collect();
                self.call(messages, "Planning the release as todos.", calls)
            }
            (Act::Stubborn, None) if !planned => self.call(
                messages,
                "Noting what is left.",
                vec![(self.tool("add"), json!({ "text": HUMAN_TODO }))],
            ),
            (Act::Gated, None) if !planned => self.call(
                messages,
                "Noting the release notes.",
                vec![(self.tool("add"), json!({ "text": GATED_TODO }))],
            ),
            (Act::Gated, None) => self.call(
                messages,
                &format!("Completing todo #{WRONG_TODO}."),
                vec![(self.tool("complete"), json!({ "id": WRONG_TODO }))],
            ),
            (Act::Gated, Some(at)) => self.work(messages, at, DONE),
            (Act::Delegate, hook) => self.delegate(messages, hook),
            (Act::WorkThroughTodos, None) => text("The release is planned and in hand. I'm done."),
            (Act::Stubborn, None) => text("The backlog is written down. I'm done."),
            (Act::WorkThroughTodos, Some(at)) => self.work(messages, at, DONE),
            (Act::Stubborn, Some(at)) => match self.list_after(messages, at) {
                None => self.list(messages, "The hook says something is still open. Checking."),
                Some(_) => text(
                    "Only a person can get that sign-off; there is nothing more I can do. I'm done.",
                ),
            },
        }
    }

    /// Act four: the parent plans and delegates; the subagent (whose first message is its
    /// task) claims to be done until a hook objects, then works through the list.
    fn delegate(&self, messages: &[Message], hook: Option<usize>) -> LlmReply {
        let child =
            matches!(messages.first(), Some(Message::User { text }) if text == DELEGATED_TASK);
        if child {
            return match hook {
                None => text("The upgrade guide is written."),
                Some(at) => self.work(
                    messages,
                    at,
                    "The upgrade guide is written and its todo is ticked off.",
                ),
            };
        }
        let planned = messages
            .iter()
            .any(|m| self.calls(m, "add").next().is_some());
        let delegated = messages.iter().any(|m| {
            matches!(m, Message::Assistant { tool_calls, .. }
                if tool_calls.iter().any(|c| c.name == AGENT_TOOL))
        });
        if !planned {
            self.call(
                messages,
                "Noting the upgrade guide as a todo.",
                vec![(self.tool("add"), json!({ "text": DELEGATED_TODO }))],
            )
        } else if !delegated {
            let task = json!({"description": "Write the upgrade guide", "prompt": DELEGATED_TASK});
            self.call(
                messages,
                "Handing the guide to a subagent.",
                vec![(AGENT_TOOL.to_owned(), task)],
            )
        } else {
            text("The subagent wrote the upgrade guide and ticked it off. Done.")
        }
    }

    fn work(&self, messages: &[Message], hook_at: usize, finished: &str) -> LlmReply {
        let Some((list_at, open)) = self.list_after(messages, hook_at) else {
            let say = match hook_name(&messages[hook_at]).as_deref() {
                Some("_PostCompact") => {
                    "The history was compacted; the todo server put the open todos back. Checking the list."
                }
                Some("_PreToolUse") => {
                    "The todo server stopped that call: there is no such todo. Checking the list."
                }
                _ => "The todo server objects: todos are still open. Let me look at the list.",
            };
            return self.list(messages, say);
        };
        let done = self.completed_after(messages, list_at);
        match open.iter().find(|(id, _)| !done.contains(id)) {
            // Writing the changelog is real work: a long message, which fills the small context
            // window of the demo and brings on the compaction.
            Some((id, text)) if text.contains("changelog") => self.call(
                messages,
                &format!("Here is the changelog; completing todo #{id}.\n\n{CHANGELOG}"),
                vec![(self.tool("complete"), json!({ "id": id }))],
            ),
            Some((id, _)) => self.call(
                messages,
                &format!("Completing todo #{id}."),
                vec![(self.tool("complete"), json!({ "id": id }))],
            ),
            None => text(finished),
        }
    }

    fn list(&self, messages: &[Message], say: &str) -> LlmReply {
        self.call(messages, say, vec![(self.tool("list"), json!({}))])
    }

    fn call(&self, messages: &[Message], say: &str, calls: Vec<(String, Value)>) -> LlmReply {
        let tool_calls = calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, arguments))| ToolCall {
                id: CallId(format!("demo_{}_{i}", messages.len())),
                name,
                arguments,
            })
            .collect();
        LlmReply {
            text: say.to_owned(),
            tool_calls,
            stop: StopReason::ToolUse,
            usage: None,
        }
    }

    fn calls<'a>(&self, message: &'a Message, tool: &str) -> impl Iterator<Item = &'a ToolCall> {
        let name = self.tool(tool);
        let calls: &[ToolCall] = match message {
            Message::Assistant { tool_calls, .. } => tool_calls,
            Message::User { .. } | Message::ToolResult { .. } => &[],
        };
        calls.iter().filter(move |c| c.name == name)
    }

    /// The output of the tool call `id`, if it succeeded.
    fn output_of(messages: &[Message], id: &CallId) -> Option<String> {
        messages.iter().find_map(|m| match m {
            Message::ToolResult { call_id, output } if call_id == id && !output.is_error => {
                Some(output.joined_text())
            }
            _ => None,
        })
    }

    /// The newest `list` answered after message `from`: where, and the open todos it shows.
    fn list_after(&self, messages: &[Message], from: usize) -> Option<(usize, Vec<(u64, String)>)> {
        messages
            .iter()
            .enumerate()
            .skip(from)
            .rev()
            .find_map(|(i, m)| {
                let call = self.calls(m, "list").next()?;
                Some((i, open_todos(&Self::output_of(messages, &call.id)?)))
            })
    }

    /// Todos completed successfully after message `from`.
    fn completed_after(&self, messages: &[Message], from: usize) -> BTreeSet<u64> {
        messages[from..]
            .iter()
            .flat_map(|m| self.calls(m, "complete"))
            .filter(|call| {
                Self::output_of(messages, &call.id).is_some_and(|out| out.starts_with("completed"))
            })
            .filter_map(|call| call.arguments.get("id").and_then(Value::as_u64))
            .collect()
    }
}

/// What the model says when the todos of acts one and three are all complete.
const DONE: &str = "Every todo is complete: the release is out. Stopping here.";

impl LlmClient for DemoModel {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        let reply = self.reply(&request);
        // A short pause, so the demo reads like a session rather than a dump.
        tokio::time::sleep(Duration::from_millis(120)).await;
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

/// Whether a tool result is a hook's answer: the engine injects `{"hook", "server", "text"}`.
fn is_hook_body(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|v| {
        v.get("hook").is_some() && v.get("server").is_some() && v.get("text").is_some()
    })
}

/// The index of the newest hook answer in the conversation.
fn last_hook_answer(messages: &[Message]) -> Option<usize> {
    messages.iter().rposition(|m| match m {
        Message::ToolResult { output, .. } => is_hook_body(&output.joined_text()),
        Message::User { .. } | Message::Assistant { .. } => false,
    })
}

/// The open todos of a `list` answer, from its lines `#<id> [ ] <text>`.
pub fn open_todos(list: &str) -> Vec<(u64, String)> {
    list.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix('#')?;
            let (id, rest) = rest.split_once(' ')?;
            let text = rest.strip_prefix("[ ] ")?;
            Some((id.parse().ok()?, text.to_owned()))
        })
        .collect()
}

/// The name of the hook whose answer `message` carries, if it carries one.
fn hook_name(message: &Message) -> Option<String> {
    let Message::ToolResult { output, .. } = message else {
        return None;
    };
    let value: Value = serde_json::from_str(&output.joined_text()).ok()?;
    Some(value.get("hook")?.as_str()?.to_owned())
}

/// What the scripted model writes for the changelog todo.
const CHANGELOG: &str = "## v1.0\n\n\
### Added\n\
- Hook tools: MCP servers steer the agent loop through `_Stop` and `_PostCompact`.\n\
- An Agent Client Protocol agent (`hookloop acp`) and a one-shot CLI (`hookloop run`).\n\
- OpenAI Chat Completions and Anthropic Messages providers, with retries and timeouts.\n\
- Transcripts: every effect and fact of a session, replayable exactly.\n\n\
### Sovereignty\n\
- A hook that does not answer in time has not objected; two timeouts in a row kill its server.\n\
- `_Stop` objections are budgeted per session; after the budget the engine stops regardless.\n\
- A model that ends its turn right after an objection has declined it, and the turn ends.\n\n\
### Changed\n\
- Compaction keeps the current prompt and asks `_PostCompact` what must survive the summary.\n\
- Hook answers reach the model JSON-encoded as tool results, never as instructions.\n\n\
### Fixed\n\
- Tool calls cancelled mid-flight are answered in the history, so every call has its result.";

/// Writes the story as it happens: one line per event worth seeing.
pub struct Narrator<W> {
    out: W,
}

impl<W: Write> Narrator<W> {
    /// A narrator writing to `out`.
    pub fn new(out: W) -> Self {
        Self { out }
    }

    /// Narrates one event of the top-level agent.
    pub fn event(&mut self, event: &Event) -> std::io::Result<()> {
        self.event_in(None, event)
    }

    /// Narrates one event of `agent` (a subagent), or of the top-level agent with `None`: a
    /// subagent's lines are indented further and start with its id.
    pub fn event_in(&mut self, agent: Option<&AgentId>, event: &Event) -> std::io::Result<()> {
        let indent = if agent.is_some() { "      " } else { "  " };
        let who = agent.map(|a| format!("[{a}] ")).unwrap_or_default();
        let line = match event {
            Event::HookCalled { hook, servers } => {
                let names: Vec<&str> = servers.iter().map(|s| s.as_str()).collect();
                format!("{indent}{who}· engine calls {hook} on {}", names.join(", "))
            }
            // A subagent's finish is its call's end, which its parent's line shows.
            Event::Finished { .. } if agent.is_some() => return Ok(()),
            Event::Finished { reason } => {
                format!(
                    "{indent}■ prompt finished: {}",
                    serde_json::to_value(reason)
                        .ok()
                        .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_else(|| format!("{reason:?}"))
                )
            }
            other => match other.describe_in(agent) {
                Some(line) => format!("{indent}{line}"),
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
    use hookloop::hooks::Hook;
    use hookloop::machine::ToolOutput;

    fn request(messages: &[Message]) -> LlmRequest<'_> {
        LlmRequest {
            purpose: Purpose::Turn,
            system: None,
            messages,
            tools: &[],
            instruction: None,
            max_output_tokens: 100,
            lineage: None,
        }
    }

    /// Plays `reply` against `messages`, answering tool calls with `answer`.
    fn step(
        model: &DemoModel,
        messages: &mut Vec<Message>,
        answer: impl Fn(&ToolCall) -> String,
    ) -> LlmReply {
        let reply = model.reply(&request(messages));
        messages.push(Message::Assistant {
            text: reply.text.clone(),
            tool_calls: reply.tool_calls.clone(),
        });
        for call in &reply.tool_calls {
            messages.push(Message::ToolResult {
                call_id: call.id.clone(),
                output: ToolOutput::text(answer(call)),
            });
        }
        reply
    }

    fn hook(messages: &mut Vec<Message>, hook: Hook, text: &str) {
        let id = CallId(format!("hook_{}", messages.len()));
        messages.push(Message::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: hooks::qualify("todo", hook.tool_name()),
                arguments: json!({}),
            }],
        });
        messages.push(Message::ToolResult {
            call_id: id,
            output: ToolOutput::text(hooks::encode_hook_body(hook, "todo", text)),
        });
    }

    fn names(reply: &LlmReply) -> Vec<&str> {
        reply.tool_calls.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn open_todos_are_read_from_a_list() {
        assert_eq!(
            open_todos("#1 [x] a\n#2 [ ] b c\n#10 [ ] d\nno todos"),
            [(2, "b c".to_owned()), (10, "d".to_owned())]
        );
    }

    #[test]
    fn act_one_plans_claims_done_then_works_through_the_list() {
        let model = DemoModel::new(Act::WorkThroughTodos, "todo");
        let mut messages = vec![Message::user("ship it")];
        let plan = step(&model, &mut messages, |_| "added".into());
        assert_eq!(names(&plan), ["todo__add"; 3]);
        let claim = step(&model, &mut messages, |_| unreachable!());
        assert!(claim.tool_calls.is_empty() && claim.stop == StopReason::EndTurn);

        hook(&mut messages, Hook::Stop, "3 open: a; b; c");
        let list = step(&model, &mut messages, |_| {
            "#1 [ ] a\n#2 [ ] b\n#3 [x] c".into()
        });
        assert_eq!(names(&list), ["todo__list"]);
        let first = step(&model, &mut messages, |c| {
            format!("completed #{}", c.arguments["id"])
        });
        assert_eq!(first.tool_calls[0].arguments, json!({"id": 1}));
        let second = step(&model, &mut messages, |c| {
            format!("completed #{}", c.arguments["id"])
        });
        assert_eq!(second.tool_calls[0].arguments, json!({"id": 2}));
        let end = step(&model, &mut messages, |_| unreachable!());
        assert!(end.tool_calls.is_empty() && end.stop == StopReason::EndTurn);
    }

    #[test]
    fn after_a_compaction_the_re_injected_list_restarts_the_work() {
        let model = DemoModel::new(Act::WorkThroughTodos, "todo");
        let mut messages = vec![Message::user(DEMO_SUMMARY), Message::user("ship it")];
        hook(&mut messages, Hook::PostCompact, "Open todos:\n- c");
        let list = step(&model, &mut messages, |_| "#1 [x] a\n#3 [ ] c".into());
        assert_eq!(names(&list), ["todo__list"]);
        let done = step(&model, &mut messages, |_| "completed #3: c".into());
        assert_eq!(done.tool_calls[0].arguments, json!({"id": 3}));
    }

    #[test]
    fn act_two_lists_after_each_objection_and_claims_done_again() {
        let model = DemoModel::new(Act::Stubborn, "todo");
        let mut messages = vec![Message::user("tidy up")];
        assert_eq!(
            names(&step(&model, &mut messages, |_| "added #1".into())),
            ["todo__add"]
        );
        assert!(
            step(&model, &mut messages, |_| unreachable!())
                .tool_calls
                .is_empty()
        );
        for _ in 0..3 {
            hook(&mut messages, Hook::Stop, "1 open: get sign-off from legal");
            let list = step(&model, &mut messages, |_| {
                "#1 [ ] get sign-off from legal".into()
            });
            assert_eq!(names(&list), ["todo__list"]);
            let end = step(&model, &mut messages, |_| unreachable!());
            assert!(end.tool_calls.is_empty() && end.stop == StopReason::EndTurn);
        }
    }

    #[test]
    fn act_three_completes_a_wrong_number_then_the_listed_one_after_the_denial() {
        let model = DemoModel::new(Act::Gated, "todo");
        let mut messages = vec![Message::user("release notes")];
        assert_eq!(
            names(&step(&model, &mut messages, |_| "added #1".into())),
            ["todo__add"]
        );
        let wrong = model.reply(&request(&messages));
        assert_eq!(wrong.tool_calls[0].arguments, json!({"id": WRONG_TODO}));
        messages.push(Message::Assistant {
            text: wrong.text.clone(),
            tool_calls: wrong.tool_calls.clone(),
        });
        messages.push(Message::ToolResult {
            call_id: wrong.tool_calls[0].id.clone(),
            output: ToolOutput::error(hooks::encode_hook_body(
                Hook::PreToolUse,
                "todo",
                "there is no todo #2",
            )),
        });
        let list = step(&model, &mut messages, |_| {
            "#1 [ ] write the release notes".into()
        });
        assert_eq!(names(&list), ["todo__list"]);
        let done = step(&model, &mut messages, |_| "completed #1".into());
        assert_eq!(done.tool_calls[0].arguments, json!({"id": 1}));
        let end = step(&model, &mut messages, |_| unreachable!());
        assert!(end.tool_calls.is_empty() && end.stop == StopReason::EndTurn);
    }

    #[test]
    fn summaries_are_fixed() {
        let model = DemoModel::new(Act::WorkThroughTodos, "todo");
        let messages = [Message::user("x")];
        let mut req = request(&messages);
        req.purpose = Purpose::Summary { from: 0 };
        assert_eq!(model.reply(&req).text, DEMO_SUMMARY);
    }
}
