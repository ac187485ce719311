//! The trace files a `trace` phase replays, in the layouts published request traces come in,
//! told apart by their first line:
//! - **Mooncake/aiperf JSONL**: one request a line, `timestamp` (ms from the trace's start),
//!   `input_length`, `output_length`, optional `hash_ids` (the prompt's shared blocks);
//! - **BurstGPT's CSV** (HPMLL/BurstGPT, v1 and v2): `Timestamp` (seconds from the trace's first
//!   midnight), `Request tokens`, `Response tokens`; `Model`, `Total tokens`, `Log Type`,
//!   `Session ID` and `Elapsed time` are not read. A row of 0 response tokens is a request that
//!   failed in production (the `BurstGPT_*.csv` files keep them, the `without_fails` ones do
//!   not): it is left out and counted;
//! - **Azure's LLM inference CSV** (Azure/AzurePublicDataset, 2023 and 2024):
//!   `TIMESTAMP` (a date and time, e.g. `2023-11-16 18:15:46.6805900`), `ContextTokens`,
//!   `GeneratedTokens`; times count from its earliest row.
//!
//! Every layout becomes the same rows; a CSV row carries no blocks, so its prompt is its own.
//!
//! What this is not: replaying the rows (`Trace::window`, the planner's prompts), or sessions of
//! dependent calls.

use serde_json::Value;

use super::data::{error_at, DataError, TraceRow};
use super::limits::MAX_TOKENS;

/// A trace file's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Mooncake's and aiperf's JSONL.
    Mooncake,
    /// BurstGPT's CSV.
    BurstGpt,
    /// Azure's LLM inference CSV.
    Azure,
}

impl TraceFormat {
    /// Its name, as `llmload plan` says it.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Mooncake => "Mooncake JSONL",
            TraceFormat::BurstGpt => "BurstGPT CSV",
            TraceFormat::Azure => "Azure LLM inference CSV",
        }
    }
}

/// A trace file read: its rows in time order, its layout, and how many of its rows were left
/// out (BurstGPT's failed requests).
#[derive(Debug)]
pub struct TraceRead {
    /// Its rows, in time order.
    pub rows: Vec<TraceRow>,
    /// The layout its first line said.
    pub format: TraceFormat,
    /// Rows that were no request to replay (BurstGPT's failed ones).
    pub left_out: usize,
}

const MOONCAKE_HELP: &str =
    "each line is {\"timestamp\": ms, \"input_length\": N, \"output_length\": N, \"hash_ids\": [...]}";
const FORMATS_HELP: &str = "a trace is Mooncake/aiperf JSONL (a JSON object a line), BurstGPT's CSV \
     (header `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`) or Azure's LLM \
     inference CSV (header `TIMESTAMP,ContextTokens,GeneratedTokens`)";

/// Reads a trace in any of the layouts above; every mistake is reported, with its line.
pub fn read_trace(text: &str) -> Result<TraceRead, Vec<DataError>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let (mut rows, format, left_out) = if first.trim_start().starts_with('{') {
        (read_mooncake(text)?, TraceFormat::Mooncake, 0)
    } else {
        let header: Vec<&str> = first
            .split(',')
            .map(|f| f.trim().trim_matches('"'))
            .collect();
        let has = |names: &[&str]| names.iter().all(|n| header.contains(n));
        if has(&["TIMESTAMP", "ContextTokens", "GeneratedTokens"]) {
            let (rows, left_out) = read_csv(text, &AZURE)?;
            (rows, TraceFormat::Azure, left_out)
        } else if has(&["Timestamp", "Request tokens", "Response tokens"]) {
            let (rows, left_out) = read_csv(text, &BURSTGPT)?;
            (rows, TraceFormat::BurstGpt, left_out)
        } else {
            let len = first.len().max(1);
            return Err(vec![error_at(
                (0, len),
                "line 1 is neither a JSON row nor a trace header llmload reads".into(),
                "unknown layout",
                FORMATS_HELP,
            )]);
        }
    };
    if format == TraceFormat::Azure {
        // Absolute times: the replay counts from the earliest.
        let start = rows.iter().map(|r| r.at_ms).min().unwrap_or(0);
        for row in &mut rows {
            row.at_ms -= start;
        }
    }
    rows.sort_by_key(|row| row.at_ms);
    Ok(TraceRead {
        rows,
        format,
        left_out,
    })
}

