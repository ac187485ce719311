//! What a scope's tokens cost, at the price the plan gives the deployment (`cost`): dollars
//! per million output tokens, per million tokens in and out, and per million *goodput* tokens
//! (the output of requests that met every objective: what the money bought that was worth
//! having).
//!
//! Not a price list: the plan says what its deployment costs an hour (or each GPU type, then
//! counted from the telemetry), and this only counts, adds and divides.

use serde::Serialize;

use super::PhaseMetrics;
use crate::records::{CostRate, GpuTypePrice};
use crate::telemetry::gpus::Gpu;

/// What a scope's tokens cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cost {
    /// The deployment's price, dollars an hour.
    pub dollars_per_hour: f64,
    /// How the plan put it ("8 GPUs at $2.49 a GPU-hour").
    pub basis: String,
    /// The scope's wall time at that price, dollars.
    pub dollars: f64,
    /// Dollars per million output tokens of successful requests.
    pub per_million_output_tokens: Option<f64>,
    /// Dollars per million input and output tokens of successful requests.
    pub per_million_total_tokens: Option<f64>,
    /// Dollars per million output tokens of requests that met every objective (`slo`).
    pub per_million_goodput_tokens: Option<f64>,
}

impl Cost {
    /// What `scope`'s tokens cost at `rate`: its wall time priced, over its tokens. `None` for
    /// a scope with no wall time.
    pub fn of(scope: &PhaseMetrics, rate: &CostRate) -> Option<Cost> {
        if scope.wall_s <= 0.0 {
            return None;
        }
        let per_s = rate.dollars_per_hour / 3600.0;
        let per_million =
            |tokens_per_s: f64| (tokens_per_s > 0.0).then(|| per_s / tokens_per_s * 1e6);
        let good_per_s = scope
            .goodput
            .as_ref()
            .map(|good| good.output_tokens as f64 / scope.wall_s);
        Some(Cost {
            dollars_per_hour: rate.dollars_per_hour,
            basis: rate.basis.clone(),
            dollars: per_s * scope.wall_s,
            per_million_output_tokens: per_million(scope.throughput.output_tokens_per_s),
            per_million_total_tokens: per_million(scope.throughput.total_tokens_per_s),
            per_million_goodput_tokens: good_per_s.and_then(per_million),
        })
    }
}

/// Why a run priced by GPU type has no price.
#[derive(Debug, Clone, PartialEq)]
pub enum Unpriced {
    /// No telemetry described the GPUs (no exporter, no `gpus` source, or none that said).
    NoGpus,
    /// A GPU whose model no type's name is in.
    Unmatched(String),
}

impl std::fmt::Display for Unpriced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unpriced::NoGpus => write!(
                f,
                "no telemetry described the GPUs (scrape a GPU exporter, or add a `gpus` source)"
            ),
            Unpriced::Unmatched(model) => write!(
                f,
                "GPU \"{model}\" is none of the priced types (add a gpu-hour line with gpu= a part of its name)"
            ),
        }
    }
}

/// The deployment's price an hour: each GPU the telemetry described at the price of the first
/// type whose name its model holds (case aside).
pub fn rate_of_gpus(prices: &[GpuTypePrice], gpus: &[Gpu]) -> Result<CostRate, Unpriced> {
    if gpus.is_empty() {
        return Err(Unpriced::NoGpus);
    }
    let mut counts: Vec<(&GpuTypePrice, u64)> = Vec::new();
    for gpu in gpus {
        let model = gpu.model.as_deref().unwrap_or("(model not said)");
        let lower = model.to_lowercase();
        let price = prices
            .iter()
            .find(|p| lower.contains(&p.model.to_lowercase()))
            .ok_or_else(|| Unpriced::Unmatched(model.to_string()))?;
        match counts.iter_mut().find(|(p, _)| std::ptr::eq(*p, price)) {
            Some((_, n)) => *n += 1,
            None => counts.push((price, 1)),
        }
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|(price, n)| {
            format!(
                "{n} {} at {}",
                price.model,
                crate::plan::units::format_price(price.dollars_per_hour)
            )
        })
        .collect();
    Ok(CostRate {
        dollars_per_hour: counts
            .iter()
            .map(|(price, n)| price.dollars_per_hour * *n as f64)
            .sum(),
        basis: format!(
            "{} a GPU-hour, as the telemetry described them",
            parts.join(" and ")
        ),
        per_gpu_hour: None,
    })
}

