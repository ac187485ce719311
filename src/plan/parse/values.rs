//! One reader per kind of value a plan holds: text, booleans, counts, numbers, durations,
//! percentages and seeds, each with its bounds (see [`crate::plan::limits`]) and its messages.

use std::time::Duration;

use kdl::{KdlEntry, KdlValue};

use super::cx::{type_name, Cx};
use crate::plan::units::{
    bounded_duration, parse_duration, parse_percent, parse_price, parse_quantity, seconds_in_unit,
};

/// A kind of value: reads one KDL entry, or reports why it cannot.
pub(super) trait Kind {
    type Out;
    /// The value, or `None` after a diagnostic; `usage` shows how to write the whole node.
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<Self::Out>;
}

/// A name: a string of at most [`MAX_NAME_CHARS`](crate::plan::limits::MAX_NAME_CHARS)
/// characters.
pub(super) struct Name;

impl Kind for Name {
    type Out = String;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<String> {
        use crate::plan::limits::MAX_NAME_CHARS;
        let name = Text.read(cx, entry, usage)?;
        let chars = name.chars().count();
        if chars > MAX_NAME_CHARS {
            cx.error(
                entry.span(),
                format!("the name is {chars} characters long: more than a name may be ({MAX_NAME_CHARS})"),
                "too long",
                "give it a short name; say more in a comment or the plan's description",
            );
            return None;
        }
        Some(name)
    }
}

/// A string.
pub(super) struct Text;

impl Kind for Text {
    type Out = String;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<String> {
        match entry.value() {
            KdlValue::String(s) if entry.ty().is_some_and(|t| t.value() == "env") => {
                env_value(cx, entry, s)
            }
            KdlValue::String(s) => Some(s.clone()),
            other => {
                cx.error(
                    entry.span(),
                    format!("expected a string, found {}", type_name(other)),
                    "not a string",
                    format!("write it as: {usage}"),
                );
                None
            }
        }
    }
}

/// `(env)"NAME"` or `(env)"NAME:-default"`: the variable's value, or the default when it is
/// unset; a diagnostic naming the variable when it is unset with no default.
fn env_value(cx: &mut Cx, entry: &KdlEntry, spec: &str) -> Option<String> {
    let (name, default) = match spec.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (spec, None),
    };
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        cx.error(
            entry.span(),
            format!("\"{name}\" is not an environment variable's name"),
            "not a variable",
            "write (env)\"NAME\" or (env)\"NAME:-default\"; names are letters, digits and _",
        );
        return None;
    }
    let value = match &cx.env {
        super::cx::EnvSource::Process => match std::env::var(name) {
            Ok(value) => Some(value),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                cx.error(
                    entry.span(),
                    format!("${name} is not valid UTF-8"),
                    "not text",
                    "set it to text, or give the value in the plan",
                );
                return None;
            }
        },
        // Judging a kept run again: the value it was run with (or nothing to complain about).
        super::cx::EnvSource::Recorded(values) => Some(
            values
                .get(name)
                .cloned()
                .or(default.map(str::to_string))
                .unwrap_or_default(),
        ),
    };
    match value.or_else(|| default.map(str::to_string)) {
        Some(value) => {
            if !cx.env_used.iter().any(|(n, _)| n == name) {
                cx.env_used.push((name.to_string(), value.clone()));
            }
            Some(value)
        }
        None => {
            cx.error(
                entry.span(),
                format!("${name} is not set, and the plan gives no default"),
                "unset variable",
                format!("set {name} in the environment, or give a default: (env)\"{name}:-value\""),
            );
            None
        }
    }
}

/// `#true` or `#false`.
pub(super) struct Flag;

impl Kind for Flag {
    type Out = bool;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<bool> {
        match entry.value() {
            KdlValue::Bool(b) => Some(*b),
            other => {
                cx.error(
                    entry.span(),
                    format!("expected #true or #false, found {}", type_name(other)),
                    "not a boolean",
                    format!("KDL 2.0 booleans are #true and #false; write it as: {usage}"),
                );
                None
            }
        }
    }
}

/// A whole number in `min..=max`.
pub(super) struct Count {
    pub min: u64,
    pub max: u64,
}

impl Count {
    /// At least 1, at most `max`.
    pub const fn positive(max: u64) -> Count {
        Count { min: 1, max }
    }
}

