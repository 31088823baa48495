//! Which provider to call and how: [`LlmConfig`], read from the environment by the binary or
//! built by an embedder, and turned into a client by [`LlmConfig::client`].
//!
//! The context window and output reserve (`HOOKLOOP_MAX_CONTEXT_TOKENS`,
//! `HOOKLOOP_MAX_OUTPUT_TOKENS`) and the system prompt (`HOOKLOOP_SYSTEM_PROMPT`,
//! `HOOKLOOP_SYSTEM_PROMPT_FILE`) are the machine's and live in [`Config`](crate::Config): the
//! machine accounts for them and puts them in every request.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::config::ConfigError;
use crate::llm::AnyLlm;
use crate::llm::anthropic::{self, Anthropic};
use crate::llm::http::{ApiKey, Endpoint, RetryPolicy, parse_base_url};
use crate::llm::openai::{self, MaxTokensField, OpenAi};
use crate::ports::LlmError;

/// The most retries `HOOKLOOP_LLM_MAX_RETRIES` may ask for.
pub const MAX_RETRIES_LIMIT: u32 = 10;

/// The names of the variables [`LlmConfig::from_env`] reads.
pub mod vars {
    /// `openai` or `anthropic`.
    pub const PROVIDER: &str = "HOOKLOOP_PROVIDER";
    /// The model name.
    pub const MODEL: &str = "HOOKLOOP_MODEL";
    /// The OpenAI key.
    pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
    /// The Chat Completions base URL.
    pub const OPENAI_BASE_URL: &str = "OPENAI_BASE_URL";
    /// Which field carries the output limit in Chat Completions requests.
    pub const OPENAI_MAX_TOKENS_FIELD: &str = "HOOKLOOP_OPENAI_MAX_TOKENS_FIELD";
    /// The Anthropic key.
    pub const ANTHROPIC_API_KEY: &str = "ANTHROPIC_API_KEY";
    /// The Messages base URL.
    pub const ANTHROPIC_BASE_URL: &str = "ANTHROPIC_BASE_URL";
    /// Whether Messages requests mark cache breakpoints.
    pub const ANTHROPIC_PROMPT_CACHING: &str = "HOOKLOOP_ANTHROPIC_PROMPT_CACHING";
    /// Each request attempt's timeout when not streamed, in seconds.
    pub const TIMEOUT_SECS: &str = "HOOKLOOP_LLM_TIMEOUT_SECS";
    /// Retries on 408, 429, 5xx and connection errors.
    pub const MAX_RETRIES: &str = "HOOKLOOP_LLM_MAX_RETRIES";
    /// `0` asks for whole replies instead of streamed ones.
    pub const STREAM: &str = "HOOKLOOP_STREAM";
    /// Streamed: the longest silence between two pieces, in seconds.
    pub const IDLE_TIMEOUT_SECS: &str = "HOOKLOOP_LLM_IDLE_TIMEOUT_SECS";
    /// Streamed: the deadline for a whole reply, in seconds.
    pub const REPLY_TIMEOUT_SECS: &str = "HOOKLOOP_LLM_REPLY_TIMEOUT_SECS";
    /// The most tool calls one reply may carry; a reply with more is refused.
    pub const MAX_TOOL_CALLS: &str = "HOOKLOOP_LLM_MAX_TOOL_CALLS";
}

/// A model provider's dialect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// Chat Completions: OpenAI and every server that speaks its dialect.
    #[default]
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

impl Provider {
    /// The name used in `HOOKLOOP_PROVIDER`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => openai::NAME,
            Self::Anthropic => anthropic::NAME,
        }
    }

    /// The base URL used when none is configured.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::OpenAi => openai::DEFAULT_BASE_URL,
            Self::Anthropic => anthropic::DEFAULT_BASE_URL,
        }
    }

    fn key_var(self) -> &'static str {
        match self {
            Self::OpenAi => vars::OPENAI_API_KEY,
            Self::Anthropic => vars::ANTHROPIC_API_KEY,
        }
    }

    fn base_url_var(self) -> &'static str {
        match self {
            Self::OpenAi => vars::OPENAI_BASE_URL,
            Self::Anthropic => vars::ANTHROPIC_BASE_URL,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" => Ok(Self::OpenAi),
            "anthropic" => Ok(Self::Anthropic),
            _ => Err("expected openai or anthropic".into()),
        }
    }
}

