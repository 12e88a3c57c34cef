//! The fault matrix: every probe kind against every endpoint fault we know of, each with
//! the reason a user should see, the run ending by its timeout (2 s, first token 1 s) and
//! no panic. Faults are served byte-exact, built from each kind's own wire format where
//! the fault is protocol-level (`wire`), by the servers of `servers`, as the table of
//! `table` says. `matrix` has a test per fault, each running every kind at once; a failing
//! cell names itself (`tgi × truncated_stream: ...`). The faults that could grow memory (an
//! endless stream, a 100 MB line, an oversized body) also run through the real binary
//! while its peak RSS is watched (`memory`).
//! `cargo test --test it faults::matrix::every_kind_against_every_fault -- --ignored --nocapture`
//! prints the whole matrix that RELIABILITY.md records.

use std::time::Duration;

mod matrix;
mod memory;
mod servers;
mod table;
mod wire;

/// Every run's limits, and how far past the total timeout a run may end.
const LIMITS: &str = "timeout: 2s\nfirst_token_timeout: 1s";
const TIMEOUT: Duration = Duration::from_secs(2);
const MARGIN: Duration = Duration::from_millis(600);

/// How long a stalled server keeps its socket open: far past any run's end.
const STALL: Duration = Duration::from_secs(10);

/// The default `max_response_bytes` (8 MiB): the bodies below are built to exceed it.
const MB: u64 = 1024 * 1024;

/// The faults that run in-process and would be only as "bounded" as the test process:
/// these also run through the binary with its peak RSS watched.
const MEMORY_FAULTS: [&str; 3] = ["endless_stream", "line_100mb", "oversized_body"];

/// A generous bound on the agent's peak RSS while all eight kinds read one of the memory
/// faults at once. The agent's own caps allow at most: one 1 MiB event buffer per
/// streaming kind (6), the 8 MiB body cap for kserve_v2 (which parses the whole body), 64
/// KiB for http, plus the runtime and TLS roots (~10-20 MB): ~35 MB. A reader that kept
/// the 100 MB line, or the 20 MB body of each of eight kinds, would blow past it.
const RSS_BOUND_KB: u64 = 100 * 1024;
