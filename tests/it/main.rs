//! The integration tests: one crate, one executable (`cargo test --test it`), modules
//! named after what they test (`cargo test --test it faults::` runs one of them). The
//! library and `tests/it/support` are compiled and linked once for all of them.
//!
//! All tests share one process, so nothing here may change process-wide state another
//! test reads: no `std::env::set_var` (a child's environment is set on its `Command`),
//! no current directory, no global tracing subscriber. Tests that load both cores (real
//! agents with hundreds of probes, the fault matrix, connection floods) hold
//! [`support::heavy`] for their whole run and so run one at a time, as the separate
//! binaries they once were ran one after another; tests that bound wall-clock time hold
//! [`support::timed`], which keeps heavy ones out while they run.
//!
//! None needs a process of its own today. One that did (it must own the process: install
//! a global, set environment variables, catch signals sent to itself) would be a second
//! `[[test]]` file beside `it/`, saying why at its top.
#![forbid(unsafe_code)]

mod support;

mod alert_scenarios;
mod alerting;
mod answers;
mod answers_real;
mod architecture;
mod browser_smoke;
mod budget;
mod chat_robots;
mod config;
mod daemon;
mod deploy_kit;
mod deploy_prometheus;
mod docs;
mod email;
mod faults;
mod grpc;
mod history;
mod hostile;
mod hostile_input;
mod hostile_listener;
mod kinds;
mod model_swap;
mod native_histograms;
mod never_freeze;
mod new_user;
mod probes;
mod prometheus;
mod regions;
mod reload_under_load;
mod report;
mod report_cold;
mod report_prometheus;
mod requests;
mod routes;
mod scheduled;
mod schema;
mod secrets;
mod series_budget;
mod shutdown;
mod status_page;
mod tls;
mod traces;
mod traffic;
mod traffic_real;
mod vision;
mod web_config;
