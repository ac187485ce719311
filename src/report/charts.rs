//! The charts of `report.html`, drawn as inline SVG with plotters' SVG backend: no script, no
//! font file and no network, so the page reads the same from a CI artifact as from disk.
//!
//! Each chart is a function of the report's [`Summary`]; a chart without data is left out. What
//! a chart shows is its caption; what its numbers mean is docs/metrics.md.

use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;

use super::Summary;
use crate::metrics::timeseries::{PhaseBand, SeriesPoint};
use crate::metrics::Metric;
use crate::plan::Stat;

/// One chart: its title, what it shows, and its SVG.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Chart {
    /// A stable identifier (`latency-over-time`), for anchors and tests.
    pub id: &'static str,
    /// Its title.
    pub title: String,
    /// What it shows, in a sentence.
    pub caption: String,
    /// The SVG element.
    pub svg: String,
}

const WIDTH: u32 = 960;
const HEIGHT: u32 = 340;

/// Series colours: distinguishable, and readable in print.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Every chart the summary has data for, in the order the page shows them.
pub fn all(summary: &Summary) -> Vec<Chart> {
    let series = &summary.timeseries;
    let mut charts = Vec::new();
    let mut add = |chart: Option<Chart>| charts.extend(chart);
    let points = &series.points;
    let bands = &series.phases;
    let t = |p: &SeriesPoint| p.t_s + series.interval_s / 2.0;
    let line = |name: &str, f: &dyn Fn(&SeriesPoint) -> Option<f64>| {
        (
            name.to_string(),
            points
                .iter()
                .filter_map(|p| f(p).map(|v| (t(p), v)))
                .collect::<Vec<_>>(),
        )
    };
    add(time_chart(
        "latency-over-time",
        "Latency over time",
        "TTFT, ITL and E2E percentiles of each window, with the phases shaded: when latency turned, and in which phase.",
        "ms",
        &[
            line("TTFT p50", &|p| p.ttft_p50_ms),
            line("TTFT p99", &|p| p.ttft_p99_ms),
            line("ITL p99", &|p| p.itl_p99_ms),
            line("E2E p99", &|p| p.e2e_p99_ms),
        ],
        bands,
        true,
    ));
    let per_s = |n: u64| n as f64 / series.interval_s;
    add(time_chart(
        "load-over-time",
        "Request rate and requests in flight",
        "Requests sent, completed and failed per second, and the mean number in flight, in each window: a queue that keeps growing is a server that does not keep up.",
        "requests/s, requests",
        &[
            line("sent/s", &|p| Some(per_s(p.sent))),
            line("completed/s", &|p| Some(per_s(p.completed))),
            line("failed/s", &|p| Some(per_s(p.failed))),
            line("in flight", &|p| Some(p.in_flight)),
        ],
        bands,
        false,
    ));
    add(time_chart(
        "throughput-over-time",
        "Output tokens per second",
        "Output tokens that arrived in each window, per second.",
        "tokens/s",
        &[line("output tokens/s", &|p| Some(p.output_tokens_per_s))],
        bands,
        false,
    ));
    let overall = &summary.overall;
    let cdf = |stat_of: &dyn Fn(Stat) -> Option<f64>| -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        for i in 1..=1000 {
            let p = i as f64 / 10.0;
            if let Some(v) = stat_of(Stat::Percentile(p)) {
                out.push((v, p));
            }
        }
        out
    };
    let d = &overall.distributions;
    add(cdf_chart(
        "latency-cdf",
        "TTFT and ITL distributions",
        "The share of values at or below each latency (all recorded phases; ITL pools every gap). The tail is the right end of each curve.",
        &[
            ("TTFT".into(), cdf(&|s| d.get(Metric::Ttft)?.stat(s))),
            ("ITL".into(), cdf(&|s| d.get(Metric::Itl)?.stat(s))),
        ],
    ));
    if summary.by_input.len() > 1 {
        let groups: Vec<(String, Vec<f64>)> = summary
            .by_input
            .iter()
            .map(|b| {
                (
                    if b.input_tokens_max == b.input_tokens {
                        format!("{} tokens", b.input_tokens)
                    } else {
                        format!("{}–{} tokens", b.input_tokens, b.input_tokens_max)
                    },
                    vec![
                        b.ttft_ms.p50.unwrap_or(0.0),
                        b.ttft_ms.p99.unwrap_or(0.0),
                        b.e2e_ms.p50.unwrap_or(0.0),
                    ],
                )
            })
            .collect();
        add(bar_chart(
            "by-input",
            "Latency by input length",
            "TTFT p50 and p99, and E2E p50, of each input length of the plan's mix: what a longer prompt costs.",
            &["TTFT p50", "TTFT p99", "E2E p50"],
            &groups,
        ));
    }
    if let Some(server) = summary.server.as_ref().filter(|s| s.samples > 0) {
        let gauge = |name: &str, label: &str, scale: f64| {
            (
                label.to_string(),
                server
                    .series
                    .get(name)
                    .map(|v| v.iter().map(|(t, y)| (*t, y * scale)).collect())
                    .unwrap_or_default(),
            )
        };
        add(time_chart(
            "server-over-time",
            "The server: batch, queue and KV cache",
            "What the server said at each scrape: requests running and waiting, and its KV cache's use in percent.",
            "requests, %",
            &[
                gauge("running", "running", 1.0),
                gauge("waiting", "waiting", 1.0),
                gauge("kv_cache", "KV cache %", 100.0),
            ],
            bands,
            false,
        ));
    }
    for curve in summary.curves.iter() {
        let rows: Vec<&super::steps::StepRow> = {
            let mut rows: Vec<_> = summary
                .steps
                .iter()
                .filter(|r| r.series == curve.series && r.ended_early.is_none())
                .collect();
            rows.sort_by(|a, b| a.load.total_cmp(&b.load));
            rows
        };
        let pick = |f: &dyn Fn(&super::steps::StepRow) -> Option<f64>| -> Vec<(f64, f64)> {
            rows.iter()
                .filter_map(|r| f(r).map(|v| (r.achieved_rps, v)))
                .collect()
        };
        add(xy_chart(
            "steps",
            &format!("{}: latency against throughput", curve.series),
            "Each step's p99 latencies against the request rate it achieved, in the order of load: where the curve turns up is the knee; where it turns back, saturation.",
            "achieved requests/s",
            "ms",
            &[
                ("TTFT p99".into(), pick(&|r| r.ttft_p99_ms)),
                ("E2E p99".into(), pick(&|r| r.e2e_p99_ms)),
            ],
        ));
    }
    charts
}

