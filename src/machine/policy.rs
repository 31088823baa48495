//! Sovereignty settings and the pure rules that keep a buggy or hostile hook from trapping the
//! agent: the objection budget, the consecutive-timeout kill, the context budget.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hooks::{HookServers, ServerName};

/// The machine's settings. [`Config`](crate::Config) builds one; the defaults are the spec's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Servers whose hooks run (`MCP_HOOK_SERVERS`). Off by default.
    pub hook_servers: HookServers,
    /// Per hook call (`SPROUT_AGENT_HOOK_TIMEOUT_MS`).
    pub hook_timeout_ms: u64,
    /// `_Stop` objections allowed per session (`SPROUT_AGENT_STOP_MAX_REJECTIONS`); 0 = `_Stop`
    /// is never called.
    pub stop_max_rejections: u32,
    /// Model requests per prompt; 0 = unlimited.
    pub max_rounds: u32,
    /// The model's context window, in tokens.
    pub max_context_tokens: u64,
    /// Tokens reserved for the model's output; the history may use the rest.
    pub max_output_tokens: u32,
    /// What the model's dialect does with images and binary resources, so the context estimate
    /// counts what is sent. The session takes it from its model client
    /// ([`LlmClient::media`](crate::LlmClient::media)).
    #[serde(default, skip_serializing_if = "Media::is_default")]
    pub media: Media,
    /// Ask the user before a call of a tool its server marks destructive (`destructiveHint`)
    /// runs: the machine orders [`Effect::AskPermission`](crate::machine::Effect::AskPermission)
    /// and waits for the decision. Off by default: only a front end that can ask turns it on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask_permission: bool,
    /// The subagent capability: the built-in `agent` tool and its limits. Off (`None`) by
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<Subagents>,
    /// Hook calls also carry what hooks written for other hosts read of their events: `_Stop`
    /// the text the turn ended with and whether an objection came earlier in the prompt
    /// (`{"lastMessage", "afterObjection"}`), `_SubagentStop` the latter, `_PreToolUse` and
    /// `_PostToolUse` the call's `id`. Off by default, so that a session recorded without it
    /// replays as it was; command hooks ([`mcp::command_hooks`](crate::mcp)) need it on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hook_details: bool,
}

/// Bytes per token in the estimate used before the provider reports usage.
pub const BYTES_PER_TOKEN: u64 = 4;

/// How a model's dialect carries the images and binary resources of tool results, which decides
/// what they cost in its context. The default sends none of them: each is a one-line
/// description.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Media {
    /// MIME types of images the dialect sends as images. Other images, and every binary
    /// resource, are sent as a one-line description.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_types: Vec<String>,
    /// Tokens one image sent as an image costs at most (providers scale larger ones down).
    #[serde(default)]
    pub max_image_tokens: u64,
}

impl Media {
    /// Bytes a description of a binary block costs, beyond its MIME type and URI: the words of
    /// `[image image/png, 123456 bytes of base64 not shown]`.
    pub const DESCRIPTION_BYTES: usize = 48;

    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether an image of this type is sent as an image.
    pub fn sends_image(&self, mime_type: &str) -> bool {
        self.image_types.iter().any(|t| t == mime_type)
    }
}

impl Policy {
    /// The default hook timeout, in ms.
    pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 2_500;
    /// The default `_Stop` budget per session.
    pub const DEFAULT_STOP_MAX_REJECTIONS: u32 = 3;
    /// The default context window, in tokens.
    pub const DEFAULT_MAX_CONTEXT_TOKENS: u64 = 200_000;
    /// The default output reservation, in tokens.
    pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8_192;
    /// Consecutive hook timeouts of one server that get it killed.
    pub const KILL_AFTER_TIMEOUTS: u32 = 2;

    /// Whether an agent at `depth` (0 = the top-level agent) is offered `agent`: subagents are
    /// on and it is above the depth limit.
    pub fn offers_agent_at(&self, depth: u32) -> bool {
        self.subagents.is_some_and(|s| depth < s.max_depth)
    }

    /// How long each hook call may take: the one form every reader of the setting uses (the
    /// wire keeps milliseconds, as `SPROUT_AGENT_HOOK_TIMEOUT_MS` does).
    pub fn hook_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.hook_timeout_ms)
    }

    /// Tokens the history (with system prompt and tools) may use before it is compacted.
    pub fn context_budget(&self) -> u64 {
        self.max_context_tokens
            .saturating_sub(u64::from(self.max_output_tokens))
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            hook_servers: HookServers::Off,
            hook_timeout_ms: Self::DEFAULT_HOOK_TIMEOUT_MS,
            stop_max_rejections: Self::DEFAULT_STOP_MAX_REJECTIONS,
            max_rounds: 0,
            max_context_tokens: Self::DEFAULT_MAX_CONTEXT_TOKENS,
            max_output_tokens: Self::DEFAULT_MAX_OUTPUT_TOKENS,
            media: Media::default(),
            ask_permission: false,
            subagents: None,
            hook_details: false,
        }
    }
}

