//! The GPUs a GPU exporter describes: each one's model, memory and driver, from the labels and
//! memory gauges of NVIDIA dcgm-exporter's series (`modelName`, `DCGM_FI_DRIVER_VERSION`,
//! `Hostname`, `gpu`; `DCGM_FI_DEV_FB_USED` + `_FB_FREE` + `_FB_RESERVED`), so that a report
//! says what hardware its energy and its latencies were measured on.
//!
//! Not for: their readings over time (utilization, power, energy: signals like any other, in
//! [`super::names`]).

use serde::{Deserialize, Serialize};

use super::prom;

/// One GPU, as its exporter describes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// The host it is in (`Hostname`), where the exporter says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its index on that host (`gpu`).
    pub index: String,
    /// Its model (`modelName`: "NVIDIA H100 80GB HBM3").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Its memory, MiB: used, free and reserved frame buffer together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<f64>,
    /// The driver's version (`DCGM_FI_DRIVER_VERSION`, a label of dcgm-exporter 3.3 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}

/// The frame-buffer gauges whose sum is a GPU's memory (MiB).
const MEMORY: [&str; 3] = [
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
];

/// The GPUs one scrape describes, by host and index; none when it is no GPU exporter's.
pub fn of(samples: &[prom::Sample]) -> Vec<Gpu> {
    let mut gpus: Vec<Gpu> = Vec::new();
    for sample in samples.iter().filter(|s| s.name.starts_with("DCGM_FI_")) {
        let Some(index) = sample.label("gpu") else {
            continue;
        };
        let host = sample.label("Hostname").map(crate::error::shorten);
        let at = match gpus.iter().position(|g| g.index == index && g.host == host) {
            Some(at) => at,
            None => {
                gpus.push(Gpu {
                    host,
                    index: crate::error::shorten(index),
                    ..Gpu::default()
                });
                gpus.len() - 1
            }
        };
        let gpu = &mut gpus[at];
        if gpu.model.is_none() {
            gpu.model = sample.label("modelName").map(crate::error::shorten);
        }
        if gpu.driver.is_none() {
            gpu.driver = sample
                .label("DCGM_FI_DRIVER_VERSION")
                .map(crate::error::shorten);
        }
        // A blank field (DCGM's largest values) is no reading.
        let reading = super::Signal::GpuMemoryUsed.is_reading(super::Engine::Dcgm, sample.value);
        if MEMORY.contains(&sample.name.as_str()) && reading {
            *gpu.memory_mib.get_or_insert(0.0) += sample.value;
        }
    }
    gpus.sort_by(|a, b| (&a.host, &a.index).cmp(&(&b.host, &b.index)));
    gpus
}

/// The GPUs in a line: "2 × NVIDIA H100 80GB HBM3 (80 GiB each), driver 550.127.05", models
/// apart, and the hosts when there are several.
pub fn describe(gpus: &[Gpu]) -> String {
    let mut kinds: Vec<(Option<&str>, Option<u64>, usize)> = Vec::new();
    for gpu in gpus {
        let gib = gpu.memory_mib.map(|mib| (mib / 1024.0).round() as u64);
        let kind = (gpu.model.as_deref(), gib);
        match kinds.iter_mut().find(|k| (k.0, k.1) == kind) {
            Some(seen) => seen.2 += 1,
            None => kinds.push((kind.0, kind.1, 1)),
        }
    }
    let mut parts: Vec<String> = kinds
        .iter()
        .map(|&(model, gib, count)| {
            let mut text = format!("{count} × {}", model.unwrap_or("GPU (model not said)"));
            if let Some(gib) = gib {
                let each = if count > 1 { " each" } else { "" };
                text.push_str(&format!(" ({gib} GiB{each})"));
            }
            text
        })
        .collect();
    let mut drivers: Vec<&str> = gpus.iter().filter_map(|g| g.driver.as_deref()).collect();
    drivers.sort_unstable();
    drivers.dedup();
    if !drivers.is_empty() {
        parts.push(format!("driver {}", drivers.join(" and ")));
    }
    let mut hosts: Vec<&str> = gpus.iter().filter_map(|g| g.host.as_deref()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    if hosts.len() > 1 {
        parts.push(format!("on {} hosts", hosts.len()));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dcgm_exporters_labels_and_memory_describe_its_gpus() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/telemetry/dcgm-exporter.txt"),
        )
        .unwrap();
        let gpus = of(&prom::parse(&text));
        assert_eq!(gpus.len(), 2, "{gpus:?}");
        assert_eq!(gpus[0].index, "0");
        assert_eq!(gpus[0].host.as_deref(), Some("gpu-node-1"));
        assert_eq!(gpus[0].model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(gpus[0].driver.as_deref(), Some("550.127.05"));
        let memory = gpus[0].memory_mib.unwrap();
        // Used and free: 81,059 MiB (nvidia-smi says 81,559 with the reserved 500).
        assert!((80_000.0..82_000.0).contains(&memory), "{memory}");
        assert_eq!(
            describe(&gpus),
            "2 × NVIDIA H100 80GB HBM3 (79 GiB each), driver 550.127.05"
        );
        // A vLLM scrape describes none.
        assert!(of(&prom::parse(
            "vllm:num_requests_running{model_name=\"m\"} 3\n"
        ))
        .is_empty());
    }

    #[test]
    fn mixed_models_and_hosts_are_said_apart() {
        let gpu = |host: &str, index: &str, model: &str| Gpu {
            host: Some(host.into()),
            index: index.into(),
            model: Some(model.into()),
            memory_mib: Some(46_068.0),
            driver: None,
        };
        let gpus = [
            gpu("a", "0", "NVIDIA L40S"),
            gpu("b", "0", "NVIDIA L40S"),
            gpu("b", "1", "NVIDIA L4"),
        ];
        assert_eq!(
            describe(&gpus),
            "2 × NVIDIA L40S (45 GiB each), 1 × NVIDIA L4 (45 GiB), on 2 hosts"
        );
    }
}
