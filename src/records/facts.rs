//! What was measured: the machine the client ran on, and the model the server said it serves
//! (its size, context and weights), kept in the run header so that every report says them and a
//! comparison says when two runs differ in them.
//!
//! Not for: reading them (the executor asks the server; [`ClientMachine::here`] reads this
//! machine), nor the GPUs, which the server's telemetry reports.

use serde::{Deserialize, Serialize};

/// The machine the client ran on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientMachine {
    /// The CPU's model name, as the kernel says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Logical cores the process may use.
    pub cores: u32,
    /// Memory, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
}

impl ClientMachine {
    /// This machine, from /proc (Linux; elsewhere the cores alone).
    pub fn here() -> ClientMachine {
        let read =
            |path: &str| crate::files::read_text_bounded(std::path::Path::new(path), 1 << 20);
        let cpu = read("/proc/cpuinfo")
            .ok()
            .and_then(|info| field(&info, "model name").map(str::to_string));
        let memory_mib = read("/proc/meminfo").ok().and_then(|info| {
            let kib = field(&info, "MemTotal")?.trim_end_matches("kB").trim();
            kib.parse::<u64>().ok().map(|kib| kib / 1024)
        });
        ClientMachine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            memory_mib,
        }
    }

    /// "AMD EPYC 7B13, 2 core(s), 24 GiB".
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.cpu.iter().cloned().collect();
        parts.push(format!("{} core(s)", self.cores));
        if let Some(mib) = self.memory_mib {
            parts.push(format!("{:.0} GiB", mib as f64 / 1024.0));
        }
        parts.join(", ")
    }
}

/// The value of the first `name: value` line of a /proc file.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == name).then(|| value.trim())
    })
}

/// What the server said of the model it serves, in its `/models` listing: vLLM and SGLang give
/// the context they serve (`max_model_len`); llama.cpp its context, the one it was trained on,
/// its parameters, file size and weights' type (`meta`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedModel {
    /// Its id in the listing.
    pub id: String,
    /// Tokens of context a request may use: vLLM's and SGLang's `max_model_len`, llama.cpp's
    /// `n_ctx` (a slot's: `--ctx-size` over `--parallel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
    /// Tokens of context it was trained on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained_context: Option<u64>,
    /// Its parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<u64>,
    /// Its weights' size, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Its weights' type or quantization (`F16`, `Q4_K_M`), as the server names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    /// Requests it serves at once (llama.cpp's `total_slots`: `--parallel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u64>,
    /// What it takes besides text (`vision`, `audio`), as llama.cpp's /props says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modalities: Vec<String>,
    /// Its weights' version, as SGLang's /get_model_info says (`weight_version`: it changes
    /// when weights are updated in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_version: Option<String>,
}

impl ServedModel {
    /// The facts of `entry`, one model of a `/models` answer's `data`; `None` when it says
    /// nothing beyond its id. Server text is shortened to a line; reports escape it.
    pub fn of_listing(entry: &serde_json::Value) -> Option<ServedModel> {
        let id = entry.get("id")?.as_str()?;
        let meta = entry.get("meta");
        let number = |value: Option<&serde_json::Value>| value.and_then(serde_json::Value::as_u64);
        let in_meta = |name: &str| number(meta.and_then(|m| m.get(name)));
        let model = ServedModel {
            id: crate::error::shorten(id),
            context: number(entry.get("max_model_len")).or_else(|| in_meta("n_ctx")),
            trained_context: in_meta("n_ctx_train"),
            parameters: in_meta("n_params"),
            size_bytes: in_meta("size"),
            weights: meta
                .and_then(|m| m.get("ftype"))
                .and_then(serde_json::Value::as_str)
                .map(crate::error::shorten),
            ..ServedModel::default()
        };
        model.said_something().then_some(model)
    }

    /// Whether it says anything beyond its id.
    fn said_something(&self) -> bool {
        self.context.is_some()
            || self.parameters.is_some()
            || self.size_bytes.is_some()
            || self.weights.is_some()
            || self.slots.is_some()
            || !self.modalities.is_empty()
            || self.weights_version.is_some()
    }

    /// A model known by its id alone (a server's info said more than its listing).
    fn named(id: &str) -> ServedModel {
        ServedModel {
            id: crate::error::shorten(id),
            ..ServedModel::default()
        }
    }

