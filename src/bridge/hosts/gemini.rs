//! Gemini CLI (0.61.0): hooks in `settings.json` under `hooks`, events named by
//! `hook_event_name`, answers of exit status and one JSON object on stdout.
//!
//! Followed: the hooks reference (geminicli.com/docs/hooks/reference, `docs/hooks/` of
//! google-gemini/gemini-cli) and the hook code of the 0.61.0 release (its `createBaseInput`
//! and event inputs, `decision` `deny` or `block` as a block). Where the two differ the
//! release wins: an MCP tool is named `mcp_<server>_<tool>` there (the reference says
//! `mcp__<server>__<tool>`), so the bridge reads the server and tool from `mcp_context`.
//!
//! What Gemini CLI cannot carry: context after a compaction (`PreCompress` is advisory, and
//! there is no event after it nor a session start with source `compact`), summary guidance,
//! subagent starts and ends, and an answer to `SessionEnd`. Its `AfterAgent` block retries with
//! the reason as a new prompt and has no cap of its own.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{
    Decoded, EventError, Point, Reply, Verdict, named_object, plain, response_text, typed,
};
use crate::hooks;

/// The fields every event carries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Base {
    /// The session's id.
    pub session_id: String,
    /// The session's recording, or empty.
    #[serde(default)]
    pub transcript_path: String,
    /// The working directory.
    #[serde(default)]
    pub cwd: String,
    /// When the hook runs (ISO 8601).
    #[serde(default)]
    pub timestamp: String,
}

/// `mcp_context`: the server behind an MCP tool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McpContext {
    /// The server's name in the configuration.
    pub server_name: String,
    /// The tool's name on the server.
    pub tool_name: String,
    /// The rest (`command`, `args`, `cwd`, `url`, `tcp`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

event_struct!(
    /// A session starts.
    SessionStart {
        /// `startup`, `resume` or `clear`.
        #[serde(default)]
        source: String,
    }
);
event_struct!(
    /// The session ends; the host does not wait for the hook.
    SessionEnd {
        /// `exit`, `clear`, `logout`, `prompt_input_exit` or `other`.
        #[serde(default)]
        reason: String,
    }
);
event_struct!(
    /// A prompt was submitted, before planning.
    BeforeAgent {
        /// The prompt.
        #[serde(default)]
        prompt: String,
    }
);
event_struct!(
    /// The turn's final answer is in.
    AfterAgent {
        /// The user's request.
        #[serde(default)]
        prompt: String,
        /// The answer.
        #[serde(default)]
        prompt_response: String,
        /// True when this turn is a retry an earlier block asked for.
        #[serde(default)]
        stop_hook_active: bool,
    }
);
event_struct!(
    /// A tool call is about to run.
    BeforeTool {
        /// The tool's name.
        tool_name: String,
        /// Its arguments.
        #[serde(default)]
        tool_input: Value,
        /// Set for an MCP tool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mcp_context: Option<McpContext>,
    }
);
event_struct!(
    /// A tool call ran.
    AfterTool {
        /// The tool's name.
        tool_name: String,
        /// Its arguments.
        #[serde(default)]
        tool_input: Value,
        /// `{llmContent, returnDisplay, error?}`.
        #[serde(default)]
        tool_response: Value,
        /// Set for an MCP tool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mcp_context: Option<McpContext>,
    }
);
event_struct!(
    /// The history is about to be compressed (advisory).
    PreCompress {
        /// `manual` or `auto`.
        #[serde(default)]
        trigger: String,
    }
);
event_struct!(
    /// A system notification.
    Notification {
        /// `ToolPermission`.
        #[serde(default)]
        notification_type: String,
        /// Its summary.
        #[serde(default)]
        message: String,
    }
);
event_struct!(
    /// Before a model request, after it, and before tool selection: the request and reply as
    /// values (`llm_request`, `llm_response` in `extra`).
    ModelEvent {}
);

/// One Gemini CLI event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hook_event_name")]
#[allow(missing_docs)]
pub enum Event {
    SessionStart(SessionStart),
    SessionEnd(SessionEnd),
    BeforeAgent(BeforeAgent),
    AfterAgent(AfterAgent),
    BeforeTool(BeforeTool),
    AfterTool(AfterTool),
    PreCompress(PreCompress),
    Notification(Notification),
    BeforeModel(ModelEvent),
    AfterModel(ModelEvent),
    BeforeToolSelection(ModelEvent),
}

const NAMES: [&str; 11] = [
    "SessionStart",
    "SessionEnd",
    "BeforeAgent",
    "AfterAgent",
    "BeforeTool",
    "AfterTool",
    "PreCompress",
    "Notification",
    "BeforeModel",
    "AfterModel",
    "BeforeToolSelection",
];

