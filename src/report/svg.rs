//! A small plotting kit for `report.html`'s charts: axes with round ticks and units, lines,
//! markers, bars, shaded phase bands and threshold rules, drawn as one inline SVG element.
//!
//! Written here rather than taken from a charting crate because what a reviewer needs is the
//! layout a library's defaults get wrong: the legend above the plot (never over the data),
//! phase labels that never print over each other (staggered into two rows, shortened when
//! a band is narrow; the full name is the band's hover title), log axes labelled at 1-2-5,
//! numbers without a trailing ".0", and a hover title on every point. No script, no font file,
//! no external reference: the page stays one self-contained file.
//!
//! It knows nothing of llmload's metrics: [`super::charts`] decides what is drawn and how.

use std::fmt::Write;

use crate::escape::xml_text;

/// The drawing's size in SVG units; the page scales it to its width.
const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 360.0;
/// The plot area's distance from each edge: room for the legend and phase labels above, tick
/// labels and the axis title at left and below.
const LEFT: f64 = 76.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 58.0;
const BOTTOM: f64 = 46.0;
/// Text sizes.
const FONT: f64 = 12.0;
const SMALL: f64 = 11.0;
/// A conservative width of one character per unit of font size (system sans-serif fonts
/// average about 0.55): labels are laid out so that even wide glyphs do not collide.
const CHAR_WIDTH: f64 = 0.62;
const FONT_FAMILY: &str =
    "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif";
const INK: &str = "#333";
const MUTED: &str = "#666";
const GRID: &str = "#e6e6e6";

/// How an axis maps values, and how its ticks read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    Linear,
    /// Logarithmic: for latencies that span orders of magnitude.
    Log,
}

/// What an axis's numbers are, for its tick labels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unit {
    /// Milliseconds: ticks read "500 ms", "2 s".
    Milliseconds,
    /// Seconds: ticks read "30 s", "2 min".
    Seconds,
    /// A plain number (the axis title says what).
    Number,
    /// A share in percent: ticks read "50%".
    Percent,
}

/// One axis.
#[derive(Debug, Clone)]
pub struct Axis {
    pub title: String,
    pub scale: Scale,
    pub unit: Unit,
    /// The range shown; set from the data when `None`.
    pub range: Option<(f64, f64)>,
    /// Labels at whole-number positions instead of numbers (a bar chart's groups).
    pub categories: Vec<String>,
}

impl Axis {
    pub fn new(title: &str, scale: Scale, unit: Unit) -> Axis {
        Axis {
            title: title.to_string(),
            scale,
            unit,
            range: None,
            categories: Vec::new(),
        }
    }

    pub fn range(mut self, from: f64, to: f64) -> Axis {
        self.range = Some((from, to));
        self
    }
}

/// A line through points, with a hover title at each.
#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    pub color: &'static str,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

impl Line {
    pub fn new(name: &str, color: &'static str, dashed: bool, points: Vec<(f64, f64)>) -> Line {
        Line {
            name: name.to_string(),
            color,
            dashed,
            points,
        }
    }
}

/// A point drawn on its own: a step of a sweep with its label, coloured by its result.
#[derive(Debug, Clone)]
pub struct Marker {
    pub at: (f64, f64),
    pub color: &'static str,
    /// Printed beside the point.
    pub label: String,
    /// The hover title.
    pub title: String,
    /// Drawn hollow (a ring) rather than filled.
    pub hollow: bool,
}

/// A shaded stretch of the x axis: a phase.
#[derive(Debug, Clone)]
pub struct Band {
    pub from: f64,
    pub to: f64,
    pub label: String,
    /// Darker: a phase that is not recorded (a warmup).
    pub muted: bool,
}

/// A threshold drawn across the plot: horizontal at a y value, or vertical at an x value.
#[derive(Debug, Clone)]
pub struct Rule {
    pub at: f64,
    pub vertical: bool,
    pub label: String,
    pub color: &'static str,
}