    /// The model `id` with what SGLang's `/get_model_info` adds to its listing: its weights'
    /// version; `None` when neither says anything beyond the id.
    pub fn with_sglang_info(
        listed: Option<ServedModel>,
        id: &str,
        info: &serde_json::Value,
    ) -> Option<ServedModel> {
        let mut model = listed.unwrap_or_else(|| ServedModel::named(id));
        model.weights_version = info
            .get("weight_version")
            .and_then(serde_json::Value::as_str)
            .map(crate::error::shorten);
        model.said_something().then_some(model)
    }

    /// The model `id` with what llama.cpp's `/props` adds to its listing: its slots (requests
    /// served at once), its weights' type where the listing did not say, and the modalities it
    /// takes; `None` when neither says anything beyond the id.
    pub fn with_props(
        listed: Option<ServedModel>,
        id: &str,
        props: &serde_json::Value,
    ) -> Option<ServedModel> {
        let mut model = listed.unwrap_or_else(|| ServedModel::named(id));
        model.slots = props.get("total_slots").and_then(serde_json::Value::as_u64);
        if model.weights.is_none() {
            model.weights = props
                .get("model_ftype")
                .and_then(serde_json::Value::as_str)
                .map(crate::error::shorten);
        }
        if model.context.is_none() {
            model.context = props
                .pointer("/default_generation_settings/n_ctx")
                .and_then(serde_json::Value::as_u64);
        }
        if let Some(modalities) = props.get("modalities").and_then(|m| m.as_object()) {
            model.modalities = modalities
                .iter()
                .filter(|(_, on)| on.as_bool() == Some(true))
                .map(|(name, _)| crate::error::shorten(name))
                .collect();
        }
        model.said_something().then_some(model)
    }

    /// "8.3M parameters, F16, 16.7MB; context 2048 (trained on 4096)".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.parameters {
            parts.push(format!("{} parameters", si(n as f64)));
        }
        parts.extend(self.weights.clone());
        if let Some(bytes) = self.size_bytes {
            parts.push(format!("{}B", si(bytes as f64)));
        }
        let mut groups = vec![parts.join(", ")];
        if let Some(context) = self.context {
            let mut said = format!("context {context}");
            if let Some(trained) = self.trained_context.filter(|&t| t != context) {
                said.push_str(&format!(" (trained on {trained})"));
            }
            groups.push(said);
        }
        if let Some(slots) = self.slots {
            groups.push(format!("{slots} slot{}", if slots == 1 { "" } else { "s" }));
        }
        if !self.modalities.is_empty() {
            groups.push(format!("takes {}", self.modalities.join(" and ")));
        }
        if let Some(version) = &self.weights_version {
            groups.push(format!("weights version {version}"));
        }
        groups.retain(|g| !g.is_empty());
        groups.join("; ")
    }
}

/// 8282432 → "8.3M"; 16712960 → "16.7M".
fn si(value: f64) -> String {
    let (scaled, unit) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(size, _)| value >= *size)
        .map_or((value, ""), |(size, unit)| (value / size, unit));
    format!("{scaled:.1}{unit}")
}

