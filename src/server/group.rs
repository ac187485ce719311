//! A started server's process group, signalled as one: the server leads it (`process_group(0)`
//! at spawn), and whatever it starts — a shell line's engine, a launcher's background
//! process — is in it, and stays in it after the leader exits. The stop after a run, the
//! watchdog and the clean-up of a dead llmload's server all reach the server through here.

use std::time::{Duration, Instant};

/// SIGTERM (and SIGCONT, for a stopped member) to every process of `group`, SIGKILL to any
/// left after `grace`. Whether a member was there to stop.
pub(super) fn stop_group(group: i32, grace: Duration) -> bool {
    if !group_alive(group) {
        return false;
    }
    signal(group, Signal::Terminate);
    signal(group, Signal::Continue);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !group_alive(group) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(group, Signal::Kill);
    true
}

/// Signals the server's process group can be sent.
#[derive(Debug, Clone, Copy)]
pub(super) enum Signal {
    Terminate,
    Continue,
    Kill,
}

/// Sends `signal` to every process of the group `group`; whether any received it.
pub(super) fn signal(group: i32, signal: Signal) -> bool {
    #[cfg(unix)]
    {
        let number = match signal {
            Signal::Terminate => libc::SIGTERM,
            Signal::Continue => libc::SIGCONT,
            Signal::Kill => libc::SIGKILL,
        };
        // SAFETY: kill(2) with a negative id signals a process group; no memory is touched.
        // The group is one llmload made (`process_group(0)` on the server it spawned): its id
        // is the leader's pid, which the kernel does not hand to a new process while any member
        // of the group lives, so a live group is always ours.
        group > 1 && unsafe { libc::kill(-group, number) } == 0
    }
    #[cfg(not(unix))]
    {
        let _ = (group, signal);
        false
    }
}

/// Whether any process of the group `group` lives (a zombie not yet reaped counts).
pub(super) fn group_alive(group: i32) -> bool {
    #[cfg(unix)]
    {
        // SAFETY: signal 0 only asks whether the group exists; nothing is sent.
        group > 1 && unsafe { libc::kill(-group, 0) } == 0
    }
    #[cfg(not(unix))]
    {
        let _ = group;
        false
    }
}
