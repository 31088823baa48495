//! Command hooks: the hooks people already wrote for other hosts — the `hooks` of Claude
//! Code's `settings.json`, Codex's `hooks.json` or `config.toml`, a plugin's
//! `hooks/hooks.json` (Claude Code, Codex, Open Plugins / goose) — run unchanged at hookloop's
//! hook points, under its rules.
//!
//! A source of command hooks is a server of hooks only behind the [`ToolHost`] seam
//! ([`WithCommandHooks`]): named like a server (`claude-code`, `codex`, a plugin's name, or
//! the operator's), allowed or not by `MCP_HOOK_SERVERS`, and asked by the machine in the same
//! rounds as every server, with the same timeout, kill, budget and consecutive rule. Asked, it
//! writes the hook call as its host's event on each matching command's stdin (the bridge's
//! types, [`crate::bridge::hosts`]) and reads each answer as the host reads it: exit 0 with JSON
//! or plain text on stdout, exit 2 with its reason on stderr, any other exit a non-blocking
//! error.
//!
//! - `files.rs`: finding and reading the configurations ([`CommandHooks::load`]).
//! - `matcher.rs`: matchers as each host reads them.
//! - `events.rs`: a hook call as the host's events.
//! - `run.rs`: one command under hookloop's bounds.
//! - `host.rs`: the seam ([`WithCommandHooks`]).
//!
//! ```no_run
//! # async fn demo(host: hookloop::mcp::McpHost) -> Result<(), Box<dyn std::error::Error>> {
//! use hookloop::mcp::command_hooks::{CommandHooks, SourceSpec, WithCommandHooks};
//!
//! let cwd = std::env::current_dir()?;
//! let hooks = CommandHooks::load(&[SourceSpec::parse(".claude/settings.json")?], &cwd)?;
//! let host = WithCommandHooks::new(host, hooks, &cwd)?;
//! let config = hookloop::Config::builder()
//!     .hook_servers(hookloop::HookServers::All)
//!     .hook_details(true)
//!     .build()?;
//! # let _ = (host, config);
//! # Ok(())
//! # }
//! ```
//!
//! [`ToolHost`]: crate::ToolHost

mod events;
mod files;
mod host;
mod matcher;
mod run;
mod toml;

pub use self::files::{CommandHooks, CommandHooksError, MAX_CONFIG_BYTES, SourceSpec};
pub use self::host::{MAX_CONCURRENT_COMMANDS, WithCommandHooks};
pub use self::matcher::MAX_MATCHER_BYTES;
pub use self::run::{EXIT_DRAIN, MAX_STDERR_BYTES, MAX_STDOUT_BYTES, MAX_STREAM_BYTES};
