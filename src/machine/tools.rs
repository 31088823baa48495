//! A reply's tool calls: refused when they name no model-facing tool or carry bad arguments,
//! gated by `_PreToolUse` and by the user's permission, run, and each answered exactly once.

use std::collections::HashSet;

use serde_json::{Value, json};
use statig::prelude::*;

use super::agents::{AGENT_TOOL, check_task};
use super::planted::{self, Bug};
use super::round::ToolBatch;
use super::{
    CallId, Core, Effect, Message, Notice, Outbox, Resume, State, Then, ToolCall, ToolOutput,
    rejected_text, unknown_tool_text, withdrawn_text,
};
use crate::hooks::{self, Hook};

impl Core {
    /// Starts the calls of one reply. Calls to hooks or unknown tools, and calls whose arguments
    /// are not a JSON object, are answered at once with an error and never run.
    pub(super) fn start_tools(
        &mut self,
        context: &mut Outbox,
        calls: Vec<ToolCall>,
    ) -> Outcome<State> {
        let mut batch = ToolBatch::default();
        let mut run = Vec::new();
        let mut agents = 0;
        for call in calls {
            let hook_run =
                planted::on(Bug::HookCallRun) && hooks::is_hook(hooks::bare_name(&call.name));
            let refusal = if !self.tools.names.contains(&call.name) && !hook_run {
                context.notify(Notice::UnknownToolRefused {
                    name: call.name.clone(),
                });
                Some(ToolOutput::error(unknown_tool_text(&call.name)))
            } else if planted::on(Bug::ObjectedSkipsCalls) && self.turn.objected {
                Some(ToolOutput::error("cancelled"))
            } else if !call.arguments.is_object() {
                Some(ToolOutput::error(invalid_arguments_text(
                    &call.name,
                    &call.arguments,
                )))
            } else if call.name == AGENT_TOOL {
                let allowed =
                    check_task(&call.arguments).and_then(|()| self.agent_call_allowed(agents));
                if allowed.is_ok() {
                    agents += 1;
                }
                allowed.err().map(ToolOutput::error)
            } else {
                None
            };
            batch.ids.push(call.id.clone());
            if refusal.is_none() {
                run.push(call);
            }
            batch.results.push(refusal);
        }
        if run.is_empty() {
            self.record_results(batch);
            return self.request_turn(context, Resume::Prompting);
        }
        let subjects = run
            .iter()
            .map(|call| {
                let mut subject = json!({"tool": call.name, "arguments": call.arguments});
                self.add_call_id(&mut subject, call);
                subject
            })
            .collect();
        batch.ran = run;
        match self.ask(context, Hook::PreToolUse, subjects) {
            Some(round) => Transition(State::hooking(round, Then::PreToolUse { batch })),
            None => self.run_batch(context, batch),
        }
    }

    /// Runs the batch's calls that are left, once the user has allowed each destructive one.
    pub(super) fn run_batch(&mut self, context: &mut Outbox, batch: ToolBatch) -> Outcome<State> {
        self.gate_batch(context, batch, 0)
    }

    /// The permission rule, from `batch.ran[from]` on: a call of a destructive tool, when the
    /// policy asks, runs only if the user allows it. A standing decision of the session answers
    /// at once; otherwise the user is asked, one call at a time. A rejected call leaves the
    /// batch with an error result. Once no call needs a decision, the batch runs.
    pub(super) fn gate_batch(
        &mut self,
        context: &mut Outbox,
        mut batch: ToolBatch,
        mut from: usize,
    ) -> Outcome<State> {
        while let Some(call) = batch.ran.get(from) {
            if !self.policy.ask_permission
                || !self.tools.destructive.contains(&call.name)
                || planted::on(Bug::PermissionNotAsked)
            {
                from += 1;
                continue;
            }
            match self.standing.get(&call.name) {
                Some(true) if planted::on(Bug::StandingAllowSkips) => {
                    let call = batch.ran.remove(from);
                    let _ = batch.answer(&call.id, &ToolOutput::error("cancelled"));
                }
                Some(true) => from += 1,
                Some(false) => reject(context, &mut batch, from, true),
                None => {
                    context.emit(Effect::AskPermission { call: call.clone() });
                    return Transition(State::awaiting_permission(batch, from));
                }
            }
        }
        self.launch_batch(context, batch)
    }

    /// Runs the batch's calls that are left, or, when none is, asks the model again.
    pub(super) fn launch_batch(
        &mut self,
        context: &mut Outbox,
        mut batch: ToolBatch,
    ) -> Outcome<State> {
        self.withdraw_removed(context, &mut batch);
        if batch.ran.is_empty() {
            self.record_results(batch);
            return self.request_turn(context, Resume::Prompting);
        }
        context.emit(Effect::CallTools {
            calls: batch.ran.clone(),
        });
        Transition(State::running_tools(batch))
    }

