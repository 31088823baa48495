//! The TLS provider of every HTTP client the crate builds.
//!
//! reqwest is built without a provider of its own (the default, aws-lc-rs, is a minute of C build
//! on every fresh build), so a client needs the process's default rustls provider to be set when
//! it is built. Each place that builds one, here or in rmcp on the crate's behalf, calls
//! [`install_provider`] first.

/// Makes *ring* the process's default rustls provider, unless one is set already: a provider an
/// embedding program installed stands.
pub(crate) fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means another provider is the default already; that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn an_https_request_starts_a_tls_handshake_through_the_installed_provider() {
        super::install_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
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
        let client = reqwest::Client::builder().build().expect("a client");
        let answer = client
            .get(format!("https://127.0.0.1:{port}/"))
            .send()
            .await;
        assert!(answer.is_err(), "no TLS server answered: {answer:?}");
        let hello = server.await.unwrap();
        // A TLS record of the handshake type (22) with a ClientHello's record version (3.x).
        assert_eq!(&hello[..2], &[22, 3], "not a TLS ClientHello: {hello:?}");
    }
}
