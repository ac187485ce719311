//! The closed-loop driver: a number of users, each sending its next request when its previous
//! one has finished, until the phase's duration or request count is spent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use super::Drive;
use crate::executor::context::ended_early;
use crate::executor::observe::stopped;
use crate::executor::send::dispatch;
use crate::records::BodyWait;

/// Runs `workers` users over the phase's bodies until its end; returns how long they waited
/// for bodies.
pub(super) async fn drive(drive: Drive<'_>, workers: u32) -> BodyWait {
    let Drive {
        context,
        state,
        bodies,
        deadline,
        mut cancel,
        mut ended,
        ..
    } = drive;
    let queue = Arc::new(tokio::sync::Mutex::new(bodies));
    let waited_us = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let queue = queue.clone();
        let waited_us = waited_us.clone();
        let context = context.clone();
        let state = state.clone();
        let mut cancel = cancel.clone();
        let mut ended = ended.clone();
        tasks.spawn(async move {
            loop {
                if *cancel.borrow()
                    || ended.borrow().is_some()
                    || deadline.is_some_and(|d| Instant::now() >= d)
                {
                    break;
                }
                let asked = Instant::now();
                let next = tokio::select! {
                    next = async {
                        let mut bodies = queue.lock().await;
                        let behind = bodies.is_empty();
                        bodies.recv().await.map(|next| (next, behind))
                    } => next,
                    _ = stopped(&mut cancel) => None,
                    _ = ended_early(&mut ended) => None,
                };
                let Some(((request, body), behind)) = next else {
                    break;
                };
                // The user's whole wait is the builder's when it found no body ready (the
                // users queued behind it for the lock find none either); a wait for the lock
                // alone, with bodies ready, is the runtime handing it over, not the builder.
                if behind {
                    let waited = asked.elapsed().as_micros() as u64;
                    if waited >= BODY_WAIT_FLOOR_US {
                        waited_us.fetch_add(waited, Ordering::Relaxed);
                    }
                }
                let ticket = context.enter(&state);
                // Boxed: a request's state (2 KB) is allocated and freed by each
                // request, on the thread running it, rather than held by the user's task
                // from its spawn to the phase's end (the next phase's users then reuse
                // it instead of new memory).
                Box::pin(dispatch(ticket, request, body, None, deadline)).await;
            }
        });
        // Each user is let to send its first request before the next is started: users
        // spawned here queue on this worker ahead of the connections the earlier ones opened,
        // so without the yield every first request waited for all the users after it to start
        // (256 users opening cold connections: each connect took 13-16 ms, in their TTFT).
        // The yield returns after the runtime has polled its I/O, one `epoll_wait` per user.
        tokio::task::yield_now().await;
    }
    // Workers still holding a request finish it in the background and then stop.
    super::until_done(tasks, deadline, &mut cancel, &mut ended).await;
    BodyWait {
        waited_s: waited_us.load(Ordering::Relaxed) as f64 / 1e6,
        users_s: f64::from(workers) * started.elapsed().as_secs_f64(),
    }
}

/// Waits shorter than this are a body finished just in time, not the builder falling behind.
const BODY_WAIT_FLOOR_US: u64 = 200;
