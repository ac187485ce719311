//! Sending a plan: the schedule compiled (and sharded), the simulator started for a "sim"
//! target, the requests' templates and the records' header made, the observers that watch the
//! run (abort conditions, a search's probes) put in place, the server's telemetry scraped
//! beside it, and the executor run.

use std::collections::HashMap;
use std::sync::Arc;

use super::archive::{keep_sources, sha256};
use super::*;
use crate::executor::Event;
use crate::telemetry::command::CommandSource;

/// Sends `plan` and writes its records (and a copy of the plan) into `options.out_dir`.
pub fn execute(plan: &Plan, options: &RunOptions) -> Result<Execution> {
    // Before anything is written: a plan that may not start its server leaves nothing behind.
    server::permitted(plan, options)?;
    let seed = options.seed.unwrap_or(plan.seed);
    let schedule = planner::compile(plan, seed)?;
    let schedule = match options.shard {
        Some(shard) => schedule.shard(shard)?,
        None => schedule,
    };
    let tokenizer = Arc::new(Tokenizer::load(&plan.workload.tokenizer)?);
    let mut secrets = Secrets::new();
    let api_keys = target::api_keys(plan, &*options.observer, &mut secrets)?;
    let headers = target::extra_headers(plan, &*options.observer, &mut secrets)?;
    let out = &options.out_dir;
    outdir::prepare(out, Some(&plan.name))?;
    keep_sources(plan, out)?;
    let runtime = runtime(options.threads)?;
    let records_path = out.join(records_compression(plan, &schedule).file_name());
    // What the plan's server is given (an API key, a token) is kept out of everything too.
    for secret in plan.server.iter().flat_map(|s| &s.secrets) {
        secrets.add(secret);
    }
    let sim_writes = runtime.block_on(async {
        // The plan's own server first: the target is where it listens.
        let mut launched = server::launch(plan, options, &secrets).await?;
        let endpoint = options.target.as_ref().unwrap_or(&plan.target.endpoint);
        let (endpoint, metrics_source) = server::filled_target(plan, endpoint, launched.as_ref());
        let endpoint = &endpoint;
        let (target, simulator, target_display) = target_of(endpoint, plan, options, &tokenizer)?;
        for secret in target.secrets() {
            secrets.add(&secret);
        }
        // Each API a phase speaks sends the keys its own way.
        let credentials = |api: crate::api::Api| -> Result<Vec<executor::KeyCredentials>> {
            api_keys
                .iter()
                .map(|run_key| {
                    let own = target::credentials(api.dialect(), run_key.key.as_ref())?;
                    Ok(executor::KeyCredentials {
                        var: run_key.key.as_ref().map(|key| key.var().to_string()),
                        headers: with_basic_auth(own, &target, &*options.observer),
                        limits: run_key.limits,
                    })
                })
                .collect()
        };
        let request_id_prefix = records::new_request_id_prefix();
        let mut header = run_header(
            plan,
            options,
            seed,
            &tokenizer,
            target_display,
            &request_id_prefix,
        );
        // What the command line gave (labels, values set) goes into every report: a secret
        // pasted into one (`--label flags="--api-key sk-…"`) is kept of none.
        for text in header
            .labels
            .values_mut()
            .chain(header.overrides.iter_mut())
        {
            secrets.redact_in_place(text);
        }
        let (template, phase_templates) =
            templates(plan, &target, credentials, headers, request_id_prefix)?;
        let tls = trust(plan)?;
        if let Some(launched) = launched.as_mut() {
            note_version(launched, &template, &tls, &secrets).await;
        }
        header.server = launched.as_ref().map(|l| Box::new(l.server.launched()));
        let Watching {
            observer,
            probes: watch,
            controls,
        } = observers(plan, options, &schedule);
        let answers = match &plan.target.response_format {
            Some(format) => Some(Arc::new(
                executor::answers::AnswerCheck::new(format)
                    .map_err(|e| Error::usage(e.to_string()))?,
            )),
            None => None,
        };
        let config = RunConfig {
            answers,
            http: plan.target.http,
            template,
            phase_templates,
            warm_connections: plan.target.warm_connections,
            prompts: Arc::new(WorkloadPrompts::new(tokenizer.clone(), plan, &schedule)),
            tokenizer,
            header,
            secrets: Arc::new(secrets),
            records_path: records_path.clone(),
            grace: options.grace,
            worker_threads: options.threads,
            observer,
            stop: options.stop.clone(),
            start_at: options.start_at,
            live: Arc::new(executor::LiveCounters::default()),
            image_urls: plan
                .workload
                .image_urls
                .map(|urls| (urls, dataset_image_files(plan))),
            tls,
        };
        let schedule = Arc::new(schedule);
        let source = phase_source(plan, schedule.clone(), watch, controls);
        let scraper = start_scraper(plan, &metrics_source, &target, &config, out)?;
        // From here on, a server that exits ends the run (not carried out).
        if let Some(launched) = &mut launched {
            let ready_url = launched.ready_url.clone();
            launched
                .server
                .watch(options.stop.clone(), ready_url, config.live.clone());
        }
        let started_ms = crate::telemetry::scrape::now_unix_ms();
        let prometheus = match &metrics_source {
            plan::MetricsSource::Prometheus(source) => Some((source.clone(), config.tls.clone())),
            plan::MetricsSource::Auto | plan::MetricsSource::Urls(_) | plan::MetricsSource::Off => {
                None
            }
        };
        let ran = executor::run_from(schedule, source, config).await;
        let window = (started_ms, crate::telemetry::scrape::now_unix_ms());
        wind_down(scraper, launched, out).await?;
        if let Some((source, tls)) = prometheus {
            read_prometheus(&source, &tls, window, plan.target.metrics_interval, out).await?;
        }
        ran?;
        Ok::<_, Error>(simulator.and_then(|server| server.writes()))
    })?;
    Ok(Execution {
        records_path,
        sim_writes,
    })
}

