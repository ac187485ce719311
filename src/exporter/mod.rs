//! Live outputs of a run for the tools people already watch: llmload's own metrics as
//! Prometheus scrapes them (`run --metrics-listen ADDR`), or pushed to a remote-write receiver
//! (`run --remote-write URL`); each request as an OpenTelemetry span (`run --otlp URL`).
//!
//! An exporter is an observer of the run and nothing more: it sees the events every observer
//! sees, keeps its own counts, and is served from a thread of its own, so a slow or absent
//! scraper never reaches the requests' tasks. It is not the report (the records are the run's
//! numbers) and it reads nothing back.

mod background;
mod otlp;
mod protobuf;
mod registry;
mod remote_write;
mod serve;

pub use otlp::SpanExporter;
pub use registry::Registry;
pub use remote_write::RemoteWriter;
pub use serve::MetricsServer;
