//! The ACP agent inside a program of your own: an Agent Client Protocol agent on stdin/stdout
//! whose sessions use a model client and a tool host this program defines.
//!
//! ```text
//! cargo run --example embedded_acp --no-default-features --features acp,mcp
//! ```
//!
//! In a crate of your own, these dependencies are all it needs:
//!
//! ```toml
//! [dependencies]
//! hookloop = { version = "0.1", default-features = false, features = ["acp", "mcp"] }
//! tokio = { version = "1", features = ["macros", "rt", "io-std"] }
//! ```
//!
//! Point an ACP client (an editor) at the built binary. Here the model only says how many
//! messages it was sent; the tools are those of the MCP servers the client lists in
//! `session/new` (stdio, HTTP or SSE), started by `hookloop::mcp::McpHost`. A server that
//! fails to start is left out and the client is told which and why. A real program plugs in
//! its own provider (or `hookloop::llm::AnyLlm`, with the feature `providers`).

use std::path::Path;

use hookloop::acp::{AgentOptions, Created, ServerStart, SessionFactory, SessionSpec};
use hookloop::machine::{LlmReply, LlmRequest};
use hookloop::mcp::McpHost;
use hookloop::{Config, LlmClient, LlmError, Machine, Session};

/// The model side: any provider fits behind [`LlmClient`].
struct Counting;

impl LlmClient for Counting {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        Ok(LlmReply {
            text: format!("You have sent {} messages.", request.messages.len()),
            ..LlmReply::default()
        })
    }
}

/// Builds each session the client opens.
struct Factory;

impl SessionFactory for Factory {
    type Llm = Counting;
    type Host = McpHost;
    type Error = String;

    async fn create(&self, spec: SessionSpec) -> Result<Created<Counting, McpHost>, String> {
        let (host, failed) = spec
            .connect(ServerStart::WhatStarts)
            .await
            .map_err(|e| e.to_string())?;
        let session = Session::new(Config::default(), Counting, host);
        Ok(Created::new(session).without(failed))
    }

    async fn restore(
        &self,
        spec: SessionSpec,
        machine: Machine,
    ) -> Result<Created<Counting, McpHost>, String> {
        let (host, failed) = spec
            .connect(ServerStart::WhatStarts)
            .await
            .map_err(|e| e.to_string())?;
        let session = Session::with_machine(Config::default(), machine, Counting, host);
        Ok(Created::new(session).without(failed))
    }

    fn record_dir(&self) -> Option<&Path> {
        None
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = AgentOptions::default();
    hookloop::acp::serve(Factory, options, tokio::io::stdin(), tokio::io::stdout()).await?;
    Ok(())
}
