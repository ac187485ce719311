//! What the client process itself uses while it runs: CPU time, peak memory, open files.
//!
//! A load generator that runs out of CPU sends late and reads late, and its latencies are its
//! own, not the server's. So the executor samples its own CPU time on a plain thread (it must
//! keep sampling when the async runtime is the thing that is saturated) and writes, at the end of
//! each phase, how busy the process was; [`crate::metrics::warnings`] says when that means the
//! client limited the run. Unix only (getrusage); elsewhere nothing is measured.
//!
//! Beside it, the machine's own busy time over all its cores (/proc/stat, Linux): a server
//! started on the same machine takes cores the client then waits for without being busy
//! itself, and only the machine's reading says so. It counts the machine's listed CPUs: in a
//! container limited to fewer cores than the host lists, it reads low.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the sampler reads the process's CPU time.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// A one-second window at or above this share of the client's cores counts as saturated.
pub const SATURATED_SHARE: f64 = 0.95;

#[cfg(unix)]
fn rusage() -> Option<libc::rusage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage only writes into the struct it is given.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: getrusage succeeded, so the struct is initialised.
    (status == 0).then(|| unsafe { usage.assume_init() })
}

/// CPU seconds (user + system) the client has used: this process's, less what the embedded
/// simulator's threads used (they serve the run; they do not send it).
pub fn cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    {
        let usage = rusage()?;
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let process = seconds(usage.ru_utime) + seconds(usage.ru_stime);
        Some((process - simulator_cpu_seconds()).max(0.0))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// One reading of the clocks the sampler follows.
#[derive(Debug, Clone, Copy)]
pub struct CpuReading {
    /// The client's CPU seconds ([`cpu_seconds`]).
    pub client: f64,
    /// This machine's busy core-seconds, all its CPUs together (Linux).
    pub machine: Option<f64>,
}

/// The client's CPU time and the machine's busy time, now.
pub fn cpu_reading() -> Option<CpuReading> {
    Some(CpuReading {
        client: cpu_seconds()?,
        machine: machine_busy_seconds(),
    })
}

/// Seconds this machine's CPUs have been busy, together (everything but idle and I/O wait),
/// from /proc/stat's first line (Linux).
fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    busy_ticks(stat.lines().next()?).map(|ticks| ticks as f64 / ticks_per_second().unwrap_or(100.0))
}

/// The busy ticks of /proc/stat's `cpu` line: user, nice, system, irq, softirq and steal
/// (idle and iowait left out; guest time is already within user).
fn busy_ticks(line: &str) -> Option<u64> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields.map_while(|f| f.parse().ok()).collect();
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0);
    (ticks.len() >= 4).then(|| at(0) + at(1) + at(2) + at(5) + at(6) + at(7))
}

/// The CPUs /proc/stat lists (Linux).
fn machine_cores() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cores = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    (cores > 0).then_some(cores as f64)
}

/// CPU seconds the embedded simulator's threads (named [`crate::threads::SIM_THREAD_PREFIX`]…)
/// have used, from /proc (Linux); 0 elsewhere, or when no simulator runs in this process.
fn simulator_cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let Some(ticks_per_s) = ticks_per_second() else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let dir = task.path();
        let is_simulator = std::fs::read_to_string(dir.join("comm"))
            .is_ok_and(|name| name.starts_with(crate::threads::SIM_THREAD_PREFIX));
        if !is_simulator {
            continue;
        }
        if let Ok(stat) = std::fs::read_to_string(dir.join("stat")) {
            ticks += thread_ticks(&stat).unwrap_or(0);
        }
    }
    ticks as f64 / ticks_per_s
}

/// The clock ticks of /proc's CPU times per second.
fn ticks_per_second() -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf only reads a configuration value.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (ticks > 0).then_some(ticks as f64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// CPU seconds another process (a server llmload started) has used, with the children it
/// waited for (a shell line's), from /proc (Linux).
pub(crate) fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let own = thread_ticks(&stat)?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // cutime (16) and cstime (17) follow utime and stime.
    let children: u64 = fields
        .get(13..15)?
        .iter()
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    Some((own + children) as f64 / ticks_per_second()?)
}

