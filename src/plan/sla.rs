//! `sla`, `slo`, `regression` and `abort`: the lines that judge a run (metrics come from the
//! metric table, [`crate::metrics::table`]).

use std::time::Duration;

use super::Metric;

/// One SLA assertion, such as `ttft p99 < "500ms" phase="steady"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Assertion {
    /// What is judged.
    pub metric: Metric,
    /// The statistic of a distribution metric; `None` for rates and throughputs.
    pub stat: Option<Stat>,
    /// How the observed value compares with the threshold.
    pub op: Op,
    /// In the metric's unit: milliseconds for latencies, a fraction for rates, per second for throughputs.
    pub threshold: f64,
    /// The phase it applies to; all recorded phases together when `None`.
    pub phase: Option<String>,
    /// The assertion as a person reads it, e.g. `ttft p99 < 500ms`.
    pub text: String,
}

/// The assertions that judge phase `name` on its own, for `until="decided"`: those naming it,
/// and those naming no phase when it is the plan's only recorded phase (they then judge it
/// alone too).
pub fn judging_phase<'a>(
    name: &str,
    only_recorded: bool,
    assertions: &'a [Assertion],
) -> Vec<&'a Assertion> {
    assertions
        .iter()
        .filter(|a| match &a.phase {
            Some(phase) => phase == name,
            None => only_recorded && a.metric != Metric::Capacity,
        })
        .collect()
}

/// Whether a running phase's requests can decide `assertion` before the phase ends: a
/// percentile (by its confidence bounds), a maximum or minimum (once more requests can no
/// longer change its outcome) and a share (by its interval). A mean, a throughput or the
/// server's telemetry is judged on the phase as it ran.
pub fn decides_while_running(assertion: &Assertion) -> bool {
    use crate::metrics::table::Source;
    match assertion.metric.def().source {
        Source::Distribution { .. } => matches!(
            assertion.stat,
            Some(Stat::Percentile(_) | Stat::Max | Stat::Min)
        ),
        Source::Share { .. } => true,
        Source::PerSecond { .. }
        | Source::Aggregate(_)
        | Source::Sessions { .. }
        | Source::Server(_)
        | Source::Search => false,
    }
}

/// How the `sla` is judged: the confidence a percentile's bound must reach, and what a judgement
/// the run's data cannot decide makes of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judging {
    /// `confidence "95%"`: a percentile assertion passes when its one-sided bound at this
    /// confidence holds, fails when the other bound breaks it (a fraction in [0.5, 0.9999]).
    pub confidence: f64,
    /// `undecided "not-decided"`: what a judgement the data cannot decide makes of the run.
    pub undecided: Undecided,
    /// `window "steady"`: which of each phase's requests are judged.
    pub window: JudgedWindow,
}

/// Which of a phase's requests its assertions are judged on (`sla { window "…" }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JudgedWindow {
    /// Every recorded request of the phase.
    #[default]
    Whole,
    /// Those sent after the phase's warm-up transient (`metrics::steady`).
    Steady,
}

impl JudgedWindow {
    /// Every value, as plans write them.
    pub const ALL: [(&'static str, JudgedWindow); 2] = [
        ("whole", JudgedWindow::Whole),
        ("steady", JudgedWindow::Steady),
    ];
}

/// The confidence percentile assertions are judged at unless the plan says otherwise.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

impl Default for Judging {
    fn default() -> Judging {
        Judging {
            confidence: DEFAULT_CONFIDENCE,
            undecided: Undecided::NotDecided,
            window: JudgedWindow::Whole,
        }
    }
}

/// What a judgement the run's data cannot decide makes of the run (`sla { undecided "…" }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Undecided {
    /// The run is not decided (exit 3), naming each judgement and what would decide it.
    #[default]
    NotDecided,
    /// The run fails (exit 1): a gate that must show its objectives hold.
    Fail,
    /// The judgement is shown and does not gate (a smoke test of a plan, too short to decide).
    Pass,
}

impl Undecided {
    /// Every value, as plans write them.
    pub const ALL: [(&'static str, Undecided); 3] = [
        ("not-decided", Undecided::NotDecided),
        ("fail", Undecided::Fail),
        ("pass", Undecided::Pass),
    ];

    /// As plans write it.
    pub fn name(self) -> &'static str {
        match self {
            Undecided::NotDecided => "not-decided",
            Undecided::Fail => "fail",
            Undecided::Pass => "pass",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
/// A statistic of a distribution.
pub enum Stat {
    /// The mean.
    Mean,
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
    /// A percentile in (0, 100].
    Percentile(f64),
}

impl Stat {
    /// Parses `mean`, `min`, `max`, `median`, `p99`, `p99.9`, `p999`...
    pub fn parse(text: &str) -> Option<Stat> {
        match text {
            "mean" | "avg" => Some(Stat::Mean),
            "min" => Some(Stat::Min),
            "max" => Some(Stat::Max),
            "median" => Some(Stat::Percentile(50.0)),
            _ => {
                let digits = text.strip_prefix('p')?;
                // `p999` is the common spelling of p99.9; `p9999` of p99.99.
                let value: f64 =
                    if !digits.contains('.') && digits.len() > 2 && digits.starts_with("99") {
                        format!("{}.{}", &digits[..2], &digits[2..]).parse().ok()?
                    } else {
                        digits.parse().ok()?
                    };
                (value > 0.0 && value <= 100.0 && value.is_finite())
                    .then_some(Stat::Percentile(value))
            }
        }
    }
}

impl std::fmt::Display for Stat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stat::Mean => f.write_str("mean"),
            Stat::Min => f.write_str("min"),
            Stat::Max => f.write_str("max"),
            Stat::Percentile(p) => write!(f, "p{p}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// A comparison of an assertion.
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Op {
    /// How plans write it.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
    /// Whether `observed` compares with `threshold` as this says.
    pub fn holds(self, observed: f64, threshold: f64) -> bool {
        match self {
            Op::Lt => observed < threshold,
            Op::Le => observed <= threshold,
            Op::Gt => observed > threshold,
            Op::Ge => observed >= threshold,
        }
    }
}

/// Per-request objectives (as DistServe and vLLM define goodput): a request is good when it
/// succeeded and met every objective given.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Slo {
    /// TTFT at most this.
    pub ttft: Option<Duration>,
    /// TPOT at most this.
    pub tpot: Option<Duration>,
    /// E2E at most this.
    pub e2e: Option<Duration>,
}

/// A condition under which a run stops early, as a failure: `error-rate > "20%" after=50`.
#[derive(Debug, Clone, PartialEq)]
pub struct AbortRule {
    /// The condition, written like an assertion; the run stops when it *holds*.
    pub condition: Assertion,
    /// It is judged only once this many recorded requests have completed.
    pub after: u64,
}

/// How much worse than the baseline a metric may get, e.g. `ttft p99 "+10%"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tolerance {
    /// What is compared.
    pub metric: Metric,
    /// Its statistic, for distributions.
    pub stat: Option<Stat>,
    /// The allowed worsening: a fraction of the baseline (0.10 for 10%), or for rates
    /// (error-rate, timeout-rate, goodput-ratio) an absolute difference in the rate.
    pub allowed: f64,
    /// The phase it applies to; all recorded phases together when `None`.
    pub phase: Option<String>,
    /// As written, e.g. `ttft p99 +10%`.
    pub text: String,
}
