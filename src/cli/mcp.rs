//! `hookloop mcp login | logout | list`: the logins of OAuth-protected HTTP servers (of either
//! transport), and what each configured server offers.

use std::path::Path;
use std::process::ExitCode;

use hookloop::ToolHost;
use hookloop::mcp::auth::{Authorize, LoginState, OAuthClient, OAuthOptions, ShowUrl, TokenStore};
use hookloop::mcp::{HostOptions, HttpConfig, McpHost, McpServers, ServerConfig};
use hookloop::text::for_terminal;

use super::{Failure, exit, wire};

/// The variable holding the secret of a pre-registered client (`--client-id`): a secret on the
/// command line would show in the process list and the shell's history.
pub const CLIENT_SECRET_VAR: &str = "HOOKLOOP_OAUTH_CLIENT_SECRET";

/// How `login` identifies hookloop to the authorization server, when not by registration.
#[derive(Debug, Default)]
pub struct LoginClient {
    pub client_id: Option<String>,
    pub client_metadata_url: Option<String>,
}

/// `hookloop mcp proxy --name NAME -- COMMAND ARGS…`: relays a host to the server, its hooks
/// hidden from the host and served on the private socket.
pub async fn proxy(name: &str, command: &[String]) -> ExitCode {
    if let Err(e) = hookloop::hooks::ServerName::new(name) {
        return Failure::usage(format!("--name {name}: {e}")).report();
    }
    let Some((program, args)) = command.split_first() else {
        return Failure::usage("mcp proxy needs the server's command after `--`").report();
    };
    match hookloop::bridge::proxy::run(name, program, args).await {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => Failure::failed(e).report(),
    }
}

/// `hookloop mcp login <server>`: runs the authorization flow for one configured HTTP server
/// (the URL printed, a browser opened when there is a display, the redirect awaited on a
/// loopback address) and stores its tokens, replacing any earlier login.
pub async fn login(server: &str, mcp_config: Option<&Path>, client: LoginClient) -> ExitCode {
    match login_inner(server, mcp_config, client).await {
        Ok(()) => ExitCode::from(exit::OK),
        Err(failure) => failure.report(),
    }
}

async fn login_inner(
    server: &str,
    mcp_config: Option<&Path>,
    client: LoginClient,
) -> Result<(), Failure> {
    let (servers, url) = one_http_server(server, mcp_config)?;
    let store = store()?;
    let secret = match std::env::var(CLIENT_SECRET_VAR) {
        Ok(secret) if client.client_id.is_some() => Some(secret),
        Ok(_) => {
            return Err(Failure::usage(format!(
                "{CLIENT_SECRET_VAR} is set but --client-id is not: a secret belongs to a client id"
            )));
        }
        Err(_) => None,
    };
    // The new login runs on a store of its own that starts without the stored login, so that
    // the server asks again; the scopes asked for before (a step-up's) are kept, and asked for
    // again. The stored login stays in use until the new one has succeeded, and is then
    // replaced in one write: a login that fails or is cut short loses nothing.
    let staged = TokenStore::memory();
    let before = store.get(&url).map_err(Failure::failed)?;
    if let Some(before) = &before {
        staged
            .remember_scopes(&url, &before.requested_scopes)
            .map_err(Failure::failed)?;
    }
    let options = HostOptions::default()
        .with_all_or_nothing(true)
        .with_oauth(OAuthOptions {
            store: staged.clone(),
            authorize: Authorize::Browser(ShowUrl::new(|server, url| {
                // The URL is the authorization server's endpoint: its text is not ours.
                eprintln!(
                    "To log in to {server}, open this address in a browser:\n\n  {}\n",
                    for_terminal(url)
                );
            })),
            client: OAuthClient {
                client_id: client.client_id,
                client_secret: secret,
                client_metadata_url: client.client_metadata_url,
            },
        });
    let connected = McpHost::connect(servers, options).await;
    // The scopes this attempt asked for are kept even when it failed: the next login asks
    // for them too.
    let asked = staged
        .get(&url)
        .map_err(Failure::failed)?
        .map(|entry| entry.requested_scopes)
        .unwrap_or_default();
    let (host, _) = match connected {
        Ok(connected) => connected,
        Err(e) => {
            store
                .remember_scopes(&url, &asked)
                .map_err(Failure::failed)?;
            return Err(Failure::failed(format!("login to {server} failed: {e}")));
        }
    };
    if let Some(login) = staged.get(&url).map_err(Failure::failed)? {
        // In one write: the file holds the old login or the new one, never neither.
        store
            .update(&url, |_| Some(login))
            .map_err(Failure::failed)?;
    }
    let tools = host
        .catalog()
        .servers
        .iter()
        .map(|s| s.tools.len())
        .sum::<usize>();
    match LoginState::of(&store, &url).map_err(Failure::failed)? {
        LoginState::None => println!("{server} did not ask for a login; it offers {tools} tools"),
        // The granted scopes are the authorization server's words.
        state => println!(
            "{server}: {}; it offers {tools} tools",
            for_terminal(&state.to_string())
        ),
    }
    Ok(())
}

