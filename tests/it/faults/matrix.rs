//! The matrix run in-process: one test per fault (`faults::matrix::truncated_stream`),
//! every kind at once, and the whole table printed as RELIABILITY.md records it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use inferprobe::outcome::FailureReason;

use super::table::{Fault, faults};
use super::wire::{WIRES, Wire};
use super::{MARGIN, TIMEOUT};
use crate::support::{heavy, run_probe};

/// One cell of the matrix.
struct Cell {
    fault: &'static str,
    kind: &'static str,
    expected: Option<FailureReason>,
    got: Option<FailureReason>,
    message: String,
    elapsed: Duration,
    problems: Vec<String>,
}

fn label(r: Option<FailureReason>) -> &'static str {
    r.map(FailureReason::as_str).unwrap_or("success")
}

async fn run_cell(fault: &Fault, wire: Wire) -> tokio::task::JoinHandle<Cell> {
    let target = (fault.serve)(&wire);
    let yaml = wire.yaml(&target.base, &target.extra);
    let (name, expected, message_has) = (fault.name, (fault.expect)(&wire), (fault.message_has)(&wire));
    tokio::spawn(async move {
        let started = Instant::now();
        // A panic inside the run fails the task: the join below reports it.
        let o = run_probe(&yaml).await;
        let elapsed = started.elapsed();
        let obs = &o.observation;
        let got = obs.failure().map(|f| f.reason);
        let message = obs.failure().map(|f| f.message.clone()).unwrap_or_default();
        let mut problems = Vec::new();
        if got != expected {
            problems.push(format!(
                "expected {}, got {}: {message}",
                label(expected),
                label(got)
            ));
        }
        if let Some(needle) = message_has
            && !message.contains(needle)
        {
            problems.push(format!("message lacks {needle:?}: {message}"));
        }
        if elapsed > TIMEOUT + MARGIN {
            problems.push(format!(
                "took {elapsed:?}, past the {TIMEOUT:?} timeout + {MARGIN:?}"
            ));
        }
        if let Some(after) = &target.after
            && let Err(e) = after()
        {
            problems.push(e);
        }
        Cell {
            fault: name,
            kind: wire.kind,
            expected,
            got,
            message,
            elapsed,
            problems,
        }
    })
}

/// Every kind against one fault, at once; a cell that failed a check panics or ran wrong.
async fn run_fault(fault: &Fault) -> Vec<Cell> {
    let mut runs = Vec::new();
    for wire in WIRES {
        runs.push(run_cell(fault, wire).await);
    }
    let mut cells = Vec::new();
    for (run, wire) in runs.into_iter().zip(WIRES) {
        match run.await {
            Ok(cell) => cells.push(cell),
            Err(e) => cells.push(Cell {
                fault: fault.name,
                kind: wire.kind,
                expected: (fault.expect)(&wire),
                got: None,
                message: String::new(),
                elapsed: Duration::ZERO,
                problems: vec![format!("the run panicked: {e}")],
            }),
        }
    }
    cells
}

/// Every problem of these cells, each named `kind × fault`.
fn problems(cells: &[Cell]) -> Vec<String> {
    cells
        .iter()
        .flat_map(|c| {
            c.problems
                .iter()
                .map(move |p| format!("{} × {}: {p}", c.kind, c.fault))
        })
        .collect()
}

