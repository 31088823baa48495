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
//! through two injected traits, [`LlmClient`] and [`ToolHost`]. They and the other seams (the
//! [`Observer`] of a session, the [`PermissionAsker`] and the [`Person`](ports::Person) of a
//! front end) are defined in [`ports`], below the driver; the crate's providers, host and front
//! ends implement them from above, as any embedder's may.
//!
//! ```text
//!   ┌──────┐ prompt ┌───────────┐ tool calls ┌──────────────┐
//!   │ Idle │───────►│ Prompting │◄──────────►│ RunningTools │
//!   └──────┘        └───────────┘  results   └──────────────┘
//!      ▲              │ end_turn                  ▲
//!      │              ▼                           │ tool calls
//!      │       ┌───────────────┐ objection ┌──────────┐
//!      ├───────│ Hooking(Stop) │──────────►│ Objected │── end_turn again ──► Idle
//!      │ none  └───────────────┘           └──────────┘
//!      │
//!      │  before any model request, if over the context budget:
//!      │       Hooking(PreCompact) ──► Summarizing ──► Hooking(PostCompact) ──► the request
//!      │  every hook point is one state, Hooking, whose continuation says what its answers do;
//!      │  a destructive call may wait in AwaitingPermission before RunningTools
//!      │
//!      └── finish: max_tokens, refusal, round cap, model failure, cancel
//!   close ──► Hooking(SessionEnd) if a server has it ──► Done (absorbing)
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
//! - Subagents (off unless configured: [`ConfigBuilder::subagents`], `HOOKLOOP_SUBAGENTS`)
//!   add one term per child and lift nothing. A child is one `agent` call; at most `N` (the
//!   concurrency limit) run per reply that makes them, so a prompt starts at most `N` × (its
//!   replies with tool calls) children. Each child is one prompt under the same rules, its
//!   `_SubagentStop` budget `B` its own: its requests are at most (its replies with tool calls
//!   or paused) + 1 + `B` + (its compactions), and with the round cap `R` (`max_rounds`, counted
//!   per agent) at most `R` + `B` + (its compactions), where a compaction needs a reply between
//!   two. With depth limit `D` (1 by default: children start none), a prompt's model requests
//!   are at most `T(D)`, `T(0)` = `R` + `B` + `C` and `T(d)` = `R` + `B` + `C` + `R`·`N`·`T(d-1)`,
//!   `C` the compactions of one agent's prompt (at most `R` + `B`). Hooks inside a child add no
//!   request beyond its own `_SubagentStop` budget.
//! - If the model ends its turn again right after an objection, the turn ends: it heard and
//!   declined.
//! - Hook output reaches the model JSON-encoded, as a tool result, never as instructions.
//!
//! These rules are checked in every state the machine reaches within a bound, not only on
//! sampled sessions: the `testing` feature's explorer (`testing::explore`) enumerates every
//! sequence of facts of a small alphabet up to a depth; its docs say exactly which
//! configurations, which alphabet and which depth, and what is left out.
//!
//! ## The machine: states, facts and orders
//!
//! [`Machine`] is a deterministic state machine for one session. It never performs I/O, never
//! reads a clock, the environment or a random source. Its states are the boxes above
//! ([`machine::Phase`] names the one it is in); the facts it takes are the variants of
//! [`Input`] (the user prompted, the model replied or failed, a tool finished, a hook answered
//! or timed out, a permission was decided, the catalog changed, the user cancelled, the session
//! closed); the orders it gives are the variants of [`Effect`] (call the model, run tools, call
//! hooks, ask for a permission, kill a server, notify, finish).
//!
//! ## The driving contract
//!
//! Whoever drives a [`Machine`] (the crate's own [`Session`], or a driver of your own on
//! another runtime) keeps to this, and the machine keeps the rest:
//!
//! 1. Feed each fact with [`Machine::handle`]. A fact the current state does not expect is
//!    refused with a [`machine::MachineError`] naming the state, what it expected and what came;
//!    the machine is left as it was.
//! 2. After every [`handle`](Machine::handle), drain [`Machine::poll_effect`] until it yields
//!    `None`, and perform each [`Effect`] in order. Effects are never produced spontaneously:
//!    nothing changes between two calls of `handle`.
//! 3. Answer every effect that expects an answer with the fact it names (a
//!    [`Effect::CallLlm`] with [`Input::LlmReplied`] or [`Input::LlmFailed`], each call of
//!    an [`Effect::CallTools`] with an [`Input::ToolFinished`], each call of an
//!    [`Effect::CallHooks`] with an [`Input::HookAnswered`]; a hook that does not answer in
//!    time is answered `HookReply::TimedOut` by the driver, which is the only clock there is).
//! 4. [`Effect::Finish`] ends a prompt; the machine waits in `Idle` for the next
//!    [`Input::Prompted`]. [`Input::Closed`] ends the session from any state (`_SessionEnd`
//!    runs first); after it the machine is `Done` and refuses everything.
//!
//! The same facts in the same order always give the same effects: that is what makes a
//! [`transcript`] replay exact.
//!
//! ## The bound
//!
//! A session's model requests are at most (replies with tool calls or paused) + (prompts) +
//! (the `_Stop` budget) + (compactions), and each subagent adds the same bound counted for it
//! (its task as its one prompt, its `_SubagentStop` budget in place of `_Stop`'s); a session
//! starts at most [`machine::Subagents::max_total`] subagents (64 by default), over every prompt. Hooks
//! cannot add to it except `_Stop` and `_SubagentStop`, whose objections are budgeted
//! ([`Policy`]'s `stop_max_rejections`, 3 by default, per agent); a hook that
//! does not answer within the timeout has not objected; a server whose hooks time out twice in
//! a row is killed. [`Config`] sets the timeout, the budget and the optional round cap per
//! prompt (`max_turn_requests`), which bounds the model requests of a prompt outright.
//!
//! ## Features
//!
//! With no feature the crate is the core: the machine, the driver ([`Session`]), the seams
//! ([`ports`]: the two traits it drives, [`LlmClient`] and [`ToolHost`], and the others), the
//! [`supervisor`], the hook convention
//! ([`hooks`]), [`Config`], and the [`transcript`] format with recording, replay and
//! [`check_dir`](transcript::check_dir). It depends on serde, serde_json, statig, thiserror,
//! tracing, futures-util and tokio's `macros`, `time` and `sync` (the README's "Cargo features"
//! counts what each feature pulls in).
//!
//! | feature | what it adds | what it pulls in |
//! |---|---|---|
//! | `providers` | [`llm::OpenAi`], [`llm::Anthropic`], [`llm::AnyLlm`], [`llm::LlmConfig`] | reqwest, rustls (ring), http |
//! | `mcp` | [`mcp::McpHost`] over stdio, streamable HTTP and HTTP+SSE, with OAuth ([`mcp::auth`]) | rmcp, reqwest, rustls (ring), oauth2 |
//! | `acp` | [`acp::serve`]: the Agent Client Protocol agent over any byte stream | agent-client-protocol |
//! | `html` | [`transcript::render_html`] | maud |
//! | `junit` | [`transcript::SuiteReport::to_junit`] | quick-xml |
//! | `testing` | [`testing`]: scripted fakes of the two traits and the bounded explorer | nothing |
//! | `cli` (default) | the `hookloop` binary; turns on `providers`, `mcp`, `acp`, `html`, `junit` | clap, tracing-subscriber |
//! | `demo` (default) | the demo's todo server inside the binary (`hookloop demo`) | rmcp's server side |
//!
//! A library user names what it uses:
//!
//! ```toml
//! [dependencies]
//! hookloop = { version = "0.1", default-features = false, features = ["mcp"] }
//!
//! [dev-dependencies]
//! hookloop = { version = "0.1", default-features = false, features = ["testing"] }
//! ```
//!
//! ## Ways in
//!
//! ### Scripted, to see the engine work
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
//! ### A model client of your own (any other provider)
//!
//! Implement [`LlmClient`]: one request in, one reply or one failure out. Retries belong
//! inside the client. Needs no feature.
//!
//! ```
//! use hookloop::machine::{LlmReply, LlmRequest, StopReason};
//! use hookloop::{Config, LlmClient, LlmError, Session, ToolHost};
//!
//! /// Answers every request with the length of the conversation so far.
//! struct Counting;
//!
//! impl LlmClient for Counting {
//!     async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
//!         // A real client sends `request.system`, `request.messages` and `request.tools`
//!         // in its provider's dialect, and maps the answer back.
//!         Ok(LlmReply {
//!             text: format!("{} messages", request.messages.len()),
//!             stop: StopReason::EndTurn,
//!             ..LlmReply::default()
//!         })
//!     }
//! }
//!
//! # async fn run(host: impl ToolHost) -> Result<(), Box<dyn std::error::Error>> {
//! let mut session = Session::new(Config::default(), Counting, host);
//! session.prompt("hello").await?;
//! # Ok(())
//! # }
//! ```
//!
//! ### A tool host of your own
//!
//! Implement [`ToolHost`]: the catalog of tools (hooks are tools whose bare name starts with
//! `_`), a tool call, a hook call, a kill. Needs no feature.
//!
//! ```
//! use hookloop::machine::{Catalog, HookReply, ServerTools, ToolCall, ToolInfo, ToolOutput};
//! use hookloop::{HookCall, ServerName, ToolHost};
//!
//! /// One server, `clock`, with one tool, `now`, and a `_Stop` hook that never objects.
//! struct Clock;
//!
//! impl ToolHost for Clock {
//!     fn catalog_generation(&self) -> u64 {
//!         0 // the catalog never changes
//!     }
//!
//!     fn catalog(&self) -> Catalog {
//!         let tool = |name: &str| {
//!             ToolInfo::new(name, serde_json::json!({"type": "object"}))
//!         };
//!         let server = ServerName::new("clock").expect("a valid server name");
//!         let tools = vec![tool("now"), tool("_Stop")];
//!         Catalog { servers: vec![ServerTools { server, tools }] }
//!     }
//!
//!     async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
//!         match call.name.as_str() {
//!             "clock__now" => ToolOutput::text("12:00"),
//!             other => ToolOutput::error(format!("no tool {other}")),
//!         }
//!     }
//!
//!     async fn call_hook(&self, _call: &HookCall) -> HookReply {
//!         HookReply::Text { text: String::new() } // empty: no objection
//!     }
//!
//!     async fn kill_server(&self, _server: &ServerName) {}
//! }
//! # let _ = Clock;
//! ```
//!
//! ### A test that checks a folder of transcripts
//!
//! Record sessions (`hookloop run --record FILE`, [`Session::record_to`], or the ACP agent's
//! `HOOKLOOP_RECORD_DIR`), keep them in a folder, and replay the folder in a test: any change
//! to what the engine would do with the same facts fails it, with a diff. `HOOKLOOP_BLESS=1`
//! accepts the new behaviour. Needs no feature.
//!
//! ```no_run
//! // tests/transcripts.rs
//! #[test]
//! fn transcripts_replay() -> Result<(), hookloop::transcript::CheckFailed> {
//!     let checked = hookloop::transcript::check_dir("tests/transcripts")?;
//!     println!("{checked}");
//!     Ok(())
//! }
//! ```
//!
//! ### Replay in another project's CI
//!
//! A project that steers hookloop with its own hook servers keeps their recorded sessions and
//! replays them on every change, with a JUnit report for the CI's dashboard (feature `junit`
//! for the report; `hookloop replay --junit FILE DIR` does the same from the command line):
//!
//! ```no_run
//! # #[cfg(feature = "junit")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use hookloop::transcript::{default_threads, replay_files, suite_files};
//!
//! let files = suite_files(&["recorded-sessions".into()])?;
//! let report = replay_files(&files, default_threads());
//! std::fs::write("replay.xml", report.to_junit())?;
//! println!("{report}");
//! if !report.is_clean() {
//!     std::process::exit(1);
//! }
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "junit"))]
//! # fn main() {}
//! ```
//!
//! ### The ACP agent inside another binary
//!
//! [`acp::serve`] speaks the Agent Client Protocol over any byte stream; a
//! [`acp::SessionFactory`] is where your model client and tool host plug in (feature `acp`;
//! `mcp` and `providers` for the real ones). `examples/embedded_acp.rs` is a whole program:
//! an ACP agent on stdio whose sessions use a model client and a tool host of its own.
//!
//! ```text
//! cargo run --example embedded_acp --no-default-features --features acp
//! ```
//!
//! ## More
//!
//! Everything that plugs into the engine is in [`ports`]. Real providers live in [`llm`]
//! (feature `providers`), the MCP host in [`mcp`] (feature `mcp`). [`transcript`] writes a
//! session's boundary down as it runs and replays it against the pure machine,
//! deterministically, for tests and for debugging a session after the fact.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "acp")]
#[cfg_attr(docsrs, doc(cfg(feature = "acp")))]
pub mod acp;
pub mod bridge;
pub mod config;
pub mod driver;
pub mod hooks;
#[cfg(feature = "providers")]
#[cfg_attr(docsrs, doc(cfg(feature = "providers")))]
pub mod llm;
pub mod machine;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
mod millis;
#[cfg(any(feature = "providers", feature = "mcp", feature = "otel"))]
mod net;
pub mod ports;
mod private;
pub mod progress;
pub mod supervisor;
pub mod telemetry;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod text;
pub mod transcript;

pub use crate::config::{Config, ConfigBuilder, ConfigError};
pub use crate::driver::{AllowAll, CancelHandle, PromptStop, Session, SessionError};
pub use crate::hooks::{Hook, HookServers, ServerName};
pub use crate::machine::{Effect, Input, Machine, Message, PermissionDecision, Policy};
pub use crate::ports::{HookCall, LlmClient, LlmError, Observer, PermissionAsker, ToolHost};
