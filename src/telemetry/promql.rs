//! Server telemetry read from a Prometheus that already scrapes every replica
//! (`metrics prometheus="URL"`), for deployments of many replicas behind one target: after the
//! run, one PromQL range query over its window (inference-perf's approach) names every series
//! llmload knows, matched by the plan's label matchers; each step's series, summed across
//! replicas as a scrape of several URLs is, becomes one sample of `telemetry.jsonl`, so every
//! phase's server metrics read them as they read a direct scrape.
//!
//! Read after the run, not during it: Prometheus holds a moment only after its next scrape of
//! each replica, so the read waits the plan's `lag` first. A Prometheus that cannot be reached,
//! refuses the query or holds nothing is a `Problem` line, never a failed run.
//!
//! Not for: scraping replicas directly (`scrape.rs`), or turning samples into a phase's figures
//! (`crate::metrics::server`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{gather, gpus, names, prom, TelemetryLine};

/// The most points a range query may return a series (Prometheus refuses more than 11,000):
/// a longer run is read with a coarser step.
const MAX_POINTS: f64 = 10_000.0;
/// How long the query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A Prometheus server to read from (the plan's `metrics prometheus=` source).
pub(crate) struct Source<'a> {
    /// Its base URL (its HTTP API is under `/api/v1/`).
    pub url: &'a str,
    /// Label matchers every series must meet (`job="vllm"`), if any.
    pub matchers: Option<&'a str>,
}

/// The PromQL selector of every series llmload reads, within `matchers`.
fn selector(matchers: Option<&str>) -> String {
    let names = names::series_names().join("|");
    match matchers {
        Some(m) => format!("{{__name__=~\"{names}\",{m}}}"),
        None => format!("{{__name__=~\"{names}\"}}"),
    }
}

/// The telemetry of the window `from_ms`..`to_ms` (ms since the Unix epoch), read every
/// `step`; `shown` names the source in its lines (its URL without credentials).
pub(crate) async fn read(
    client: &reqwest::Client,
    source: &Source<'_>,
    shown: &str,
    (from_ms, to_ms): (f64, f64),
    step: Duration,
) -> Vec<TelemetryLine> {
    let seconds = ((to_ms - from_ms) / 1000.0).max(0.0);
    let step_s = step.as_secs_f64().max(seconds / MAX_POINTS).max(0.001);
    let answer = query_range(client, source, (from_ms / 1000.0, to_ms / 1000.0), step_s).await;
    let problem = |message: String| TelemetryLine::Problem {
        at_unix_ms: to_ms,
        message: format!("{shown}: {message}"),
        target: 0,
    };
    let by_time = match answer {
        Ok(by_time) => by_time,
        Err(why) => return vec![problem(why)],
    };
    let mut lines = vec![TelemetryLine::Source {
        url: shown.to_string(),
        interval_s: step_s,
        server_version: None,
        target: 0,
        scraped_by: Vec::new(),
    }];
    if let Some(first) = by_time.values().next() {
        let described = gpus::of(first);
        if !described.is_empty() {
            lines.push(TelemetryLine::Gpus {
                gpus: described,
                target: 0,
            });
        }
    }
    let samples: Vec<TelemetryLine> = by_time
        .iter()
        .map(|(at_ms, series)| gather(series, *at_ms as f64))
        .filter(|sample| sample.engine.is_some())
        .map(TelemetryLine::Sample)
        .collect();
    if samples.is_empty() {
        lines.push(problem(
            "holds no series of vLLM, SGLang, TGI, llama.cpp or dcgm-exporter that llmload knows over the run"
                .into(),
        ));
    }
    lines.extend(samples);
    lines
}

