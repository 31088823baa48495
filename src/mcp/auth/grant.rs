//! Authorization without a person: the grants a server's `oauth` block configures.
//!
//! - the client-credentials grant (RFC 6749 §4.4) with `client_secret_basic`,
//!   `client_secret_post` or `private_key_jwt` (an RFC 7523 client assertion);
//! - the JWT-bearer grant (RFC 7523 §2.1) for workload identity federation: the workload's JWT
//!   comes from an environment variable, a file the platform keeps fresh, or a command;
//! - enterprise-managed authorization: the enterprise identity provider exchanges an ID token
//!   for an identity assertion (RFC 8693, an ID-JAG), which the server's authorization server
//!   takes as a JWT-bearer grant. rmcp's `enterprise` module does both exchanges.
//!
//! Secrets are read when a token is needed, from where the configuration says, never from the
//! configuration itself; they appear in no `Debug` output and no error message (a server's
//! error text that quotes one is scrubbed).

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::dpop::{self, Binding};
use super::jose::{self, Algorithm, Signer};
use crate::mcp::config::CHILD_ENV_PASSTHROUGH;

/// The longest secret, assertion or token response read: a larger one is refused.
const MAX_SECRET_BYTES: usize = 64 * 1024;
/// How long a token command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one token request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const CLIENT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// A secret value held in memory; its `Debug` says nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a secret (a client secret, a private key, an assertion) is read from, each time a
/// token is requested. In `.mcp.json`: `{"env": "NAME"}`, `{"file": "/path"}` or
/// `{"command": ["program", "arg"]}`; never the secret itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretSource {
    /// An environment variable of the engine.
    Env(String),
    /// A file (its surrounding whitespace is dropped): a mounted secret, a projected
    /// service-account token.
    File(PathBuf),
    /// A command whose standard output is the secret. It runs with only the variables of
    /// [`CHILD_ENV_PASSTHROUGH`], for at most 30 s.
    Command(Vec<String>),
    /// A value an embedder holds (not expressible in `.mcp.json`; such a configuration does
    /// not serialise).
    #[serde(skip)]
    Value(Secret),
}

impl<'de> Deserialize<'de> for SecretSource {
    /// One of the three forms; anything else is an error that does not quote what was
    /// written (it may be the secret itself, written where its source belongs).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let refuse = || {
            serde::de::Error::custom(
                "a secret's source is {\"env\": NAME}, {\"file\": PATH} or \
                 {\"command\": [PROGRAM, ARG...]}; the secret itself is never written here",
            )
        };
        let value = Value::deserialize(deserializer)?;
        let Value::Object(map) = value else {
            return Err(refuse());
        };
        let mut entries = map.into_iter();
        let (Some((key, value)), None) = (entries.next(), entries.next()) else {
            return Err(refuse());
        };
        match (key.as_str(), value) {
            ("env", Value::String(name)) if !name.is_empty() => Ok(Self::Env(name)),
            ("file", Value::String(path)) if !path.is_empty() => Ok(Self::File(path.into())),
            ("command", Value::Array(argv)) if !argv.is_empty() => argv
                .into_iter()
                .map(|arg| match arg {
                    Value::String(arg) => Ok(arg),
                    _ => Err(refuse()),
                })
                .collect::<Result<_, _>>()
                .map(Self::Command),
            _ => Err(refuse()),
        }
    }
}

impl SecretSource {
    /// Reads the secret. The error names the source, never a value.
    pub async fn read(&self) -> Result<Secret, GrantError> {
        let value = match self {
            Self::Env(name) => std::env::var(name).map_err(|_| {
                GrantError::Secret(format!("environment variable {name} is not set"))
            })?,
            Self::File(path) => {
                let bytes = tokio::fs::read(path).await.map_err(|e| {
                    GrantError::Secret(format!("cannot read {}: {}", path.display(), e.kind()))
                })?;
                if bytes.len() > MAX_SECRET_BYTES {
                    return Err(GrantError::Secret(format!(
                        "{} is over {MAX_SECRET_BYTES} bytes",
                        path.display()
                    )));
                }
                String::from_utf8(bytes)
                    .map_err(|_| GrantError::Secret(format!("{} is not UTF-8", path.display())))?
            }
            Self::Command(argv) => run_command(argv).await?,
            Self::Value(secret) => return Ok(secret.clone()),
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(GrantError::Secret(format!("{} is empty", self.describe())));
        }
        Ok(Secret(value.to_owned()))
    }

