//! Cursor's agent: hooks in `.cursor/hooks.json` (`{"version": 1, "hooks": {...}}`), events
//! named by `hook_event_name` in camelCase, answers of one flat JSON object on stdout.
//!
//! Followed: Cursor's hooks documentation (cursor.com/docs/hooks, `hooks.json` version 1): the
//! common input (`conversation_id`, `generation_id`, `model`, `cursor_version`,
//! `workspace_roots`, `user_email`, `transcript_path`), `beforeShellExecution` and
//! `beforeMCPExecution` answered with `permission` (`allow`, `deny`, `ask`), `user_message` and
//! `agent_message`, `sessionStart` and `postToolUse` with `additional_context`, `stop` with
//! `followup_message` (sent as the next user message; `loop_limit` caps the follow-ups, 5 by
//! default).
//!
//! What Cursor cannot carry: context after a compaction (`preCompact` only observes), context
//! on a prompt (`beforeSubmitPrompt` can only let it through or not), summary guidance, and
//! subagent starts and ends in a format the bridge can answer. A `stop` objection arrives as a
//! user message, not as a tool result: the JSON body is what keeps it from reading as the
//! user's own words.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{
    Decoded, EventError, Point, Reply, Verdict, named_object, plain, response_text, typed,
};
use crate::hooks;

/// The fields every event carries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Base {
    /// The conversation: the session the bridge keeps its state for.
    pub conversation_id: String,
    /// The generation (one turn).
    #[serde(default)]
    pub generation_id: String,
    /// The model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Cursor's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor_version: Option<String>,
    /// The workspace's folders.
    #[serde(default)]
    pub workspace_roots: Vec<String>,
    /// The user's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_email: Option<String>,
    /// The conversation's transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_path: Option<String>,
}

event_struct!(
    /// An event the bridge reads no field of beyond the common ones.
    Plain {}
);
event_struct!(
    /// A prompt is about to be submitted.
    BeforeSubmitPrompt {
        /// The prompt.
        #[serde(default)]
        prompt: String,
    }
);
event_struct!(
    /// A shell command is about to run.
    BeforeShellExecution {
        /// The command.
        #[serde(default)]
        command: String,
        /// Where.
        #[serde(default)]
        cwd: String,
    }
);
event_struct!(
    /// An MCP tool is about to run.
    BeforeMcpExecution {
        /// The tool (`MCP:<server>:<tool>`, or the bare tool name).
        #[serde(default)]
        tool_name: String,
        /// Its arguments: an object, or a string of JSON.
        #[serde(default)]
        tool_input: Value,
        /// The server's URL, for a remote server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// The server's command, for a local one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
    }
);
event_struct!(
    /// A tool ran (any tool).
    PostToolUse {
        /// The tool.
        #[serde(default)]
        tool_name: String,
        /// Its arguments.
        #[serde(default)]
        tool_input: Value,
        /// Its output.
        #[serde(default)]
        tool_output: Value,
    }
);
event_struct!(
    /// The agent loop ended.
    Stop {
        /// `completed`, `aborted` or `error`.
        #[serde(default)]
        status: String,
        /// Follow-ups already sent in this loop.
        #[serde(default)]
        loop_count: u32,
    }
);

/// One Cursor event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hook_event_name", rename_all = "camelCase")]
#[allow(missing_docs)]
pub enum Event {
    SessionStart(Plain),
    SessionEnd(Plain),
    BeforeSubmitPrompt(BeforeSubmitPrompt),
    BeforeShellExecution(BeforeShellExecution),
    #[serde(rename = "beforeMCPExecution")]
    BeforeMcpExecution(BeforeMcpExecution),
    PreToolUse(Plain),
    PostToolUse(PostToolUse),
    PostToolUseFailure(Plain),
    AfterShellExecution(Plain),
    #[serde(rename = "afterMCPExecution")]
    AfterMcpExecution(Plain),
    BeforeReadFile(Plain),
    AfterFileEdit(Plain),
    SubagentStart(Plain),
    SubagentStop(Plain),
    PreCompact(Plain),
    Stop(Stop),
    AfterAgentResponse(Plain),
    AfterAgentThought(Plain),
}

const NAMES: [&str; 18] = [
    "sessionStart",
    "sessionEnd",
    "beforeSubmitPrompt",
    "beforeShellExecution",
    "beforeMCPExecution",
    "preToolUse",
    "postToolUse",
    "postToolUseFailure",
    "afterShellExecution",
    "afterMCPExecution",
    "beforeReadFile",
    "afterFileEdit",
    "subagentStart",
    "subagentStop",
    "preCompact",
    "stop",
    "afterAgentResponse",
    "afterAgentThought",
];

