//! Request ids: the `x-request-id` every request carries, and how records name it again.
//!
//! A request is `<prefix>-<phase>-<seq>`, where the prefix (`llmload-` and 8 hex digits) is drawn
//! once per run and kept in the run header: two runs against one server (two CI jobs) never send
//! the same id, and a record can be matched with a server's log or the simulator's write times.

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
}
