//! Whom an `https://` target is trusted as, and who the client is to it: one rustls client
//! configuration per run ([`Trust`]), used by the direct transport's own TLS connections and
//! handed to every reqwest client made for the target (its requests through a proxy, the scrape
//! of its metrics, its version, a cache reset), so that every connection to the target trusts
//! the same roots.
//!
//! The roots are Mozilla's (compiled in), the platform's (the system bundle, or the
//! `SSL_CERT_FILE` and `SSL_CERT_DIR` OpenSSL-style tools honour), and a plan's `ca-file`; a
//! plan may add a client certificate (`client-cert`), or turn verification off for a test rig
//! (`tls-verify #false`), which every output then says.
//!
//! What this is not: the TLS server side (the simulator's, src/sim), or where a CA file's or a
//! key's contents may go — nowhere: no report, record or message holds them, only file names.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The environment variable naming a PEM bundle of extra roots, as OpenSSL and curl read it.
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";

/// Why a PEM bundle gives no certificate to trust: said without what the file holds.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BundleError {
    /// A block in it is not a certificate.
    #[error("a certificate in it does not parse")]
    Unparsable,
    /// It has no certificate block at all.
    #[error("it holds no `-----BEGIN CERTIFICATE-----` block")]
    Empty,
}

/// Why a client key gives no identity: said without what the file holds.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// No private key block in it (PKCS#8, PKCS#1 or SEC1).
    #[error("it holds no `-----BEGIN PRIVATE KEY-----` block (nor an RSA or EC one)")]
    Missing,
    /// The key does not go with the certificate, or cannot sign.
    #[error("the key cannot be used with the certificate: {0}")]
    Unusable(String),
}

/// Why the bundle `SSL_CERT_FILE` names cannot be used: its path and why.
#[derive(Debug, thiserror::Error)]
pub enum EnvironmentError {
    /// The file cannot be read.
    #[error("{SSL_CERT_FILE}={path}: {source}")]
    Unreadable {
        /// The variable's value.
        path: String,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The file is read but gives no certificate.
    #[error("{SSL_CERT_FILE}={path}: {source}")]
    Bundle {
        /// The variable's value.
        path: String,
        /// Why its bundle gives none.
        source: BundleError,
    },
}

/// The certificates of a PEM bundle.
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, BundleError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| BundleError::Unparsable)?;
    if certificates.is_empty() {
        return Err(BundleError::Empty);
    }
    Ok(certificates)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, KeyError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|_| KeyError::Missing)
}

/// A client certificate chain and its key, for mutual TLS.
pub type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// Why a `client-cert` and its key give no identity: said without what the files hold.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// The certificate file gives no certificate.
    #[error("{0}")]
    Certificate(BundleError),
    /// The key file gives no key, or not the certificate's.
    #[error("{0}")]
    Key(KeyError),
}

/// The identity of a certificate chain and its private key (PEM texts), checked to belong
/// together: read when the plan is read and when a run starts, without loading any roots.
pub fn client_identity(cert_pem: &[u8], key_pem: &[u8]) -> Result<Identity, IdentityError> {
    let chain = certificates(cert_pem).map_err(IdentityError::Certificate)?;
    let key = private_key(key_pem).map_err(IdentityError::Key)?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider)
        .map_err(|e| IdentityError::Key(KeyError::Unusable(e.to_string())))?;
    Ok((chain, key))
}

/// Checks that `SSL_CERT_FILE`, when it is set, names a bundle that can be used: its path.
/// (The platform's roots then come from it; a variable naming a missing file would otherwise
/// leave a run trusting less than its user thinks, silently.)
pub fn check_environment() -> Result<Option<String>, EnvironmentError> {
    let Some(path) = std::env::var_os(SSL_CERT_FILE) else {
        return Ok(None);
    };
    let path = path.to_string_lossy().into_owned();
    let pem = match std::fs::read(&path) {
        Ok(pem) => pem,
        Err(source) => return Err(EnvironmentError::Unreadable { path, source }),
    };
    match certificates(&pem) {
        Ok(_) => Ok(Some(path)),
        Err(source) => Err(EnvironmentError::Bundle { path, source }),
    }
}

