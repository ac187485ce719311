//! `https://` targets over the direct transport: the simulator serving TLS with certificates
//! the test makes (tests/common/certs.rs). A target signed by a CA of its own is refused under
//! the public and platform roots alone and served once the plan's `ca-file`, `SSL_CERT_FILE`
//! or `SSL_CERT_DIR` names the CA; each new connection's TLS handshake is timed apart; a server
//! asking for a client certificate gets the plan's `client-cert`; `tls-verify #false` is said
//! in every output; no certificate's or key's text is kept anywhere.

mod common;

use std::path::{Path, PathBuf};

use common::{run_file, SimProcess};

/// A TLS simulator (an engine, so a cache reset has a prefix cache to empty) serving `certs`'
/// server certificate, asking clients for one signed by `client_ca` when given.
fn tls_sim(certs: &common::certs::Certs, client_ca: Option<&Path>) -> SimProcess {
    let (cert, key) = (certs.server_cert.to_str(), certs.server_key.to_str());
    let mut args = vec!["--profile", "tiny"];
    args.extend(["--tls-cert", cert.unwrap(), "--tls-key", key.unwrap()]);
    if let Some(ca) = client_ca {
        args.extend(["--tls-client-ca", ca.to_str().unwrap()]);
    }
    let sim = SimProcess::start_with(&args);
    assert!(sim.url.starts_with("https://127.0.0.1:"), "{}", sim.url);
    sim
}

/// A plan of 10 requests to `url` with `extra` in its target, two at a time; with `cold`, the
/// first two open the connections the rest reuse.
fn plan(url: &str, extra: &str, cold: bool) -> String {
    let connections = if cold { "connections \"cold\";" } else { "" };
    // The server's /metrics scraped and its cache reset over the same TLS: every client llmload
    // makes for the target trusts the CA.
    format!(
        "plan \"tls\" {{ seed 1 }}\n\
         target \"{url}\" {{ model \"llmload-sim\"; timeout \"10s\"; metrics interval=\"100ms\"; {connections} {extra} }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 32; output 8 }}\n\
         phase \"p\" {{ concurrency 2; requests 10; reset-cache #true }}\n"
    )
}

/// Where a test writes its plans and outputs.
struct Dir(tempfile::TempDir);