/// Prices every scope of a run whose plan priced GPUs by type (its phases, all recorded phases,
/// the steady windows), at the GPUs its telemetry described; a warning instead when it cannot.
pub fn price_by_gpu_type(
    aggregates: &mut super::Aggregates,
    prices: &[GpuTypePrice],
    gpus: &[Gpu],
) {
    use super::warnings::{Code, Severity, Warning};
    let rate = match rate_of_gpus(prices, gpus) {
        Ok(rate) => rate,
        Err(why) => {
            aggregates.warnings.push(Warning {
                severity: Severity::Warning,
                code: Code::CostUnpriced,
                message: format!("the plan prices GPUs by type, and {why}: the run has no cost"),
            });
            return;
        }
    };
    let steady = aggregates.steady.iter_mut().flat_map(|s| {
        s.phases
            .iter_mut()
            .map(|w| &mut w.metrics)
            .chain(std::iter::once(&mut s.overall))
    });
    let scopes = aggregates
        .phases
        .iter_mut()
        .chain(std::iter::once(&mut aggregates.overall))
        .chain(steady);
    for scope in scopes {
        scope.cost = Cost::of(scope, &rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Goodput, Throughput};

    #[test]
    fn gpus_are_priced_by_the_first_type_their_model_holds() {
        let prices = [
            GpuTypePrice {
                model: "H100".into(),
                dollars_per_hour: 2.5,
            },
            GpuTypePrice {
                model: "l4".into(),
                dollars_per_hour: 0.8,
            },
        ];
        let gpu = |model: &str| Gpu {
            index: "0".into(),
            model: Some(model.into()),
            ..Gpu::default()
        };
        let gpus = [
            gpu("NVIDIA H100 80GB HBM3"),
            gpu("NVIDIA H100 80GB HBM3"),
            gpu("NVIDIA L4"),
        ];
        let rate = rate_of_gpus(&prices, &gpus).unwrap();
        assert_eq!(rate.dollars_per_hour, 2.5 * 2.0 + 0.8);
        assert_eq!(
            rate.basis,
            "2 H100 at $2.5 and 1 l4 at $0.8 a GPU-hour, as the telemetry described them"
        );
        assert_eq!(rate_of_gpus(&prices, &[]), Err(Unpriced::NoGpus));
        assert_eq!(
            rate_of_gpus(&prices, &[gpu("NVIDIA A100-SXM4-40GB")]),
            Err(Unpriced::Unmatched("NVIDIA A100-SXM4-40GB".into()))
        );
    }

    #[test]
    fn an_hour_of_the_deployment_over_the_tokens_it_made() {
        let rate = CostRate {
            dollars_per_hour: 36.0,
            basis: "$36 an instance-hour".into(),
            per_gpu_hour: None,
        };
        let scope = PhaseMetrics {
            wall_s: 100.0,
            throughput: Throughput {
                output_tokens_per_s: 1000.0,
                total_tokens_per_s: 4000.0,
                ..Throughput::default()
            },
            goodput: Some(Goodput {
                output_tokens: 25_000,
                ..Goodput::default()
            }),
            ..PhaseMetrics::default()
        };
        let cost = Cost::of(&scope, &rate).unwrap();
        // $36 an hour is 1¢ a second: 100 s cost $1.
        assert!((cost.dollars - 1.0).abs() < 1e-12);
        // 1,000 tokens a second for 1¢: $10 a million.
        assert!((cost.per_million_output_tokens.unwrap() - 10.0).abs() < 1e-9);
        assert!((cost.per_million_total_tokens.unwrap() - 2.5).abs() < 1e-9);
        // A quarter of those tokens were good: $40 a million good ones.
        assert!((cost.per_million_goodput_tokens.unwrap() - 40.0).abs() < 1e-9);
        // No slo: no goodput price; no tokens: no price per token; no time: nothing.
        let plain = PhaseMetrics {
            goodput: None,
            ..scope.clone()
        };
        assert_eq!(
            Cost::of(&plain, &rate).unwrap().per_million_goodput_tokens,
            None
        );
        let idle = PhaseMetrics {
            throughput: Throughput::default(),
            ..plain.clone()
        };
        assert_eq!(
            Cost::of(&idle, &rate).unwrap().per_million_output_tokens,
            None
        );
        assert_eq!(Cost::of(&PhaseMetrics::default(), &rate), None);
    }
}