/// Grouped bars: one group per category of the x axis, one bar per series.
#[derive(Debug, Clone)]
pub struct Bars {
    pub series: Vec<(String, &'static str)>,
    /// Per group, one value per series.
    pub values: Vec<Vec<f64>>,
    /// Per group and series, an interval drawn as a whisker over the bar (a search's bracket:
    /// the load that held, and the load that failed), with what it is for its hover title;
    /// empty when the bars have none.
    pub whiskers: Vec<Vec<Option<Whisker>>>,
}

/// An interval over one bar.
#[derive(Debug, Clone)]
pub struct Whisker {
    pub low: f64,
    pub high: f64,
    /// What the interval is, for its hover title ("held at 12 req/s, failed at 16 req/s").
    pub title: String,
}

/// One chart.
#[derive(Debug, Clone)]
pub struct Plot {
    pub x: Axis,
    pub y: Axis,
    pub lines: Vec<Line>,
    pub markers: Vec<Marker>,
    pub bands: Vec<Band>,
    pub rules: Vec<Rule>,
    pub bars: Option<Bars>,
    /// What the chart is, for screen readers.
    pub label: String,
}

impl Plot {
    pub fn new(label: &str, x: Axis, y: Axis) -> Plot {
        Plot {
            x,
            y,
            lines: Vec::new(),
            markers: Vec::new(),
            bands: Vec::new(),
            rules: Vec::new(),
            bars: None,
            label: label.to_string(),
        }
    }

    /// The SVG element, or `None` when there is nothing to draw.
    pub fn render(&self) -> Option<String> {
        let (x_range, y_range) = self.ranges()?;
        let x = Mapping::new(self.x.scale, x_range, LEFT, WIDTH - RIGHT);
        let y = Mapping::new(self.y.scale, y_range, HEIGHT - BOTTOM, TOP);
        let mut svg = String::new();
        let _ = write!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
             role=\"img\" aria-label=\"{}\" font-family=\"{FONT_FAMILY}\" font-size=\"{FONT}\" \
             style=\"width:100%;height:auto;max-width:{WIDTH}px\">",
            attr(&self.label)
        );
        let _ = write!(
            svg,
            "<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#fff\"/>"
        );
        self.draw_bands(&mut svg, &x);
        self.draw_grid(&mut svg, &x, &y);
        self.draw_bars(&mut svg, &x, &y);
        let taken = self.draw_rules(&mut svg, &x, &y);
        self.draw_lines(&mut svg, &x, &y);
        self.draw_markers(&mut svg, &x, &y, taken);
        self.draw_legend(&mut svg);
        svg.push_str("</svg>");
        Some(svg)
    }

    /// The ranges of both axes: as set, or from the data (with the rules in view).
    fn ranges(&self) -> Option<((f64, f64), (f64, f64))> {
        let mut xs: Vec<f64> = Vec::new();
        let mut ys: Vec<f64> = Vec::new();
        for line in &self.lines {
            for &(x, y) in &line.points {
                xs.push(x);
                ys.push(y);
            }
        }
        for marker in &self.markers {
            xs.push(marker.at.0);
            ys.push(marker.at.1);
        }
        if let Some(bars) = &self.bars {
            xs.extend([-0.5, bars.values.len() as f64 - 0.5]);
            ys.push(0.0);
            ys.extend(bars.values.iter().flatten().copied());
            for whisker in bars.whiskers.iter().flatten().flatten() {
                ys.extend([whisker.low, whisker.high]);
            }
        }
        for band in &self.bands {
            xs.extend([band.from, band.to]);
        }
        let data_points = xs.len();
        for rule in &self.rules {
            if rule.vertical {
                xs.push(rule.at);
            } else {
                ys.push(rule.at);
            }
        }
        if data_points == 0 {
            return None;
        }
        let x = self.x.range.or_else(|| span(&xs, self.x.scale, false))?;
        let y = self
            .y
            .range
            .or_else(|| span(&ys, self.y.scale, self.bars.is_none()))?;
        Some((x, y))
    }

