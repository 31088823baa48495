//! Hooks across hosts: hookloop's `_` hooks in agent hosts that run commands at their events
//! (Claude Code, Codex, Gemini CLI, Cursor, goose).
//!
//! - [`hosts`]: each host's event and answer formats, in both directions.
//! - [`proxy`]: the MCP proxy a host starts in place of a server, which hides its `_` tools from
//!   the host's model and serves them to hook commands on a private socket.

pub mod hosts;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod proxy;
