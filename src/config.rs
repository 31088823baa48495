//! Configuration: a builder for embedders, and [`Config::from_env`] for the binary.
//!
//! The spec's variables keep their names (`MCP_HOOK_SERVERS`, `SPROUT_AGENT_HOOK_TIMEOUT_MS`,
//! `SPROUT_AGENT_STOP_MAX_REJECTIONS`); the engine's own use the `HOOKLOOP_` prefix. An invalid
//! value is an error that names the variable and the value, never silently the default.

use std::time::Duration;

use crate::hooks::HookServers;
use crate::machine::{Policy, Subagents};

/// Everything a [`Session`](crate::Session) needs besides its two injected traits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    policy: Policy,
    system_prompt: Option<String>,
    tool_concurrency: usize,
}

impl Config {
    /// Tool calls of one reply that run at once, by default.
    pub const DEFAULT_TOOL_CONCURRENCY: usize = 8;

    /// A builder starting from the defaults.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            config: Self::default(),
        }
    }

    /// Reads the process environment. See [`from_lookup`](Self::from_lookup).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(env_lookup)
    }

    /// Reads the variables through `lookup`, which answers a variable's value, `None` when it is
    /// unset, or an error of its own:
    ///
    /// | variable | default | meaning |
    /// |---|---|---|
    /// | `MCP_HOOK_SERVERS` | unset: hooks off | a lone `*` for every server, or a comma list of server names |
    /// | `SPROUT_AGENT_HOOK_TIMEOUT_MS` | 2500 | per hook call, at least 1 |
    /// | `SPROUT_AGENT_STOP_MAX_REJECTIONS` | 3 | `_Stop` objections per session; 0 disables `_Stop` |
    /// | `HOOKLOOP_MAX_ROUNDS` | 0 | model requests per prompt; 0 = unlimited |
    /// | `HOOKLOOP_TOOL_CONCURRENCY` | 8 | tool calls of one reply run at once, at least 1 |
    /// | `HOOKLOOP_MAX_CONTEXT_TOKENS` | 200000 | the model's context window |
    /// | `HOOKLOOP_MAX_OUTPUT_TOKENS` | 8192 | reserved for output; must be below the window |
    /// | `HOOKLOOP_SYSTEM_PROMPT` | none | the system prompt |
    /// | `HOOKLOOP_SYSTEM_PROMPT_FILE` | none | a file holding it (UTF-8); not with the above |
    /// | `HOOKLOOP_SUBAGENTS` | 0 | N > 0 offers the model the `agent` tool, at most N subagents at once; 0 = off |
    ///
    /// The model provider's own variables are read by
    /// [`LlmConfig::from_lookup`](crate::llm::LlmConfig::from_lookup).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Result<Option<String>, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let mut builder = Self::builder();
        let hook_servers = lookup(vars::HOOK_SERVERS)?;
        let hook_servers =
            HookServers::parse(hook_servers.as_deref()).map_err(|error| ConfigError::Invalid {
                var: vars::HOOK_SERVERS,
                value: hook_servers.clone().unwrap_or_default(),
                reason: error.to_string(),
            })?;
        builder = builder.hook_servers(hook_servers);
        if let Some(ms) = parse_number::<u64>(&lookup, vars::HOOK_TIMEOUT_MS, 1)? {
            builder = builder.hook_timeout(Duration::from_millis(ms));
        }
        if let Some(n) = parse_number::<u32>(&lookup, vars::STOP_MAX_REJECTIONS, 0)? {
            builder = builder.stop_max_rejections(n);
        }
        if let Some(n) = parse_number::<u32>(&lookup, vars::MAX_ROUNDS, 0)? {
            builder = builder.max_rounds(n);
        }
        if let Some(n) = parse_number::<usize>(&lookup, vars::TOOL_CONCURRENCY, 1)? {
            builder = builder.tool_concurrency(n);
        }
        if let Some(n) = parse_number::<u32>(&lookup, vars::SUBAGENTS, 0)?
            && n > 0
        {
            builder = builder.subagents(Subagents::new(n));
        }
        let context = parse_number::<u64>(&lookup, vars::MAX_CONTEXT_TOKENS, 1)?;
        let output = parse_number::<u32>(&lookup, vars::MAX_OUTPUT_TOKENS, 1)?;
        let context = context.unwrap_or(Policy::DEFAULT_MAX_CONTEXT_TOKENS);
        let output = output.unwrap_or(Policy::DEFAULT_MAX_OUTPUT_TOKENS);
        if context <= u64::from(output) {
            return Err(ConfigError::Invalid {
                var: vars::MAX_CONTEXT_TOKENS,
                value: context.to_string(),
                reason: format!("must exceed {} ({output})", vars::MAX_OUTPUT_TOKENS),
            });
        }
        if let Some(prompt) = read_system_prompt(&lookup)? {
            builder = builder.system_prompt(prompt);
        }
        builder.context_window(context, output).build()
    }

    /// A builder starting from this configuration.
    pub fn into_builder(self) -> ConfigBuilder {
        ConfigBuilder { config: self }
    }

    /// The rules the machine enforces.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The system prompt, if any.
    pub fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }

    /// How many tool calls of one reply run at once.
    pub fn tool_concurrency(&self) -> usize {
        self.tool_concurrency
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            policy: Policy::default(),
            system_prompt: None,
            tool_concurrency: Self::DEFAULT_TOOL_CONCURRENCY,
        }
    }
}

