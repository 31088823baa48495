//! DPoP (RFC 9449): access tokens bound to a key pair of the client's, so that a token that
//! leaks is useless without the private key.
//!
//! - The key: ES256 (P-256) on *ring*, one per token store. A file store keeps it beside its
//!   file (`<store>.dpop-key.pem`, PKCS#8, mode 0600, created once and never rewritten: tokens
//!   bound to it outlive any process); a memory store holds one for as long as it lives.
//! - When: a server whose authorization server advertises `dpop_signing_alg_values_supported`
//!   with `ES256` gets proofs on its token requests (the login's code exchange and refreshes,
//!   the headless grants); a token that comes back with `token_type: DPoP` is presented as
//!   `Authorization: DPoP <token>` with a proof on every request. Any other server is talked
//!   to exactly as before, with bearer tokens.
//! - Proofs: a new one for every request, never reused (a fresh `jti`); `htm` and `htu` (the
//!   URL without query or fragment), `iat`, `ath` (the token's SHA-256) on resource requests,
//!   and the server's `nonce` once it asked for one.
//! - Nonces: a `use_dpop_nonce` refusal (the token endpoint's `400`, the resource server's
//!   `401`) is answered by one retry with the nonce it carried in `DPoP-Nonce`.
//!
//! The private key appears in no `Debug` output, log or error; only its public half goes out,
//! in each proof's header.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use super::jose::{self, Algorithm, KeyError, Signer};
use crate::text::lock;

/// The request header that carries a proof, and the one that carries a server's nonce.
pub(crate) const DPOP: &str = "DPoP";
/// The response header of a server's nonce.
pub(crate) const DPOP_NONCE: &str = "DPoP-Nonce";
/// The error code of a server that wants a (new) nonce in the proof.
pub(crate) const USE_DPOP_NONCE: &str = "use_dpop_nonce";
/// The longest nonce kept: a server's header is not trusted to be small.
const MAX_NONCE: usize = 1024;

/// A DPoP key pair. Cheap to share; its `Debug` names only the public key's thumbprint.
pub(crate) struct DpopKey {
    signer: Signer,
    /// The public key as a JWK (RFC 7517), as each proof's header carries it.
    jwk: Value,
    /// Its RFC 7638 thumbprint, what a bound token's `cnf.jkt` names.
    thumbprint: String,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopKey")
            .field("thumbprint", &self.thumbprint)
            .finish_non_exhaustive()
    }
}

impl DpopKey {
    /// A new key pair, and its PKCS#8 document (the only copy of the private key).
    pub(crate) fn generate() -> Result<(Self, Vec<u8>), KeyError> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| KeyError::Signing)?;
        let der = pkcs8.as_ref().to_vec();
        Ok((Self::from_pkcs8(&der)?, der))
    }

    /// The key pair of a PKCS#8 document.
    pub(crate) fn from_pkcs8(der: &[u8]) -> Result<Self, KeyError> {
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &SystemRandom::new())
                .map_err(|_| KeyError::Rejected("ES256 (P-256)"))?;
        // An uncompressed P-256 point: 0x04, then x and y, 32 bytes each.
        let point = pair.public_key().as_ref();
        let (x, y) = match point {
            [4, rest @ ..] if rest.len() == 64 => rest.split_at(32),
            _ => return Err(KeyError::Rejected("ES256 (P-256)")),
        };
        let (x, y) = (URL_SAFE_NO_PAD.encode(x), URL_SAFE_NO_PAD.encode(y));
        // RFC 7638 §3: the required members, in lexicographic order, without whitespace.
        let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        let thumbprint = URL_SAFE_NO_PAD.encode(sha256(canonical.as_bytes()));
        Ok(Self {
            signer: Signer::Ec(pair),
            jwk: json!({"kty": "EC", "crv": "P-256", "x": x, "y": y}),
            thumbprint,
        })
    }

    /// A new proof for a `method` request to `url`: for `access_token` when the request
    /// presents one, with the server's `nonce` when it gave one.
    pub(crate) fn proof(
        &self,
        method: &str,
        url: &str,
        nonce: Option<&str>,
        access_token: Option<&str>,
    ) -> Result<String, KeyError> {
        let mut claims = json!({
            "jti": jose::random_id(),
            "htm": method,
            "htu": htu(url),
            "iat": jose::now_secs(),
        });
        if let Some(nonce) = nonce {
            claims["nonce"] = json!(nonce);
        }
        if let Some(token) = access_token {
            claims["ath"] = json!(URL_SAFE_NO_PAD.encode(sha256(token.as_bytes())));
        }
        self.signer
            .sign(json!({"typ": "dpop+jwt", "jwk": self.jwk}), &claims)
    }

    /// The key of the file store at `store`, created when there is none yet.
    pub(crate) fn for_file_store(store: &Path) -> Result<Self, DpopKeyError> {
        let path = key_path(store);
        match std::fs::read_to_string(&path) {
            Ok(pem) => {
                return jose::pem_body(&pem, "PRIVATE KEY")
                    .ok_or(KeyError::NotPem)
                    .and_then(|der| Self::from_pkcs8(&der))
                    .map_err(|source| DpopKeyError::Key { path, source });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(DpopKeyError::Io { path, source }),
        }
        let (key, der) = Self::generate().map_err(|source| DpopKeyError::Key {
            path: path.clone(),
            source,
        })?;
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(der)
        );
        match create_once(&path, pem.as_bytes()) {
            Ok(()) => Ok(key),
            // Another process made it first: its key is the store's.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::for_file_store(store),
            Err(source) => Err(DpopKeyError::Io { path, source }),
        }
    }
}

