//! The simulator's GPUs, as NVIDIA's dcgm-exporter prints them on `/metrics`: a model of what
//! they draw (idle power over time, plus energy per prompt token computed and per token
//! generated), so that a run's energy per output token has an answer known in advance.
//!
//! Not a model of a GPU's speed (that is [`super::engine`]'s); temperature and clocks are not
//! modelled, and so not exported, rather than made up.

use std::fmt::Write;
use std::time::Instant;

use crate::plan::Gpu;

/// The GPUs' energy so far, and what the last scrape saw.
pub(super) struct Gpus {
    settings: Gpu,
    started: Instant,
    /// Energy of the work done so far (prompt tokens and generated ones), J, all GPUs.
    work_j: f64,
    /// When the last scrape was, and the energy then.
    last_scrape: Option<(Instant, f64)>,
}

impl Gpus {
    pub(super) fn new(settings: Gpu) -> Gpus {
        Gpus {
            settings,
            started: Instant::now(),
            work_j: 0.0,
            last_scrape: None,
        }
    }

    /// Work done: `prompt` tokens computed, `generated` tokens sampled.
    pub(super) fn work(&mut self, prompt: u64, generated: u64) {
        self.work_j +=
            prompt as f64 * self.settings.prefill_j + generated as f64 * self.settings.decode_j;
    }

    /// All GPUs' energy at `now`, J.
    fn energy_j(&self, now: Instant) -> f64 {
        let idle = self.settings.idle_w * self.settings.count as f64;
        idle * now.saturating_duration_since(self.started).as_secs_f64() + self.work_j
    }

    /// dcgm-exporter's lines for each GPU at `now`: its utilization (`busy`, 0 to 1: the
    /// share of the batch in use), memory, power (the mean since the last scrape, as DCGM
    /// averages over its sample period) and energy counter (millijoules).
    pub(super) fn render(&mut self, out: &mut String, now: Instant, busy: f64) {
        let count = self.settings.count.max(1);
        let energy = self.energy_j(now);
        let watts = match self.last_scrape {
            Some((at, before)) if now > at => {
                (energy - before) / now.duration_since(at).as_secs_f64()
            }
            Some(_) | None => self.settings.idle_w * count as f64,
        };
        self.last_scrape = Some((now, energy));
        let used = self.settings.memory_mib * 9 / 10;
        let free = self.settings.memory_mib - used;
        let per_gpu = |total: f64| total / count as f64;
        let series: [(&str, &str, &str, String); 5] = [
            (
                "DCGM_FI_DEV_GPU_UTIL",
                "GPU utilization (in %).",
                "gauge",
                format!("{}", (busy.clamp(0.0, 1.0) * 100.0).round()),
            ),
            (
                "DCGM_FI_DEV_FB_FREE",
                "Framebuffer memory free (in MiB).",
                "gauge",
                free.to_string(),
            ),
            (
                "DCGM_FI_DEV_FB_USED",
                "Framebuffer memory used (in MiB).",
                "gauge",
                used.to_string(),
            ),
            (
                "DCGM_FI_DEV_POWER_USAGE",
                "Power draw (in W).",
                "gauge",
                format!("{:.6}", per_gpu(watts)),
            ),
            (
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "Total energy consumption since boot (in mJ).",
                "counter",
                format!("{:.0}", per_gpu(energy) * 1000.0),
            ),
        ];
        for (name, help, kind, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for gpu in 0..count {
                let _ = writeln!(
                    out,
                    "{name}{{gpu=\"{gpu}\",UUID=\"GPU-llmload-sim-{gpu}\",device=\"nvidia{gpu}\",modelName=\"llmload-sim GPU\",Hostname=\"llmload-sim\"}} {value}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{gather, prom, Signal};
    use std::time::Duration;

    fn gpus() -> Gpus {
        Gpus::new(Gpu {
            count: 2,
            idle_w: 50.0,
            prefill_j: 0.001,
            decode_j: 0.25,
            memory_mib: 81920,
        })
    }

    /// What it prints reads back, through llmload's own telemetry reader, as the model says.
    #[test]
    fn its_energy_is_idle_power_over_time_plus_its_work() {
        let mut gpus = gpus();
        let start = gpus.started;
        let mut first = String::new();
        gpus.render(&mut first, start + Duration::from_secs(1), 0.0);
        gpus.work(1000, 400);
        let mut second = String::new();
        gpus.render(&mut second, start + Duration::from_secs(3), 0.5);
        let read = |text: &str| gather(&prom::parse(text), 0.0).values;
        let (a, b) = (read(&first), read(&second));
        // 2 GPUs idle at 50 W for 1 s.
        assert!((a[&Signal::GpuEnergy] - 100.0).abs() < 1e-3, "{a:?}");
        assert_eq!(a[&Signal::GpuPower], 100.0);
        // Then 2 s more of idle (200 J) and 1 J + 100 J of work: 301 J over 2 s.
        assert!((b[&Signal::GpuEnergy] - 401.0).abs() < 1e-3, "{b:?}");
        assert!((b[&Signal::GpuPower] - 150.5).abs() < 1e-6, "{b:?}");
        assert_eq!(b[&Signal::GpuUtilization], 0.5);
        assert_eq!(b[&Signal::GpuMemoryUsed], 2.0 * 73728.0);
        assert_eq!(b[&Signal::GpuMemoryFree], 2.0 * 8192.0);
    }
}
