//! A prompt's course: its start and its hooks, the model's replies and what each stop reason
//! means, a genuine end of turn, compaction, and the end of the session.

use serde_json::json;
use statig::prelude::*;

use super::planted::{self, Bug};
use super::{
    Core, Effect, FinishReason, Input, InputKind, LlmReply, Message, Notice, Outbox, Phase,
    PromptStage, Resume, SUMMARY_PREFIX, SkipReason, State, StopReason, Then, ToolOutput,
};
use crate::hooks::Hook;

impl Core {
    /// Prompting and Objected wait for the same fact; only what a second end of turn means
    /// differs, and `on_reply` decides that from `resume`.
    pub(super) fn await_reply(
        &mut self,
        context: &mut Outbox,
        event: &Input,
        resume: Resume,
    ) -> Outcome<State> {
        let phase = match resume {
            Resume::Prompting => Phase::Prompting,
            Resume::Objected => Phase::Objected,
        };
        match event {
            Input::LlmReplied { reply } => self.on_reply(context, reply, resume),
            Input::LlmFailed { error } => self.finish(
                context,
                FinishReason::Failed {
                    error: error.clone(),
                },
            ),
            Input::CatalogChanged { .. }
            | Input::Cancelled
            | Input::Closed
            | Input::PromptInterrupted => Super,
            Input::Prompted { .. }
            | Input::ToolFinished { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. } => {
                context.unexpected(phase, &[InputKind::LlmReplied, InputKind::LlmFailed], event)
            }
        }
    }

    pub(super) fn finish(&mut self, context: &mut Outbox, reason: FinishReason) -> Outcome<State> {
        self.settle_agent(&reason);
        context.emit(Effect::Finish { reason });
        Transition(State::idle())
    }

    /// A model reply, in Prompting (`resume` = Prompting) or right after an objection.
    pub(super) fn on_reply(
        &mut self,
        context: &mut Outbox,
        reply: &LlmReply,
        resume: Resume,
    ) -> Outcome<State> {
        if !planted::on(Bug::CompactedFlagKept) {
            self.turn.compacted = false;
        }
        self.note_reply_text(&reply.text);
        // A usage block without input tokens (0, or left out and defaulted) measures nothing:
        // anchoring on it would zero the context estimate and put off compaction.
        if let Some(usage) = reply.usage.filter(|usage| usage.input_tokens > 0) {
            self.history.note_usage(usage.input_tokens);
        }
        if !reply.tool_calls.is_empty() {
            let calls = self.unique_ids(&reply.tool_calls);
            self.history.push(Message::Assistant {
                text: reply.text.clone(),
                tool_calls: calls.clone(),
            });
            return match &reply.stop {
                StopReason::ToolUse
                | StopReason::EndTurn
                | StopReason::StopSequence
                | StopReason::PauseTurn => self.start_tools(context, calls),
                // A reply cut short may carry truncated calls, and one that stopped for an
                // unknown reason may too: answer them unrun, then stop.
                StopReason::MaxTokens
                | StopReason::Refusal
                | StopReason::ContentFilter
                | StopReason::Other(_) => {
                    let reason = finish_reason(&reply.stop);
                    for call in calls {
                        let text = format!("not run: the reply ended with {:?}", reply.stop);
                        self.history.push(Message::ToolResult {
                            call_id: call.id,
                            output: ToolOutput::error(text),
                        });
                    }
                    self.finish(context, reason)
                }
            };
        }
        // An empty assistant message is invalid for some providers and says nothing.
        if !reply.text.is_empty() {
            self.history.push(Message::Assistant {
                text: reply.text.clone(),
                tool_calls: Vec::new(),
            });
        }
        match &reply.stop {
            StopReason::EndTurn | StopReason::StopSequence => self.on_end_turn(context, resume),
            StopReason::PauseTurn => self.request_turn(context, resume),
            StopReason::ToolUse => {
                tracing::warn!(
                    "the model stopped for tool use but called no tool; ending the turn"
                );
                self.finish(context, FinishReason::EndTurn)
            }
            // Only a genuine end of turn asks `_Stop`: an unknown reason may be a cut.
            StopReason::MaxTokens
            | StopReason::Refusal
            | StopReason::ContentFilter
            | StopReason::Other(_) => self.finish(context, finish_reason(&reply.stop)),
        }
    }