impl Event {
    /// The host's name of the event.
    pub fn name(&self) -> &'static str {
        NAMES[self.index()]
    }

    fn index(&self) -> usize {
        match self {
            Self::SessionStart(_) => 0,
            Self::SessionEnd(_) => 1,
            Self::BeforeSubmitPrompt(_) => 2,
            Self::BeforeShellExecution(_) => 3,
            Self::BeforeMcpExecution(_) => 4,
            Self::PreToolUse(_) => 5,
            Self::PostToolUse(_) => 6,
            Self::PostToolUseFailure(_) => 7,
            Self::AfterShellExecution(_) => 8,
            Self::AfterMcpExecution(_) => 9,
            Self::BeforeReadFile(_) => 10,
            Self::AfterFileEdit(_) => 11,
            Self::SubagentStart(_) => 12,
            Self::SubagentStop(_) => 13,
            Self::PreCompact(_) => 14,
            Self::Stop(_) => 15,
            Self::AfterAgentResponse(_) => 16,
            Self::AfterAgentThought(_) => 17,
        }
    }

    /// The fields every event carries.
    pub fn base(&self) -> &Base {
        match self {
            Self::BeforeSubmitPrompt(e) => &e.base,
            Self::BeforeShellExecution(e) => &e.base,
            Self::BeforeMcpExecution(e) => &e.base,
            Self::PostToolUse(e) => &e.base,
            Self::Stop(e) => &e.base,
            Self::SessionStart(e)
            | Self::SessionEnd(e)
            | Self::PreToolUse(e)
            | Self::PostToolUseFailure(e)
            | Self::AfterShellExecution(e)
            | Self::AfterMcpExecution(e)
            | Self::BeforeReadFile(e)
            | Self::AfterFileEdit(e)
            | Self::SubagentStart(e)
            | Self::SubagentStop(e)
            | Self::PreCompact(e)
            | Self::AfterAgentResponse(e)
            | Self::AfterAgentThought(e) => &e.base,
        }
    }
}

/// Parses one event.
pub fn read(json: &[u8]) -> Result<Event, EventError> {
    let (map, name) = named_object(json, "hook_event_name")?;
    if !NAMES.contains(&name.as_str()) {
        return Err(EventError::Unknown(name));
    }
    typed(map, &name)
}

/// The answer's JSON: one flat object, its fields per event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// `beforeShellExecution`, `beforeMCPExecution`: `allow`, `deny` or `ask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission: Option<String>,
    /// Shown to the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_message: Option<String>,
    /// Sent to the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_message: Option<String>,
    /// `beforeSubmitPrompt`: `false` keeps the prompt back.
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_: Option<bool>,
    /// `sessionStart`, `postToolUse`: context for the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
    /// `stop`: submitted as the next user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub followup_message: Option<String>,
    /// Fields this version does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `MCP:<server>:<tool>` as hookloop names it; any other name unchanged.
fn tool_name(name: &str) -> String {
    name.strip_prefix("MCP:")
        .and_then(|rest| rest.split_once(':'))
        .map_or_else(
            || name.to_owned(),
            |(server, tool)| hooks::qualify(server, tool),
        )
}

/// A tool input that may come as a string of JSON.
fn input_value(input: &Value) -> Value {
    match input {
        Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| input.clone()),
        other => other.clone(),
    }
}

/// The porting table for Cursor.
pub(crate) fn point(event: &Event) -> Point {
    match event {
        Event::SessionStart(_) => Point::SessionStart,
        Event::SessionEnd(_) => Point::SessionEnd,
        Event::BeforeShellExecution(e) => Point::BeforeTool {
            tool: "Shell".into(),
            arguments: serde_json::json!({ "command": e.command, "cwd": e.cwd }),
        },
        Event::BeforeMcpExecution(e) => Point::BeforeTool {
            tool: tool_name(&e.tool_name),
            arguments: input_value(&e.tool_input),
        },
        Event::PostToolUse(e) => Point::AfterTool {
            tool: tool_name(&e.tool_name),
            arguments: input_value(&e.tool_input),
            is_error: false,
            output: response_text(&e.tool_output),
        },
        // An aborted or failed loop is not an end of turn to object to.
        Event::Stop(e) if e.status == "completed" => Point::EndOfTurn {
            continuing: Some(e.loop_count > 0),
        },
        Event::PreCompact(_) => Point::BeforeCompaction,
        Event::Stop(_)
        | Event::BeforeSubmitPrompt(_)
        | Event::PreToolUse(_)
        | Event::PostToolUseFailure(_)
        | Event::AfterShellExecution(_)
        | Event::AfterMcpExecution(_)
        | Event::BeforeReadFile(_)
        | Event::AfterFileEdit(_)
        | Event::SubagentStart(_)
        | Event::SubagentStop(_)
        | Event::AfterAgentResponse(_)
        | Event::AfterAgentThought(_) => Point::Unmapped,
    }
}

/// The answer carrying `verdict`: exit 0 and one JSON object.
pub(crate) fn answer(event: &Event, verdict: &Verdict) -> Reply {
    let gate = matches!(
        event,
        Event::BeforeShellExecution(_) | Event::BeforeMcpExecution(_)
    );
    let mut output = Output::default();
    match verdict {
        Verdict::Quiet if gate => output.permission = Some("allow".into()),
        Verdict::Quiet => {}
        Verdict::Context(text) => {
            if matches!(event, Event::SessionStart(_) | Event::PostToolUse(_)) {
                output.additional_context = Some(text.clone());
            }
        }
        Verdict::Block(text) if gate => {
            output.permission = Some("deny".into());
            output.user_message = Some(text.clone());
            output.agent_message = Some(text.clone());
        }
        Verdict::Block(text) => match event {
            Event::Stop(_) => output.followup_message = Some(text.clone()),
            Event::BeforeSubmitPrompt(_) => {
                output.continue_ = Some(false);
                output.user_message = Some(text.clone());
            }
            _ => {}
        },
    }
    Reply::json(&output)
}

