//! Certificates for loopback TLS servers, made in the test or benchmark that needs them
//! (rcgen): a CA of its own, the server's certificate for 127.0.0.1 and localhost signed by
//! it, and a second CA with a client certificate, for mutual TLS. Written as PEM files, as a
//! user would hand them to `llmload sim --tls-cert` and a plan's `ca-file` / `client-cert`.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// The files [`make`] wrote.
#[allow(dead_code)] // each test uses its own few
pub struct Certs {
    /// The CA that signed the server's certificate.
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// The CA that signed the client's certificate (the server's `--tls-client-ca`).
    pub client_ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// A CA named `name`: its certificate and key.
fn authority(name: &str) -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap();
    (params.self_signed(&key).unwrap(), key)
}

/// A certificate for `names` signed by `issuer`: its PEM text and its key's.
fn leaf(names: &[&str], issuer: &(rcgen::Certificate, KeyPair)) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names.clone()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, &names[0]);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer.0, &issuer.1).unwrap();
    (cert.pem(), key.serialize_pem())
}

impl Certs {
    /// The files [`make`] writes in `dir`.
    #[allow(dead_code)] // the fidelity benchmark's
    pub fn at(dir: &Path) -> Certs {
        let path = |name: &str| dir.join(name);
        Certs {
            ca: path("ca.pem"),
            server_cert: path("server.pem"),
            server_key: path("server.key"),
            client_ca: path("client-ca.pem"),
            client_cert: path("client.pem"),
            client_key: path("client.key"),
        }
    }
}

/// Makes every certificate and key in `dir`.
pub fn make(dir: &Path) -> Certs {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let ca = authority("llmload test CA");
    let (server_cert, server_key) = leaf(&["127.0.0.1", "localhost"], &ca);
    let client_ca = authority("llmload test client CA");
    let (client_cert, client_key) = leaf(&["llmload-client"], &client_ca);
    Certs {
        ca: write("ca.pem", &ca.0.pem()),
        server_cert: write("server.pem", &server_cert),
        server_key: write("server.key", &server_key),
        client_ca: write("client-ca.pem", &client_ca.0.pem()),
        client_cert: write("client.pem", &client_cert),
        client_key: write("client.key", &client_key),
    }
}