    fn describe(&self) -> String {
        match self {
            Self::Env(name) => format!("environment variable {name}"),
            Self::File(path) => path.display().to_string(),
            Self::Command(argv) => format!("the output of {:?}", argv.first()),
            Self::Value(_) => "the given value".into(),
        }
    }
}

async fn run_command(argv: &[String]) -> Result<String, GrantError> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| GrantError::Secret("the token command is empty".into()))?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    for name in CHILD_ENV_PASSTHROUGH {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    let output = tokio::time::timeout(COMMAND_TIMEOUT, command.output())
        .await
        .map_err(|_| GrantError::Secret(format!("the token command {program} timed out")))?
        .map_err(|e| GrantError::Secret(format!("cannot run the token command {program}: {e}")))?;
    if !output.status.success() {
        return Err(GrantError::Secret(format!(
            "the token command {program} failed ({})",
            output.status
        )));
    }
    if output.stdout.len() > MAX_SECRET_BYTES {
        return Err(GrantError::Secret(format!(
            "the token command {program} printed over {MAX_SECRET_BYTES} bytes"
        )));
    }
    String::from_utf8(output.stdout)
        .map_err(|_| GrantError::Secret(format!("the token command {program} printed non-UTF-8")))
}

/// How the client authenticates at a token endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// A public client: its id in the body, nothing else.
    #[default]
    None,
    /// `client_secret_basic`: id and secret in HTTP Basic.
    SecretBasic(SecretSource),
    /// `client_secret_post`: id and secret in the body.
    SecretPost(SecretSource),
    /// `private_key_jwt`: an RFC 7523 assertion signed with the key (PEM, PKCS#8).
    PrivateKeyJwt {
        /// The private key's source.
        key: SecretSource,
        /// The algorithm registered for the client.
        algorithm: Algorithm,
    },
}

/// A grant that needs no person, configured per server (the `oauth` block of `.mcp.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthGrant {
    /// Which grant.
    pub kind: GrantKind,
    /// The client id registered with the server's authorization server.
    pub client_id: String,
    /// How the client authenticates at the server's authorization server.
    pub auth: ClientAuth,
    /// The scopes to ask for, space-separated; none asked when unset.
    pub scope: Option<String>,
}

/// The grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantKind {
    /// The client-credentials grant.
    ClientCredentials,
    /// The JWT-bearer grant with the workload's JWT.
    JwtBearer {
        /// Where the workload's JWT comes from.
        assertion: SecretSource,
    },
    /// Enterprise-managed authorization.
    Enterprise(Box<Enterprise>),
}

/// The enterprise identity provider of [`GrantKind::Enterprise`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enterprise {
    /// Its issuer identifier.
    pub idp_issuer: String,
    /// Its token endpoint.
    pub idp_token_endpoint: String,
    /// This client's id there.
    pub idp_client_id: String,
    /// How this client authenticates there.
    pub idp_auth: ClientAuth,
    /// Where the user's or workload's ID token comes from.
    pub id_token: SecretSource,
}

/// Why a grant got no token. Never carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// A secret could not be read.
    #[error("{0}")]
    Secret(String),
    /// The private key could not sign.
    #[error(transparent)]
    Key(#[from] jose::KeyError),
    /// The token request failed or was refused.
    #[error("the token request to {endpoint} failed: {reason}")]
    Token {
        /// The token endpoint asked.
        endpoint: String,
        /// Why it failed, with any secret it quoted replaced.
        reason: String,
    },
    /// The enterprise exchange failed.
    #[error("the enterprise token exchange failed: {0}")]
    Enterprise(String),
}

