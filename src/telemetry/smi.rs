//! GPU readings in nvidia-smi's CSV (`nvidia-smi --query-gpu=… --format=csv`): as llmload runs
//! nvidia-smi on this machine (`gpus "nvidia-smi"`, its own fields, no header, no units), or as
//! a command of the user's prints them (`gpus command="…"`: nvidia-smi on another host over ssh,
//! or a script printing the same columns for any other meter, header first). Each loop's rows,
//! one per GPU, become one sample of the signals a GPU exporter's scrape gives, and the GPUs
//! they describe.
//!
//! Not for: running the command ([`super::command`]), nor Prometheus text ([`super::prom`]).

use std::collections::BTreeMap;

use super::gpus::Gpu;
use super::{Engine, Signal, TelemetrySample};

/// The fields llmload asks a local nvidia-smi for, in order (`--query-gpu=`): each one
/// nvidia-smi has offered since driver 450, so that an older driver refuses none of them.
pub(crate) const QUERY: &[&str] = &[
    "timestamp",
    "index",
    "uuid",
    "name",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "utilization.gpu",
    "power.draw",
    "clocks.sm",
    "temperature.gpu",
];

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Timestamp,
    Index,
    Uuid,
    Name,
    Driver,
    MemoryTotal,
    /// A reading of a signal, in the signal's unit once multiplied by the factor.
    Reading(Signal, f64),
    /// A column llmload does not read.
    Other,
}

/// The field a query name (`utilization.gpu`, without nvidia-smi's ` [%]`) is.
fn field(name: &str) -> Field {
    match name {
        "timestamp" => Field::Timestamp,
        "index" => Field::Index,
        "uuid" | "gpu_uuid" => Field::Uuid,
        "name" | "gpu_name" => Field::Name,
        "driver_version" => Field::Driver,
        "memory.total" => Field::MemoryTotal,
        "memory.used" => Field::Reading(Signal::GpuMemoryUsed, 1.0),
        "memory.free" => Field::Reading(Signal::GpuMemoryFree, 1.0),
        "utilization.gpu" => Field::Reading(Signal::GpuUtilization, 0.01),
        "power.draw" | "power.draw.instant" | "power.draw.average" => {
            Field::Reading(Signal::GpuPower, 1.0)
        }
        "clocks.sm" | "clocks.current.sm" => Field::Reading(Signal::GpuSmClock, 1.0),
        "temperature.gpu" => Field::Reading(Signal::GpuTemperature, 1.0),
        _ => Field::Other,
    }
}

/// Why a command's header cannot be read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LayoutError {
    /// No column is one llmload reads.
    NothingKnown(String),
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutError::NothingKnown(header) => write!(
                f,
                "its first line names no column llmload reads (\"{header}\"): print nvidia-smi's CSV header first (--format=csv), with power.draw, utilization.gpu, memory.used or the like"
            ),
        }
    }
}

/// Why a row cannot be read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RowError {
    /// Not as many fields as the header named.
    Fields { expected: usize, found: usize },
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowError::Fields { expected, found } => {
                write!(f, "{found} field(s) where the header named {expected}")
            }
        }
    }
}

/// The columns of a command's rows.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    fields: Vec<Field>,
}

/// One GPU's row: which GPU, and what it read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    /// When it was read, ms since the Unix epoch, where the row says (its `timestamp`).
    pub at_unix_ms: Option<f64>,
    pub gpu: Gpu,
    readings: Vec<(Signal, f64)>,
}

impl Layout {
    /// The columns of llmload's own nvidia-smi query ([`QUERY`]).
    pub(crate) fn of_query() -> Layout {
        Layout {
            fields: QUERY.iter().map(|name| field(name)).collect(),
        }
    }

