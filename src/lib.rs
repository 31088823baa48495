//! # hookloop
//!
//! An LLM agent loop whose lifecycle MCP servers steer it through *hook tools*: tools whose bare
//! name starts with `_`. Hooks are hidden from the model, refused if the model calls them, and
//! called by the engine at defined points — `_SessionStart` before a session's first request,
//! `_UserPromptSubmit` on each prompt, `_PreToolUse` before each model tool call (it may deny
//! it), `_PostToolUse` after it, `_Stop` when the model ends its turn, `_PreCompact` before a
//! compaction summary, `_PostCompact` after the history is compacted, `_SessionEnd` when the
//! session closes. They are advisory: a hook can make the agent keep working, never trap it.
//!
//! ## Shape
//!
//! The core is a sans-IO state machine ([`machine::Machine`]): it takes facts (the model
//! replied, a tool finished, a hook answered or timed out) and emits orders (call the model, run
//! tools, call hooks, kill a server, finish). A tokio driver ([`Session`]) performs the orders
//! through two injected traits, [`LlmClient`] and [`ToolHost`].
//!
//! ```text
//!   ┌──────┐ prompt ┌───────────┐ tool calls ┌──────────────┐
//!   │ Idle │───────►│ Prompting │◄──────────►│ RunningTools │
//!   └──────┘        └───────────┘  results   └──────────────┘
//!      ▲              │ end_turn                  ▲
//!      │              ▼                           │ tool calls
//!      │       ┌──────────────┐ objection  ┌──────────┐
//!      ├───────│ AwaitingStop │───────────►│ Objected │── end_turn again ──► Idle
//!      │ none  └──────────────┘            └──────────┘
//!      │
//!      │  before any model request, if over the context budget:
//!      │       [_PreCompact] ──► Summarizing ──► PostCompacting ──► the request it was about to make
//!      │  every other hook point is one generic round (AwaitingHook) with a typed continuation
//!      │
//!      └── finish: max_tokens, refusal, round cap, model failure, cancel
//!   close ──► Done (absorbing)
//! ```
//!
//! ## Sovereignty: what a hook cannot do
//!
//! - A hook that does not answer within the timeout (2.5 s by default) has not objected. A
//!   server whose hooks time out twice in a row is killed.
//! - `_Stop` objections are budgeted per session (3 by default). Each objection round causes
//!   exactly one extra model request, so **`_Stop` can cause at most `budget` extra model calls
//!   per session, and every other hook none** (their answers ride along with the request the
//!   machine was about to make; a `_PreToolUse` denial answers the model's own call). The model
//!   requests of a session are at most (replies with tool calls or paused) + (prompts) +
//!   (`_Stop` budget) + (compactions); property tests check this bound over every hook.
//! - If the model ends its turn again right after an objection, the turn ends: it heard and
//!   declined.
//! - Hook output reaches the model JSON-encoded, as a tool result, never as instructions.
//!
//! These rules are checked in every state the machine reaches within a bound, not only on
//! sampled sessions: the `testing` feature's explorer (`testing::explore`) enumerates every
//! sequence of facts of a small alphabet up to a depth; its docs say exactly which
//! configurations, which alphabet and which depth, and what is left out.
//!
//! ## Embedding
//!
//! ```
//! use hookloop::testing::{InProcessHost, ScriptedLlm, Step, HookStep};
//! use hookloop::{Config, Hook, HookServers, PromptStop, Session};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A model that tries to stop, is told about an open todo, then stops again.
//! let llm = ScriptedLlm::new([Step::text("All done."), Step::text("Still done.")]);
//! // A server exposing a `_Stop` hook that objects once.
//! let host = InProcessHost::new()
//!     .hook("todo", Hook::Stop, [HookStep::Say("1 open: write tests".into())]);
//! let config = Config::builder().hook_servers(HookServers::All).build()?;
//!
//! let mut session = Session::new(config, llm.clone(), host);
//! let stop = session.prompt("Finish the feature.").await?;
//!
//! assert_eq!(stop, PromptStop::EndTurn);
//! assert_eq!(session.counters().objections, 1);
//! // The objection reached the model as a JSON tool result.
//! let second = &llm.requests()[1];
//! assert!(format!("{:?}", second.messages).contains(r#"{\"hook\":\"_Stop\""#));
//! # Ok(())
//! # }
//! ```
//!
//! Real providers live in [`llm`], the MCP host in [`mcp`]; the `testing` module (feature
//! `testing`) has the scripted fakes used above.
//!
//! [`transcript`] writes a session's boundary down as it runs and replays it against the pure
//! machine, deterministically, for tests and for debugging a session after the fact.

pub mod acp;
pub mod config;
pub mod driver;
pub mod hooks;
pub mod llm;
pub mod machine;
pub mod mcp;
pub mod progress;
pub mod supervisor;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
mod tls;
pub mod transcript;

pub use crate::config::{Config, ConfigBuilder, ConfigError};
pub use crate::driver::{
    AllowAll, CancelHandle, Observer, PermissionAsker, PromptStop, Session, SessionError,
};
pub use crate::hooks::{Hook, HookServers, ServerName};
pub use crate::llm::{LlmClient, LlmError};
pub use crate::machine::{Effect, Input, Machine, Message, PermissionDecision, Policy};
pub use crate::mcp::{HookCall, ToolHost};
