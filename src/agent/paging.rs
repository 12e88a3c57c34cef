//! Paging, wired: the alert state machine ([`crate::alert`]) fed by the fan-out, the
//! store that keeps its state and outbox, and one delivery loop per receiver.
//!
//! Decisions are batched: folded into [`Unsaved`] and committed (state and outbox in one
//! transaction) at most [`COMMIT_WINDOW`] later; the alert board is published only after
//! the commit that holds what it shows, so nothing is visible that a crash could take
//! back.
//!
//! May import: alert, config, metrics, notify, outcome, store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, watch};

use crate::alert::{Alerting, Changes, Firing, Rules};
use crate::config::{Config, ReceiverConfig};
use crate::metrics::Metrics;
use crate::notify::{self, DeliveryContext, Receiver};
use crate::outcome::Outcome;
use crate::store::{AlertStore, StoreError};

use super::task::{Running, Tasks};

/// A running delivery loop, woken when something is enqueued for its receiver.
type Delivering = Running<ReceiverConfig, Arc<Notify>>;

/// The alert state machine and what it decided but has not saved yet.
struct PagingState {
    alerting: Alerting,
    /// Decisions not yet committed: those of the runs since the last commit, and any a
    /// failed commit left behind (disk full, I/O error), retried with the next one, so a
    /// page is late rather than lost. Nothing here is visible outside: the alert board
    /// is published only after a commit.
    unsaved: Unsaved,
    last_commit: Instant,
    /// Commits that failed in a row (a full or failing disk), and when the next may be
    /// tried: retried at once, each failure would be another transaction and another
    /// error line, ~800 a second once the board is due (measured on a full tmpfs).
    failed_commits: u32,
    retry_at: Option<Instant>,
    last_publish: Instant,
    /// Committed changes the published board does not show yet.
    board_stale: bool,
}

/// Changes folded together until they are committed: one state per probe (the last
/// one wins), notifications in the order they were decided.
#[derive(Default)]
struct Unsaved {
    notifications: Vec<crate::alert::Notification>,
    saved: HashMap<String, Option<String>>,
}

impl Unsaved {
    fn fold(&mut self, changes: Changes) {
        for n in &changes.notifications {
            tracing::warn!(
                probe = %n.alert.probe,
                event = n.event.as_str(),
                severity = n.alert.severity.as_str(),
                summary = %n.alert.summary,
                receivers = ?n.receivers,
                "Alert {}.",
                n.event.as_str()
            );
        }
        self.notifications.extend(changes.notifications);
        self.saved.extend(changes.saved);
    }

    fn is_empty(&self) -> bool {
        self.notifications.is_empty() && self.saved.is_empty()
    }

    /// What was decided after `self`: its notifications come after, its states win.
    fn append(&mut self, later: Unsaved) {
        self.notifications.extend(later.notifications);
        self.saved.extend(later.saved);
    }
}

impl PagingState {
    /// Whether a commit may be tried now (not while waiting after failed ones).
    fn may_retry(&self) -> bool {
        self.retry_at.is_none_or(|t| Instant::now() >= t)
    }
}

/// The wait after a failed commit, doubling with each failure in a row up to
/// [`RETRY_MAX`]: a disk that was full a moment takes the page a moment late, one that
/// stays full costs a transaction every few seconds.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// How long decisions may wait to be committed. Committing once per run costs a
/// transaction per run, and republishing the board once per run is O(firing alerts):
/// with 100,000 failing probes the fan-out fell hours behind and shutdown could not
/// drain. A `kill -9` loses at most this window of streak counts, never a queued page:
/// a page is visible (board, outbox, receivers) only once committed.
const COMMIT_WINDOW: Duration = Duration::from_millis(100);