    fn draw_bands(&self, svg: &mut String, x: &Mapping) {
        if self.bands.is_empty() {
            return;
        }
        // Labels in two rows above the plot: each takes the first row where it fits beside the
        // labels already there, shortened to its room when it fits in neither.
        let mut rows: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
        for (i, band) in self.bands.iter().enumerate() {
            let (from, to) = (x.px(band.from), x.px(band.to.max(band.from)));
            let fill = if band.muted {
                "#d9d9d9"
            } else if i % 2 == 0 {
                "#f3f3f3"
            } else {
                "#fafafa"
            };
            let _ = write!(
                svg,
                "<rect x=\"{from:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\" \
                 fill-opacity=\"0.8\"><title>{}</title></rect>",
                (to - from).max(0.0),
                HEIGHT - BOTTOM - TOP,
                xml_text(&band_title(band))
            );
            let _ = write!(
                svg,
                "<line x1=\"{from:.1}\" x2=\"{from:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#bbb\" \
                 stroke-dasharray=\"3 3\"/>",
                TOP - 18.0,
                HEIGHT - BOTTOM
            );
            let start = from + 3.0;
            let full = text_width(&band.label, SMALL);
            let placed = rows.iter().position(|row| fits(row, start, start + full));
            let (row, text) = match placed {
                Some(row) => (row, band.label.clone()),
                None => {
                    // Row 0 up to the next band's start, or the room the row leaves.
                    let room = rows
                        .iter()
                        .map(|row| room_after(row, start, WIDTH - RIGHT))
                        .enumerate()
                        .max_by(|a, b| a.1.total_cmp(&b.1))
                        .unwrap_or((0, 0.0));
                    let Some(short) = shorten(&band.label, room.1, SMALL) else {
                        continue;
                    };
                    (room.0, short)
                }
            };
            let width = text_width(&text, SMALL);
            rows[row].push((start, start + width));
            let baseline = TOP - 6.0 - row as f64 * 14.0;
            let _ = write!(
                svg,
                "<text class=\"phase-label\" x=\"{start:.1}\" y=\"{baseline:.1}\" font-size=\"{SMALL}\" \
                 fill=\"{MUTED}\">{}<title>{}</title></text>",
                xml_text(&text),
                xml_text(&band_title(band))
            );
        }
    }

