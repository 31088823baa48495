//! Hooks across hosts: hookloop's `_` hooks in agent hosts that run commands at their events
//! (Claude Code, Codex, Gemini CLI, Cursor, goose).
//!
//! - [`hosts`]: each host's event and answer formats, in both directions.
//! - [`proxy`]: the MCP proxy a host starts in place of a server, which hides its `_` tools from
//!   the host's model and serves them to hook commands on a private socket.
//! - [`command`]: `hookloop hook <host>`, the hook command, which asks those hooks at the
//!   host's events and answers in the host's format; [`state`] is what it keeps of a host
//!   session between invocations.

#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod command;
pub mod hosts;
#[cfg(feature = "command-hooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "command-hooks")))]
pub mod install;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod proxy;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod state;
