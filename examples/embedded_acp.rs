//! The ACP agent inside a program of your own: an Agent Client Protocol agent on stdin/stdout
//! whose sessions use a model client and a tool host this program defines.
//!
//! ```text
//! cargo run --example embedded_acp --no-default-features --features acp
//! ```
//!
//! In a crate of your own, these dependencies are all it needs:
//!
//! ```toml
//! [dependencies]
//! hookloop = { version = "0.1", default-features = false, features = ["acp"] }
//! tokio = { version = "1", features = ["macros", "rt", "io-std"] }
//! ```
//!
//! Point an ACP client (an editor) at the built binary. Here the model only says how many
//! messages it was sent and the host offers no tools; a real program plugs in its own provider
//! and servers (or `hookloop::llm::AnyLlm` and `hookloop::mcp::McpHost`, with the features
//! `providers` and `mcp`).

use std::path::Path;

use hookloop::acp::{AgentOptions, Created, SessionFactory, SessionSpec};
use hookloop::llm::LlmRequest;
use hookloop::machine::{Catalog, HookReply, LlmReply, ToolCall, ToolOutput};
use hookloop::{Config, HookCall, LlmClient, LlmError, Machine, ServerName, Session, ToolHost};

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

/// The tool side: no servers, so no tools and no hooks.
struct NoTools;

impl ToolHost for NoTools {
    fn catalog_generation(&self) -> u64 {
        0
    }

    fn catalog(&self) -> Catalog {
        Catalog::default()
    }

    async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
        ToolOutput::error(format!("no tool named {}", call.name))
    }

    async fn call_hook(&self, _call: &HookCall) -> HookReply {
        HookReply::Text {
            text: String::new(),
        }
    }

    async fn kill_server(&self, _server: &ServerName) {}
}

/// Builds each session the client opens.
struct Factory;

impl SessionFactory for Factory {
    type Llm = Counting;
    type Host = NoTools;
    type Error = String;

    async fn create(&self, spec: SessionSpec) -> Result<Created<Counting, NoTools>, String> {
        if !spec.servers.is_empty() {
            return Err("this agent runs no MCP servers".into());
        }
        let session = Session::new(Config::default(), Counting, NoTools);
        Ok(Created::new(session))
    }

    async fn restore(
        &self,
        _spec: SessionSpec,
        machine: Machine,
    ) -> Result<Session<Counting, NoTools>, String> {
        Ok(Session::with_machine(
            Config::default(),
            machine,
            Counting,
            NoTools,
        ))
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
