//! inferprobe: a black-box prober for AI inference endpoints.
//!
//! The data flow, one module per step:
//!
//! ```text
//! probes.yaml ─► config ─► schedule ─► probe/<kind> ─► Outcome ─┬─► metrics ─► server (/metrics)
//!                                                               ├─► store   ─► server (/, /api/v1/...), report
//!                                                               └─► alert ─► store (outbox) ─► notify
//! ```
//!
//! Only [`agent`] wires siblings together: [`Agent`] owns the outcome channel, the
//! scheduler (one timer for all probes), the fan-out loop, paging and the HTTP server, applies
//! reloads, and drains runs in flight on shutdown.
#![forbid(unsafe_code)]

pub mod agent;
pub mod alert;
pub mod calendar;
pub mod config;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod human;
pub mod metrics;
pub mod net;
pub mod notify;
pub mod otlp;
pub mod outcome;
pub mod output;
pub mod payload;
pub mod probe;
pub mod push;
pub mod redact;
pub mod report;
pub mod schedule;
pub mod server;
pub mod simulate;
pub mod stats;
pub mod store;
pub mod time_zone;
pub mod unix_time;

pub use agent::{Agent, AgentError, AgentSettings, ReloadSummary};