/// Session-wide counters. They survive across prompts: a session gets one objection budget,
/// however many prompts it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Counters {
    /// `_Stop` rounds that objected.
    pub objections: u32,
    /// Compactions done.
    pub compactions: u32,
    /// Hook timeouts in a row, per server, across all its hooks.
    pub consecutive_timeouts: BTreeMap<ServerName, u32>,
}

impl Counters {
    /// `_Stop` rounds left under `policy`.
    pub fn budget_left(&self, policy: &Policy) -> u32 {
        policy.stop_max_rejections.saturating_sub(self.objections)
    }

    /// Records a timeout of `server`; true when it is the one that gets the server killed.
    /// The count restarts after a kill, so a restarted server is again allowed one slow answer.
    pub(crate) fn record_timeout(&mut self, server: &ServerName) -> bool {
        let count = self.consecutive_timeouts.entry(server.clone()).or_insert(0);
        *count += 1;
        if *count >= Policy::KILL_AFTER_TIMEOUTS {
            self.consecutive_timeouts.remove(server);
            true
        } else {
            false
        }
    }

    /// Records an answer from `server`: it is alive, so its timeouts are no longer consecutive.
    pub(crate) fn record_answer(&mut self, server: &ServerName) {
        self.consecutive_timeouts.remove(server);
    }
}

/// The subagent capability's settings; off (no `agent` tool) unless a policy has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subagents {
    /// At most this many `agent` calls of one reply run (at once); the calls past it are
    /// answered at once with an error result and never run. At least 1.
    pub concurrency: u32,
    /// How deep agents nest: at depth 1 (the default) the top-level agent may start subagents
    /// and they may not start their own (they are not offered `agent`).
    pub max_depth: u32,
    /// At most this many subagents an agent starts in its whole session, over every prompt
    /// (64 by default); the `agent` calls past it are answered at once with an error result
    /// and never run. Each subagent's `_SubagentStop` adds model requests of its own, and
    /// `HOOKLOOP_MAX_ROUNDS=0` puts no bound on a prompt's requests: this total is what keeps
    /// a model that calls `agent` again and again from running without end.
    // Left out of a record at its default, so records written before it read and compare as
    // they did.
    #[serde(
        default = "Subagents::default_max_total",
        skip_serializing_if = "Subagents::is_default_total"
    )]
    pub max_total: u32,
}

impl Subagents {
    /// Subagents nest one level unless told otherwise.
    pub const DEFAULT_MAX_DEPTH: u32 = 1;
    /// Subagents an agent starts in a session unless told otherwise.
    pub const DEFAULT_MAX_TOTAL: u32 = 64;

    fn default_max_total() -> u32 {
        Self::DEFAULT_MAX_TOTAL
    }

    fn is_default_total(total: &u32) -> bool {
        *total == Self::DEFAULT_MAX_TOTAL
    }

    /// At most `concurrency` (at least 1) subagents per reply, nesting one level.
    pub fn new(concurrency: u32) -> Self {
        Self {
            concurrency: concurrency.max(1),
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_total: Self::DEFAULT_MAX_TOTAL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str) -> ServerName {
        ServerName::new(name).unwrap()
    }

    #[test]
    fn kill_on_second_consecutive_timeout() {
        let mut c = Counters::default();
        assert!(!c.record_timeout(&server("a")));
        assert!(c.record_timeout(&server("a")));
        // The count starts over after the kill.
        assert!(!c.record_timeout(&server("a")));
    }

    #[test]
    fn answer_resets_consecutive_timeouts() {
        let mut c = Counters::default();
        assert!(!c.record_timeout(&server("a")));
        c.record_answer(&server("a"));
        assert!(!c.record_timeout(&server("a")));
    }

    #[test]
    fn timeouts_are_counted_per_server() {
        let mut c = Counters::default();
        assert!(!c.record_timeout(&server("a")));
        assert!(!c.record_timeout(&server("b")));
        assert!(c.record_timeout(&server("b")));
    }

    #[test]
    fn a_policy_keeps_its_media_through_a_transcript_and_omits_the_default() {
        // A transcript's header carries the policy: replay must count an image as it was counted.
        let anthropic = Policy {
            media: Media {
                image_types: vec!["image/png".to_owned()],
                max_image_tokens: 1_600,
            },
            ..Policy::default()
        };
        let json = serde_json::to_value(&anthropic).unwrap();
        assert_eq!(json["media"]["max_image_tokens"], 1_600);
        let back: Policy = serde_json::from_value(json).unwrap();
        assert_eq!(back.media, anthropic.media);
        // The default is left out, so headers written before media was counted stay as they were.
        let plain = serde_json::to_value(Policy::default()).unwrap();
        assert!(plain.get("media").is_none(), "{plain}");
    }

    #[test]
    fn budget_left_saturates() {
        let policy = Policy {
            stop_max_rejections: 2,
            ..Policy::default()
        };
        let mut c = Counters::default();
        assert_eq!(c.budget_left(&policy), 2);
        c.objections = 5;
        assert_eq!(c.budget_left(&policy), 0);
    }

    #[test]
    fn context_budget_leaves_the_output_reserve() {
        let policy = Policy {
            max_context_tokens: 1000,
            max_output_tokens: 200,
            ..Policy::default()
        };
        assert_eq!(policy.context_budget(), 800);
    }
}
