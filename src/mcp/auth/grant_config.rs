//! The `oauth` block of a server in `.mcp.json`, read into an [`OAuthGrant`]:
//!
//! ```json
//! "oauth": {
//!   "grant": "client_credentials",
//!   "client_id": "ci-runner",
//!   "client_auth": "client_secret_basic",
//!   "client_secret": {"env": "MCP_CLIENT_SECRET"},
//!   "scope": "tools.read",
//!   "issuer": "https://auth.example.com"
//! }
//! ```

use serde::{Deserialize, Serialize};

use super::grant::{ClientAuth, Enterprise, GrantKind, OAuthGrant, SecretSource};
use super::jose::Algorithm;

/// The block as written.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGrant {
    grant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_auth: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<SecretSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    private_key: Option<SecretSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signing_algorithm: Option<Algorithm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    assertion: Option<SecretSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idp_issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idp_token_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idp_client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idp_client_auth: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idp_client_secret: Option<SecretSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id_token: Option<SecretSource>,
}

/// The authentication a block names; the method defaults to what the secrets given imply.
fn client_auth(
    method: Option<&str>,
    secret: Option<SecretSource>,
    key: Option<(SecretSource, Algorithm)>,
    prefix: &str,
) -> Result<ClientAuth, String> {
    let method = method.unwrap_or(match (&secret, &key) {
        (Some(_), _) => "client_secret_basic",
        (None, Some(_)) => "private_key_jwt",
        (None, None) => "none",
    });
    let need_secret = |secret: Option<SecretSource>| {
        secret.ok_or_else(|| {
            format!("\"{prefix}client_auth\": {method:?} needs \"{prefix}client_secret\"")
        })
    };
    match method {
        "none" => Ok(ClientAuth::None),
        "client_secret_basic" => Ok(ClientAuth::SecretBasic(need_secret(secret)?)),
        "client_secret_post" => Ok(ClientAuth::SecretPost(need_secret(secret)?)),
        "private_key_jwt" => {
            let (key, algorithm) =
                key.ok_or_else(|| "\"private_key_jwt\" needs \"private_key\"".to_owned())?;
            Ok(ClientAuth::PrivateKeyJwt { key, algorithm })
        }
        other => Err(format!(
            "\"{prefix}client_auth\": {other:?} is not one of \"client_secret_basic\", \
             \"client_secret_post\", \"private_key_jwt\", \"none\""
        )),
    }
}

impl TryFrom<RawGrant> for OAuthGrant {
    type Error = String;

    fn try_from(raw: RawGrant) -> Result<Self, String> {
        let key = raw
            .private_key
            .map(|key| (key, raw.signing_algorithm.unwrap_or_default()));
        let auth = client_auth(raw.client_auth.as_deref(), raw.client_secret, key, "")?;
        let required = |value: Option<String>, name: &str| {
            value
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| format!("the {:?} grant needs \"{name}\"", raw.grant))
        };
        let kind = match raw.grant.as_str() {
            "client_credentials" => GrantKind::ClientCredentials,
            "jwt_bearer" => GrantKind::JwtBearer {
                assertion: raw
                    .assertion
                    .ok_or("the \"jwt_bearer\" grant needs \"assertion\"")?,
            },
            "enterprise" => GrantKind::Enterprise(Box::new(Enterprise {
                idp_issuer: required(raw.idp_issuer, "idp_issuer")?,
                idp_token_endpoint: required(raw.idp_token_endpoint, "idp_token_endpoint")?,
                idp_client_id: required(raw.idp_client_id, "idp_client_id")?,
                idp_auth: client_auth(
                    raw.idp_client_auth.as_deref(),
                    raw.idp_client_secret,
                    None,
                    "idp_",
                )?,
                id_token: raw
                    .id_token
                    .ok_or("the \"enterprise\" grant needs \"id_token\"")?,
            })),
            other => {
                return Err(format!(
                    "\"grant\": {other:?} is not one of \"client_credentials\", \"jwt_bearer\", \
                     \"enterprise\""
                ));
            }
        };
        let client_id = match (&kind, raw.client_id) {
            (_, Some(id)) if !id.trim().is_empty() => id,
            // A workload's JWT identifies it; the client id is only sent when given.
            (GrantKind::JwtBearer { .. }, _) => String::new(),
            _ => return Err(format!("the {:?} grant needs \"client_id\"", raw.grant)),
        };
        let issuer = match raw.issuer {
            Some(issuer) if reqwest::Url::parse(issuer.trim()).is_err() => {
                return Err("\"issuer\" is not a URL".to_owned());
            }
            issuer => issuer.map(|i| i.trim().to_owned()),
        };
        Ok(Self {
            kind,
            client_id,
            auth,
            scope: raw.scope.filter(|s| !s.trim().is_empty()),
            issuer,
        })
    }
}

