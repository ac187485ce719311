//! What the transport says: requests re-sent on a fresh connection, answers not streamed, a
//! server whose certificate went unchecked.

use super::{note, warning, Code, Run, Warning};

/// The run's warnings and notes of this family.
pub(super) fn transport(run: &Run, out: &mut Vec<Warning>) {
    let Run {
        overall, stream, ..
    } = *run;
    if overall.requests.connection_retries > 0 {
        out.push(note(
            Code::ConnectionRetries,
            format!(
                "{} request(s) were sent again on a fresh connection: the server closed a keep-alive connection \
                 it had left open before answering on it; their send time is the re-send's",
                overall.requests.connection_retries
            ),
        ));
    }
    if run.header.is_some_and(|h| h.tls_unverified) {
        out.push(warning(
            Code::TlsUnverified,
            "the target's TLS certificate was not checked (`tls-verify #false`): nothing proves \
             which server answered at its address, or that nothing sat between it and the client; \
             fit for a test rig, not for a claim about a server"
                .into(),
        ));
    }
    if !stream {
        out.push(note(
            Code::NotStreaming,
            "the target is not streamed: TTFT, ITL, TPOT and decode rates cannot be measured, only E2E".into(),
        ));
    }
}