impl Dir {
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn out(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    /// Runs `text` as plan `name`, with `env`: its exit code and what it said.
    fn run(
        &self,
        name: &str,
        text: &str,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> (Option<i32>, String) {
        let ran = run_file(
            &self.write(&format!("{name}.kdl"), text),
            &self.out(name),
            &[],
            env,
        );
        (
            ran.status.code(),
            String::from_utf8_lossy(&ran.stderr).into_owned(),
        )
    }

    fn summary(&self, name: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.out(name).join("summary.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Every file a run wrote holding `needle`.
    fn files_holding(&self, name: &str, needle: &str) -> Vec<PathBuf> {
        std::fs::read_dir(self.out(name))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| std::fs::read_to_string(p).is_ok_and(|text| text.contains(needle)))
            .collect()
    }
}

#[test]
fn a_target_signed_by_its_own_ca_is_served_once_the_ca_is_named() {
    let dir = Dir(tempfile::tempdir().unwrap());
    let certs = common::certs::make(dir.0.path());
    let sim = tls_sim(&certs, None);

    // The public and platform roots alone: the target's certificate is not trusted, and it is
    // said, with what to do about it.
    let (code, said) = dir.run("a", &plan(&sim.url, "", false), &[]);
    assert_eq!(code, Some(3), "{said}");
    let said = said.to_lowercase();
    assert!(said.contains("unknownissuer"), "{said}");
    assert!(
        said.contains("ca-file") && said.contains("ssl_cert_file"),
        "{said}"
    );

    // The plan names the CA: every request served over TLS, on connections the direct
    // transport opened and timed (by the requests themselves: "cold").
    let (code, said) = dir.run("b", &plan(&sim.url, "ca-file \"ca.pem\"", true), &[]);
    assert_eq!(code, Some(0), "{said}");
    let records = common::read_records(&dir.out("b"));
    assert_eq!(records.len(), 10);
    assert!(records.iter().all(|r| r["error"].is_null()), "{records:?}");
    let opened: Vec<_> = records
        .iter()
        .filter(|r| r["connect_us"].is_u64())
        .collect();
    assert!(opened.len() >= 2, "{records:?}");
    for record in &opened {
        let (connect, tls) = (&record["connect_us"], &record["tls_us"]);
        assert!(
            tls.as_u64()
                .is_some_and(|tls| tls <= connect.as_u64().unwrap()),
            "{record}"
        );
        // An IP address is not resolved.
        assert!(record["dns_us"].is_null(), "{record}");
    }
    let summary = dir.summary("b");
    let phase = common::phase(&summary, "p");
    assert_eq!(
        phase["metrics"]["tls_ms"]["count"],
        opened.len(),
        "{}",
        phase["metrics"]
    );
    assert!(
        summary["server"]["samples"].as_u64().unwrap_or(0) >= 1,
        "{}",
        summary["server"]
    );
    assert_eq!(
        phase["cache_reset"]["done"], true,
        "{}",
        phase["cache_reset"]
    );
    let report = std::fs::read_to_string(dir.out("b").join("report.md")).unwrap();
    assert!(
        report.contains("of which the TLS handshake p50"),
        "{report}"
    );

    // SSL_CERT_FILE, as OpenSSL and curl read it, does the same without a plan change; so does
    // SSL_CERT_DIR, a directory of them; and a name is resolved, and timed apart.
    let by_name = sim.url.replace("127.0.0.1", "localhost");
    let cert_dir = dir.out("certs");
    std::fs::create_dir(&cert_dir).unwrap();
    std::fs::copy(&certs.ca, cert_dir.join("company.pem")).unwrap();
    for (name, variable, value) in [
        ("c", "SSL_CERT_FILE", certs.ca.as_os_str()),
        ("d", "SSL_CERT_DIR", cert_dir.as_os_str()),
    ] {
        let (code, said) = dir.run(name, &plan(&by_name, "", true), &[(variable, value)]);
        assert_eq!(code, Some(0), "{variable}: {said}");
        let records = common::read_records(&dir.out(name));
        let opened = records.iter().filter(|r| r["connect_us"].is_u64());
        assert!(opened.clone().count() >= 2, "{records:?}");
        assert!(opened
            .clone()
            .all(|r| r["dns_us"].is_u64() && r["tls_us"].is_u64()));
    }

    // A file that is not a CA certificate is a plan mistake, and its text is shown nowhere.
    dir.write("not-a-ca.pem", "sk-secret-looking-text\n");
    let (code, said) = dir.run("e", &plan(&sim.url, "ca-file \"not-a-ca.pem\"", false), &[]);
    assert_eq!(code, Some(2));
    assert!(said.contains("holds no CA certificate"), "{said}");
    assert!(!said.contains("sk-secret"), "{said}");
    // Nor is the CA's text kept with a run that used it.
    assert_eq!(
        dir.files_holding("b", "BEGIN CERTIFICATE"),
        Vec::<PathBuf>::new()
    );
}

#[test]
fn a_server_asking_for_a_client_certificate_gets_the_plans() {
    let dir = Dir(tempfile::tempdir().unwrap());
    let certs = common::certs::make(dir.0.path());
    let sim = tls_sim(&certs, Some(&certs.client_ca));
    let ca = "ca-file \"ca.pem\"";

    // Without one, the server ends every connection at its handshake: nothing is served.
    let (code, said) = dir.run("a", &plan(&sim.url, ca, false), &[]);
    assert_eq!(code, Some(3), "{said}");
    assert!(said.contains("CertificateRequired"), "{said}");
    assert!(said.contains("give one with `client-cert`"), "{said}");

    let with = format!("{ca}; client-cert \"client.pem\" key=\"client.key\"");
    let (code, said) = dir.run("b", &plan(&sim.url, &with, true), &[]);
    assert_eq!(code, Some(0), "{said}");
    let records = common::read_records(&dir.out("b"));
    assert!(records.iter().all(|r| r["error"].is_null()), "{records:?}");
    assert!(records.iter().filter(|r| r["tls_us"].is_u64()).count() >= 2);
    assert_eq!(dir.files_holding("b", "PRIVATE KEY"), Vec::<PathBuf>::new());

    // A key that is not the certificate's is a plan mistake, said without the key's text.
    std::fs::copy(&certs.server_key, dir.out("other.key")).unwrap();
    let wrong = format!("{ca}; client-cert \"client.pem\" key=\"other.key\"");
    let (code, said) = dir.run("c", &plan(&sim.url, &wrong, false), &[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("cannot be the client certificate's key"),
        "{said}"
    );
    assert!(!said.contains("PRIVATE KEY-----"), "{said}");
    // Nor is a certificate without its key taken.
    let keyless = format!("{ca}; client-cert \"client.pem\"");
    let (code, said) = dir.run("d", &plan(&sim.url, &keyless, false), &[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("needs the certificate's private key"),
        "{said}"
    );
}

#[test]
fn an_unverified_target_is_served_and_said_to_be_unverified_everywhere() {
    let dir = Dir(tempfile::tempdir().unwrap());
    let certs = common::certs::make(dir.0.path());
    let sim = tls_sim(&certs, None);
    let (code, said) = dir.run("a", &plan(&sim.url, "tls-verify #false", false), &[]);
    assert_eq!(code, Some(0), "{said}");
    let summary = dir.summary("a");
    let warning = common::warning_of(&summary, "tls-unverified").expect("the warning");
    assert_eq!(warning["severity"], "warning", "{warning}");
    let report = std::fs::read_to_string(dir.out("a").join("report.md")).unwrap();
    assert!(report.contains("tls-unverified"), "{report}");
    // The connections checked before the clock served every request: a TLS 1.3 server's
    // session tickets, sent after the handshake, are not taken for stray bytes on an idle
    // connection.
    let phase = common::phase(&summary, "p");
    assert_eq!(phase["requests"]["new_connections"], 0, "{phase}");
    assert_eq!(phase["connections"]["warmed"], 2, "{phase}");
    assert!(common::warning_of(&summary, "server-protocol").is_none());
    let log = common::read_log(&dir.out("a"));
    let run = log.iter().find(|line| line["event"] == "run").unwrap();
    assert_eq!(run["tls_unverified"], true, "{run}");
}
