//! `llmload sim`: serve the embedded simulator until Ctrl-C, for a run in another process (or a
//! person's curl).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{parse_duration_arg, say};
use crate::error::{Error, Result, EXIT_PASS};
use crate::plan::{self, SimSettings, TokenizerSpec};
use crate::session;
use crate::sim;
use crate::tokens::Tokenizer;

#[derive(clap::Args, Debug)]
pub(super) struct SimArgs {
    /// The port to listen on; 0 picks a free one (the first line printed says which).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// An engine model: a built-in profile name (llama-3.1-8b-h100, llama-3.1-70b-4xh100,
    /// qwen2.5-7b-l4, tiny) or a KDL file holding a `sim { ... }` block. Without it, every
    /// request is served alone with the fixed delays below.
    #[arg(long, value_name = "NAME|FILE")]
    profile: Option<String>,
    /// The address to listen on (an IP; keep it on loopback unless you mean otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Time to first token (fixed-delay mode).
    #[arg(long, default_value = "50ms", value_parser = parse_duration_arg)]
    ttft: Duration,
    /// Time between tokens (fixed-delay mode).
    #[arg(long, default_value = "10ms", value_parser = parse_duration_arg)]
    itl: Duration,
    /// Each delay is stretched by a uniform random amount up to this.
    #[arg(long, default_value = "0ms", value_parser = parse_duration_arg)]
    jitter: Duration,
    /// Tokens per streamed chunk, as servers that merge tokens send them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    tokens_per_chunk: u32,
    /// The tokenizer of the generated text and of prompt counts: cl100k_base, o200k_base, or a
    /// path to a tokenizer.json.
    #[arg(long, default_value = "cl100k_base")]
    tokenizer: String,
    /// Seeds jitter, faults and generated text.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Record when every token of every streamed request is written, and serve the record
    /// at GET /llmload/writes (one JSON object per request). For measuring a client's
    /// timing error; memory grows with every request.
    #[arg(long)]
    record_writes: bool,
    /// Serve https:// with this certificate (a PEM chain); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Ask every client for a certificate signed by this CA (PEM), as a mutual-TLS gateway
    /// does; needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<std::path::PathBuf>,
    /// Runtime worker threads [default: one per core].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
}

/// Settings from `--profile`: a built-in engine, or a profile file.
fn profile(profile: &str, flags: SimSettings) -> Result<SimSettings> {
    if let Some(engine) = plan::profiles::builtin(profile) {
        return Ok(SimSettings {
            engine: Some(engine),
            ..flags
        });
    }
    let path = Path::new(profile);
    if !path.is_file() {
        return Err(Error::usage(format!(
            "--profile {profile}: no such file, and no built-in profile of that name (built in: {})",
            plan::profiles::NAMES.join(", ")
        )));
    }
    let text = plan::read_plan_text(path)?;
    Ok(plan::parse_sim_profile(profile, text)?)
}

/// The TLS configuration `--tls-cert`, `--tls-key` and `--tls-client-ca` ask for.
fn tls(args: &SimArgs) -> Result<Option<Arc<rustls::ServerConfig>>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let read = |flag: &str, path: &Path| {
        std::fs::read(path).map_err(|e| Error::usage(format!("--{flag} {}: {e}", path.display())))
    };
    let client_ca = match &args.tls_client_ca {
        Some(path) => Some(read("tls-client-ca", path)?),
        None => None,
    };
    let files = sim::TlsFiles {
        cert: &read("tls-cert", cert)?,
        key: &read("tls-key", key)?,
        client_ca: client_ca.as_deref(),
    };
    sim::tls_server_config(files)
        .map(Some)
        .map_err(|e| Error::usage(format!("cannot serve TLS: {e}")))
}

pub(super) fn serve(args: &SimArgs) -> Result<u8> {
    let flags = SimSettings {
        ttft: args.ttft,
        itl: args.itl,
        jitter: args.jitter,
        tokens_per_chunk: args.tokens_per_chunk,
        seed: args.seed,
        ..SimSettings::default()
    };
    let settings = match &args.profile {
        Some(name) => profile(name, flags)?,
        None => flags,
    };
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .map_err(|_| {
            Error::usage(format!(
                "{}:{} is not an address to listen on (write an IP, e.g. 127.0.0.1)",
                args.host, args.port
            ))
        })?;
    let spec = if args.tokenizer.ends_with(".json") {
        TokenizerSpec::File(args.tokenizer.clone().into())
    } else {
        TokenizerSpec::Builtin(args.tokenizer.clone())
    };
    let tokenizer = Arc::new(Tokenizer::load(&spec)?);
    let runtime = session::runtime(args.threads.map(usize::from))?;
    let options = sim::ServeOptions {
        record_writes: args.record_writes,
        tls: tls(args)?,
    };
    runtime.block_on(async {
        let server = sim::serve_with(addr, settings, tokenizer, options)
            .await
            .map_err(|e| Error::usage(format!("cannot listen on {addr}: {e}")))?;
        say!(
            "llmload sim: serving {} (Ctrl-C to stop)",
            server.base_url()
        )?;
        let _ = tokio::signal::ctrl_c().await;
        server.shutdown();
        Ok(EXIT_PASS)
    })
}