    fn draw_grid(&self, svg: &mut String, x: &Mapping, y: &Mapping) {
        let (plot_top, plot_bottom) = (TOP, HEIGHT - BOTTOM);
        // y: gridlines and tick labels.
        for (value, label) in ticks(&self.y, y.range) {
            let py = y.px(value);
            let _ = write!(
                svg,
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"{GRID}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{MUTED}\">{}</text>",
                WIDTH - RIGHT,
                LEFT - 8.0,
                py + 4.0,
                xml_text(&label)
            );
        }
        // x: ticks and labels (a bar chart's categories at their groups).
        let x_ticks: Vec<(f64, String)> = if self.x.categories.is_empty() {
            ticks(&self.x, x.range)
        } else {
            self.x
                .categories
                .iter()
                .enumerate()
                .map(|(i, c)| (i as f64, c.clone()))
                .collect()
        };
        for (value, label) in x_ticks {
            let px = x.px(value);
            if self.x.categories.is_empty() {
                let _ = write!(
                    svg,
                    "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{plot_top}\" y2=\"{plot_bottom}\" stroke=\"{GRID}\"/>"
                );
            }
            let _ = write!(
                svg,
                "<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{MUTED}\">{}</text>",
                plot_bottom + 20.0,
                xml_text(&label)
            );
        }
        // The axes and their titles.
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{plot_bottom}\" y2=\"{plot_bottom}\" stroke=\"#999\"/>\
             <line x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{plot_top}\" y2=\"{plot_bottom}\" stroke=\"#999\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{INK}\">{}</text>\
             <text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\" fill=\"{INK}\">{}</text>",
            WIDTH - RIGHT,
            (LEFT + WIDTH - RIGHT) / 2.0,
            HEIGHT - 8.0,
            xml_text(&self.x.title),
            (plot_top + plot_bottom) / 2.0,
            xml_text(&self.y.title)
        );
    }

    fn draw_bars(&self, svg: &mut String, x: &Mapping, y: &Mapping) {
        let Some(bars) = &self.bars else {
            return;
        };
        let n = bars.series.len().max(1) as f64;
        let group = x.px(1.0) - x.px(0.0);
        let width = group * 0.8 / n;
        for (g, values) in bars.values.iter().enumerate() {
            for (s, (&value, (name, color))) in values.iter().zip(&bars.series).enumerate() {
                let left = x.px(g as f64) - group * 0.4 + s as f64 * width;
                let top = y.px(value);
                let base = y.px(y.range.0.max(0.0));
                let category = self.x.categories.get(g).map(String::as_str).unwrap_or("");
                let _ = write!(
                    svg,
                    "<rect x=\"{left:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\">\
                     <title>{}</title></rect>",
                    width * 0.9,
                    (base - top).max(0.0),
                    xml_text(&format!(
                        "{name}, {category}: {}",
                        value_text(value, self.y.unit)
                    ))
                );
                let whisker = bars
                    .whiskers
                    .get(g)
                    .and_then(|w| w.get(s))
                    .and_then(Option::as_ref);
                if let Some(whisker) = whisker {
                    let centre = left + width * 0.45;
                    let cap = width * 0.25;
                    let (low, high) = (y.px(whisker.low), y.px(whisker.high));
                    let _ = write!(
                        svg,
                        "<g class=\"whisker\" stroke=\"{INK}\" stroke-width=\"1.5\">\
                         <line x1=\"{centre:.1}\" x2=\"{centre:.1}\" y1=\"{low:.1}\" y2=\"{high:.1}\"/>\
                         <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{low:.1}\" y2=\"{low:.1}\"/>\
                         <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{high:.1}\" y2=\"{high:.1}\"/>\
                         <title>{}</title></g>",
                        centre - cap,
                        centre + cap,
                        centre - cap,
                        centre + cap,
                        xml_text(&format!("{name}, {category}: {}", whisker.title))
                    );
                }
            }
        }
    }

    /// Threshold lines, each labelled where its label overlaps no other (returned, so that the
    /// points' labels keep clear of them too).
    fn draw_rules(&self, svg: &mut String, x: &Mapping, y: &Mapping) -> Vec<[f64; 4]> {
        let mut placed: Vec<[f64; 4]> = Vec::new();
        for rule in &self.rules {
            let width = text_width(&rule.label, SMALL);
            // Candidate label boxes: [left, top, right, bottom].
            let (line, candidates): ([f64; 4], Vec<[f64; 4]>) = if rule.vertical {
                let px = x.px(rule.at);
                let left_of = |row: f64| {
                    let top = TOP + 3.0 + row * (SMALL + 4.0);
                    [px - 4.0 - width, top, px - 4.0, top + SMALL + 2.0]
                };
                let right_of = |row: f64| {
                    let top = TOP + 3.0 + row * (SMALL + 4.0);
                    [px + 4.0, top, px + 4.0 + width, top + SMALL + 2.0]
                };
                (
                    [px, TOP, px, HEIGHT - BOTTOM],
                    (0..6)
                        .flat_map(|row| [right_of(row as f64), left_of(row as f64)])
                        .collect(),
                )
            } else {
                let py = y.px(rule.at);
                let right = WIDTH - RIGHT - 4.0;
                (
                    [LEFT, py, WIDTH - RIGHT, py],
                    vec![
                        [right - width, py - 4.0 - SMALL - 2.0, right, py - 4.0],
                        [right - width, py + 4.0, right, py + 4.0 + SMALL + 2.0],
                        [
                            LEFT + 4.0,
                            py - 4.0 - SMALL - 2.0,
                            LEFT + 4.0 + width,
                            py - 4.0,
                        ],
                        [
                            LEFT + 4.0,
                            py + 4.0,
                            LEFT + 4.0 + width,
                            py + 4.0 + SMALL + 2.0,
                        ],
                    ],
                )
            };
            let _ = write!(
                svg,
                "<g class=\"objective\"><line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" \
                 stroke=\"{}\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"><title>{}</title></line>",
                line[0],
                line[2],
                line[1],
                line[3],
                rule.color,
                xml_text(&rule.label)
            );
            let spot = candidates
                .into_iter()
                .find(|b| inside_plot(b) && clear_of(b, &placed));
            if let Some(b) = spot {
                placed.push(b);
                let _ = write!(
                    svg,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"{SMALL}\" fill=\"{}\" paint-order=\"stroke\" \
                     stroke=\"#fff\" stroke-width=\"3\">{}</text>",
                    b[0],
                    b[3] - 3.0,
                    rule.color,
                    xml_text(&rule.label)
                );
            }
            svg.push_str("</g>");
        }
        placed
    }

    fn draw_lines(&self, svg: &mut String, x: &Mapping, y: &Mapping) {
        for line in &self.lines {
            if line.points.is_empty() {
                continue;
            }
            let mut path = String::new();
            for (i, &(px, py)) in line.points.iter().enumerate() {
                let _ = write!(
                    path,
                    "{}{:.1},{:.1}",
                    if i == 0 { "M" } else { "L" },
                    x.px(px),
                    y.px(py)
                );
            }
            let dash = if line.dashed {
                " stroke-dasharray=\"5 3\""
            } else {
                ""
            };
            let _ = write!(
                svg,
                "<g class=\"series\"><path d=\"{path}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" \
                 stroke-linejoin=\"round\"{dash}/>",
                line.color
            );
            // A hover title on every point, on an invisible target (a step's visible point is a
            // marker of its own).
            for &(px, py) in &line.points {
                let _ = write!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"transparent\"><title>{}</title></circle>",
                    x.px(px),
                    y.px(py),
                    xml_text(&format!(
                        "{}: {} at {}",
                        line.name,
                        value_text(py, self.y.unit),
                        value_text(px, self.x.unit)
                    ))
                );
            }
            svg.push_str("</g>");
        }
    }

    fn draw_markers(&self, svg: &mut String, x: &Mapping, y: &Mapping, taken: Vec<[f64; 4]>) {
        // Labels beside their points, each where it overlaps no label placed before it (above
        // or below, right or left); one that fits nowhere is left to the point's hover title.
        let mut placed = taken;
        for marker in &self.markers {
            let (px, py) = (x.px(marker.at.0), y.px(marker.at.1));
            let (fill, stroke) = if marker.hollow {
                ("#fff", marker.color)
            } else {
                (marker.color, "#fff")
            };
            let _ = write!(
                svg,
                "<g class=\"marker\"><circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"5\" fill=\"{fill}\" stroke=\"{stroke}\" \
                 stroke-width=\"2\"><title>{}</title></circle>",
                xml_text(&marker.title)
            );
            let width = text_width(&marker.label, SMALL);
            let spot = [
                (7.0, -7.0),
                (7.0, 16.0),
                (-7.0 - width, -7.0),
                (-7.0 - width, 16.0),
            ]
            .into_iter()
            .map(|(dx, dy)| [px + dx, py + dy - SMALL, px + dx + width, py + dy + 2.0])
            .find(|b| {
                b[0] >= LEFT
                    && b[2] <= WIDTH - RIGHT
                    && b[1] >= TOP
                    && b[3] <= HEIGHT - BOTTOM
                    && placed
                        .iter()
                        .all(|p| b[2] <= p[0] || b[0] >= p[2] || b[3] <= p[1] || b[1] >= p[3])
            });
            if let (false, Some(b)) = (marker.label.is_empty(), spot) {
                placed.push(b);
                let _ = write!(
                    svg,
                    "<text class=\"point-label\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"{SMALL}\" fill=\"{INK}\" \
                     paint-order=\"stroke\" stroke=\"#fff\" stroke-width=\"3\">{}</text>",
                    b[0],
                    b[3] - 2.0,
                    xml_text(&marker.label)
                );
            }
            svg.push_str("</g>");
        }
    }

    /// The legend: one row above the plot, left to right, never over the data.
    fn draw_legend(&self, svg: &mut String) {
        let mut entries: Vec<(&str, &'static str, bool)> = self
            .lines
            .iter()
            // A line without a name is the second edge of a named one (a band's low side).
            .filter(|l| !l.points.is_empty() && !l.name.is_empty())
            .map(|l| (l.name.as_str(), l.color, l.dashed))
            .collect();
        if let Some(bars) = &self.bars {
            entries.extend(bars.series.iter().map(|(n, c)| (n.as_str(), *c, false)));
        }
        let mut at = LEFT;
        let baseline = 16.0;
        for (name, color, dashed) in entries {
            let dash = if dashed {
                " stroke-dasharray=\"5 3\""
            } else {
                ""
            };
            let _ = write!(
                svg,
                "<g class=\"legend\"><line x1=\"{at:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\" \
                 stroke-width=\"3\"{dash}/><text x=\"{:.1}\" y=\"{baseline}\" fill=\"{INK}\">{}</text></g>",
                at + 18.0,
                baseline - 4.0,
                baseline - 4.0,
                at + 23.0,
                xml_text(name)
            );
            at += 23.0 + text_width(name, FONT) + 16.0;
        }
    }
}