/// A command's reply under Cursor's rules: exit 2 blocks a gated action with stderr; exit 0
/// reads stdout as JSON; any other exit lets the action go on.
pub(crate) fn decode(event: &Event, reply: &Reply) -> Decoded {
    let gate = matches!(
        event,
        Event::BeforeShellExecution(_) | Event::BeforeMcpExecution(_) | Event::PreToolUse(_)
    );
    match reply.exit_code {
        2 if gate => Decoded {
            verdict: Verdict::Block(plain(&reply.stderr).unwrap_or_default()),
            ignored: Vec::new(),
        },
        0 => {
            let Ok(output) = serde_json::from_str::<Output>(reply.stdout.trim()) else {
                return Decoded::quiet();
            };
            let message = || {
                output
                    .agent_message
                    .clone()
                    .or_else(|| output.user_message.clone())
                    .unwrap_or_default()
            };
            let mut ignored = Vec::new();
            let verdict = match event {
                _ if gate && output.permission.as_deref() == Some("deny") => {
                    Verdict::Block(message())
                }
                Event::Stop(_) => match output.followup_message.as_deref().and_then(plain) {
                    Some(text) => Verdict::Block(text),
                    None => Verdict::Quiet,
                },
                Event::BeforeSubmitPrompt(_) if output.continue_ == Some(false) => {
                    Verdict::Block(output.user_message.clone().unwrap_or_default())
                }
                _ => match output.additional_context.as_deref().and_then(plain) {
                    Some(text) => Verdict::Context(text),
                    None => Verdict::Quiet,
                },
            };
            if output.permission.as_deref() == Some("ask") {
                ignored.push("permission ask");
            }
            Decoded { verdict, ignored }
        }
        _ => Decoded::quiet(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(name: &str, fields: Value) -> Event {
        let mut value = json!({"conversation_id": "c1", "generation_id": "g1",
            "model": "m", "cursor_version": "2.0.77", "workspace_roots": ["/w"],
            "hook_event_name": name});
        value
            .as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        read(value.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_completed_stop_is_an_end_of_turn_continuing_after_a_follow_up() {
        let e = event("stop", json!({"status": "completed", "loop_count": 1}));
        assert_eq!(
            point(&e),
            Point::EndOfTurn {
                continuing: Some(true)
            }
        );
        let reply = answer(&e, &Verdict::Block("2 open".into()));
        assert_eq!(
            serde_json::from_str::<Value>(&reply.stdout).unwrap(),
            json!({"followup_message": "2 open"})
        );
        assert_eq!(decode(&e, &reply).verdict, Verdict::Block("2 open".into()));
        let aborted = event("stop", json!({"status": "aborted", "loop_count": 0}));
        assert_eq!(point(&aborted), Point::Unmapped);
    }

    #[test]
    fn an_mcp_call_is_gated_with_permission_deny_and_its_tool_named_as_hookloop_does() {
        let e = event(
            "beforeMCPExecution",
            json!({"tool_name": "MCP:todo:add",
            "tool_input": "{\"text\": \"x\"}", "command": "todo-server"}),
        );
        assert_eq!(
            point(&e),
            Point::BeforeTool {
                tool: "todo__add".into(),
                arguments: json!({"text": "x"})
            }
        );
        let reply = answer(&e, &Verdict::Block("no".into()));
        assert_eq!(
            serde_json::from_str::<Value>(&reply.stdout).unwrap(),
            json!({"permission": "deny", "user_message": "no", "agent_message": "no"})
        );
        assert_eq!(decode(&e, &reply).verdict, Verdict::Block("no".into()));
        assert_eq!(
            answer(&e, &Verdict::Quiet),
            Reply::ok(r#"{"permission":"allow"}"#)
        );
    }

    #[test]
    fn session_start_context_is_additional_context() {
        let e = event("sessionStart", json!({}));
        let reply = answer(&e, &Verdict::Context("c".into()));
        assert_eq!(reply.stdout, r#"{"additional_context":"c"}"#);
        assert_eq!(decode(&e, &reply).verdict, Verdict::Context("c".into()));
        let prompt = event("beforeSubmitPrompt", json!({"prompt": "p"}));
        assert_eq!(point(&prompt), Point::Unmapped);
        assert_eq!(
            answer(&prompt, &Verdict::Context("c".into())),
            Reply::ok("{}")
        );
    }

    #[test]
    fn the_conversation_is_the_session_and_unknown_fields_stay() {
        let e = event("preCompact", json!({"context_usage_percent": 90}));
        assert_eq!(e.base().conversation_id, "c1");
        let again: Value = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(again["context_usage_percent"], 90);
        assert_eq!(again["hook_event_name"], "preCompact");
    }
}