/// Which provider, which model, and how to reach it.
#[derive(Clone, Debug)]
pub struct LlmConfig {
    /// The dialect to speak.
    pub provider: Provider,
    /// The model name the server knows.
    pub model: String,
    /// Where the server is, the key, the timeout and the retries.
    pub endpoint: Endpoint,
    /// Chat Completions only: where the output limit goes; `None` picks by the base URL
    /// ([`MaxTokensField::default_for`]).
    pub max_tokens_field: Option<MaxTokensField>,
    /// Messages only: mark the last block of each request as a prompt-cache breakpoint.
    pub prompt_caching: bool,
}

impl LlmConfig {
    /// A configuration for `model` of `provider` at its default base URL, with no key.
    pub fn new(provider: Provider, model: impl Into<String>) -> Self {
        let url = parse_base_url(provider.default_base_url())
            // The defaults are constants checked by a unit test.
            .unwrap_or_else(|e| unreachable!("default base URL: {e}"));
        Self {
            provider,
            model: model.into(),
            endpoint: Endpoint::new(url),
            max_tokens_field: None,
            prompt_caching: true,
        }
    }

    /// Reads the process environment. See [`from_lookup`](Self::from_lookup).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(crate::config::env_lookup)
    }

    /// Reads the variables through `lookup` (a value, `None` when unset, or an error):
    ///
    /// | variable | default | meaning |
    /// |---|---|---|
    /// | `HOOKLOOP_PROVIDER` | `openai` | `openai` (Chat Completions) or `anthropic` (Messages) |
    /// | `HOOKLOOP_MODEL` | required | the model name the provider knows |
    /// | `OPENAI_API_KEY` | required for the default base URL | sent as a bearer token |
    /// | `OPENAI_BASE_URL` | `https://api.openai.com/v1` | any Chat Completions server |
    /// | `HOOKLOOP_OPENAI_MAX_TOKENS_FIELD` | by host | `max_completion_tokens` for api.openai.com, else `max_tokens` |
    /// | `ANTHROPIC_API_KEY` | required for the default base URL | sent as `x-api-key` |
    /// | `ANTHROPIC_BASE_URL` | `https://api.anthropic.com` | any Messages server |
    /// | `HOOKLOOP_ANTHROPIC_PROMPT_CACHING` | `true` | `false` drops the cache breakpoint |
    /// | `HOOKLOOP_LLM_TIMEOUT_SECS` | 120 | per attempt not streamed, from sending to the last byte, at least 1 |
    /// | `HOOKLOOP_LLM_MAX_RETRIES` | 3 | retries on 408, 429, 5xx and connection failures, at most 10 |
    /// | `HOOKLOOP_STREAM` | `1` | `0` asks for whole replies instead of streamed ones |
    /// | `HOOKLOOP_LLM_IDLE_TIMEOUT_SECS` | 60 | streamed: the longest silence between two pieces, at least 1 |
    /// | `HOOKLOOP_LLM_REPLY_TIMEOUT_SECS` | 1800 | streamed: from sending to the reply's end, keep-alives included, at least 1 |
    /// | `HOOKLOOP_LLM_MAX_TOOL_CALLS` | 64 | tool calls one reply may hold; a reply with more is refused, at least 1 |
    ///
    /// The other caps on one reply ([`ReplyLimits`](crate::llm::ReplyLimits)) are set through
    /// [`Endpoint::limits`].
    ///
    /// A key is optional when the base URL is not the provider's own, since local servers
    /// (Ollama, llama.cpp, vLLM) usually need none; an empty key counts as unset.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Result<Option<String>, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let provider = match lookup(vars::PROVIDER)? {
            None => Provider::default(),
            Some(value) => value.parse().map_err(|reason| ConfigError::Invalid {
                var: vars::PROVIDER,
                value: value.clone(),
                reason,
            })?,
        };
        let model = lookup(vars::MODEL)?.ok_or(ConfigError::Missing {
            var: vars::MODEL,
            reason: format!("name the {provider} model to use"),
        })?;
        let model = model.trim();
        if model.is_empty() {
            return Err(ConfigError::Invalid {
                var: vars::MODEL,
                value: model.to_owned(),
                reason: "must not be empty".into(),
            });
        }
        let mut config = Self::new(provider, model);

        let url_var = provider.base_url_var();
        if let Some(value) = lookup(url_var)? {
            config.endpoint.base_url =
                parse_base_url(&value).map_err(|e| ConfigError::Invalid {
                    var: url_var,
                    value: value.clone(),
                    reason: match e {
                        LlmError::Other(reason) => reason,
                        other => other.to_string(),
                    },
                })?;
        }
        let custom_url =
            config.endpoint.base_url.as_str().trim_end_matches('/') != provider.default_base_url();

        let key_var = provider.key_var();
        match lookup(key_var)?.filter(|key| !key.trim().is_empty()) {
            Some(key) => config.endpoint.api_key = Some(ApiKey::new(key.trim())),
            None if custom_url => {}
            None => {
                return Err(ConfigError::Missing {
                    var: key_var,
                    reason: format!(
                        "the {provider} API at {} needs a key",
                        provider.default_base_url()
                    ),
                });
            }
        }

        if let Some(secs) = crate::config::parse_number::<u64>(&lookup, vars::TIMEOUT_SECS, 1)? {
            config.endpoint.timeout = Duration::from_secs(secs);
        }
        if let Some(max_retries) =
            crate::config::parse_number::<u32>(&lookup, vars::MAX_RETRIES, 0)?
        {
            // Each retry may wait for the provider's `retry-after` and a whole attempt: a
            // large count turns one failing request into hours of waiting.
            if max_retries > MAX_RETRIES_LIMIT {
                return Err(ConfigError::Invalid {
                    var: vars::MAX_RETRIES,
                    value: max_retries.to_string(),
                    reason: format!("must be at most {MAX_RETRIES_LIMIT}"),
                });
            }
            config.endpoint.retry = RetryPolicy {
                max_retries,
                ..config.endpoint.retry
            };
        }
        if let Some(value) = lookup(vars::STREAM)? {
            config.endpoint.stream = parse_switch(vars::STREAM, value)?;
        }
        if let Some(secs) = crate::config::parse_number::<u64>(&lookup, vars::IDLE_TIMEOUT_SECS, 1)?
        {
            config.endpoint.idle_timeout = Duration::from_secs(secs);
        }
        if let Some(secs) =
            crate::config::parse_number::<u64>(&lookup, vars::REPLY_TIMEOUT_SECS, 1)?
        {
            config.endpoint.reply_timeout = Duration::from_secs(secs);
        }
        if let Some(calls) = crate::config::parse_number::<usize>(&lookup, vars::MAX_TOOL_CALLS, 1)?
        {
            config.endpoint.limits.max_tool_calls = calls;
        }
        // Both are checked whatever the provider, like every other variable: a typo must not
        // wait for the day the provider changes to be found.
        if let Some(value) = lookup(vars::OPENAI_MAX_TOKENS_FIELD)? {
            let field = value.parse().map_err(|reason| ConfigError::Invalid {
                var: vars::OPENAI_MAX_TOKENS_FIELD,
                value: value.clone(),
                reason,
            })?;
            if provider == Provider::OpenAi {
                config.max_tokens_field = Some(field);
            }
        }
        if let Some(value) = lookup(vars::ANTHROPIC_PROMPT_CACHING)? {
            let caching = parse_switch(vars::ANTHROPIC_PROMPT_CACHING, value)?;
            if provider == Provider::Anthropic {
                config.prompt_caching = caching;
            }
        }
        Ok(config)
    }

    /// A client of the configured provider.
    pub fn client(&self) -> Result<AnyLlm, LlmError> {
        Ok(match self.provider {
            Provider::OpenAi => {
                let client = OpenAi::new(self.model.clone(), &self.endpoint)?;
                AnyLlm::OpenAi(match self.max_tokens_field {
                    Some(field) => client.with_max_tokens_field(field),
                    None => client,
                })
            }
            Provider::Anthropic => AnyLlm::Anthropic(
                Anthropic::new(self.model.clone(), &self.endpoint)?
                    .with_prompt_caching(self.prompt_caching),
            ),
        })
    }
}

