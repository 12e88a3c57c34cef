//! Schedule start deviation: 1,000 probes on a 30 s interval, run for 70 s so every probe
//! runs at least twice, against a fast simulated endpoint.
//!
//! The probes run on one `schedule::Scheduler`, exactly as in the daemon, in a
//! multi-threaded tokio runtime like the daemon's, at the phases the daemon gives them
//! (`schedule::phase::phases`: 1,000 probes of one endpoint, 30 ms apart; `overlap` on,
//! so none waits its turn). `Outcome.schedule_lag` is how late a run started after its
//! grid tick. The bench also computes, from each probe's phase
//! (`schedule::phase::first_tick_delay`), which ticks fell inside the window and checks
//! that each one produced a run: missed runs must be zero.
//!
//! The simulator runs as a separate process (`inferprobe simulate`), as an endpoint
//! would, so its work is not on this process's runtime.
//!
//! Run: `cargo bench --bench schedule` (add `-- --quick` for a 10 s interval, 25 s run).
#![forbid(unsafe_code)]

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use inferprobe::config;
use inferprobe::probe::lane::lane_key;
use inferprobe::probe::{BuildContext, ReadyProbe};
use inferprobe::schedule::phase::{Placing, first_tick_delay, phases};
use inferprobe::schedule::{RunEvent, Scheduler};

use common::{ChildGuard, f, summarize};

const PROBES: usize = 1000;
/// Ticks this close to the window's edges are not counted either way: whether they ran
/// before the cancel is a race, not a miss.
const EDGE: Duration = Duration::from_millis(500);