/// Maps values of one axis to SVG units.
struct Mapping {
    scale: Scale,
    range: (f64, f64),
    from_px: f64,
    to_px: f64,
}

impl Mapping {
    fn new(scale: Scale, range: (f64, f64), from_px: f64, to_px: f64) -> Mapping {
        Mapping {
            scale,
            range,
            from_px,
            to_px,
        }
    }

    fn px(&self, value: f64) -> f64 {
        let (lo, hi) = self.range;
        let share = match self.scale {
            Scale::Linear => (value - lo) / (hi - lo),
            Scale::Log => (value.max(lo * 1e-3).ln() - lo.ln()) / (hi.ln() - lo.ln()),
        };
        let share = if share.is_finite() {
            share.clamp(-0.02, 1.02)
        } else {
            0.0
        };
        self.from_px + share * (self.to_px - self.from_px)
    }
}

/// A range that holds `values`: from zero (or the smallest, for a log scale) to a round value
/// above the largest.
fn span(values: &[f64], scale: Scale, from_zero: bool) -> Option<(f64, f64)> {
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold(None, |acc: Option<(f64, f64)>, v| {
        Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
    })?;
    Some(match scale {
        Scale::Log => {
            let lo = lo.max(hi * 1e-6).max(1e-3);
            let hi = hi.max(lo * 10.0);
            (
                10f64.powf(lo.log10().floor()),
                10f64.powf(hi.log10().ceil()),
            )
        }
        Scale::Linear => {
            let lo = if from_zero { lo.min(0.0) } else { lo };
            let hi = if hi > lo { hi } else { lo + 1.0 };
            let step = nice_step((hi - lo) / 5.0);
            let top = (hi / step).ceil() * step;
            // Room above the highest value, so a line at the top is not on the frame.
            let top = if top - hi < step * 0.15 {
                top + step
            } else {
                top
            };
            ((lo / step).floor() * step, top)
        }
    })
}