impl Event {
    /// The host's name of the event.
    pub fn name(&self) -> &'static str {
        match self {
            Self::SessionStart(_) => NAMES[0],
            Self::SessionEnd(_) => NAMES[1],
            Self::BeforeAgent(_) => NAMES[2],
            Self::AfterAgent(_) => NAMES[3],
            Self::BeforeTool(_) => NAMES[4],
            Self::AfterTool(_) => NAMES[5],
            Self::PreCompress(_) => NAMES[6],
            Self::Notification(_) => NAMES[7],
            Self::BeforeModel(_) => NAMES[8],
            Self::AfterModel(_) => NAMES[9],
            Self::BeforeToolSelection(_) => NAMES[10],
        }
    }

    /// The fields every event carries.
    pub fn base(&self) -> &Base {
        match self {
            Self::SessionStart(e) => &e.base,
            Self::SessionEnd(e) => &e.base,
            Self::BeforeAgent(e) => &e.base,
            Self::AfterAgent(e) => &e.base,
            Self::BeforeTool(e) => &e.base,
            Self::AfterTool(e) => &e.base,
            Self::PreCompress(e) => &e.base,
            Self::Notification(e) => &e.base,
            Self::BeforeModel(e) | Self::AfterModel(e) | Self::BeforeToolSelection(e) => &e.base,
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

/// The answer's JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Output {
    /// `false` stops the agent loop.
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_: Option<bool>,
    /// Shown when `continue` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Hides the hook's metadata from logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppress_output: Option<bool>,
    /// Shown to the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_message: Option<String>,
    /// `allow`, `deny` (alias `block`), `ask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Why, on a denial: the model reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The event's own fields (`hookEventName`, `additionalContext`, `tool_input`,
    /// `clearContext`…), as a map: the host names them per event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_specific_output: Option<Map<String, Value>>,
    /// Fields this version does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool as hookloop names it: `<server>__<tool>` from `mcp_context`, else the host's name.
fn tool_name(name: &str, mcp: Option<&McpContext>) -> String {
    match mcp {
        Some(mcp) => hooks::qualify(&mcp.server_name, &mcp.tool_name),
        None => name.to_owned(),
    }
}

/// The porting table for Gemini CLI.
pub(crate) fn point(event: &Event) -> Point {
    match event {
        Event::SessionStart(_) => Point::SessionStart,
        Event::SessionEnd(_) => Point::SessionEnd,
        Event::BeforeAgent(e) => Point::PromptSubmitted {
            prompt: e.prompt.clone(),
        },
        Event::AfterAgent(e) => Point::EndOfTurn {
            continuing: Some(e.stop_hook_active),
        },
        Event::BeforeTool(e) => Point::BeforeTool {
            tool: tool_name(&e.tool_name, e.mcp_context.as_ref()),
            arguments: e.tool_input.clone(),
        },
        Event::AfterTool(e) => {
            let error = e
                .tool_response
                .get("error")
                .filter(|error| !error.is_null());
            let content = e
                .tool_response
                .get("llmContent")
                .unwrap_or(&e.tool_response);
            Point::AfterTool {
                tool: tool_name(&e.tool_name, e.mcp_context.as_ref()),
                arguments: e.tool_input.clone(),
                is_error: error.is_some(),
                output: response_text(error.unwrap_or(content)),
            }
        }
        Event::PreCompress(_) => Point::BeforeCompaction,
        Event::Notification(_)
        | Event::BeforeModel(_)
        | Event::AfterModel(_)
        | Event::BeforeToolSelection(_) => Point::Unmapped,
    }
}

/// The answer carrying `verdict`: always exit 0 and one JSON object (the host reads stdout as
/// JSON and wants nothing else on it).
pub(crate) fn answer(event: &Event, verdict: &Verdict) -> Reply {
    let mut output = Output::default();
    match verdict {
        Verdict::Quiet => {}
        Verdict::Context(text) => {
            if matches!(
                event,
                Event::SessionStart(_) | Event::BeforeAgent(_) | Event::AfterTool(_)
            ) {
                let mut specific = Map::new();
                specific.insert("hookEventName".into(), event.name().into());
                specific.insert("additionalContext".into(), text.clone().into());
                output.hook_specific_output = Some(specific);
            }
        }
        Verdict::Block(text) => {
            if matches!(
                event,
                Event::BeforeTool(_) | Event::AfterAgent(_) | Event::BeforeAgent(_)
            ) {
                output.decision = Some("deny".into());
                output.reason = Some(text.clone());
            }
        }
    }
    Reply::json(&output)
}

/// A command's reply under Gemini CLI's rules: exit 2 blocks with stderr; exit 0 reads stdout as
/// JSON; any other exit is a warning.
pub(crate) fn decode(event: &Event, reply: &Reply) -> Decoded {
    let blockable = matches!(
        event,
        Event::BeforeTool(_) | Event::AfterAgent(_) | Event::BeforeAgent(_)
    );
    match reply.exit_code {
        2 if blockable => Decoded {
            verdict: Verdict::Block(plain(&reply.stderr).unwrap_or_default()),
            ignored: Vec::new(),
        },
        2 => Decoded {
            verdict: Verdict::Quiet,
            ignored: vec!["a block of an event hookloop does not block"],
        },
        0 => {
            let Ok(output) = serde_json::from_str::<Output>(reply.stdout.trim()) else {
                return Decoded::quiet();
            };
            let mut ignored = Vec::new();
            if output.continue_ == Some(false) {
                ignored.push("continue: false (hooks here do not end the session)");
            }
            let specific = output.hook_specific_output.unwrap_or_default();
            if specific.contains_key("tool_input") {
                ignored.push("tool_input (hooks here do not rewrite a tool's arguments)");
            }
            let blocked = matches!(output.decision.as_deref(), Some("deny" | "block"));
            let verdict = if blocked && blockable {
                Verdict::Block(output.reason.unwrap_or_default())
            } else {
                if blocked {
                    ignored.push("a denial of an event hookloop does not block");
                }
                match specific
                    .get("additionalContext")
                    .and_then(Value::as_str)
                    .and_then(plain)
                {
                    Some(text) => Verdict::Context(text),
                    None => Verdict::Quiet,
                }
            };
            Decoded { verdict, ignored }
        }
        _ => Decoded::quiet(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(value: Value) -> Event {
        read(value.to_string().as_bytes()).unwrap()
    }

    fn base() -> Value {
        json!({"session_id": "g1", "transcript_path": "/t.json", "cwd": "/w",
               "timestamp": "2026-01-01T00:00:00Z"})
    }

    fn with(mut value: Value, fields: Value) -> Value {
        value
            .as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        value
    }

    #[test]
    fn after_agent_is_the_end_of_turn_with_its_retry_flag() {
        let e = event(with(
            base(),
            json!({"hook_event_name": "AfterAgent", "prompt": "p",
            "prompt_response": "done", "stop_hook_active": true}),
        ));
        assert_eq!(
            point(&e),
            Point::EndOfTurn {
                continuing: Some(true)
            }
        );
        let reply = answer(&e, &Verdict::Block("open".into()));
        assert_eq!(
            serde_json::from_str::<Value>(&reply.stdout).unwrap(),
            json!({"decision": "deny", "reason": "open"})
        );
        assert_eq!(decode(&e, &reply).verdict, Verdict::Block("open".into()));
    }

    #[test]
    fn an_mcp_tool_is_named_from_its_context_not_its_host_name() {
        let e = event(with(
            base(),
            json!({"hook_event_name": "BeforeTool",
            "tool_name": "mcp_todo_add", "tool_input": {"text": "x"},
            "mcp_context": {"server_name": "todo", "tool_name": "add", "command": "todo-server"}}),
        ));
        assert_eq!(
            point(&e),
            Point::BeforeTool {
                tool: "todo__add".into(),
                arguments: json!({"text": "x"})
            }
        );
    }

    #[test]
    fn a_failed_tool_is_an_error_with_its_error_as_output() {
        let e = event(with(
            base(),
            json!({"hook_event_name": "AfterTool", "tool_name": "t",
            "tool_input": {}, "tool_response": {"llmContent": "x", "error": "boom"}}),
        ));
        let Point::AfterTool {
            is_error, output, ..
        } = point(&e)
        else {
            panic!()
        };
        assert!(is_error);
        assert_eq!(output, "boom");
    }

    #[test]
    fn context_rides_additional_context_and_quiet_is_an_empty_object() {
        let e = event(with(
            base(),
            json!({"hook_event_name": "SessionStart", "source": "startup"}),
        ));
        let reply = answer(&e, &Verdict::Context("c".into()));
        assert_eq!(
            serde_json::from_str::<Value>(&reply.stdout).unwrap(),
            json!({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "c"}})
        );
        assert_eq!(decode(&e, &reply).verdict, Verdict::Context("c".into()));
        assert_eq!(answer(&e, &Verdict::Quiet), Reply::ok("{}"));
        let end = event(with(
            base(),
            json!({"hook_event_name": "SessionEnd", "reason": "exit"}),
        ));
        assert_eq!(answer(&end, &Verdict::Context("c".into())), Reply::ok("{}"));
    }

    #[test]
    fn unknown_fields_and_events_are_kept_or_named() {
        let e = event(with(
            base(),
            json!({"hook_event_name": "BeforeModel", "llm_request": {"model": "m"}}),
        ));
        let again: Value = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(again["llm_request"]["model"], "m");
        assert!(matches!(
            read(br#"{"hook_event_name":"PostCompress","session_id":"s"}"#),
            Err(EventError::Unknown(_))
        ));
    }

    #[test]
    fn exit_two_blocks_a_tool_and_does_not_block_a_session_start() {
        let reply = Reply {
            exit_code: 2,
            stdout: String::new(),
            stderr: "no".into(),
        };
        let tool = event(with(
            base(),
            json!({"hook_event_name": "BeforeTool", "tool_name": "t"}),
        ));
        assert_eq!(decode(&tool, &reply).verdict, Verdict::Block("no".into()));
        let start = event(with(base(), json!({"hook_event_name": "SessionStart"})));
        assert_eq!(decode(&start, &reply).verdict, Verdict::Quiet);
    }
}
