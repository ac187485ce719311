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
}