/// Builds a [`Config`]; [`build`](Self::build) checks it.
#[derive(Clone, Debug)]
#[must_use]
pub struct ConfigBuilder {
    config: Config,
}

impl ConfigBuilder {
    /// Whether the user is asked before a call of a tool its server marks destructive runs,
    /// through the session's [`PermissionAsker`](crate::PermissionAsker). Turn it on only in a
    /// front end that can ask. Default: off.
    pub fn ask_permission(mut self, ask: bool) -> Self {
        self.config.policy.ask_permission = ask;
        self
    }

    /// Whether hook calls carry the details hooks written for other hosts read
    /// ([`Policy::hook_details`](crate::Policy::hook_details)). Default: off.
    pub fn hook_details(mut self, on: bool) -> Self {
        self.config.policy.hook_details = on;
        self
    }

    /// Servers whose hooks run. Default: none.
    pub fn hook_servers(mut self, servers: HookServers) -> Self {
        self.config.policy.hook_servers = servers;
        self
    }

    /// Per hook call. Default: 2.5 s. At least 1 ms.
    pub fn hook_timeout(mut self, timeout: Duration) -> Self {
        self.config.policy.hook_timeout_ms = crate::millis::of(timeout);
        self
    }

    /// `_Stop` objections allowed per session. Default: 3; 0 disables `_Stop`.
    pub fn stop_max_rejections(mut self, n: u32) -> Self {
        self.config.policy.stop_max_rejections = n;
        self
    }

    /// Model requests per prompt. Default: 0, unlimited.
    pub fn max_rounds(mut self, n: u32) -> Self {
        self.config.policy.max_rounds = n;
        self
    }

    /// The model's context window and the part of it reserved for output, in tokens.
    pub fn context_window(mut self, max_context_tokens: u64, max_output_tokens: u32) -> Self {
        self.config.policy.max_context_tokens = max_context_tokens;
        self.config.policy.max_output_tokens = max_output_tokens;
        self
    }