/// Why the store's DPoP key could not be had. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DpopKeyError {
    /// The key file could not be read or written.
    #[error("DPoP key {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No key could be made.
    #[error("cannot make a DPoP key: {0}")]
    Generate(#[source] KeyError),
    /// The key file holds no usable key.
    #[error("DPoP key {path}: {source}")]
    Key {
        path: PathBuf,
        #[source]
        source: KeyError,
    },
}

/// The key file of the store at `store`: `<store>.dpop-key.pem` beside it.
pub(crate) fn key_path(store: &Path) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_owned();
    name.push(".dpop-key.pem");
    store.with_file_name(name)
}

/// Writes `contents` to a new file at `path` (mode 0600 from its creation) all at once: a
/// sibling temporary file hard-linked into place, so that no reader ever sees half a key and
/// a second writer gets `AlreadyExists`.
fn create_once(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::private::create_dir(dir)?;
    let tmp = dir.join(format!(
        ".dpop-key.{}.{:x}.tmp",
        std::process::id(),
        fastrand::u64(..)
    ));
    let written = (|| {
        let mut out = crate::private::write_options()
            .create_new(true)
            .open(&tmp)?;
        out.write_all(contents)?;
        out.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    written
}

/// The nonce a server gave last, for the next proof to it.
#[derive(Debug, Default)]
pub(crate) struct Nonce(Mutex<Option<String>>);

impl Nonce {
    /// The nonce to put in the next proof.
    pub(crate) fn get(&self) -> Option<String> {
        lock(&self.0).clone()
    }

    /// Keeps the nonce of a response's `DPoP-Nonce` header, if it has a usable one; whether
    /// it did.
    pub(crate) fn learn(&self, headers: &http::HeaderMap) -> bool {
        let Some(nonce) = headers
            .get(DPOP_NONCE)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= MAX_NONCE)
        else {
            return false;
        };
        *lock(&self.0) = Some(nonce.to_owned());
        true
    }
}

/// A key and the nonce of one server (the token endpoint, or the resource server).
#[derive(Clone, Debug)]
pub(crate) struct Binding {
    pub key: Arc<DpopKey>,
    pub nonce: Arc<Nonce>,
}

impl Binding {
    /// A binding to `key` with no nonce yet.
    pub(crate) fn new(key: Arc<DpopKey>) -> Self {
        Self {
            key,
            nonce: Arc::default(),
        }
    }

    /// A new proof for a request to this binding's server, with its latest nonce.
    pub(crate) fn proof(
        &self,
        method: &str,
        url: &str,
        access_token: Option<&str>,
    ) -> Result<String, KeyError> {
        self.key
            .proof(method, url, self.nonce.get().as_deref(), access_token)
    }
}

/// Whether an authorization server's metadata asks for DPoP in a form this client makes:
/// `dpop_signing_alg_values_supported` (RFC 9449 §5.1) naming ES256.
pub(crate) fn advertised(metadata: &rmcp::transport::auth::AuthorizationMetadata) -> bool {
    metadata
        .additional_fields
        .get("dpop_signing_alg_values_supported")
        .and_then(Value::as_array)
        .is_some_and(|algs| {
            algs.iter()
                .any(|alg| alg.as_str() == Some(Algorithm::ES256.name()))
        })
}

/// Whether a token response's `token_type` binds the token to the key.
pub(crate) fn is_dpop_type(token_type: &str) -> bool {
    token_type.eq_ignore_ascii_case(DPOP)
}

/// Whether a token endpoint's answer is a `use_dpop_nonce` refusal (RFC 9449 §8).
pub(crate) fn token_endpoint_wants_nonce(status: http::StatusCode, body: &[u8]) -> bool {
    status == http::StatusCode::BAD_REQUEST
        && serde_json::from_slice::<Value>(body)
            .is_ok_and(|json| json["error"].as_str() == Some(USE_DPOP_NONCE))
}

/// Whether a resource server's `WWW-Authenticate` challenge is a `use_dpop_nonce` one
/// (RFC 9449 §9).
pub(crate) fn challenge_wants_nonce(challenge: &str) -> bool {
    challenge.split([',', ' ']).any(|param| {
        param.trim() == format!("error=\"{USE_DPOP_NONCE}\"")
            || param.trim() == format!("error={USE_DPOP_NONCE}")
    })
}

/// The `htu` of a request to `url`: the URL without its query and fragment (RFC 9449 §4.2).
fn htu(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.to_string()
        }
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_owned(),
    }
}

