//! The nested hook format Claude Code and Codex share: events named by `hook_event_name`, an
//! answer of exit status and stdout JSON (`decision`, `reason`, `hookSpecificOutput`).
//!
//! Followed: Claude Code 2.1.332 (code.claude.com/docs/en/hooks, and the input and output
//! schemas that release validates against) and Codex CLI 0.171.0 (the
//! `*.command.input/output.schema.json` that release embeds). Where they differ it is said on the
//! field. Codex refuses an answer with fields its schema does not name, so every answer written
//! here uses only fields both hosts take.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{
    Decoded, EventError, Host, Point, Reply, Verdict, named_object, plain, response_text,
    tool_from_mcp_prefix, typed,
};

/// The fields every event carries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Base {
    /// The host's session id.
    pub session_id: String,
    /// The session's transcript (JSONL). Codex writes `null` when there is none.
    #[serde(default)]
    pub transcript_path: Option<String>,
    /// The working directory.
    #[serde(default)]
    pub cwd: String,
    /// `default`, `plan`, `acceptEdits`, `dontAsk`, `bypassPermissions` (Claude Code adds `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// The model (Codex, on every event but the session's end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The turn (Codex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The prompt in progress (Claude Code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<String>,
    /// Set when the event fires inside a subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The subagent's type, or the `--agent` of the main thread (Claude Code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
}

event_struct!(
    /// A session starts, resumes, is cleared or compacted.
    SessionStart {
        /// `startup`, `resume`, `clear`, `compact` (Claude Code also `fork`).
        source: String,
    }
);
event_struct!(
    /// The user submitted a prompt.
    UserPromptSubmit {
        /// The prompt.
        prompt: String,
    }
);
event_struct!(
    /// A tool call is about to run.
    PreToolUse {
        /// `Bash`, `Write`…, `mcp__<server>__<tool>` for an MCP tool.
        tool_name: String,
        /// Its arguments.
        #[serde(default)]
        tool_input: Value,
        /// The call's id.
        #[serde(default)]
        tool_use_id: String,
    }
);
event_struct!(
    /// A tool call succeeded.
    PostToolUse {
        /// As in [`PreToolUse`].
        tool_name: String,
        /// Its arguments.
        #[serde(default)]
        tool_input: Value,
        /// Its result.
        #[serde(default)]
        tool_response: Value,
        /// The call's id.
        #[serde(default)]
        tool_use_id: String,
    }
);
event_struct!(
    /// A tool call failed (Claude Code).
    PostToolUseFailure {
        /// As in [`PreToolUse`].
        tool_name: String,
        /// Its arguments.
        #[serde(default)]
        tool_input: Value,
        /// The call's id.
        #[serde(default)]
        tool_use_id: String,
        /// What went wrong.
        #[serde(default)]
        error: String,
    }
);
event_struct!(
    /// The main agent ended its turn.
    Stop {
        /// True when the host is already continuing because a Stop hook blocked.
        #[serde(default)]
        stop_hook_active: bool,
        /// The text the turn ended with.
        #[serde(default)]
        last_assistant_message: Option<String>,
    }
);
event_struct!(
    /// A subagent starts.
    SubagentStart {
        /// Its id.
        #[serde(default)]
        agent_id: String,
        /// Its type.
        #[serde(default)]
        agent_type: String,
    }
);
event_struct!(
    /// A subagent ended its turn.
    SubagentStop {
        /// As in [`Stop`].
        #[serde(default)]
        stop_hook_active: bool,
        /// Its id.
        #[serde(default)]
        agent_id: String,
        /// Its type.
        #[serde(default)]
        agent_type: String,
        /// The text it ended with.
        #[serde(default)]
        last_assistant_message: Option<String>,
    }
);
event_struct!(
    /// The history is about to be compacted.
    PreCompact {
        /// `manual` or `auto`.
        #[serde(default)]
        trigger: String,
    }
);
event_struct!(
    /// The history was compacted. Neither host takes context from this event.
    PostCompact {
        /// `manual` or `auto`.
        #[serde(default)]
        trigger: String,
    }
);
event_struct!(
    /// The session ends.
    SessionEnd {
        /// Why (`clear`, `logout`, `prompt_input_exit`, `other`…).
        #[serde(default)]
        reason: String,
    }
);
event_struct!(
    /// A notification to the user (Claude Code).
    Notification {
        /// What it says.
        #[serde(default)]
        message: String,
    }
);

