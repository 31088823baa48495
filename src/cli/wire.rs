//! The real pieces behind the commands: the provider from the environment, and the MCP host
//! from a `.mcp.json` file, from an ACP `session/new`, or for the demo's todo server.

use std::path::Path;
use std::sync::Arc;

use hookloop::acp::{FailedServer, ServerStart, SessionSpec};
use hookloop::llm::{AnyLlm, LlmConfig};
use hookloop::machine::{LlmReply, LlmRequest, Media};
use hookloop::mcp::command_hooks::{CommandHooks, SourceSpec, WithCommandHooks};
use hookloop::mcp::{HostOptions, McpHost, McpServers, ServerConfig};
use hookloop::ports::OnDelta;
use hookloop::{Config, LlmClient, LlmError, ServerName};

use super::Failure;

/// The tool host of every command: the MCP servers, and the command hooks beside them.
pub type Host = WithCommandHooks<McpHost>;

/// The variable naming command hooks (`[NAME=]PATH`, `:`-separated), for every command that
/// runs a session; `run --command-hooks` replaces it.
pub const COMMAND_HOOKS_VAR: &str = "HOOKLOOP_COMMAND_HOOKS";

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
/// names that neither `servers` nor `hooks` configures, and about each source of command hooks
/// it does not allow: their hooks would silently never run.
pub fn warn_unconfigured_hook_servers(
    policy: &hookloop::Policy,
    servers: &McpServers,
    hooks: &CommandHooks,
) {
    let configured: Vec<&ServerName> = servers
        .iter()
        .map(|(name, _)| name)
        .chain(hooks.names())
        .collect();
    for server in policy.hook_servers.unconfigured(&configured) {
        tracing::warn!(
            %server,
            "MCP_HOOK_SERVERS names server {server}, which is not configured; its hooks will never run"
        );
    }
    for source in hooks.names() {
        if !policy.hook_servers.allows(source.as_str()) {
            tracing::warn!(
                %source,
                "command hooks {source} are configured, but MCP_HOOK_SERVERS does not allow them; they will never run"
            );
        }
    }
}

/// The sources of command hooks `HOOKLOOP_COMMAND_HOOKS` names; none when it is unset.
pub fn command_hook_specs_from_env() -> Result<Vec<SourceSpec>, Failure> {
    match std::env::var(COMMAND_HOOKS_VAR) {
        Ok(value) => SourceSpec::parse_list(&value)
            .map_err(|e| Failure::usage(format!("{COMMAND_HOOKS_VAR}: {e}"))),
        Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
        Err(std::env::VarError::NotUnicode(_)) => Err(Failure::usage(format!(
            "{COMMAND_HOOKS_VAR} is not valid UTF-8"
        ))),
    }
}

/// The command hooks of `specs`, a relative path read from `cwd`; every file must be there.
pub fn load_command_hooks(specs: &[SourceSpec], cwd: &Path) -> Result<CommandHooks, Failure> {
    CommandHooks::load(specs, cwd).map_err(|e| Failure::usage(e.to_string()))
}

/// The command hooks of one ACP session in `cwd`: a relative path the session's project lacks
/// is left out with a warning (the variable names the file every project may have); a file
/// that is there must load.
pub fn session_command_hooks(specs: &[SourceSpec], cwd: &Path) -> Result<CommandHooks, String> {
    let present: Vec<SourceSpec> = specs
        .iter()
        .filter(|spec| {
            let there = cwd.join(spec.path()).exists();
            if !there {
                tracing::info!(
                    path = %spec.path().display(), cwd = %cwd.display(),
                    "the session's directory has no such command hooks file; left out"
                );
            }
            there
        })
        .cloned()
        .collect();
    CommandHooks::load(&present, cwd).map_err(|e| e.to_string())
}

/// `config` with the hook details command hooks read, when there are any.
pub fn with_hook_details(config: Config, hooks: &CommandHooks) -> Result<Config, Failure> {
    if hooks.is_empty() {
        return Ok(config);
    }
    config
        .into_builder()
        .hook_details(true)
        .build()
        .map_err(Failure::from)
}

fn beside(host: McpHost, hooks: CommandHooks, cwd: &Path) -> Result<Host, Failure> {
    WithCommandHooks::new(host, hooks, cwd).map_err(|e| Failure::usage(e.to_string()))
}

/// Starts the servers, with the current directory as their root (one that fails is reported
/// and left out), and puts `hooks` beside them, run in that directory.
pub async fn connect(servers: McpServers, hooks: CommandHooks) -> Result<Host, Failure> {
    let cwd = std::env::current_dir();
    let options = HostOptions::default().with_roots(cwd.as_ref().ok().cloned());
    let (host, failures) = McpHost::connect(servers, options)
        .await
        .map_err(Failure::failed)?;
    for failure in failures {
        tracing::warn!(server = %failure.server, error = %failure.error, "server did not start");
    }
    beside(host, hooks, cwd.as_deref().unwrap_or(Path::new(".")))
}

/// Starts the servers an ACP client attached to a session, as `start` says when one fails, and
/// puts `hooks` beside them, run in the session's directory; those that did not start, to tell
/// the client. An allowlisted hook server the session lacks is warned of, as `run` does at
/// start-up.
pub async fn connect_spec(
    spec: &SessionSpec,
    start: ServerStart,
    config: &hookloop::Config,
    hooks: CommandHooks,
) -> Result<(Host, Vec<FailedServer>), Failure> {
    let servers = spec.mcp_servers().map_err(Failure::usage)?;
    warn_unconfigured_hook_servers(config.policy(), &servers, &hooks);
    let (host, failed) = spec.connect(start).await.map_err(Failure::failed)?;
    Ok((beside(host, hooks, &spec.cwd)?, failed))
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
    Ok(WithCommandHooks::without(host))
}