/// How often the alert board is republished when only counts changed (bad runs, the
/// last error); a firing or a resolve republishes it with its commit.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Paging, wired: the alert state machine, the store that keeps its state and outbox,
/// and one delivery loop per receiver.
pub(super) struct Paging {
    state: Mutex<PagingState>,
    store: Arc<AlertStore>,
    location: String,
    metrics: Arc<Metrics>,
    pub(super) active: watch::Sender<Arc<Vec<Firing>>>,
    receivers: Mutex<Tasks<ReceiverConfig, Arc<Notify>>>,
    /// The chat robots' per-minute buckets: a reload replaces a robot's delivery loop,
    /// not what it has sent this minute.
    pacing: Arc<notify::Pacing>,
    /// Which model serves each probe (agent/model_watch.rs).
    models: Mutex<super::model_watch::ModelWatch>,
    /// How people reach this agent, for a notice's links.
    api_base: String,
    /// Per probe, the receivers told of a change of its model: those its config
    /// chooses for it (`alert.model_changes`, routed as `info`) that take notices.
    notice_receivers: Mutex<HashMap<String, Vec<String>>>,
}

impl Paging {
    /// Opens paging on `store`, restoring the alert state saved before a restart.
    pub(super) fn open(
        store: Arc<AlertStore>,
        location: &str,
        api_base: &str,
        metrics: Arc<Metrics>,
    ) -> Result<Paging, StoreError> {
        let mut alerting = Alerting::new(location, api_base);
        for (probe, saved) in store.alert_states(location)? {
            if let Err(e) = alerting.restore(&probe, &saved) {
                tracing::warn!(probe = %probe, error = %e, "Cannot read this probe's saved alert state; starting it afresh.");
            }
        }
        let others = store.other_locations(location)?;
        if !others.is_empty() {
            tracing::warn!(
                location,
                others = ?others,
                "The data directory holds alert state of other locations; this agent leaves it alone, so alerts firing there are not resolved from here."
            );
        }
        let firing = alerting.firing().len();
        if firing > 0 {
            tracing::info!(firing, "Restored alert state: alerts still firing.");
        }
        let (active, _) = watch::channel(Arc::new(Vec::new()));
        let paging = Paging {
            state: Mutex::new(PagingState {
                alerting,
                unsaved: Unsaved::default(),
                last_commit: Instant::now(),
                failed_commits: 0,
                retry_at: None,
                last_publish: Instant::now(),
                board_stale: false,
            }),
            store: store.clone(),
            location: location.to_owned(),
            metrics,
            active,
            receivers: Mutex::new(Tasks::default()),
            pacing: Arc::default(),
            models: Mutex::new(super::model_watch::ModelWatch::new(store.clone(), location)),
            api_base: api_base.to_owned(),
            notice_receivers: Mutex::default(),
        };
        paging.publish(
            &mut paging.state.lock().expect("paging lock").alerting,
            SystemTime::now(),
        );
        Ok(paging)
    }

    /// New rules and receivers: delivery loops of changed receivers are replaced (the
    /// old one finishes its current send first; queued notifications stay in the
    /// outbox), and alerts of removed probes resolve.
    pub(super) fn configure(&self, config: &Config, receivers: Vec<Receiver>) {
        {
            let mut running = self.receivers.lock().expect("receivers lock");
            let mut replaced =
                running.stop_unless(|name, d| config.receivers.iter().any(|c| c.name == name && d.runs(c)));
            for receiver in receivers {
                if running.contains(receiver.name()) {
                    continue;
                }
                let wake = Arc::new(Notify::new());
                let config = receiver.config.clone();
                let previous = replaced.remove(receiver.name());
                let cx = DeliveryContext {
                    store: self.store.clone(),
                    metrics: self.metrics.clone(),
                    active: self.active.subscribe(),
                    pacing: self.pacing.clone(),
                };
                let name = config.name.clone();
                let delivering: Delivering = Running::spawn(config, wake.clone(), |cancel| {
                    notify::deliver(Arc::new(receiver), cx, wake, cancel, previous)
                });
                running.insert(name, delivering);
            }
        }
        // Notifications for receivers no longer in the file would wait forever.
        if let Ok(pending) = self.store.pending_counts() {
            for (receiver, n) in pending {
                if !config.receivers.iter().any(|r| r.name == receiver) {
                    tracing::warn!(receiver = %receiver, dropped = n, "Dropping notifications queued for a receiver that is no longer configured.");
                    if let Err(e) = self.store.remove_receiver(&receiver) {
                        tracing::error!(error = %e, "Cannot drop them.");
                    }
                    self.metrics.notifications_pending(&receiver, 0);
                }
            }
        }
        for r in &config.receivers {
            if let Ok(n) = self.store.pending_count(&r.name) {
                self.metrics.notifications_pending(&r.name, n);
            }
        }
        *self.notice_receivers.lock().expect("notice receivers lock") = notice_receivers(config);
        let rules = config
            .probes
            .iter()
            .map(|p| {
                let rules = Rules {
                    alert: p.alert.clone(),
                    slo: p.slo.clone(),
                };
                (p.name.clone(), rules)
            })
            .collect();
        let now = SystemTime::now();
        let mut state = self.state.lock().expect("paging lock");
        state.alerting.set_time_zone(config.agent.timezone);
        let elsewhere: Vec<String> = config.other_shards.iter().map(|p| p.name.to_string()).collect();
        let changes = state.alerting.configure(rules, &elsewhere, now);
        state.unsaved.fold(changes);
        self.commit(&mut state, now);
        if state.board_stale {
            self.publish_board(&mut state, now);
        }
    }