    /// A genuine end of turn: ask `_Stop` (a subagent `_SubagentStop`, under the same rules and
    /// a budget of its own), unless a sovereignty rule says not to.
    pub(super) fn on_end_turn(&mut self, context: &mut Outbox, resume: Resume) -> Outcome<State> {
        let hook = self.stop_hook();
        if self.tools.servers(hook).is_empty()
            || self.policy.stop_max_rejections == 0
            || (hook == Hook::SubagentStop && planted::on(Bug::SubagentStopSkipped))
        {
            return self.finish(context, FinishReason::EndTurn);
        }
        // Consecutive end_turn: the model heard the objection and declined.
        if resume == Resume::Objected && !planted::on(Bug::DeclinedObjectionAsksAgain) {
            context.notify(Notice::StopSkipped {
                reason: SkipReason::DeclinedObjection,
            });
            return self.finish(context, FinishReason::EndTurn);
        }
        if self.counters.budget_left(&self.policy) == 0 && !planted::on(Bug::StopBudgetOffByOne) {
            context.notify(Notice::StopSkipped {
                reason: SkipReason::BudgetSpent,
            });
            return self.finish(context, FinishReason::EndTurn);
        }
        let subjects = self.stop_subjects();
        match self.ask(context, hook, subjects) {
            Some(round) => Transition(State::hooking(round, Then::Stop)),
            None => self.finish(context, FinishReason::EndTurn),
        }
    }

    /// Replaces the history with a fresh context — [summary, current prompt] — or, without a
    /// summary, drops the oldest whole turns; then asks `_PostCompact`.
    pub(super) fn compact(
        &mut self,
        context: &mut Outbox,
        summary: Option<&str>,
        resume: Resume,
    ) -> Outcome<State> {
        let before = self.history.len();
        if planted::on(Bug::ObjectionsResetByCompaction) {
            self.counters.objections = 0;
        }
        match summary {
            Some(summary) => {
                let mut fresh = vec![
                    Message::user(format!("{SUMMARY_PREFIX}{summary}")),
                    Message::user(self.turn.text.clone()),
                ];
                fresh.truncate(if planted::on(Bug::SummaryDropsPrompt) {
                    1
                } else {
                    2
                });
                if planted::on(Bug::SummaryAfterPrompt) {
                    fresh.reverse();
                }
                self.history.replace(fresh);
                self.turn.pinned = 1;
            }
            None => {
                // Aim below the budget so the next round does not compact again at once.
                let target = self.policy.context_budget() / 2;
                let (_, pinned) = self.history.drop_oldest(self.turn.pinned, target);
                self.turn.pinned = pinned;
            }
        }
        context.notify(Notice::Compacted {
            summarized: summary.is_some(),
            messages_before: before,
            messages_after: self.history.len(),
        });
        self.ask_post_compact(context, resume)
    }

    /// The start of a prompt, from `stage` on: `_SessionStart` (first prompt only),
    /// `_UserPromptSubmit`, an owed `_PostCompact`, then the first request. A subagent's one
    /// prompt asks `_SubagentStart` in place of the first two: they belong to the session.
    pub(super) fn start_prompt(
        &mut self,
        context: &mut Outbox,
        mut stage: PromptStage,
    ) -> Outcome<State> {
        loop {
            stage = match stage {
                PromptStage::SessionStart => {
                    if !self.session_started || planted::on(Bug::SessionStartEveryPrompt) {
                        self.session_started = true;
                        let (hook, subjects) = self.start_hook();
                        if let Some(round) = self.ask(context, hook, subjects) {
                            return Transition(State::hooking(round, Then::SessionStart));
                        }
                    }
                    PromptStage::UserPromptSubmit
                }
                PromptStage::UserPromptSubmit if self.child.is_some() => {
                    PromptStage::OwedPostCompact
                }
                PromptStage::UserPromptSubmit => {
                    let subject = json!({"prompt": self.turn.text});
                    if let Some(round) = self.ask(context, Hook::UserPromptSubmit, vec![subject]) {
                        return Transition(State::hooking(round, Then::UserPromptSubmit));
                    }
                    PromptStage::OwedPostCompact
                }
                PromptStage::OwedPostCompact => {
                    if self.post_compact_owed {
                        return self.ask_post_compact(context, Resume::Prompting);
                    }
                    PromptStage::Request
                }
                PromptStage::Request => return self.request_turn(context, Resume::Prompting),
            };
        }
    }

    /// Ends the session: `_SessionEnd` once, if a server has it, then Done. A subagent's end is
    /// not the session's: it goes to Done without it.
    pub(super) fn end_session(&mut self, context: &mut Outbox) -> Outcome<State> {
        if self.session_ended || self.child.is_some() {
            self.session_ended = true;
            return Transition(State::done());
        }
        self.session_ended = true;
        match self.ask(context, Hook::SessionEnd, Vec::new()) {
            Some(round) => Transition(State::hooking(round, Then::SessionEnd)),
            None => Transition(State::done()),
        }
    }
}

fn finish_reason(stop: &StopReason) -> FinishReason {
    match stop {
        StopReason::MaxTokens => FinishReason::MaxTokens,
        StopReason::Other(reason) => FinishReason::OtherStop {
            stop_reason: reason.clone(),
        },
        StopReason::Refusal | StopReason::ContentFilter => FinishReason::Refusal,
        StopReason::EndTurn
        | StopReason::StopSequence
        | StopReason::ToolUse
        | StopReason::PauseTurn => FinishReason::EndTurn,
    }
}
