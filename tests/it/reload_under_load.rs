//! Reloads and a stop under load, through the real binary: SIGHUP with a valid and a
//! broken file every second while 48 probes run five times a second and some page. No
//! scheduled run goes missing, no page is sent twice, a broken file never replaces the
//! running config, and SIGTERM drains the runs in flight within its deadline, every one
//! of them recorded. (`scripts/soak.py` does the same for an hour; RELIABILITY.md.)

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

const HEALTHY: usize = 40;
const FAILING: usize = 4;
const SLOW: usize = 4;

fn config(
    dir: &Path,
    fast: std::net::SocketAddr,
    slow: std::net::SocketAddr,
    hook: std::net::SocketAddr,
    variant: u8,
) -> String {
    // Dozens of probes of two fake servers, at once (`overlap`): the load, not the
    // turns, is what this test is about.
    let mut text = format!(
        "agent:\n  location: reload-test\nreceivers:\n  - name: hook\n    kind: webhook\n    url: http://{hook}/hook\n    max_backoff: 1s\n\
         defaults:\n  interval: 200ms\n  timeout: 180ms\n  overlap: true\n  alert: {{failure_threshold: 3, success_threshold: 2}}\nprobes:\n"
    );
    for i in 0..HEALTHY {
        text += &format!("  - name: ok{i:02}\n    kind: http\n    url: http://{fast}/ok\n");
    }
    for i in 0..FAILING {
        text += &format!("  - name: bad{i}\n    kind: http\n    url: http://{fast}/fail\n");
    }
    // Runs that take 1.5 s, so the stop finds them in flight.
    for i in 0..SLOW {
        text += &format!(
            "  - name: slow{i}\n    kind: http\n    url: http://{slow}/slow\n    interval: 3s\n    timeout: 2500ms\n"
        );
    }
    if variant == 2 {
        text += &format!("  - name: canary\n    kind: http\n    url: http://{fast}/ok\n");
    }
    let _ = dir;
    text
}

#[test]
fn sighup_valid_and_broken_under_load_loses_no_run_and_sends_no_page_twice_and_sigterm_drains() {
    // Heavy: it loads the machine and bounds what it sees in time; see support::heavy.
    let _alone = heavy();
    let fast = answering_server(|r| {
        if r.path == "/fail" {
            reply(503, "down")
        } else {
            reply(200, "ok")
        }
    });
    let slow = answering_server(|_| {
        std::thread::sleep(Duration::from_millis(1500));
        reply(200, "slow ok")
    });
    let hook = FakeReceiver::start(200);
    let dir = temp_dir("reload-load");
    let data = dir.join("data");
    let path = dir.join("probes.yaml");
    let valid = [
        config(&dir, fast, slow, hook.addr, 1),
        config(&dir, fast, slow, hook.addr, 2),
    ];
    let broken = valid[0].replace("  timeout: 180ms", "  timeout: whenever");
    std::fs::write(&path, &valid[0]).unwrap();
    let mut d = Daemon::start(
        &path,
        &["--data-dir", data.to_str().unwrap(), "--drain-timeout", "5s"],
    );
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let (mut applied, mut kept) = (0, 0);
    for n in 1..=12 {
        let is_broken = n % 2 == 0;
        std::fs::write(
            &path,
            if is_broken {
                &broken
            } else {
                &valid[(n / 2 + 1) % 2]
            },
        )
        .unwrap();
        d.signal("HUP");
        std::thread::sleep(Duration::from_millis(1000));
        let m = d.metrics();
        let ok = metric_sum(&m, "inferprobe_config_last_reload_successful", &[]);
        let probes = metric_sum(&m, "inferprobe_probes", &[]);
        if is_broken {
            assert_eq!(ok, 0.0, "reload {n}: a broken file is reported");
            assert!(
                probes >= (HEALTHY + FAILING + SLOW) as f64,
                "reload {n}: the running probes stay"
            );
            kept += 1;
        } else {
            assert_eq!(ok, 1.0, "reload {n}: a valid file is applied");
            applied += 1;
        }
    }
    let m = d.metrics();
    let elapsed = started.elapsed().as_secs_f64();
    // Every healthy probe ran on its 200 ms grid through twelve reloads: no tick skipped
    // and no gap (a run's count within two of the ticks that passed since start).
    let skipped = metric_sum(&m, "inferprobe_skipped_runs_total", &["probe=\"ok"]);
    assert_eq!(skipped, 0.0, "no scheduled run skipped");
    let mut fewest = f64::MAX;
    for i in 0..HEALTHY {
        let runs = metric_sum(&m, "inferprobe_runs_total", &[&format!("probe=\"ok{i:02}\"")]);
        fewest = fewest.min(runs);
    }
    let ticks = elapsed / 0.2;
    assert!(
        fewest >= ticks - 3.0,
        "a healthy probe ran {fewest} times in {ticks:.0} ticks"
    );

    // Stop with the slow runs in flight: they finish (1.5 s < the 5 s deadline) and are
    // recorded; the agent exits 0 within the deadline.
    d.wait_for_log("\"probe\":\"slow", Duration::from_secs(5));
    let term = Instant::now();
    d.signal("TERM");
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            term.elapsed() < Duration::from_secs(8),
            "the agent did not exit in time"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let drain = term.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(drain < Duration::from_secs(6), "drained in {drain:?}");
    std::thread::sleep(Duration::from_millis(300));
    let logs = d.all_logs.lock().unwrap().join("\n");
    assert!(logs.contains("Probe run finished.") && logs.contains("\"probe\":\"slow"));

    // Pages: each failing probe fired once; nothing was sent twice.
    wait_until("the firing pages arrived", Duration::from_secs(5), || {
        hook.accepted_count() >= FAILING
    });
    let pages = hook.accepted();
    let ids: Vec<&str> = pages.iter().filter_map(|p| p["id"].as_str()).collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "duplicate pages: {pages:#?}");
    let firing: Vec<&str> = pages
        .iter()
        .filter(|p| p["event"] == "firing")
        .filter_map(|p| p["probe"].as_str().or_else(|| p["alert"]["probe"].as_str()))
        .collect();
    assert_eq!(
        firing.len(),
        FAILING,
        "one firing page per failing probe: {pages:#?}"
    );
    eprintln!(
        "reload under load: {applied} valid and {kept} broken reloads in {elapsed:.1} s, fewest runs of a healthy probe {fewest} of {ticks:.0} ticks, 0 skipped, {} pages, 0 duplicates, drained in {:.2} s",
        pages.len(),
        drain.as_secs_f64()
    );
}
