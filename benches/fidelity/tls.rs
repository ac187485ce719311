//! The `tls` scenario: the `streams` scenario's loads over `https://` beside `http://`, against
//! the calibrated server serving TLS with a certificate made here (tests/common/certs.rs), the
//! ideal client speaking TLS too (rustls over the same hyper connection), and vllm-bench
//! (with `--insecure`: it takes no CA of one's own) when `LLMLOAD_VLLM_BENCH` is set. Issue 46's
//! target: TTFT error p99 at 256 streams within 1.5× the ideal TLS client's. Then HTTP/2 beside
//! HTTP/1.1, llmload against `llmload sim` (which speaks both; the calibrated server speaks
//! HTTP/1.1 only), timed against the simulator's own write log.

use super::{closed_plan, cores, fixture_tokenizer, throughput_cells, Bench, ColdRuns, Setup};

/// The schemes compared, and whether each is TLS.
const SCHEMES: [(&str, bool); 2] = [("http", false), ("https", true)];

impl Bench {
    pub(super) fn tls(&mut self) {
        self.calibrated = true;
        let (server_core, client_core) = cores();
        self.say("## TLS: https:// beside http://, against the calibrated server\n");
        self.say(&format!(
            "The calibrated server on core {server_core} serving TLS 1.3 (rustls, an ECDSA P-256 \
             certificate signed by a CA made for the run) or plain HTTP; each client alone on core \
             {client_core} with `--threads 1`; completions, 128-token prompts, 64-token answers, a \
             token per write. Zero delay: {} s closed loop after 2 requests per stream of warmup \
             (tokens per client CPU-second, × the ideal client over the same scheme).\n",
            self.seconds
        ));
        self.say("| scheme | load | client | requests | tokens/s | client CPU % | tokens per client CPU-s | × ideal | peak RSS MB |");
        self.say("|---|---|---|---:|---:|---:|---:|---:|---:|");
        let certs_dir = self.dir.join("certs");
        std::fs::create_dir_all(&certs_dir).expect("a directory for the certificates");
        super::common::certs::make(&certs_dir);
        let certs = || super::common::certs::Certs::at(&certs_dir);
        for (scheme, tls) in SCHEMES {
            self.tls = tls.then(&certs);
            for streams in [64u32, 256, 1000] {
                self.throughput_rows(scheme, streams);
            }
        }
        self.say("");
        self.say(
            "Cold, TTFT 50 ms and ITL 10 ms, 256 streams, 2,000 requests, the whole run: every client \
             opens its connections with its first requests (llmload also as by default, before the \
             clock). \"TTFT p99 − server's\" as in the streams scenario; the errors are matched per \
             request against the server's own write times.\n",
        );
        self.say("| scheme | client | requests | TTFT p99 − server's | TTFT err p99 (matched) | ITL err p99 (matched) | connect p50 / TLS p50 ms | CPU-s per 1k requests | verdict |");
        self.say("|---|---|---:|---:|---:|---:|---:|---:|---|");
        for (scheme, tls) in SCHEMES {
            self.tls = tls.then(&certs);
            self.cold_rows(scheme);
        }
        self.say("");
        self.tls = None;
        self.calibrated = false;
        self.http2_rows();
    }

