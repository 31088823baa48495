//! A hook call as the events of the host a command was written for: which events carry each
//! `_` hook, their stdin JSON (the bridge's types, [`crate::bridge::hosts`]), the value their
//! matchers are tested against, and what their answers may bring back.
//!
//! Everything comes from the hook call: its arguments (with the policy's hook details: the
//! turn's last text, whether an objection came before, the call's id) and its context (the
//! subagent asking), plus the session's facts (id, transcript, directory).

use serde_json::{Map, Value};

use crate::bridge::hosts::{Host, HostEvent, goose, nested, tool_with_mcp_prefix};
use crate::hooks::Hook;
use crate::machine::HookContext;

/// What every event of a session says beside its own fields.
#[derive(Clone, Debug, Default)]
pub(crate) struct Facts {
    /// The session's id, as hook servers get it in `_meta["hookloop/session"]`.
    pub(crate) session_id: String,
    /// The session's hookloop transcript, when it is recorded.
    pub(crate) transcript_path: Option<String>,
    /// The session's working directory.
    pub(crate) cwd: String,
}

/// What an event's answer may bring back into the hook round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Takes {
    /// A block (a denial, an objection, a held prompt) counts.
    pub(crate) block: bool,
    /// Context for the model counts.
    pub(crate) context: bool,
}

const NOTHING: Takes = Takes {
    block: false,
    context: false,
};
const BLOCK: Takes = Takes {
    block: true,
    context: false,
};
const CONTEXT: Takes = Takes {
    block: false,
    context: true,
};

/// One event a hook call becomes.
#[derive(Clone, Debug)]
pub(crate) struct Invocation {
    /// The event, as the host writes it on a command's stdin.
    pub(crate) event: HostEvent,
    /// What the event's matchers are tested against; `None` where they do not apply.
    pub(crate) target: Option<String>,
    /// What its answers may bring back.
    pub(crate) takes: Takes,
}

/// The value an event's matchers are tested against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// Matchers do not apply to this event: every handler runs.
    None,
    /// The same value at every call (a session start's source, a compaction's trigger).
    Fixed(&'static str),
    /// A value of the call's (a tool's name, a prompt).
    Varies,
}

/// The type every hookloop subagent has, as Claude Code names its general-purpose one:
/// hookloop's subagents are all of one kind.
pub(crate) const AGENT_TYPE: &str = "general-purpose";
/// Every hookloop compaction is automatic: the context passed its budget.
const TRIGGER: &str = "auto";
/// Why a hookloop session ends, in Claude Code's words: not one of its named reasons.
const END_REASON: &str = "other";
const STARTUP: &str = "startup";
const COMPACT: &str = "compact";

/// The host events that carry `hook`, each with its matcher target.
pub(crate) fn events_of(host: Host, hook: Hook) -> &'static [(&'static str, Target)] {
    match host {
        Host::ClaudeCode | Host::Codex => nested_events(host, hook),
        Host::Goose => goose_events(hook),
        // Loading refuses them; nothing runs.
        Host::Gemini | Host::Cursor => &[],
    }
}

fn nested_events(host: Host, hook: Hook) -> &'static [(&'static str, Target)] {
    match hook {
        Hook::SessionStart => &[("SessionStart", Target::Fixed(STARTUP))],
        // Neither host takes context from PostCompact: both give it again as a session start
        // whose source is `compact`.
        Hook::PostCompact => &[
            ("SessionStart", Target::Fixed(COMPACT)),
            ("PostCompact", Target::Fixed(TRIGGER)),
        ],
        Hook::UserPromptSubmit => &[("UserPromptSubmit", Target::None)],
        Hook::PreToolUse => &[("PreToolUse", Target::Varies)],
        Hook::PostToolUse if host == Host::ClaudeCode => &[
            ("PostToolUse", Target::Varies),
            ("PostToolUseFailure", Target::Varies),
        ],
        Hook::PostToolUse => &[("PostToolUse", Target::Varies)],
        Hook::Stop => &[("Stop", Target::None)],
        Hook::PreCompact => &[("PreCompact", Target::Fixed(TRIGGER))],
        Hook::SessionEnd => &[("SessionEnd", Target::Fixed(END_REASON))],
        Hook::SubagentStart => &[("SubagentStart", Target::Fixed(AGENT_TYPE))],
        Hook::SubagentStop => &[("SubagentStop", Target::Fixed(AGENT_TYPE))],
    }
}

fn goose_events(hook: Hook) -> &'static [(&'static str, Target)] {
    match hook {
        Hook::SessionStart => &[("SessionStart", Target::None)],
        Hook::UserPromptSubmit => &[("UserPromptSubmit", Target::Varies)],
        Hook::PreToolUse => &[("PreToolUse", Target::Varies)],
        Hook::PostToolUse => &[
            ("PostToolUse", Target::Varies),
            ("PostToolUseFailure", Target::Varies),
        ],
        Hook::Stop => &[("Stop", Target::None)],
        Hook::SessionEnd => &[("SessionEnd", Target::None)],
        // goose has no compaction events and does not emit subagent ones.
        Hook::PostCompact | Hook::PreCompact | Hook::SubagentStart | Hook::SubagentStop => &[],
    }
}

