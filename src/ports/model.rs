//! The model seam: [`LlmClient`], what it reports while a reply streams in ([`Delta`]), and why a
//! request failed ([`LlmError`]). The providers of `llm` (feature `providers`) implement it, and
//! so does any client an embedder writes.

use std::future::Future;

use crate::machine::{LlmReply, LlmRequest, Media};

/// A model provider. The driver calls [`complete`](Self::complete) once per
/// [`Effect::CallLlm`](crate::machine::Effect::CallLlm).
///
/// The future may be dropped at any await point (the user cancelled); implementations must not
/// leave shared state inconsistent when that happens. Retries belong inside the client: the
/// machine sees one reply or one failure per request.
pub trait LlmClient: Send + Sync {
    /// Sends one request and returns the model's reply.
    fn complete(
        &self,
        request: LlmRequest<'_>,
    ) -> impl Future<Output = Result<LlmReply, LlmError>> + Send;

    /// What the dialect does with the images and binary resources of tool results, so the
    /// machine's context estimate counts what is sent. The default describes each in one line
    /// and sends none; a client that sends images says which.
    fn media(&self) -> Media {
        Media::default()
    }

    /// The provider (`openai`, `anthropic`) and the model requests go to, as the traces name
    /// them (`gen_ai.provider.name`, `gen_ai.request.model`, and the `chat {model}` span). The
    /// default names none; a client that wraps another forwards it.
    fn model_name(&self) -> Option<(&str, &str)> {
        None
    }

    /// Sends one request and returns the model's reply, handing pieces of it to `on_delta` as
    /// they arrive, for people watching. The reply is the same [`complete`](Self::complete)
    /// would return; the deltas are progress, never facts. The default streams nothing, so a
    /// client that wraps another must forward this method too.
    fn stream(
        &self,
        request: LlmRequest<'_>,
        on_delta: &mut OnDelta<'_>,
    ) -> impl Future<Output = Result<LlmReply, LlmError>> + Send {
        let _ = on_delta;
        self.complete(request)
    }
}

/// A piece of a reply as it arrives: progress for observers, never a fact for the machine.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "text", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Delta {
    /// Text of the model's answer.
    Text(String),
    /// Reasoning the provider marks as such (Anthropic `thinking`, `reasoning_content` of the
    /// Chat Completions servers that stream it).
    Thinking(String),
}

/// Receives the deltas of one request, in order.
pub type OnDelta<'a> = dyn FnMut(Delta) + Send + 'a;

/// Why a model request failed. Messages never carry API keys.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The provider answered with an error status.
    #[error("the provider answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The provider's error message, without secrets.
        message: String,
    },
    /// The provider could not be reached, or the connection broke.
    #[error("could not reach the provider: {0}")]
    Transport(String),
    /// No answer within the request timeout.
    #[error("the provider did not answer within {secs} s")]
    Timeout {
        /// The timeout that ran out, in seconds.
        secs: u64,
    },
    /// The provider answered something that is not a valid response; what was wrong is
    /// typed, so an embedder tells "not JSON" from "no choices" without reading the message.
    #[error("the provider's answer is not valid: {0}")]
    InvalidResponse(ResponseFault),
    /// The reply went past a cap of the provider's reply limits (`ReplyLimits`, feature
    /// `providers`) and is refused whole.
    #[error(
        "the provider's reply is refused: it has more than {cap} {what}, the cap for one reply"
    )]
    ReplyTooLarge {
        /// What was counted: "tool calls", "content blocks", "stream events", "bytes of text"…
        what: &'static str,
        /// The cap it went past.
        cap: usize,
    },
    /// A streamed reply was still coming (keep-alives or slow pieces) at the whole-reply
    /// deadline; the partial reply is not used.
    #[error(
        "the provider's streamed reply did not complete within {secs} s, the deadline for a \
         whole reply; the partial reply is not used"
    )]
    ReplyDeadline {
        /// The deadline, in seconds.
        secs: u64,
    },
    /// Anything else, said plainly.
    #[error("{0}")]
    Other(String),
}

/// What was wrong with a provider's answer ([`LlmError::InvalidResponse`]): the peer's fault,
/// named. The texts it quotes from the answer are cut short.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseFault {
    /// The body does not parse as the dialect's answer (not JSON, or not its shape).
    #[error("not {expected}: {error}; the answer began: {began:?}")]
    Unparsable {
        /// What the body should have been: "a message", "a chat completion".
        expected: &'static str,
        /// The parser's error.
        error: String,
        /// The start of the body, cut short.
        began: String,
    },
    /// A streamed event is not what its dialect says it must be.
    #[error("{what} is not valid: {error}; it began: {began:?}")]
    InvalidEvent {
        /// Which event: "a stream chunk", "message_start"…
        what: &'static str,
        /// What is wrong with it.
        error: String,
        /// The start of the event's data, cut short.
        began: String,
    },
    /// The answer is the provider's own error report.
    #[error("the provider reported an error: {message}")]
    ProviderError {
        /// The provider's message, cut short.
        message: String,
    },
    /// The stream carried the provider's error report, mid-reply.
    #[error("the provider reported an error mid-stream: {message}")]
    ProviderErrorMidStream {
        /// The provider's message, cut short.
        message: String,
    },
    /// A Messages answer without content.
    #[error("the answer has no content")]
    NoContent,
    /// A Chat Completions answer without choices (and without an error).
    #[error("the answer has no choices")]
    NoChoices,
    /// A Chat Completions choice without a message.
    #[error("the answer's choice has no message")]
    ChoiceWithoutMessage,
    /// A Messages stream that ended without its `message_start`.
    #[error("the stream ended without a message_start")]
    NoMessageStart,
    /// The stream ended before the reply was complete.
    #[error("the stream ended before the reply was complete")]
    EndedIncomplete,
    /// An event-stream line went past its limit without ending.
    #[error("an event-stream line is longer than {max} bytes")]
    LineTooLong {
        /// The limit, in bytes.
        max: usize,
    },
    /// An event's data went past its limit.
    #[error("an event carries more than {max} bytes of data")]
    EventTooLarge {
        /// The limit, in bytes.
        max: usize,
    },
    /// A whole answer went past the body limit.
    #[error("the answer is {at_least} bytes or more, over the limit of {cap} bytes")]
    BodyTooLarge {
        /// How many bytes had come when the limit was passed, at least.
        at_least: u64,
        /// The limit, in bytes.
        cap: usize,
    },
    /// A streamed answer went past the body limit.
    #[error("the streamed answer is over the limit of {cap} bytes")]
    StreamTooLarge {
        /// The limit, in bytes.
        cap: usize,
    },
}