fn method_name(auth: &ClientAuth) -> &'static str {
    match auth {
        ClientAuth::None => "none",
        ClientAuth::SecretBasic(_) => "client_secret_basic",
        ClientAuth::SecretPost(_) => "client_secret_post",
        ClientAuth::PrivateKeyJwt { .. } => "private_key_jwt",
    }
}

fn secret_of(auth: &ClientAuth) -> Option<SecretSource> {
    match auth {
        ClientAuth::SecretBasic(s) | ClientAuth::SecretPost(s) => Some(s.clone()),
        _ => None,
    }
}

impl From<OAuthGrant> for RawGrant {
    fn from(grant: OAuthGrant) -> Self {
        let mut raw = RawGrant {
            client_id: (!grant.client_id.is_empty()).then(|| grant.client_id.clone()),
            client_auth: Some(method_name(&grant.auth).into()),
            client_secret: secret_of(&grant.auth),
            scope: grant.scope.clone(),
            issuer: grant.issuer.clone(),
            ..RawGrant::default()
        };
        if let ClientAuth::PrivateKeyJwt { key, algorithm } = &grant.auth {
            raw.private_key = Some(key.clone());
            raw.signing_algorithm = Some(*algorithm);
        }
        match grant.kind {
            GrantKind::ClientCredentials => raw.grant = "client_credentials".into(),
            GrantKind::JwtBearer { assertion } => {
                raw.grant = "jwt_bearer".into();
                raw.assertion = Some(assertion);
            }
            GrantKind::Enterprise(enterprise) => {
                raw.grant = "enterprise".into();
                raw.idp_issuer = Some(enterprise.idp_issuer);
                raw.idp_token_endpoint = Some(enterprise.idp_token_endpoint);
                raw.idp_client_id = Some(enterprise.idp_client_id);
                raw.idp_client_auth = Some(method_name(&enterprise.idp_auth).into());
                raw.idp_client_secret = secret_of(&enterprise.idp_auth);
                raw.id_token = Some(enterprise.id_token);
            }
        }
        raw
    }
}

impl<'de> Deserialize<'de> for OAuthGrant {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        RawGrant::deserialize(deserializer)?
            .try_into()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for OAuthGrant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        RawGrant::from(self.clone()).serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(json: &str) -> Result<OAuthGrant, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn blocks_read_into_grants_and_back() {
        let cc = grant(
            r#"{"grant": "client_credentials", "client_id": "c",
                "client_secret": {"env": "S"}, "scope": "a b",
                "issuer": "https://auth.example.com"}"#,
        )
        .unwrap();
        assert_eq!(
            cc.auth,
            ClientAuth::SecretBasic(SecretSource::Env("S".into()))
        );
        assert_eq!(cc.scope.as_deref(), Some("a b"));
        assert_eq!(cc.issuer.as_deref(), Some("https://auth.example.com"));
        let jwt = grant(
            r#"{"grant": "client_credentials", "client_id": "c",
                "private_key": {"file": "/k.pem"}, "signing_algorithm": "RS256"}"#,
        )
        .unwrap();
        assert_eq!(
            jwt.auth,
            ClientAuth::PrivateKeyJwt {
                key: SecretSource::File("/k.pem".into()),
                algorithm: Algorithm::RS256
            }
        );
        let wif =
            grant(r#"{"grant": "jwt_bearer", "assertion": {"command": ["t", "x"]}}"#).unwrap();
        assert_eq!(wif.client_id, "");
        for g in [cc, jwt, wif] {
            let text = serde_json::to_string(&g).unwrap();
            assert_eq!(grant(&text).unwrap(), g);
        }
    }

    #[test]
    fn bad_blocks_say_what_is_wrong() {
        let cases = [
            (
                r#"{"grant": "password", "client_id": "c"}"#,
                "\"password\" is not one of",
            ),
            (r#"{"grant": "client_credentials"}"#, "needs \"client_id\""),
            (
                r#"{"grant": "client_credentials", "client_id": "c", "client_auth": "client_secret_post"}"#,
                "needs \"client_secret\"",
            ),
            (r#"{"grant": "jwt_bearer"}"#, "needs \"assertion\""),
            (
                r#"{"grant": "client_credentials", "client_id": "c", "issuer": "auth server"}"#,
                "\"issuer\" is not a URL",
            ),
            (
                r#"{"grant": "enterprise", "client_id": "c", "id_token": {"env": "T"}}"#,
                "needs \"idp_issuer\"",
            ),
            // A secret written inline is refused: only its source is configured.
            (
                r#"{"grant": "client_credentials", "client_id": "c", "client_secret": "hunter2"}"#,
                "the secret itself is never written here",
            ),
        ];
        for (json, expected) in cases {
            let error = grant(json).unwrap_err();
            assert!(error.contains(expected), "{json}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
