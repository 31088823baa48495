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
    /// The provider answered something that is not a valid response.
    #[error("the provider's answer is not valid: {0}")]
    InvalidResponse(String),
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
