//! Hook rounds: which servers are asked, how each answer is taken under the sovereignty rules
//! (fail open, the timeout streak and the kill), and each hook's rule, one function per hook.

use std::sync::Arc;

use serde_json::{Map, Value};
use statig::prelude::*;

use super::planted::{self, Bug};
use super::round::{Answer, HookRound, ToolBatch};
use super::{
    Content, Core, Effect, FinishReason, HookContext, HookReply, MachineError, Message, Notice,
    Outbox, PromptStage, Resume, State, Then, ToolCall, ToolOutput,
};
use crate::hooks::{self, Hook, ServerName};

impl Core {
    /// Orders a round of `hook` on every allowed server that has it, one call per subject;
    /// `None` when no server has it.
    pub(super) fn ask(
        &mut self,
        context: &mut Outbox,
        hook: Hook,
        subjects: Vec<Value>,
    ) -> Option<HookRound> {
        let servers = self.tools.servers(hook).to_vec();
        if servers.is_empty() {
            return None;
        }
        let round = HookRound::new(hook, servers.clone(), subjects.len());
        context.emit(Effect::CallHooks {
            hook,
            servers,
            timeout: self.policy.hook_timeout(),
            context: self.hook_context(),
            subjects,
        });
        Some(round)
    }

    /// Applies the sovereignty rules to one server's hook answer.
    pub(super) fn take_hook_answer(
        &mut self,
        context: &mut Outbox,
        round: &mut HookRound,
        server: &ServerName,
        hook: Hook,
        subject: Option<u32>,
        reply: &HookReply,
    ) -> Result<(), MachineError> {
        let unexpected = || MachineError::UnexpectedHookAnswer {
            server: server.clone(),
            hook,
        };
        if hook != round.hook {
            return Err(unexpected());
        }
        let subject = subject.map_or(0, |s| usize::try_from(s).unwrap_or(usize::MAX));
        let slot = round.waiting_slot(server, subject).ok_or_else(unexpected)?;
        let failed_open = |reason: String| {
            tracing::warn!(%server, %hook, %reason, "hook failed open: no objection");
            Notice::HookFailedOpen {
                server: server.clone(),
                hook,
                reason,
            }
        };
        *slot = match reply {
            HookReply::Text { text } => {
                self.counters.record_answer(server);
                let text = text.trim();
                if text.is_empty() {
                    Answer::Quiet
                } else {
                    Answer::Said(text.to_owned())
                }
            }
            HookReply::ErrorResult { text } => {
                self.counters.record_answer(server);
                context.notify(failed_open(format!("error result: {text}")));
                Answer::Quiet
            }
            HookReply::Failed { error } => {
                context.notify(failed_open(format!("call failed: {error}")));
                Answer::Quiet
            }
            HookReply::Skipped { reason } => {
                tracing::info!(%server, %hook, %reason, "server skipped for this hook round");
                context.notify(Notice::HookSkipped {
                    server: server.clone(),
                    hook,
                    reason: reason.clone(),
                });
                Answer::Quiet
            }
            HookReply::TimedOut => {
                context.notify(failed_open(format!(
                    "no answer within {} ms",
                    self.policy.hook_timeout_ms
                )));
                let kill = self.counters.record_timeout(server);
                if (kill || planted::on(Bug::KillOnFirstTimeout)) && !planted::on(Bug::NeverKilled)
                {
                    tracing::warn!(%server, "second consecutive hook timeout: killing the server");
                    context.emit(Effect::KillServer {
                        server: server.clone(),
                    });
                    if planted::on(Bug::KilledServerForgotten) {
                        self.tools = Arc::new(self.tools.forgetting(server));
                    }
                }
                if planted::on(Bug::TimeoutSpeaks) {
                    Answer::Said("timed out".into())
                } else {
                    Answer::Quiet
                }
            }
        };
        Ok(())
    }

