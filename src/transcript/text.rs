//! The text view of a session: what `hookloop transcript show` prints, one block per step, a
//! headline and its detail lines. The HTML page reuses each entry's text.

use std::fmt::{self, Write};

use serde::Serialize;

use crate::hooks::{Hook, HookServers};
use crate::machine::{FinishReason, HookReply, Message, Notice, PermissionDecision, Purpose};
use crate::text::{Cut, cut};
use crate::transcript::show::{AgentLane, Entry, EntryKind, SessionView, ToolRun};

impl SessionView {
    /// The session as text, one block per entry, for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = self.write_text(&mut out);
        out
    }

    /// The settings in one line.
    pub fn policy_line(&self) -> String {
        let policy = &self.policy;
        format!(
            "hook servers {}, hook timeout {} ms, {} _Stop objection(s) per session, round cap \
             {}, context {} tokens ({} for output)",
            match &policy.hook_servers {
                HookServers::Off => "off".to_owned(),
                HookServers::All => "all".to_owned(),
                HookServers::Named(names) => names
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            },
            policy.hook_timeout().as_millis(),
            policy.stop_max_rejections,
            policy.max_rounds,
            policy.max_context_tokens,
            policy.max_output_tokens,
        )
    }

    fn write_text(&self, out: &mut String) -> fmt::Result {
        writeln!(
            out,
            "hookloop transcript, format {}, engine {}",
            self.version, self.engine
        )?;
        writeln!(out, "policy: {}", self.policy_line())?;
        if let Some(system) = &self.system_prompt {
            writeln!(out, "system: {}", one_line(system))?;
        }
        write_entries(out, &self.entries, Hook::Stop)?;
        writeln!(out, "\nend: {}", self.end)
    }
}

/// The indent of an entry's detail lines, under its headline.
const DETAIL: &str = "                   ";

/// What starts each line of a subagent's lane, under its `agent` call.
const LANE: &str = "                   │ ";

/// Entries one after the other, each subagent's lane after the tool round of its call; `stop`
/// is the hook their agent is asked at an end of turn.
fn write_entries(out: &mut String, entries: &[Entry], stop: Hook) -> fmt::Result {
    for entry in entries {
        write!(out, "\n{:>8} ms  #{:<4} ", entry.at_ms, entry.index)?;
        write_entry(out, &entry.kind, stop)?;
        for lane in entry.kind.agent_lanes() {
            write_lane(out, lane)?;
        }
    }
    Ok(())
}

/// A subagent's steps, each line behind the lane's rule, so nested lanes stack their rules.
fn write_lane(out: &mut String, lane: &AgentLane) -> fmt::Result {
    writeln!(out, "{DETAIL}subagent {}:", lane.id)?;
    let mut steps = String::new();
    write_entries(&mut steps, &lane.entries, Hook::SubagentStop)?;
    for line in steps.trim_start_matches('\n').lines() {
        if line.is_empty() {
            writeln!(out, "{}", LANE.trim_end())?;
        } else {
            writeln!(out, "{LANE}{line}")?;
        }
    }
    Ok(())
}

impl EntryKind {
    /// The entry as text: a headline, then detail lines (indented), as `show` prints it.
    pub fn to_text(&self) -> String {
        self.to_text_as(Hook::Stop)
    }

