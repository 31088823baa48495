//! The caps on one model reply: what a provider (or anything answering at its URL) may make the
//! client hold, count and compute for one request.
//!
//! The bytes of an answer are capped by the HTTP client's `MAX_RESPONSE_BYTES`,
//! a line of a stream by 1 MiB and an event by 4 MiB (the caps of the crate's reader of
//! server-sent events, which the MCP host shares). [`ReplyLimits`] caps what those bytes
//! may stand for: tool calls, content blocks, stream events, and the text and arguments they
//! add up to. A reply past any cap is refused whole with [`LlmError::ReplyTooLarge`], which
//! names the cap: the machine never sees part of a reply, and a turn does not act on a reply
//! cut where the client chose.
//!
//! Decoding costs time linear in the bytes (each call and block is found by its index in a
//! map), and a streamed reply yields to the runtime each time [`DECODE_SLICE_BYTES`] of it have
//! been decoded, so a long reply cannot hold the thread other sessions share.

use crate::machine::LlmReply;
use crate::ports::LlmError;

/// Bytes of a streamed answer decoded between two yields to the runtime.
pub const DECODE_SLICE_BYTES: usize = 64 * 1024;

/// What one reply may hold. Past any cap the reply is refused whole, with an error naming the
/// cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyLimits {
    /// Tool calls in one reply. Default: [`DEFAULT_MAX_TOOL_CALLS`](Self::DEFAULT_MAX_TOOL_CALLS).
    pub max_tool_calls: usize,
    /// Content blocks of any kind (text, thinking, tool use, others) in one Messages reply.
    /// Default: [`DEFAULT_MAX_BLOCKS`](Self::DEFAULT_MAX_BLOCKS).
    pub max_blocks: usize,
    /// Server-sent events in one streamed reply (comments, which are keep-alives, are not
    /// events: the whole-reply deadline bounds them). Default:
    /// [`DEFAULT_MAX_EVENTS`](Self::DEFAULT_MAX_EVENTS).
    pub max_events: usize,
    /// Bytes of text, reasoning and refusal in one reply, together. Default:
    /// [`DEFAULT_MAX_TEXT_BYTES`](Self::DEFAULT_MAX_TEXT_BYTES).
    pub max_text_bytes: usize,
    /// Bytes of tool-call names and arguments in one reply, every call together. Default:
    /// [`DEFAULT_MAX_ARGUMENT_BYTES`](Self::DEFAULT_MAX_ARGUMENT_BYTES).
    pub max_argument_bytes: usize,
}

impl ReplyLimits {
    /// The default cap on tool calls per reply: more than any model asks for in one turn.
    pub const DEFAULT_MAX_TOOL_CALLS: usize = 64;
    /// The default cap on content blocks per reply.
    pub const DEFAULT_MAX_BLOCKS: usize = 256;
    /// The default cap on stream events per reply: a long reply sends one event per token or
    /// so, and the answer's bytes allow about four times as many.
    pub const DEFAULT_MAX_EVENTS: usize = 500_000;
    /// The default cap on text bytes per reply.
    pub const DEFAULT_MAX_TEXT_BYTES: usize = 8 * 1024 * 1024;
    /// The default cap on argument bytes per reply.
    pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 8 * 1024 * 1024;

    /// Checks a whole reply (one that was not streamed) against the caps on calls and text.
    pub fn check(&self, reply: &LlmReply) -> Result<(), LlmError> {
        refuse_past(reply.tool_calls.len(), self.max_tool_calls, "tool calls")?;
        refuse_past(reply.text.len(), self.max_text_bytes, "bytes of text")
    }
}

impl Default for ReplyLimits {
    fn default() -> Self {
        Self {
            max_tool_calls: Self::DEFAULT_MAX_TOOL_CALLS,
            max_blocks: Self::DEFAULT_MAX_BLOCKS,
            max_events: Self::DEFAULT_MAX_EVENTS,
            max_text_bytes: Self::DEFAULT_MAX_TEXT_BYTES,
            max_argument_bytes: Self::DEFAULT_MAX_ARGUMENT_BYTES,
        }
    }
}

/// `Ok` while `count` is within `cap`; else the error that refuses the reply.
pub(crate) fn refuse_past(count: usize, cap: usize, what: &'static str) -> Result<(), LlmError> {
    if count > cap {
        return Err(LlmError::ReplyTooLarge { what, cap });
    }
    Ok(())
}

/// A running total of bytes against a cap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    used: usize,
    cap: usize,
    what: &'static str,
}

impl Budget {
    pub(crate) fn new(cap: usize, what: &'static str) -> Self {
        Self { used: 0, cap, what }
    }

    /// Counts `bytes` more; an error once past the cap.
    pub(crate) fn spend(&mut self, bytes: usize) -> Result<(), LlmError> {
        self.used = self.used.saturating_add(bytes);
        refuse_past(self.used, self.cap, self.what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{CallId, StopReason, ToolCall};

    #[test]
    fn a_whole_reply_past_a_cap_is_refused_naming_it() {
        let limits = ReplyLimits {
            max_tool_calls: 2,
            max_text_bytes: 4,
            ..ReplyLimits::default()
        };
        let call = |i: usize| ToolCall {
            id: CallId(format!("c{i}")),
            name: "t".into(),
            arguments: serde_json::json!({}),
        };
        let mut reply = LlmReply {
            text: "abcd".into(),
            tool_calls: (0..2).map(call).collect(),
            stop: StopReason::ToolUse,
            usage: None,
        };
        assert!(limits.check(&reply).is_ok());
        reply.tool_calls.push(call(2));
        let err = limits.check(&reply).unwrap_err().to_string();
        assert!(err.contains("more than 2 tool calls"), "{err}");
        reply.tool_calls.pop();
        reply.text.push('e');
        let err = limits.check(&reply).unwrap_err().to_string();
        assert!(err.contains("more than 4 bytes of text"), "{err}");
    }

    #[test]
    fn a_budget_refuses_once_past_its_cap_and_never_overflows() {
        let mut budget = Budget::new(10, "bytes of arguments");
        assert!(budget.spend(10).is_ok());
        assert!(budget.spend(1).is_err());
        // Saturates rather than wraps round to a small count.
        let mut budget = Budget::new(usize::MAX - 1, "bytes");
        assert!(budget.spend(usize::MAX - 1).is_ok());
        assert!(budget.spend(usize::MAX).is_err());
    }
}