/// The Mooncake/aiperf JSONL layout.
fn read_mooncake(text: &str) -> Result<Vec<TraceRow>, Vec<DataError>> {
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (number, span, value) in super::data::json_lines(text, MOONCAKE_HELP) {
        let value = match value {
            Ok(value) => value,
            Err(error) => {
                errors.push(error);
                continue;
            }
        };
        let count = |name: &str| value.get(name).and_then(Value::as_u64);
        let at_ms = count("timestamp").or_else(|| {
            // Some traces write a float of ms.
            value
                .get("timestamp")
                .and_then(Value::as_f64)
                .filter(|t| *t >= 0.0)
                .map(|t| t.round() as u64)
        });
        let input = count("input_length").filter(|&n| n > 0 && n <= MAX_TOKENS);
        let output = count("output_length").filter(|&n| n > 0 && n <= MAX_TOKENS);
        let hash_ids = match value.get("hash_ids") {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(Value::Array(ids)) => ids.iter().map(Value::as_u64).collect(),
            Some(_) => None,
        };
        match (at_ms, input, output, hash_ids) {
            (Some(at_ms), Some(input), Some(output), Some(hash_ids)) => rows.push(TraceRow {
                at_ms,
                input_tokens: input as u32,
                output_tokens: output as u32,
                hash_ids,
            }),
            (at_ms, input, output, hash_ids) => {
                let missing = [
                    (at_ms.is_none(), "timestamp (ms, not negative)"),
                    (input.is_none(), "input_length (a positive count)"),
                    (output.is_none(), "output_length (a positive count)"),
                    (hash_ids.is_none(), "hash_ids (a list of block numbers)"),
                ];
                errors.push(bad_row(span, number, &missing, MOONCAKE_HELP));
            }
        }
    }
    if errors.is_empty() {
        Ok(rows)
    } else {
        Err(errors)
    }
}

/// A row with fields missing or wrong: each named.
fn bad_row(span: (usize, usize), number: usize, fields: &[(bool, &str)], help: &str) -> DataError {
    let missing = fields
        .iter()
        .filter(|(bad, _)| *bad)
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(", ");
    error_at(
        span,
        format!("line {number}: missing or wrong {missing}"),
        "bad row",
        help,
    )
}

/// A CSV layout: the columns read, and how its time column is read (in ms).
struct CsvLayout {
    time: &'static str,
    input: &'static str,
    output: &'static str,
    /// The time column's text in ms, and what it must be.
    read_time: fn(&str) -> Option<u64>,
    time_help: &'static str,
    /// Whether a row of 0 output tokens is a failed request, left out (BurstGPT's).
    failures_have_no_output: bool,
    help: &'static str,
}

const BURSTGPT: CsvLayout = CsvLayout {
    time: "Timestamp",
    input: "Request tokens",
    output: "Response tokens",
    read_time: seconds_as_ms,
    time_help: "Timestamp (seconds, not negative)",
    failures_have_no_output: true,
    help: "BurstGPT's rows are `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, e.g. `5,ChatGPT,472,18,490,Conversation log`",
};

const AZURE: CsvLayout = CsvLayout {
    time: "TIMESTAMP",
    input: "ContextTokens",
    output: "GeneratedTokens",
    read_time: date_time_as_ms,
    time_help: "TIMESTAMP (a date and time, e.g. 2023-11-16 18:15:46.6805900)",
    failures_have_no_output: false,
    help: "Azure's rows are `TIMESTAMP,ContextTokens,GeneratedTokens`, e.g. `2023-11-16 18:15:46.6805900,4808,10`",
};