/// The target's URL, the simulator when the target is "sim" (started in-process, on a
/// loopback port of its own), and the target as reports show it.
fn target_of(
    endpoint: &Endpoint,
    plan: &Plan,
    options: &RunOptions,
    tokenizer: &Arc<Tokenizer>,
) -> Result<(TargetUrl, Option<sim::EmbeddedSim>, String)> {
    let (target, simulator) = match endpoint {
        Endpoint::Url(url) => (TargetUrl::parse(url)?, None),
        Endpoint::Simulator => {
            let addr = ([127, 0, 0, 1], 0).into();
            let serve = sim::ServeOptions {
                record_writes: options.record_writes,
                tls: None,
            };
            let server = sim::serve_embedded(addr, plan.sim.clone(), tokenizer.clone(), serve)
                .map_err(|e| Error::run(format!("cannot start the simulator: {e}")))?;
            (TargetUrl::parse(&server.base_url())?, Some(server))
        }
    };
    let shown = match endpoint {
        Endpoint::Simulator => format!("sim (embedded, {})", target.shown()),
        Endpoint::Url(_) => target.shown(),
    };
    Ok((target, simulator, shown))
}

/// The started server's version, asked as the scraper asks: with the run's credentials, on its
/// own origin only (and kept of every secret).
async fn note_version(
    launched: &mut server::Launched,
    template: &RequestTemplate,
    tls: &crate::tls::Trust,
    secrets: &Secrets,
) {
    let version = crate::telemetry::scrape::server_version(
        &client_with(origin_headers(&launched.ready_url, template), tls),
        &launched.ready_url,
    )
    .await;
    launched
        .server
        .set_version(version.map(|v| secrets.redact(&v).into_owned()));
}

/// Where the executor's groups of phases come from: a search's probes, or the schedule (with
/// the controls of phases that end once decided).
fn phase_source(
    plan: &Plan,
    schedule: Arc<crate::planner::Schedule>,
    watch: Option<Arc<search::ProbeWatch>>,
    controls: HashMap<usize, executor::PhaseControl>,
) -> Box<dyn executor::PhaseSource> {
    let search = watch.and_then(|watch| {
        search::SearchSource::new(schedule.clone(), verdict::objectives(plan), plan.slo, watch)
    });
    match search {
        Some(search) => Box::new(search),
        None => Box::new(executor::ScheduleSource::new(schedule).with_controls(controls)),
    }
}

