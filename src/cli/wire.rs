//! The real pieces behind the commands: the provider from the environment, and the MCP host
//! from a `.mcp.json` file, from an ACP `session/new`, or for the demo's todo server.

use std::path::Path;
use std::sync::Arc;

use hookloop::acp::{ServerSpec, SessionSpec};
use hookloop::llm::OnDelta;
use hookloop::llm::{AnyLlm, LlmConfig, LlmRequest};
use hookloop::machine::{LlmReply, Media};
use hookloop::mcp::{HostOptions, McpHost, McpServers, ServerConfig};
use hookloop::{LlmClient, LlmError, ServerName};

use super::Failure;

/// The tool host of every command.
pub type Host = McpHost;

/// The demo's context window, in tokens: small enough that act one compacts once, after the
/// first todo is done (the demo checks it did, so a change that moves it fails loudly).
pub const DEMO_CONTEXT_TOKENS: u64 = 640;

/// One provider client shared by every session of the process.
#[derive(Clone, Debug)]
pub struct SharedLlm(Arc<AnyLlm>);

impl LlmClient for SharedLlm {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        self.0.complete(request).await
    }

    // Forwarded, or the default would stream nothing.
    async fn stream(
        &self,
        request: LlmRequest<'_>,
        on_delta: &mut OnDelta<'_>,
    ) -> Result<LlmReply, LlmError> {
        self.0.stream(request, on_delta).await
    }

    // Forwarded, or the machine's context estimate would count each tool image as a one-line
    // description where the dialect sends the image (up to 1,600 tokens with Anthropic).
    fn media(&self) -> Media {
        self.0.media()
    }

    fn model_name(&self) -> Option<(&str, &str)> {
        self.0.model_name()
    }
}

/// The provider the environment names (`HOOKLOOP_PROVIDER`, `HOOKLOOP_MODEL`, keys, URLs).
pub fn model_from_env() -> Result<SharedLlm, Failure> {
    let config = LlmConfig::from_env()?;
    let client = config.client().map_err(Failure::usage)?;
    Ok(SharedLlm(Arc::new(client)))
}

/// The servers of `path`, or of `./.mcp.json` when no path is given and it exists, or none.
pub fn load_mcp_config(path: Option<&Path>) -> Result<McpServers, Failure> {
    let (path, required) = match path {
        Some(path) => (path, true),
        None => (Path::new(".mcp.json"), false),
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(McpServers::new());
        }
        Err(e) => {
            return Err(Failure::usage(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    McpServers::from_json(&text).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// Warns about each server the allowlist of `policy` (`MCP_HOOK_SERVERS`, or a record's)
/// names that `servers` does not configure: its hooks would silently never run.
pub fn warn_unconfigured_hook_servers(policy: &hookloop::Policy, servers: &McpServers) {
    let configured: Vec<&ServerName> = servers.iter().map(|(name, _)| name).collect();
    for server in policy.hook_servers.unconfigured(&configured) {
        tracing::warn!(
            %server,
            "MCP_HOOK_SERVERS names server {server}, which is not configured; its hooks will never run"
        );
    }
}

/// Starts the servers, with the current directory as their root; one that fails is reported
/// and left out.
pub async fn connect(servers: McpServers) -> Result<Host, Failure> {
    let options = HostOptions::default().with_roots(std::env::current_dir());
    let (host, failures) = McpHost::connect(servers, options)
        .await
        .map_err(Failure::failed)?;
    for failure in failures {
        tracing::warn!(server = %failure.server, error = %failure.error, "server did not start");
    }
    Ok(host)
}

/// Starts the servers an ACP client attached to a session, all of them or none: a client that
/// names a server expects it there. An allowlisted hook server the session lacks is warned of,
/// as `run` does at start-up.
pub async fn connect_spec(spec: SessionSpec, config: &hookloop::Config) -> Result<Host, Failure> {
    let mut servers = McpServers::new();
    for server in spec.servers {
        let (name, config) = match server {
            ServerSpec::Stdio {
                name,
                command,
                args,
                env,
            } => {
                let mut config = ServerConfig::stdio(command.to_string_lossy(), args);
                for (key, value) in env {
                    config = config.env(key, value);
                }
                if let ServerConfig::Stdio(stdio) = &mut config {
                    stdio.cwd = Some(spec.cwd.clone());
                }
                (name, config)
            }
            ServerSpec::Http { name, url, headers } => {
                let mut config = ServerConfig::http(url);
                for (key, value) in headers {
                    config = config.header(key, value);
                }
                (name, config)
            }
            ServerSpec::Sse { name, url, headers } => {
                let mut config = ServerConfig::sse(url);
                for (key, value) in headers {
                    config = config.header(key, value);
                }
                (name, config)
            }
            // A kind of server added to the protocol later; its headers may hold secrets, so
            // the message does not print it.
            _ => {
                return Err(Failure::usage(
                    "a session names a kind of MCP server this agent cannot start",
                ));
            }
        };
        servers.push(name, config).map_err(Failure::usage)?;
    }
    let options = HostOptions::default()
        .with_all_or_nothing(true)
        .with_roots([spec.cwd]);
    warn_unconfigured_hook_servers(config.policy(), &servers);
    let (host, _) = McpHost::connect(servers, options)
        .await
        .map_err(Failure::failed)?;
    Ok(host)
}

/// The demo's todo server: this very binary, run as `hookloop todo-server`.
pub async fn todo_host(server: &str) -> Result<Host, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this program's path: {e}")))?;
    let config = ServerConfig::stdio(exe.to_string_lossy(), ["todo-server"]);
    let name = ServerName::new(server).map_err(Failure::failed)?;
    let mut servers = McpServers::new();
    servers.push(name, config).map_err(Failure::failed)?;
    let options = HostOptions::default().with_all_or_nothing(true);
    let (host, _) = McpHost::connect(servers, options)
        .await
        .map_err(|e| Failure::failed(format!("the todo server did not start: {e}")))?;
    Ok(host)
}
