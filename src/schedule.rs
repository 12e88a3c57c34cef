//! When runs happen: one timer task for all probes ([`Scheduler`]), firing each on a
//! fixed grid (or a cron schedule), never overlapping a probe's previous run, publishing
//! each finished run on a channel. It does not know who listens.
//!
//! **The grid.** A probe with interval `p` runs at the wall-clock instants `t` where
//! `t mod p` is its phase (phase.rs: probes of one endpoint in slots of their own, each
//! region shifted within them), the same after a restart. After the first tick the grid
//! is kept on the monotonic clock (`start + k * p`), so it never drifts, however long
//! runs take.
//!
//! **No overlap.** A tick that comes while the previous run is still going is skipped and
//! reported; so are ticks missed because the process was stalled. A tick the probe
//! holds off (its endpoint kept quiet for another probe's cold run) is reported apart.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Schedule, TokenBudget};
use crate::outcome::{Outcome, ProbeIdentity};

pub mod budget;
pub mod phase;
use budget::{Pace, PaceChange};
use phase::{first_tick_delay, fnv1a, spread};

/// What the scheduler publishes about a probe's ticks: a run that finished, or ticks
/// that did not run. (Not to be confused with `report::Report`, the SLO report.)
#[derive(Debug)]
pub enum RunEvent {
    Finished(Box<Outcome>),
    /// Ticks that did not run: the previous run was still going, or the process fell
    /// behind.
    Skipped {
        probe: Arc<ProbeIdentity>,
        ticks: u64,
    },
    /// A tick held off: the endpoint was being kept quiet for another probe's cold run.
    Held {
        probe: Arc<ProbeIdentity>,
    },
    /// The probe crossed its token budget: its interval is stretched, or back to the
    /// configured one (budget.rs).
    Paced {
        probe: Arc<ProbeIdentity>,
        change: PaceChange,
    },
}

/// Something the scheduler can run: a built probe, or a fake in tests.
pub trait Runner: Send + Sync + 'static {
    fn identity(&self) -> &Arc<ProbeIdentity>;
    /// Runs it at a tick; `None` when the tick is held off (its endpoint is being kept
    /// quiet for another probe's cold run).
    fn run(&self) -> impl Future<Output = Option<Outcome>> + Send;
    /// The daily token budget that paces it, if any.
    fn budget(&self) -> Option<TokenBudget> {
        None
    }
    /// A cold probe's idle time: its first tick comes no sooner after it is added, so
    /// the agent's own earlier requests are that far behind.
    fn quiet_before(&self) -> Option<Duration> {
        None
    }
    /// Its next tick, told as soon as it is known (a cold probe keeps its endpoint
    /// quiet before it).
    fn announce(&self, _tick: Instant) {}
}

impl Runner for crate::probe::ReadyProbe {
    fn identity(&self) -> &Arc<ProbeIdentity> {
        &self.identity
    }

    fn run(&self) -> impl Future<Output = Option<Outcome>> + Send {
        self.run_at_tick()
    }

    fn budget(&self) -> Option<TokenBudget> {
        self.config.budget
    }

    fn quiet_before(&self) -> Option<Duration> {
        self.config.traffic.cold
    }

    fn announce(&self, tick: Instant) {
        crate::probe::ReadyProbe::announce(self, tick);
    }
}