/// The server's own metrics, scraped beside the run on a thread and connection of its own,
/// and the plan's GPU commands read there too; none when the plan scrapes nothing.
fn start_scraper(
    plan: &Plan,
    metrics_source: &plan::MetricsSource,
    target: &TargetUrl,
    config: &RunConfig,
    out: &Path,
) -> Result<Option<crate::telemetry::scrape::Scraper>> {
    let metrics = telemetry_urls(metrics_source, target);
    let commands: Vec<CommandSource> = plan
        .target
        .gpus
        .iter()
        .map(|source| match source {
            plan::GpuSource::NvidiaSmi => CommandSource::nvidia_smi(plan.target.metrics_interval),
            plan::GpuSource::Command(command) => CommandSource::shell(command),
        })
        .collect();
    if metrics.is_empty() && commands.is_empty() {
        return Ok(None);
    }
    let targets = metrics
        .into_iter()
        .map(|url| {
            let shown = redact_url(url.as_str());
            let headers = origin_headers(&url, &config.template);
            crate::telemetry::scrape::ScrapeTarget {
                url,
                shown,
                headers,
                tls: config.tls.clone(),
            }
        })
        .collect();
    Ok(Some(crate::telemetry::scrape::Scraper::start(
        targets,
        commands,
        plan.target.metrics_interval,
        out,
        config.secrets.clone(),
    )?))
}

/// After the run: the scraper's last scrape written, and the started server stopped (its log
/// and what happened to it kept in `out`).
async fn wind_down(
    scraper: Option<crate::telemetry::scrape::Scraper>,
    launched: Option<server::Launched>,
    out: &Path,
) -> Result<()> {
    if let Some(scraper) = scraper {
        tokio::task::spawn_blocking(move || scraper.finish())
            .await
            .ok();
    }
    if let Some(launched) = launched {
        let out = out.to_path_buf();
        tokio::task::spawn_blocking(move || launched.server.stop(&out))
            .await
            .map_err(|e| Error::run(format!("the server's stop failed: {e}")))??;
    }
    Ok(())
}

/// The replicas' telemetry over the run's `window`, read from the plan's Prometheus once it
/// has had `lag` to scrape the run's last seconds, appended to the run's telemetry.
async fn read_prometheus(
    source: &plan::PrometheusSource,
    tls: &crate::tls::Trust,
    window: (f64, f64),
    step: std::time::Duration,
    out: &Path,
) -> Result<()> {
    tokio::time::sleep(source.lag).await;
    let shown = match &source.matchers {
        Some(m) => format!("{} (Prometheus, {{{m}}})", redact_url(&source.url)),
        None => format!("{} (Prometheus)", redact_url(&source.url)),
    };
    let client = client_with(Vec::new(), tls);
    let from = crate::telemetry::promql::Source {
        url: &source.url,
        matchers: source.matchers.as_deref(),
    };
    let lines = crate::telemetry::promql::read(&client, &from, &shown, window, step).await;
    crate::telemetry::scrape::append(out, &lines)
        .map_err(|e| Error::run(format!("cannot write the server telemetry: {e}")))
}

/// The headers a request to `url` carries besides its own: the run's credentials and extra
/// headers when `url` is on the target's origin (its `/metrics`, `/version`, the started
/// server's readiness path), none for another host. One rule, whatever form the credentials
/// were given in (the plan, `--api-key-env`, `--header`, the URL's `user:password`).
fn origin_headers(
    url: &reqwest::Url,
    template: &executor::RequestTemplate,
) -> Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)> {
    if url.origin() != template.url.origin() {
        return Vec::new();
    }
    template
        .credentials(0)
        .iter()
        .chain(template.headers.iter())
        .cloned()
        .collect()
}

/// An HTTP client that sends `headers` with every request.
fn client_with(
    headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    tls: &crate::tls::Trust,
) -> reqwest::Client {
    tls.reqwest_builder()
        .default_headers(headers.into_iter().collect())
        .build()
        .unwrap_or_default()
}

/// How the run's records are written: as the plan's `records` says; `"auto"` compresses a run
/// planned long, by the requests it schedules, or where they are not known ahead (closed loops
/// ended by time, a search's probes), by how long it may send them.
fn records_compression(plan: &Plan, schedule: &planner::Schedule) -> records::Compression {
    use crate::plan::{RecordsChoice, AUTO_ZSTD_REQUESTS, AUTO_ZSTD_SENDING};
    match plan.report.records {
        RecordsChoice::Zstd => records::Compression::Zstd,
        RecordsChoice::Jsonl => records::Compression::Plain,
        RecordsChoice::Auto => {
            let scheduled: usize = schedule.phases.iter().map(|p| p.requests.len()).sum();
            let unknown_ahead: std::time::Duration = schedule
                .phases
                .iter()
                .filter(|p| p.open_ended)
                .filter_map(|p| p.duration)
                .chain(schedule.search.as_ref().map(|s| s.spec.max_duration))
                .sum();
            if scheduled > AUTO_ZSTD_REQUESTS || unknown_ahead > AUTO_ZSTD_SENDING {
                records::Compression::Zstd
            } else {
                records::Compression::Plain
            }
        }
    }
}