/// An access token a grant obtained, as the store keeps it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantToken {
    /// The token.
    pub access_token: String,
    /// `Bearer` or `DPoP`.
    pub token_type: String,
    /// When it expires (seconds since the epoch), if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// When to obtain the next one: a minute before it expires, or a quarter of its lifetime
    /// for a token that lasts less than four minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<u64>,
    /// The scopes granted, if the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl std::fmt::Debug for GrantToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantToken")
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .field("renew_at", &self.renew_at)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl GrantToken {
    /// Whether it is still to be used (before its renewal time).
    pub fn fresh(&self) -> bool {
        self.renew_at
            .or(self.expires_at)
            .is_none_or(|at| jose::now_secs() < at)
    }

    /// The renewal time of a token obtained `now` that lasts `lasts` seconds.
    fn renewal(now: u64, lasts: Option<u64>) -> (Option<u64>, Option<u64>) {
        match lasts {
            Some(lasts) => (
                Some(now + lasts),
                Some(now + lasts - (lasts / 4).min(GRANT_MARGIN_SECS)),
            ),
            None => (None, None),
        }
    }
}

/// A token is renewed this long before it expires, at most.
const GRANT_MARGIN_SECS: u64 = 60;

/// The authorization server a grant talks to, from discovery.
pub(crate) struct Endpoint<'a> {
    /// Its issuer identifier (the audience of client assertions).
    pub issuer: &'a str,
    pub token_endpoint: &'a str,
    /// The resource indicator of the MCP server (RFC 8707).
    pub resource: &'a str,
}

/// A form body being built, with the secrets it holds (to scrub from error text).
struct Form {
    pairs: Vec<(&'static str, String)>,
    secrets: Vec<String>,
    basic: Option<String>,
}

impl OAuthGrant {
    /// Obtains a token from `endpoint`.
    /// With `dpop`, the request carries a proof of its key (and retries once with the nonce
    /// of a `use_dpop_nonce` refusal).
    pub(crate) async fn obtain(
        &self,
        http: &reqwest::Client,
        endpoint: &Endpoint<'_>,
        dpop: Option<&Binding>,
    ) -> Result<GrantToken, GrantError> {
        let mut form = Form {
            pairs: Vec::new(),
            secrets: Vec::new(),
            basic: None,
        };
        match &self.kind {
            GrantKind::ClientCredentials => {
                form.pairs.push(("grant_type", "client_credentials".into()));
            }
            GrantKind::JwtBearer { assertion } => {
                let assertion = assertion.read().await?;
                form.pairs.push(("grant_type", JWT_BEARER.into()));
                form.secrets.push(assertion.0.clone());
                form.pairs.push(("assertion", assertion.0));
            }
            GrantKind::Enterprise(enterprise) => {
                return self.enterprise(enterprise, endpoint).await;
            }
        }
        if let Some(scope) = &self.scope {
            form.pairs.push(("scope", scope.clone()));
        }
        form.pairs.push(("resource", endpoint.resource.to_owned()));
        authenticate(&mut form, &self.client_id, &self.auth, endpoint.issuer).await?;
        post(http, endpoint.token_endpoint, form, dpop).await
    }

