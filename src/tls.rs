//! The certificate authorities an `https://` target is trusted under besides the public ones
//! compiled in: a plan's `ca-file` and the `SSL_CERT_FILE` OpenSSL-style tools honour, each a
//! PEM bundle. Read by the plan's parser (a wrong file is a plan mistake) and by the
//! transport (the roots its TLS client adds).
//!
//! What this is not: the TLS client itself (reqwest's rustls), or where a CA file's contents
//! may go — nowhere: no report, record or message holds them, only the file's name.

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
pub fn certificates(pem: &[u8]) -> Result<Vec<reqwest::Certificate>, BundleError> {
    let certificates =
        reqwest::Certificate::from_pem_bundle(pem).map_err(|_| BundleError::Unparsable)?;
    if certificates.is_empty() {
        return Err(BundleError::Empty);
    }
    Ok(certificates)
}

/// The roots `SSL_CERT_FILE` names, when it is set: its path and its certificates.
pub fn from_environment() -> Result<Option<(String, Vec<reqwest::Certificate>)>, EnvironmentError> {
    let Some(path) = std::env::var_os(SSL_CERT_FILE) else {
        return Ok(None);
    };
    let path = path.to_string_lossy().into_owned();
    let pem = match std::fs::read(&path) {
        Ok(pem) => pem,
        Err(source) => return Err(EnvironmentError::Unreadable { path, source }),
    };
    match certificates(&pem) {
        Ok(certificates) => Ok(Some((path, certificates))),
        Err(source) => Err(EnvironmentError::Bundle { path, source }),
    }
}

/// A client builder that trusts `roots` besides the public roots: every client llmload makes
/// for a run's target (its requests, the scrape of its metrics, its version, a cache reset).
pub fn trusting(roots: &[reqwest::Certificate]) -> reqwest::ClientBuilder {
    roots
        .iter()
        .fold(reqwest::Client::builder(), |builder, root| {
            builder.add_root_certificate(root.clone())
        })
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
}