type Series = (String, Vec<(f64, f64)>);

fn bounds(series: &[Series]) -> Option<(f64, f64, f64, f64)> {
    let all = series
        .iter()
        .flat_map(|(_, p)| p.iter())
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let mut any = false;
    for &(x, y) in all {
        any = true;
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    any.then_some((x0, x1, y0, y1))
}

fn svg_chart(
    draw: impl FnOnce(DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), String>,
) -> Option<String> {
    let mut svg = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(root)
    };
    drawn.ok().map(|_| svg)
}

fn error(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Lines over the run's time, with the phases shaded; `log` for a logarithmic y axis (latency
/// spans orders of magnitude when a run saturates).
#[allow(clippy::too_many_arguments)]
fn time_chart(
    id: &'static str,
    title: &str,
    caption: &str,
    unit: &str,
    series: &[Series],
    bands: &[PhaseBand],
    log: bool,
) -> Option<Chart> {
    let (x0, x1, y0, y1) = bounds(series)?;
    let x1 = bands.iter().map(|b| b.to_s).fold(x1, f64::max);
    let x0 = x0.min(0.0);
    let svg = svg_chart(|root| {
        root.fill(&WHITE).map_err(error)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64);
        let x_range = x0..x1.max(x0 + 1.0);
        if log {
            let y_range = (y0.max(0.01) * 0.8)..(y1.max(0.02) * 1.25);
            let mut chart = builder
                .build_cartesian_2d(x_range, y_range.log_scale())
                .map_err(error)?;
            over_time(
                &mut chart,
                unit,
                bands,
                series,
                (y0.max(0.01) * 0.8, y1.max(0.02) * 1.25),
            )
        } else {
            let top = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
            let mut chart = builder
                .build_cartesian_2d(x_range, 0.0..top)
                .map_err(error)?;
            over_time(&mut chart, unit, bands, series, (0.0, top))
        }?;
        root.present().map_err(error)
    })?;
    Some(Chart {
        id,
        title: title.into(),
        caption: caption.into(),
        svg,
    })
}