/// Which probes an agent runs when a region's probes are spread over several agents
/// (`--shard INDEX/COUNT`): those whose name hashes to INDEX. No coordination is
/// needed: every replica reads the same file and takes its own part, and a probe stays
/// on its shard across restarts and releases (the hash is FNV-1a, salted so that the
/// shard does not follow the probe's phase in its interval).
///
/// Sizing (BENCHMARKS.md): CPU is rarely the limit (10,000 chat probes at 30 s, 333
/// runs/s, cost about 12 % of a core); memory is (about 29 MB at 1,000 probes, 180 MB at
/// 10,000). Keep a few thousand probes per shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// One agent runs everything.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    pub fn owns(&self, probe: &str) -> bool {
        spread(fnv1a(probe) ^ 0x7368_6172_6421) % u64::from(self.count) == u64::from(self.index)
    }

    /// `INDEX/COUNT`, with INDEX from 0; `auto/COUNT` takes INDEX from the trailing
    /// number of the host name (a Kubernetes StatefulSet's pod `inferprobe-2` is 2).
    pub fn parse(text: &str, hostname: impl FnOnce() -> Option<String>) -> Result<Shard, String> {
        let usage = || format!("`{text}` is not a shard like 0/3 or auto/3 (INDEX/COUNT, INDEX from 0)");
        let (index, count) = text.trim().split_once('/').ok_or_else(usage)?;
        let count: u32 = count.parse().map_err(|_| usage())?;
        if count == 0 {
            return Err(usage());
        }
        let index: u32 = if index == "auto" {
            let host = hostname().unwrap_or_default();
            let digits = host.rsplit('-').next().unwrap_or_default();
            digits.parse().map_err(|_| {
                format!("--shard auto/{count}: the host name `{host}` does not end in -<number> (as a StatefulSet pod's does)")
            })?
        } else {
            index.parse().map_err(|_| usage())?
        };
        if index >= count {
            return Err(format!("shard index {index} is not below the count {count}"));
        }
        Ok(Shard { index, count })
    }
}

/// The timer of every probe: one task and one queue of due times for all of them. A
/// task per probe, each with its own timer and cancellation token, was ~750 bytes a
/// probe (7.5 MB at 10,000 probes) to wait, mostly, for one instant every 30 s.
///
/// [`Scheduler::add`] puts a probe on its grid and returns the handle that takes it off
/// ([`Scheduled::stop`]); [`Scheduler::stop_all`] ends the task (at shutdown). Each run
/// is spawned on the tracker, so shutdown can wait for runs in flight; `busy` is set
/// while one is (shared with a replacement after a reload, so old and new runs never
/// overlap).
pub struct Scheduler<R: Runner> {
    queue: Arc<Queue<R>>,
    cancel: CancellationToken,
}

/// What the timer task and the handles share.
struct Queue<R> {
    due: Mutex<BinaryHeap<Due<R>>>,
    /// Rung when a probe is added, so the task sleeps until the new earliest instant.
    added: Notify,
}

/// A probe's next tick.
struct Due<R> {
    at: Instant,
    entry: Arc<Entry<R>>,
}

impl<R> PartialEq for Due<R> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl<R> Eq for Due<R> {}

impl<R> PartialOrd for Due<R> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<R> Ord for Due<R> {
    /// Reversed: the heap's top is the earliest tick.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at.cmp(&self.at)
    }
}

/// One scheduled probe.
struct Entry<R> {
    runner: Arc<R>,
    schedule: Schedule,
    /// Its place in its interval (phase.rs).
    phase: Duration,
    busy: Arc<AtomicBool>,
    /// The token budget's pace, shared with the runs that record their tokens.
    pace: Option<Arc<Pace>>,
    /// Taken off the grid: its next tick is dropped instead of run.
    stopped: AtomicBool,
    /// Skipped ticks not yet reported: the channel was full.
    unreported: AtomicU64,
}

/// The handle on a scheduled probe.
pub struct Scheduled<R>(Arc<Entry<R>>);

impl<R> Scheduled<R> {
    pub fn runner(&self) -> &Arc<R> {
        &self.0.runner
    }

    /// Its place in its interval, as added.
    pub fn phase(&self) -> Duration {
        self.0.phase
    }

    /// The flag set while a run is in flight; a replacement takes it over.
    pub fn busy(&self) -> &Arc<AtomicBool> {
        &self.0.busy
    }

    /// Takes the probe off the grid: it never starts another run; a run in flight
    /// finishes and is reported.
    pub fn stop(&self) {
        self.0.stopped.store(true, Ordering::Release);
    }
}

