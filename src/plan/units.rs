//! Units in plan values: durations ("250ms", "30s", "2m", "1h", "2d") and percentages ("1%").

use std::time::Duration;

use super::limits::MAX_DURATION;

/// A value that is not what its place asks for; the message says why, quoting the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadValue(pub String);

impl From<String> for BadValue {
    fn from(message: String) -> BadValue {
        BadValue(message)
    }
}

impl From<&str> for BadValue {
    fn from(message: &str) -> BadValue {
        BadValue(message.to_string())
    }
}

/// Parses a duration string such as `"250ms"`, `"1.5s"`, `"2m"`, `"1h"`, `"500us"` or `"40ns"`.
pub fn parse_duration(text: &str) -> Result<Duration, BadValue> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("\"{text}\" has no unit"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("\"{text}\" does not start with a number"))?;
    let scale =
        seconds_in_unit(unit.trim()).ok_or_else(|| format!("\"{unit}\" is not a duration unit"))?;
    bounded_duration(value * scale).map_err(|why| format!("\"{text}\" {why}").into())
}

/// `seconds` as a duration, if it is one llmload accepts: finite, not negative, and at most
/// [`MAX_DURATION`]. The error says why not, to follow the value in a message.
pub fn bounded_duration(seconds: f64) -> Result<Duration, BadValue> {
    if seconds.is_nan() || seconds < 0.0 {
        return Err("is not a duration".into());
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(duration) if duration <= MAX_DURATION => Ok(duration),
        _ => Err(format!(
            "is longer than the longest duration allowed ({} days)",
            MAX_DURATION.as_secs() / 86400
        )
        .into()),
    }
}

/// Seconds in one `unit`, for durations and type-annotated numbers such as `(ms)500`.
pub fn seconds_in_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    })
}

/// Parses `"1%"` or `"0.5%"` into a fraction (0.01, 0.005).
pub fn parse_percent(text: &str) -> Result<f64, BadValue> {
    let number = text
        .trim()
        .strip_suffix('%')
        .ok_or_else(|| format!("\"{text}\" is not a percentage"))?;
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("\"{text}\" is not a percentage"))?;
    if !(0.0..=100.0).contains(&value) {
        return Err(format!("\"{text}\" is outside 0% to 100%").into());
    }
    Ok(value / 100.0)
}

/// A physical quantity in `symbol`'s unit (`J`, `W`), from "0.4J", "400mJ" or "1.2kJ": the
/// number, at least zero, in the unit itself.
pub fn parse_quantity(text: &str, symbol: &str) -> Result<f64, BadValue> {
    let not_one = || {
        format!("\"{text}\" is not a quantity in {symbol} (\"0.4{symbol}\", \"400m{symbol}\", \"1.5k{symbol}\")")
    };
    let number = text.trim().strip_suffix(symbol).ok_or_else(not_one)?;
    let (number, scale) = if let Some(n) = number.strip_suffix('m') {
        (n, 1e-3)
    } else if let Some(n) = number.strip_suffix('k') {
        (n, 1e3)
    } else {
        (number, 1.0)
    };
    let value: f64 = number.trim().parse().map_err(|_| not_one())?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("\"{text}\" must be zero or more").into());
    }
    Ok(value * scale)
}

/// A physical quantity as a plan writes it: "0.4J", "350W".
pub fn format_quantity(value: f64, symbol: &str) -> String {
    format!("{}{symbol}", trim_quantity(value))
}

/// A price in US dollars, "$2.49": more than $0 and at most $1e9.
pub fn parse_price(text: &str) -> Result<f64, BadValue> {
    match text
        .trim()
        .strip_prefix('$')
        .map(|n| n.trim().parse::<f64>())
    {
        Some(Ok(v)) if v.is_finite() && v > 0.0 && v <= 1e9 => Ok(v),
        Some(Ok(_)) => Err(format!("\"{text}\" must be more than $0 (and at most $1e9)").into()),
        Some(Err(_)) | None => Err(format!("\"{text}\" is not a price such as \"$2.49\"").into()),
    }
}

/// A price as a plan writes it: "$2.49", "$0.0004" (no digit a price per token needs is
/// rounded away).
pub fn format_price(value: f64) -> String {
    format!("${}", trim_quantity(value))
}

fn trim_quantity(value: f64) -> String {
    let text = format!("{value:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A load as step names and reports write it: `8`, `2.5`, `11.834`.
pub fn format_load(value: f64) -> String {
    let text = format!("{:.3}", value);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Formats a duration the way plans write them.
pub fn format_duration(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs >= 3600.0 && secs % 3600.0 == 0.0 {
        format!("{}h", secs / 3600.0)
    } else if secs >= 60.0 && secs % 60.0 == 0.0 {
        format!("{}m", secs / 60.0)
    } else if secs >= 1.0 {
        format!("{}s", round3(secs))
    } else {
        format!("{}ms", round3(secs * 1000.0))
    }
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("3 parsecs").is_err());
        assert_eq!(parse_duration("30d"), Ok(MAX_DURATION));
        for absurd in ["99999999999999999999h", "31d", "1e300s", "-1s"] {
            assert!(parse_duration(absurd).is_err(), "{absurd}");
        }
        assert!(bounded_duration(f64::NAN).is_err());
        assert!(bounded_duration(f64::INFINITY).is_err());
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("1%"), Ok(0.01));
        assert_eq!(parse_percent("0.5%"), Ok(0.005));
        assert!(parse_percent("1").is_err());
        assert!(parse_percent("120%").is_err());
    }

    #[test]
    fn quantities_with_their_unit() {
        assert_eq!(parse_quantity("0.4J", "J"), Ok(0.4));
        assert_eq!(parse_quantity("400mJ", "J"), Ok(0.4));
        assert_eq!(parse_quantity(" 1.5kW", "W"), Ok(1500.0));
        for bad in ["0.4", "0.4W", "J", "-1J", "infJ", "NaNJ"] {
            assert!(parse_quantity(bad, "J").is_err(), "{bad}");
        }
        assert_eq!(format_quantity(0.001, "J"), "0.001J");
        assert_eq!(format_quantity(700.0, "W"), "700W");
    }

    #[test]
    fn prices() {
        assert_eq!(parse_price("$2.49"), Ok(2.49));
        assert_eq!(parse_price(" $ 0.5 "), Ok(0.5));
        for bad in ["2.49", "$0", "$-1", "$inf", "$2e9", "€2"] {
            assert!(parse_price(bad).is_err(), "{bad}");
        }
        assert_eq!(format_price(2.49), "$2.49");
        assert_eq!(format_price(0.0004), "$0.0004");
    }

    #[test]
    fn formatting_round_trips() {
        for text in ["250ms", "30s", "2m", "1h", "1.5s"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }
}
