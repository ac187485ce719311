//! The certificate authorities an `https://` target is trusted under besides the public ones
//! compiled in: a plan's `ca-file` and the `SSL_CERT_FILE` OpenSSL-style tools honour, each a
//! PEM bundle. Read by the plan's parser (a wrong file is a plan mistake) and by the
//! transport (the roots its TLS client adds).
//!
//! What this is not: the TLS client itself (reqwest's rustls), or where a CA file's contents
//! may go — nowhere: no report, record or message holds them, only the file's name.

/// The environment variable naming a PEM bundle of extra roots, as OpenSSL and curl read it.
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";

/// The certificates of a PEM bundle; an error says why none can be used (no
/// `BEGIN CERTIFICATE` block, or one that does not parse), never what the file holds.
pub fn certificates(pem: &[u8]) -> Result<Vec<reqwest::Certificate>, String> {
    let certificates = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|_| "a certificate in it does not parse".to_string())?;
    if certificates.is_empty() {
        return Err("it holds no `-----BEGIN CERTIFICATE-----` block".into());
    }
    Ok(certificates)
}

/// The roots `SSL_CERT_FILE` names, when it is set: its path and its certificates.
pub fn from_environment() -> Result<Option<(String, Vec<reqwest::Certificate>)>, String> {
    let Some(path) = std::env::var_os(SSL_CERT_FILE) else {
        return Ok(None);
    };
    let shown = path.to_string_lossy().into_owned();
    let pem = std::fs::read(&path).map_err(|e| format!("{SSL_CERT_FILE}={shown}: {e}"))?;
    let certificates =
        certificates(&pem).map_err(|why| format!("{SSL_CERT_FILE}={shown}: {why}"))?;
    Ok(Some((shown, certificates)))
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
        assert!(why.contains("BEGIN CERTIFICATE"), "{why}");
        assert!(!why.contains("secret"), "{why}");
        let broken =
            b"-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n";
        assert!(certificates(broken).is_err());
    }
}
