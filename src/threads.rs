//! Helper threads with a runtime of their own: the signal watcher, the telemetry scraper, the
//! started server's watch, the image server. Each does little work, but its work must never
//! wait behind the run's requests for a worker thread (a scrape on time, a hung server noticed,
//! an image served when the server asks for it).
//!
//! What this is not for: the run's own requests (the executor's runtime), or the embedded
//! simulator, which reports a runtime that cannot be built to its caller.

/// The names of the embedded simulator's threads: every one starts with this, so that the
/// client's CPU measurement (the executor's) leaves them out. Here, below both, so that the
/// client knows the simulator's threads without depending on the simulator.
pub const SIM_THREAD_PREFIX: &str = "llmload-sim";

/// Spawns a thread named `name` that runs `task()`'s future to its end on a current-thread
/// runtime of its own. A runtime that cannot be built ends the thread at once, its work not
/// done.
pub fn spawn_with_runtime<F, Fut>(
    name: &str,
    task: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                runtime.block_on(task());
            }
        })
}

/// Like [`spawn_with_runtime`], for work that must never take the client's CPU from its
/// requests (the exporters: a batch of spans encoded and sent, a remote-write push, a scrape
/// served): the thread runs at the idle scheduling class (Linux's `SCHED_IDLE`), so a request's
/// thread that wakes takes the core from it at once. Its work waits for a core the run leaves
/// free; an exporter drops and counts what cannot wait.
///
/// Measured (benches/fidelity.rs, `exporters`, 1,000 streams cold on one client core, which
/// they saturate): with `--otlp`'s sender at the normal class the TTFT error p99 was 46 ms
/// against 34 ms without it (4 runs each, means); at the idle class +2.4 ± 10.6 ms, paired over
/// 6 rounds. This box's noise is as large as either, so the class is kept for what it says
/// (the run's requests first), not for a proven gain; docs/performance.md has the runs.
pub fn spawn_background_with_runtime<F, Fut>(
    name: &str,
    task: F,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    spawn_with_runtime(name, move || {
        idle_class();
        task()
    })
}

/// Puts the calling thread in the idle scheduling class, where Linux has one; nothing
/// elsewhere (the thread then competes as any other).
fn idle_class() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` lives across the call.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_task_runs_on_its_named_thread_with_timers() {
        let thread = super::spawn_with_runtime("llmload-test", || async {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            assert_eq!(std::thread::current().name(), Some("llmload-test"));
        })
        .unwrap();
        assert!(thread.join().is_ok());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_background_thread_runs_at_the_idle_class() {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread =
            super::spawn_background_with_runtime("llmload-test-idle", move || async move {
                let _ = tx.send(unsafe { libc::sched_getscheduler(0) });
            })
            .unwrap();
        assert!(thread.join().is_ok());
        assert_eq!(rx.recv().unwrap(), libc::SCHED_IDLE);
        // The caller's own class is untouched.
        assert_ne!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
    }
}
