//! The model providers (feature `providers`), implementations of
//! [`LlmClient`]: `openai` (Chat Completions) and `anthropic` (Messages),
//! configured by `LlmConfig` and wrapped in `AnyLlm` when the provider is chosen at run time.

pub mod anthropic;
mod assemble;
mod body;
pub mod config;
mod encode;
pub mod http;
pub mod limits;
pub mod openai;
pub mod stream;
mod turns;

pub use self::anthropic::Anthropic;
pub use self::config::{LlmConfig, Provider};
pub use self::http::{ApiKey, Endpoint, RetryPolicy};
pub use self::limits::ReplyLimits;
pub use self::openai::OpenAi;
pub use self::turns::HISTORY_CUT_NOTE;
use crate::machine::{LlmReply, LlmRequest, Media};
use crate::ports::{LlmClient, LlmError, OnDelta};

/// A reply as a dialect's parser read it: the reply the machine takes, and what only the
/// traces read of the answer.
#[derive(Debug)]
pub(crate) struct Parsed {
    /// The reply.
    pub(crate) reply: LlmReply,
    /// The model the answer says answered (`model` of either dialect), for the request's span
    /// (`gen_ai.response.model`); the machine and transcripts have no use for it.
    pub(crate) model: Option<String>,
}

/// A client of either provider, for when the provider is chosen at run time (the binary reads
/// it from `HOOKLOOP_PROVIDER`; see [`LlmConfig::client`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyLlm {
    /// Chat Completions.
    OpenAi(OpenAi),
    /// Messages.
    Anthropic(Anthropic),
}

impl AnyLlm {
    /// The provider's dialect.
    pub fn provider(&self) -> Provider {
        match self {
            Self::OpenAi(_) => Provider::OpenAi,
            Self::Anthropic(_) => Provider::Anthropic,
        }
    }

    /// The model requests name.
    pub fn model(&self) -> &str {
        match self {
            Self::OpenAi(client) => client.model(),
            Self::Anthropic(client) => client.model(),
        }
    }

    /// The URL requests go to.
    pub fn url(&self) -> &str {
        match self {
            Self::OpenAi(client) => client.url(),
            Self::Anthropic(client) => client.url(),
        }
    }
}

impl LlmClient for AnyLlm {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        match self {
            Self::OpenAi(client) => client.complete(request).await,
            Self::Anthropic(client) => client.complete(request).await,
        }
    }

    fn media(&self) -> Media {
        match self {
            Self::OpenAi(client) => client.media(),
            Self::Anthropic(client) => client.media(),
        }
    }

    fn model_name(&self) -> Option<(&str, &str)> {
        match self {
            Self::OpenAi(client) => client.model_name(),
            Self::Anthropic(client) => client.model_name(),
        }
    }

    async fn stream(
        &self,
        request: LlmRequest<'_>,
        on_delta: &mut OnDelta<'_>,
    ) -> Result<LlmReply, LlmError> {
        match self {
            Self::OpenAi(client) => client.stream(request, on_delta).await,
            Self::Anthropic(client) => client.stream(request, on_delta).await,
        }
    }
}
