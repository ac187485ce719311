//! Signals stop a run the way a person expects: the first Ctrl-C (SIGINT), or SIGTERM, which
//! CI cancellations, `docker stop` and Kubernetes send, or SIGHUP stops sending and lets the
//! requests in flight finish within the grace period; a second signal cancels them now. Either
//! way the run still writes its records and its report, and exits 3.

use crate::executor::Stop;

/// Forwards the process's stop signals to `stop`, on a thread of its own, for the rest of the
/// process's life.
pub(super) fn forward_to(stop: Stop) {
    let spawned = crate::threads::spawn_with_runtime("llmload-signals", move || async move {
        let mut signals = Signals::new();
        signals.next().await;
        eprintln!(
                    "\ninterrupted: no new requests; waiting for those in flight (Ctrl-C again to stop now)"
                );
        stop.stop_sending();
        signals.next().await;
        eprintln!(
                    "\nstopping now: requests in flight cancelled; what is recorded is written without counting its tokens"
                );
        stop.finish_now();
    });
    if let Err(e) = spawned {
        eprintln!(
            "warning: cannot watch for Ctrl-C ({e}): an interrupted run will not write its report"
        );
    }
}

/// SIGINT, SIGTERM and SIGHUP, as one stream.
struct Signals {
    #[cfg(unix)]
    unix: Vec<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let unix = [
                SignalKind::interrupt(),
                SignalKind::terminate(),
                SignalKind::hangup(),
            ]
            .into_iter()
            .filter_map(|kind| signal(kind).ok())
            .collect();
            Signals { unix }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// Waits for the next signal.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            if self.unix.is_empty() {
                std::future::pending::<()>().await;
            }
            let waits = self.unix.iter_mut().map(|s| Box::pin(s.recv()));
            futures_util::future::select_all(waits).await;
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