/// Where the server's metrics are scraped: the plan's URLs, or the target's own `/metrics` (its
/// base URL's host, the API's path left out); none when the plan turns it off.
fn telemetry_urls(source: &plan::MetricsSource, target: &TargetUrl) -> Vec<reqwest::Url> {
    match source {
        // (Read from Prometheus after the run, not scraped beside it.)
        plan::MetricsSource::Off | plan::MetricsSource::Prometheus(_) => Vec::new(),
        plan::MetricsSource::Urls(urls) => urls
            .iter()
            .filter_map(|url| reqwest::Url::parse(url).ok())
            .collect(),
        plan::MetricsSource::Auto => {
            let mut url = target.endpoint("");
            url.set_path("/metrics");
            vec![url]
        }
    }
}

/// The key's headers, and the target URL's `user:password` as Basic authentication unless the
/// key already sends `Authorization` (then the key wins, and a note says the URL's is unused).
fn with_basic_auth(
    mut credentials: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    target: &TargetUrl,
    observer: &dyn Observer,
) -> Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)> {
    if let Some((name, value)) = target.basic_auth() {
        if credentials.iter().any(|(n, _)| *n == name) {
            observer.on_event(Event::Note(
                "the target URL's user:password is not sent: the API key's Authorization header is",
            ));
        } else {
            credentials.push((name, value));
        }
    }
    credentials
}

/// The run's TLS configuration: the plan's `ca-file` (checked when the plan was read) beside the
/// public and platform roots, its `client-cert`, its `tls-verify`. A file that cannot be used
/// (`SSL_CERT_FILE` naming a missing one, say) ends the run before anything is sent, naming the
/// file, never its text.
fn trust(plan: &Plan) -> Result<crate::tls::Trust> {
    let mut settings = crate::tls::TrustSettings {
        skip_verify: !plan.target.tls_verify,
        ..Default::default()
    };
    if let Some((name, pem)) = &plan.target.ca_file {
        settings.extra_roots = crate::tls::certificates(pem.as_bytes())
            .map_err(|why| Error::usage(format!("ca-file {name}: {why}")))?;
    }
    if let Some(client) = &plan.target.client_cert {
        let identity =
            crate::tls::client_identity(client.cert.1.as_bytes(), client.key.1.as_bytes())
                .map_err(|why| {
                    Error::usage(format!(
                        "client-cert {} key={}: {why}",
                        client.cert.0, client.key.0
                    ))
                })?;
        settings.identity = Some(identity);
    }
    crate::tls::check_environment().map_err(|e| Error::usage(e.to_string()))?;
    crate::tls::Trust::new(settings).map_err(|e| Error::usage(format!("TLS: {e}")))
}

/// The records' first line: what the run is (tool, plan and its files' SHA-256, seed, target,
/// model, API, tokenizer, when and where it started, its shard and labels).
fn run_header(
    plan: &Plan,
    options: &RunOptions,
    seed: u64,
    tokenizer: &Tokenizer,
    target_display: String,
    request_id_prefix: &str,
) -> RunHeader {
    RunHeader {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        plan: plan.name.clone(),
        plan_file: plan.source.file_name.clone(),
        plan_sha256: sha256(&plan.source.text),
        plan_files: plan
            .source
            .includes
            .iter()
            .map(|(path, text)| records::PlanFile {
                path: path.clone(),
                sha256: sha256(text),
            })
            .chain(
                plan.data_files()
                    .into_iter()
                    .map(|(path, sha256)| records::PlanFile { path, sha256 }),
            )
            .collect(),
        env: plan.source.env.iter().cloned().collect(),
        overrides: plan.source.overrides.clone(),
        exports: plan.report.export.clone(),
        server: None,
        seed,
        target: target_display,
        model: plan.target.model.clone(),
        api: plan.target.api.as_str().to_string(),
        stream: plan.target.stream,
        exact_output: plan.workload.ignore_eos,
        tokenizer: tokenizer.name().to_string(),
        tokenizer_note: plan.workload.tokenizer_note.clone(),
        target_notes: Vec::new(),
        shares_prompts: plan.workload.shares_prompts(),
        tls_unverified: !plan.target.tls_verify,
        paces_to_answers: matches!(plan.target.on_throttle, plan::OnThrottle::Pace),
        keys: match plan.target.api_keys.as_slice() {
            [] | [_] => Vec::new(),
            keys => keys.iter().map(|key| key.env.clone()).collect(),
        },
        http: plan.target.http.described(),
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        client_host: target::host_name(),
        client_machine: Some(records::ClientMachine::here()),
        served_models: Vec::new(),
        clock_origin_ns: None,
        request_id_prefix: Some(request_id_prefix.to_string()),
        started_unix_ns: None,
        shard: options.shard.map(|shard| records::ShardRun {
            index: shard.index,
            count: shard.count,
            start_at: options.start_at.map(|at| {
                chrono::DateTime::<chrono::Utc>::from(at)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            }),
            start_late_ms: None,
        }),
        merged: Vec::new(),
        labels: options.labels.clone(),
        cost: plan.cost.clone(),
        gpu_prices: plan.gpu_prices.clone(),
    }
}