    /// [`to_text`](Self::to_text) for an entry of an agent asked `stop` at an end of turn:
    /// `_SubagentStop` for a step of a subagent's lane.
    pub fn to_text_as(&self, stop: Hook) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = write_entry(&mut out, self, stop);
        out
    }

    /// The subagents this step ran, in the order of its calls: the lanes of a tool round's
    /// `agent` calls; none for any other step.
    pub fn agent_lanes(&self) -> impl Iterator<Item = &AgentLane> {
        let calls: &[ToolRun] = if let Self::Tools { calls } = self {
            calls
        } else {
            &[]
        };
        calls.iter().filter_map(|run| run.agent.as_ref())
    }

    /// A short name of the kind, as in the JSON (`request`, `hook_round`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Catalog { .. } => "catalog",
            Self::Prompt { .. } => "prompt",
            Self::Request { .. } => "request",
            Self::Reply { .. } => "reply",
            Self::ModelFailed { .. } => "model_failed",
            Self::Tools { .. } => "tools",
            Self::HookRound { .. } => "hook_round",
            Self::Objection { .. } => "objection",
            Self::Compaction { .. } => "compaction",
            Self::PostCompactInjected { .. } => "post_compact_injected",
            Self::HookInjected { .. } => "hook_injected",
            Self::ToolDenied { .. } => "tool_denied",
            Self::Permission { .. } => "permission",
            Self::PermissionRejected { .. } => "permission_rejected",
            Self::HookSkipped { .. } => "hook_skipped",
            Self::HookFailedOpen { .. } => "hook_failed_open",
            Self::StopSkipped { .. } => "stop_skipped",
            Self::UnknownToolRefused { .. } => "unknown_tool_refused",
            Self::ServerKilled { .. } => "server_killed",
            Self::ServerStarted { .. } => "server_started",
            Self::StartFailed { .. } => "start_failed",
            Self::ServerExited { .. } => "server_exited",
            Self::RestartScheduled { .. } => "restart_scheduled",
            Self::ServerRetired { .. } => "server_retired",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
            Self::Finish { .. } => "finish",
            Self::Closed => "closed",
        }
    }
}

