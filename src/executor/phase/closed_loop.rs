//! The closed-loop driver: a number of users, each sending its next request when its previous
//! one has finished, until the phase's duration or request count is spent.

use std::sync::Arc;

use tokio::time::Instant;

use super::Drive;
use crate::executor::context::ended_early;
use crate::executor::observe::stopped;
use crate::executor::send::dispatch;

/// Runs `workers` users over the phase's bodies until its end.
pub(super) async fn drive(drive: Drive<'_>, workers: u32) {
    let Drive {
        context,
        state,
        phase,
        bodies,
        deadline,
        mut cancel,
        mut ended,
        ..
    } = drive;
    let queue = Arc::new(tokio::sync::Mutex::new(bodies));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let queue = queue.clone();
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
                let next = tokio::select! {
                    next = async { queue.lock().await.recv().await } => next,
                    _ = stopped(&mut cancel) => None,
                    _ = ended_early(&mut ended) => None,
                };
                let Some((request, body)) = next else { break };
                let ticket = context.enter(&state);
                // Boxed: a request's state (2 KB) is allocated and freed by each
                // request, on the thread running it, rather than held by the user's task
                // from its spawn to the phase's end (the next phase's users then reuse
                // it instead of new memory).
                Box::pin(dispatch(ticket, request, body, None, deadline)).await;
            }
        });
    }
    // A shard may have no user of a small closed loop: it still lasts the phase's
    // duration, so that its next phase starts when the other shards' do.
    let all_done = async {
        while tasks.join_next().await.is_some() {}
        if workers == 0 {
            std::future::pending::<()>().await;
        }
    };
    let deadline = async {
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    let no_deadline = phase.duration.is_none();
    tokio::select! {
        _ = all_done => {}
        _ = deadline => {}
        _ = stopped(&mut cancel) => {}
        _ = ended_early(&mut ended) => {}
        _ = async {}, if workers == 0 && no_deadline => {}
    }
    // Workers still holding a request finish it in the background and then stop.
    tasks.detach_all();
}
