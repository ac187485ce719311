//! What the progress shows, drawn from a [`Snapshot`] of the run: one plain line for a log (CI),
//! or, on a terminal, a block redrawn in place: the phase's bar with the time or requests left,
//! its counts, the last interval's TTFT, ITL and E2E p50/p99 and throughput, and each of the
//! plan's objectives as it stands.
//!
//! Pure functions of the snapshot, so what a person sees is tested as text.
//!
//! Not for: gathering the numbers (`mod.rs`), or deciding anything (the objectives' standings
//! come judged from the session's watch).

use std::time::Duration;

use crate::executor::{Objective, Standing};

/// The bar's width in cells.
const BAR_CELLS: usize = 30;

/// The current phase as the progress shows it.
#[derive(Debug, Clone, Default)]
pub(super) struct Snapshot {
    pub phase: String,
    pub elapsed: Duration,
    pub planned: Option<Duration>,
    /// Requests finished and planned, when the phase plans a count.
    pub requests: Option<(u64, u64)>,
    pub sent: u64,
    pub done: u64,
    pub failed: u64,
    pub throttled: u64,
    /// The interval the latencies and throughput are over, seconds.
    pub interval_s: f64,
    /// Each latency's name and its p50 and p99 over the interval, µs (none when nothing came).
    pub latencies: Vec<(&'static str, Option<(u64, u64)>)>,
    /// `1520 tok/s`, `84 inputs/s`.
    pub throughput: String,
    pub objectives: Vec<Objective>,
}

impl Snapshot {
    fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(self.done)
    }

    /// `42s/60s`, or past its planned end `60s/60s, draining 3s`.
    fn clock(&self) -> String {
        let s = |d: Duration| format!("{:.0}s", d.as_secs_f64());
        match self.planned {
            Some(planned) if self.elapsed > planned => {
                format!(
                    "{}/{}, draining {}",
                    s(planned),
                    s(planned),
                    s(self.elapsed - planned)
                )
            }
            Some(planned) => format!("{}/{}", s(self.elapsed), s(planned)),
            None => s(self.elapsed),
        }
    }

    /// How far the phase is, 0..=1 (by its clock when it has a planned duration, else by its
    /// requests), and what is left, in words: time, requests, or both.
    fn progress(&self) -> Option<(f64, String)> {
        let requests = self.requests.filter(|r| r.1 > 0).map(|(done, planned)| {
            let left = planned.saturating_sub(done);
            (
                done as f64 / planned as f64,
                format!("{left} requests to go"),
            )
        });
        let Some(planned) = self.planned.filter(|p| !p.is_zero()) else {
            return requests;
        };
        // In the clock's own whole seconds, so that the two add up on screen.
        let left = planned.as_secs_f64().round() - self.elapsed.as_secs_f64().round();
        let mut words = if self.elapsed >= planned {
            "draining".to_string()
        } else {
            format!("{:.0}s left", left.max(0.0))
        };
        if let Some((_, requests)) = requests {
            words = format!("{words}, {requests}");
        }
        Some((self.elapsed.as_secs_f64() / planned.as_secs_f64(), words))
    }

    fn counts(&self) -> String {
        // Throttled requests are not failures: said apart, and only when there are any.
        let throttled = match self.throttled {
            0 => String::new(),
            n => format!(" throttled {n}"),
        };
        format!(
            "sent {} done {} failed {}{throttled} in flight {}",
            self.sent,
            self.done,
            self.failed,
            self.in_flight()
        )
    }