    /// Answers, with an error result, each call of the batch whose tool the catalog no longer
    /// offers. A `CatalogChanged` may come while the batch waits on `_PreToolUse` or on the
    /// user's decision, and only offered tools run, whatever was offered when the model called.
    fn withdraw_removed(&self, context: &mut Outbox, batch: &mut ToolBatch) {
        if planted::on(Bug::WithdrawnToolRuns) {
            return;
        }
        let mut at = 0;
        while let Some(call) = batch.ran.get(at) {
            let hook_run =
                planted::on(Bug::HookCallRun) && hooks::is_hook(hooks::bare_name(&call.name));
            if self.tools.names.contains(&call.name) || hook_run {
                at += 1;
                continue;
            }
            let call = batch.ran.remove(at);
            // The call is the batch's own and still unanswered: withdrawing answers it once.
            let _ = batch.answer(&call.id, &ToolOutput::error(withdrawn_text(&call.name)));
            context.notify(Notice::UnknownToolRefused { name: call.name });
        }
    }

    /// Every call of a batch has its result: record them, then `_PostToolUse` on the calls that
    /// ran, then the next request.
    pub(super) fn tools_done(
        &mut self,
        context: &mut Outbox,
        mut batch: ToolBatch,
    ) -> Outcome<State> {
        let ran = std::mem::take(&mut batch.ran);
        let subjects: Vec<Value> = ran
            .iter()
            .map(|call| {
                let output = batch
                    .ids
                    .iter()
                    .position(|id| *id == call.id)
                    .and_then(|i| batch.results[i].as_ref());
                let (is_error, text) = output.map_or((true, String::new()), |output| {
                    (output.is_error, output.joined_text())
                });
                let mut subject = json!({
                    "tool": call.name,
                    "arguments": call.arguments,
                    "isError": is_error,
                    "output": crate::text::cut(&text, hooks::MAX_HOOK_TEXT_BYTES, crate::text::Cut::Middle),
                });
                self.add_call_id(&mut subject, call);
                subject
            })
            .collect();
        self.record_results(batch);
        if subjects.is_empty() {
            return self.request_turn(context, Resume::Prompting);
        }
        match self.ask(context, Hook::PostToolUse, subjects) {
            Some(round) => Transition(State::hooking(round, Then::PostToolUse)),
            None => self.request_turn(context, Resume::Prompting),
        }
    }

    /// With the policy's hook details, a tool hook's subject names its call (`id`).
    fn add_call_id(&self, subject: &mut Value, call: &ToolCall) {
        if self.policy.hook_details {
            subject["id"] = Value::String(call.id.to_string());
        }
    }

    /// Appends a batch's results in call order; calls still outstanding get `cancelled`.
    pub(super) fn record_results(&mut self, batch: ToolBatch) {
        self.record_results_with(batch, "cancelled");
    }

    /// As [`record_results`](Self::record_results), each call without a result answered with
    /// the error `unanswered`.
    pub(super) fn record_results_with(&mut self, batch: ToolBatch, unanswered: &str) {
        for (call_id, output) in batch.ids.into_iter().zip(batch.results) {
            if output.is_none() && planted::on(Bug::CancelledUnanswered) {
                continue;
            }
            let output = output.unwrap_or_else(|| ToolOutput::error(unanswered));
            self.history.push(Message::ToolResult { call_id, output });
        }
    }

    /// Gives every call an id unique in the history, renaming empty or repeated ones, so every
    /// result answers exactly one call.
    pub(super) fn unique_ids(&mut self, calls: &[ToolCall]) -> Vec<ToolCall> {
        let mut seen = HashSet::new();
        calls
            .iter()
            .map(|call| {
                let mut call = call.clone();
                // An `agent` call's id names the subagent it starts: the machine gives it one,
                // unique in the session, whatever the model chose.
                if call.name == AGENT_TOOL && self.offers_agent() {
                    call.id = self.fresh_agent_id();
                } else if call.id.0.is_empty()
                    || self.history.has_call_id(&call.id)
                    || seen.contains(&call.id)
                {
                    call.id = self.fresh_id("call");
                }
                seen.insert(call.id.clone());
                call
            })
            .collect()
    }

    pub(super) fn fresh_id(&mut self, prefix: &str) -> CallId {
        loop {
            self.next_id += 1;
            let id = CallId(format!("{prefix}_hl{}", self.next_id));
            if !self.history.has_call_id(&id) {
                return id;
            }
        }
    }
}

/// Takes the rejected call `batch.ran[at]` out of those that run and answers it with an error
/// result, as a `_PreToolUse` denial is answered.
pub(super) fn reject(context: &mut Outbox, batch: &mut ToolBatch, at: usize, standing: bool) {
    let call = batch.ran.remove(at);
    let output = ToolOutput::error(rejected_text(&call.name));
    // The call is the batch's own and still unanswered: a rejection answers it once.
    let _ = batch.answer(&call.id, &output);
    context.notify(Notice::PermissionRejected {
        id: call.id,
        tool: call.name,
        standing,
    });
}

fn invalid_arguments_text(name: &str, arguments: &Value) -> String {
    let got = match arguments {
        Value::String(raw) => {
            let shown = crate::text::cut(raw, 200, crate::text::Cut::Middle);
            return format!("invalid arguments for {name}: not a JSON object: {shown:?}");
        }
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    format!("invalid arguments for {name}: expected a JSON object, got {got}")
}
