//! goose: hooks in a plugin's `hooks/hooks.json` (the Open Plugins hooks specification), events
//! named by `event`, fields present only where they apply.
//!
//! Followed: goose's hooks guide (`documentation/docs/guides/context-engineering/hooks.md` of
//! block/goose): the payload (`event`, `session_id`, `matcher_context`, `tool_name`,
//! `tool_input`, `message`, `last_assistant_message`, `working_dir`, `tool_call_id`…), and the
//! decision channel of `PreToolUse` and `Stop`, the only events that block: exit 2 with the
//! reason on stderr, or `{"decision":"block","reason":…}` on stdout whatever the exit status;
//! exit 0 with empty stdout allows.
//!
//! What goose cannot carry: context of any kind (every other event only observes), so
//! `_SessionStart`, `_UserPromptSubmit`, `_PostToolUse` and `_PostCompact` have nowhere to go;
//! subagent starts and ends (not emitted); whether a stop follows an earlier block (the bridge's
//! own latch decides alone). goose caps consecutive Stop blocks itself
//! (`GOOSE_STOP_HOOK_BLOCK_CAP`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Decoded, EventError, Point, Reply, Verdict, named_object, plain, typed};

/// The fields every event carries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Base {
    /// The event's name.
    pub event: String,
    /// The session's id.
    pub session_id: String,
}

/// One goose event: a flat payload whose fields are present where they apply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The name and the session.
    #[serde(flatten)]
    pub base: Base,
    /// What the rule's matcher is tested against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher_context: Option<String>,
    /// Tool events: the tool's namespaced name (`developer__shell`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Tool events: its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<Value>,
    /// `UserPromptSubmit`: the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `Stop`: the turn's last text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_assistant_message: Option<String>,
    /// Tool events: the session's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Tool events: the call's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Fields this version does not name (`decision`, `cause`… of `PreToolUseResult`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

const NAMES: [&str; 12] = [
    "SessionStart",
    "SessionEnd",
    "Stop",
    "UserPromptSubmit",
    "PreToolUse",
    "PreToolUseResult",
    "PostToolUse",
    "PostToolUseFailure",
    "BeforeReadFile",
    "AfterFileEdit",
    "BeforeShellExecution",
    "AfterShellExecution",
];

impl Event {
    /// The host's name of the event.
    pub fn name(&self) -> &str {
        &self.base.event
    }

    /// The fields every event carries.
    pub fn base(&self) -> &Base {
        &self.base
    }

    fn blocks(&self) -> bool {
        matches!(self.name(), "PreToolUse" | "Stop")
    }
}

/// Parses one event.
pub fn read(json: &[u8]) -> Result<Event, EventError> {
    let (map, name) = named_object(json, "event")?;
    if !NAMES.contains(&name.as_str()) {
        return Err(EventError::Unknown(name));
    }
    typed(map, &name)
}

/// The answer's JSON, for the two events that block.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// `block` or `allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Why, on a block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Fields this version does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The porting table for goose.
pub(crate) fn point(event: &Event) -> Point {
    match event.name() {
        "PreToolUse" => Point::BeforeTool {
            tool: event.tool_name.clone().unwrap_or_default(),
            arguments: event.tool_input.clone().unwrap_or(Value::Null),
        },
        "Stop" => Point::EndOfTurn { continuing: None },
        "SessionEnd" => Point::SessionEnd,
        _ => Point::Unmapped,
    }
}

/// The answer carrying `verdict`: a block as `{"decision":"block","reason"}`, anything else as
/// exit 0 with nothing on stdout (an allow).
pub(crate) fn answer(event: &Event, verdict: &Verdict) -> Reply {
    match verdict {
        Verdict::Block(text) if event.blocks() => Reply::json(&Output {
            decision: Some("block".into()),
            reason: Some(text.clone()),
            extra: Map::new(),
        }),
        Verdict::Block(_) | Verdict::Quiet | Verdict::Context(_) => Reply::ok(""),
    }
}

/// A command's reply under goose's rules, in its order: exit 2 blocks with stderr; a
/// `{"decision":"block"}` on stdout blocks whatever the exit; exit 0 with empty stdout or
/// `{"decision":"allow"}` allows; anything else is no decision (the call goes on).
pub(crate) fn decode(event: &Event, reply: &Reply) -> Decoded {
    if !event.blocks() {
        return Decoded::quiet();
    }
    if reply.exit_code == 2 {
        return Decoded {
            verdict: Verdict::Block(plain(&reply.stderr).unwrap_or_default()),
            ignored: Vec::new(),
        };
    }
    let stdout = reply.stdout.trim();
    if stdout.starts_with('{')
        && let Ok(output) = serde_json::from_str::<Output>(stdout)
        && output.decision.as_deref() == Some("block")
    {
        let reason = output
            .reason
            .as_deref()
            .and_then(plain)
            .unwrap_or_else(|| "denied by plugin hook".to_owned());
        return Decoded {
            verdict: Verdict::Block(reason),
            ignored: Vec::new(),
        };
    }
    Decoded::quiet()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(value: Value) -> Event {
        read(value.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_tool_event_reads_its_documented_fields() {
        let e = event(json!({"event": "PreToolUse", "session_id": "abc-123",
            "matcher_context": "developer__shell", "tool_name": "developer__shell",
            "tool_input": {"command": "rg TODO"}, "working_dir": "/p", "tool_call_id": "t1"}));
        assert_eq!(
            point(&e),
            Point::BeforeTool {
                tool: "developer__shell".into(),
                arguments: json!({"command": "rg TODO"})
            }
        );
        assert_eq!(e.base.session_id, "abc-123");
    }

    #[test]
    fn a_stop_block_is_decision_block_on_stdout_and_decodes_back() {
        let e =
            event(json!({"event": "Stop", "session_id": "s", "last_assistant_message": "Done."}));
        assert_eq!(point(&e), Point::EndOfTurn { continuing: None });
        let reply = answer(&e, &Verdict::Block("open todo".into()));
        assert_eq!(reply.stdout, r#"{"decision":"block","reason":"open todo"}"#);
        assert_eq!(
            decode(&e, &reply).verdict,
            Verdict::Block("open todo".into())
        );
        assert_eq!(answer(&e, &Verdict::Quiet), Reply::ok(""));
    }

    #[test]
    fn a_block_on_stdout_counts_whatever_the_exit_and_a_stray_line_is_no_decision() {
        let e = event(json!({"event": "PreToolUse", "session_id": "s", "tool_name": "t"}));
        let reply = Reply {
            exit_code: 1,
            stdout: r#"{"decision":"block"}"#.into(),
            stderr: String::new(),
        };
        assert_eq!(
            decode(&e, &reply).verdict,
            Verdict::Block("denied by plugin hook".into())
        );
        assert_eq!(
            decode(&e, &Reply::ok("checking policy")).verdict,
            Verdict::Quiet
        );
    }

    #[test]
    fn context_has_nowhere_to_go() {
        let e = event(json!({"event": "SessionStart", "session_id": "s"}));
        assert_eq!(point(&e), Point::Unmapped);
        assert_eq!(answer(&e, &Verdict::Context("c".into())), Reply::ok(""));
    }
}
