//! A session's MCP servers as the client listed them, started by the MCP host: the mapping of
//! ACP's `mcpServers` entries onto [`McpServers`], and what happens when one of them fails.

use crate::acp::{FailedServer, ServerSpec, SessionSpec};
use crate::config::{ConfigError, env_lookup};
use crate::mcp::{HostOptions, McpError, McpHost, McpServers, ServerConfig};

/// What a session does when one of its servers fails to start (`HOOKLOOP_ACP_SERVERS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerStart {
    /// The session starts with the servers that started; the client is told which did not,
    /// and why (the default, as `hookloop run` does).
    #[default]
    WhatStarts,
    /// One server that fails fails the session (`session/new`, `session/load`).
    AllOrNothing,
}

impl ServerStart {
    /// The variable the setting is read from.
    pub const VAR: &'static str = "HOOKLOOP_ACP_SERVERS";

    /// The setting of the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&env_lookup)
    }

    /// The setting `lookup` gives: `started` (or unset, or empty) or `all-or-nothing`.
    pub fn from_lookup(
        lookup: &impl Fn(&str) -> Result<Option<String>, ConfigError>,
    ) -> Result<Self, ConfigError> {
        match lookup(Self::VAR)?.as_deref().map(str::trim) {
            None | Some("" | "started") => Ok(Self::WhatStarts),
            Some("all-or-nothing") => Ok(Self::AllOrNothing),
            Some(other) => Err(ConfigError::Invalid {
                var: Self::VAR,
                value: other.to_owned(),
                reason: "expected `started` or `all-or-nothing`".to_owned(),
            }),
        }
    }
}

impl SessionSpec {
    /// The session's servers in the MCP host's terms: stdio servers run in the session's
    /// working directory, HTTP and SSE servers get the headers the client gave.
    pub fn mcp_servers(&self) -> Result<McpServers, McpError> {
        let mut servers = McpServers::new();
        for server in &self.servers {
            let (name, config) = match server {
                ServerSpec::Stdio {
                    name,
                    command,
                    args,
                    env,
                } => {
                    let mut config = ServerConfig::stdio(command.to_string_lossy(), args.clone());
                    for (key, value) in env {
                        config = config.env(key, value);
                    }
                    if let ServerConfig::Stdio(stdio) = &mut config {
                        stdio.cwd = Some(self.cwd.clone());
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
            };
            servers.push(name.clone(), config)?;
        }
        Ok(servers)
    }

    /// The host's options for the session: its working directory as the servers' root, and
    /// all-or-nothing when `start` says so.
    pub fn host_options(&self, start: ServerStart) -> HostOptions {
        HostOptions::default()
            .with_all_or_nothing(start == ServerStart::AllOrNothing)
            .with_roots([self.cwd.clone()])
    }

    /// Starts the session's servers: the host of those that started, and those that did not
    /// (none under [`ServerStart::AllOrNothing`], where one failure is the error).
    pub async fn connect(
        &self,
        start: ServerStart,
    ) -> Result<(McpHost, Vec<FailedServer>), McpError> {
        let (host, failures) =
            McpHost::connect(self.mcp_servers()?, self.host_options(start)).await?;
        let failed = failures
            .into_iter()
            .map(|failure| FailedServer::new(failure.server, failure.error.to_string()))
            .collect();
        Ok((host, failed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::ServerName;

    #[test]
    fn the_setting_reads_its_two_values_and_refuses_others_naming_the_variable() {
        let with = |value: Option<&'static str>| {
            move |name: &str| {
                Ok((name == ServerStart::VAR)
                    .then_some(value)
                    .flatten()
                    .map(str::to_owned))
            }
        };
        assert_eq!(
            ServerStart::from_lookup(&with(None)).unwrap(),
            ServerStart::WhatStarts
        );
        assert_eq!(
            ServerStart::from_lookup(&with(Some("started"))).unwrap(),
            ServerStart::WhatStarts
        );
        assert_eq!(
            ServerStart::from_lookup(&with(Some("all-or-nothing"))).unwrap(),
            ServerStart::AllOrNothing
        );
        let error = ServerStart::from_lookup(&with(Some("most"))).unwrap_err();
        assert!(
            error.to_string().contains("HOOKLOOP_ACP_SERVERS"),
            "{error}"
        );
    }

    #[test]
    fn each_kind_of_server_maps_onto_the_host_with_the_sessions_directory() {
        let spec = SessionSpec::new("/srv/p")
            .with_server(ServerSpec::Stdio {
                name: ServerName::new("a").unwrap(),
                command: "run-a".into(),
                args: vec!["--x".into()],
                env: vec![("K".into(), "v".into())],
            })
            .with_server(ServerSpec::Http {
                name: ServerName::new("b").unwrap(),
                url: "http://127.0.0.1:1/mcp".into(),
                headers: vec![("H".into(), "1".into())],
            })
            .with_server(ServerSpec::Sse {
                name: ServerName::new("c").unwrap(),
                url: "http://127.0.0.1:1/sse".into(),
                headers: Vec::new(),
            });
        let servers = spec.mcp_servers().unwrap();
        let configs: Vec<&ServerConfig> = servers.iter().map(|(_, config)| config).collect();
        assert_eq!(configs.len(), 3);
        match configs[0] {
            ServerConfig::Stdio(stdio) => {
                assert_eq!(stdio.cwd.as_deref(), Some(std::path::Path::new("/srv/p")));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(configs[1], ServerConfig::Http(_)),
            "{:?}",
            configs[1]
        );
        assert!(
            matches!(configs[2], ServerConfig::Sse(_)),
            "{:?}",
            configs[2]
        );
        assert!(!spec.host_options(ServerStart::WhatStarts).all_or_nothing);
        assert!(spec.host_options(ServerStart::AllOrNothing).all_or_nothing);
    }
}