    /// The columns a header names (`index, power.draw [W]`).
    pub(crate) fn of_header(line: &str) -> Result<Layout, LayoutError> {
        let fields: Vec<Field> = line
            .split(',')
            .map(|name| field(name.split('[').next().unwrap_or("").trim()))
            .collect();
        if !fields.iter().any(|f| matches!(f, Field::Reading(..))) {
            let header = crate::error::shorten(line.trim());
            return Err(LayoutError::NothingKnown(header));
        }
        Ok(Layout { fields })
    }

    /// One row (`0, NVIDIA H100 80GB HBM3, 612.34 W`); a value nvidia-smi could not read
    /// (`[N/A]`, `[Not Supported]`) is no reading.
    pub(crate) fn row(&self, line: &str) -> Result<Row, RowError> {
        let values: Vec<&str> = line.split(',').map(str::trim).collect();
        if values.len() != self.fields.len() {
            return Err(RowError::Fields {
                expected: self.fields.len(),
                found: values.len(),
            });
        }
        let mut row = Row {
            at_unix_ms: None,
            gpu: Gpu {
                index: "0".into(),
                ..Gpu::default()
            },
            readings: Vec::new(),
        };
        for (field, value) in self.fields.iter().zip(values) {
            let known = !value.is_empty() && !value.starts_with('[') && value != "N/A";
            let text = || Some(crate::error::shorten(value)).filter(|_| known);
            match *field {
                Field::Timestamp => row.at_unix_ms = local_time_ms(value),
                Field::Index => row.gpu.index = text().unwrap_or_else(|| "0".into()),
                Field::Uuid | Field::Other => {}
                Field::Name => row.gpu.model = text(),
                Field::Driver => row.gpu.driver = text(),
                Field::MemoryTotal => row.gpu.memory_mib = number(value),
                Field::Reading(signal, factor) => {
                    // Two columns of one signal (power.draw and power.draw.instant): the first.
                    let first = !row.readings.iter().any(|(s, _)| *s == signal);
                    if let Some(reading) = number(value).filter(|_| first) {
                        row.readings.push((signal, reading * factor));
                    }
                }
            }
        }
        Ok(row)
    }
}

/// A value without its unit (`612.34 W`, `87 %`, `71234 MiB`).
fn number(value: &str) -> Option<f64> {
    value
        .split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

/// nvidia-smi's `timestamp` (`2024/05/14 10:21:33.123`, this machine's local time) in ms since
/// the Unix epoch.
fn local_time_ms(text: &str) -> Option<f64> {
    let (date, time) = text.trim().split_once(' ')?;
    let mut day = date.split('/').map(|p| p.parse::<i64>().ok());
    let (year, month, mday) = (day.next()??, day.next()??, day.next()??);
    let mut clock = time.split(':');
    let hours = clock.next()?.parse::<i64>().ok()?;
    let minutes = clock.next()?.parse::<i64>().ok()?;
    let seconds = clock.next()?.parse::<f64>().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&mday) || hours > 23 || minutes > 59 {
        return None;
    }
    let local_s = days_from_civil(year, month, mday) * 86_400 + hours * 3600 + minutes * 60;
    let offset_s = local_utc_offset_s(local_s)?;
    Some(((local_s - offset_s) as f64 + seconds) * 1000.0)
}