/// The platform's roots (the system bundle and directory OpenSSL would read, or those
/// `SSL_CERT_FILE` and `SSL_CERT_DIR` name), read once per process: Debian's 145 took 5 to
/// 7 ms here, at the run's start. Files in it that do not parse are skipped, as OpenSSL does.
fn platform_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// What a run's TLS trusts and presents.
#[derive(Default)]
pub struct TrustSettings {
    /// Roots besides Mozilla's and the platform's (a plan's `ca-file`), DER.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// A client certificate chain and its key, for servers that ask for one (mutual TLS).
    pub identity: Option<Identity>,
    /// `false`: any server certificate is taken (`tls-verify #false`, test rigs only).
    pub skip_verify: bool,
}

/// One run's TLS client configuration (cheap to clone).
#[derive(Clone, Debug)]
pub struct Trust {
    config: Arc<ClientConfig>,
    skip_verify: bool,
}

impl Default for Trust {
    /// Mozilla's and the platform's roots, no client certificate.
    fn default() -> Self {
        Trust::new(TrustSettings::default()).expect("a configuration without a key builds")
    }
}

impl Trust {
    /// The configuration `settings` ask for: HTTP/1.1 offered by ALPN (both transports speak
    /// it), the ring provider reqwest's rustls uses.
    pub fn new(settings: TrustSettings) -> Result<Trust, KeyError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| KeyError::Unusable(e.to_string()))?;
        let builder = if settings.skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        } else {
            let mut roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            roots.add_parsable_certificates(platform_roots().iter().cloned());
            roots.add_parsable_certificates(settings.extra_roots);
            builder.with_root_certificates(roots)
        };
        let mut config = match settings.identity {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| KeyError::Unusable(e.to_string()))?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Trust {
            config: Arc::new(config),
            skip_verify: settings.skip_verify,
        })
    }

    /// The rustls configuration, for a connector of the direct transport.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// The same, offering `protocols` by ALPN instead of HTTP/1.1 (`h2` for HTTP/2).
    pub fn client_config_for(&self, protocols: &[&[u8]]) -> Arc<ClientConfig> {
        let mut config = (*self.config).clone();
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// Whether server certificates go unchecked.
    pub fn skips_verification(&self) -> bool {
        self.skip_verify
    }

    /// A reqwest client builder with this configuration: every client llmload makes for a
    /// run's target (its requests through a proxy, the scrape of its metrics, its version, a
    /// cache reset).
    pub fn reqwest_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder().use_preconfigured_tls((*self.config).clone())
    }
}

/// A verifier that takes any certificate for any name, still checking the handshake's
/// signatures (so the connection is TLS as the server speaks it; only whom it is with goes
/// unproven).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_without_a_certificate_is_refused_without_its_text() {
        let why = certificates(b"secret-looking text, no PEM").unwrap_err();
        assert_eq!(why, BundleError::Empty);
        assert!(why.to_string().contains("BEGIN CERTIFICATE"), "{why}");
        assert!(!why.to_string().contains("secret"), "{why}");
        let broken =
            b"-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n";
        assert_eq!(certificates(broken).err(), Some(BundleError::Unparsable));
    }

    #[test]
    fn a_client_identity_is_a_certificate_and_its_own_key() {
        let made = rcgen::generate_simple_self_signed(vec!["client".into()]).unwrap();
        let (cert, key) = (made.cert.pem(), made.key_pair.serialize_pem());
        let identity = client_identity(cert.as_bytes(), key.as_bytes()).unwrap();
        assert!(Trust::new(TrustSettings {
            identity: Some(identity),
            ..Default::default()
        })
        .is_ok());
        // A key that is not the certificate's is refused when the plan is read, not at a
        // server's request for it halfway through.
        let other = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let refused = client_identity(cert.as_bytes(), other.as_bytes()).unwrap_err();
        assert!(
            matches!(refused, IdentityError::Key(KeyError::Unusable(_))),
            "{refused}"
        );
        assert_eq!(
            client_identity(cert.as_bytes(), b"secret text").unwrap_err(),
            IdentityError::Key(KeyError::Missing)
        );
        assert_eq!(
            client_identity(b"secret text", key.as_bytes()).unwrap_err(),
            IdentityError::Certificate(BundleError::Empty)
        );
    }
}