/// The plan's headers, and the headers `dialect` sends on every request (Anthropic's
/// `anthropic-version`) that the plan does not set itself.
fn with_fixed_headers(
    mut headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    dialect: &dyn crate::api::Dialect,
) -> Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)> {
    for (name, value) in dialect.fixed_headers() {
        let name = reqwest::header::HeaderName::from_static(name);
        if !headers.iter().any(|(own, _)| *own == name) {
            headers.push((name, reqwest::header::HeaderValue::from_static(value)));
        }
    }
    headers
}

type Headers = Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>;

/// How the run's requests are spoken (to `target`), and the templates of phases with a model,
/// a server or an API of their own.
fn templates(
    plan: &Plan,
    target: &TargetUrl,
    credentials: impl Fn(crate::api::Api) -> Result<Vec<executor::KeyCredentials>>,
    headers: Headers,
    request_id_prefix: String,
) -> Result<(
    RequestTemplate,
    std::collections::BTreeMap<usize, RequestTemplate>,
)> {
    let dialect = plan.target.api.dialect();
    let template = RequestTemplate {
        url: target.endpoint(dialect.path()),
        dialect,
        options: plan.body_options(),
        keys: Arc::new(credentials(plan.target.api)?),
        headers: Arc::new(with_fixed_headers(headers.clone(), dialect)),
        timeout: plan.target.timeout,
        on_throttle: plan.target.on_throttle,
        request_id_prefix,
        max_line: usize::try_from(plan.target.max_line).unwrap_or(usize::MAX),
        max_body: plan.target.max_body,
        route_answered: Default::default(),
    };
    // Phases with a model, a server or an API of their own: the target's way of speaking,
    // with what they change.
    let mut phase_templates = std::collections::BTreeMap::new();
    for (index, phase) in plan.phases.iter().enumerate() {
        if phase.model.is_none() && phase.endpoint.is_none() && phase.api.is_none() {
            continue;
        }
        let mut own = template.clone();
        if let Some(model) = &phase.model {
            own.options.model = model.clone();
        }
        if let Some(api) = phase.api {
            own.dialect = api.dialect();
            own.url = target.endpoint(own.dialect.path());
            own.keys = Arc::new(credentials(api)?);
            own.headers = Arc::new(with_fixed_headers(headers.clone(), own.dialect));
        }
        if let Some(endpoint) = &phase.endpoint {
            let target = TargetUrl::parse(endpoint)
                .map_err(|e| Error::usage(format!("phase \"{}\": {e}", phase.name)))?;
            own.url = target.endpoint(own.dialect.path());
        }
        if own.url != template.url {
            // Another route: whether it is served is its own question.
            own.route_answered = Default::default();
        }
        phase_templates.insert(index, own);
    }
    Ok((template, phase_templates))
}