impl Kind for Count {
    type Out = u64;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<u64> {
        match entry.value() {
            KdlValue::Integer(n) if *n >= self.min as i128 && *n <= self.max as i128 => {
                Some(*n as u64)
            }
            KdlValue::Integer(n) => {
                let bound = if *n < self.min as i128 {
                    format!("at least {}", self.min)
                } else {
                    format!("at most {}", self.max)
                };
                cx.error(
                    entry.span(),
                    format!("{n} is out of range: it must be {bound}"),
                    "out of range",
                    format!("write it as: {usage}"),
                );
                None
            }
            other => {
                cx.error(
                    entry.span(),
                    format!("expected a whole number, found {}", type_name(other)),
                    "not a whole number",
                    format!("write it as: {usage}"),
                );
                None
            }
        }
    }
}

/// A finite number: greater than zero (`positive`) or zero or more, and at most `max`.
pub(super) struct Number {
    pub positive: bool,
    pub max: f64,
}

impl Kind for Number {
    type Out = f64;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<f64> {
        let value = match entry.value() {
            KdlValue::Integer(n) => *n as f64,
            KdlValue::Float(f) => *f,
            other => {
                cx.error(
                    entry.span(),
                    format!("expected a number, found {}", type_name(other)),
                    "not a number",
                    format!("write it as: {usage}"),
                );
                return None;
            }
        };
        let low_ok = if self.positive {
            value > 0.0
        } else {
            value >= 0.0
        };
        // NaN fails `low_ok`; infinity is above any `max`.
        let bound = if !low_ok {
            Some(if self.positive {
                "greater than zero".to_string()
            } else {
                "zero or more".to_string()
            })
        } else if value > self.max {
            Some(format!("at most {}", trim_float(self.max)))
        } else {
            None
        };
        if let Some(bound) = bound {
            cx.error(
                entry.span(),
                format!("{value} is out of range: it must be {bound}"),
                "out of range",
                format!("write it as: {usage}"),
            );
            return None;
        }
        Some(value)
    }
}

/// A duration: a string with a unit ("30s") or a type-annotated number ((ms)500), longer than
/// zero unless `zero_ok`, and never longer than the longest allowed.
pub(super) struct Dur {
    pub zero_ok: bool,
}

/// A duration longer than zero.
pub(super) const DURATION: Dur = Dur { zero_ok: false };
/// A duration that may be zero (simulator delays and costs).
pub(super) const DURATION_OR_ZERO: Dur = Dur { zero_ok: true };

/// A share of a mix (an input bucket's, a prefix group's, an image size's): more than zero.
pub(super) const WEIGHT: Number = Number {
    positive: true,
    max: crate::plan::limits::MAX_WEIGHT,
};

impl Kind for Dur {
    type Out = Duration;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<Duration> {
        let help = format!(
            "durations are strings with a unit: \"250ms\", \"30s\", \"2m\", \"1h\"; write it as: {usage}"
        );
        let parsed = match (entry.value(), entry.ty()) {
            (KdlValue::String(s), _) => parse_duration(s).map_err(|e| e.0),
            (KdlValue::Integer(_) | KdlValue::Float(_), Some(unit)) => {
                let value = match entry.value() {
                    KdlValue::Integer(n) => *n as f64,
                    KdlValue::Float(f) => *f,
                    _ => 0.0,
                };
                match seconds_in_unit(unit.value()) {
                    Some(scale) => bounded_duration(value * scale)
                        .map_err(|why| format!("({}){value} {why}", unit.value())),
                    None => Err(format!("({}) is not a duration unit", unit.value())),
                }
            }
            (KdlValue::Integer(_) | KdlValue::Float(_), None) => {
                Err("a bare number has no unit".to_string())
            }
            (other, _) => Err(format!("expected a duration, found {}", type_name(other))),
        };
        match parsed {
            Ok(d) if d > Duration::ZERO || self.zero_ok => Some(d),
            Ok(_) => {
                cx.error(
                    entry.span(),
                    "a duration must be longer than zero",
                    "zero",
                    help,
                );
                None
            }
            Err(message) => {
                cx.error(entry.span(), message, "not a duration", help);
                None
            }
        }
    }
}

/// A percentage string such as "1%", as a fraction.
pub(super) struct Percent;

impl Kind for Percent {
    type Out = f64;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<f64> {
        match entry.value() {
            KdlValue::String(s) => match parse_percent(s) {
                Ok(v) => Some(v),
                Err(message) => {
                    cx.error(
                        entry.span(),
                        message.0,
                        "not a percentage",
                        format!("write it as: {usage}"),
                    );
                    None
                }
            },
            other => {
                cx.error(
                    entry.span(),
                    format!("expected a percentage string, found {}", type_name(other)),
                    "not a percentage",
                    format!("write it as: {usage}"),
                );
                None
            }
        }
    }
}