    /// The system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.config.system_prompt = Some(prompt.into());
        self
    }

    /// Tool calls of one reply that run at once. Default: 8. At least 1.
    pub fn tool_concurrency(mut self, n: usize) -> Self {
        self.config.tool_concurrency = n;
        self
    }

    /// Turns subagents on: the model is offered the built-in `agent` tool, and at most
    /// `settings.concurrency` of its calls in one reply run, at once, each a subagent with its
    /// own history, round cap and objection budget, nesting at most `settings.max_depth` deep.
    pub fn subagents(mut self, settings: Subagents) -> Self {
        self.config.policy.subagents = Some(settings);
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<Config, ConfigError> {
        let config = self.config;
        let policy = &config.policy;
        if policy.hook_timeout_ms == 0 {
            return Err(ConfigError::Builder(
                "the hook timeout must be at least 1 ms".into(),
            ));
        }
        if let Some(settings) = policy.subagents
            && (settings.concurrency == 0 || settings.max_depth == 0)
        {
            return Err(ConfigError::Builder(
                "subagent concurrency and depth must be at least 1".into(),
            ));
        }
        if config.tool_concurrency == 0 {
            return Err(ConfigError::Builder(
                "tool concurrency must be at least 1".into(),
            ));
        }
        if policy.max_context_tokens <= u64::from(policy.max_output_tokens) {
            return Err(ConfigError::Builder(format!(
                "the context window ({}) must exceed the output reserve ({})",
                policy.max_context_tokens, policy.max_output_tokens
            )));
        }
        Ok(config)
    }
}

/// Reads one variable of the process environment, for the `from_lookup` constructors: its
/// value, `None` when unset, or an error naming it when it is not UTF-8.
pub fn env_lookup(var: &str) -> Result<Option<String>, ConfigError> {
    match std::env::var(var) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::NotUnicode {
            var: var.to_owned(),
        }),
    }
}

/// The names of the variables [`Config::from_env`] reads.
pub mod vars {
    /// Which servers' hooks run: unset = none, `*` = all, or a comma-separated list.
    pub const HOOK_SERVERS: &str = "MCP_HOOK_SERVERS";
    /// Each hook call's timeout, in ms.
    pub const HOOK_TIMEOUT_MS: &str = "SPROUT_AGENT_HOOK_TIMEOUT_MS";
    /// `_Stop` objections per session.
    pub const STOP_MAX_REJECTIONS: &str = "SPROUT_AGENT_STOP_MAX_REJECTIONS";
    /// Model requests per prompt; 0 = unlimited.
    pub const MAX_ROUNDS: &str = "HOOKLOOP_MAX_ROUNDS";
    /// Tool calls of one reply run at once.
    pub const TOOL_CONCURRENCY: &str = "HOOKLOOP_TOOL_CONCURRENCY";
    /// The model's context window, in tokens.
    pub const MAX_CONTEXT_TOKENS: &str = "HOOKLOOP_MAX_CONTEXT_TOKENS";
    /// Tokens reserved for the model's output.
    pub const MAX_OUTPUT_TOKENS: &str = "HOOKLOOP_MAX_OUTPUT_TOKENS";
    /// The system prompt.
    pub const SYSTEM_PROMPT: &str = "HOOKLOOP_SYSTEM_PROMPT";
    /// A file holding the system prompt.
    pub const SYSTEM_PROMPT_FILE: &str = "HOOKLOOP_SYSTEM_PROMPT_FILE";
    /// Subagents: at most this many children at once; `0` or unset turns them off.
    pub const SUBAGENTS: &str = "HOOKLOOP_SUBAGENTS";
}

/// A configuration the engine cannot run with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A variable has a value the engine cannot use.
    #[error("{var}={value:?} is invalid: {reason}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A variable the configuration needs is not set.
    #[error("{var} is not set: {reason}")]
    Missing {
        /// The variable.
        var: &'static str,
        /// Why it is needed.
        reason: String,
    },
    /// A variable's value is not UTF-8.
    #[error("{var} is not valid UTF-8")]
    NotUnicode {
        /// The variable.
        var: String,
    },
    /// The builder was given settings that do not fit together.
    #[error("invalid configuration: {0}")]
    Builder(String),
}

/// Reads a whole number of at least `min` from `var`; an error names the variable and value.
pub(crate) fn parse_number<T>(
    lookup: &impl Fn(&str) -> Result<Option<String>, ConfigError>,
    var: &'static str,
    min: T,
) -> Result<Option<T>, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let Some(value) = lookup(var)? else {
        return Ok(None);
    };
    let invalid = |reason: String| ConfigError::Invalid {
        var,
        value: value.clone(),
        reason,
    };
    let number: T = value
        .trim()
        .parse()
        .map_err(|_| invalid(format!("expected a whole number, at least {min}")))?;
    if number < min {
        return Err(invalid(format!("must be at least {min}")));
    }
    Ok(Some(number))
}