/// How the runs' facts differ, each a sentence for a comparison's notes.
pub fn differences(baseline: &super::RunHeader, current: &super::RunHeader) -> Vec<String> {
    let mut notes = Vec::new();
    let machine = |h: &super::RunHeader| h.client_machine.as_ref().map(ClientMachine::describe);
    if let (Some(b), Some(c)) = (machine(baseline), machine(current)) {
        if b != c {
            notes.push(format!(
                "the clients ran on different machines: the baseline's {b}, this run's {c}"
            ));
        }
    }
    for model in &current.served_models {
        let before = baseline.served_models.iter().find(|m| m.id == model.id);
        if let Some(before) = before.filter(|b| *b != model) {
            notes.push(format!(
                "the server said other things of model {}: the baseline's {}, this run's {}",
                model.id,
                before.describe(),
                model.describe()
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_of_llama_cpp_and_vllm_are_read() {
        // llama.cpp b6xxx's /v1/models entry, as the suite's real engine answers it.
        let llama: serde_json::Value = serde_json::from_str(
            r#"{"id":"tiny-llama.gguf","aliases":["tiny-llama.gguf"],"tags":[],"object":"model",
            "created":1796570348,"owned_by":"llamacpp","meta":{"vocab_type":2,"n_vocab":128256,
            "n_ctx":4096,"n_ctx_train":8192,"n_embd":64,"n_params":8282432,"size":16712960,
            "ftype":"F16"}}"#,
        )
        .unwrap();
        let model = ServedModel::of_listing(&llama).unwrap();
        assert_eq!(model.context, Some(4096));
        assert_eq!(model.trained_context, Some(8192));
        assert_eq!(model.parameters, Some(8_282_432));
        assert_eq!(model.weights.as_deref(), Some("F16"));
        assert_eq!(
            model.describe(),
            "8.3M parameters, F16, 16.7MB; context 4096 (trained on 8192)"
        );
        // vLLM's: the served context alone.
        let vllm: serde_json::Value = serde_json::from_str(
            r#"{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","created":1,
            "owned_by":"vllm","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null,
            "max_model_len":8192,"permission":[]}"#,
        )
        .unwrap();
        let model = ServedModel::of_listing(&vllm).unwrap();
        assert_eq!((model.context, model.parameters), (Some(8192), None));
        assert_eq!(model.describe(), "context 8192");
        // llama.cpp's /props adds its slots and what it takes besides text (as the suite's
        // real engine answers it, its chat template and sampling left out).
        let props: serde_json::Value = serde_json::from_str(
            r#"{"default_generation_settings":{"n_ctx":2048},"total_slots":2,
            "model_ftype":"F16","modalities":{"vision":true,"video":false,"audio":false},
            "build_info":"b0-unknown"}"#,
        )
        .unwrap();
        let listed = ServedModel::of_listing(&llama);
        let model = ServedModel::with_props(listed, "tiny-llama.gguf", &props).unwrap();
        assert_eq!((model.slots, model.context), (Some(2), Some(4096)));
        assert_eq!(
            model.describe(),
            "8.3M parameters, F16, 16.7MB; context 4096 (trained on 8192); 2 slots; takes vision"
        );
        let alone = ServedModel::with_props(None, "m", &props).unwrap();
        assert_eq!(alone.describe(), "F16; context 2048; 2 slots; takes vision");
        assert_eq!(
            ServedModel::with_props(None, "m", &serde_json::json!({})),
            None
        );
        // SGLang's /get_model_info, shaped as its documentation shows it: its weights' version.
        let info: serde_json::Value = serde_json::from_str(
            r#"{"model_path":"qwen/qwen2.5-0.5b-instruct","tokenizer_path":"qwen/qwen2.5-0.5b-instruct",
            "is_generation":true,"preferred_sampling_params":null,"weight_version":"default"}"#,
        )
        .unwrap();
        let listed = ServedModel::of_listing(&vllm);
        let model = ServedModel::with_sglang_info(listed, "m", &info).unwrap();
        assert_eq!(model.describe(), "context 8192; weights version default");
        // OpenAI's: nothing beyond the id.
        let bare = serde_json::json!({"id": "gpt-4o", "object": "model", "owned_by": "system"});
        assert_eq!(ServedModel::of_listing(&bare), None);
    }

    #[test]
    fn proc_fields_are_read_by_name() {
        let info = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nMemTotal:       24573476 kB\n";
        assert_eq!(field(info, "model name"), Some("AMD EPYC 7B13"));
        assert_eq!(field(info, "MemTotal"), Some("24573476 kB"));
        assert_eq!(field(info, "flags"), None);
        let here = ClientMachine::here();
        assert!(here.cores >= 1);
    }

    #[test]
    fn a_comparison_says_what_changed_in_the_machine_or_the_model() {
        let machine = |cores| ClientMachine {
            cpu: Some("AMD EPYC 7B13".into()),
            cores,
            memory_mib: Some(24 * 1024),
        };
        let model = |weights: &str| ServedModel {
            id: "m".into(),
            context: Some(8192),
            weights: Some(weights.into()),
            ..ServedModel::default()
        };
        let header = |cores, weights| super::super::RunHeader {
            client_machine: Some(machine(cores)),
            served_models: vec![model(weights)],
            ..Default::default()
        };
        assert!(differences(&header(2, "F16"), &header(2, "F16")).is_empty());
        let notes = differences(&header(2, "F16"), &header(8, "Q4_K_M"));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].contains("AMD EPYC 7B13, 2 core(s), 24 GiB"),
            "{notes:?}"
        );
        assert!(notes[0].contains("8 core(s)"), "{notes:?}");
        assert!(
            notes[1].contains("F16; context 8192") && notes[1].contains("Q4_K_M"),
            "{notes:?}"
        );
        // A run of an earlier version said nothing: nothing to set against.
        let old = super::super::RunHeader::default();
        assert!(differences(&old, &header(8, "Q4_K_M")).is_empty());
    }
}