    /// Folds one run in. Most runs change nothing worth saving and return at once;
    /// a change waits for the commit window ([`Paging::settle`] commits it when no more
    /// runs come).
    pub(super) fn observe(&self, outcome: &Outcome) {
        let now = SystemTime::now();
        let mut state = self.state.lock().expect("paging lock");
        let changes = state.alerting.observe(outcome, now);
        state.unsaved.fold(changes);
        if state.last_commit.elapsed() >= COMMIT_WINDOW && state.may_retry() {
            self.commit_blocking(&mut state, now);
        }
    }

    /// How long until something waiting is due: a commit, or a republish of the board.
    pub(super) fn next_due(&self) -> Option<Duration> {
        let state = self.state.lock().expect("paging lock");
        let retry = state
            .retry_at
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(Instant::now()));
        let commit = (!state.unsaved.is_empty()).then(|| {
            COMMIT_WINDOW
                .saturating_sub(state.last_commit.elapsed())
                .max(retry)
        });
        // The board waits for what it shows to be committed.
        let publish = state.board_stale.then(|| {
            let publish = PUBLISH_EVERY.saturating_sub(state.last_publish.elapsed());
            if state.unsaved.is_empty() {
                publish
            } else {
                publish.max(retry)
            }
        });
        commit.into_iter().chain(publish).min()
    }

    /// Commits and republishes what is due, or everything with `all` (at shutdown).
    pub(super) fn settle(&self, all: bool) {
        let now = SystemTime::now();
        let mut state = self.state.lock().expect("paging lock");
        let publish_due = state.board_stale && (all || state.last_publish.elapsed() >= PUBLISH_EVERY);
        // The board shows the state machine as it is now, so whatever it decided is
        // committed first: nothing may be visible that a crash could take back.
        if (all || publish_due || state.last_commit.elapsed() >= COMMIT_WINDOW) && (all || state.may_retry())
        {
            self.commit_blocking(&mut state, now);
        }
        if state.board_stale
            && state.unsaved.is_empty()
            && (all || state.last_publish.elapsed() >= PUBLISH_EVERY)
        {
            self.publish_board(&mut state, now);
        }
    }

    fn publish_board(&self, state: &mut PagingState, now: SystemTime) {
        self.publish(&mut state.alerting, now);
        state.last_publish = Instant::now();
        state.board_stale = false;
    }

    /// [`Paging::commit`] with the worker handed over to the blocking pool meanwhile,
    /// still under the paging lock, so commits keep their order.
    fn commit_blocking(&self, state: &mut PagingState, now: SystemTime) {
        if state.unsaved.is_empty() {
            return;
        }
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            tokio::task::block_in_place(|| self.commit(state, now));
        } else {
            self.commit(state, now);
        }
    }

    /// Saves state and enqueues notifications in one transaction, publishes the alert
    /// board, then wakes the delivery loops. Runs under the paging lock, so commits
    /// keep their order.
    fn commit(&self, state: &mut PagingState, now: SystemTime) {
        state.last_commit = Instant::now();
        if state.unsaved.is_empty() {
            return;
        }
        let all = std::mem::take(&mut state.unsaved);
        let configured: Vec<String> = self
            .receivers
            .lock()
            .expect("receivers lock")
            .names()
            .cloned()
            .collect();
        let mut rows = Vec::new();
        for n in &all.notifications {
            let payload = serde_json::to_string(n).expect("notifications serialize");
            for r in &n.receivers {
                if configured.contains(r) {
                    rows.push((r.clone(), payload.clone()));
                } else {
                    tracing::warn!(receiver = %r, id = %n.id, "Not queued: the receiver is no longer configured.");
                }
            }
        }
        let saved: Vec<(String, Option<String>)> =
            all.saved.iter().map(|(p, v)| (p.clone(), v.clone())).collect();
        if let Err(e) = self.store.commit(&self.location, &saved, &rows, now) {
            state.failed_commits += 1;
            let wait = RETRY_FIRST
                .saturating_mul(1 << (state.failed_commits - 1).min(16))
                .min(RETRY_MAX);
            state.retry_at = Some(Instant::now() + wait);
            // Said on the first failure and then as the waits double: a disk that stays
            // full is a handful of lines, not one per try.
            if state.failed_commits.is_power_of_two() {
                tracing::error!(error = %e, pending = all.notifications.len(), failures = state.failed_commits, retry_in = ?wait, "Cannot save alert state and notifications; retrying, nothing is lost meanwhile.");
            }
            // In front of what was decided since: the order of the pages holds.
            let later = std::mem::replace(&mut state.unsaved, all);
            state.unsaved.append(later);
            return;
        }
        if state.failed_commits > 0 {
            tracing::info!(
                failures = state.failed_commits,
                "Alert state and notifications saved again."
            );
            state.failed_commits = 0;
            state.retry_at = None;
        }
        if !all.notifications.is_empty() || state.last_publish.elapsed() >= PUBLISH_EVERY {
            self.publish_board(state, now);
        } else {
            state.board_stale = true;
        }
        if !all.notifications.is_empty() {
            self.wake(&rows);
        }
    }

    /// Wakes the delivery loops of the receivers `rows` were queued for, once saved, and
    /// updates their pending gauges.
    fn wake(&self, rows: &[(String, String)]) {
        let receivers = self.receivers.lock().expect("receivers lock");
        let mut woken: Vec<&String> = Vec::new();
        for (r, _) in rows {
            if woken.contains(&r) {
                continue;
            }
            woken.push(r);
            if let Some(d) = receivers.get(r) {
                d.shared.notify_one();
            }
            if let Ok(pending) = self.store.pending_count(r) {
                self.metrics.notifications_pending(r, pending);
            }
        }
    }

    /// The alert board for the API and Alertmanager re-sends, and the firing gauge.
    fn publish(&self, alerting: &mut Alerting, now: SystemTime) {
        let firing: Vec<(&'static str, &'static str)> = alerting
            .firing()
            .iter()
            .map(|a| (a.condition.as_str(), a.severity.as_str()))
            .collect();
        self.metrics.alerts_firing(&firing);
        self.active.send_replace(Arc::new(alerting.active(now)));
    }

    /// Stores a probe's change of served model (or its first identity) as an event,
    /// and in the same transaction queues its notice ([`crate::alert::model_change_notice`])
    /// for the probe's notice receivers. A notice, never a page: it opens no alert and
    /// moves no streak. A first identity is a baseline: stored, told to nobody.
    pub(super) fn observe_model(&self, outcome: &Outcome) {
        let Some(change) = self
            .models
            .lock()
            .expect("models lock")
            .observe(outcome, &self.metrics)
        else {
            return;
        };
        let mut rows = Vec::new();
        if let Some(before) = &change.before {
            let receivers: Vec<String> = {
                let chosen = self.notice_receivers.lock().expect("notice receivers lock");
                let running = self.receivers.lock().expect("receivers lock");
                chosen
                    .get(&change.probe)
                    .into_iter()
                    .flatten()
                    .filter(|r| running.contains(r))
                    .cloned()
                    .collect()
            };
            if !receivers.is_empty() {
                let site = crate::alert::ChangeSite {
                    probe: &outcome.probe,
                    location: &self.location,
                    api_base: &self.api_base,
                };
                let n = crate::alert::model_change_notice(
                    &site,
                    change.at,
                    &before.summary,
                    &change.after.summary,
                    receivers,
                );
                let payload = serde_json::to_string(&n).expect("notifications serialize");
                rows = n.receivers.iter().map(|r| (r.clone(), payload.clone())).collect();
            }
        }
        let save = || self.store.record_model_change(&change, &rows, SystemTime::now());
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let saved = if multi_thread {
            tokio::task::block_in_place(save)
        } else {
            save()
        };
        match saved {
            Err(e) => {
                tracing::error!(probe = %change.probe, error = %e, "Cannot store the change of served model.");
            }
            Ok(()) if !rows.is_empty() => self.wake(&rows),
            Ok(()) => {}
        }
    }

    pub(super) fn stop(&self) {
        self.receivers.lock().expect("receivers lock").cancel_all();
    }
}