    /// Both exchanges of enterprise-managed authorization, by rmcp.
    async fn enterprise(
        &self,
        enterprise: &Enterprise,
        endpoint: &Endpoint<'_>,
    ) -> Result<GrantToken, GrantError> {
        use rmcp::transport::auth::enterprise::{
            EmaAuthorizationServer, EmaClientAuthentication, EmaExchangeRequest,
        };
        let ema_auth = async |auth: &ClientAuth| -> Result<EmaClientAuthentication, GrantError> {
            Ok(match auth {
                ClientAuth::None => EmaClientAuthentication::None,
                ClientAuth::SecretBasic(source) => EmaClientAuthentication::ClientSecretBasic(
                    oauth2::ClientSecret::new(source.read().await?.0),
                ),
                ClientAuth::SecretPost(source) => EmaClientAuthentication::ClientSecretPost(
                    oauth2::ClientSecret::new(source.read().await?.0),
                ),
                ClientAuth::PrivateKeyJwt { .. } => {
                    return Err(GrantError::Enterprise(
                        "private_key_jwt is not supported with the enterprise grant".into(),
                    ));
                }
            })
        };
        let idp = EmaAuthorizationServer::new(
            &enterprise.idp_issuer,
            &enterprise.idp_token_endpoint,
            &enterprise.idp_client_id,
        )
        .with_client_authentication(ema_auth(&enterprise.idp_auth).await?);
        let resource_as =
            EmaAuthorizationServer::new(endpoint.issuer, endpoint.token_endpoint, &self.client_id)
                .with_client_authentication(ema_auth(&self.auth).await?);
        let id_token = enterprise.id_token.read().await?;
        let scopes: Vec<String> = self
            .scope
            .iter()
            .flat_map(|s| s.split_whitespace())
            .map(str::to_owned)
            .collect();
        let http = rmcp::transport::auth::default_oauth_http_client()
            .map_err(|e| GrantError::Enterprise(e.to_string()))?;
        let token = EmaExchangeRequest::new_with_id_token(
            idp,
            resource_as,
            endpoint.resource,
            id_token.expose(),
        )
        .with_scopes(scopes)
        .exchange(&http, &http)
        .await
        .map_err(|e| GrantError::Enterprise(e.to_string()))?;
        let mut granted: Vec<String> = token.scopes.into_iter().collect();
        granted.sort();
        let (expires_at, renew_at) =
            GrantToken::renewal(jose::now_secs(), token.expires_in.map(|d| d.as_secs()));
        Ok(GrantToken {
            access_token: token.access_token.secret().clone(),
            token_type: "Bearer".into(),
            expires_at,
            renew_at,
            scope: (!granted.is_empty()).then(|| granted.join(" ")),
        })
    }
}

/// Adds the client's authentication to `form`.
async fn authenticate(
    form: &mut Form,
    client_id: &str,
    auth: &ClientAuth,
    audience: &str,
) -> Result<(), GrantError> {
    match auth {
        ClientAuth::None => form.pairs.push(("client_id", client_id.to_owned())),
        ClientAuth::SecretBasic(source) => {
            let secret = source.read().await?;
            // RFC 6749 §2.3.1: both form-encoded before Basic encoding.
            let pair = format!("{}:{}", form_encode(client_id), form_encode(&secret.0));
            form.secrets.push(secret.0);
            form.basic = Some(format!("Basic {}", STANDARD.encode(pair)));
        }
        ClientAuth::SecretPost(source) => {
            let secret = source.read().await?;
            form.pairs.push(("client_id", client_id.to_owned()));
            form.secrets.push(secret.0.clone());
            form.pairs.push(("client_secret", secret.0));
        }
        ClientAuth::PrivateKeyJwt { key, algorithm } => {
            let pem = key.read().await?;
            let signer = Signer::from_pem(&pem.0, *algorithm)?;
            let now = jose::now_secs();
            let assertion = signer.sign(
                json!({"typ": "JWT"}),
                &json!({
                    "iss": client_id,
                    "sub": client_id,
                    "aud": audience,
                    "iat": now,
                    "exp": now + 60,
                    "jti": jose::random_id(),
                }),
            )?;
            form.pairs.push(("client_id", client_id.to_owned()));
            form.pairs
                .push(("client_assertion_type", CLIENT_ASSERTION_TYPE.into()));
            form.pairs.push(("client_assertion", assertion));
        }
    }
    Ok(())
}

fn form_encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// Posts the token request and reads the token response; with `dpop`, each try carries a new
/// proof, and a `use_dpop_nonce` refusal that brings a nonce is tried once more with it.
async fn post(
    http: &reqwest::Client,
    endpoint: &str,
    form: Form,
    dpop: Option<&Binding>,
) -> Result<GrantToken, GrantError> {
    let failed = |reason: String| GrantError::Token {
        endpoint: endpoint.to_owned(),
        reason: scrub(&reason, &form.secrets),
    };
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.pairs.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    let mut retried = false;
    let (status, bytes) = loop {
        let mut request = http
            .post(endpoint)
            .timeout(REQUEST_TIMEOUT)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(body.clone());
        if let Some(basic) = &form.basic {
            request = request.header(http::header::AUTHORIZATION, basic);
        }
        if let Some(binding) = dpop {
            request = request.header(dpop::DPOP, binding.proof("POST", endpoint, None)?);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        let status = response.status();
        let learned = dpop.is_some_and(|binding| binding.nonce.learn(response.headers()));
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?
        {
            if bytes.len() + chunk.len() > MAX_SECRET_BYTES {
                return Err(failed(format!(
                    "the response is over {MAX_SECRET_BYTES} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        if learned && !retried && dpop::token_endpoint_wants_nonce(status, &bytes) {
            retried = true;
            continue;
        }
        break (status, bytes);
    };
    let json: Value = serde_json::from_slice(&bytes)
        .map_err(|_| failed(format!("HTTP {status} with a body that is not JSON")))?;
    if !status.is_success() {
        let error = json["error"].as_str().unwrap_or("no error code");
        let reason = match json["error_description"].as_str() {
            Some(description) => format!("HTTP {status}: {error} ({description})"),
            None => format!("HTTP {status}: {error}"),
        };
        return Err(failed(reason));
    }
    let access_token = json["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| failed("the response has no access_token".into()))?;
    let (expires_at, renew_at) = GrantToken::renewal(jose::now_secs(), json["expires_in"].as_u64());
    Ok(GrantToken {
        access_token: access_token.to_owned(),
        token_type: json["token_type"].as_str().unwrap_or("Bearer").to_owned(),
        expires_at,
        renew_at,
        scope: json["scope"].as_str().map(str::to_owned),
    })
}

/// `text` with every secret in `secrets` replaced by `<redacted>`.
fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |text, secret| {
            text.replace(secret.as_str(), "<redacted>")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_renewed_before_they_expire_and_short_ones_are_still_used() {
        // An hour's token: renewed a minute before its end.
        assert_eq!(
            GrantToken::renewal(1000, Some(3600)),
            (Some(4600), Some(4540))
        );
        // A 20 s token: used for 15 s, not obtained again for every request.
        assert_eq!(
            GrantToken::renewal(1000, Some(20)),
            (Some(1020), Some(1015))
        );
        assert_eq!(GrantToken::renewal(1000, None), (None, None));
        let token = |renew_at: Option<u64>, expires_at: Option<u64>| GrantToken {
            access_token: "t".into(),
            token_type: "Bearer".into(),
            expires_at,
            renew_at,
            scope: None,
        };
        let now = jose::now_secs();
        assert!(token(Some(now + 30), Some(now + 40)).fresh());
        assert!(!token(Some(now - 1), Some(now + 40)).fresh());
        // A token stored before renewal times were kept goes by its expiry.
        assert!(!token(None, Some(now - 1)).fresh());
        assert!(token(None, None).fresh());
    }

    #[test]
    fn secrets_are_scrubbed_and_not_debugged() {
        let text = scrub("bad credentials c:hunter2 and hunter2", &["hunter2".into()]);
        assert_eq!(text, "bad credentials c:<redacted> and <redacted>");
        assert_eq!(format!("{:?}", Secret::new("hunter2")), "<redacted>");
        let source = SecretSource::Value(Secret::new("hunter2"));
        assert!(!format!("{source:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn sources_are_read_and_their_errors_name_no_value() {
        let dir = std::env::temp_dir().join(format!("hookloop-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("s");
        std::fs::write(&file, "  from-file\n").unwrap();
        let read = SecretSource::File(file).read().await.unwrap();
        assert_eq!(read.expose(), "from-file");
        let argv = vec![
            "/bin/sh".to_owned(),
            "-c".into(),
            "echo from-command".into(),
        ];
        let read = SecretSource::Command(argv).read().await.unwrap();
        assert_eq!(read.expose(), "from-command");
        let failing = vec![
            "/bin/sh".to_owned(),
            "-c".into(),
            "echo leaked; exit 3".into(),
        ];
        let error = SecretSource::Command(failing).read().await.unwrap_err();
        assert!(!error.to_string().contains("leaked"), "{error}");
        let error = SecretSource::File(dir.join("missing"))
            .read()
            .await
            .unwrap_err();
        assert!(error.to_string().contains("cannot read"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
