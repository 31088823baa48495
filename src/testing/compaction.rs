//! When a compaction happens, judged from the facts and the requests alone: before a turn's
//! model request, the context the request would use is estimated here, independently of the
//! machine's own accounting, and the history is compacted exactly when that estimate is over
//! the policy's line (`max_context_tokens − max_output_tokens`), no compaction happened since
//! the model last replied in this prompt, and the history holds more than one unit to fold.
//! A machine that never compacts, compacts before it must, or keeps a stale figure across a
//! compaction breaks it; no other rule sees when, only what a compaction leaves.
//!
//! The estimate is the spec's: the input tokens the provider last reported (a turn reply's
//! usage, when it has input tokens) plus a quarter of the bytes the history gained since the
//! request that reply answered; before any such report, and after every compaction (the
//! report measured a context that is gone), a quarter of every byte sent: the system prompt,
//! the offered tools and the history. Sizes are counted here from the messages themselves.
//!
//! What the rule remembers is the usage anchor (tokens and the history length it was measured
//! at) and whether a compaction happened since the last reply. Only the latter is in the
//! fingerprint: the anchor mirrors what the machine's own encoding keeps of its accounting, at
//! every grain as coarse as that one.

use serde_json::Value;

use crate::hooks::Hook;
use crate::machine::{
    BYTES_PER_TOKEN, Canon, Content, Effect, Input, Machine, Media, Message, Notice, Phase, Purpose,
};

use super::transition::{Transition, Violation, ensure};

/// The rule a compaction at the wrong moment breaks.
pub const RULE: &str =
    "a turn's request is compacted first exactly when the facts' context estimate is over the line";

/// What the rule remembers between facts.
#[derive(Clone, Debug, Default)]
pub struct CompactionDue {
    /// The input tokens last reported and the history's length when the request they measured
    /// was sent.
    anchor: Option<(u64, usize)>,
    /// The history's length when the last turn request was sent.
    sent_at: usize,
    /// A compaction started since the model last replied (or the prompt began).
    compacted: bool,
}

impl CompactionDue {
    /// Appends what the rule remembers to `e`, for an explorer's fingerprint (see the module
    /// doc for what is left out).
    pub fn fingerprint(&self, e: &mut Canon) {
        e.bool(self.compacted);
        e.bool(self.anchor.is_some());
    }

    /// Checks one accepted fact and its orders.
    pub fn check(&mut self, step: &Transition<'_>) -> Result<(), Violation> {
        let m = step.machine;
        match step.fact {
            Input::Prompted { .. } if step.before == Phase::Idle => self.compacted = false,
            Input::LlmReplied { reply }
                if matches!(step.before, Phase::Prompting | Phase::Objected) =>
            {
                self.compacted = false;
                if let Some(usage) = &reply.usage
                    && usage.input_tokens > 0
                {
                    self.anchor = Some((usage.input_tokens, self.sent_at));
                }
            }
            _ => {}
        }
        let pre_compact_done = step.before == Phase::of_hook(Hook::PreCompact);
        for effect in step.effects {
            match effect {
                Effect::CallHooks {
                    hook: Hook::PreCompact,
                    ..
                } => self.starts(m)?,
                Effect::CallLlm {
                    purpose: Purpose::Summary { .. },
                    ..
                } if !pre_compact_done => self.starts(m)?,
                Effect::Notify {
                    notice: Notice::Compacted { .. },
                } => {
                    // A fresh context: what was reported measured one that is gone.
                    self.anchor = None;
                    self.sent_at = 0;
                }
                Effect::CallLlm {
                    purpose: Purpose::Turn,
                    ..
                } => {
                    let (due, detail) = self.due(m);
                    ensure(!due, RULE, || {
                        format!(
                            "a turn request sent uncompacted after {}: {detail}",
                            step.fact.kind()
                        )
                    })?;
                    self.sent_at = m.history().len();
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A compaction starts: it must be due.
    fn starts(&mut self, m: &Machine) -> Result<(), Violation> {
        let (due, detail) = self.due(m);
        self.compacted = true;
        ensure(due, RULE, || format!("compacted when not due: {detail}"))
    }

    /// Whether a turn request now must be compacted first, and the figures that say so.
    fn due(&self, m: &Machine) -> (bool, String) {
        let history = m.history();
        let media = &m.policy().media;
        let policy = m.policy();
        let line = policy
            .max_context_tokens
            .saturating_sub(u64::from(policy.max_output_tokens));
        let estimate = match self.anchor {
            Some((tokens, at)) => {
                let since: usize = history
                    .iter()
                    .skip(at)
                    .map(|message| message_bytes(message, media))
                    .sum();
                tokens + tokens_of(since)
            }
            None => {
                let request = m.request(Purpose::Turn);
                let fixed = request.system.map_or(0, str::len)
                    + request
                        .tools
                        .iter()
                        .map(|tool| {
                            tool.name.len()
                                + tool.description.len()
                                + json_bytes(&tool.input_schema)
                        })
                        .sum::<usize>();
                let held: usize = history
                    .iter()
                    .map(|message| message_bytes(message, media))
                    .sum();
                tokens_of(held + fixed)
            }
        };
        // A unit is a user or assistant message with the results after it: one unit alone
        // has nothing older to fold.
        let foldable = history
            .iter()
            .rposition(|message| !matches!(message, Message::ToolResult { .. }))
            .is_some_and(|newest| newest > 0);
        let due = !self.compacted && estimate > line && foldable;
        (
            due,
            format!(
                "estimate {estimate} tokens against a line of {line} (anchor {:?}), {} messages, \
                 compacted since the last reply: {}",
                self.anchor,
                history.len(),
                self.compacted
            ),
        )
    }
}

fn tokens_of(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// The bytes a message costs in a request: its words, each call's id, name and arguments as
/// JSON, each result's id and blocks, and 16 bytes of framing.
fn message_bytes(message: &Message, media: &Media) -> usize {
    16 + match message {
        Message::User { text } => text.len(),
        Message::Assistant { text, tool_calls } => {
            text.len()
                + tool_calls
                    .iter()
                    .map(|call| call.id.0.len() + call.name.len() + json_bytes(&call.arguments))
                    .sum::<usize>()
        }
        Message::ToolResult { call_id, output } => {
            call_id.0.len()
                + output
                    .content
                    .iter()
                    .map(|block| block_bytes(block, media))
                    .sum::<usize>()
        }
    }
}

/// What the dialect sends of one block: text as it is, an image it sends up to its token cap,
/// any other binary as a one-line description.
fn block_bytes(block: &Content, media: &Media) -> usize {
    const DESCRIBED: usize = 48;
    match block {
        Content::Text { text } => text.len(),
        Content::Image { mime_type, data } => {
            if media.image_types.iter().any(|t| t == mime_type) {
                let cap = media.max_image_tokens.saturating_mul(BYTES_PER_TOKEN);
                data.len().min(usize::try_from(cap).unwrap_or(usize::MAX))
            } else {
                mime_type.len() + DESCRIBED
            }
        }
        Content::Resource {
            uri,
            mime_type,
            text,
            blob,
        } => {
            uri.len()
                + mime_type.as_deref().map_or(0, str::len)
                + match (text, blob) {
                    (Some(text), _) => text.len(),
                    (None, Some(_)) => DESCRIBED,
                    (None, None) => 0,
                }
        }
    }
}

fn json_bytes(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |text| text.len())
}