/// A CSV trace in `layout`: its rows and how many were left out.
fn read_csv(text: &str, layout: &CsvLayout) -> Result<(Vec<TraceRow>, usize), Vec<DataError>> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let header = reader.headers().cloned().unwrap_or_default();
    let column = |name: &str| header.iter().position(|h| h.trim_matches('"') == name);
    let (Some(time), Some(input), Some(output)) = (
        column(layout.time),
        column(layout.input),
        column(layout.output),
    ) else {
        let message = format!(
            "line 1: the header must name {}, {} and {}",
            layout.time, layout.input, layout.output
        );
        return Err(vec![error_at(
            line_span(text, 0),
            message,
            "header",
            layout.help,
        )]);
    };
    let (mut rows, mut errors, mut left_out) = (Vec::new(), Vec::new(), 0);
    let mut record = csv::StringRecord::new();
    loop {
        let at = reader.position().clone();
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(error) => {
                errors.push(error_at(
                    line_span(text, at.byte() as usize),
                    format!("line {} is not CSV: {error}", at.line()),
                    "not CSV",
                    layout.help,
                ));
                continue;
            }
        }
        let number = record.position().map_or(at.line(), |p| p.line()) as usize;
        let span = line_span(text, record.position().map_or(0, |p| p.byte() as usize));
        let count = |i: usize| record.get(i).and_then(|f| f.parse::<u64>().ok());
        let at_ms = record.get(time).and_then(layout.read_time);
        let (input, output) = (count(input), count(output));
        if layout.failures_have_no_output && (input == Some(0) || output == Some(0)) {
            left_out += 1;
            continue;
        }
        let token_count = |n: Option<u64>| n.filter(|&n| n > 0 && n <= MAX_TOKENS);
        match (at_ms, token_count(input), token_count(output)) {
            (Some(at_ms), Some(input_tokens), Some(output_tokens)) => rows.push(TraceRow {
                at_ms,
                input_tokens: input_tokens as u32,
                output_tokens: output_tokens as u32,
                hash_ids: Vec::new(),
            }),
            (at_ms, input, output) => {
                let input_help = format!("{} (a positive count)", layout.input);
                let output_help = format!("{} (a positive count)", layout.output);
                let fields = [
                    (at_ms.is_none(), layout.time_help),
                    (input.is_none(), input_help.as_str()),
                    (output.is_none(), output_help.as_str()),
                ];
                errors.push(bad_row(span, number, &fields, layout.help));
            }
        }
    }
    if errors.is_empty() {
        Ok((rows, left_out))
    } else {
        Err(errors)
    }
}

/// The span of the line starting at byte `at` (its end of line left out).
fn line_span(text: &str, at: usize) -> (usize, usize) {
    let rest = text.get(at..).unwrap_or("");
    let len = rest.find('\n').unwrap_or(rest.len());
    (at, rest[..len].trim_end_matches('\r').len().max(1))
}

/// Seconds (a whole or a decimal number, not negative) in ms.
fn seconds_as_ms(text: &str) -> Option<u64> {
    let seconds: f64 = text.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| (seconds * 1000.0).round() as u64)
}

