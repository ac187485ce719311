//! What a scope's tokens cost, at the price the plan gives the deployment (`cost`): dollars
//! per million output tokens, per million tokens in and out, and per million *goodput* tokens
//! (the output of requests that met every objective: what the money bought that was worth
//! having).
//!
//! Not a price list: the plan says what its deployment costs an hour, and this only divides.

use serde::Serialize;

use super::PhaseMetrics;
use crate::records::CostRate;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Goodput, Throughput};

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