/// `hookloop mcp logout <server>`: forgets the server's tokens.
pub fn logout(server: &str, mcp_config: Option<&Path>) -> ExitCode {
    let run = || -> Result<(), Failure> {
        let (_, url) = one_http_server(server, mcp_config)?;
        if store()?.remove(&url).map_err(Failure::failed)? {
            println!("logged out of {server}");
        } else {
            println!("{server} had no login");
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::from(exit::OK),
        Err(failure) => failure.report(),
    }
}

/// `hookloop mcp list`: starts every configured server (without logging in) and prints, for
/// each, its transport, protocol version, tools, hooks and login.
pub async fn list(mcp_config: Option<&Path>) -> ExitCode {
    match list_inner(mcp_config).await {
        Ok(()) => ExitCode::from(exit::OK),
        Err(failure) => failure.report(),
    }
}

async fn list_inner(mcp_config: Option<&Path>) -> Result<(), Failure> {
    let servers = wire::load_mcp_config(mcp_config)?;
    if servers.is_empty() {
        println!("no MCP servers are configured (.mcp.json, or --mcp-config FILE)");
        return Ok(());
    }
    let store = store()?;
    let configs: Vec<_> = servers
        .iter()
        .map(|(n, c)| (n.clone(), c.clone()))
        .collect();
    let options = HostOptions::default().with_oauth(OAuthOptions {
        store: store.clone(),
        ..OAuthOptions::default()
    });
    let (host, failures) = McpHost::connect(servers, options)
        .await
        .map_err(Failure::failed)?;
    let catalog = host.catalog();
    for (name, config) in configs {
        let (transport, auth) = match &config {
            ServerConfig::Stdio(stdio) => {
                let mut line = stdio.command.clone();
                for arg in &stdio.args {
                    line.push(' ');
                    line.push_str(arg);
                }
                (format!("stdio: {line}"), None)
            }
            ServerConfig::Http(http) => (
                format!("http: {}", http.url),
                Some(login_state(&store, http)?),
            ),
            ServerConfig::Sse(http) => (
                format!("sse: {}", http.url),
                Some(login_state(&store, http)?),
            ),
            _ => ("a transport this command does not know".to_owned(), None),
        };
        println!("{name} ({transport})");
        match catalog.servers.iter().find(|s| s.server == name) {
            Some(server) => {
                let (hooks, tools): (Vec<_>, Vec<_>) = server
                    .tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .partition(|t| hookloop::hooks::is_hook(t));
                let version = host
                    .protocol_version(name.as_str())
                    .unwrap_or_else(|| "unknown".into());
                println!("  protocol {}", for_terminal(&version));
                if let Some(transport) = host.transport(name.as_str()) {
                    // An `http` server's URL may turn out to speak the older transport.
                    println!("  transport {}", for_terminal(&transport.to_string()));
                }
                // Tool names and errors are the server's words.
                println!(
                    "  tools ({}): {}",
                    tools.len(),
                    for_terminal(&or_none(&tools))
                );
                println!(
                    "  hooks ({}): {}",
                    hooks.len(),
                    for_terminal(&or_none(&hooks))
                );
            }
            None => {
                let error = failures
                    .iter()
                    .find(|f| f.server == name)
                    .map(|f| f.error.to_string())
                    .unwrap_or_else(|| "not running".into());
                println!("  did not start: {}", for_terminal(&error));
            }
        }
        if let Some(auth) = auth {
            println!("  login: {}", for_terminal(&auth));
        }
    }
    Ok(())
}

/// What `list` says of an HTTP server's login.
fn login_state(store: &TokenStore, http: &HttpConfig) -> Result<String, Failure> {
    if http
        .headers
        .keys()
        .any(|h| h.eq_ignore_ascii_case("authorization"))
    {
        return Ok("Authorization header from the configuration".to_owned());
    }
    LoginState::of(store, &http.url)
        .map(|state| state.to_string())
        .map_err(Failure::failed)
}

fn or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The user's token store.
fn store() -> Result<TokenStore, Failure> {
    TokenStore::default_path()
        .map(TokenStore::file)
        .map_err(Failure::usage)
}

/// The configuration of `server` alone, which must be an HTTP server, and its URL.
fn one_http_server(
    server: &str,
    mcp_config: Option<&Path>,
) -> Result<(McpServers, String), Failure> {
    let servers = wire::load_mcp_config(mcp_config)?;
    let Some((_, config)) = servers.iter().find(|(name, _)| name.as_str() == server) else {
        let names: Vec<&str> = servers.iter().map(|(n, _)| n.as_str()).collect();
        return Err(Failure::usage(format!(
            "no server named {server:?} is configured (configured: {})",
            or_none(&names)
        )));
    };
    let (ServerConfig::Http(http) | ServerConfig::Sse(http)) = config else {
        return Err(Failure::usage(format!(
            "{server} is a stdio server; only HTTP servers log in"
        )));
    };
    let url = http.url.clone();
    let alone = McpServers::new()
        .with(server, config.clone())
        .map_err(Failure::usage)?;
    Ok((alone, url))
}
