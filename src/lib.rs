//! llmload: load-test LLM serving endpoints from KDL benchmark plans.
//!
//! The crate is a one-way pipeline, one module per stage:
//! [`plan`] (KDL → typed plan) → [`planner`] (plan → schedule) → [`executor`] (schedule →
//! per-request records) → [`metrics`] (records → aggregates) → [`verdict`] (aggregates +
//! assertions → pass/fail) → [`report`] (templates). [`tokens`] builds prompts and counts
//! tokens for the stages that need it; [`sim`] is the embedded OpenAI-compatible simulator;
//! [`fidelity`] measures a client's timing error against the simulator's write times.
//! See docs/ARCHITECTURE.md for the codemap.

#![warn(missing_docs)]

pub mod api;
pub mod cli;
pub mod clock;
pub mod compare;
mod diagnostic;
pub mod error;
pub mod escape;
pub mod executor;
pub mod exporter;
pub mod files;
pub mod history;
pub mod metrics;
pub mod plan;
pub mod planner;
pub mod records;
pub mod report;
pub mod reservoir;
pub mod secrets;
pub mod seed;
pub mod selfcheck;
pub mod server;
pub mod session;
pub mod sim;
pub mod telemetry;
pub mod threads;
pub(crate) mod timer;
pub mod tls;
pub mod tokens;
pub mod verdict;
pub(crate) mod words;
