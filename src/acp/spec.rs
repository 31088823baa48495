//! What a client asks a session to be — `session/new`'s `cwd` and `mcpServers`, a prompt's
//! content blocks — checked and put in the engine's terms, or refused with what is wrong.

use std::path::PathBuf;

use agent_client_protocol::v1::schema::{ContentBlock, McpServer};

use super::permission::Permissions;
use crate::hooks::ServerName;

/// What a client asked for in `session/new`, in the engine's terms.
///
/// The agent builds it from the client's request, having checked it (an absolute `cwd`, server
/// names unique and valid). A program builds one to test its own
/// [`SessionFactory`](crate::acp::SessionFactory) without a client:
///
/// ```
/// use hookloop::ServerName;
/// use hookloop::acp::{Permissions, ServerSpec, SessionSpec};
///
/// let spec = SessionSpec::new("/srv/project")
///     .with_server(ServerSpec::Stdio {
///         name: ServerName::new("todo")?,
///         command: "todo-server".into(),
///         args: Vec::new(),
///         env: Vec::new(),
///     })
///     .with_permissions(Permissions::Never);
/// assert_eq!(spec.servers.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSpec {
    /// The session's working directory (absolute, per the protocol).
    pub cwd: PathBuf,
    /// The session's own MCP servers, in the client's order.
    pub servers: Vec<ServerSpec>,
    /// Whether the session asks the client before destructive tools run: a new session's
    /// [`Config`](crate::Config) turns [`ask_permission`](crate::ConfigBuilder::ask_permission)
    /// on when this is [`Permissions::Ask`]. A restored session replays its record under the
    /// record's setting, then goes on under this one.
    pub permissions: Permissions,
}

impl SessionSpec {
    /// A session in `cwd` with no servers of its own, asking before destructive tools run.
    /// Unlike a client's request, nothing here is checked.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self {
            cwd: cwd.into(),
            servers: Vec::new(),
            permissions: Permissions::Ask,
        }
    }

    /// Adds `server` after the servers already given.
    pub fn with_server(mut self, server: ServerSpec) -> Self {
        self.servers.push(server);
        self
    }

    /// Sets [`permissions`](Self::permissions).
    pub fn with_permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = permissions;
        self
    }
}

/// One MCP server a client attached to a session.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerSpec {
    /// A child process speaking MCP over stdio.
    Stdio {
        /// The server's name.
        name: ServerName,
        /// The program.
        command: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it.
        env: Vec<(String, String)>,
    },
    /// A server speaking MCP's streamable HTTP transport.
    Http {
        /// The server's name.
        name: ServerName,
        /// Its URL.
        url: String,
        /// HTTP headers sent with each request.
        headers: Vec<(String, String)>,
    },
    /// A server speaking the HTTP+SSE transport of MCP 2024-11-05; `url` is its SSE stream.
    Sse {
        /// The server's name.
        name: ServerName,
        /// Its URL.
        url: String,
        /// HTTP headers sent with each request.
        headers: Vec<(String, String)>,
    },
}

impl ServerSpec {
    /// The server's name.
    pub fn name(&self) -> &ServerName {
        match self {
            Self::Stdio { name, .. } | Self::Http { name, .. } | Self::Sse { name, .. } => name,
        }
    }
}

/// A server of the session that did not start, and why, to tell the client.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedServer {
    /// The server's name, as the client gave it.
    pub server: ServerName,
    /// Why it did not start, said plainly.
    pub why: String,
}

impl FailedServer {
    /// A server that did not start, for `why`.
    pub fn new(server: ServerName, why: impl Into<String>) -> Self {
        Self {
            server,
            why: why.into(),
        }
    }
}

/// The engine's view of a session's `cwd` and `mcpServers`, or what is wrong with them.
pub(super) fn session_spec(
    cwd: PathBuf,
    mcp_servers: Vec<McpServer>,
    permissions: Permissions,
) -> Result<SessionSpec, String> {
    if !cwd.is_absolute() {
        return Err(format!("cwd must be an absolute path, got {cwd:?}"));
    }
    let mut servers = Vec::with_capacity(mcp_servers.len());
    for server in mcp_servers {
        let spec = match server {
            McpServer::Stdio(s) => ServerSpec::Stdio {
                name: server_name(s.name)?,
                command: s.command,
                args: s.args,
                env: s.env.into_iter().map(|v| (v.name, v.value)).collect(),
            },
            McpServer::Http(s) => ServerSpec::Http {
                name: server_name(s.name)?,
                url: s.url,
                headers: s.headers.into_iter().map(|h| (h.name, h.value)).collect(),
            },
            McpServer::Sse(s) => ServerSpec::Sse {
                name: server_name(s.name)?,
                url: s.url,
                headers: s.headers.into_iter().map(|h| (h.name, h.value)).collect(),
            },
            // Forced: the protocol crate marks `McpServer` `#[non_exhaustive]`, since the enum
            // grows with the protocol. Refuse a transport this agent does not know.
            _ => return Err("unsupported MCP server transport".into()),
        };
        if servers.iter().any(|s: &ServerSpec| s.name() == spec.name()) {
            return Err(format!(
                "MCP server name {:?} is used twice",
                spec.name().as_str()
            ));
        }
        servers.push(spec);
    }
    Ok(SessionSpec {
        cwd,
        servers,
        permissions,
    })
}

fn server_name(name: String) -> Result<ServerName, String> {
    ServerName::new(name).map_err(|e| e.to_string())
}

/// The prompt as one text: text blocks as they are, resource links as a line naming them.
pub(super) fn prompt_text(blocks: &[ContentBlock]) -> Result<String, String> {
    let mut parts = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::ResourceLink(link) => {
                let title = link.title.as_deref().unwrap_or(&link.name);
                parts.push(format!("[{title}]({})", link.uri));
            }
            ContentBlock::Image(_) => return Err(unsupported(i, "image")),
            ContentBlock::Audio(_) => return Err(unsupported(i, "audio")),
            ContentBlock::Resource(_) => return Err(unsupported(i, "embedded resource")),
            // Forced: the protocol crate marks `ContentBlock` `#[non_exhaustive]`.
            _ => return Err(unsupported(i, "unknown")),
        }
    }
    if parts.is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(parts.join("\n\n"))
}

fn unsupported(index: usize, kind: &str) -> String {
    format!(
        "prompt block {index}: {kind} content is not supported (the agent's prompt capabilities \
         allow text and resource_link blocks only)"
    )
}