/// A round step near `raw`: 1, 2, 2.5 or 5 times a power of ten.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    let fraction = raw / power;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 2.5 {
        2.5
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// The ticks of an axis over `range`, with their labels.
fn ticks(axis: &Axis, range: (f64, f64)) -> Vec<(f64, String)> {
    let (lo, hi) = range;
    let values: Vec<f64> = match axis.scale {
        Scale::Log => {
            let mut out = Vec::new();
            let decades = (hi.log10().ceil() - lo.log10().floor()) as i32;
            // 1-2-5 in each decade while that stays readable; decades only when it would not.
            let steps: &[f64] = if decades <= 3 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            let mut power = 10f64.powf(lo.log10().floor());
            while power <= hi * 1.0001 {
                for s in steps {
                    let v = s * power;
                    if v >= lo * 0.9999 && v <= hi * 1.0001 {
                        out.push(v);
                    }
                }
                power *= 10.0;
            }
            out
        }
        Scale::Linear => {
            let step = nice_step((hi - lo) / 5.0);
            let mut out = Vec::new();
            let mut k = (lo / step).ceil();
            while k * step <= hi + step * 1e-6 {
                out.push(k * step);
                k += 1.0;
            }
            out
        }
    };
    values
        .into_iter()
        .map(|v| (v, value_text(v, axis.unit)))
        .collect()
}