    /// llmload over HTTP/1.1 and over HTTP/2 (h2c, 100 streams a connection) against `llmload
    /// sim` with its write log: timing errors, cost, connections.
    fn http2_rows(&mut self) {
        self.say(
            "HTTP/2 beside HTTP/1.1: llmload against `llmload sim` (TTFT 20 ms, ITL 10 ms, its write \
             log the truth; client and simulator share the 2 cores), closed loop of N streams, \
             128-token prompts, 64-token answers, warm connections; HTTP/2 with prior knowledge, \
             100 streams a connection.\n",
        );
        self.say("| streams | HTTP | requests | connections | TTFT err p50 | TTFT err p99 | ITL err p99 | client CPU-s per 1k requests |");
        self.say("|---:|---|---:|---:|---:|---:|---:|---:|");
        for streams in [64u32, 256] {
            for (http, extra) in [("1.1", ""), ("2", " http \"2\";")] {
                let setup = Setup {
                    ttft: "20ms",
                    itl: "10ms",
                    plan: closed_plan(128, 64, streams, self.seconds).replace(
                        "api \"completions\";",
                        &format!("api \"completions\";{extra}"),
                    ),
                    client_threads: None,
                    first_wave: None,
                };
                let o = self.llmload(&format!("http{http}-{streams}"), &setup);
                self.say(&format!(
                    "| {streams} | {http} | {} | {} | {:+.3} | {:+.3} | {:+.3} | {:.3} |",
                    o.requests,
                    o.connections.unwrap_or(0),
                    o.errors.ttft.p50_ms,
                    o.errors.ttft.p99_ms,
                    o.errors.itl.p99_ms,
                    1000.0 * o.cpu_s / (o.requests.max(1) as f64),
                ));
            }
        }
        self.say("");
    }

    /// One load's rows at zero delay over `scheme`.
    fn throughput_rows(&mut self, scheme: &str, streams: u32) {
        let setup = Setup {
            ttft: "0ms",
            itl: "0ms",
            plan: closed_plan(128, 64, streams, self.seconds),
            client_threads: Some(1),
            first_wave: None,
        };
        let name = format!("tls-{scheme}-{streams}");
        let ours = self.llmload(&name, &setup);
        let base = self.baseline(&name, &setup);
        let requests = (ours.requests as u32).max(2000);
        let vllm = self.vllm_bench(
            &name,
            ("0ms", "0ms"),
            (streams, requests, 128),
            &fixture_tokenizer(),
        );
        let mut rows = vec![("llmload", &ours), ("ideal", &base)];
        rows.extend(vllm.as_ref().map(|v| ("vllm-bench (whole process)", v)));
        for (client, o) in rows {
            let cells = throughput_cells(o, &base);
            self.say(&format!(
                "| {scheme} | {streams} streams | {client} | {cells} |"
            ));
        }
    }

    /// The cold run's rows over `scheme`, with the verdict on llmload's cold connections.
    fn cold_rows(&mut self, scheme: &str) {
        let ColdRuns {
            ours,
            ours_cold,
            base,
            vllm,
        } = self.cold_runs(&format!("tls-cold-{scheme}"), 256, 2000);
        let limit = 1.5 * base.errors.ttft.p99_ms.max(0.1);
        let verdict = format!(
            "TTFT err p99 {} ≤ 1.5× ideal ({limit:.2})",
            if ours_cold.errors.ttft.p99_ms <= limit {
                "meets"
            } else {
                "misses"
            }
        );
        let mut rows = vec![
            ("llmload", &ours, ""),
            (
                "llmload, connections \"cold\"",
                &ours_cold,
                verdict.as_str(),
            ),
            ("ideal", &base, ""),
        ];
        rows.extend(vllm.as_ref().map(|v| ("vllm-bench (whole process)", v, "")));
        for (client, o, verdict) in rows {
            let matched = |value: f64, digits: usize| match o.errors.matched {
                0 => "-".to_string(),
                _ => format!("{value:+.digits$}"),
            };
            let connect = match (o.connect_p50_ms, o.tls_p50_ms) {
                (Some(connect), Some(tls)) => format!("{connect:.2} / {tls:.2}"),
                (Some(connect), None) => format!("{connect:.2} / -"),
                _ => "-".to_string(),
            };
            self.say(&format!(
                "| {scheme} | {client} | {} | {:+.2} | {} | {} | {connect} | {:.3} | {verdict} |",
                o.requests,
                o.ttft_p99_ms - o.true_ttft_p99_ms,
                matched(o.errors.ttft.p99_ms, 2),
                matched(o.errors.itl.p99_ms, 3),
                1000.0 * o.cpu_s / (o.requests.max(1) as f64),
            ));
        }
    }
}
