//! The shared assembler of streamed replies: server-sent events in, a dialect's decoder
//! turning them into [`Delta`]s for people watching and, at the end, the reply.
//!
//! The machine sees one reply either way. A decoder does not map stop reasons, usage or
//! arguments itself: once the stream is complete it hands the assembled answer to the same
//! parser a non-streamed answer of its dialect goes through, so a streamed reply is the very
//! reply the same answer sent whole would give, and transcripts do not depend on the mode.
//!
//! Events are untrusted: a malformed one is an error naming the problem, never a panic. The
//! number of events a reply may have is capped ([`ReplyLimits::max_events`]).

use crate::llm::Parsed;
use crate::llm::limits::{ReplyLimits, refuse_past};
use crate::net::sse::{SseError, SseEvent, SseParser};
use crate::ports::{LlmError, OnDelta, ResponseFault};
use crate::text::{Cut, cut};

/// Turns one dialect's events into deltas and, at the end, the reply.
pub(crate) trait Decoder: Send {
    /// Takes one event's data (and its `event:` name, which Chat Completions does not send).
    fn event(&mut self, name: &str, data: &str, on_delta: &mut OnDelta<'_>)
    -> Result<(), LlmError>;

    /// Whether the stream said it is complete (`[DONE]`, `message_stop`).
    fn complete(&self) -> bool;

    /// Whether the body ending now leaves a complete reply although the stream did not say so
    /// (a server that ends a finished reply without `[DONE]`).
    fn ended_complete(&self) -> bool {
        false
    }

    /// Whether any of the reply has arrived: after that, a broken stream cannot be retried.
    fn has_content(&self) -> bool;

    /// The reply, once [`complete`](Self::complete).
    fn finish(self: Box<Self>) -> Result<Parsed, LlmError>;
}

/// Bytes in, deltas out, and the reply at the end: the parser and a dialect's decoder.
pub(crate) struct Assembler {
    parser: SseParser,
    events: Vec<SseEvent>,
    decoder: Box<dyn Decoder>,
    /// Events decoded so far, against [`ReplyLimits::max_events`].
    decoded: usize,
    max_events: usize,
}

impl Assembler {
    pub(crate) fn new(decoder: Box<dyn Decoder>, limits: ReplyLimits) -> Self {
        Self {
            parser: SseParser::new(),
            events: Vec::new(),
            decoder,
            decoded: 0,
            max_events: limits.max_events,
        }
    }

    /// Takes the next chunk of the body. What follows the event that completes the reply
    /// (events, or bytes that are no event at all) is dropped unread.
    pub(crate) fn feed(
        &mut self,
        chunk: &[u8],
        on_delta: &mut OnDelta<'_>,
    ) -> Result<(), LlmError> {
        // The events before a broken line are decoded first: the reply may end among them.
        let parsed = self.parser.push(chunk, &mut self.events);
        for event in self.events.drain(..) {
            // What follows the stream's end in the same chunk is not the reply's: a reply must
            // not depend on where the network cut the bytes.
            if self.decoder.complete() {
                break;
            }
            self.decoded += 1;
            refuse_past(self.decoded, self.max_events, "stream events")?;
            self.decoder.event(&event.event, &event.data, on_delta)?;
        }
        if self.decoder.complete() {
            return Ok(());
        }
        parsed.map_err(|e| {
            LlmError::InvalidResponse(match e {
                SseError::LineTooLong { max } => ResponseFault::LineTooLong { max },
                SseError::EventTooLarge { max } => ResponseFault::EventTooLarge { max },
            })
        })
    }

    /// See [`Decoder::complete`].
    pub(crate) fn complete(&self) -> bool {
        self.decoder.complete()
    }

    /// See [`Decoder::ended_complete`].
    pub(crate) fn ended_complete(&self) -> bool {
        self.decoder.ended_complete()
    }

    /// See [`Decoder::has_content`].
    pub(crate) fn has_content(&self) -> bool {
        self.decoder.has_content()
    }

    /// The reply; only once complete.
    pub(crate) fn finish(self) -> Result<Parsed, LlmError> {
        self.decoder.finish()
    }
}

/// The error for an event that is not what its dialect says it must be.
pub(crate) fn invalid_event(
    what: &'static str,
    data: &str,
    error: impl std::fmt::Display,
) -> LlmError {
    LlmError::InvalidResponse(ResponseFault::InvalidEvent {
        what,
        error: error.to_string(),
        began: cut(data, 200, Cut::Chars { total: true }),
    })
}
