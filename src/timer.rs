//! A precise timer for absolute deadlines, shared by the open-loop pacer and the simulator.
//!
//! Tokio's timer wheel has a 1 ms resolution and fires at the first tick at or after a deadline,
//! so its sleeps overshoot by 0–1 ms plus the wake-up: too coarse for schedule lag measured in
//! microseconds, or for a simulator whose delays are the truth a test checks against. This timer
//! keeps the pending deadlines in a heap on one dedicated thread, which blocks on its channel
//! with a timeout down to the nearest deadline (a futex wait, accurate to tens of microseconds)
//! and then wakes the waiting tasks. Written by hand because it sits on the hot path of pacing
//! and no maintained crate offers this over tokio.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

type Entry = (Instant, oneshot::Sender<()>);

/// A handle to the timer thread; cheap to clone. The thread ends when every handle is dropped.
#[derive(Clone)]
pub struct PreciseTimer {
    requests: mpsc::Sender<Entry>,
}

impl PreciseTimer {
    /// Starts the timer thread.
    pub fn start() -> std::io::Result<PreciseTimer> {
        PreciseTimer::start_named("llmload-timer")
    }

    /// Starts the timer thread under `name` (the embedded simulator's is told apart from the
    /// client's by it: its CPU is not the client's).
    pub fn start_named(name: &str) -> std::io::Result<PreciseTimer> {
        let (requests, inbox) = mpsc::channel::<Entry>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(inbox))?;
        Ok(PreciseTimer { requests })
    }

    /// Waits until `deadline`. Falls back to tokio's timer if the timer thread is gone.
    pub async fn sleep_until(&self, deadline: tokio::time::Instant) {
        let deadline_std = deadline.into_std();
        if deadline_std <= Instant::now() {
            return;
        }
        let (fire, fired) = oneshot::channel();
        if self.requests.send((deadline_std, fire)).is_err() || fired.await.is_err() {
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Ordered by deadline, then by arrival, so that equal deadlines fire in the order asked.
struct Pending {
    deadline: Instant,
    order: u64,
    fire: oneshot::Sender<()>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.order) == (other.deadline, other.order)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.order).cmp(&(other.deadline, other.order))
    }
}

fn run(inbox: mpsc::Receiver<Entry>) {
    let mut heap: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut order = 0u64;
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|p| p.0.deadline <= now) {
            if let Some(Reverse(due)) = heap.pop() {
                let _ = due.fire.send(());
            }
        }
        let received = match heap.peek() {
            Some(next) => inbox.recv_timeout(next.0.deadline.saturating_duration_since(now)),
            None => inbox.recv_timeout(Duration::from_secs(3600)),
        };
        match received {
            Ok((deadline, fire)) => {
                order += 1;
                heap.push(Reverse(Pending {
                    deadline,
                    order,
                    fire,
                }));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // No handle is left; fire what remains so no task waits forever.
                for Reverse(pending) in heap.drain() {
                    let _ = pending.fire.send(());
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fires_in_order_and_not_early() {
        let timer = PreciseTimer::start().unwrap();
        let start = tokio::time::Instant::now();
        let mut handles = Vec::new();
        for ms in [30u64, 10, 20] {
            let timer = timer.clone();
            handles.push(tokio::spawn(async move {
                let deadline = start + Duration::from_millis(ms);
                timer.sleep_until(deadline).await;
                let now = tokio::time::Instant::now();
                assert!(now >= deadline, "fired early");
                (ms, now)
            }));
        }
        let mut fired = Vec::new();
        for h in handles {
            fired.push(h.await.unwrap());
        }
        fired.sort_by_key(|f| f.1);
        assert_eq!(fired.iter().map(|f| f.0).collect::<Vec<_>>(), [10, 20, 30]);
        // A deadline in the past returns at once.
        timer.sleep_until(start).await;
    }
}