/// A time chart's axes, phase bands, lines and legend, whatever its y scale.
fn over_time<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64> + ValueFormatter<f64>>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    unit: &str,
    bands: &[PhaseBand],
    series: &[Series],
    (bottom, top): (f64, f64),
) -> Result<(), String> {
    mesh(chart, "seconds from the start", unit)?;
    draw_bands(chart, bands, bottom, top)?;
    draw_lines(chart, series)?;
    legend(chart)
}

/// The grid and the axes' descriptions.
fn mesh<
    'a,
    DB: DrawingBackend + 'a,
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    x_desc: &str,
    y_desc: &str,
) -> Result<(), String> {
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| e.to_string())
}

fn draw_bands<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    bands: &[PhaseBand],
    bottom: f64,
    top: f64,
) -> Result<(), String> {
    for (i, band) in bands.iter().enumerate() {
        let shade = if band.recorded {
            PALETTE[i % PALETTE.len()].mix(0.07)
        } else {
            RGBColor(120, 120, 120).mix(0.10)
        };
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(band.from_s, bottom), (band.to_s.max(band.from_s), top)],
                shade.filled(),
            )))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(std::iter::once(Text::new(
                band.name.clone(),
                (band.from_s, top),
                ("sans-serif", 11).into_font().color(&RGBColor(90, 90, 90)),
            )))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn draw_lines<
    'a,
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &[Series],
) -> Result<(), String> {
    for (i, (name, points)) in series.iter().enumerate() {
        if points.is_empty() {
            continue;
        }
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    Ok(())
}

fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .draw()
        .map_err(|e| e.to_string())
}

/// Cumulative distributions: x the value (log scale), y the percentile.
fn cdf_chart(id: &'static str, title: &str, caption: &str, series: &[Series]) -> Option<Chart> {
    let (x0, x1, _, _) = bounds(series)?;
    let svg = svg_chart(|root| {
        root.fill(&WHITE).map_err(error)?;
        let x_range = (x0.max(0.001) * 0.8)..(x1.max(0.002) * 1.25);
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(x_range.log_scale(), 0.0..100.0)
            .map_err(error)?;
        mesh(&mut chart, "ms (log scale)", "percentile")?;
        draw_lines(&mut chart, series)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(error)?;
        root.present().map_err(error)
    })?;
    Some(Chart {
        id,
        title: title.into(),
        caption: caption.into(),
        svg,
    })
}

/// Lines against a numeric x that is not time (a sweep's achieved rate).
fn xy_chart(
    id: &'static str,
    title: &str,
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Option<Chart> {
    let (x0, x1, _, y1) = bounds(series)?;
    let svg = svg_chart(|root| {
        root.fill(&WHITE).map_err(error)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(
                (x0 * 0.9).max(0.0)..(x1 * 1.1).max(x0 + 1.0),
                0.0..(y1 * 1.1).max(1.0),
            )
            .map_err(error)?;
        mesh(&mut chart, x_desc, y_desc)?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(error)?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(error)?;
        }
        legend(&mut chart)?;
        root.present().map_err(error)
    })?;
    Some(Chart {
        id,
        title: title.into(),
        caption: caption.into(),
        svg,
    })
}

/// Grouped bars: one group per label, one bar per name.
fn bar_chart(
    id: &'static str,
    title: &str,
    caption: &str,
    names: &[&str],
    groups: &[(String, Vec<f64>)],
) -> Option<Chart> {
    let top = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max);
    if groups.is_empty() || top <= 0.0 {
        return None;
    }
    let labels: Vec<String> = groups.iter().map(|(l, _)| l.clone()).collect();
    let svg = svg_chart(|root| {
        root.fill(&WHITE).map_err(error)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            // Groups centred on whole numbers, where the axis puts its ticks and labels.
            .build_cartesian_2d(-0.5..groups.len() as f64 - 0.5, 0.0..top * 1.15)
            .map_err(error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(groups.len())
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("ms")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(error)?;
        let width = 0.8 / names.len() as f64;
        for (n, name) in names.iter().enumerate() {
            let color = PALETTE[n % PALETTE.len()];
            chart
                .draw_series(groups.iter().enumerate().map(|(g, (_, values))| {
                    let x = g as f64 - 0.4 + n as f64 * width;
                    Rectangle::new([(x, 0.0), (x + width * 0.9, values[n])], color.filled())
                }))
                .map_err(error)?
                .label(name.to_string())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        legend(&mut chart)?;
        root.present().map_err(error)
    })?;
    Some(Chart {
        id,
        title: title.into(),
        caption: caption.into(),
        svg,
    })
}
