//! The Prometheus text exposition format, read: one sample per line, `name{labels} value`.
//!
//! Hand-written on purpose: the format is line-based and small, what llmload needs of it is
//! names, labels and values (no timestamps, exemplars or metadata beyond `# TYPE`), and it must
//! never fail on the variations real servers print (OpenMetrics' `# EOF`, `+Inf`, `NaN`,
//! escaped label values, a trailing timestamp). A line it cannot read is skipped, not fatal.

/// One sample of a metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric's name (a histogram's `_bucket`, `_sum` and `_count` lines keep the suffix).
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if it has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample `text` holds, in order; lines that are not samples are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if rest.starts_with('{') {
        let (parsed, after) = parse_labels(&rest[1..])?;
        labels = parsed;
        rest = after;
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `key="value",key="value"}` → the pairs and what follows the closing brace.
fn parse_labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = text.find('=')?;
        let key = text[..eq].trim().to_string();
        let mut chars = text[eq + 1..].char_indices();
        let (_, quote) = chars.next()?;
        if quote != '"' {
            return None;
        }
        let mut value = String::new();
        let mut escaped = false;
        let mut end = None;
        for (i, c) in chars {
            match (escaped, c) {
                (true, 'n') => {
                    value.push('\n');
                    escaped = false;
                }
                (true, c) => {
                    value.push(c);
                    escaped = false;
                }
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                (false, c) => value.push(c),
            }
        }
        labels.push((key, value));
        text = &text[end?..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_labels_and_odd_values() {
        let text = "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3.0\n\
            vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"a \\\"q\\\" b\"} 17 1700000000000\n\
            tgi_queue_size 0\nweird{} NaN\nbroken{x=\"1\" 2\n# EOF\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 4, "{samples:?}");
        assert_eq!(samples[0].name, "vllm:num_requests_running");
        assert_eq!(samples[0].label("engine"), Some("0"));
        assert_eq!(samples[0].value, 3.0);
        assert_eq!(samples[1].label("le"), Some("+Inf"));
        assert_eq!(samples[1].label("model_name"), Some("a \"q\" b"));
        assert_eq!(samples[1].value, 17.0);
        assert_eq!(samples[2].labels, vec![]);
        assert!(samples[3].value.is_nan());
    }
}