/// What a process is doing, as people read it, from its state in /proc/PID/stat (Linux):
/// "stopped by a signal (state T)" for a SIGSTOP, "running (state R)" for a busy loop.
pub(crate) fn process_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
    let meaning = match state {
        "R" => "running",
        "S" => "sleeping",
        "D" => "waiting on a disk or a device",
        "T" => "stopped by a signal",
        "t" => "stopped by a debugger",
        "Z" => "a zombie",
        _ => "in an unusual state",
    };
    Some(format!("{meaning} (state {state})"))
}

/// utime + stime of a /proc/…/stat line, in clock ticks: fields 14 and 15, counted after the
/// command name's closing parenthesis (a name may hold spaces).
fn thread_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name, the state is field 3: utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// This process's peak resident set, in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    // Linux keeps ru_maxrss across execve, so a process started by a big parent would report
    // the parent's peak: its own address space's high-water mark is VmHWM.
    if let Some(peak) = peak_rss_linux() {
        return Some(peak);
    }
    #[cfg(unix)]
    {
        // ru_maxrss is in KiB, except on macOS (bytes).
        let unit = if cfg!(target_os = "macos") { 1 } else { 1024 };
        Some((rusage()?.ru_maxrss as u64).saturating_mul(unit))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The peak resident set of this process's address space (VmHWM), on Linux.
fn peak_rss_linux() -> Option<u64> {
    process_peak_rss_bytes("self")
}

/// The peak resident set (VmHWM) of `/proc/{process}` — `self`, or a pid — on Linux.
pub(crate) fn process_peak_rss_bytes(process: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{process}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

pub use crate::records::{ClientLoad, MachineLoad};

/// Samples this process's CPU time, and the machine's, until dropped.
pub struct CpuMonitor {
    cores: f64,
    machine_cores: Option<f64>,
    samples: Arc<Mutex<Vec<(Instant, CpuReading)>>>,
    stop: Arc<AtomicBool>,
}

impl CpuMonitor {
    /// `None` where CPU time cannot be read.
    pub fn start(cores: f64) -> Option<CpuMonitor> {
        cpu_seconds()?;
        let machine_cores = machine_cores();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_samples, thread_stop) = (samples.clone(), stop.clone());
        std::thread::Builder::new()
            .name("llmload-cpu".into())
            .spawn(move || {
                while !thread_stop.load(Ordering::Relaxed) {
                    if let Some(reading) = cpu_reading() {
                        if let Ok(mut samples) = thread_samples.lock() {
                            samples.push((Instant::now(), reading));
                        }
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
            })
            .ok()?;
        Some(CpuMonitor {
            cores,
            machine_cores,
            samples,
            stop,
        })
    }

    /// The client's load (and the machine's) between `start` and now; `at_start` was read at
    /// `start`.
    pub fn load_since(&self, start: Instant, at_start: CpuReading) -> Option<ClientLoad> {
        let now_reading = cpu_reading()?;
        let now = Instant::now();
        let samples = self.samples.lock().ok()?;
        let mut readings: Vec<(Instant, CpuReading)> = vec![(start, at_start)];
        readings.extend(
            samples
                .iter()
                .filter(|(at, _)| *at > start && *at < now)
                .copied(),
        );
        readings.push((now, now_reading));
        let client: Vec<(Instant, f64)> = readings.iter().map(|(at, r)| (*at, r.client)).collect();
        let machine: Option<Vec<(Instant, f64)>> = readings
            .iter()
            .map(|(at, r)| r.machine.map(|busy| (*at, busy)))
            .collect();
        let mut load = summarize(&client, self.cores);
        load.machine = machine.zip(self.machine_cores).map(|(points, cores)| {
            let machine = summarize(&points, cores);
            MachineLoad {
                cores,
                busy_s: machine.cpu_s,
                utilization: machine.utilization,
                seconds: machine.seconds,
                saturated_seconds: machine.saturated_seconds,
            }
        });
        Some(load)
    }
}

impl Drop for CpuMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Whole-phase use, and each successive one-second window's, from (time, CPU seconds) points.
fn summarize(points: &[(Instant, f64)], cores: f64) -> ClientLoad {
    let (first, last) = (points[0], points[points.len() - 1]);
    let wall = last.0.saturating_duration_since(first.0).as_secs_f64();
    let cpu_s = (last.1 - first.1).max(0.0);
    let mut seconds = 0;
    let mut saturated_seconds = 0;
    let mut window_start = first;
    for &point in &points[1..] {
        let span = point
            .0
            .saturating_duration_since(window_start.0)
            .as_secs_f64();
        if span >= 1.0 {
            seconds += 1;
            if (point.1 - window_start.1) / (span * cores) >= SATURATED_SHARE {
                saturated_seconds += 1;
            }
            window_start = point;
        }
    }
    ClientLoad {
        cores,
        cpu_s,
        utilization: if wall > 0.0 {
            cpu_s / (wall * cores)
        } else {
            0.0
        },
        seconds,
        saturated_seconds,
        machine: None,
    }
}

/// The cores a run with `worker_threads` (or one per core) can use.
pub fn client_cores(worker_threads: Option<usize>) -> f64 {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    worker_threads
        .map_or(available, |t| t.min(available))
        .max(1) as f64
}

/// Raises this process's open-file limit to its hard limit, so that many connections can be open
/// at once. Returns the limit now in force.
pub fn raise_open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit only read and write the struct they are given.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
        }
        #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every Unix
        Some(limit.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_process_s_cpu_and_peak_memory_are_read_by_its_pid() {
        let pid = std::process::id();
        assert!(process_cpu_seconds(pid).unwrap() >= 0.0);
        assert!(process_peak_rss_bytes(&pid.to_string()).unwrap() > 0);
        assert_eq!(process_cpu_seconds(u32::MAX), None);
    }

    #[test]
    fn the_machines_busy_time_leaves_out_idle_and_io_wait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let line = "cpu  36643 5 3178 16580 185 7 35 73 0 0";
        assert_eq!(busy_ticks(line), Some(36643 + 5 + 3178 + 7 + 35 + 73));
        assert_eq!(busy_ticks("cpu0 1 2 3 4"), None);
        assert_eq!(busy_ticks("cpu 1 2"), None);
        if cfg!(target_os = "linux") {
            assert!(machine_cores().unwrap() >= 1.0);
            assert!(machine_busy_seconds().unwrap() > 0.0);
        }
    }

    #[test]
    fn a_process_state_is_said_in_words() {
        // The test harness's main thread (the one /proc/PID/stat speaks for) runs or waits.
        let state = process_state(std::process::id()).unwrap();
        assert!(
            state == "running (state R)" || state == "sleeping (state S)",
            "{state}"
        );
        assert_eq!(process_state(u32::MAX), None);
    }

    #[test]
    fn a_threads_cpu_is_read_past_a_name_with_spaces() {
        let stat = "4242 (llmload-sim (x)) S 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 1 0";
        assert_eq!(thread_ticks(stat), Some(175));
        assert_eq!(thread_ticks("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_simulators_threads_are_not_the_clients() {
        let before = simulator_cpu_seconds();
        let busy = std::thread::Builder::new()
            .name(format!("{}-test", crate::threads::SIM_THREAD_PREFIX))
            .spawn(|| {
                let start = Instant::now();
                let mut x = 0u64;
                while start.elapsed() < Duration::from_millis(300) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                std::hint::black_box(x);
                // Stay alive until read: an ended thread's time leaves /proc/self/task.
                std::thread::sleep(Duration::from_millis(400));
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(350));
        let during = simulator_cpu_seconds();
        busy.join().unwrap();
        assert!(during - before >= 0.05, "{before} → {during}");
    }

    #[test]
    fn saturated_seconds_are_counted_per_window() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        // Two cores: a first second using 1.98 CPU-s, a second using 0.5 CPU-s.
        let points = [
            (at(0), 10.0),
            (at(500), 11.0),
            (at(1000), 11.98),
            (at(1500), 12.2),
            (at(2000), 12.48),
        ];
        let load = summarize(&points, 2.0);
        assert_eq!(load.seconds, 2);
        assert_eq!(load.saturated_seconds, 1);
        assert!((load.cpu_s - 2.48).abs() < 1e-9);
        assert!((load.utilization - 0.62).abs() < 1e-9);
    }

    #[test]
    fn this_process_uses_some_cpu_and_memory() {
        if let (Some(cpu), Some(rss)) = (cpu_seconds(), peak_rss_bytes()) {
            assert!(cpu >= 0.0);
            assert!(rss > 1 << 20, "peak RSS {rss} bytes");
        }
        assert!(client_cores(Some(1)) == 1.0);
        assert!(client_cores(None) >= 1.0);
    }
}