    fn latencies(&self) -> String {
        self.latencies
            .iter()
            .map(|(name, p)| match p {
                Some((p50, p99)) => format!("{name} p50 {} p99 {}", ms(*p50), ms(*p99)),
                None => format!("{name} -"),
            })
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// A latency as the line writes it.
fn ms(us: u64) -> String {
    if us >= 10_000_000 {
        format!("{:.1}s", us as f64 / 1e6)
    } else {
        format!("{:.0}ms", us as f64 / 1000.0)
    }
}

/// The plain line a log gets: the phase, its counts, the interval's first latency and the
/// throughput, and the objectives in a few words.
pub(super) fn line(s: &Snapshot) -> String {
    let first = Snapshot {
        latencies: s.latencies.iter().take(1).cloned().collect(),
        ..Snapshot::default()
    };
    let mut line = format!(
        "[{} {}] {} | last {:.0}s: {} | {}",
        s.phase,
        s.clock(),
        s.counts(),
        s.interval_s,
        first.latencies(),
        s.throughput
    );
    let count = |standing| {
        s.objectives
            .iter()
            .filter(|o| o.standing == standing)
            .count()
    };
    if !s.objectives.is_empty() {
        line.push_str(&format!(
            " | objectives: {} holding",
            count(Standing::Holding)
        ));
        let breaking: Vec<&str> = s
            .objectives
            .iter()
            .filter(|o| o.standing == Standing::Breaking)
            .map(|o| o.text.as_str())
            .collect();
        if !breaking.is_empty() {
            line.push_str(&format!(
                ", {} breaking ({})",
                breaking.len(),
                breaking.join("; ")
            ));
        }
    }
    line
}

/// The block a terminal gets, each line cut to `width` columns (a wrapped line would throw the
/// redraw off); `color` paints the bar and the standings.
pub(super) fn block(s: &Snapshot, width: usize, color: bool) -> Vec<String> {
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    let head = match s.progress() {
        Some((fraction, left)) => {
            let filled = ((fraction.clamp(0.0, 1.0) * BAR_CELLS as f64).round()) as usize;
            let bar = format!(
                "{}{}",
                paint("36", &"█".repeat(filled)),
                "░".repeat(BAR_CELLS - filled)
            );
            format!("{} {bar} {} · {left}", s.phase, s.clock())
        }
        None => format!("{} {}", s.phase, s.clock()),
    };
    let mut lines = vec![
        head,
        format!("  {}", s.counts()),
        // The throughput first: a narrow terminal cuts the line's end.
        format!(
            "  last {:.0}s: {} · {}",
            s.interval_s,
            s.throughput,
            s.latencies()
        ),
    ];
    // The standings' words padded alike, so the objectives line up.
    let widest = s
        .objectives
        .iter()
        .map(|o| o.standing.word().len())
        .max()
        .unwrap_or(0);
    for objective in &s.objectives {
        let (mark, code) = match objective.standing {
            Standing::Holding => ("✓", "32"),
            Standing::Breaking => ("✗", "31;1"),
            Standing::Open | Standing::AtTheEnd => ("·", "2"),
        };
        let observed = objective
            .observed
            .as_ref()
            .map(|o| format!(" ({o})"))
            .unwrap_or_default();
        let word = format!("{mark} {:<widest$}", objective.standing.word());
        let standing = paint(code, &word);
        lines.push(format!("  {standing}  {}{observed}", objective.text));
    }
    lines.into_iter().map(|l| cut(&l, width)).collect()
}

/// `line` cut to `width` visible columns, every escape sequence kept (the resets after a cut
/// too, so no color runs on).
fn cut(line: &str, width: usize) -> String {
    let mut out = String::with_capacity(line.len());
    let (mut columns, mut escaping) = (0, false);
    for c in line.chars() {
        if escaping {
            out.push(c);
            escaping = c != 'm';
            continue;
        }
        if c == '\x1b' {
            escaping = true;
            out.push(c);
            continue;
        }
        if columns < width {
            columns += 1;
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        Snapshot {
            phase: "steady".into(),
            elapsed: Duration::from_secs(42),
            planned: Some(Duration::from_secs(60)),
            sent: 840,
            done: 815,
            failed: 3,
            interval_s: 1.0,
            latencies: vec![
                ("TTFT", Some((45_000, 120_000))),
                ("ITL", Some((10_000, 31_000))),
                ("E2E", None),
            ],
            throughput: "1520 tok/s".into(),
            objectives: vec![
                Objective {
                    text: "ttft p99 < 500ms".into(),
                    observed: Some("123.00ms".into()),
                    standing: Standing::Holding,
                },
                Objective {
                    text: "error-rate < 0.1%".into(),
                    observed: Some("0.37%".into()),
                    standing: Standing::Breaking,
                },
                Objective {
                    text: "request-throughput > 10".into(),
                    observed: None,
                    standing: Standing::AtTheEnd,
                },
            ],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_terminal_gets_the_bar_the_counts_the_latencies_and_each_objective() {
        let lines = block(&snapshot(), 200, false);
        assert_eq!(
            lines,
            [
                "steady █████████████████████░░░░░░░░░ 42s/60s · 18s left",
                "  sent 840 done 815 failed 3 in flight 25",
                "  last 1s: 1520 tok/s · TTFT p50 45ms p99 120ms · ITL p50 10ms p99 31ms · E2E -",
                "  ✓ holding            ttft p99 < 500ms (123.00ms)",
                "  ✗ breaking           error-rate < 0.1% (0.37%)",
                "  · judged at the end  request-throughput > 10",
            ]
        );
    }

    #[test]
    fn a_log_gets_one_line_naming_what_breaks() {
        assert_eq!(
            line(&snapshot()),
            "[steady 42s/60s] sent 840 done 815 failed 3 in flight 25 | last 1s: TTFT p50 45ms p99 120ms | 1520 tok/s | objectives: 1 holding, 1 breaking (error-rate < 0.1%)"
        );
    }

    #[test]
    fn a_phase_of_requests_counts_what_is_left_and_a_late_one_drains() {
        let mut s = snapshot();
        s.requests = Some((250, 1000));
        assert!(block(&s, 200, false)[0].ends_with("· 18s left, 750 requests to go"));
        s.planned = None;
        let head = &block(&s, 200, false)[0];
        assert!(head.ends_with("░ 42s · 750 requests to go"), "{head}");
        assert!(
            head.contains(&format!("{}{}", "█".repeat(8), "░".repeat(22))),
            "{head}"
        );
        s.planned = Some(Duration::from_secs(60));
        s.requests = None;
        s.elapsed = Duration::from_secs(63);
        let head = &block(&s, 200, false)[0];
        assert!(head.ends_with("60s/60s, draining 3s · draining"), "{head}");
        assert!(head.contains(&"█".repeat(BAR_CELLS)));
    }

    #[test]
    fn lines_are_cut_to_the_terminal_and_colors_never_run_on() {
        let lines = block(&snapshot(), 20, true);
        for line in &lines {
            let visible: String = {
                let mut v = String::new();
                let mut esc = false;
                for c in line.chars() {
                    match (esc, c) {
                        (_, '\x1b') => esc = true,
                        (true, 'm') => esc = false,
                        (true, _) => {}
                        (false, c) => v.push(c),
                    }
                }
                v
            };
            assert!(visible.chars().count() <= 20, "{line:?}");
            assert_eq!(line.matches("\x1b[").count() % 2, 0, "{line:?}");
        }
        assert!(lines[4].contains("\x1b[31;1m✗"), "{:?}", lines[4]);
        assert!(!block(&snapshot(), 200, false).concat().contains('\x1b'));
    }
}