fn sha256(bytes: &[u8]) -> ring::digest::Digest {
    ring::digest::digest(&ring::digest::SHA256, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(part: &str) -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    #[test]
    fn a_proof_verifies_with_the_key_in_its_header_and_names_the_request() {
        let (key, _) = DpopKey::generate().unwrap();
        let proof = key
            .proof(
                "POST",
                "https://rs.example/mcp?x=1#f",
                Some("n1"),
                Some("tok"),
            )
            .unwrap();
        let parts: Vec<&str> = proof.split('.').collect();
        let header = decode(parts[0]);
        assert_eq!(header["typ"], "dpop+jwt");
        assert_eq!(header["alg"], "ES256");
        assert!(header["jwk"].get("d").is_none(), "no private part");
        let claims = decode(parts[1]);
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "https://rs.example/mcp");
        assert_eq!(claims["nonce"], "n1");
        assert_eq!(
            claims["ath"],
            URL_SAFE_NO_PAD.encode(sha256(b"tok")).as_str()
        );
        // The public key in the header verifies the signature.
        let x = URL_SAFE_NO_PAD
            .decode(header["jwk"]["x"].as_str().unwrap())
            .unwrap();
        let y = URL_SAFE_NO_PAD
            .decode(header["jwk"]["y"].as_str().unwrap())
            .unwrap();
        let point = [&[4u8][..], &x, &y].concat();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            point,
        );
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        public
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
            .unwrap();
        // Two proofs of the same request differ in their jti.
        let again = key
            .proof("POST", "https://rs.example/mcp", Some("n1"), Some("tok"))
            .unwrap();
        let other = decode(again.split('.').nth(1).unwrap());
        assert_ne!(claims["jti"], other["jti"]);
        // No token, no ath; no nonce, no nonce.
        let bare = decode(
            key.proof("POST", "https://as/token", None, None)
                .unwrap()
                .split('.')
                .nth(1)
                .unwrap(),
        );
        assert!(bare.get("ath").is_none() && bare.get("nonce").is_none());
    }

    #[test]
    fn the_thumbprint_is_rfc_7638s() {
        // RFC 7638 §3.1's method, checked on a key of known coordinates: the thumbprint
        // hashes exactly the canonical member string.
        let (key, _) = DpopKey::generate().unwrap();
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            key.jwk["x"].as_str().unwrap(),
            key.jwk["y"].as_str().unwrap()
        );
        assert_eq!(
            key.thumbprint,
            URL_SAFE_NO_PAD.encode(sha256(canonical.as_bytes()))
        );
        assert!(!format!("{key:?}").contains(key.jwk["x"].as_str().unwrap()));
    }

    #[test]
    fn a_file_stores_key_is_made_once_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "hookloop-dpop-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let store = dir.join("mcp-oauth.json");
        let first = DpopKey::for_file_store(&store).unwrap();
        let path = key_path(&store);
        assert_eq!(path, dir.join("mcp-oauth.json.dpop-key.pem"));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let second = DpopKey::for_file_store(&store).unwrap();
        assert_eq!(first.thumbprint, second.thumbprint);
        std::fs::write(&path, "not a key").unwrap();
        let error = DpopKey::for_file_store(&store).unwrap_err();
        assert!(error.to_string().contains("PRIVATE KEY"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn nonce_refusals_are_recognised() {
        assert!(challenge_wants_nonce(
            r#"DPoP error="use_dpop_nonce", resource_metadata="http://x/.well-known/y""#
        ));
        assert!(!challenge_wants_nonce(
            r#"DPoP resource_metadata="http://x/use_dpop_nonce""#
        ));
        assert!(!challenge_wants_nonce(r#"Bearer error="invalid_token""#));
        assert!(token_endpoint_wants_nonce(
            http::StatusCode::BAD_REQUEST,
            br#"{"error":"use_dpop_nonce"}"#
        ));
        assert!(!token_endpoint_wants_nonce(
            http::StatusCode::BAD_REQUEST,
            br#"{"error":"invalid_grant"}"#
        ));
        let nonce = Nonce::default();
        let mut headers = http::HeaderMap::new();
        assert!(!nonce.learn(&headers));
        headers.insert(DPOP_NONCE, http::HeaderValue::from_static("abc"));
        assert!(nonce.learn(&headers));
        assert_eq!(nonce.get().as_deref(), Some("abc"));
        headers.insert(
            DPOP_NONCE,
            http::HeaderValue::from_str(&"n".repeat(MAX_NONCE + 1)).unwrap(),
        );
        assert!(!nonce.learn(&headers), "an oversized nonce is not kept");
        assert_eq!(nonce.get().as_deref(), Some("abc"));
    }
}