/// A physical quantity with its unit: energy ("0.4J", "400mJ") or power ("350W", "1.2kW"),
/// in the unit itself.
pub(super) struct Quantity {
    /// The unit's symbol: `J`, `W`.
    pub symbol: &'static str,
}

impl Kind for Quantity {
    type Out = f64;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<f64> {
        let message = match entry.value() {
            KdlValue::String(s) => match parse_quantity(s, self.symbol) {
                Ok(value) => return Some(value),
                Err(message) => message.0,
            },
            other => format!(
                "expected a quantity in {} such as \"0.4{}\", found {}",
                self.symbol,
                self.symbol,
                type_name(other)
            ),
        };
        cx.error(
            entry.span(),
            message,
            format!("not in {}", self.symbol),
            format!("write it as: {usage}"),
        );
        None
    }
}

/// A price in US dollars, more than zero: "$2.49".
pub(super) struct Dollars;

impl Kind for Dollars {
    type Out = f64;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<f64> {
        let message = match entry.value() {
            KdlValue::String(s) => match parse_price(s) {
                Ok(value) => return Some(value),
                Err(message) => message.0,
            },
            other => format!(
                "expected a price such as \"$2.49\", found {}",
                type_name(other)
            ),
        };
        cx.error(
            entry.span(),
            message,
            "not a price",
            format!("write it as: {usage}"),
        );
        None
    }
}

/// A size in bytes: "1MiB", "512KiB", "64MB", "4096B", within `min..=max`.
pub(super) struct ByteSize {
    pub min: u64,
    pub max: u64,
}

/// Why a text is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotASize {
    #[error("\"{0}\" has no unit (B, KiB, MiB, GiB, KB, MB, GB)")]
    NoUnit(String),
    #[error("\"{0}\" does not start with a number")]
    NoNumber(String),
    #[error("\"{0}\" is not a size unit (B, KiB, MiB, GiB, KB, MB, GB)")]
    UnknownUnit(String),
    #[error("\"{0}\" is too large")]
    TooLarge(String),
    #[error("expected a size such as \"1MiB\", found {0}")]
    NotText(&'static str),
}

/// Parses "1MiB", "512 KiB", "64MB", "2GB", "4096B" into bytes.
pub(crate) fn parse_bytes(text: &str) -> Result<u64, NotASize> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| NotASize::NoUnit(text.to_string()))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| NotASize::NoNumber(text.to_string()))?;
    let scale = match unit.trim() {
        "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        other => return Err(NotASize::UnknownUnit(other.to_string())),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes > 1e15 {
        return Err(NotASize::TooLarge(text.to_string()));
    }
    Ok(bytes.round() as u64)
}

impl Kind for ByteSize {
    type Out = u64;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<u64> {
        let parsed = match entry.value() {
            KdlValue::String(s) => parse_bytes(s),
            other => Err(NotASize::NotText(type_name(other))),
        };
        match parsed {
            Ok(n) if (self.min..=self.max).contains(&n) => Some(n),
            Ok(n) => {
                cx.error(
                    entry.span(),
                    format!(
                        "{n} bytes is out of range: it must be from {} to {} bytes",
                        self.min, self.max
                    ),
                    "out of range",
                    format!("write it as: {usage}"),
                );
                None
            }
            Err(not_a_size) => {
                cx.error(
                    entry.span(),
                    not_a_size.to_string(),
                    "not a size",
                    format!("sizes are strings with a unit: \"64KiB\", \"1MiB\", \"256MiB\"; write it as: {usage}"),
                );
                None
            }
        }
    }
}

/// A seed: a whole number from 0 to 2^64−1.
pub(super) struct Seed;

impl Kind for Seed {
    type Out = u64;
    fn read(&self, cx: &mut Cx, entry: &KdlEntry, usage: &str) -> Option<u64> {
        match entry.value() {
            KdlValue::Integer(n) if *n >= 0 && *n <= u64::MAX as i128 => Some(*n as u64),
            _ => {
                cx.error(
                    entry.span(),
                    "a seed is a whole number from 0 to 2^64-1",
                    "not a seed",
                    format!("write it as: {usage}"),
                );
                None
            }
        }
    }
}

/// `500.0` → `500`, `0.5` → `0.5`.
pub(crate) fn trim_float(value: f64) -> String {
    let text = format!("{:.3}", value);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}
