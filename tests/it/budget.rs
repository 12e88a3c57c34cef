//! A token budget against the simulator's usage reports: a probe every second that
//! would use four times its `budget.tokens_per_day` is reported once and paced to one
//! run every 4 s. Asserts on counted runs with generous bounds, on the published pace
//! change (exact: the simulator's counts are) and on lower bounds of the gaps between
//! runs (a timer never fires early), never on wall-clock precision.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use inferprobe::outcome::TokenSource;
use inferprobe::schedule::budget::PaceChange;
use inferprobe::schedule::{RunEvent, Scheduler};
use inferprobe::simulate::Script;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

#[tokio::test(flavor = "multi_thread")]
async fn over_its_budget_a_probe_warns_once_and_runs_at_the_stretched_interval() {
    let sim = simulator(Script::default()).await;
    // 24 input + 8 output tokens a run (the simulator's usage), every second: 2,764,800
    // a day. 691,200 fit at one run every 4 s.
    let probe = build_probe(&format!(
        "name: budgeted\nkind: openai_chat\nurl: http://{}/v1/chat/completions?ttft=0ms&token_gap=0ms&tokens=50\nmodel: sim-model\ninterval: 1s\ntimeout: 900ms\nmax_tokens: 8\nbudget: {{tokens_per_day: 691200}}",
        sim.addr
    ));
    let (tx, mut rx) = mpsc::channel(100);
    let tracker = TaskTracker::new();
    let scheduler = Scheduler::start(tx, tracker.clone());
    let schedule = probe.config.schedule.clone();
    let _probe = scheduler.add(Arc::new(probe), schedule, Duration::ZERO, Arc::default());
    // Unpaced, about nine runs.
    tokio::time::sleep(Duration::from_secs(9)).await;
    scheduler.stop_all();
    tracker.close();
    tracker.wait().await;
    // The last run's events are sent after it is tracked as done: let them arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut runs = Vec::new();
    let mut changes = Vec::new();
    while let Ok(event) = rx.try_recv() {
        match event {
            RunEvent::Finished(o) => runs.push(o),
            RunEvent::Paced { probe, change } => {
                assert_eq!(&*probe.name, "budgeted");
                changes.push(change);
            }
            RunEvent::Skipped { .. } | RunEvent::Held { .. } => {}
        }
    }
    for o in &runs {
        let obs = &o.observation;
        assert!(obs.success(), "{:?}", obs.result);
        assert_eq!(
            (obs.input_tokens, obs.input_token_source),
            (Some(24), Some(TokenSource::Usage))
        );
        assert_eq!(obs.output_tokens, Some(8));
    }
    // One warning, after the first run: never a stop.
    assert_eq!(
        changes,
        [PaceChange {
            tokens_per_day: 691_200,
            projected_per_day: 2_764_800,
            configured: Duration::from_secs(1),
            stretched: Some(Duration::from_secs(4)),
        }]
    );
    // The tick after the first was set before its tokens were in; from then on, 4 s.
    assert!((3..=5).contains(&runs.len()), "{} runs in 9 s", runs.len());
    let starts: Vec<_> = runs.iter().map(|o| o.started_at).collect();
    for w in starts.windows(2).skip(1) {
        let gap = w[1].duration_since(w[0]).unwrap();
        assert!(gap >= Duration::from_millis(3_500), "{gap:?} between paced runs");
    }
}