fn write_entry(out: &mut String, kind: &EntryKind, stop: Hook) -> fmt::Result {
    match kind {
        EntryKind::Catalog { servers } => {
            writeln!(out, "catalog: {} server(s)", servers.len())?;
            for server in servers {
                writeln!(
                    out,
                    "{DETAIL}{}: {}",
                    server.server,
                    server.tools.join(", ")
                )?;
            }
        }
        EntryKind::Prompt { number, text } => {
            writeln!(out, "prompt {number}")?;
            write_block(out, "user", text)?;
        }
        EntryKind::Request {
            round,
            purpose,
            folded,
            messages,
            tools,
            tools_offered,
            instruction,
        } => {
            let what = match purpose {
                Purpose::Turn => "turn".to_owned(),
                Purpose::Summary { from } => format!("summary of messages from {from}"),
            };
            writeln!(
                out,
                "request {round} ({what}): {} message(s), {tools_offered} tool(s) offered",
                folded + messages.len()
            )?;
            if *folded > 0 {
                writeln!(
                    out,
                    "{DETAIL}… {folded} message(s) as in the request before"
                )?;
            }
            for message in messages {
                write_message(out, message)?;
            }
            if let Some(instruction) = instruction {
                write_block(out, "instruction", instruction)?;
            }
            match tools {
                Some(tools) if tools.is_empty() => writeln!(out, "{DETAIL}tools: none")?,
                Some(tools) => writeln!(out, "{DETAIL}tools: {}", tools.join(", "))?,
                None => {}
            }
        }
        EntryKind::Reply {
            round,
            latency_ms,
            reply,
        } => {
            write!(
                out,
                "reply {round} after {latency_ms} ms, stop {}",
                serde_name(&reply.stop)
            )?;
            if let Some(usage) = &reply.usage {
                write!(
                    out,
                    ", {} tokens in, {} out",
                    usage.input_tokens, usage.output_tokens
                )?;
            }
            out.push('\n');
            if !reply.text.is_empty() {
                write_block(out, "assistant", &reply.text)?;
            }
            for call in &reply.tool_calls {
                writeln!(
                    out,
                    "{DETAIL}calls {} {} {}",
                    call.id, call.name, call.arguments
                )?;
            }
        }
        EntryKind::ModelFailed {
            round,
            latency_ms,
            error,
        } => writeln!(out, "request {round} failed after {latency_ms} ms: {error}")?,
        EntryKind::Tools { calls } => {
            writeln!(out, "tools: {} call(s)", calls.len())?;
            for run in calls {
                let status = match (&run.output, run.done_ms) {
                    (Some(output), Some(done)) if output.is_error => format!("error at {done} ms"),
                    (Some(_), Some(done)) => format!("done at {done} ms"),
                    _ => "no result".to_owned(),
                };
                writeln!(
                    out,
                    "{DETAIL}{} {} {} — {status}",
                    run.call.id, run.call.name, run.call.arguments
                )?;
                if let Some(output) = &run.output {
                    write_block(out, "result", &output.joined_text())?;
                }
            }
        }
        EntryKind::HookRound {
            hook,
            number,
            timeout_ms,
            context,
            subjects,
            answers,
        } => {
            let servers = answers
                .iter()
                .filter(|answer| answer.subject.is_none_or(|subject| subject == 0))
                .count();
            write!(
                out,
                "{hook} round {number}: {servers} server(s), timeout {timeout_ms} ms"
            )?;
            if !subjects.is_empty() {
                write!(out, ", {} subject(s)", subjects.len())?;
            }
            match hook {
                Hook::Stop | Hook::SubagentStop => write!(
                    out,
                    ", {} objection(s) so far, budget left {}",
                    context.objections_so_far, context.budget_left
                )?,
                Hook::PreCompact | Hook::PostCompact => {
                    write!(out, ", compaction {}", context.compactions)?;
                }
                Hook::SessionStart
                | Hook::UserPromptSubmit
                | Hook::PreToolUse
                | Hook::PostToolUse
                | Hook::SessionEnd
                | Hook::SubagentStart => {}
            }
            out.push('\n');
            for (i, subject) in subjects.iter().enumerate() {
                write_block(out, &format!("subject {i}"), &subject.to_string())?;
            }
            for answer in answers {
                let who = match answer.subject {
                    Some(subject) => format!("{} on subject {subject}", answer.server),
                    None => answer.server.to_string(),
                };
                let (Some(reply), Some(latency)) = (&answer.reply, answer.latency_ms) else {
                    writeln!(out, "{DETAIL}{who}: no answer recorded")?;
                    continue;
                };
                let said = match reply {
                    HookReply::Text { text } if text.trim().is_empty() => "nothing".to_owned(),
                    HookReply::Text { text } => format!("{:?}", one_line(text)),
                    HookReply::ErrorResult { text } => format!("an error: {:?}", one_line(text)),
                    HookReply::Failed { error } => {
                        format!("failed: {}", one_line(&error.to_string()))
                    }
                    HookReply::TimedOut => "timed out".to_owned(),
                    HookReply::Skipped { reason } => format!("skipped: {}", one_line(reason)),
                };
                writeln!(out, "{DETAIL}{who} after {latency} ms: {said}")?;
            }
        }
        EntryKind::Objection {
            server,
            text,
            budget_left,
        } => write_notice(
            out,
            &Notice::Objection {
                server: server.clone(),
                text: text.clone(),
                budget_left: *budget_left,
            },
            stop,
        )?,
        EntryKind::Compaction {
            summarized,
            messages_before,
            messages_after,
            bytes_before,
            bytes_after,
        } => {
            let notice = Notice::Compacted {
                summarized: *summarized,
                messages_before: *messages_before,
                messages_after: *messages_after,
            };
            let headline = notice.headline(stop);
            writeln!(out, "{headline}, {bytes_before} → {bytes_after} bytes")?;
        }
        EntryKind::PostCompactInjected { server, text } => write_notice(
            out,
            &Notice::PostCompactInjected {
                server: server.clone(),
                text: text.clone(),
            },
            stop,
        )?,
        EntryKind::HookInjected { hook, server, text } => write_notice(
            out,
            &Notice::HookInjected {
                hook: *hook,
                server: server.clone(),
                text: text.clone(),
            },
            stop,
        )?,
        EntryKind::ToolDenied { server, tool, text } => write_notice(
            out,
            &Notice::ToolDenied {
                server: server.clone(),
                tool: tool.clone(),
                text: text.clone(),
            },
            stop,
        )?,
        EntryKind::Permission { call, decision } => {
            let decided = match decision {
                Some(PermissionDecision::AllowOnce) => "allowed once",
                Some(PermissionDecision::AllowAlways) => "allowed always",
                Some(PermissionDecision::RejectOnce) => "rejected once",
                Some(PermissionDecision::RejectAlways) => "rejected always",
                None => "no decision",
            };
            writeln!(
                out,
                "asked the user about {} {}: {decided}",
                call.name, call.arguments
            )?;
        }
        EntryKind::PermissionRejected { id, tool, standing } => write_notice(
            out,
            &Notice::PermissionRejected {
                id: id.clone(),
                tool: tool.clone(),
                standing: *standing,
            },
            stop,
        )?,
        EntryKind::HookSkipped {
            server,
            hook,
            reason,
        } => write_notice(
            out,
            &Notice::HookSkipped {
                server: server.clone(),
                hook: *hook,
                reason: reason.clone(),
            },
            stop,
        )?,
        EntryKind::HookFailedOpen {
            server,
            hook,
            reason,
        } => write_notice(
            out,
            &Notice::HookFailedOpen {
                server: server.clone(),
                hook: *hook,
                reason: reason.clone(),
            },
            stop,
        )?,
        EntryKind::StopSkipped { reason } => {
            write_notice(out, &Notice::StopSkipped { reason: *reason }, stop)?;
        }
        EntryKind::UnknownToolRefused { name } => write_notice(
            out,
            &Notice::UnknownToolRefused { name: name.clone() },
            stop,
        )?,
        EntryKind::ServerKilled { server } => writeln!(out, "server {server} killed")?,
        EntryKind::ServerStarted { server } => writeln!(out, "server {server} started")?,
        EntryKind::StartFailed { server, error } => {
            writeln!(out, "server {server} failed to start: {}", one_line(error))?;
        }
        EntryKind::ServerExited {
            server,
            answered,
            reason,
        } => writeln!(
            out,
            "server {server} exited ({}): {}",
            if *answered {
                "it had answered"
            } else {
                "it never answered"
            },
            one_line(reason)
        )?,
        EntryKind::RestartScheduled { server, after_ms } => {
            writeln!(out, "server {server} restart scheduled in {after_ms} ms")?;
        }
        EntryKind::ServerRetired { server, bad_ends } => writeln!(
            out,
            "server {server} retired after {bad_ends} bad end(s): its tools are gone"
        )?,
        EntryKind::Cancelled => writeln!(out, "cancelled")?,
        EntryKind::Interrupted => writeln!(
            out,
            "interrupted: the agent stopped during this prompt; its open calls were answered as interrupted when the record was loaded"
        )?,
        EntryKind::Finish { reason } => match reason {
            FinishReason::Failed { error } => writeln!(out, "prompt ended: failed: {error}")?,
            other => writeln!(out, "prompt ended: {}", serde_name(other))?,
        },
        EntryKind::Closed => writeln!(out, "session closed")?,
    }
    Ok(())
}

