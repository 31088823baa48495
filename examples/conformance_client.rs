//! A client for the MCP conformance suite (`@modelcontextprotocol/conformance client`), built on
//! the real [`McpHost`]: run as `conformance_client <url>`, with the scenario's name in
//! `MCP_CONFORMANCE_SCENARIO`. `.ci/after.d/40-conformance.sh` drives it.
//!
//! Every scenario gets the host's own behaviour: connect over streamable HTTP (negotiating the
//! newest protocol rmcp speaks, falling back to `initialize`), list the tools, then call each
//! tool once: with the arguments the scenario's context gives for it (`toolCalls`), else with
//! arguments made from its input schema (the first example or enum value, else `1` for
//! numbers, `true` for booleans, `"test"` for strings). A server's question
//! (elicitation) is accepted with the form's defaults. A server that asks for OAuth is logged
//! in to headlessly, through the code `hookloop mcp login` runs, with the browser step replaced
//! by following the authorization page's redirects (the suite's authorization server approves
//! at once); the scenario's context may give a pre-registered client. A scenario whose context
//! gives a machine's credentials (a client secret, a private key, a workload's JWT, an
//! enterprise ID token) gets the server's `oauth` grant instead, as `.mcp.json` would configure
//! it, with the secrets held in memory.
//!
//! The JSON Schema scenario's echo tool (`json_schema_echo`) is called with the input schema the
//! host offers the model for the scenario's other tool: what reaches the model, whole.

use std::process::ExitCode;
use std::sync::Arc;

use hookloop::machine::{CallId, ToolCall};
use hookloop::mcp::auth::{
    Algorithm, Authorize, ClientAuth, Enterprise, GrantKind, OAuthClient, OAuthGrant, OAuthOptions,
    Secret, SecretSource, TokenStore,
};
use hookloop::mcp::{HostOptions, McpHost, McpServers, ServerConfig, schema_defaults};
use hookloop::ports::{Answer, ElicitAnswer, Elicitation, ElicitationMode, Person, ToolHost};
use serde_json::{Map, Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOOKLOOP_LOG")
                .unwrap_or_else(|_| "hookloop=debug".into()),
        )
        .try_init();
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: conformance_client <server url>");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    eprintln!("conformance client: scenario {scenario:?} at {url}");
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("conformance client: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<(), String> {
    let context = context();
    let mut server = ServerConfig::http(url);
    if let Some(grant) = grant(&context)? {
        server = server.oauth(grant);
    }
    let servers = McpServers::new()
        .with("conformance", server)
        .map_err(|e| e.to_string())?;
    let options = HostOptions::default()
        .with_all_or_nothing(true)
        .with_oauth(oauth_options(&context));
    let (host, _) = McpHost::connect(servers, options)
        .await
        .map_err(|e| e.to_string())?;
    host.set_person(Arc::new(Defaults));
    let catalog = host.catalog();
    let given = given_calls(&context);
    for server in &catalog.servers {
        for tool in &server.tools {
            if hookloop::hooks::is_hook(&tool.name) {
                continue;
            }
            let echoed = (tool.name == SCHEMA_ECHO_TOOL)
                .then(|| server.tools.iter().find(|t| t.name != SCHEMA_ECHO_TOOL))
                .flatten()
                .map(|other| json!({"schema": other.input_schema}));
            let arguments = given
                .iter()
                .find(|(name, _)| *name == tool.name)
                .map(|(_, arguments)| arguments.clone())
                .or(echoed)
                .unwrap_or_else(|| arguments_for(&tool.input_schema));
            let call = ToolCall {
                id: CallId(format!("call-{}", tool.name)),
                name: hookloop::hooks::qualify(server.server.as_str(), &tool.name),
                arguments,
            };
            let output = host.call_tool(&call).await;
            eprintln!(
                "conformance client: {} -> {}{}",
                call.name,
                if output.is_error { "error: " } else { "" },
                output.joined_text()
            );
        }
    }
    Ok(())
}

/// The JSON Schema scenario's tool that echoes the schema it is given.
const SCHEMA_ECHO_TOOL: &str = "json_schema_echo";

