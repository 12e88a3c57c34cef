//! Shutdown when thousands of probes fail at once: every alert fires, every run changes
//! alert state, and SIGTERM must still stop within the drain deadline, recording every
//! finished run and saying truthfully what, if anything, it abandoned.
//!
//! Before the fan-out batched its alert-state commits, each failed run republished the
//! whole alert board (a copy and sort of every firing alert), so with thousands of firing
//! alerts the fan-out fell ever further behind the runs, and SIGTERM waited out the whole
//! deadline claiming runs were still in flight when they had long finished. The same
//! test caught a start-up race: a probe whose first tick fell due while the agent was
//! still starting finished a run the fan-out did not yet know, and that run was lost.

use std::time::{Duration, Instant, SystemTime};

use crate::support::{Daemon, closed_port, heavy, metric_sum, temp_dir, wait_until};
use inferprobe::store::{HistoryReader, RunQuery};

const PROBES: usize = 2000;

#[test]
fn sigterm_with_thousands_of_failing_probes_stops_in_time_and_records_every_run() {
    // Heavy: it loads the machine and bounds what it sees in time; see support::heavy.
    let _alone = heavy();
    let port = closed_port();
    let mut yaml = String::from(
        "agent: {location: here}\n\
         defaults: {interval: 4s, timeout: 3s, alert: {failure_threshold: 1}}\n\
         probes:\n",
    );
    for i in 0..PROBES {
        yaml.push_str(&format!(
            "  - {{name: p{i}, kind: http, url: \"http://127.0.0.1:{port}/\"}}\n"
        ));
    }
    let dir = temp_dir("shutdown");
    let config = dir.join("probes.yaml");
    std::fs::write(&config, yaml).unwrap();
    let data = dir.join("data");
    let data_arg = data.to_str().unwrap();
    let mut agent = Daemon::start(&config, &["--drain-timeout", "10s", "--data-dir", data_arg]);

    // Every probe has failed at least twice, so every alert fires and every run after
    // that still changes its alert's state (the count of bad runs).
    wait_until("every probe failed twice", Duration::from_secs(60), || {
        metric_sum(&agent.metrics(), "inferprobe_runs_total", &["result=\"failure\""]) >= (2 * PROBES) as f64
    });
    std::thread::sleep(Duration::from_secs(3));
    let dropped = metric_sum(&agent.metrics(), "inferprobe_history_runs_dropped_total", &[]);
    assert_eq!(dropped, 0.0, "the history dropped runs before the stop");

    let stop = Instant::now();
    agent.signal("TERM");
    let status = loop {
        if let Some(status) = agent.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            stop.elapsed() < Duration::from_secs(30),
            "still running 30 s after SIGTERM with a 10 s drain deadline"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = stop.elapsed();
    assert!(status.success(), "{status}");
    // Drain the log reader: the process has exited, so the pipe ends.
    std::thread::sleep(Duration::from_millis(200));
    let logs = agent.all_logs.lock().unwrap().clone();
    let shutdown: Vec<&String> = logs
        .iter()
        .skip_while(|l| !l.contains("Shutting down"))
        .filter(|l| !l.contains("Probe run failed."))
        .collect();
    assert!(
        shutdown.iter().any(|l| l.contains("All runs finished; bye.")),
        "SIGTERM took {took:?}; the drain did not finish: {shutdown:#?}"
    );
    assert!(
        !shutdown
            .iter()
            .any(|l| l.contains("abandoned") || l.contains("still being recorded")),
        "{shutdown:#?}"
    );
    // Every run that logged its end was written to the history before the exit.
    let finished = logs.iter().filter(|l| l.contains("Probe run failed.")).count();
    let db = stored_runs(&data);
    assert_eq!(db, finished, "runs in the history vs. runs logged as finished");
    eprintln!("SIGTERM to exit: {took:?}; {finished} runs, all in the history");
}

/// Runs in the history, read back with the store's own reader.
fn stored_runs(data: &std::path::Path) -> usize {
    let reader = HistoryReader::open(&data.join("inferprobe.db")).unwrap();
    let q = RunQuery {
        probe: None,
        location: None,
        since: SystemTime::UNIX_EPOCH,
        until: SystemTime::now() + Duration::from_secs(60),
    };
    let mut n = 0;
    reader.for_each_series(&q, |runs| n += runs.len()).unwrap();
    n
}
