//! `http "2"`: requests multiplexed as HTTP/2 streams on few connections, against the
//! simulator over loopback, spoken with prior knowledge over `http://` (h2c) and agreed by
//! ALPN over `https://`; timed as HTTP/1.1's are (every chunk's arrival, each new connection's
//! opening with its TLS handshake apart).

mod common;

use common::{run_file, SimProcess};

fn plan(url: &str, extra: &str) -> String {
    format!(
        "plan \"h2\" {{ seed 5 }}\n\
         target \"{url}\" {{ model \"llmload-sim\"; http \"2\" streams=4; {extra} }}\n\
         workload {{ tokenizer \"cl100k_base\"; input 32; output 8 }}\n\
         phase \"p\" {{ concurrency 10; requests 40 }}\n"
    )
}

/// Runs `text` in `dir` as `name`: its exit code, what it said, its output directory.
fn run(dir: &std::path::Path, name: &str, text: &str) -> (Option<i32>, String, std::path::PathBuf) {
    let path = dir.join(format!("{name}.kdl"));
    std::fs::write(&path, text).unwrap();
    let out = dir.join(name);
    let ran = run_file(&path, &out, &[], &[]);
    (
        ran.status.code(),
        String::from_utf8_lossy(&ran.stderr).into_owned(),
        out,
    )
}

#[test]
fn requests_share_few_connections_as_streams_and_are_timed_as_over_http1() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimProcess::start_with(&["--ttft", "30ms", "--itl", "5ms"]);
    let (code, said, out) = run(dir.path(), "h2c", &plan(&sim.url, ""));
    assert_eq!(code, Some(0), "{said}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let phase = common::phase(&summary, "p");
    // 10 streams at once, 4 to a connection: 3 connections, opened before the clock.
    assert_eq!(phase["connections"]["warmed"], 3, "{phase}");
    assert_eq!(phase["requests"]["new_connections"], 0, "{phase}");
    // Every report says which HTTP the run spoke.
    assert_eq!(
        summary["context"]["http"],
        "2, up to 4 streams a connection"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("streaming, HTTP 2, up to 4 streams a connection)"),
        "{report}"
    );
    let records = common::read_records(&out);
    assert_eq!(records.len(), 40);
    for record in &records {
        assert_eq!(record["http_status"], 200, "{record}");
        assert_eq!(record["completion_tokens"], 8, "{record}");
        let chunks = record["chunks"].as_array().unwrap();
        assert_eq!(chunks.len(), 8, "{record}");
        // The server's delays, as HTTP/1.1 measures them: it writes token k no sooner than
        // 30 ms + k × 5 ms after the request arrived (after its send), so no chunk is seen
        // sooner; how much later is the machine's business (an upper bound would be a timed
        // test).
        for (k, chunk) in chunks.iter().enumerate() {
            let at_us = chunk[0].as_u64().unwrap();
            assert!(
                at_us + 200 >= 30_000 + 5_000 * k as u64,
                "token {k}: {record}"
            );
        }
    }
}

#[test]
fn over_tls_http2_is_agreed_by_alpn_and_its_connections_timed() {
    let dir = tempfile::tempdir().unwrap();
    let certs = common::certs::make(dir.path());
    let sim = SimProcess::start_with(&[
        "--tls-cert",
        certs.server_cert.to_str().unwrap(),
        "--tls-key",
        certs.server_key.to_str().unwrap(),
    ]);
    let extra = "ca-file \"ca.pem\"; connections \"cold\"";
    let (code, said, out) = run(dir.path(), "h2", &plan(&sim.url, extra));
    assert_eq!(code, Some(0), "{said}");
    let records = common::read_records(&out);
    assert!(
        records.iter().all(|r| r["http_status"] == 200),
        "{records:?}"
    );
    // Opened by the first requests: at least 3 (10 at once, 4 a connection), each with its
    // TLS handshake timed apart; the rest rode on them.
    let opened: Vec<_> = records
        .iter()
        .filter(|r| r["connect_us"].is_u64())
        .collect();
    assert!((3..=10).contains(&opened.len()), "{opened:?}");
    assert!(opened.iter().all(|r| r["tls_us"].is_u64()), "{opened:?}");
}

#[test]
fn an_unknown_version_or_streams_for_http1_is_a_plan_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let bad = |version: &str| {
        format!(
            "target \"http://127.0.0.1:9/v1\" {{ {version} }}\n\
             workload {{ input 8; output 8 }}\nphase \"p\" {{ requests 1; concurrency 1 }}\n"
        )
    };
    for (version, said) in [
        ("http \"3\"", "unknown HTTP version \"3\""),
        ("http \"1.1\" streams=8", "`streams` is for HTTP/2"),
        ("http \"2\" streams=0", "streams"),
    ] {
        let (code, stderr, _) = run(dir.path(), "bad", &bad(version));
        assert_eq!(code, Some(2), "{version}: {stderr}");
        assert!(stderr.contains(said), "{version}: {stderr}");
    }
}

/// A TLS front offering HTTP/1.1 alone (as many gateways do) for the plain server at
/// `backend`, on a thread of its own: its port.
fn http1_only_tls_front(certs: &common::certs::Certs, backend: String) -> u16 {
    let files = llmload::sim::TlsFiles {
        cert: &std::fs::read(&certs.server_cert).unwrap(),
        key: &std::fs::read(&certs.server_key).unwrap(),
        client_ca: None,
    };
    let mut config = (*llmload::sim::tls_server_config(files).unwrap()).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((socket, _)) = listener.accept().await {
                let (acceptor, backend) = (acceptor.clone(), backend.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
    });
    port
}

#[test]
fn auto_speaks_http2_where_agreed_and_http1_where_the_server_chooses_it() {
    let dir = tempfile::tempdir().unwrap();
    let certs = common::certs::make(dir.path());
    let tls = |path: &std::path::PathBuf| path.to_str().unwrap().to_string();
    let (cert, key) = (tls(&certs.server_cert), tls(&certs.server_key));
    let both = SimProcess::start_with(&["--tls-cert", &cert, "--tls-key", &key]);
    let plain = SimProcess::start_with(&[]);
    let authority = plain
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/v1");
    let front = http1_only_tls_front(&certs, authority.to_string());
    let auto = |url: &str| {
        plan(url, "ca-file \"ca.pem\"").replace("http \"2\" streams=4", "http \"auto\" streams=4")
    };
    // A server offering both: HTTP/2, 3 connections for 10 streams.
    // One offering HTTP/1.1 alone: HTTP/1.1, a connection per stream.
    let front_url = format!("https://127.0.0.1:{front}/v1");
    for (name, url, connections) in [("both", &both.url, 3), ("front", &front_url, 10)] {
        let (code, said, out) = run(dir.path(), name, &auto(url));
        assert_eq!(code, Some(0), "{name}: {said}");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let phase = common::phase(&summary, "p");
        assert_eq!(phase["requests"]["ok"], 40, "{name}: {phase}");
        assert_eq!(
            phase["connections"]["warmed"], connections,
            "{name}: {phase}"
        );
        assert_eq!(
            phase["requests"]["connection_retries"], 0,
            "{name}: {phase}"
        );
    }
}