/// `GET /api/v1/query_range` of [`selector`]: every series' values, grouped by their time
/// (ms), as samples of a scrape.
async fn query_range(
    client: &reqwest::Client,
    source: &Source<'_>,
    (start_s, end_s): (f64, f64),
    step_s: f64,
) -> Result<BTreeMap<i64, Vec<prom::Sample>>, String> {
    let mut url = reqwest::Url::parse(source.url).map_err(|e| format!("not a URL: {e}"))?;
    let path = format!("{}/api/v1/query_range", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.query_pairs_mut()
        .append_pair("query", &selector(source.matchers))
        .append_pair("start", &format!("{start_s:.3}"))
        .append_pair("end", &format!("{end_s:.3}"))
        .append_pair("step", &format!("{step_s:.3}"));
    let response = client
        .get(url)
        .timeout(QUERY_TIMEOUT)
        .send()
        .await
        .map_err(|e| match (e.is_connect(), e.is_timeout()) {
            (true, _) => "cannot connect".to_string(),
            (_, true) => format!("no answer within {} s", QUERY_TIMEOUT.as_secs()),
            _ => "the query failed".to_string(),
        })?;
    let status = response.status();
    let body: serde_json::Value = response
        .json()
        .await
        .map_err(|_| format!("HTTP {}: not Prometheus' JSON", status.as_u16()))?;
    if body["status"] != "success" {
        let said: String = body["error"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect();
        return Err(format!(
            "HTTP {}: the query was refused: {said}",
            status.as_u16()
        ));
    }
    Ok(by_time(&body["data"]["result"]))
}

/// A matrix result's points, grouped by time (ms) as samples of one scrape each.
fn by_time(result: &serde_json::Value) -> BTreeMap<i64, Vec<prom::Sample>> {
    let mut by_time: BTreeMap<i64, Vec<prom::Sample>> = BTreeMap::new();
    for series in result.as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(metric) = series["metric"].as_object() else {
            continue;
        };
        let Some(name) = metric.get("__name__").and_then(|n| n.as_str()) else {
            continue;
        };
        let labels: Vec<(String, String)> = metric
            .iter()
            .filter(|(label, _)| *label != "__name__")
            .filter_map(|(label, value)| Some((label.clone(), value.as_str()?.to_string())))
            .collect();
        for point in series["values"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let at = point[0].as_f64();
            let value = point[1].as_str().and_then(|v| v.parse::<f64>().ok());
            let (Some(at), Some(value)) = (at, value) else {
                continue;
            };
            by_time
                .entry((at * 1000.0).round() as i64)
                .or_default()
                .push(prom::Sample {
                    name: name.to_string(),
                    labels: labels.clone(),
                    value,
                });
        }
    }
    by_time
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_names_every_known_series_within_the_matchers() {
        let all = selector(None);
        assert!(
            all.starts_with("{__name__=~\"") && all.ends_with("\"}"),
            "{all}"
        );
        assert!(all.contains("vllm:num_requests_running|"));
        assert!(all.contains("vllm:time_to_first_token_seconds_bucket|"));
        let some = selector(Some("job=\"vllm\",ns=~\"prod.*\""));
        assert!(some.ends_with("\",job=\"vllm\",ns=~\"prod.*\"}"), "{some}");
    }

    #[test]
    fn a_matrix_becomes_one_scrape_per_step_summed_across_replicas() {
        // Prometheus' own answer shape: two replicas' running requests, and one's histogram.
        let result = serde_json::json!([
            {"metric": {"__name__": "vllm:num_requests_running", "instance": "a:8000"},
             "values": [[1700000000, "3"], [1700000001, "4"]]},
            {"metric": {"__name__": "vllm:num_requests_running", "instance": "b:8000"},
             "values": [[1700000000, "2"], [1700000001, "1"]]},
            {"metric": {"__name__": "vllm:time_to_first_token_seconds_bucket", "instance": "a:8000", "le": "0.1"},
             "values": [[1700000001, "7"]]},
            {"metric": {"__name__": "vllm:time_to_first_token_seconds_bucket", "instance": "a:8000", "le": "+Inf"},
             "values": [[1700000001, "9"]]},
            {"metric": {"__name__": "vllm:num_requests_running"}, "values": [[1700000002, "NaN?"]]}
        ]);
        let steps = by_time(&result);
        assert_eq!(steps.len(), 2, "{steps:?}");
        let second = gather(&steps[&1_700_000_001_000], 1_700_000_001_000.0);
        assert_eq!(second.values[&names::Signal::Running], 5.0);
        let ttft = &second.histograms[&names::Signal::Ttft];
        assert_eq!(
            (ttft.le.clone(), ttft.counts.clone()),
            (vec![0.1], vec![7.0])
        );
    }
}
