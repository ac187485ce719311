//! The simulator as an `https://` server: its certificate and key, and (for mutual TLS) the
//! CA its clients' certificates must be signed by, as PEM files. So that llmload's TLS client,
//! its certificate handling and its cost are tested and measured against the same server as
//! its plain HTTP (tests/tls.rs, the fidelity benchmark's TLS rows).
//!
//! Not the client side (see `crate::tls`).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// Why the simulator cannot serve TLS with the files given (their names, never their text).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsSetupError(String);

/// PEM texts of what the simulator serves TLS with.
pub struct TlsFiles<'a> {
    /// Its certificate chain.
    pub cert: &'a [u8],
    /// The chain's private key.
    pub key: &'a [u8],
    /// The CA clients must present a certificate signed by; `None`: none is asked for.
    pub client_ca: Option<&'a [u8]>,
}

/// A server configuration for `files`, offering HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(files: TlsFiles<'_>) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let fail = |what: &str| TlsSetupError(what.to_string());
    let chain = CertificateDer::pem_slice_iter(files.cert)
        .collect::<Result<Vec<_>, _>>()
        .ok()
        .filter(|chain| !chain.is_empty())
        .ok_or_else(|| fail("the certificate file holds no PEM certificate"))?;
    let key = PrivateKeyDer::from_pem_slice(files.key)
        .map_err(|_| fail("the key file holds no PEM private key"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError(e.to_string()))?;
    let builder = match files.client_ca {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|_| fail("the client CA file does not parse"))?;
                roots
                    .add(cert)
                    .map_err(|e| TlsSetupError(format!("the client CA: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsSetupError(format!("the client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsSetupError(format!("the certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