// --- The system prompt (read here because the machine owns it and accounts for its size). ---

/// The system prompt from `HOOKLOOP_SYSTEM_PROMPT` or the file `HOOKLOOP_SYSTEM_PROMPT_FILE`
/// names; setting both is an error, since one would silently win.
fn read_system_prompt(
    lookup: &impl Fn(&str) -> Result<Option<String>, ConfigError>,
) -> Result<Option<String>, ConfigError> {
    let inline = lookup(vars::SYSTEM_PROMPT)?;
    let Some(path) = lookup(vars::SYSTEM_PROMPT_FILE)? else {
        return Ok(inline);
    };
    if inline.is_some() {
        return Err(ConfigError::Invalid {
            var: vars::SYSTEM_PROMPT_FILE,
            value: path,
            reason: format!("set {} or this, not both", vars::SYSTEM_PROMPT),
        });
    }
    std::fs::read_to_string(&path)
        .map(Some)
        .map_err(|e| ConfigError::Invalid {
            var: vars::SYSTEM_PROMPT_FILE,
            value: path.clone(),
            reason: format!("cannot read the file: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::hooks::ServerName;

    fn from(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|var| Ok(map.get(var).cloned()))
    }

    #[test]
    fn defaults_are_the_spec_defaults() {
        let config = from(&[]).unwrap();
        assert_eq!(config.policy().hook_servers, HookServers::Off);
        assert_eq!(config.policy().hook_timeout_ms, 2500);
        assert_eq!(config.policy().stop_max_rejections, 3);
        assert_eq!(config.policy().max_rounds, 0);
        assert_eq!(config.tool_concurrency(), 8);
        assert_eq!(config, Config::default());
    }

    #[test]
    fn hook_servers_are_read_from_mcp_hook_servers() {
        assert_eq!(
            from(&[("MCP_HOOK_SERVERS", "*")])
                .unwrap()
                .policy()
                .hook_servers,
            HookServers::All
        );
        assert_eq!(
            from(&[("MCP_HOOK_SERVERS", " a, ,b ")])
                .unwrap()
                .policy()
                .hook_servers,
            HookServers::Named(vec![
                ServerName::new("a").unwrap(),
                ServerName::new("b").unwrap()
            ])
        );
        assert_eq!(
            from(&[("MCP_HOOK_SERVERS", ",")])
                .unwrap()
                .policy()
                .hook_servers,
            HookServers::Off
        );
    }

    #[test]
    fn a_hook_servers_entry_that_can_never_match_is_an_error_naming_the_variable_and_entry() {
        for (value, entry) in [
            ("*,todo", "\"*\""),
            ("todo,a b", "\"a b\""),
            ("todo_", "\"todo_\""),
        ] {
            let err = from(&[("MCP_HOOK_SERVERS", value)]).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("MCP_HOOK_SERVERS"), "{text}");
            assert!(text.contains(&format!("entry {entry}")), "{text}");
        }
    }

    #[test]
    fn numbers_are_read_and_trimmed() {
        let config = from(&[
            ("SPROUT_AGENT_HOOK_TIMEOUT_MS", " 100 "),
            ("SPROUT_AGENT_STOP_MAX_REJECTIONS", "0"),
            ("HOOKLOOP_MAX_ROUNDS", "7"),
            ("HOOKLOOP_TOOL_CONCURRENCY", "2"),
            ("HOOKLOOP_MAX_CONTEXT_TOKENS", "5000"),
            ("HOOKLOOP_MAX_OUTPUT_TOKENS", "1000"),
        ])
        .unwrap();
        assert_eq!(config.policy().hook_timeout_ms, 100);
        assert_eq!(config.policy().stop_max_rejections, 0);
        assert_eq!(config.policy().max_rounds, 7);
        assert_eq!(config.tool_concurrency(), 2);
        assert_eq!(config.policy().context_budget(), 4000);
    }

    #[test]
    fn subagents_are_on_with_hookloop_subagents_above_zero_and_off_at_zero_or_unset() {
        let on = from(&[("HOOKLOOP_SUBAGENTS", " 3 ")]).unwrap();
        assert_eq!(on.policy().subagents, Some(Subagents::new(3)));
        assert_eq!(on.policy().subagents.unwrap().max_depth, 1);
        let off = from(&[("HOOKLOOP_SUBAGENTS", "0")]).unwrap();
        assert_eq!(off.policy().subagents, None);
        assert_eq!(from(&[]).unwrap().policy().subagents, None);
        let zero_depth = Config::builder()
            .subagents(Subagents {
                concurrency: 1,
                max_depth: 0,
                max_total: Subagents::DEFAULT_MAX_TOTAL,
            })
            .build();
        assert!(zero_depth.is_err());
    }

    #[test]
    fn invalid_values_name_the_variable_and_the_value() {
        let cases = [
            ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "0"),
            ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "-5"),
            ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "2.5s"),
            ("SPROUT_AGENT_HOOK_TIMEOUT_MS", ""),
            ("SPROUT_AGENT_STOP_MAX_REJECTIONS", "three"),
            ("SPROUT_AGENT_STOP_MAX_REJECTIONS", "99999999999"),
            ("HOOKLOOP_MAX_ROUNDS", "-1"),
            ("HOOKLOOP_TOOL_CONCURRENCY", "0"),
            ("HOOKLOOP_MAX_CONTEXT_TOKENS", "100"),
            ("HOOKLOOP_SUBAGENTS", "-1"),
            ("HOOKLOOP_SUBAGENTS", "two"),
            ("HOOKLOOP_SUBAGENTS", "1.5"),
        ];
        for (var, value) in cases {
            let err = from(&[(var, value)]).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(var), "{text}");
            assert!(text.contains(&format!("{value:?}")), "{text}");
        }
    }

    #[test]
    fn lookup_errors_propagate() {
        let err = Config::from_lookup(|var| {
            Err(ConfigError::NotUnicode {
                var: var.to_owned(),
            })
        })
        .unwrap_err();
        assert_eq!(
            err,
            ConfigError::NotUnicode {
                var: "MCP_HOOK_SERVERS".into()
            }
        );
    }

    #[test]
    fn the_system_prompt_comes_from_a_variable_or_a_file() {
        let config = from(&[("HOOKLOOP_SYSTEM_PROMPT", "be brief")]).unwrap();
        assert_eq!(config.system_prompt(), Some("be brief"));

        let dir = std::env::temp_dir().join(format!("hookloop-prompt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("prompt.txt");
        std::fs::write(&file, "from a file\n").unwrap();
        let path = file.to_str().unwrap();
        let config = from(&[("HOOKLOOP_SYSTEM_PROMPT_FILE", path)]).unwrap();
        assert_eq!(config.system_prompt(), Some("from a file\n"));

        let both = from(&[
            ("HOOKLOOP_SYSTEM_PROMPT", "x"),
            ("HOOKLOOP_SYSTEM_PROMPT_FILE", path),
        ])
        .unwrap_err();
        assert!(both.to_string().contains("not both"), "{both}");
        let missing = dir.join("absent.txt");
        let missing = missing.to_str().unwrap();
        let err = from(&[("HOOKLOOP_SYSTEM_PROMPT_FILE", missing)]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("HOOKLOOP_SYSTEM_PROMPT_FILE"), "{text}");
        assert!(text.contains(&format!("{missing:?}")), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn builder_checks_its_settings() {
        assert!(
            Config::builder()
                .hook_timeout(Duration::ZERO)
                .build()
                .is_err()
        );
        assert!(Config::builder().tool_concurrency(0).build().is_err());
        assert!(Config::builder().context_window(100, 100).build().is_err());
        let config = Config::builder()
            .hook_servers(HookServers::All)
            .hook_timeout(Duration::from_millis(10))
            .system_prompt("be brief")
            .build()
            .unwrap();
        assert_eq!(config.policy().hook_timeout_ms, 10);
        assert_eq!(config.system_prompt(), Some("be brief"));
    }
}