/// Whether an event of this name ever runs here, for some hook.
pub(crate) fn runs_here(host: Host, event: &str) -> bool {
    Hook::EVERY
        .into_iter()
        .any(|hook| events_of(host, hook).iter().any(|(name, _)| *name == event))
}

/// Whether an event of this name has a value its matchers are tested against; where it has
/// none, the hosts ignore a matcher.
pub(crate) fn has_target(host: Host, event: &str) -> bool {
    Hook::EVERY.into_iter().any(|hook| {
        events_of(host, hook)
            .iter()
            .any(|(name, target)| *name == event && *target != Target::None)
    })
}

/// The events one call of `hook` becomes for `host`'s commands, in [`events_of`]'s order
/// (an event that does not apply to this call, PostToolUse for a failed call, is left out).
pub(crate) fn invocations(
    host: Host,
    hook: Hook,
    arguments: &Map<String, Value>,
    context: &HookContext,
    facts: &Facts,
) -> Vec<Invocation> {
    let call = Call(arguments);
    match host {
        Host::ClaudeCode | Host::Codex => nested_invocations(host, hook, &call, context, facts),
        Host::Goose => goose_invocations(hook, &call, facts),
        Host::Gemini | Host::Cursor => Vec::new(),
    }
}

/// What a PostToolUse hook reads as the call's result: for Claude Code the MCP result's content,
/// as it sends an MCP tool's (`[{"type": "text", "text": …}]`); for Codex the text.
fn tool_response(host: Host, output: String) -> Value {
    match host {
        Host::ClaudeCode => serde_json::json!([{"type": "text", "text": output}]),
        _ => Value::String(output),
    }
}

/// The hook call's arguments, read leniently: a field the machine did not send reads as empty.
struct Call<'a>(&'a Map<String, Value>);

impl Call<'_> {
    fn text(&self, field: &str) -> String {
        self.0
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    fn flag(&self, field: &str) -> bool {
        self.0.get(field).and_then(Value::as_bool).unwrap_or(false)
    }

    fn value(&self, field: &str) -> Value {
        self.0.get(field).cloned().unwrap_or(Value::Null)
    }

    /// The turn's last text: `lastMessage` of `_Stop`, `result` of `_SubagentStop`.
    fn last_message(&self, field: &str) -> Option<String> {
        self.0.get(field).and_then(Value::as_str).map(str::to_owned)
    }
}