/// Per probe, the receivers its config chooses for model change notices, less those
/// that take none (Alertmanager, a PagerDuty behind an unknown URL), each of which is
/// said once.
fn notice_receivers(config: &Config) -> HashMap<String, Vec<String>> {
    let mut refused: Vec<&str> = Vec::new();
    let mut out = HashMap::new();
    for p in &config.probes {
        let mut chosen = Vec::new();
        for name in &p.alert.model_change_receivers {
            let Some(r) = config.receivers.iter().find(|r| &r.name == name) else {
                continue;
            };
            match notify::takes_notices(r) {
                Ok(()) => chosen.push(name.clone()),
                Err(why) => {
                    if !refused.contains(&name.as_str()) {
                        refused.push(name);
                        tracing::info!(receiver = %name, why, "This receiver is told of no model changes.");
                    }
                }
            }
        }
        out.insert(p.name.to_string(), chosen);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store whose commits fail (its table gone, as a full or broken disk fails them),
    /// then work again.
    #[test]
    fn failed_commits_wait_doubling_and_lose_nothing() {
        let dir = std::env::temp_dir().join(format!("inferprobe-paging-retry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Arc::new(AlertStore::open(&dir).unwrap());
        let metrics = Arc::new(Metrics::new("here"));
        let paging = Paging::open(store, "here", "http://agent", metrics).unwrap();
        let db = rusqlite::Connection::open(dir.join(crate::store::DB_FILE)).unwrap();
        db.execute_batch("ALTER TABLE alert_state RENAME TO away")
            .unwrap();
        let decide = |probe: &str| {
            let mut state = paging.state.lock().unwrap();
            state
                .unsaved
                .saved
                .insert(probe.to_owned(), Some("{}".to_owned()));
            state.last_commit = Instant::now() - Duration::from_secs(1);
            // The board is due too: it used to make every retry due at once.
            state.board_stale = true;
            state.last_publish = Instant::now() - Duration::from_secs(10);
        };
        decide("a");
        paging.settle(false);
        let first = paging.next_due().expect("a retry is pending");
        assert!(first > Duration::from_millis(100), "retried at once: {first:?}");
        // Not due yet: settle tries nothing (the count stays).
        paging.settle(false);
        assert_eq!(paging.state.lock().unwrap().failed_commits, 1);
        // Due: tried, failed again, and the wait doubled.
        paging.state.lock().unwrap().retry_at = Some(Instant::now());
        decide("b");
        paging.settle(false);
        let second = paging.next_due().unwrap();
        assert_eq!(paging.state.lock().unwrap().failed_commits, 2);
        assert!(
            second > first + Duration::from_millis(100),
            "{first:?} then {second:?}"
        );
        // The disk is back: both decisions are saved, in one commit.
        db.execute_batch("ALTER TABLE away RENAME TO alert_state")
            .unwrap();
        paging.state.lock().unwrap().retry_at = Some(Instant::now());
        paging.settle(false);
        let state = paging.state.lock().unwrap();
        assert_eq!(state.failed_commits, 0);
        assert!(state.unsaved.is_empty());
        drop(state);
        let saved: Vec<String> = paging
            .store
            .alert_states("here")
            .unwrap()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(saved, ["a", "b"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