/// This machine's offset from UTC, seconds, at the local time `local_s` (seconds since the
/// epoch as if local time were UTC): the offset at that instant, looked up again at the instant
/// it gives, so that a daylight-saving change between them is met.
fn local_utc_offset_s(local_s: i64) -> Option<i64> {
    let offset_at = |utc_s: i64| -> Option<i64> {
        let time = libc::time_t::try_from(utc_s).ok()?;
        // SAFETY: localtime_r only reads `time` and writes the struct it is given.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        let filled = unsafe { libc::localtime_r(&time, &mut tm) };
        (!filled.is_null()).then_some(tm.tm_gmtoff as i64)
    };
    let first = offset_at(local_s)?;
    offset_at(local_s - first)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// One loop's rows at a time: a loop ends where a GPU's index comes again.
#[derive(Debug, Default)]
pub(crate) struct Loops {
    rows: Vec<Row>,
    /// When its first row came, ms since the Unix epoch.
    arrived_unix_ms: f64,
}

impl Loops {
    /// Takes a row that came at `arrived_unix_ms`; the loop before it, when it ended there.
    pub(crate) fn push(&mut self, row: Row, arrived_unix_ms: f64) -> Option<(f64, Vec<Row>)> {
        let ended = self.rows.iter().any(|r| r.gpu.index == row.gpu.index);
        let done = if ended { self.finish() } else { None };
        if self.rows.is_empty() {
            self.arrived_unix_ms = arrived_unix_ms;
        }
        self.rows.push(row);
        done
    }

    /// The last loop, when rows are left.
    pub(crate) fn finish(&mut self) -> Option<(f64, Vec<Row>)> {
        (!self.rows.is_empty()).then(|| (self.arrived_unix_ms, std::mem::take(&mut self.rows)))
    }
}

/// The furthest a row's own timestamp may lie from when it came for it to be believed: further
/// off, it is another time zone's (nvidia-smi over ssh on a host set to another), and the time
/// it came is used.
const BELIEVED_MS: f64 = 60_000.0;

/// One loop's rows as one sample (the signals summed or maxed over the GPUs, as a GPU
/// exporter's are), at the rows' own time where they say it and it is believable.
pub(crate) fn sample(rows: &[Row], arrived_unix_ms: f64) -> TelemetrySample {
    let stamped = rows.iter().find_map(|r| r.at_unix_ms);
    let at_unix_ms = stamped
        .filter(|at| (at - arrived_unix_ms).abs() <= BELIEVED_MS)
        .unwrap_or(arrived_unix_ms);
    let mut values = BTreeMap::new();
    for row in rows {
        for &(signal, value) in &row.readings {
            super::add_value(&mut values, signal, value);
        }
    }
    TelemetrySample {
        at_unix_ms,
        engine: (!values.is_empty()).then_some(Engine::NvidiaSmi),
        values,
        ..TelemetrySample::default()
    }
}

/// The GPUs one loop's rows describe, by index: none when the rows say nothing of what they
/// are (a meter that prints only power).
pub(crate) fn gpus(rows: &[Row]) -> Vec<Gpu> {
    let mut gpus: Vec<Gpu> = rows
        .iter()
        .map(|r| r.gpu.clone())
        .filter(|g| g.model.is_some() || g.memory_mib.is_some() || g.driver.is_some())
        .collect();
    gpus.sort_by(|a, b| a.index.cmp(&b.index));
    gpus.dedup_by(|a, b| a.index == b.index);
    gpus
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/telemetry")
                .join(name),
        )
        .unwrap()
    }

    /// Every loop of a fixture, read as the command source reads it.
    fn loops(layout: &Layout, lines: &[&str]) -> Vec<Vec<Row>> {
        let mut loops = Loops::default();
        let mut out = Vec::new();
        for line in lines {
            out.extend(loops.push(layout.row(line).unwrap(), 0.0).map(|l| l.1));
        }
        out.extend(loops.finish().map(|l| l.1));
        out
    }

    #[test]
    fn llmloads_own_query_reads_a_loop_of_two_gpus() {
        let text = fixture("nvidia-smi-query.csv");
        let lines: Vec<&str> = text.lines().collect();
        let loops = loops(&Layout::of_query(), &lines);
        assert_eq!(loops.len(), 3, "{loops:?}");
        let first = sample(&loops[0], 0.0);
        assert_eq!(first.engine, Some(Engine::NvidiaSmi));
        let value = |s: &TelemetrySample, signal| s.values[&signal];
        // Power and memory summed over the GPUs; utilization, clock and temperature the most.
        assert_eq!(value(&first, Signal::GpuPower), 612.34 + 598.10);
        assert_eq!(value(&first, Signal::GpuMemoryUsed), 71234.0 + 70980.0);
        assert_eq!(value(&first, Signal::GpuUtilization), 0.98);
        assert_eq!(value(&first, Signal::GpuSmClock), 1980.0);
        assert_eq!(value(&first, Signal::GpuTemperature), 64.0);
        let gpus = gpus(&loops[0]);
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[1].index, "1");
        assert_eq!(gpus[1].model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(gpus[1].driver.as_deref(), Some("550.127.05"));
        assert_eq!(gpus[1].memory_mib, Some(81559.0));
        assert_eq!(
            super::super::gpus::describe(&gpus),
            "2 × NVIDIA H100 80GB HBM3 (80 GiB each), driver 550.127.05"
        );
        // An idle GPU whose clock nvidia-smi cannot read: no reading, not a zero.
        let last = sample(&loops[2], 0.0);
        assert_eq!(value(&last, Signal::GpuSmClock), 1410.0);
        assert_eq!(value(&last, Signal::GpuPower), 71.2 + 69.8);
    }

    #[test]
    fn a_commands_header_names_its_columns_with_units() {
        let text = fixture("nvidia-smi-units.csv");
        let mut lines = text.lines();
        let layout = Layout::of_header(lines.next().unwrap()).unwrap();
        let rest: Vec<&str> = lines.collect();
        let loops = loops(&layout, &rest);
        assert_eq!(loops.len(), 2);
        let first = sample(&loops[0], 0.0);
        assert_eq!(first.values[&Signal::GpuPower], 287.55);
        assert_eq!(first.values[&Signal::GpuUtilization], 0.87);
        assert_eq!(first.values[&Signal::GpuMemoryUsed], 40321.0);
        assert_eq!(gpus(&loops[0])[0].model.as_deref(), Some("NVIDIA L40S"));
        // A meter of the user's: a header with only power, one row a reading.
        let meter = Layout::of_header("power.draw [W]").unwrap();
        let row = meter.row("412.5").unwrap();
        assert!(
            gpus(std::slice::from_ref(&row)).is_empty(),
            "a meter is no GPU described"
        );
        assert_eq!(sample(&[row], 5.0).values[&Signal::GpuPower], 412.5);
    }

    #[test]
    fn what_cannot_be_read_says_why() {
        let error = Layout::of_header(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("names no column llmload reads"),
            "{error}"
        );
        let layout = Layout::of_header("index, power.draw [W]").unwrap();
        assert_eq!(
            layout.row("0, 1, 2").unwrap_err().to_string(),
            "3 field(s) where the header named 2"
        );
        let unread = layout.row("0, [Not Supported]").unwrap();
        assert!(sample(&[unread], 0.0).values.is_empty());
    }

    #[test]
    fn the_rows_own_time_is_used_when_believable() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2024, 5, 14), 19_857);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        let Some(stamped) = local_time_ms("2024/05/14 10:21:33.123") else {
            return; // no time zone database: nothing to check
        };
        let offset_ms =
            stamped - (19_857.0 * 86_400.0 + 10.0 * 3600.0 + 21.0 * 60.0 + 33.123) * 1e3;
        assert!(offset_ms.abs() <= 14.0 * 3600e3, "{offset_ms}");
        let row = |at: f64| Row {
            at_unix_ms: Some(at),
            gpu: Gpu::default(),
            readings: vec![(Signal::GpuPower, 1.0)],
        };
        assert_eq!(sample(&[row(1_000.0)], 1_500.0).at_unix_ms, 1_000.0);
        // Hours off: another host's time zone, so the time it came.
        assert_eq!(sample(&[row(1_000.0)], 7_201_000.0).at_unix_ms, 7_201_000.0);
        assert_eq!(local_time_ms("yesterday"), None);
        assert_eq!(local_time_ms("2024/13/14 10:21:33.123"), None);
    }
}