/// A date and time, `YYYY-MM-DD HH:MM:SS[.fraction]` (a `T` between them, and a `Z` or
/// `±HH:MM` after, as ISO 8601 allows), in ms since the Unix epoch.
fn date_time_as_ms(text: &str) -> Option<u64> {
    let text = text.trim();
    let (date, time) = text.split_once([' ', 'T'])?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<u32>().ok());
    let (year, month, day) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let days = chrono::NaiveDate::from_ymd_opt(year as i32, month, day)?
        .signed_duration_since(chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?)
        .num_days();
    // A zone after the time: `Z`, `+HH:MM` or `-HH:MM`.
    let (time, offset_min) = match time.find(['Z', '+', '-']) {
        Some(at) => {
            let zone = &time[at..];
            let offset = match zone {
                "Z" => 0,
                _ => {
                    let sign = if zone.starts_with('-') { -1 } else { 1 };
                    let (h, m) = zone[1..].split_once(':').unwrap_or((&zone[1..], "0"));
                    sign * (h.parse::<i64>().ok()? * 60 + m.parse::<i64>().ok()?)
                }
            };
            (&time[..at], offset)
        }
        None => (time, 0),
    };
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut parts = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    if h > 23 || m > 59 || s > 60 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The fraction's first three digits are ms; the rest is below what a replay can keep.
    let ms = format!("{:0<3}", &fraction[..fraction.len().min(3)])
        .parse::<i64>()
        .ok()?;
    let total = (days * 86_400 + h * 3600 + m * 60 + s - offset_min * 60) * 1000 + ms;
    u64::try_from(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row's time (ms) and lengths, in order.
    fn timed_lengths(read: &TraceRead) -> Vec<(u64, u32, u32)> {
        read.rows
            .iter()
            .map(|r| (r.at_ms, r.input_tokens, r.output_tokens))
            .collect()
    }

    /// BurstGPT's rows as its README shows them, with a failed request (0 response tokens).
    #[test]
    fn burstgpt_rows_are_read_and_its_failures_left_out() {
        let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                    5,ChatGPT,472,18,490,Conversation log\n\
                    45,ChatGPT,1087,230,1317,Conversation log\n\
                    118,GPT-4,417,276,693,Conversation log\n\
                    1106,ChatGPT,0,0,0,Conversation log\n\
                    1129,ChatGPT,1305,477,1782,API log\n";
        let read = read_trace(text).unwrap();
        assert_eq!(read.format, TraceFormat::BurstGpt);
        assert_eq!(read.left_out, 1);
        assert_eq!(
            timed_lengths(&read),
            [
                (5_000, 472, 18),
                (45_000, 1087, 230),
                (118_000, 417, 276),
                (1_129_000, 1305, 477)
            ]
        );
        assert!(read.rows.iter().all(|r| r.hash_ids.is_empty()));
    }

    /// BurstGPT v2's columns, in their order, with sessions and elapsed times (not read).
    #[test]
    fn burstgpt_v2_columns_are_found_by_name() {
        let text = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                    0.5,s1,3.2,ChatGPT,100,20,120,Conversation log\n";
        let read = read_trace(text).unwrap();
        assert_eq!(timed_lengths(&read), [(500, 100, 20)]);
    }

    /// Azure's rows as its dataset writes them: times count from the earliest row, ms kept.
    #[test]
    fn azure_rows_count_from_the_earliest() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 18:15:46.6805900,4808,10\n\
                    2023-11-16 18:15:50.9951690,3180,8\n\
                    2023-11-16 18:15:45.0000000,110,27\n\
                    2023-11-17 00:00:01.5,7,1\n";
        let read = read_trace(text).unwrap();
        assert_eq!(read.format, TraceFormat::Azure);
        assert_eq!(
            timed_lengths(&read),
            [
                (0, 110, 27),
                (1_680, 4808, 10),
                (5_995, 3180, 8),
                (20_656_500, 7, 1)
            ]
        );
    }

    #[test]
    fn date_times_in_iso_forms_and_zones() {
        let plain = date_time_as_ms("2024-05-10 00:00:00").unwrap();
        assert_eq!(plain, 1_715_299_200_000);
        assert_eq!(date_time_as_ms("2024-05-10T00:00:00Z"), Some(plain));
        assert_eq!(
            date_time_as_ms("2024-05-10 02:00:00.25+02:00"),
            Some(plain + 250)
        );
        assert_eq!(date_time_as_ms("2024-05-09 23:00:00-01:00"), Some(plain));
        for bad in [
            "",
            "2024-05-10",
            "2024-13-01 00:00:00",
            "2024-05-10 25:00:00",
            "yesterday",
        ] {
            assert_eq!(date_time_as_ms(bad), None, "{bad}");
        }
    }

    /// Every mistake in a CSV trace is reported with its line and the fields it got wrong.
    #[test]
    fn csv_mistakes_name_their_line_and_field() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 18:15:46.6805900,4808,10\n\
                    not a time,12,3\n\
                    2023-11-16 18:15:47.0,-4,ten\n";
        let errors = read_trace(text).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0]
                .message
                .starts_with("line 3: missing or wrong TIMESTAMP"),
            "{}",
            errors[0].message
        );
        assert!(
            errors[1].message.contains("line 4")
                && errors[1].message.contains("ContextTokens")
                && errors[1].message.contains("GeneratedTokens"),
            "{}",
            errors[1].message
        );
        assert_eq!(
            &text[errors[0].span.0..errors[0].span.0 + errors[0].span.1],
            "not a time,12,3"
        );
    }

    #[test]
    fn an_unknown_layout_is_said_with_the_ones_read() {
        let errors = read_trace("time,in,out\n1,2,3\n").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].help.contains("BurstGPT") && errors[0].help.contains("Azure"));
    }
}