fn nested_invocations(
    host: Host,
    hook: Hook,
    call: &Call<'_>,
    context: &HookContext,
    facts: &Facts,
) -> Vec<Invocation> {
    let base = nested::Base {
        session_id: facts.session_id.clone(),
        transcript_path: facts.transcript_path.clone(),
        cwd: facts.cwd.clone(),
        agent_id: context.agent.as_ref().map(|agent| agent.id.0.clone()),
        agent_type: context.agent.as_ref().map(|_| AGENT_TYPE.to_owned()),
        ..nested::Base::default()
    };
    // The subagent events name their agent in fields of their own.
    let bare = || nested::Base {
        agent_id: None,
        agent_type: None,
        ..base.clone()
    };
    let extra = Map::new;
    let tool = || tool_with_mcp_prefix(&call.text("tool"));
    let one = |event: nested::Event, target: Option<String>, takes: Takes| Invocation {
        event: HostEvent::Nested {
            host,
            event: Box::new(event),
        },
        target,
        takes,
    };
    let session_start = |source: &str| {
        one(
            nested::Event::SessionStart(nested::SessionStart {
                base: base.clone(),
                source: source.to_owned(),
                extra: extra(),
            }),
            Some(source.to_owned()),
            CONTEXT,
        )
    };
    match hook {
        Hook::SessionStart => vec![session_start(STARTUP)],
        Hook::PostCompact => vec![
            session_start(COMPACT),
            one(
                nested::Event::PostCompact(nested::PostCompact {
                    base: base.clone(),
                    trigger: TRIGGER.to_owned(),
                    extra: extra(),
                }),
                Some(TRIGGER.to_owned()),
                NOTHING,
            ),
        ],
        Hook::UserPromptSubmit => vec![one(
            nested::Event::UserPromptSubmit(nested::UserPromptSubmit {
                base: base.clone(),
                prompt: call.text("prompt"),
                extra: extra(),
            }),
            None,
            Takes {
                block: true,
                context: true,
            },
        )],
        Hook::PreToolUse => vec![one(
            nested::Event::PreToolUse(nested::PreToolUse {
                base: base.clone(),
                tool_name: tool(),
                tool_input: call.value("arguments"),
                tool_use_id: call.text("id"),
                extra: extra(),
            }),
            Some(tool()),
            BLOCK,
        )],
        Hook::PostToolUse if host == Host::ClaudeCode && call.flag("isError") => vec![one(
            nested::Event::PostToolUseFailure(nested::PostToolUseFailure {
                base: base.clone(),
                tool_name: tool(),
                tool_input: call.value("arguments"),
                tool_use_id: call.text("id"),
                error: call.text("output"),
                extra: extra(),
            }),
            Some(tool()),
            CONTEXT,
        )],
        Hook::PostToolUse => vec![one(
            nested::Event::PostToolUse(nested::PostToolUse {
                base: base.clone(),
                tool_name: tool(),
                tool_input: call.value("arguments"),
                tool_response: tool_response(host, call.text("output")),
                tool_use_id: call.text("id"),
                extra: extra(),
            }),
            Some(tool()),
            CONTEXT,
        )],
        Hook::Stop => vec![one(
            nested::Event::Stop(nested::Stop {
                base: base.clone(),
                stop_hook_active: call.flag("afterObjection"),
                last_assistant_message: call.last_message("lastMessage"),
                extra: extra(),
            }),
            None,
            BLOCK,
        )],
        Hook::PreCompact => vec![one(
            nested::Event::PreCompact(nested::PreCompact {
                base: base.clone(),
                trigger: TRIGGER.to_owned(),
                // Claude Code's `/compact <instructions>`; hookloop compacts on its own.
                extra: Map::from_iter([("custom_instructions".to_owned(), Value::from(""))]),
            }),
            Some(TRIGGER.to_owned()),
            NOTHING,
        )],
        Hook::SessionEnd => vec![one(
            nested::Event::SessionEnd(nested::SessionEnd {
                base: base.clone(),
                reason: END_REASON.to_owned(),
                extra: extra(),
            }),
            Some(END_REASON.to_owned()),
            NOTHING,
        )],
        Hook::SubagentStart => vec![one(
            nested::Event::SubagentStart(nested::SubagentStart {
                base: bare(),
                agent_id: call.text("agent"),
                agent_type: AGENT_TYPE.to_owned(),
                extra: extra(),
            }),
            Some(AGENT_TYPE.to_owned()),
            CONTEXT,
        )],
        Hook::SubagentStop => vec![one(
            nested::Event::SubagentStop(nested::SubagentStop {
                base: bare(),
                stop_hook_active: call.flag("afterObjection"),
                agent_id: call.text("agent"),
                agent_type: AGENT_TYPE.to_owned(),
                last_assistant_message: call.last_message("result"),
                extra: extra(),
            }),
            Some(AGENT_TYPE.to_owned()),
            BLOCK,
        )],
    }
}

fn goose_invocations(hook: Hook, call: &Call<'_>, facts: &Facts) -> Vec<Invocation> {
    let event = |name: &str| goose::Event {
        base: goose::Base {
            event: name.to_owned(),
            session_id: facts.session_id.clone(),
        },
        ..goose::Event::default()
    };
    // goose names tools as hookloop does, `<extension>__<tool>`.
    let tool_event = |name: &str| {
        let tool = call.text("tool");
        goose::Event {
            matcher_context: Some(tool.clone()),
            tool_name: Some(tool),
            tool_input: Some(call.value("arguments")),
            working_dir: Some(facts.cwd.clone()),
            tool_call_id: Some(call.text("id")).filter(|id| !id.is_empty()),
            ..event(name)
        }
    };
    let one = |event: goose::Event, takes: Takes| {
        let target = event.matcher_context.clone();
        Invocation {
            event: HostEvent::Goose(Box::new(event)),
            target,
            takes,
        }
    };
    match hook {
        Hook::SessionStart => vec![one(event("SessionStart"), NOTHING)],
        Hook::UserPromptSubmit => {
            let prompt = call.text("prompt");
            vec![one(
                goose::Event {
                    matcher_context: Some(prompt.clone()),
                    message: Some(prompt),
                    ..event("UserPromptSubmit")
                },
                NOTHING,
            )]
        }
        Hook::PreToolUse => vec![one(tool_event("PreToolUse"), BLOCK)],
        Hook::PostToolUse if call.flag("isError") => {
            vec![one(tool_event("PostToolUseFailure"), NOTHING)]
        }
        Hook::PostToolUse => vec![one(tool_event("PostToolUse"), NOTHING)],
        Hook::Stop => vec![one(
            goose::Event {
                last_assistant_message: call
                    .last_message("lastMessage")
                    .filter(|text| !text.is_empty()),
                ..event("Stop")
            },
            BLOCK,
        )],
        Hook::SessionEnd => vec![one(event("SessionEnd"), NOTHING)],
        Hook::PostCompact | Hook::PreCompact | Hook::SubagentStart | Hook::SubagentStop => {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests;