    /// A complete hook round leads where `then` says, through the rule named after its hook.
    /// `then` is the round's state's own: the state is being left, so a gated batch is taken
    /// from it rather than copied.
    pub(super) fn conclude_round(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
        then: &mut Then,
    ) -> Outcome<State> {
        match then {
            Then::SessionStart => self.on_session_start(context, round),
            Then::UserPromptSubmit => self.on_user_prompt_submit(context, round),
            Then::PreToolUse { batch } => {
                self.on_pre_tool_use(context, round, std::mem::take(batch))
            }
            Then::PostToolUse => self.on_post_tool_use(context, round),
            Then::Stop => self.on_stop(context, round),
            Then::PreCompact { resume } => self.on_pre_compact(context, round, *resume),
            Then::PostCompact { resume } => self.on_post_compact(context, round, *resume),
            Then::SessionEnd => Self::on_session_end(round),
        }
    }

    /// `_SessionStart`'s rule, and `_SubagentStart`'s in a subagent: its answers are context,
    /// injected after the first prompt (a subagent's task).
    pub(super) fn on_session_start(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
    ) -> Outcome<State> {
        self.inject_context(context, round);
        self.start_prompt(context, PromptStage::UserPromptSubmit)
    }

    /// `_UserPromptSubmit`'s rule: its answers are context, injected after the prompt.
    pub(super) fn on_user_prompt_submit(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
    ) -> Outcome<State> {
        self.inject_context(context, round);
        self.start_prompt(context, PromptStage::OwedPostCompact)
    }

    /// `_PreToolUse`'s rule: a non-empty answer denies its call. A denied call never runs; it is
    /// answered once, with an error result carrying every denying server's JSON body.
    pub(super) fn on_pre_tool_use(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
        mut batch: ToolBatch,
    ) -> Outcome<State> {
        let mut denials: Vec<Vec<Content>> = batch.ran.iter().map(|_| Vec::new()).collect();
        for (subject, server, text) in round.said() {
            let Some(call) = batch.ran.get(subject) else {
                continue;
            };
            let body = hooks::encode_hook_body(Hook::PreToolUse, server.as_str(), &text);
            denials[subject].push(Content::Text { text: body });
            context.notify(Notice::ToolDenied {
                server,
                tool: call.name.clone(),
                text,
            });
        }
        if planted::on(Bug::DenialSpreads)
            && let Some(first) = denials.iter().find(|d| !d.is_empty()).cloned()
        {
            for denial in &mut denials {
                if denial.is_empty() {
                    denial.clone_from(&first);
                }
            }
        }
        let ran = std::mem::take(&mut batch.ran);
        for (call, denial) in ran.into_iter().zip(denials) {
            if denial.is_empty() || planted::on(Bug::DeniedCallRuns) {
                batch.ran.push(call);
                continue;
            }
            let output = ToolOutput {
                content: denial,
                is_error: true,
            };
            // The id is the batch's own and still unanswered: a denial answers it once.
            let _ = batch.answer(&call.id, &output);
        }
        self.run_batch(context, batch)
    }

    /// `_PostToolUse`'s rule: its answers are context, injected after the batch's results.
    pub(super) fn on_post_tool_use(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
    ) -> Outcome<State> {
        self.inject_context(context, round);
        self.request_turn(context, Resume::Prompting)
    }

    /// `_Stop`'s rule, and `_SubagentStop`'s in a subagent: any non-empty answer is an
    /// objection, injected, and the model is asked again (once per round, whatever the number
    /// of objecting servers).
    pub(super) fn on_stop(&mut self, context: &mut Outbox, round: HookRound) -> Outcome<State> {
        let mut objections = round
            .said()
            .map(|(_, server, text)| (server, text))
            .peekable();
        if objections.peek().is_none() {
            return self.finish(context, FinishReason::EndTurn);
        }
        self.counters.objections += 1;
        self.turn.objected = true;
        let budget_left = self.counters.budget_left(&self.policy);
        let hook = self.stop_hook();
        for (server, text) in objections {
            self.inject_hook_pair(hook, &server, &text);
            context.notify(Notice::Objection {
                server,
                text,
                budget_left,
            });
        }
        self.request_turn(context, Resume::Objected)
    }

