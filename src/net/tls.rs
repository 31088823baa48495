//! The TLS of every HTTP client the crate builds: its provider and its certificate verifier.
//!
//! reqwest is built without a provider of its own (the default, aws-lc-rs, is a minute of C build
//! on every fresh build), so a client needs the process's default rustls provider to be set when
//! it is built. Each place that builds one, here or in rmcp on the crate's behalf, calls
//! [`install_provider`] first.
//!
//! Left to itself, reqwest builds the platform's verifier (`rustls-platform-verifier`) at each
//! client's build, and on Linux that parses the whole system root store: 18 of the 22 million
//! instructions from spawn to an answered ACP `initialize`, even with the model at
//! `http://127.0.0.1`. The clients built through [`client_builder`] share one [`LazyVerifier`]
//! instead, which builds that same verifier when the first server certificate is to be checked,
//! once for the process: a process that never speaks TLS never reads a root store. The trust
//! decisions are the platform verifier's; what changes is that a root store changed while the
//! process runs is not seen, and that a system without one fails the first https connection
//! rather than every client's build.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_platform_verifier::Verifier;

/// Makes *ring* the process's default rustls provider, unless one is set already: a provider an
/// embedding program installed stands.
pub(crate) fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means another provider is the default already; that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder with the crate's TLS: the process's default provider (see
/// [`install_provider`]) and the process's one [`LazyVerifier`]. Every HTTP client the crate
/// builds itself starts here. The error is a provider that cannot speak the TLS versions.
///
/// reqwest's own TLS options (`tls_*` on the builder) do not apply to its clients: the TLS
/// configuration is made here, whole.
pub(crate) fn client_builder() -> Result<reqwest::ClientBuilder, rustls::Error> {
    static VERIFIER: OnceLock<Arc<LazyVerifier>> = OnceLock::new();
    let verifier = VERIFIER.get_or_init(|| Arc::new(LazyVerifier::new(default_provider())));
    builder_verifying_with(Arc::clone(verifier))
}

/// The platform's certificate verifier, built at the first certificate it is asked to check.
///
/// Until then it answers what every platform's verifier answers without its roots: the signature
/// schemes are the provider's, no root hints, no raw public keys. rustls asks those while it
/// writes the ClientHello, so a handshake that fails before the server's certificate arrives
/// (or a plain-http request, which makes none) leaves the root store unread.
pub(crate) struct LazyVerifier {
    provider: Arc<CryptoProvider>,
    /// The platform verifier, or why it could not be built (no root certificate on the system),
    /// which each handshake then fails with.
    platform: OnceLock<Result<Verifier, rustls::Error>>,
}

impl LazyVerifier {
    /// A verifier that will check certificates with `provider`'s algorithms.
    pub(crate) fn new(provider: Arc<CryptoProvider>) -> Self {
        Self {
            provider,
            platform: OnceLock::new(),
        }
    }

    /// Whether the platform verifier has been built (and so the root store read).
    pub(crate) fn is_loaded(&self) -> bool {
        self.platform.get().is_some()
    }

    fn platform(&self) -> Result<&Verifier, rustls::Error> {
        let built = self.platform.get_or_init(|| {
            tracing::debug!(target: "hookloop::net", "loading the platform's root certificates");
            Verifier::new(Arc::clone(&self.provider))
        });
        built.as_ref().map_err(Clone::clone)
    }
}

impl std::fmt::Debug for LazyVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyVerifier")
            .field("loaded", &self.is_loaded())
            .finish_non_exhaustive()
    }
}

impl ServerCertVerifier for LazyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.platform()?.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.platform()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.platform()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        // The platform verifiers of rustls-platform-verifier 0.7 all answer this from the
        // provider (WebPKI's on Linux, and the Apple, Windows and Android ones directly).
        match self.platform.get() {
            Some(Ok(platform)) => platform.supported_verify_schemes(),
            Some(Err(_)) | None => self
                .provider
                .signature_verification_algorithms
                .supported_schemes(),
        }
    }

    fn requires_raw_public_keys(&self) -> bool {
        match self.platform.get() {
            Some(Ok(platform)) => platform.requires_raw_public_keys(),
            Some(Err(_)) | None => false,
        }
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        match self.platform.get() {
            Some(Ok(platform)) => platform.root_hint_subjects(),
            Some(Err(_)) | None => None,
        }
    }
}

/// The process's default provider, *ring* unless the embedder installed another.
fn default_provider() -> Arc<CryptoProvider> {
    install_provider();
    match CryptoProvider::get_default() {
        Some(provider) => Arc::clone(provider),
        // Unreachable: `install_provider` leaves a default set, ours or the embedder's, and a
        // default is never unset. Were it not, ring is what it would have set.
        None => Arc::new(rustls::crypto::ring::default_provider()),
    }
}

