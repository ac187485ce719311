//! Request ids: the `x-request-id` every request carries, and how records name it again.
//!
//! A request is `<prefix>-<phase>-<seq>`, where the prefix (`llmload-` and 8 hex digits) is drawn
//! once per run and kept in the run header: two runs against one server (two CI jobs) never send
//! the same id, and a record can be matched with a server's log or the simulator's write times.
//!
//! Every request also carries a W3C `traceparent` (trace context level 1: version 00, sampled):
//! a trace of its own, whose id the record keeps, so the spans an engine exports for it (vLLM
//! and SGLang continue the trace they are sent) are found from the record and the record from
//! them.

/// The response headers a server (or the gateway before it) names its own id of a request in:
/// OpenAI's and most gateways' `x-request-id`, Anthropic's `request-id`, Azure API
/// Management's `apim-request-id`. The first one a response carries is kept.
pub const SERVER_REQUEST_ID_HEADERS: [&str; 3] = ["x-request-id", "request-id", "apim-request-id"];

/// The server's id of a request as a record keeps it: a header value of at most 128 characters,
/// letters, digits and `-_.:/+=` only (what ids are made of); anything else is not kept, so
/// that no text a server chooses reaches a report.
pub fn server_request_id(value: &[u8]) -> Option<String> {
    let id_like = |b: &u8| b.is_ascii_alphanumeric() || b"-_.:/+=".contains(b);
    (!value.is_empty() && value.len() <= 128 && value.iter().all(id_like))
        .then(|| String::from_utf8_lossy(value).into_owned())
}

/// Whether a response header names the server's id of the request.
pub fn is_server_request_id_header(name: &str) -> bool {
    SERVER_REQUEST_ID_HEADERS
        .iter()
        .any(|known| name.eq_ignore_ascii_case(known))
}

/// A run's request-id prefix, `llmload-` and 8 hex digits drawn from the clock and the process.
pub fn new_request_id_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let tag = crate::seed::mix64(nanos ^ (std::process::id() as u64).rotate_left(32));
    format!("llmload-{:08x}", tag as u32)
}

/// The `x-request-id` of request `seq` of phase `phase` with a run's `prefix`.
pub fn request_id_text(prefix: &str, phase: usize, seq: u64) -> String {
    format!("{prefix}-{phase}-{seq}")
}

/// The W3C trace context a request is sent with: a trace of its own, and the id of the client's
/// span in it (the `parent-id` the server's spans hang from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    /// 128 bits, never zero; its low 64 bits as random as its high ones (samplers that keep a
    /// ratio of traces compare those).
    pub trace_id: u128,
    /// 64 bits, never zero.
    pub span_id: u64,
}

impl TraceContext {
    /// The trace of request `seq` of phase `phase` of the run whose request ids start with
    /// `prefix`: distinct for every request of the run (each half is a bijection of the one
    /// before), and unlike another run's (the prefix is drawn per run).
    pub fn of(prefix: &str, phase: usize, seq: u64) -> TraceContext {
        use crate::seed::mix64;
        let run = prefix
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| mix64(h ^ u64::from(b)));
        let high = mix64(run ^ (phase as u64).rotate_left(40));
        let low = mix64(high ^ seq);
        TraceContext {
            trace_id: ((u128::from(high) << 64) | u128::from(low)).max(1),
            span_id: mix64(low ^ 0x7472_6163_6570_6172).max(1),
        }
    }

    /// The `traceparent` header: `00-<trace id>-<span id>-01` (sampled).
    pub fn traceparent(&self) -> String {
        format!("00-{:032x}-{:016x}-01", self.trace_id, self.span_id)
    }

    /// The trace id as W3C and OpenTelemetry write it: 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_the_run_phase_and_request() {
        let prefix = new_request_id_prefix();
        assert!(
            prefix.starts_with("llmload-") && prefix.len() == 16,
            "{prefix}"
        );
        assert_eq!(request_id_text("llmload-0a", 2, 7), "llmload-0a-2-7");
    }

    #[test]
    fn every_request_has_a_trace_of_its_own_in_w3c_form() {
        let trace = TraceContext::of("llmload-0a1b2c3d", 2, 7);
        let header = trace.traceparent();
        let fields: Vec<&str> = header.split('-').collect();
        assert_eq!(fields.len(), 4, "{header}");
        assert_eq!((fields[0], fields[3]), ("00", "01"));
        assert_eq!(fields[1], trace.trace_id_hex());
        assert_eq!((fields[1].len(), fields[2].len()), (32, 16));
        assert!(header
            .bytes()
            .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        // The same request, the same trace; any other request or run, another.
        assert_eq!(TraceContext::of("llmload-0a1b2c3d", 2, 7), trace);
        let mut seen = std::collections::HashSet::new();
        for prefix in ["llmload-0a1b2c3d", "llmload-0a1b2c3e"] {
            for phase in 0..4 {
                for seq in 0..1000 {
                    let other = TraceContext::of(prefix, phase, seq);
                    assert!(seen.insert(other.trace_id), "{prefix} {phase} {seq}");
                    assert!(other.span_id != 0);
                }
            }
        }
    }

    #[test]
    fn a_servers_request_id_is_kept_only_when_it_looks_like_one() {
        assert_eq!(
            server_request_id(b"req_011CSHoEeqs5C35K2UUqR7Fy").as_deref(),
            Some("req_011CSHoEeqs5C35K2UUqR7Fy")
        );
        assert_eq!(
            server_request_id(b"6c4b1a2e-3f0d-4c1e-9a7b-2f1e0d9c8b7a").as_deref(),
            Some("6c4b1a2e-3f0d-4c1e-9a7b-2f1e0d9c8b7a")
        );
        for bad in [
            &b""[..],
            b"has space",
            b"<script>",
            &[b'a'; 129],
            "é".as_bytes(),
        ] {
            assert_eq!(server_request_id(bad), None, "{bad:?}");
        }
        assert!(is_server_request_id_header("Request-Id"));
        assert!(!is_server_request_id_header("x-request-ids"));
    }
}