/// An on/off setting: `true`/`1`/`on`/`yes` or `false`/`0`/`off`/`no`.
fn parse_switch(var: &'static str, value: String) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(ConfigError::Invalid {
            var,
            value,
            reason: "expected true or false".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<LlmConfig, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        LlmConfig::from_lookup(|var| Ok(map.get(var).cloned()))
    }

    #[test]
    fn defaults_are_openai_at_its_own_url() {
        let config = from(&[("HOOKLOOP_MODEL", "gpt-x"), ("OPENAI_API_KEY", "sk-1")]).unwrap();
        assert_eq!(config.provider, Provider::OpenAi);
        assert_eq!(config.model, "gpt-x");
        assert_eq!(
            config.endpoint.base_url.as_str(),
            "https://api.openai.com/v1"
        );
        assert_eq!(config.endpoint.timeout, Duration::from_secs(120));
        assert_eq!(config.endpoint.retry.max_retries, 3);
        assert_eq!(config.endpoint.api_key, Some(ApiKey::new("sk-1")));
        assert_eq!(config.max_tokens_field, None);
        assert!(config.endpoint.stream);
        assert_eq!(config.endpoint.first_byte_timeout, Duration::from_secs(60));
        assert_eq!(config.endpoint.idle_timeout, Duration::from_secs(60));
        assert_eq!(config.endpoint.reply_timeout, Duration::from_secs(1800));
        assert_eq!(config.endpoint.limits.max_tool_calls, 64);
        let client = config.client().unwrap();
        assert!(matches!(client, AnyLlm::OpenAi(_)));
    }

    #[test]
    fn the_reply_deadline_and_the_cap_on_tool_calls_can_be_set_but_not_to_zero() {
        let base = [("HOOKLOOP_MODEL", "m"), ("OPENAI_API_KEY", "k")];
        let config = from(&[
            base[0],
            base[1],
            ("HOOKLOOP_LLM_REPLY_TIMEOUT_SECS", "90"),
            ("HOOKLOOP_LLM_MAX_TOOL_CALLS", "500"),
        ])
        .unwrap();
        assert_eq!(config.endpoint.reply_timeout, Duration::from_secs(90));
        assert_eq!(config.endpoint.limits.max_tool_calls, 500);
        for var in [
            "HOOKLOOP_LLM_REPLY_TIMEOUT_SECS",
            "HOOKLOOP_LLM_MAX_TOOL_CALLS",
        ] {
            let err = from(&[base[0], base[1], (var, "0")])
                .unwrap_err()
                .to_string();
            assert!(err.contains(var) && err.contains("at least 1"), "{err}");
        }
    }

    #[test]
    fn streaming_can_be_turned_off_and_its_idle_timeout_set() {
        let base = [("HOOKLOOP_MODEL", "m"), ("OPENAI_API_KEY", "k")];
        let config = from(&[
            base[0],
            base[1],
            ("HOOKLOOP_STREAM", "0"),
            ("HOOKLOOP_LLM_IDLE_TIMEOUT_SECS", "5"),
        ])
        .unwrap();
        assert!(!config.endpoint.stream);
        assert_eq!(config.endpoint.idle_timeout, Duration::from_secs(5));
        for (var, value) in [
            ("HOOKLOOP_STREAM", "maybe"),
            ("HOOKLOOP_LLM_IDLE_TIMEOUT_SECS", "0"),
        ] {
            let err = from(&[base[0], base[1], (var, value)])
                .unwrap_err()
                .to_string();
            assert!(err.contains(var), "{err}");
        }
    }

    #[test]
    fn anthropic_reads_its_own_variables() {
        let config = from(&[
            ("HOOKLOOP_PROVIDER", " Anthropic "),
            ("HOOKLOOP_MODEL", "claude-x"),
            ("ANTHROPIC_API_KEY", "k"),
            ("OPENAI_BASE_URL", "not read"),
            ("HOOKLOOP_LLM_TIMEOUT_SECS", "30"),
            ("HOOKLOOP_LLM_MAX_RETRIES", "0"),
            ("HOOKLOOP_ANTHROPIC_PROMPT_CACHING", "off"),
        ])
        .unwrap();
        assert_eq!(config.provider, Provider::Anthropic);
        assert!(!config.prompt_caching);
        assert_eq!(
            config.endpoint.base_url.as_str(),
            "https://api.anthropic.com/"
        );
        assert_eq!(config.endpoint.timeout, Duration::from_secs(30));
        assert_eq!(config.endpoint.retry.max_retries, 0);
        match config.client().unwrap() {
            AnyLlm::Anthropic(client) => {
                assert_eq!(client.url(), "https://api.anthropic.com/v1/messages");
                assert!(!client.prompt_caching());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_key_is_optional_for_a_server_of_ones_own() {
        let config = from(&[
            ("HOOKLOOP_MODEL", "llama3"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
            ("OPENAI_API_KEY", ""),
            ("HOOKLOOP_OPENAI_MAX_TOKENS_FIELD", "max_completion_tokens"),
        ])
        .unwrap();
        assert_eq!(config.endpoint.api_key, None);
        assert_eq!(
            config.max_tokens_field,
            Some(MaxTokensField::MaxCompletionTokens)
        );
        match config.client().unwrap() {
            AnyLlm::OpenAi(client) => {
                assert_eq!(client.url(), "http://127.0.0.1:11434/v1/chat/completions");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missing_keys_and_models_name_the_variable() {
        let err = from(&[("HOOKLOOP_MODEL", "m")]).unwrap_err();
        assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
        let err = from(&[("HOOKLOOP_PROVIDER", "anthropic"), ("HOOKLOOP_MODEL", "m")]).unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");
        let err = from(&[("OPENAI_API_KEY", "k")]).unwrap_err();
        assert!(err.to_string().contains("HOOKLOOP_MODEL"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_variable_and_the_value() {
        let base = [("HOOKLOOP_MODEL", "m"), ("OPENAI_API_KEY", "k")];
        let cases = [
            ("HOOKLOOP_PROVIDER", "gemini"),
            ("HOOKLOOP_MODEL", " "),
            ("OPENAI_BASE_URL", "ftp://x"),
            ("OPENAI_BASE_URL", "localhost:8080"),
            ("HOOKLOOP_LLM_TIMEOUT_SECS", "0"),
            ("HOOKLOOP_LLM_TIMEOUT_SECS", "1.5"),
            ("HOOKLOOP_LLM_MAX_RETRIES", "-1"),
            ("HOOKLOOP_LLM_MAX_RETRIES", "99999999999"),
            ("HOOKLOOP_OPENAI_MAX_TOKENS_FIELD", "n_predict"),
        ];
        let anthropic = [
            ("HOOKLOOP_PROVIDER", "anthropic"),
            ("HOOKLOOP_MODEL", "m"),
            ("ANTHROPIC_API_KEY", "k"),
            ("HOOKLOOP_ANTHROPIC_PROMPT_CACHING", "sometimes"),
        ];
        let err = from(&anthropic).unwrap_err().to_string();
        assert!(err.contains("HOOKLOOP_ANTHROPIC_PROMPT_CACHING"), "{err}");
        assert!(err.contains("\"sometimes\""), "{err}");
        for (var, value) in cases {
            let mut pairs = base.to_vec();
            pairs.retain(|(k, _)| *k != var);
            pairs.push((var, value));
            let err = from(&pairs).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(var), "{text}");
            assert!(text.contains(&format!("{:?}", value.trim())), "{text}");
        }
    }

    #[test]
    fn retries_are_capped() {
        let base = [("HOOKLOOP_MODEL", "m"), ("OPENAI_API_KEY", "k")];
        let mut pairs = base.to_vec();
        pairs.push(("HOOKLOOP_LLM_MAX_RETRIES", "10"));
        assert_eq!(from(&pairs).unwrap().endpoint.retry.max_retries, 10);
        let mut pairs = base.to_vec();
        pairs.push(("HOOKLOOP_LLM_MAX_RETRIES", "11"));
        let err = from(&pairs).unwrap_err().to_string();
        assert!(
            err.contains("HOOKLOOP_LLM_MAX_RETRIES") && err.contains("at most 10"),
            "{err}"
        );
    }

    #[test]
    fn provider_specific_variables_are_checked_whatever_the_provider() {
        let openai = [
            ("HOOKLOOP_MODEL", "m"),
            ("OPENAI_API_KEY", "k"),
            ("HOOKLOOP_ANTHROPIC_PROMPT_CACHING", "sometimes"),
        ];
        let err = from(&openai).unwrap_err().to_string();
        assert!(err.contains("HOOKLOOP_ANTHROPIC_PROMPT_CACHING"), "{err}");
        let anthropic = [
            ("HOOKLOOP_PROVIDER", "anthropic"),
            ("HOOKLOOP_MODEL", "m"),
            ("ANTHROPIC_API_KEY", "k"),
            ("HOOKLOOP_OPENAI_MAX_TOKENS_FIELD", "n_predict"),
        ];
        let err = from(&anthropic).unwrap_err().to_string();
        assert!(err.contains("HOOKLOOP_OPENAI_MAX_TOKENS_FIELD"), "{err}");
    }

    #[test]
    fn keys_never_show_in_errors_or_debug_output() {
        let config = from(&[("HOOKLOOP_MODEL", "m"), ("OPENAI_API_KEY", "sk-secret")]).unwrap();
        assert!(!format!("{config:?}").contains("sk-secret"));
        assert!(!format!("{:?}", config.client().unwrap()).contains("sk-secret"));
    }
}
