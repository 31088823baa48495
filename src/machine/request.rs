//! The model requests the machine orders: when a turn's request is made (the round cap, a
//! compaction first), what a request holds, and the digest that pins every part of it.

use statig::prelude::*;

use super::planted::{self, Bug};
use super::{
    BYTES_PER_TOKEN, Core, Digest, Effect, FinishReason, Message, Outbox, Purpose, RequestDigest,
    Resume, SUMMARY_INSTRUCTION, State, Then, ToolSpec,
};
use crate::hooks::Hook;

/// A model request, as the machine sees it; providers translate it to their dialect.
#[derive(Clone, Copy, Debug)]
pub struct LlmRequest<'a> {
    /// What the request is for.
    pub purpose: Purpose,
    /// The system prompt, if any.
    pub system: Option<&'a str>,
    /// The conversation to send. It may begin with an assistant message (a summary request
    /// starts at the newest history that fits); it never holds a tool result without its call.
    pub messages: &'a [Message],
    /// The tools to offer; empty for a summary.
    pub tools: &'a [ToolSpec],
    /// A final user message to send after `messages` (the summary instruction).
    pub instruction: Option<&'a str>,
    /// Tokens reserved for the reply.
    pub max_output_tokens: u32,
    /// What this request shares with earlier ones of the same session, so a provider may
    /// reuse what it encoded for them; `None` promises nothing.
    pub lineage: Option<Lineage>,
}

/// Names what a request borrows, so work done for one request can be reused for the next.
///
/// Two requests with the same `history` have `messages` of which the shorter is a prefix of the
/// longer; two with the same `tools` offer the same tools. The numbers are identities, unique in
/// the process, and nothing the machine decides depends on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lineage {
    /// The history's current run of appends.
    pub history: u64,
    /// The catalog the tools come from; 0 when there are none.
    pub tools: u64,
}

/// A lineage number never handed out before in this process.
pub(crate) fn fresh_lineage() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Core {
    /// Asks the model for the next turn, unless a guard says otherwise: the round cap ends the
    /// prompt, and a history over budget is compacted first (at most once between replies).
    pub(super) fn request_turn(&mut self, context: &mut Outbox, resume: Resume) -> Outcome<State> {
        let cap = self.policy.max_rounds;
        let spent = self
            .turn
            .rounds
            .saturating_sub(u32::from(planted::on(Bug::RoundCapOffByOne)));
        if cap != 0 && spent >= cap {
            return self.finish(context, FinishReason::MaxTurnRequests);
        }
        if !self.turn.compacted && self.over_budget() && self.history.fitting_suffix(0) > 0 {
            self.turn.compacted = true;
            self.counters.compactions += 1;
            self.summary_instruction = SUMMARY_INSTRUCTION.to_owned();
            return match self.ask(context, Hook::PreCompact, Vec::new()) {
                Some(round) => Transition(State::hooking(round, Then::PreCompact { resume })),
                None => self.request_summary(context, resume),
            };
        }
        self.turn.rounds += 1;
        self.history.mark_request();
        context.emit(self.call_llm(Purpose::Turn));
        match resume {
            Resume::Prompting => Transition(State::prompting()),
            Resume::Objected => Transition(State::objected()),
        }
    }

    /// Asks the model for the compaction summary of the newest history that fits.
    pub(super) fn request_summary(
        &mut self,
        context: &mut Outbox,
        resume: Resume,
    ) -> Outcome<State> {
        let fixed =
            self.system_prompt.as_ref().map_or(0, String::len) + self.summary_instruction.len();
        let room = self
            .policy
            .context_budget()
            .saturating_sub((fixed as u64).div_ceil(BYTES_PER_TOKEN));
        let from = self.history.fitting_suffix(room);
        context.emit(self.call_llm(Purpose::Summary { from }));
        Transition(State::summarizing(resume))
    }

    /// The request an [`Effect::CallLlm`] with this purpose stands for.
    pub(super) fn request(&self, purpose: Purpose) -> LlmRequest<'_> {
        let all = self.history.messages();
        match purpose {
            Purpose::Turn => LlmRequest {
                purpose,
                system: self.system_prompt.as_deref(),
                messages: all,
                tools: &self.tools.model,
                instruction: None,
                max_output_tokens: self.policy.max_output_tokens,
                lineage: Some(Lineage {
                    history: self.history.lineage(),
                    tools: self.tools.lineage,
                }),
            },
            Purpose::Summary { from } => LlmRequest {
                purpose,
                system: self.system_prompt.as_deref(),
                messages: &all[from.min(all.len())..],
                tools: &[],
                instruction: Some(&self.summary_instruction),
                max_output_tokens: self.policy.max_output_tokens,
                // A summary starts wherever the budget allows and is rare: nothing to reuse.
                lineage: None,
            },
        }
    }

    /// The order to send `request(purpose)`, pinning every part of it.
    pub(super) fn call_llm(&self, purpose: Purpose) -> Effect {
        let request = self.request(purpose);
        // The offered tools' digest is kept with the catalog; a summary offers none.
        let tools = if request.tools.is_empty() {
            Digest::of_tools(&[])
        } else {
            self.tools.digest
        };
        Effect::CallLlm {
            purpose,
            messages: self.history.len(),
            digest: RequestDigest::of(
                request.system,
                self.history.digest(),
                tools,
                request.instruction,
                request.max_output_tokens,
            ),
        }
    }

    pub(super) fn over_budget(&self) -> bool {
        if planted::on(Bug::NeverCompacts) {
            return false;
        }
        let fixed = self.system_prompt.as_ref().map_or(0, String::len) + self.tools.bytes;
        self.history.estimate_tokens(fixed) > self.policy.context_budget()
    }
}