fn assert_no_problems(cells: &[Cell]) {
    let failed = problems(cells);
    assert!(
        failed.is_empty(),
        "{} problems:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A fault's test name: its name in the table, `healthy (control)` as `healthy_control`.
fn test_name(fault: &str) -> String {
    fault.replace(" (", "_").replace(')', "")
}

/// The fault the test `name` runs, every kind against it at once.
async fn check(name: &str) {
    // Heavy: nine runs at once load the two cores, and elapsed times are asserted.
    let _alone = heavy();
    let faults = faults();
    let fault = faults
        .iter()
        .find(|f| test_name(f.name) == name)
        .unwrap_or_else(|| panic!("no fault {name} in the table"));
    assert_no_problems(&run_fault(fault).await);
}

/// One test per fault of the table, in its order.
macro_rules! matrix {
    ($($fault:ident),* $(,)?) => {
        /// The faults with a test, in the order of their tests.
        const TESTED: &[&str] = &[$(stringify!($fault)),*];

        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $fault() {
                check(stringify!($fault)).await;
            }
        )*
    };
}

matrix!(
    healthy_control,
    connection_refused,
    dns_failure,
    tls_expired_certificate,
    tls_self_signed_certificate,
    tls_wrong_host_certificate,
    stall_before_headers,
    stall_after_headers,
    stall_mid_stream,
    slow_drip_1_byte_per_s,
    truncated_stream,
    aborted_after_done,
    garbage_bytes,
    garbage_body,
    invalid_utf8,
    json_not_the_protocol_shape,
    in_band_error,
    http_500,
    http_502_html,
    http_503_retry_after,
    http_429,
    redirect_loop,
    redirect_to_another_host,
    endless_stream,
    line_100mb,
    oversized_body,
    wrong_content_type,
    http2_stream_reset,
    close_after_accept,
);

#[test]
fn every_fault_of_the_table_has_its_test() {
    let table: Vec<String> = faults().iter().map(|f| test_name(f.name)).collect();
    assert_eq!(table, TESTED);
}

/// The whole matrix, one fault after another, printed as RELIABILITY.md records it (the
/// same checks as the tests above, which run it in `cargo test`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "prints the matrix of RELIABILITY.md; the tests above check each fault: run with --ignored --nocapture"]
async fn every_kind_against_every_fault() {
    let _alone = heavy();
    let faults = faults();
    let suite = Instant::now();
    let mut cells = Vec::new();
    // One fault at a time, its kinds at once.
    for fault in &faults {
        cells.extend(run_fault(fault).await);
    }
    let wall = suite.elapsed();
    println!("{}", render(&faults, &cells, wall));
    assert_no_problems(&cells);
}

/// The matrix as Markdown: one row per fault, one column per kind, each cell the reason
/// and elapsed time (a cell that failed its checks is marked ✗).
fn render(faults: &[Fault], cells: &[Cell], wall: Duration) -> String {
    let mut out = String::new();
    let kinds: Vec<&str> = WIRES.iter().map(|w| w.kind).collect();
    writeln!(out, "| fault | {} |", kinds.join(" | ")).unwrap();
    writeln!(out, "|---|{}", "---|".repeat(kinds.len())).unwrap();
    for fault in faults {
        let row: Vec<String> = kinds
            .iter()
            .map(|k| {
                let c = cells
                    .iter()
                    .find(|c| c.fault == fault.name && c.kind == *k)
                    .unwrap();
                let mark = match (c.problems.is_empty(), c.got == c.expected) {
                    (true, _) => String::new(),
                    (false, true) => " ✗".to_owned(),
                    (false, false) => format!(" ✗ (want {})", label(c.expected)),
                };
                format!("{} {:.2}s{mark}", label(c.got), c.elapsed.as_secs_f64())
            })
            .collect();
        writeln!(out, "| {} | {} |", fault.name, row.join(" | ")).unwrap();
    }
    writeln!(out).unwrap();
    for fault in faults.iter().filter(|f| !f.note.is_empty()) {
        writeln!(out, "- {}: {}", fault.name, fault.note).unwrap();
    }
    let passed = cells.iter().filter(|c| c.problems.is_empty()).count();
    let slowest = cells.iter().map(|c| c.elapsed).max().unwrap_or_default();
    writeln!(
        out,
        "\nfaults: {} (plus the healthy control); runs: {} ({} faulty, {} control); passed: {passed}; slowest run: {:.2}s; matrix wall time: {:.1}s",
        faults.len() - 1,
        cells.len(),
        cells.len() - WIRES.len(),
        WIRES.len(),
        slowest.as_secs_f64(),
        wall.as_secs_f64()
    )
    .unwrap();
    if let Some(c) = cells.iter().find(|c| c.fault == "http2_stream_reset") {
        writeln!(
            out,
            "example message (http2_stream_reset x {}): {}",
            c.kind, c.message
        )
        .unwrap();
    }
    out
}