/// A notice as the machine words it: its headline, then the hook's words whole, as a block.
fn write_notice(out: &mut String, notice: &Notice, stop: Hook) -> fmt::Result {
    writeln!(out, "{}", notice.headline(stop))?;
    match notice.said() {
        Some(said) => write_block(out, "hook", said),
        None => Ok(()),
    }
}

fn write_message(out: &mut String, message: &Message) -> fmt::Result {
    match message {
        Message::User { text } => write_block(out, "user", text),
        Message::Assistant { text, tool_calls } => {
            if !text.is_empty() || tool_calls.is_empty() {
                write_block(out, "assistant", text)?;
            }
            for call in tool_calls {
                writeln!(
                    out,
                    "{DETAIL}assistant calls {} {} {}",
                    call.id, call.name, call.arguments
                )?;
            }
            Ok(())
        }
        Message::ToolResult { call_id, output } => {
            let label = if output.is_error {
                format!("error for {call_id}")
            } else {
                format!("result for {call_id}")
            };
            write_block(out, &label, &output.joined_text())
        }
    }
}

/// Text blocks longer than this are shown with their middle elided: a person skims them.
const MAX_BLOCK_BYTES: usize = 2_000;

/// `label: text`, continuation lines indented under the text.
fn write_block(out: &mut String, label: &str, text: &str) -> fmt::Result {
    let text = cut(text, MAX_BLOCK_BYTES, Cut::Middle);
    let mut lines = text.lines();
    writeln!(out, "{DETAIL}{label}: {}", lines.next().unwrap_or_default())?;
    let pad = " ".repeat(label.len() + 2);
    for line in lines {
        writeln!(out, "{DETAIL}{pad}{line}")?;
    }
    Ok(())
}

/// The name serde gives a unit variant (`"end_turn"`) or a tagged one (`{"reason": ...}`).
fn serde_name(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        Ok(serde_json::Value::Object(fields)) => fields
            .values()
            .next()
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