/// The grant a scenario's context configures, if it gives a machine's credentials.
fn grant(context: &Value) -> Result<Option<OAuthGrant>, String> {
    let field = |name: &str| context.get(name).and_then(Value::as_str).map(str::to_owned);
    let secret = |name: &str| field(name).map(|v| SecretSource::Value(Secret::new(v)));
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let client_id = field("client_id").unwrap_or_default();
    let (kind, auth) = if let Some(key) = secret("private_key_pem") {
        let algorithm = match field("signing_algorithm").as_deref() {
            Some("RS256") => Algorithm::RS256,
            Some("ES256") | None => Algorithm::ES256,
            Some(other) => return Err(format!("signing algorithm {other} is not supported")),
        };
        (
            GrantKind::ClientCredentials,
            ClientAuth::PrivateKeyJwt { key, algorithm },
        )
    } else if let Some(assertion) = secret("valid_jwt") {
        (GrantKind::JwtBearer { assertion }, ClientAuth::None)
    } else if let Some(id_token) = secret("idp_id_token") {
        let enterprise = Enterprise {
            idp_issuer: field("idp_issuer").unwrap_or_default(),
            idp_token_endpoint: field("idp_token_endpoint").unwrap_or_default(),
            idp_client_id: field("idp_client_id").unwrap_or_default(),
            idp_auth: ClientAuth::None,
            id_token,
        };
        let auth = secret("client_secret").map_or(ClientAuth::None, ClientAuth::SecretBasic);
        (GrantKind::Enterprise(Box::new(enterprise)), auth)
    } else if scenario.starts_with("auth/client-credentials")
        && let Some(client_secret) = secret("client_secret")
    {
        (
            GrantKind::ClientCredentials,
            ClientAuth::SecretBasic(client_secret),
        )
    } else {
        return Ok(None);
    };
    Ok(Some(OAuthGrant {
        kind,
        client_id,
        auth,
        scope: None,
        issuer: None,
    }))
}

/// The suite's person: accepts every question, with the form's defaults.
struct Defaults;

impl Person for Defaults {
    fn elicit(&self, question: Elicitation) -> Answer<'_> {
        let content = match &question.mode {
            ElicitationMode::Form { schema } => schema_defaults(schema),
            ElicitationMode::Url { .. } => Map::new(),
        };
        eprintln!(
            "conformance client: accepting {:?} with {content:?}",
            question.message
        );
        Box::pin(std::future::ready(ElicitAnswer::Accept(content)))
    }
}

/// The scenario's context (`MCP_CONFORMANCE_CONTEXT`), `null` when there is none.
fn context() -> Value {
    std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

/// The calls a scenario asks for by name, with their arguments (`toolCalls`): the values it
/// checks the requests against (the custom-header scenario's encodings, for one).
fn given_calls(context: &Value) -> Vec<(String, Value)> {
    context
        .get("toolCalls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|call| {
            let name = call.get("name")?.as_str()?.to_owned();
            let arguments = call.get("arguments").cloned().unwrap_or_else(|| json!({}));
            Some((name, arguments))
        })
        .collect()
}

/// Headless logins, tokens in memory (never in the user's store), and the client the scenario
/// names: a pre-registered one from the context, else the suite's client metadata document URL
/// (used where the authorization server takes one), else registration.
fn oauth_options(context: &Value) -> OAuthOptions {
    let field = |name: &str| context.get(name).and_then(Value::as_str).map(str::to_owned);
    OAuthOptions {
        store: TokenStore::memory(),
        authorize: Authorize::FollowRedirects,
        client: OAuthClient {
            client_id: field("client_id"),
            client_secret: field("client_secret"),
            client_metadata_url: Some(CIMD_URL.to_owned()),
        },
    }
}

/// The client metadata document URL the suite's authorization servers accept without
/// fetching it.
const CIMD_URL: &str = "https://conformance-test.local/client-metadata.json";

/// Arguments that satisfy a simple input schema: each required property gets a value of its
/// type.
fn arguments_for(schema: &Value) -> Value {
    let mut arguments = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);
    if let (Some(properties), Some(required)) = (properties, required) {
        for name in required.iter().filter_map(Value::as_str) {
            let property = properties.get(name).unwrap_or(&Value::Null);
            arguments.insert(name.to_owned(), value_for(property));
        }
    }
    Value::Object(arguments)
}

fn value_for(property: &Value) -> Value {
    if let Some(first) = property
        .get("examples")
        .or_else(|| property.get("enum"))
        .and_then(Value::as_array)
        .and_then(|values| values.first())
    {
        return first.clone();
    }
    if let Some(default) = property.get("default") {
        return default.clone();
    }
    match property.get("type").and_then(Value::as_str) {
        Some("number" | "integer") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("object") => json!({}),
        Some("null") => Value::Null,
        _ => json!("test"),
    }
}