/// What watches the run between the executor and the caller's observer: the plan's abort
/// conditions, the phases that end once decided (their controls returned too: the schedule's
/// source runs them under these), and a search's probe watch (returned too: the search's
/// source needs it).
fn observers(plan: &Plan, options: &RunOptions, schedule: &planner::Schedule) -> Watching {
    // A target that stops answering ends the run; the plan's abort conditions watch it too.
    let observer: Arc<dyn Observer> = match plan.target.unreachable_after {
        Some(window) => Arc::new(unreachable::UnreachableWatch::new(
            window,
            options.stop.clone(),
            options.observer.clone(),
        )),
        None => options.observer.clone(),
    };
    // How the objectives stand, for the people watching: next to the caller's observer, which
    // it hands them to.
    let standing = options
        .objectives_live
        .then(|| standing::StandingWatch::new(plan, observer.clone()))
        .flatten();
    let observer: Arc<dyn Observer> = match standing {
        Some(standing) => Arc::new(standing),
        None => observer,
    };
    let observer: Arc<dyn Observer> = if plan.abort.is_empty() {
        observer
    } else {
        Arc::new(abort::AbortWatch::new(
            plan.abort.clone(),
            plan.slo,
            options.stop.clone(),
            observer,
        ))
    };
    let phase_names: Vec<(usize, String)> = schedule
        .phases
        .iter()
        .map(|p| (p.index, p.name.clone()))
        .collect();
    let controls: HashMap<usize, executor::PhaseControl> = plan
        .phases
        .iter()
        .filter(|p| p.until_decided.is_some())
        .filter_map(|p| phase_names.iter().find(|(_, name)| *name == p.name))
        .map(|(index, _)| (*index, executor::PhaseControl::new()))
        .collect();
    let observer: Arc<dyn Observer> =
        match decided::DecidedWatch::new(plan, &controls, &phase_names, observer.clone()) {
            Some(decided) => Arc::new(decided),
            None => observer,
        };
    // A search probes from what its earlier probes' records say, and watches each probe.
    let watch = schedule
        .search
        .as_ref()
        .map(|_| Arc::new(search::ProbeWatch::new(observer.clone())));
    let observer: Arc<dyn Observer> = match &watch {
        Some(watch) => watch.clone(),
        None => observer,
    };
    Watching {
        observer,
        probes: watch,
        controls,
    }
}

/// What watches a run, and what the schedule's source needs of it.
struct Watching {
    /// The outermost observer: it hands every event on to the ones inside it.
    observer: Arc<dyn Observer>,
    /// A search's probe watch.
    probes: Option<Arc<search::ProbeWatch>>,
    /// The controls of the phases that end once decided, by phase index.
    controls: HashMap<usize, executor::PhaseControl>,
}

/// The image files a dataset's entries name, each once (served from the start of a run that
/// sends images as URLs).
fn dataset_image_files(plan: &Plan) -> Vec<crate::plan::Attachment> {
    let Some(dataset) = &plan.workload.dataset else {
        return Vec::new();
    };
    let mut seen = std::collections::BTreeSet::new();
    dataset
        .entries
        .iter()
        .flat_map(|entry| entry.media.iter())
        .filter(|a| matches!(a.kind, crate::plan::AttachmentKind::Image { .. }))
        .filter(|a| a.file.is_some_and(|n| seen.insert(n)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compression(phases: &str, records: &str) -> records::Compression {
        let text = format!(
            "target \"sim\"\nworkload {{ input 64; output 8 }}\n{phases}\nreport {{ records \"{records}\" }}\n"
        );
        let plan = crate::plan::parse_plan("t.kdl", text).unwrap();
        let schedule = planner::compile(&plan, 1).unwrap();
        records_compression(&plan, &schedule)
    }

    #[test]
    fn auto_compresses_runs_planned_long_and_the_plan_can_choose_either_way() {
        use records::Compression::{Plain, Zstd};
        let short = "phase \"a\" { rate 10; duration \"10s\" }";
        // 100/s for 5 minutes: some 30,000 requests scheduled.
        let many = "phase \"a\" { rate 100; duration \"5m\" }";
        // A closed loop's requests are not known ahead: judged by how long it sends.
        let long_closed = "phase \"a\" { concurrency 4; duration \"11m\" }";
        let short_closed = "phase \"a\" { concurrency 4; duration \"9m\" }";
        assert_eq!(compression(short, "auto"), Plain);
        assert_eq!(compression(many, "auto"), Zstd);
        assert_eq!(compression(long_closed, "auto"), Zstd);
        assert_eq!(compression(short_closed, "auto"), Plain);
        assert_eq!(compression(short, "zstd"), Zstd);
        assert_eq!(compression(many, "jsonl"), Plain);
    }
}
