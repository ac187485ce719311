//! An exporter's own thread: at the idle scheduling class with a runtime of its own
//! ([`crate::threads::spawn_background_with_runtime`]), told to stop through a oneshot and
//! joined when it is stopped or dropped; and a push, with how a failed one is said.
//!
//! Not for: what the thread does (each exporter's module).

use tokio::sync::oneshot;

/// A running exporter thread.
pub(super) struct Background {
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Starts `task`, given the receiver that fires when it should stop.
    pub fn start<F, Fut>(name: &str, task: F) -> std::io::Result<Background>
    where
        F: FnOnce(oneshot::Receiver<()>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let (shutdown, stopped) = oneshot::channel::<()>();
        let thread = crate::threads::spawn_background_with_runtime(name, move || task(stopped))?;
        Ok(Background {
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// Tells the task to stop and waits for its thread to end.
    pub fn stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

/// POSTs a protobuf `body` to `url` with `headers` besides its type and llmload's agent; `Err`
/// says why it did not go, in a few words (never the URL).
pub(super) async fn post_protobuf(
    client: &reqwest::Client,
    url: &reqwest::Url,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<(), String> {
    let mut request = client
        .post(url.clone())
        .header("Content-Type", "application/x-protobuf")
        .header("User-Agent", concat!("llmload/", env!("CARGO_PKG_VERSION")));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    match request.body(body).send().await {
        Ok(answer) if answer.status().is_success() => Ok(()),
        Ok(answer) => Err(format!("HTTP {}", answer.status())),
        Err(e) => Err(failure(&e).to_string()),
    }
}

/// A push that got no answer, in a few words: its kind only, as reqwest's own text holds the
/// URL, which may hold credentials.
fn failure(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "failed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_task_sees_its_stop_and_its_thread_ends() {
        let (seen, heard) = std::sync::mpsc::channel();
        let mut task = Background::start("llmload-test-background", move |stopped| async move {
            let _ = stopped.await;
            let _ = seen.send("stopped");
        })
        .unwrap();
        task.stop();
        assert_eq!(heard.try_recv(), Ok("stopped"));
        // Dropping one already stopped does nothing more.
        drop(task);
    }
}