/// A value as a tick or a hover title reads it: round, with its unit, never "20.0".
pub fn value_text(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Milliseconds if value.abs() >= 1000.0 => format!("{} s", number(value / 1000.0)),
        Unit::Milliseconds => format!("{} ms", number(value)),
        Unit::Seconds if value.abs() >= 120.0 && (value / 60.0).fract().abs() < 1e-9 => {
            format!("{} min", number(value / 60.0))
        }
        Unit::Seconds => format!("{} s", number(value)),
        Unit::Percent => format!("{}%", number(value)),
        Unit::Number => number(value),
    }
}

/// A number with the digits it needs (three significant below 100), without trailing zeros.
pub fn number(value: f64) -> String {
    if !value.is_finite() {
        return "-".into();
    }
    let magnitude = value.abs();
    let decimals = if magnitude >= 100.0 || magnitude == 0.0 {
        0
    } else if magnitude >= 10.0 {
        1
    } else if magnitude >= 1.0 {
        2
    } else {
        (2.0 - magnitude.log10().floor()).min(6.0) as usize
    };
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    if text == "-0" {
        "0".into()
    } else {
        text
    }
}

fn band_title(band: &Band) -> String {
    let mut title = band.label.clone();
    if band.muted {
        title.push_str(" (not recorded)");
    }
    title
}

/// The width `text` takes at `size`, erring wide.
fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * CHAR_WIDTH
}

/// Whether `[from, to]` is clear of every label already in `row` (with a gap).
fn fits(row: &[(f64, f64)], from: f64, to: f64) -> bool {
    to <= WIDTH - RIGHT + 8.0 && row.iter().all(|&(a, b)| to + 6.0 <= a || from >= b + 6.0)
}

/// The room from `from` to the next label of `row` (or `end`); none when `from` is inside one.
fn room_after(row: &[(f64, f64)], from: f64, end: f64) -> f64 {
    if row.iter().any(|&(a, b)| from >= a - 6.0 && from <= b + 6.0) {
        return 0.0;
    }
    let next = row
        .iter()
        .map(|&(a, _)| a)
        .filter(|&a| a > from)
        .fold(end, f64::min);
    (next - 6.0 - from).max(0.0)
}

/// `text` cut to `room` with an ellipsis, when enough of it fits to be recognised.
fn shorten(text: &str, room: f64, size: f64) -> Option<String> {
    let fit = (room / (size * CHAR_WIDTH)).floor() as usize;
    if fit < 6 {
        return None;
    }
    let kept: String = text.chars().take(fit - 1).collect();
    Some(format!("{kept}…"))
}

/// Whether a label box [left, top, right, bottom] lies within the plot area.
fn inside_plot(b: &[f64; 4]) -> bool {
    b[0] >= LEFT && b[2] <= WIDTH - RIGHT && b[1] >= TOP && b[3] <= HEIGHT - BOTTOM
}

/// Whether a label box overlaps none of `placed` (with a pixel's gap).
fn clear_of(b: &[f64; 4], placed: &[[f64; 4]]) -> bool {
    placed.iter().all(|p| {
        b[2] + 1.0 <= p[0] || b[0] >= p[2] + 1.0 || b[3] + 1.0 <= p[1] || b[1] >= p[3] + 1.0
    })
}

