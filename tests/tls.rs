//! An `https://` target signed by a CA of its own (a company's internal endpoint): refused
//! under the public roots alone, served once the plan's `ca-file` or `SSL_CERT_FILE` names the
//! CA; a file that is not one is a plan mistake that shows none of its text. The server is the
//! simulator behind a loopback TLS proxy (tests/tls/proxy.py) with a certificate the test
//! makes with openssl.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{run_file, SimProcess};

/// openssl and Python are CI's (`.ci/run` requires both); without them here, the test says it
/// skipped, unless LLMLOAD_REQUIRE_TLS_TOOLS is set.
fn tools_present() -> bool {
    let present = |program: &str, arg: &str| {
        Command::new(program)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let ok = present("openssl", "version") && present("python3", "--version");
    if !ok {
        assert!(
            std::env::var_os("LLMLOAD_REQUIRE_TLS_TOOLS").is_none(),
            "openssl and python3 are required here"
        );
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "\nSKIPPED: openssl or python3 missing\n");
    }
    ok
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.pem`) and a server certificate for 127.0.0.1 it signed (`server.pem`,
/// `server.key`), made in `dir`.
fn make_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"]);
    ca.extend(["-subj", "/CN=llmload test CA"]);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    ca.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    openssl(dir, &ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    csr.extend(["-subj", "/CN=127.0.0.1"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

/// The TLS proxy in front of `backend_port`; its port.
struct Proxy {
    child: Child,
    port: u16,
}

impl Proxy {
    fn start(dir: &Path, backend_port: u16) -> Proxy {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls/proxy.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(dir.join("server.pem"))
            .arg(dir.join("server.key"))
            .arg(backend_port.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
        Proxy { child, port }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn plan(port: u16, ca_file: &str) -> String {
    // The server's /metrics scraped and its cache reset over the same TLS: every client llmload
    // makes for the target trusts the CA.
    format!(
        "plan \"tls\" {{ seed 1 }}\n\
         target \"https://127.0.0.1:{port}/v1\" {{ model \"llmload-sim\"; timeout \"10s\"; metrics interval=\"100ms\"; {ca_file} }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 32; output 8 }}\n\
         phase \"p\" {{ concurrency 2; requests 10; reset-cache #true }}\n"
    )
}

#[test]
fn a_target_signed_by_its_own_ca_is_served_once_the_ca_is_named() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certificates(dir.path());
    // An engine keeps a prefix cache a reset can empty (vLLM's endpoint).
    let sim = SimProcess::start_with(&["--profile", "tiny"]);
    let backend: u16 = sim
        .url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/v1")
        .parse()
        .unwrap();
    let proxy = Proxy::start(dir.path(), backend);
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let out = |name: &str| dir.path().join(name);

    // The public roots alone: the target's certificate is not trusted, and it is said.
    let untrusted = run_file(&write("a.kdl", plan(proxy.port, "")), &out("a"), &[], &[]);
    assert_ne!(untrusted.status.code(), Some(0));
    let said = String::from_utf8_lossy(&untrusted.stderr).to_lowercase();
    assert_eq!(untrusted.status.code(), Some(3), "{said}");
    assert!(said.contains("unknownissuer"), "{said}");
    // And what to do about it.
    assert!(
        said.contains("ca-file") && said.contains("ssl_cert_file"),
        "{said}"
    );

    // The plan names the CA: every request served over TLS.
    let trusted = run_file(
        &write("b.kdl", plan(proxy.port, "ca-file \"ca.pem\"")),
        &out("b"),
        &[],
        &[],
    );
    assert_eq!(
        trusted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    let records = common::read_records(&out("b"));
    assert_eq!(records.len(), 10);
    assert!(records.iter().all(|r| r["error"].is_null()), "{records:?}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out("b").join("summary.json")).unwrap())
            .unwrap();
    assert!(
        summary["server"]["samples"].as_u64().unwrap_or(0) >= 1,
        "{}",
        summary["server"]
    );
    let reset = &common::phase(&summary, "p")["cache_reset"];
    assert_eq!(reset["done"], true, "{reset}");

    // SSL_CERT_FILE, as OpenSSL and curl read it, does the same without a plan change.
    let ca = out("ca.pem");
    let from_env = run_file(
        &write("c.kdl", plan(proxy.port, "")),
        &out("c"),
        &[],
        &[("SSL_CERT_FILE", ca.as_os_str())],
    );
    assert_eq!(
        from_env.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&from_env.stderr)
    );

    // A file that is not a CA certificate is a plan mistake, and its text is shown nowhere.
    write("not-a-ca.pem", "sk-secret-looking-text\n".into());
    let wrong = run_file(
        &write("d.kdl", plan(proxy.port, "ca-file \"not-a-ca.pem\"")),
        &out("d"),
        &[],
        &[],
    );
    assert_eq!(wrong.status.code(), Some(2));
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(said.contains("holds no CA certificate"), "{said}");
    assert!(!said.contains("sk-secret"), "{said}");
    // Nor is the CA's text kept with a run that used it.
    let kept: Vec<_> = std::fs::read_dir(out("b"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|text| text.contains("BEGIN CERTIFICATE")))
        .collect();
    assert!(kept.is_empty(), "{kept:?}");
}
