//! The one monotonic clock that the executor, the simulator and the fidelity measurements share.
//!
//! Times inside a run are `Instant`s (CLOCK_MONOTONIC on Linux). To set one process's times
//! against another's on the same machine (the client's reads against the simulator's writes),
//! both convert an `Instant` to nanoseconds on CLOCK_MONOTONIC, which every process shares. This
//! module is only that conversion; it keeps no time of its own.

/// `at` on the machine's shared monotonic clock (CLOCK_MONOTONIC, which `Instant` reads on
/// Linux), in ns: lets two processes' times be compared. `None` where that clock cannot be read.
pub fn monotonic_ns(at: std::time::Instant) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let instant_now = std::time::Instant::now();
        // SAFETY: clock_gettime only writes the struct it is given.
        if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
            return None;
        }
        let raw_now = now.tv_sec as i128 * 1_000_000_000 + now.tv_nsec as i128;
        let back = instant_now.saturating_duration_since(at).as_nanos() as i128;
        let ahead = at.saturating_duration_since(instant_now).as_nanos() as i128;
        u64::try_from(raw_now - back + ahead).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = at;
        None
    }
}

/// Microseconds from `origin` to `at` (0 when `at` is earlier).
pub fn micros_since(origin: std::time::Instant, at: std::time::Instant) -> u64 {
    at.saturating_duration_since(origin).as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn two_instants_keep_their_distance_on_the_shared_clock() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let earlier = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let (a, b) = (
            monotonic_ns(earlier).unwrap(),
            monotonic_ns(Instant::now()).unwrap(),
        );
        assert!((2_000_000..1_000_000_000).contains(&(b - a)), "{a} {b}");
        assert_eq!(micros_since(Instant::now(), earlier), 0);
    }
}