impl<R: Runner> Scheduler<R> {
    /// Starts the timer task. Finished runs and skipped ticks go to `events`.
    pub fn start(events: mpsc::Sender<RunEvent>, tracker: TaskTracker) -> Self {
        let queue = Arc::new(Queue {
            due: Mutex::new(BinaryHeap::new()),
            added: Notify::new(),
        });
        let cancel = CancellationToken::new();
        tokio::spawn(tick(queue.clone(), events, tracker, cancel.clone()));
        Scheduler { queue, cancel }
    }

    /// Puts `runner` on `schedule`: its first tick is at `phase` in the interval (or the
    /// next cron fire); a cold probe's, no sooner than its idle time from now.
    pub fn add(
        &self,
        runner: Arc<R>,
        schedule: Schedule,
        phase: Duration,
        busy: Arc<AtomicBool>,
    ) -> Scheduled<R> {
        // A budget paces an interval only (config refuses one on a cron probe).
        let pace = match (&schedule, runner.budget()) {
            (Schedule::Interval(p), Some(b)) => Some(Arc::new(Pace::new(b, *p))),
            _ => None,
        };
        let now = Instant::now();
        let quiet = runner.quiet_before().unwrap_or_default();
        let first = match &schedule {
            Schedule::Interval(p) => {
                let mut first = now + first_tick_delay(phase, *p, since_epoch());
                while first < now + quiet {
                    first += *p;
                }
                Some(first)
            }
            Schedule::Cron { schedule, .. } => next_cron(schedule, quiet),
        };
        if let Some(at) = first {
            runner.announce(at);
        }
        let entry = Arc::new(Entry {
            runner,
            schedule,
            phase,
            busy,
            pace,
            stopped: AtomicBool::new(false),
            unreported: AtomicU64::new(0),
        });
        if let Some(at) = first {
            self.queue.push(at, entry.clone());
            self.queue.added.notify_one();
        }
        Scheduled(entry)
    }

    /// Drops the entries of stopped probes now, with the built probes they hold,
    /// rather than at their next tick (a weekly cron probe's is a week away).
    pub fn forget_stopped(&self) {
        self.queue
            .due
            .lock()
            .expect("schedule lock")
            .retain(|d| !d.entry.stopped.load(Ordering::Acquire));
    }

    /// Ends the timer task: no probe starts another run.
    pub fn stop_all(&self) {
        self.cancel.cancel();
    }

    /// Probes on the grid, stopped ones not yet dropped included (for tests).
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.queue.due.lock().expect("schedule lock").len()
    }
}

impl<R: Runner> Drop for Scheduler<R> {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl<R> Queue<R> {
    fn push(&self, at: Instant, entry: Arc<Entry<R>>) {
        self.due.lock().expect("schedule lock").push(Due { at, entry });
    }

    /// The earliest tick, if any probe is scheduled.
    fn next(&self) -> Option<Instant> {
        self.due.lock().expect("schedule lock").peek().map(|d| d.at)
    }