fn main() {
    let quick = common::quick();
    let (interval, duration) = if quick {
        (Duration::from_secs(10), Duration::from_secs(25))
    } else {
        (Duration::from_secs(30), Duration::from_secs(70))
    };
    println!("# schedule: start deviation of {PROBES} probes every {interval:?}, {duration:?} run");
    println!("machine: {}", common::machine());
    if quick {
        println!("QUICK MODE: not for the record");
    }

    let dir = std::env::temp_dir().join(format!("inferprobe-bench-schedule-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let sim_port = common::free_port();
    let sim_log = dir.join("simulator.log");
    let mut sim_cmd = Command::new(env!("CARGO_BIN_EXE_inferprobe"));
    sim_cmd.args([
        "simulate",
        "--listen",
        &format!("127.0.0.1:{sim_port}"),
        "--ttft",
        "2ms",
        "--token-gap",
        "1ms",
        "--tokens",
        "4",
        "--log-level",
        "warn",
    ]);
    let mut sim = ChildGuard::spawn("simulator", sim_cmd, &sim_log);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let sim_addr = format!("127.0.0.1:{sim_port}").parse().expect("addr");
        common::wait_http_ok(sim_addr, "/health", Duration::from_secs(10)).await;
        sim.assert_alive(&sim_log);
        timer_floor(if quick {
            Duration::from_secs(5)
        } else {
            Duration::from_secs(10)
        })
        .await;
        run(sim_port, interval, duration).await;
        sim.assert_alive(&sim_log);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The runtime's own floor: 1,000 bare `sleep_until`s spread over `span`, no probe work.
/// tokio's timer rounds a deadline up to the next millisecond tick and parks the thread
/// for whole milliseconds, so lateness of up to ~2 ms is the runtime, not the scheduler.
async fn timer_floor(span: Duration) {
    let t0 = tokio::time::Instant::now() + Duration::from_millis(10);
    let tasks: Vec<_> = (0..PROBES as u64)
        .map(|i| {
            // Spread evenly, with a sub-millisecond phase that varies between tasks.
            let at = t0 + span.mul_f64(i as f64 / PROBES as f64) + Duration::from_micros((i * 7919) % 1000);
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                at.elapsed().as_secs_f64() * 1e3
            })
        })
        .collect();
    let mut late = Vec::new();
    for t in tasks {
        late.push(t.await.expect("timer task"));
    }
    let s = summarize(&late);
    println!(
        "runtime timer floor (1,000 bare sleep_until over {span:?}, no probe work) ms: p50 {} p99 {} max {}",
        f(s.median, 3),
        f(s.p99, 3),
        f(s.max, 3)
    );
}

struct Spawned {
    /// When the loop was spawned, on both clocks (the grid is tied to the wall clock).
    at: Instant,
    since_epoch: Duration,
    phase: Duration,
}

async fn run(sim_port: u16, interval: Duration, duration: Duration) {
    let mut yaml = String::from("defaults: {overlap: true}\nprobes:\n");
    for i in 0..PROBES {
        yaml.push_str(&format!(
            "  - {{name: probe-{i}, kind: openai_chat, url: \"http://127.0.0.1:{sim_port}/v1/chat/completions\", model: sim-model, interval: {}s, timeout: 5s}}\n",
            interval.as_secs()
        ));
    }
    let config = config::parse(&yaml, Path::new("<schedule>"), &|_| None).expect("valid config");
    let build = BuildContext::new();
    let probes: Vec<Arc<ReadyProbe>> = config
        .probes
        .iter()
        .map(|p| Arc::new(ReadyProbe::build(p, &"bench".into(), &build).expect("probe builds")))
        .collect();

    let (tx, mut rx) = mpsc::channel::<RunEvent>(16_384);
    let collector = tokio::spawn(async move {
        let mut reports = Vec::new();
        while let Some(r) = rx.recv().await {
            reports.push(r);
        }
        reports
    });
    let tracker = TaskTracker::new();
    let scheduler = Scheduler::start(tx, tracker.clone());
    let lanes: Vec<String> = probes
        .iter()
        .map(|p| lane_key(&p.config.url, p.config.traffic.server.as_deref()))
        .collect();
    let placing: Vec<Placing> = probes
        .iter()
        .zip(&lanes)
        .map(|(p, lane)| Placing {
            name: &p.config.name,
            lane,
            period: interval,
            cold: false,
        })
        .collect();
    let at = phases(&placing, "bench", &[]);
    let t0 = Instant::now();
    let mut spawned = Vec::with_capacity(PROBES);
    let mut handles = Vec::with_capacity(PROBES);
    for (p, phase) in probes.iter().zip(&at) {
        spawned.push(Spawned {
            at: Instant::now(),
            since_epoch: SystemTime::now().duration_since(UNIX_EPOCH).expect("clock"),
            phase: *phase,
        });
        handles.push(scheduler.add(
            p.clone(),
            p.config.schedule.clone(),
            *phase,
            Arc::new(AtomicBool::new(false)),
        ));
    }
    let spawn_time = t0.elapsed();
    tokio::time::sleep_until((t0 + duration).into()).await;
    let cancelled_at = Instant::now();
    scheduler.stop_all();
    drop(scheduler);
    tracker.close();
    let drained = tokio::time::timeout(Duration::from_secs(10), tracker.wait())
        .await
        .is_ok();
    drop(probes);
    let reports = collector.await.expect("collector");

    // What ran, per probe.
    let index_of = |name: &str| -> usize { name["probe-".len()..].parse().expect("probe index") };
    let mut ticks_done: Vec<Vec<Instant>> = vec![Vec::new(); PROBES];
    let mut lags_ms = Vec::new();
    let mut failures = 0;
    let mut skipped = 0;
    for r in &reports {
        match r {
            RunEvent::Finished(o) => {
                lags_ms.push(o.schedule_lag.as_secs_f64() * 1e3);
                if let Some(fail) = o.observation.failure() {
                    failures += 1;
                    if failures <= 5 {
                        println!(
                            "  failed run: {}: {}: {}",
                            o.probe.name, fail.reason, fail.message
                        );
                    }
                }
                // The tick this run belongs to.
                ticks_done[index_of(&o.probe.name)].push(o.observation.marks.start - o.schedule_lag);
            }
            RunEvent::Skipped { ticks, .. } => skipped += ticks,
            RunEvent::Paced { .. } | RunEvent::Held { .. } => {}
        }
    }

    // What should have run: every grid tick inside the window, away from its edges.
    let mut expected = 0u64;
    let mut done = 0u64;
    let mut missed = 0u64;
    let mut min_runs = u64::MAX;
    for (i, s) in spawned.iter().enumerate() {
        let first = s.at + first_tick_delay(s.phase, interval, s.since_epoch);
        let window = (s.at + EDGE, cancelled_at - EDGE);
        let in_window = |t: Instant| t >= window.0 && t < window.1;
        let mut exp = 0;
        let mut t = first;
        while t < cancelled_at {
            if in_window(t) {
                exp += 1;
            }
            t += interval;
        }
        let got = ticks_done[i].iter().filter(|t| in_window(**t)).count() as u64;
        expected += exp;
        done += got;
        missed += exp.saturating_sub(got);
        min_runs = min_runs.min(ticks_done[i].len() as u64);
    }

    // The largest lags and when they happened: a burst at one instant (a stalled
    // process) reads differently from scattered single late runs.
    let mut worst: Vec<(f64, f64, &str)> = reports
        .iter()
        .filter_map(|r| match r {
            RunEvent::Finished(o) => Some((
                o.schedule_lag.as_secs_f64() * 1e3,
                (o.observation.marks.start - o.schedule_lag)
                    .saturating_duration_since(t0)
                    .as_secs_f64(),
                &*o.probe.name,
            )),
            RunEvent::Skipped { .. } | RunEvent::Paced { .. } | RunEvent::Held { .. } => None,
        })
        .collect();
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (lag_ms, at_s, name) in worst.iter().take(5) {
        println!("  late run: {name} tick at +{at_s:.3} s, lag {lag_ms:.3} ms");
    }

    let lag = summarize(&lags_ms);
    let mut sorted = lags_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let p50 = lag.median;
    println!();
    println!(
        "spawned {PROBES} loops in {:.1} ms",
        spawn_time.as_secs_f64() * 1e3
    );
    println!(
        "runs finished: {} ({} failed); drained in time: {drained}",
        lags_ms.len(),
        failures
    );
    println!("fewest runs of any probe: {min_runs}");
    println!(
        "ticks inside the window (±{} ms from its edges excluded): expected {expected}, ran {done}, missed {missed}",
        EDGE.as_millis()
    );
    println!("skipped ticks reported by the scheduler: {skipped}");
    println!(
        "schedule_lag ms: count {} p50 {} p90 {} p99 {} p99.9 {} max {}",
        lag.count,
        f(p50, 3),
        f(common::percentile(&sorted, 90.0), 3),
        f(lag.p99, 3),
        f(common::percentile(&sorted, 99.9), 3),
        f(lag.max, 3)
    );
    println!();
    println!(
        "| probes | interval | run | runs expected | runs done | missed | skipped ticks | lag p50 ms | lag p99 ms | lag max ms | p99 < 2 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {PROBES} | {}s | {}s | {expected} | {done} | {missed} | {skipped} | {} | {} | {} | {} |",
        interval.as_secs(),
        duration.as_secs(),
        f(p50, 3),
        f(lag.p99, 3),
        f(lag.max, 3),
        if lag.p99 < 2.0 && missed == 0 {
            "met"
        } else {
            "NOT met"
        }
    );
}