    /// `_PreCompact`'s rule: its answers are guidance, added to the summary instruction of
    /// this compaction only; they never enter the history.
    pub(super) fn on_pre_compact(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
        resume: Resume,
    ) -> Outcome<State> {
        for (_, server, text) in round.said() {
            if planted::on(Bug::PreCompactInjected) {
                self.inject_hook_pair(Hook::PreCompact, &server, &text);
            }
            self.summary_instruction.push_str(&format!(
                "\n\nThe summary must also keep what server {server} asks for:\n{}",
                crate::text::cut(&text, hooks::MAX_HOOK_TEXT_BYTES, crate::text::Cut::Middle)
            ));
            context.notify(Notice::HookInjected {
                hook: Hook::PreCompact,
                server,
                text,
            });
        }
        self.request_summary(context, resume)
    }

    /// `_PostCompact`'s rule: its answers are injected into the fresh context.
    pub(super) fn on_post_compact(
        &mut self,
        context: &mut Outbox,
        round: HookRound,
        resume: Resume,
    ) -> Outcome<State> {
        for (_, server, text) in round.said() {
            self.inject_hook_pair(Hook::PostCompact, &server, &text);
            if planted::on(Bug::PostCompactBeforeSummary) {
                self.history
                    .replace(planted::rotated(self.history.messages(), 2));
            }
            context.notify(Notice::PostCompactInjected { server, text });
        }
        self.request_turn(context, resume)
    }

    /// Asks `_PostCompact` of every allowed server that has it, then makes the request `resume`
    /// names; without such servers, makes it at once.
    pub(super) fn ask_post_compact(
        &mut self,
        context: &mut Outbox,
        resume: Resume,
    ) -> Outcome<State> {
        if !planted::on(Bug::PostCompactOwedKept) {
            self.post_compact_owed = false;
        }
        match self.ask(context, Hook::PostCompact, Vec::new()) {
            Some(round) => Transition(State::hooking(round, Then::PostCompact { resume })),
            None => self.request_turn(context, resume),
        }
    }

    /// `_SessionEnd`'s rule: a notification; its answers are ignored.
    pub(super) fn on_session_end(round: HookRound) -> Outcome<State> {
        drop(round);
        Transition(State::done())
    }

    /// Injects each non-empty answer of a context hook, in order, and tells the embedder.
    pub(super) fn inject_context(&mut self, context: &mut Outbox, round: HookRound) {
        let hook = round.hook;
        for (_, server, text) in round.said() {
            let dropped = planted::on(Bug::InjectionDroppedAfterCompaction)
                && hook == Hook::PostToolUse
                && self.counters.compactions > 0;
            if !dropped {
                self.inject_hook_pair(hook, &server, &text);
            }
            context.notify(Notice::HookInjected { hook, server, text });
        }
    }

    /// Injects a hook's answer as a synthetic `<server>__<hook>` call and its JSON result.
    pub(super) fn inject_hook_pair(&mut self, hook: Hook, server: &ServerName, text: &str) {
        let id = self.fresh_id("hook");
        let call = ToolCall {
            id: id.clone(),
            name: hooks::qualify(server.as_str(), hook.tool_name()),
            arguments: Value::Object(Map::new()),
        };
        self.history.push(Message::Assistant {
            text: String::new(),
            tool_calls: vec![call],
        });
        let mut body = hooks::encode_hook_body(hook, server.as_str(), text);
        if planted::on(Bug::HookUnencoded) {
            body = text.to_owned();
        }
        self.history.push(Message::ToolResult {
            call_id: id,
            output: ToolOutput::text(body),
        });
    }

    pub(super) fn hook_context(&self) -> HookContext {
        HookContext {
            objections_so_far: self.counters.objections,
            budget_left: self.counters.budget_left(&self.policy),
            compactions: self.counters.compactions,
            agent: self.child.as_ref().map(|child| child.me.clone()),
        }
    }
}