/// A reqwest builder whose TLS verifies with `verifier` and offers what reqwest's own did.
fn builder_verifying_with(
    verifier: Arc<LazyVerifier>,
) -> Result<reqwest::ClientBuilder, rustls::Error> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&verifier.provider))
        // reqwest offers every version rustls has (1.2 and 1.3) unless told otherwise.
        .with_protocol_versions(rustls::ALL_VERSIONS)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // reqwest is built without `http2` (no crate of the build enables it), so its ALPN offered
    // HTTP/1.1 only; a preconfigured TLS gets none from reqwest.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(reqwest::Client::builder().tls_backend_preconfigured(config))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::{LazyVerifier, builder_verifying_with, default_provider};

    /// A self-signed certificate for `127.0.0.1` (valid to 2126) and its P-256 key; no root
    /// store trusts it.
    const CERT: &[u8] = include_bytes!("testdata/self_signed_127.0.0.1.der");
    const KEY: &[u8] = include_bytes!("testdata/self_signed_127.0.0.1.key.der");

    fn verifier() -> Arc<LazyVerifier> {
        Arc::new(LazyVerifier::new(default_provider()))
    }

    /// Every error of `error`'s source chain, shown.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut shown = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            shown.push_str(": ");
            shown.push_str(&cause.to_string());
            source = cause.source();
        }
        shown
    }

    #[tokio::test]
    async fn an_https_request_starts_a_tls_handshake_through_the_installed_provider() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut hello = [0u8; 5];
            socket.read_exact(&mut hello).await.unwrap();
            // Closed without an answer: the client's handshake fails, as it should.
            hello
        });
        let verifier = verifier();
        let client = builder_verifying_with(Arc::clone(&verifier))
            .unwrap()
            .build()
            .expect("a client");
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
        let answer = client
            .get(format!("https://127.0.0.1:{port}/"))
            .send()
            .await;
        assert!(answer.is_err(), "no TLS server answered: {answer:?}");
        let hello = server.await.unwrap();
        // A TLS record of the handshake type (22) with a ClientHello's record version (3.x).
        assert_eq!(&hello[..2], &[22, 3], "not a TLS ClientHello: {hello:?}");
        // The ClientHello asked the verifier its schemes; no certificate came, no store was read.
        assert!(!verifier.is_loaded());
    }

    #[tokio::test]
    async fn building_a_client_and_a_plain_http_request_read_no_root_store() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed before its request ended");
                request.extend_from_slice(&buf[..n]);
            }
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await
                .unwrap();
        });
        let verifier = verifier();
        let client = builder_verifying_with(Arc::clone(&verifier))
            .unwrap()
            .build()
            .expect("a client");
        assert!(!verifier.is_loaded(), "building the client read the store");
        let answer = client
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .expect("an answer");
        assert_eq!(answer.text().await.unwrap(), "ok");
        server.await.unwrap();
        assert!(!verifier.is_loaded(), "a plain-http request read the store");
    }

    #[tokio::test]
    async fn a_self_signed_certificate_on_127_0_0_1_is_refused_as_of_an_unknown_issuer() {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        // A real rustls server, on a thread with blocking I/O: it reads the ClientHello, answers
        // with the certificate, and reports what the client offered and how the handshake ended.
        let server = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            let config = rustls::ServerConfig::builder_with_provider(default_provider())
                .with_protocol_versions(rustls::ALL_VERSIONS)
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![CertificateDer::from(CERT.to_vec())],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(KEY.to_vec())),
                )
                .unwrap();
            let mut acceptor = rustls::server::Acceptor::default();
            let accepted = loop {
                acceptor.read_tls(&mut socket).unwrap();
                if let Some(accepted) = acceptor.accept().map_err(|(e, _)| e).unwrap() {
                    break accepted;
                }
            };
            let alpn: Vec<Vec<u8>> = accepted
                .client_hello()
                .alpn()
                .map(|offered| offered.map(<[u8]>::to_vec).collect())
                .unwrap_or_default();
            let mut connection = accepted
                .into_connection(Arc::new(config))
                .map_err(|(e, _)| e)
                .unwrap();
            let mut ended = Ok(());
            while connection.is_handshaking() {
                if let Err(error) = connection.complete_io(&mut socket) {
                    ended = Err(error);
                    break;
                }
            }
            (alpn, ended)
        });
        let verifier = verifier();
        let client = builder_verifying_with(Arc::clone(&verifier))
            .unwrap()
            .build()
            .expect("a client");
        let answer = client
            .get(format!("https://127.0.0.1:{port}/"))
            .send()
            .await;
        let error = answer.expect_err("a self-signed certificate was accepted");
        let shown = chain(&error);
        assert!(
            shown.contains("invalid peer certificate: UnknownIssuer"),
            "refused for another reason: {shown}"
        );
        assert!(
            verifier.is_loaded(),
            "the certificate was checked without the platform's roots"
        );
        let (alpn, ended) = server.join().unwrap();
        assert_eq!(alpn, vec![b"http/1.1".to_vec()], "the ALPN reqwest offered");
        let ended = ended.expect_err("the server completed a handshake the client refused");
        assert!(
            ended.to_string().contains("UnknownCA"),
            "the client's alert was not 'unknown CA': {ended}"
        );
    }
}