/// One event of the nested format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hook_event_name")]
#[allow(missing_docs)]
pub enum Event {
    SessionStart(SessionStart),
    UserPromptSubmit(UserPromptSubmit),
    PreToolUse(PreToolUse),
    PostToolUse(PostToolUse),
    PostToolUseFailure(PostToolUseFailure),
    Stop(Stop),
    SubagentStart(SubagentStart),
    SubagentStop(SubagentStop),
    PreCompact(PreCompact),
    PostCompact(PostCompact),
    SessionEnd(SessionEnd),
    Notification(Notification),
}

/// The event names of [`Event`], in its order.
const NAMES: [&str; 12] = [
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "SessionEnd",
    "Notification",
];

impl Event {
    /// The host's name of the event.
    pub fn name(&self) -> &'static str {
        match self {
            Self::SessionStart(_) => NAMES[0],
            Self::UserPromptSubmit(_) => NAMES[1],
            Self::PreToolUse(_) => NAMES[2],
            Self::PostToolUse(_) => NAMES[3],
            Self::PostToolUseFailure(_) => NAMES[4],
            Self::Stop(_) => NAMES[5],
            Self::SubagentStart(_) => NAMES[6],
            Self::SubagentStop(_) => NAMES[7],
            Self::PreCompact(_) => NAMES[8],
            Self::PostCompact(_) => NAMES[9],
            Self::SessionEnd(_) => NAMES[10],
            Self::Notification(_) => NAMES[11],
        }
    }

    /// The fields every event carries.
    pub fn base(&self) -> &Base {
        match self {
            Self::SessionStart(e) => &e.base,
            Self::UserPromptSubmit(e) => &e.base,
            Self::PreToolUse(e) => &e.base,
            Self::PostToolUse(e) => &e.base,
            Self::PostToolUseFailure(e) => &e.base,
            Self::Stop(e) => &e.base,
            Self::SubagentStart(e) => &e.base,
            Self::SubagentStop(e) => &e.base,
            Self::PreCompact(e) => &e.base,
            Self::PostCompact(e) => &e.base,
            Self::SessionEnd(e) => &e.base,
            Self::Notification(e) => &e.base,
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

/// The answer's JSON: the top-level fields of both hosts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Output {
    /// `false` stops the host's session (hookloop never asks it).
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_: Option<bool>,
    /// Shown when `continue` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Hides the output from the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppress_output: Option<bool>,
    /// A warning shown to the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_message: Option<String>,
    /// `block` (and, in Claude Code, `approve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Why, when `decision` is `block`: the model reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The event's own fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_specific_output: Option<Specific>,
    /// Fields this version does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `hookSpecificOutput`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Specific {
    /// The event it answers.
    pub hook_event_name: String,
    /// Context for the model (`SessionStart`, `UserPromptSubmit`, `PreToolUse`, `PostToolUse`,
    /// `SubagentStart`; Claude Code also `PostToolUseFailure`, `Stop`, `SubagentStop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
    /// `PreToolUse`: `allow`, `deny`, `ask` (Claude Code also `defer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_decision: Option<String>,
    /// `PreToolUse`: why; the model reads it on a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_decision_reason: Option<String>,
    /// `PreToolUse`: arguments to run the tool with instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// Fields this version does not name.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The porting table for the nested format.
pub(crate) fn point(host: Host, event: &Event) -> Point {
    let _ = host;
    match event {
        Event::SessionStart(e) if e.source == "compact" => Point::PostCompact,
        Event::SessionStart(_) => Point::SessionStart,
        Event::UserPromptSubmit(e) => Point::PromptSubmitted {
            prompt: e.prompt.clone(),
        },
        Event::PreToolUse(e) => Point::BeforeTool {
            tool: tool_from_mcp_prefix(&e.tool_name),
            arguments: e.tool_input.clone(),
        },
        Event::PostToolUse(e) => Point::AfterTool {
            tool: tool_from_mcp_prefix(&e.tool_name),
            arguments: e.tool_input.clone(),
            is_error: false,
            output: response_text(&e.tool_response),
        },
        Event::PostToolUseFailure(e) => Point::AfterTool {
            tool: tool_from_mcp_prefix(&e.tool_name),
            arguments: e.tool_input.clone(),
            is_error: true,
            output: e.error.clone(),
        },
        Event::Stop(e) => Point::EndOfTurn {
            continuing: Some(e.stop_hook_active),
        },
        Event::SubagentStart(e) => Point::SubagentStarted {
            agent: e.agent_id.clone(),
            description: e.agent_type.clone(),
        },
        Event::SubagentStop(e) => Point::SubagentEnded {
            agent: e.agent_id.clone(),
            result: e.last_assistant_message.clone().unwrap_or_default(),
            continuing: Some(e.stop_hook_active),
        },
        Event::PreCompact(_) => Point::BeforeCompaction,
        Event::PostCompact(_) => Point::Compacted,
        Event::SessionEnd(_) => Point::SessionEnd,
        Event::Notification(_) => Point::Unmapped,
    }
}

/// The answer carrying `verdict`. Both hosts read it the same way: exit 0, and on stdout
/// nothing (no objection) or one JSON object.
pub(crate) fn answer(host: Host, event: &Event, verdict: &Verdict) -> Reply {
    let context = |text: &str| Output {
        hook_specific_output: Some(Specific {
            hook_event_name: event.name().to_owned(),
            additional_context: Some(text.to_owned()),
            ..Specific::default()
        }),
        ..Output::default()
    };
    let block = |text: &str| Output {
        decision: Some("block".to_owned()),
        reason: Some(text.to_owned()),
        ..Output::default()
    };
    let takes_context = match event {
        Event::SessionStart(_)
        | Event::UserPromptSubmit(_)
        | Event::PreToolUse(_)
        | Event::PostToolUse(_)
        | Event::SubagentStart(_) => true,
        // Codex has no such event; Claude Code takes context from it.
        Event::PostToolUseFailure(_) => host == Host::ClaudeCode,
        Event::Stop(_)
        | Event::SubagentStop(_)
        | Event::PreCompact(_)
        | Event::PostCompact(_)
        | Event::SessionEnd(_)
        | Event::Notification(_) => false,
    };
    let output = match verdict {
        Verdict::Quiet => None,
        Verdict::Context(text) if takes_context => Some(context(text)),
        Verdict::Context(_) => None,
        Verdict::Block(text) => match event {
            Event::PreToolUse(_) => Some(Output {
                hook_specific_output: Some(Specific {
                    hook_event_name: event.name().to_owned(),
                    permission_decision: Some("deny".to_owned()),
                    permission_decision_reason: Some(text.clone()),
                    ..Specific::default()
                }),
                ..Output::default()
            }),
            Event::Stop(_) | Event::SubagentStop(_) | Event::UserPromptSubmit(_) => {
                Some(block(text))
            }
            Event::SessionStart(_)
            | Event::PostToolUse(_)
            | Event::PostToolUseFailure(_)
            | Event::SubagentStart(_)
            | Event::PreCompact(_)
            | Event::PostCompact(_)
            | Event::SessionEnd(_)
            | Event::Notification(_) => None,
        },
    };
    output.map_or_else(|| Reply::ok(""), |output| Reply::json(&output))
}

/// A command's reply under the hosts' rules: exit 2 blocks with stderr where the event can be
/// blocked; exit 0 reads stdout as JSON (or, for `SessionStart` and `UserPromptSubmit`, plain
/// text as context); any other exit is a non-blocking error.
pub(crate) fn decode(host: Host, event: &Event, reply: &Reply) -> Decoded {
    let blockable = matches!(
        event,
        Event::PreToolUse(_) | Event::Stop(_) | Event::SubagentStop(_) | Event::UserPromptSubmit(_)
    );
    match reply.exit_code {
        2 => {
            let Some(text) = plain(&reply.stderr) else {
                // Codex refuses a blocking exit without a reason; Claude Code blocks with none.
                return match host {
                    Host::Codex => Decoded::quiet(),
                    _ if blockable => Decoded {
                        verdict: Verdict::Block(String::new()),
                        ignored: Vec::new(),
                    },
                    _ => Decoded::quiet(),
                };
            };
            let verdict = match event {
                _ if blockable => Verdict::Block(text),
                // The tool already ran: stderr goes to the model.
                Event::PostToolUse(_) | Event::PostToolUseFailure(_) => Verdict::Context(text),
                _ => Verdict::Quiet,
            };
            Decoded {
                verdict,
                ignored: Vec::new(),
            }
        }
        0 => decode_stdout(event, &reply.stdout),
        _ => Decoded::quiet(),
    }
}

fn decode_stdout(event: &Event, stdout: &str) -> Decoded {
    let text = stdout.trim();
    if !text.starts_with('{') {
        let plain_context = matches!(event, Event::SessionStart(_) | Event::UserPromptSubmit(_));
        return match plain(text) {
            Some(text) if plain_context => Decoded {
                verdict: Verdict::Context(text),
                ignored: Vec::new(),
            },
            _ => Decoded::quiet(),
        };
    }
    let Ok(output) = serde_json::from_str::<Output>(text) else {
        return Decoded::quiet();
    };
    let mut ignored = Vec::new();
    if output.continue_ == Some(false) {
        ignored.push("continue: false (hooks here do not end the session)");
    }
    let specific = output.hook_specific_output.unwrap_or_default();
    if specific.updated_input.is_some() {
        ignored.push("updatedInput (hooks here do not rewrite a tool's arguments)");
    }
    let denied = specific.permission_decision.as_deref() == Some("deny");
    if let Some(other) = specific.permission_decision.as_deref()
        && other != "deny"
    {
        ignored.push(match other {
            "allow" => "permissionDecision allow",
            "ask" => "permissionDecision ask",
            _ => "an unknown permissionDecision",
        });
    }
    let blocked = output.decision.as_deref() == Some("block");
    let verdict = match event {
        Event::PreToolUse(_) if denied => {
            Verdict::Block(specific.permission_decision_reason.unwrap_or_default())
        }
        Event::PreToolUse(_)
        | Event::Stop(_)
        | Event::SubagentStop(_)
        | Event::UserPromptSubmit(_)
            if blocked =>
        {
            Verdict::Block(output.reason.unwrap_or_default())
        }
        // `decision: block` after a tool prompts the model with the reason.
        Event::PostToolUse(_) | Event::PostToolUseFailure(_) if blocked => {
            Verdict::Context(output.reason.unwrap_or_default())
        }
        _ => match specific.additional_context.as_deref().and_then(plain) {
            Some(text) => Verdict::Context(text),
            None => Verdict::Quiet,
        },
    };
    Decoded { verdict, ignored }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(value: Value) -> Event {
        read(value.to_string().as_bytes()).unwrap()
    }

    fn stop(active: bool) -> Event {
        event(json!({
            "session_id": "s1", "transcript_path": "/t.jsonl", "cwd": "/w",
            "permission_mode": "default", "hook_event_name": "Stop",
            "stop_hook_active": active, "last_assistant_message": "done"
        }))
    }

    #[test]
    fn an_mcp_tool_s_content_blocks_reach_post_tool_use_as_the_engine_gives_its_output() {
        // Claude Code sends an MCP tool's result as its content blocks; the engine's
        // `_PostToolUse` gets the text blocks joined by newlines, other blocks left out.
        let e = event(json!({
            "session_id": "s1", "transcript_path": "/t.jsonl", "cwd": "/w",
            "hook_event_name": "PostToolUse", "tool_name": "mcp__todo__add",
            "tool_input": {"text": "write tests"}, "tool_use_id": "toolu_1",
            "tool_response": [
                {"type": "text", "text": "added #1"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "text", "text": "1 open"}
            ]
        }));
        let arguments = point(Host::ClaudeCode, &e).arguments();
        assert_eq!(arguments["tool"], "todo__add");
        assert_eq!(arguments["output"], "added #1\n1 open");
        // A built-in tool's structured response stays JSON text, as before.
        let e = event(json!({
            "session_id": "s1", "hook_event_name": "PostToolUse", "tool_name": "Bash",
            "tool_input": {"command": "ls"},
            "tool_response": {"stdout": "a", "stderr": "", "interrupted": false}
        }));
        let output = point(Host::ClaudeCode, &e).arguments()["output"].clone();
        let back: Value = serde_json::from_str(output.as_str().unwrap()).unwrap();
        assert_eq!(back["stdout"], "a");
    }

    #[test]
    fn a_stop_event_reads_every_documented_field_and_keeps_unknown_ones() {
        let e = event(json!({
            "session_id": "s1", "transcript_path": null, "cwd": "/w", "model": "gpt-5",
            "turn_id": "t9", "permission_mode": "default", "hook_event_name": "Stop",
            "stop_hook_active": true, "last_assistant_message": null, "background_tasks": []
        }));
        let Event::Stop(stop) = &e else {
            panic!("{e:?}")
        };
        assert!(stop.stop_hook_active);
        assert_eq!(stop.base.turn_id.as_deref(), Some("t9"));
        assert_eq!(stop.base.transcript_path, None);
        assert_eq!(stop.extra["background_tasks"], json!([]));
        // Read and written again, nothing is lost.
        let again: Value = serde_json::to_value(&e).unwrap();
        assert_eq!(again["background_tasks"], json!([]));
        assert_eq!(again["hook_event_name"], "Stop");
        assert_eq!(read(again.to_string().as_bytes()).unwrap(), e);
    }

    #[test]
    fn an_event_the_hosts_do_not_document_is_refused_naming_it() {
        let err = read(br#"{"hook_event_name":"Teleport","session_id":"s"}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`Teleport` is not an event this host documents"
        );
        let err = read(br#"{"hook_event_name":"PreToolUse","session_id":"s"}"#).unwrap_err();
        assert!(err.to_string().contains("tool_name"), "{err}");
    }

    #[test]
    fn session_start_from_a_compaction_is_post_compact_and_others_are_session_start() {
        let start = |source: &str| {
            event(json!({"session_id": "s", "hook_event_name": "SessionStart", "source": source}))
        };
        assert_eq!(
            point(Host::ClaudeCode, &start("compact")),
            Point::PostCompact
        );
        for source in ["startup", "resume", "clear", "fork"] {
            assert_eq!(point(Host::Codex, &start(source)), Point::SessionStart);
        }
    }

    #[test]
    fn an_mcp_tool_is_named_as_hookloop_names_it() {
        let e = event(json!({
            "session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "mcp__todo__add",
            "tool_input": {"text": "x"}, "tool_use_id": "u1"
        }));
        assert_eq!(
            point(Host::ClaudeCode, &e),
            Point::BeforeTool {
                tool: "todo__add".into(),
                arguments: json!({"text": "x"})
            }
        );
    }

    #[test]
    fn an_objection_to_a_stop_is_a_block_with_its_reason_and_decodes_back() {
        for host in [Host::ClaudeCode, Host::Codex] {
            let e = stop(false);
            let reply = answer(host, &e, &Verdict::Block("2 open".into()));
            assert_eq!(reply.exit_code, 0);
            assert_eq!(
                serde_json::from_str::<Value>(&reply.stdout).unwrap(),
                json!({"decision": "block", "reason": "2 open"})
            );
            assert_eq!(
                decode(host, &e, &reply).verdict,
                Verdict::Block("2 open".into())
            );
        }
    }

    #[test]
    fn a_denial_is_permission_decision_deny_and_decodes_back() {
        let e = event(json!({
            "session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {}, "tool_use_id": "u"
        }));
        let reply = answer(Host::Codex, &e, &Verdict::Block("no".into()));
        assert_eq!(
            serde_json::from_str::<Value>(&reply.stdout).unwrap(),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "no"}})
        );
        assert_eq!(
            decode(Host::Codex, &e, &reply).verdict,
            Verdict::Block("no".into())
        );
    }

    #[test]
    fn context_rides_additional_context_where_the_event_takes_it_and_nowhere_else() {
        let start = event(
            json!({"session_id": "s", "hook_event_name": "SessionStart", "source": "compact"}),
        );
        let reply = answer(Host::ClaudeCode, &start, &Verdict::Context("todos".into()));
        assert_eq!(
            serde_json::from_str::<Value>(&reply.stdout).unwrap(),
            json!({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "todos"}})
        );
        let compacted =
            event(json!({"session_id": "s", "hook_event_name": "PostCompact", "trigger": "auto"}));
        assert_eq!(
            answer(Host::ClaudeCode, &compacted, &Verdict::Context("x".into())),
            Reply::ok("")
        );
        let failure = event(
            json!({"session_id": "s", "hook_event_name": "PostToolUseFailure",
            "tool_name": "Bash", "tool_input": {}, "tool_use_id": "u", "error": "e"}),
        );
        assert_eq!(
            answer(Host::Codex, &failure, &Verdict::Context("x".into())),
            Reply::ok("")
        );
        assert_ne!(
            answer(Host::ClaudeCode, &failure, &Verdict::Context("x".into())),
            Reply::ok("")
        );
    }

    #[test]
    fn quiet_is_exit_zero_with_nothing_on_stdout() {
        assert_eq!(
            answer(Host::ClaudeCode, &stop(true), &Verdict::Quiet),
            Reply::ok("")
        );
    }

    #[test]
    fn exit_two_blocks_with_stderr_and_other_exits_say_nothing() {
        let e = stop(false);
        let reply = |code, stderr: &str| Reply {
            exit_code: code,
            stdout: String::new(),
            stderr: stderr.into(),
        };
        assert_eq!(
            decode(Host::ClaudeCode, &e, &reply(2, " red \n")).verdict,
            Verdict::Block("red".into())
        );
        assert_eq!(
            decode(Host::ClaudeCode, &e, &reply(1, "oops")).verdict,
            Verdict::Quiet
        );
        assert_eq!(
            decode(Host::Codex, &e, &reply(2, "")).verdict,
            Verdict::Quiet
        );
    }

    #[test]
    fn plain_stdout_is_context_only_at_session_start_and_prompt_submit() {
        let start = event(
            json!({"session_id": "s", "hook_event_name": "SessionStart", "source": "startup"}),
        );
        assert_eq!(
            decode(Host::ClaudeCode, &start, &Reply::ok("conventions\n")).verdict,
            Verdict::Context("conventions".into())
        );
        assert_eq!(
            decode(Host::ClaudeCode, &stop(false), &Reply::ok("text")).verdict,
            Verdict::Quiet
        );
    }

    #[test]
    fn what_hookloop_does_not_do_is_named() {
        let e = event(json!({"session_id": "s", "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {}, "tool_use_id": "u"}));
        let reply = Reply::ok(json!({"continue": false, "hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"a": 1}}}).to_string());
        let decoded = decode(Host::ClaudeCode, &e, &reply);
        assert_eq!(decoded.verdict, Verdict::Quiet);
        assert_eq!(decoded.ignored.len(), 3, "{:?}", decoded.ignored);
    }
}