/// An attribute value: escaped for a double-quoted attribute.
fn attr(text: &str) -> String {
    xml_text(text).replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_without_trailing_zeros() {
        assert_eq!(number(20.0), "20");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(1234.56), "1235");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(-0.0), "0");
        assert_eq!(value_text(1500.0, Unit::Milliseconds), "1.5 s");
        assert_eq!(value_text(500.0, Unit::Milliseconds), "500 ms");
        assert_eq!(value_text(240.0, Unit::Seconds), "4 min");
        assert_eq!(value_text(50.0, Unit::Percent), "50%");
    }

    #[test]
    fn log_axes_are_labelled_at_one_two_five() {
        let axis = Axis::new("latency", Scale::Log, Unit::Milliseconds);
        let labels: Vec<String> = ticks(&axis, (10.0, 1000.0))
            .into_iter()
            .map(|t| t.1)
            .collect();
        assert_eq!(
            labels,
            ["10 ms", "20 ms", "50 ms", "100 ms", "200 ms", "500 ms", "1 s"]
        );
        // Many decades: one label each.
        assert_eq!(ticks(&axis, (0.01, 100_000.0)).len(), 8);
    }

    #[test]
    fn linear_axes_end_on_a_round_value_above_the_data() {
        assert_eq!(span(&[0.0, 37.7], Scale::Linear, true), Some((0.0, 40.0)));
        assert_eq!(span(&[3.0, 99.0], Scale::Linear, true), Some((0.0, 120.0)));
        let axis = Axis::new("x", Scale::Linear, Unit::Number);
        let labels: Vec<String> = ticks(&axis, (0.0, 40.0)).into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0", "10", "20", "30", "40"]);
    }

    #[test]
    fn phase_labels_never_overlap() {
        let mut plot = Plot::new(
            "t",
            Axis::new("time", Scale::Linear, Unit::Seconds),
            Axis::new("ms", Scale::Linear, Unit::Milliseconds),
        );
        plot.lines.push(Line::new(
            "a",
            "#000",
            false,
            vec![(0.0, 1.0), (100.0, 2.0)],
        ));
        // Twenty narrow bands with long names: a sweep's steps.
        for i in 0..20 {
            plot.bands.push(Band {
                from: i as f64 * 5.0,
                to: (i + 1) as f64 * 5.0,
                label: format!("capacity probe {i} @ 12.345 req/s"),
                muted: i % 2 == 0,
            });
        }
        let svg = plot.render().unwrap();
        let mut boxes: Vec<(f64, f64, f64)> = Vec::new();
        for piece in svg.split("<text class=\"phase-label\" x=\"").skip(1) {
            let x: f64 = piece.split('"').next().unwrap().parse().unwrap();
            let y: f64 = piece
                .split("y=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let text = piece.split('>').nth(1).unwrap().split('<').next().unwrap();
            boxes.push((x, x + text_width(text, SMALL), y));
        }
        assert!(boxes.len() >= 4, "{}", boxes.len());
        assert!(svg.contains(">capacity probe 0 @ 12.345 req/s<title>"));
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                assert!(
                    a.2 != b.2 || a.1 <= b.0 || b.1 <= a.0,
                    "{a:?} overlaps {b:?}"
                );
            }
        }
        // Every band keeps its full name as a hover title.
        assert!(svg.contains("<title>capacity probe 19 @ 12.345 req/s</title>"));
    }

    #[test]
    fn text_from_a_plan_is_escaped() {
        let mut plot = Plot::new(
            "<script>",
            Axis::new("x & y", Scale::Linear, Unit::Number),
            Axis::new("y", Scale::Linear, Unit::Number),
        );
        plot.lines
            .push(Line::new("<b>", "#000", false, vec![(0.0, 1.0)]));
        let svg = plot.render().unwrap();
        assert!(!svg.contains("<script>") && !svg.contains("<b>"));
        assert!(svg.contains("x &amp; y"));
    }
}
