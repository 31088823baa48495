//! The one piece of JOSE the headless grants need, on *ring* (already in the build for TLS):
//! compact JWS signing with ES256 or RS256 from a PKCS#8 PEM key (`private_key_jwt` client
//! assertions). No JWT library is used: the ones on *ring* or pure-Rust crypto add more than
//! these lines of encoding, and rmcp's own (`jsonwebtoken` on aws-lc-rs) brings back the C
//! build the crate dropped.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, RSA_PKCS1_SHA256, RsaKeyPair,
};
use serde_json::{Value, json};

/// Why a key could not be used. Never carries key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The text is not a PEM `PRIVATE KEY` (PKCS#8) block.
    #[error("the private key is not a PEM \"PRIVATE KEY\" (PKCS#8) block")]
    NotPem,
    /// The key does not fit the algorithm.
    #[error("the private key is not a valid {0} key in PKCS#8")]
    Rejected(&'static str),
    /// Signing failed.
    #[error("signing failed")]
    Signing,
}

/// A JWS signing algorithm this client signs with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Algorithm {
    /// ECDSA on P-256 with SHA-256.
    #[default]
    ES256,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
}

impl Algorithm {
    /// The name in a JWS header.
    pub fn name(self) -> &'static str {
        match self {
            Self::ES256 => "ES256",
            Self::RS256 => "RS256",
        }
    }
}

/// A private key that signs JWSs.
pub(crate) enum Signer {
    Ec(EcdsaKeyPair),
    Rsa(RsaKeyPair),
}

impl Signer {
    /// The key in `pem` (PKCS#8) for `algorithm`.
    pub(crate) fn from_pem(pem: &str, algorithm: Algorithm) -> Result<Self, KeyError> {
        let der = pem_body(pem, "PRIVATE KEY").ok_or(KeyError::NotPem)?;
        match algorithm {
            Algorithm::ES256 => EcdsaKeyPair::from_pkcs8(
                &ECDSA_P256_SHA256_FIXED_SIGNING,
                &der,
                &SystemRandom::new(),
            )
            .map(Self::Ec)
            .map_err(|_| KeyError::Rejected("ES256 (P-256)")),
            Algorithm::RS256 => RsaKeyPair::from_pkcs8(&der)
                .map(Self::Rsa)
                .map_err(|_| KeyError::Rejected("RS256 (RSA)")),
        }
    }

    fn algorithm(&self) -> Algorithm {
        match self {
            Self::Ec(_) => Algorithm::ES256,
            Self::Rsa(_) => Algorithm::RS256,
        }
    }

    /// The compact JWS of `claims` with `header` (its `alg` is set here).
    pub(crate) fn sign(&self, mut header: Value, claims: &Value) -> Result<String, KeyError> {
        header["alg"] = json!(self.algorithm().name());
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let rng = SystemRandom::new();
        let signature = match self {
            Self::Ec(key) => key
                .sign(&rng, input.as_bytes())
                .map_err(|_| KeyError::Signing)?
                .as_ref()
                .to_vec(),
            Self::Rsa(key) => {
                let mut out = vec![0; key.public().modulus_len()];
                key.sign(&RSA_PKCS1_SHA256, &rng, input.as_bytes(), &mut out)
                    .map_err(|_| KeyError::Signing)?;
                out
            }
        };
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

/// A random identifier for a `jti`: 128 bits, base64url.
pub(crate) fn random_id() -> String {
    let mut bytes = [0u8; 16];
    if ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut bytes).is_err() {
        // The system's generator failed: a jti needs uniqueness, not secrecy.
        bytes = std::array::from_fn(|_| fastrand::u8(..));
    }
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The seconds since the epoch.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The DER inside the first PEM block labelled `label`.
pub(crate) fn pem_body(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = start + pem[start..].find(&end)?;
    let body: String = pem[start..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    STANDARD.decode(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_es256_key_in_pem_signs_what_its_public_key_verifies() {
        use ring::signature::KeyPair;
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(pkcs8.as_ref())
        );
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let signer = Signer::from_pem(&pem, Algorithm::ES256).unwrap();
        let jws = signer
            .sign(json!({"typ": "JWT"}), &json!({"iss": "c"}))
            .unwrap();
        let parts: Vec<&str> = jws.split('.').collect();
        let header: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header, json!({"typ": "JWT", "alg": "ES256"}));
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            pair.public_key().as_ref(),
        );
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let input = format!("{}.{}", parts[0], parts[1]);
        public.verify(input.as_bytes(), &signature).unwrap();
        assert!(public.verify(b"other", &signature).is_err());
        // The same key is no RS256 key.
        assert!(Signer::from_pem(&pem, Algorithm::RS256).is_err());
    }

    #[test]
    fn bad_keys_are_errors_without_their_text() {
        let error = Signer::from_pem("secret-text", Algorithm::ES256)
            .err()
            .unwrap();
        assert_eq!(error, KeyError::NotPem);
        let pem = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----";
        let error = Signer::from_pem(pem, Algorithm::ES256).err().unwrap();
        assert!(!error.to_string().contains("AAAA"));
    }
}
