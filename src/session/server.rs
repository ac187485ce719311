//! The plan's `server` block in a run: started before anything is sent (when the run sends to
//! it: not with `--target`, not in a shard), its port written into the target's and the
//! metrics' URLs, watched while the run goes, stopped after it.

use super::*;
use crate::executor::Event;
use crate::server::StartedServer;

/// The plan's server, started and ready, with the port it listens on.
pub(super) struct Launched {
    pub server: StartedServer,
    pub port: u16,
    /// Its readiness path, asked again while the run goes whether it still answers.
    pub ready_url: reqwest::Url,
}

/// Whether the run may start the plan's server: a plan is often someone else's (a pull
/// request's), and its `server` block runs any command on this machine, so it runs only when
/// the caller said so ([`RunOptions::allow_server`]). Else the error shows the whole command
/// and how to allow it. No server to start (none, `--target`, a shard): allowed.
pub fn permitted(plan: &Plan, options: &RunOptions) -> Result<()> {
    let Some(settings) = &plan.server else {
        return Ok(());
    };
    if options.allow_server || options.target.is_some() || options.shard.is_some() {
        return Ok(());
    }
    Err(Error::usage(format!(
        "this plan starts a process on this machine (its server block, in {}): {}\n\
         llmload runs a plan's command only when told to: read it, then run with --allow-server \
         (or set LLMLOAD_ALLOW_SERVER=1 in a CI job that runs reviewed plans only), or send the \
         run to a server already running with --target URL",
        crate::escape::one_line(&settings.dir.display().to_string()),
        settings.shown_command()
    )))
}

/// Starts the plan's server and waits until it is ready; `None` when the plan has none or the
/// run sends elsewhere (a note says so). A server that does not start, exits, or is not ready
/// in time is an error (exit 3) quoting its log's last lines, its log and `server.json` kept.
/// Its only caller, `execute`, has asked [`permitted`] before anything was written.
pub(super) async fn launch(
    plan: &Plan,
    options: &RunOptions,
    secrets: &Secrets,
) -> Result<Option<Launched>> {
    let Some(settings) = &plan.server else {
        return Ok(None);
    };
    if options.target.is_some() {
        options.observer.on_event(Event::Note(
            "the plan's server is not started: --target sends the run elsewhere",
        ));
        return Ok(None);
    }
    if options.shard.is_some() {
        options.observer.on_event(Event::Note(
            "the plan's server is not started by a shard: start it once, and give the shards its URL with --target",
        ));
        return Ok(None);
    }
    // A server an earlier llmload left running (killed with its watchdog) holds the port, the
    // GPU and the memory this one needs.
    for note in crate::server::stop_orphans(settings.stop_grace) {
        options.observer.on_event(Event::Note(&note));
    }
    let port = crate::server::choose_port(settings)?;
    let model = &plan.target.model;
    let mut server = StartedServer::spawn(settings, port, model, &options.out_dir, secrets)?;
    let program = server.program().to_string();
    options.observer.on_event(Event::Note(&format!(
        "starting {program} on port {port}: {}",
        settings.shown_command()
    )));
    let ready_url = match &plan.target.endpoint {
        Endpoint::Url(url) => TargetUrl::parse(&crate::server::fill(url, port, model))?
            .origin_url(&settings.ready.path),
        Endpoint::Simulator => {
            return Err(Error::usage("a plan's server cannot serve the simulator"))
        }
    };
    match server
        .wait_ready(ready_url.clone(), settings.ready.timeout, &options.stop)
        .await
    {
        Ok(took) => {
            options.observer.on_event(Event::Note(&format!(
                "{program} ready in {:.1} s",
                took.as_secs_f64()
            )));
            Ok(Some(Launched {
                server,
                port,
                ready_url,
            }))
        }
        Err(error) => {
            server.abandon(&options.out_dir);
            Err(error)
        }
    }
}

/// The endpoint and metrics source with the server's port written in.
pub(super) fn filled_target(
    plan: &Plan,
    endpoint: &Endpoint,
    launched: Option<&Launched>,
) -> (Endpoint, plan::MetricsSource) {
    let Some(launched) = launched else {
        return (endpoint.clone(), plan.target.metrics.clone());
    };
    let fill = |text: &str| crate::server::fill(text, launched.port, &plan.target.model);
    let endpoint = match endpoint {
        Endpoint::Url(url) => Endpoint::Url(fill(url)),
        Endpoint::Simulator => Endpoint::Simulator,
    };
    let metrics = match &plan.target.metrics {
        plan::MetricsSource::Urls(urls) => {
            plan::MetricsSource::Urls(urls.iter().map(|url| fill(url)).collect())
        }
        other => other.clone(),
    };
    (endpoint, metrics)
}