    /// Takes every tick due by `now` into `into`.
    fn take_due(&self, now: Instant, into: &mut Vec<Due<R>>) {
        let mut due = self.due.lock().expect("schedule lock");
        while due.peek().is_some_and(|d| d.at <= now) {
            into.extend(due.pop());
        }
    }
}

/// The timer task: sleeps until the earliest tick, starts every run that is due, puts
/// each probe back at its next tick.
async fn tick<R: Runner>(
    queue: Arc<Queue<R>>,
    events: mpsc::Sender<RunEvent>,
    tracker: TaskTracker,
    cancel: CancellationToken,
) {
    let far = || Instant::now() + Duration::from_secs(86_400 * 365);
    let sleep = tokio::time::sleep_until(queue.next().unwrap_or_else(far));
    tokio::pin!(sleep);
    let mut due = Vec::new();
    loop {
        tokio::select! {
            // Fixed order: no random draw per tick, and a cancelled timer never runs again.
            biased;
            _ = cancel.cancelled() => return,
            _ = queue.added.notified() => {}
            _ = &mut sleep => {}
        }
        let now = Instant::now();
        queue.take_due(now, &mut due);
        for Due { at, entry } in due.drain(..) {
            if entry.stopped.load(Ordering::Acquire) {
                continue;
            }
            if let Some(next) = fire(&entry, at, now, &events, &tracker) {
                entry.runner.announce(next);
                queue.push(next, entry);
            }
        }
        sleep.as_mut().reset(queue.next().unwrap_or_else(far));
    }
}

/// Starts the run due at `at` (or counts it skipped) and says when the probe's next
/// tick is; `None` when a cron schedule has no more.
fn fire<R: Runner>(
    entry: &Arc<Entry<R>>,
    at: Instant,
    now: Instant,
    events: &mpsc::Sender<RunEvent>,
    tracker: &TaskTracker,
) -> Option<Instant> {
    let lag = now.saturating_duration_since(at);
    let mut skipped = 0;
    if entry.busy.swap(true, Ordering::AcqRel) {
        skipped += 1;
    } else {
        let (runner, events, pace) = (entry.runner.clone(), events.clone(), entry.pace.clone());
        // Held until the outcome is handed over, not only until the run ends: when the
        // fan-out falls behind, a probe's next tick is skipped (and reported) rather
        // than runs piling up behind the full channel, each task holding its outcome,
        // without bound.
        let busy = Busy(entry.busy.clone());
        // The tracker counts the run itself, not the hand-over of its outcome: a run
        // that has finished is not in flight, even while the fan-out is busy.
        let run = tracker.track_future(async move {
            let mut outcome = runner.run().await?;
            outcome.schedule_lag = lag;
            Some(outcome)
        });
        let held = entry.runner.identity().clone();
        tokio::spawn(async move {
            let Some(outcome) = run.await else {
                let _ = events.send(RunEvent::Held { probe: held }).await;
                return;
            };
            let change = pace.and_then(|p| p.record(&outcome));
            let probe = outcome.probe.clone();
            let _ = events.send(RunEvent::Finished(Box::new(outcome))).await;
            drop(busy);
            if let Some(change) = change {
                let _ = events.send(RunEvent::Paced { probe, change }).await;
            }
        });
    }
    let next = match &entry.schedule {
        Schedule::Interval(p) => {
            let p = entry.pace.as_ref().map_or(*p, |pace| pace.interval());
            // Whole periods we are late by are ticks that will never run.
            let behind = (lag.as_nanos() / p.as_nanos().max(1)) as u32;
            skipped += u64::from(behind);
            Some(at + p * (behind + 1))
        }
        Schedule::Cron { schedule, .. } => next_cron(schedule, Duration::ZERO),
    };
    // The timer must not wait on a full channel (every probe's ticks would be late):
    // skips it cannot report now are reported with the probe's next tick.
    let ticks = skipped + entry.unreported.swap(0, Ordering::AcqRel);
    if ticks > 0 {
        let event = RunEvent::Skipped {
            probe: entry.runner.identity().clone(),
            ticks,
        };
        if events.try_send(event).is_err() {
            entry.unreported.fetch_add(ticks, Ordering::AcqRel);
        }
    }
    next
}

/// Clears the busy flag when a run ends, however it ends (a panicking run must not stop
/// its probe for good).
struct Busy(Arc<AtomicBool>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn since_epoch() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// The next cron fire at least `after` from now, as a monotonic instant.
fn next_cron(schedule: &cron::Schedule, after: Duration) -> Option<Instant> {
    let now = chrono::Utc::now();
    let from = now + chrono::TimeDelta::from_std(after).unwrap_or_default();
    let next = schedule.after(&from).next()?;
    let wait = (next - now).to_std().unwrap_or_default();
    Some(Instant::now() + wait)
}

#[cfg(test)]
mod shard_tests {
    use super::*;

    #[test]
    fn shards_split_the_probes_without_overlap_and_evenly() {
        let names: Vec<String> = (0..3000).map(|i| format!("probe-{i}")).collect();
        let shards: Vec<Shard> = (0..3).map(|index| Shard { index, count: 3 }).collect();
        let mut sizes = [0; 3];
        for n in &names {
            let owners: Vec<usize> = (0..3).filter(|&i| shards[i].owns(n)).collect();
            assert_eq!(owners.len(), 1, "{n} has owners {owners:?}");
            sizes[owners[0]] += 1;
        }
        for size in sizes {
            assert!((900..=1100).contains(&size), "{sizes:?}");
        }
        assert!(names.iter().all(|n| Shard::ALL.owns(n)));
    }

    #[test]
    fn shard_flags_parse_or_say_why_not() {
        let host = |h: &str| {
            let h = h.to_owned();
            move || Some(h)
        };
        assert_eq!(Shard::parse("1/3", || None), Ok(Shard { index: 1, count: 3 }));
        assert_eq!(
            Shard::parse("auto/4", host("inferprobe-2")),
            Ok(Shard { index: 2, count: 4 })
        );
        assert!(Shard::parse("3/3", || None).unwrap_err().contains("not below"));
        assert!(Shard::parse("1/0", || None).is_err());
        assert!(Shard::parse("two", || None).unwrap_err().contains("0/3"));
        assert!(
            Shard::parse("auto/3", host("probe-eu"))
                .unwrap_err()
                .contains("-<number>")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Observation;
    use std::collections::HashSet;

    struct FakeRunner {
        identity: Arc<ProbeIdentity>,
        takes: Duration,
        starts: Mutex<Vec<Instant>>,
    }

    impl Runner for FakeRunner {
        fn identity(&self) -> &Arc<ProbeIdentity> {
            &self.identity
        }

        async fn run(&self) -> Option<Outcome> {
            self.starts.lock().unwrap().push(Instant::now());
            tokio::time::sleep(self.takes).await;
            Some(Outcome {
                probe: self.identity.clone(),
                started_at: SystemTime::now(),
                schedule_lag: Duration::ZERO,
                trace: None,
                observation: Observation::new(std::time::Instant::now()),
                conditions: Default::default(),
                burst: None,
            })
        }
    }

    /// The phase the name alone gives (one probe per endpoint).
    fn at_name<R: Runner>(runner: &Arc<R>, period: Duration) -> Duration {
        phase::grid_offset(&runner.identity().name, period)
    }

    fn fake(takes: Duration) -> Arc<FakeRunner> {
        Arc::new(FakeRunner {
            identity: Arc::new(ProbeIdentity {
                name: "fake".into(),
                kind: "http",
                model: String::new(),
                location: "test".into(),
                labels: vec![],
                endpoint: "http://x/".into(),
                query: String::new(),
                full_metrics: false,
            }),
            takes,
            starts: Mutex::new(Vec::new()),
        })
    }

    async fn drive(runner: Arc<FakeRunner>, period: Duration, for_: Duration) -> Vec<RunEvent> {
        let (tx, mut rx) = mpsc::channel(1000);
        let tracker = TaskTracker::new();
        let scheduler = Scheduler::start(tx, tracker.clone());
        let phase = at_name(&runner, period);
        let _probe = scheduler.add(runner, Schedule::Interval(period), phase, Arc::default());
        tokio::time::sleep(for_).await;
        scheduler.stop_all();
        tracker.close();
        tracker.wait().await;
        let mut out = Vec::new();
        while let Ok(r) = rx.try_recv() {
            out.push(r);
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn ticks_stay_on_the_grid_without_drift() {
        let period = Duration::from_secs(30);
        let runner = fake(Duration::from_millis(1700));
        let events = drive(runner.clone(), period, Duration::from_secs(30 * 100 + 31)).await;
        let starts = runner.starts.lock().unwrap().clone();
        assert!(starts.len() >= 100, "{}", starts.len());
        // Every start is exactly k periods after the first, even though each run takes
        // 1.7 s: no drift accumulates.
        for (k, s) in starts.iter().enumerate() {
            assert_eq!(*s - starts[0], period * k as u32);
        }
        assert!(events.iter().all(|r| matches!(r, RunEvent::Finished(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_longer_than_the_interval_skips_ticks_instead_of_overlapping() {
        let period = Duration::from_secs(10);
        // Each run takes 25 s: the two ticks during it must be skipped.
        let runner = fake(Duration::from_secs(25));
        let events = drive(runner.clone(), period, Duration::from_secs(10 + 95)).await;
        let starts = runner.starts.lock().unwrap().clone();
        for w in starts.windows(2) {
            assert!(w[1] - w[0] >= Duration::from_secs(25), "runs overlapped");
            assert_eq!((w[1] - w[0]).as_nanos() % period.as_nanos(), 0, "off the grid");
        }
        let skipped: u64 = events
            .iter()
            .map(|r| match r {
                RunEvent::Skipped { ticks, .. } => *ticks,
                _ => 0,
            })
            .sum();
        assert!(
            skipped >= 2 * (starts.len() as u64 - 1),
            "skipped {skipped}, runs {}",
            starts.len()
        );
    }

    struct PanickyRunner {
        identity: Arc<ProbeIdentity>,
        calls: Mutex<u32>,
    }

    impl Runner for PanickyRunner {
        fn identity(&self) -> &Arc<ProbeIdentity> {
            &self.identity
        }

        async fn run(&self) -> Option<Outcome> {
            *self.calls.lock().unwrap() += 1;
            panic!("a bug in a probe");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_run_does_not_stop_its_probe() {
        let runner = Arc::new(PanickyRunner {
            identity: fake(Duration::ZERO).identity.clone(),
            calls: Mutex::new(0),
        });
        let (tx, _rx) = mpsc::channel(100);
        let scheduler = Scheduler::start(tx, TaskTracker::new());
        let _probe = scheduler.add(
            runner.clone(),
            Schedule::Interval(Duration::from_secs(10)),
            Duration::ZERO,
            Arc::default(),
        );
        tokio::time::sleep(Duration::from_secs(45)).await;
        scheduler.stop_all();
        // Every tick ran, although every run panicked.
        assert!(*runner.calls.lock().unwrap() >= 4);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_run_waits_for_the_probe_offset() {
        let period = Duration::from_secs(30);
        let runner = fake(Duration::from_millis(10));
        let t0 = Instant::now();
        drive(runner.clone(), period, Duration::from_secs(31)).await;
        let starts = runner.starts.lock().unwrap().clone();
        // The first run comes within one period (at the probe's offset); a second one,
        // if the offset was under a second, exactly one period later.
        assert!(!starts.is_empty() && starts[0] - t0 < period);
        assert!(starts.len() == 1 || starts[1] - starts[0] == period);
    }

    fn named(name: &str, takes: Duration) -> Arc<FakeRunner> {
        let runner = fake(takes);
        let mut identity = (*runner.identity).clone();
        identity.name = name.into();
        Arc::new(FakeRunner {
            identity: Arc::new(identity),
            takes,
            starts: Mutex::new(Vec::new()),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn one_timer_runs_each_probe_at_its_own_offset_and_a_stopped_one_no_more() {
        let period = Duration::from_secs(30);
        let (tx, _rx) = mpsc::channel(1000);
        let tracker = TaskTracker::new();
        let scheduler = Scheduler::start(tx, tracker.clone());
        let t0 = Instant::now();
        let runners: Vec<_> = (0..50)
            .map(|i| named(&format!("probe-{i}"), Duration::from_millis(5)))
            .collect();
        let handles: Vec<_> = runners
            .iter()
            .map(|r| {
                scheduler.add(
                    r.clone(),
                    Schedule::Interval(period),
                    at_name(r, period),
                    Arc::default(),
                )
            })
            .collect();
        tokio::time::sleep(period * 3).await;
        for r in &runners {
            let starts = r.starts.lock().unwrap().clone();
            assert_eq!(starts.len(), 3, "{}", r.identity.name);
            // Within the first interval, then exactly a period apart.
            assert!(starts[0] - t0 < period);
            assert!(starts.windows(2).all(|w| w[1] - w[0] == period));
        }
        // Each at its own phase, not all at once.
        let phases: HashSet<_> = runners
            .iter()
            .map(|r| (r.starts.lock().unwrap()[0] - t0).as_millis())
            .collect();
        assert!(phases.len() > 45, "{}", phases.len());
        // Half of them stopped: they never run again; the others go on.
        for h in handles.iter().step_by(2) {
            h.stop();
        }
        tokio::time::sleep(period * 2).await;
        for (i, r) in runners.iter().enumerate() {
            let runs = r.starts.lock().unwrap().len();
            assert_eq!(runs, if i % 2 == 0 { 3 } else { 5 }, "{}", r.identity.name);
        }
        // The stopped ones left the queue at what would have been their next tick.
        assert_eq!(scheduler.queued(), 25);
        // Or at once, when asked (after a reload).
        handles[1].stop();
        assert_eq!(scheduler.queued(), 25);
        scheduler.forget_stopped();
        assert_eq!(scheduler.queued(), 24);
        scheduler.stop_all();
        tokio::time::sleep(period * 2).await;
        assert_eq!(runners[3].starts.lock().unwrap().len(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_added_later_with_an_earlier_tick_is_not_late() {
        let period = Duration::from_secs(60);
        let (tx, mut rx) = mpsc::channel(1000);
        let scheduler = Scheduler::start(tx, TaskTracker::new());
        // The timer sleeps toward the first probe's tick; the second probe's comes first.
        let late = named("zz-late", Duration::ZERO);
        let mut early = named("aa-early", Duration::ZERO);
        for i in 0.. {
            early = named(&format!("early-{i}"), Duration::ZERO);
            let now = since_epoch();
            // By a clear margin, and not about to wrap into the next interval: the wall
            // clock moves on while the test runs.
            let first = first_tick_delay(at_name(&early, period), period, now);
            if first > Duration::from_secs(1)
                && first + Duration::from_secs(1) < first_tick_delay(at_name(&late, period), period, now)
            {
                break;
            }
        }
        let late_phase = at_name(&late, period);
        let _late = scheduler.add(late, Schedule::Interval(period), late_phase, Arc::default());
        tokio::time::sleep(Duration::from_millis(10)).await;
        let _early = scheduler.add(
            early.clone(),
            Schedule::Interval(period),
            at_name(&early, period),
            Arc::default(),
        );
        tokio::time::sleep(period).await;
        let starts = early.starts.lock().unwrap().clone();
        assert_eq!(starts.len(), 1);
        let RunEvent::Finished(outcome) = rx.recv().await.unwrap() else {
            panic!("not a finished run");
        };
        assert_eq!(outcome.probe.name, early.identity.name);
        assert!(
            outcome.schedule_lag < Duration::from_millis(2),
            "{:?}",
            outcome.schedule_lag
        );
    }

    #[tokio::test(start_paused = true)]
    async fn when_nothing_takes_the_outcomes_runs_do_not_pile_up_and_the_skips_are_reported_later() {
        let period = Duration::from_secs(1);
        // Room for one event, and nobody reading until the end.
        let (tx, mut rx) = mpsc::channel(1);
        let scheduler = Scheduler::start(tx, TaskTracker::new());
        let runner = fake(Duration::ZERO);
        let _probe = scheduler.add(
            runner.clone(),
            Schedule::Interval(period),
            at_name(&runner, period),
            Arc::default(),
        );
        tokio::time::sleep(period * 30).await;
        // The first outcome fills the channel; the second run's waits with its busy flag
        // held, so no third run starts.
        assert_eq!(runner.starts.lock().unwrap().len(), 2);
        // Reading frees the channel: the waiting outcome, then every skipped tick.
        let mut finished = 0;
        let mut skipped = 0;
        tokio::time::sleep(period * 3).await;
        // An event comes at least every tick now (a run's outcome, or the skips).
        while let Ok(Some(event)) = tokio::time::timeout(period * 2, rx.recv()).await {
            match event {
                RunEvent::Finished(_) => finished += 1,
                RunEvent::Skipped { ticks, .. } => skipped += ticks,
                RunEvent::Paced { .. } | RunEvent::Held { .. } => {}
            }
            if finished >= 2 && skipped >= 28 {
                break;
            }
        }
        assert!(finished >= 2, "{finished}");
        assert!(skipped >= 28, "skipped {skipped}");
    }
}
