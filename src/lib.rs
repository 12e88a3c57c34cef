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
//! This file is the only one that wires siblings together: [`Agent`] owns the outcome
//! channel, one scheduler task per probe, the fan-out loop, paging and the HTTP server,
//! applies reloads, and drains runs in flight on shutdown.
#![forbid(unsafe_code)]

pub mod alert;
pub mod config;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod human;
pub mod metrics;
pub mod net;
pub mod notify;
pub mod outcome;
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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::alert::{Alerting, Changes, Firing, Rules};
use crate::config::{Config, ProbeConfig, ReceiverConfig, RemoteWriteConfig};
use crate::metrics::Metrics;
use crate::net::TlsRoots;
use crate::notify::{Outbox, Receiver, ReceiverError};
use crate::outcome::{Outcome, ProbeIdentity};
use crate::probe::ReadyProbe;
use crate::probe::{BuildContext, BuildError};
use crate::push::Pusher;
use crate::schedule::Report;
use crate::store::{HistoryReader, HistoryWriter, Latest, RunRecord, Store, StoreError};

/// How long a finished run may take to reach the history (queue and group commit), with
/// a wide margin.
const HISTORY_SLACK: Duration = Duration::from_secs(5);

/// Builds every probe of a config, or says which one cannot be built.
pub fn build_probes(
    config: &Config,
    location: &str,
    cx: &BuildContext,
) -> Result<Vec<ReadyProbe>, (String, BuildError)> {
    config
        .probes
        .iter()
        .map(|p| ReadyProbe::build(p, location, cx).map_err(|e| (p.name.clone(), e)))
        .collect()
}

struct RunningProbe {
    config: ProbeConfig,
    identity: Arc<ProbeIdentity>,
    cancel: CancellationToken,
    /// Set while a run is in flight.
    busy: Arc<AtomicBool>,
}

/// The identity of each configured probe, by name. An outcome whose identity is not the
/// current one (its probe was removed or changed while the run was in flight) is
/// logged but not recorded, so it cannot bring back a deleted probe's series.
type Current = Arc<std::sync::RwLock<HashMap<String, Arc<ProbeIdentity>>>>;

/// What a reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
    pub unchanged: usize,
}

/// Why the agent cannot start or take a new config.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("probe \"{0}\": {1}")]
    Probe(String, BuildError),
    #[error(transparent)]
    Receiver(#[from] ReceiverError),
    #[error("agent.remote_write: {0}")]
    RemoteWrite(BuildError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AgentError {
    /// A problem with the config file (exit 64), rather than with the machine.
    pub fn is_config(&self) -> bool {
        !matches!(self, AgentError::Store(_))
    }
}

/// What an agent is, besides its config file.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub location: String,
    /// Where the store lives.
    pub data_dir: PathBuf,
    /// The agent's own port: connection limits, TLS, basic auth.
    pub port: server::PortSettings,
}

/// The running daemon.
pub struct Agent {
    pub metrics: Arc<Metrics>,
    pub latest: Arc<Latest>,
    paging: Arc<Paging>,
    history: Arc<HistoryWriter>,
    /// How long after its start a run is surely in the history (the longest timeout
    /// plus the writer's slack), in ms: the results API serves only settled history.
    settle_ms: Arc<AtomicU64>,
    /// The remote_write pusher, when configured.
    push: Option<Pushing>,
    /// `host:port` a scrape would call this agent: the pushed `instance` label.
    instance: String,
    location: String,
    build: BuildContext,
    reports: mpsc::Sender<Report>,
    running: HashMap<String, RunningProbe>,
    current: Current,
    /// Runs in flight, so shutdown can wait for them.
    runs: TaskTracker,
    fanout: JoinHandle<()>,
    server: JoinHandle<std::io::Result<()>>,
    server_shutdown: CancellationToken,
}

impl Agent {
    /// Opens the store, starts serving on `listener` and scheduling `config`'s probes.
    pub fn start(
        config: &Config,
        settings: AgentSettings,
        listener: TcpListener,
    ) -> Result<Agent, AgentError> {
        let AgentSettings {
            location,
            data_dir,
            port,
        } = settings;
        let metrics = Arc::new(Metrics::new(&location));
        let latest = Arc::new(Latest::default());
        let ready = Arc::new(AtomicBool::new(false));
        let store = Arc::new(Store::open(&data_dir)?);
        let history = Arc::new(HistoryWriter::start(store.path(), config.agent.history)?);
        let reader = Arc::new(HistoryReader::open(store.path())?);
        let settle_ms = Arc::new(AtomicU64::new(0));
        let api_base = config.agent.external_url.clone().unwrap_or_else(|| {
            let base = default_api_base(listener.local_addr().ok());
            // Links in pages must use the scheme the port speaks.
            if port.web.current().is_tls() {
                base.replacen("http://", "https://", 1)
            } else {
                base
            }
        });
        // The host's own name and port, not external_url: shards behind one URL must
        // still push apart.
        let instance = default_api_base(listener.local_addr().ok()).replace("http://", "");
        let paging = Arc::new(Paging::open(store, &location, &api_base, metrics.clone())?);
        let (tx, rx) = mpsc::channel(4096);
        let current = Current::default();
        let fanout = tokio::spawn(fan_out(
            rx,
            metrics.clone(),
            latest.clone(),
            paging.clone(),
            history.clone(),
            current.clone(),
        ));
        let server_shutdown = CancellationToken::new();
        let server = tokio::spawn(server::serve(
            listener,
            server::ServerState {
                metrics: metrics.clone(),
                latest: latest.clone(),
                alerts: paging.active.subscribe(),
                history: reader,
                settle_ms: settle_ms.clone(),
                ready: ready.clone(),
                location: location.clone(),
                started_at: SystemTime::now(),
                board: Arc::default(),
            },
            port,
            server_shutdown.clone(),
        ));
        let mut agent = Agent {
            metrics,
            latest,
            paging,
            history,
            settle_ms,
            push: None,
            instance,
            location,
            build: BuildContext::new(),
            reports: tx,
            running: HashMap::new(),
            current,
            runs: TaskTracker::new(),
            fanout,
            server,
            server_shutdown,
        };
        if let Err(e) = agent.apply(config) {
            agent.server_shutdown.cancel();
            return Err(e);
        }
        agent.metrics.reloaded(true);
        ready.store(true, Ordering::Release);
        Ok(agent)
    }

    /// Switches to `config`. Every new or changed probe and receiver is built first; if
    /// one cannot be built nothing changes. Unchanged probes keep running on their grid.
    pub fn apply(&mut self, config: &Config) -> Result<ReloadSummary, AgentError> {
        let mut summary = ReloadSummary::default();
        // Re-read the trust store and CA files: a reload is how rotated CAs take effect.
        self.build.roots = TlsRoots::system();
        // The new config's secrets are in force while it is built (shown endpoints use
        // them); if it is refused, the running config's are back when this drops.
        let secrets = self
            .build
            .redactor
            .replace_until_kept(crate::redact::Redactor::for_config(config));
        let mut built = Vec::new();
        for p in &config.probes {
            match self.running.get(&p.name) {
                Some(r) if r.config == *p => summary.unchanged += 1,
                existing => {
                    if existing.is_some() {
                        summary.changed += 1;
                    } else {
                        summary.added += 1;
                    }
                    built.push(
                        ReadyProbe::build(p, &self.location, &self.build)
                            .map_err(|e| AgentError::Probe(p.name.clone(), e))?,
                    );
                }
            }
        }
        let receivers = config
            .receivers
            .iter()
            .map(|c| Receiver::build(c.clone(), &self.build.roots, self.build.redactor.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let pusher = match &config.agent.remote_write {
            Some(rw) if self.push.as_ref().is_none_or(|p| p.config != *rw) => Some(
                Pusher::build(
                    rw.clone(),
                    &self.build.roots,
                    self.build.redactor.clone(),
                    self.metrics.clone(),
                    self.instance.clone(),
                )
                .map_err(AgentError::RemoteWrite)?,
            ),
            _ => None,
        };
        secrets.keep();
        // Probes that stop or change: their loops end; their gauges go (a changed
        // probe's labels may differ); their runs in flight finish, and the busy flag
        // passes to the replacement so old and new runs never overlap.
        let mut retired = Vec::new();
        let mut busy_of: HashMap<String, Arc<AtomicBool>> = HashMap::new();
        let wanted: HashMap<&str, ()> = config.probes.iter().map(|p| (p.name.as_str(), ())).collect();
        self.running.retain(|name, r| {
            let keep = wanted.contains_key(name.as_str()) && !built.iter().any(|b| &b.config.name == name);
            if !keep {
                r.cancel.cancel();
                retired.push(r.identity.clone());
                busy_of.insert(name.clone(), r.busy.clone());
                if !wanted.contains_key(name.as_str()) {
                    summary.removed += 1;
                }
            }
            keep
        });
        let added: Vec<Arc<ProbeIdentity>> = built.iter().map(|p| p.identity.clone()).collect();
        let mut loops = Vec::with_capacity(built.len());
        for probe in built {
            let cancel = CancellationToken::new();
            let busy = busy_of.remove(&probe.config.name).unwrap_or_default();
            let running = RunningProbe {
                config: probe.config.clone(),
                identity: probe.identity.clone(),
                cancel: cancel.clone(),
                busy: busy.clone(),
            };
            self.running.insert(running.config.name.clone(), running);
            loops.push((probe, cancel, busy));
        }
        // Everything that consumes outcomes learns the new probes before their loops
        // start: a probe whose first tick is due at once would otherwise finish a run
        // the fan-out does not yet count as current, and that run would be lost.
        *self.current.write().expect("current lock") = self
            .running
            .values()
            .map(|r| (r.config.name.clone(), r.identity.clone()))
            .collect();
        self.latest
            .configure(config.probes.iter().map(|p| p.name.as_str()));
        self.metrics.configured(self.running.len(), &added, &retired);
        self.paging.configure(config, receivers);
        self.history.set_limits(config.agent.history);
        for (probe, cancel, busy) in loops {
            let schedule = probe.config.schedule.clone();
            tokio::spawn(schedule::run_loop(
                Arc::new(probe),
                schedule,
                self.reports.clone(),
                cancel,
                self.runs.clone(),
                busy,
            ));
        }
        let longest = config.probes.iter().map(|p| p.timeout).max().unwrap_or_default();
        let settle = longest + HISTORY_SLACK;
        self.settle_ms.store(
            u64::try_from(settle.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        // remote_write: started, replaced or stopped as the file says.
        let unchanged = match (&self.push, &config.agent.remote_write) {
            (Some(p), Some(rw)) => p.config == *rw,
            (None, None) => true,
            _ => false,
        };
        if !unchanged {
            let previous = self.push.take().map(|old| {
                old.cancel.cancel();
                old.task
            });
            if let Some(pusher) = pusher {
                let cancel = CancellationToken::new();
                self.push = Some(Pushing {
                    config: config.agent.remote_write.clone().expect("configured"),
                    cancel: cancel.clone(),
                    task: tokio::spawn(pusher.run(cancel, previous)),
                });
            }
        }
        Ok(summary)
    }

    /// Stops scheduling, waits up to `drain` for runs in flight (their outcomes are
    /// still recorded), then stops the server. Returns whether every run finished.
    pub async fn shutdown(self, drain: Duration) -> bool {
        for r in self.running.values() {
            r.cancel.cancel();
        }
        self.runs.close();
        let started = tokio::time::Instant::now();
        let drained = tokio::time::timeout(drain, self.runs.wait()).await.is_ok();
        if !drained {
            tracing::warn!(
                running = self.runs.len(),
                "Drain deadline passed: these runs were still running and are abandoned."
            );
        }
        drop(self.reports);
        // The fan-out loop ends once every sender (loops, and finished runs handing over
        // their outcomes) is gone; it gets what is left of the deadline, at least 2 s.
        let left = drain
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(2));
        if tokio::time::timeout(left, self.fanout).await.is_err() {
            tracing::warn!(
                "Outcomes of finished runs were still being recorded at the deadline; the rest are not in the history, metrics or alert state."
            );
        }
        self.paging.stop();
        // The last runs to disk: the writer commits what is queued (even if the fan-out
        // did not end in time and still holds it), then stops.
        let history = self.history.clone();
        let _ = tokio::task::spawn_blocking(move || history.flush()).await;
        if let Ok(history) = Arc::try_unwrap(self.history) {
            let _ = tokio::task::spawn_blocking(move || history.close()).await;
        }
        if let Some(push) = self.push {
            // Its last push: what the runs just drained left in the metrics.
            push.cancel.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(6), push.task).await;
        }
        self.server_shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.server).await;
        drained
    }
}

/// `http://<host>:<port>` of this agent, for links in pages when `agent.external_url`
/// is not set: the host name when listening on all addresses.
fn default_api_base(addr: Option<SocketAddr>) -> String {
    let Some(addr) = addr else {
        return "http://localhost:9464".into();
    };
    let host = if addr.ip().is_unspecified() {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into())
    } else {
        match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        }
    };
    format!("http://{host}:{}", addr.port())
}

/// The running remote_write pusher.
struct Pushing {
    config: RemoteWriteConfig,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

/// A running delivery loop.
struct Delivering {
    config: ReceiverConfig,
    wake: Arc<Notify>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

/// The alert state machine and what it decided but has not saved yet.
struct PagingState {
    alerting: Alerting,
    /// Decisions not yet committed: those of the runs since the last commit, and any a
    /// failed commit left behind (disk full, I/O error), retried with the next one, so a
    /// page is late rather than lost. Nothing here is visible outside: the alert board
    /// is published only after a commit.
    unsaved: Unsaved,
    last_commit: Instant,
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
}

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
struct Paging {
    state: Mutex<PagingState>,
    store: Arc<Store>,
    location: String,
    metrics: Arc<Metrics>,
    active: watch::Sender<Arc<Vec<Firing>>>,
    receivers: Mutex<HashMap<String, Delivering>>,
}

impl Paging {
    /// Opens paging on `store`, restoring the alert state saved before a restart.
    fn open(
        store: Arc<Store>,
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
                last_publish: Instant::now(),
                board_stale: false,
            }),
            store,
            location: location.to_owned(),
            metrics,
            active,
            receivers: Mutex::new(HashMap::new()),
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
    fn configure(&self, config: &Config, receivers: Vec<Receiver>) {
        {
            let mut running = self.receivers.lock().expect("receivers lock");
            let mut replaced = HashMap::new();
            for (name, d) in std::mem::take(&mut *running) {
                if config.receivers.iter().any(|c| c.name == name && *c == d.config) {
                    running.insert(name, d);
                } else {
                    d.cancel.cancel();
                    replaced.insert(name, d.task);
                }
            }
            for receiver in receivers {
                if running.contains_key(receiver.name()) {
                    continue;
                }
                let wake = Arc::new(Notify::new());
                let cancel = CancellationToken::new();
                let config = receiver.config.clone();
                let previous = replaced.remove(receiver.name());
                let task = tokio::spawn(notify::deliver(
                    Arc::new(receiver),
                    Outbox {
                        store: self.store.clone(),
                        metrics: self.metrics.clone(),
                        active: self.active.subscribe(),
                    },
                    wake.clone(),
                    cancel.clone(),
                    previous,
                ));
                running.insert(
                    config.name.clone(),
                    Delivering {
                        config,
                        wake,
                        cancel,
                        task,
                    },
                );
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
        let changes = state.alerting.configure(rules, &config.other_shards, now);
        state.unsaved.fold(changes);
        self.commit(&mut state, now);
        if state.board_stale {
            self.publish_board(&mut state, now);
        }
    }

    /// Folds one run in. Most runs change nothing worth saving and return at once;
    /// a change waits for the commit window ([`Paging::settle`] commits it when no more
    /// runs come).
    fn observe(&self, outcome: &Outcome) {
        let now = SystemTime::now();
        let mut state = self.state.lock().expect("paging lock");
        let changes = state.alerting.observe(outcome, now);
        state.unsaved.fold(changes);
        if state.last_commit.elapsed() >= COMMIT_WINDOW {
            self.commit_blocking(&mut state, now);
        }
    }

    /// How long until something waiting is due: a commit, or a republish of the board.
    fn next_due(&self) -> Option<Duration> {
        let state = self.state.lock().expect("paging lock");
        let commit =
            (!state.unsaved.is_empty()).then(|| COMMIT_WINDOW.saturating_sub(state.last_commit.elapsed()));
        let publish = state
            .board_stale
            .then(|| PUBLISH_EVERY.saturating_sub(state.last_publish.elapsed()));
        commit.into_iter().chain(publish).min()
    }

    /// Commits and republishes what is due, or everything with `all` (at shutdown).
    fn settle(&self, all: bool) {
        let now = SystemTime::now();
        let mut state = self.state.lock().expect("paging lock");
        let publish_due = state.board_stale && (all || state.last_publish.elapsed() >= PUBLISH_EVERY);
        // The board shows the state machine as it is now, so whatever it decided is
        // committed first: nothing may be visible that a crash could take back.
        if all || publish_due || state.last_commit.elapsed() >= COMMIT_WINDOW {
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
            .keys()
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
            tracing::error!(error = %e, pending = all.notifications.len(), "Cannot save alert state and notifications; retrying with the next run.");
            state.unsaved = all;
            return;
        }
        if !all.notifications.is_empty() || state.last_publish.elapsed() >= PUBLISH_EVERY {
            self.publish_board(state, now);
        } else {
            state.board_stale = true;
        }
        if !all.notifications.is_empty() {
            let receivers = self.receivers.lock().expect("receivers lock");
            for (r, _) in &rows {
                if let Some(d) = receivers.get(r) {
                    d.wake.notify_one();
                }
            }
            for r in &configured {
                if let Ok(pending) = self.store.pending_count(r) {
                    self.metrics.notifications_pending(r, pending);
                }
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

    fn stop(&self) {
        for d in self.receivers.lock().expect("receivers lock").values() {
            d.cancel.cancel();
        }
    }
}

/// The single consumer of reports: metrics first, then the stores (latest, history,
/// alert state), then the log line.
async fn fan_out(
    mut rx: mpsc::Receiver<Report>,
    metrics: Arc<Metrics>,
    latest: Arc<Latest>,
    paging: Arc<Paging>,
    history: Arc<HistoryWriter>,
    current: Current,
) {
    let mut history_seen = (u64::MAX, u64::MAX);
    loop {
        let report = match rx.try_recv() {
            Ok(report) => {
                // A steady queue of reports that decide nothing (skipped ticks, runs of
                // replaced probes) must not hold back what is due.
                if paging.next_due() == Some(Duration::ZERO) {
                    paging.settle(false);
                }
                report
            }
            Err(mpsc::error::TryRecvError::Empty) => {
                // Nothing queued: wait for the next report, but no longer than until
                // what paging holds back is due.
                let next = match paging.next_due() {
                    Some(due) => match tokio::time::timeout(due, rx.recv()).await {
                        Ok(next) => next,
                        Err(_) => {
                            paging.settle(false);
                            continue;
                        }
                    },
                    None => rx.recv().await,
                };
                match next {
                    Some(report) => report,
                    None => break,
                }
            }
            Err(mpsc::error::TryRecvError::Disconnected) => break,
        };
        match report {
            Report::Finished(outcome) => {
                let is_current = current
                    .read()
                    .expect("current lock")
                    .get(&outcome.probe.name)
                    .is_some_and(|id| Arc::ptr_eq(id, &outcome.probe));
                let blames_endpoint = outcome
                    .observation
                    .failure()
                    .is_none_or(|f| f.reason.blames_endpoint());
                if is_current {
                    metrics.record(&outcome);
                }
                // The agent's own trouble (`agent_error`) is, like a skipped tick, counted
                // on its health series only: not an endpoint run for the history, the API
                // or paging.
                if is_current && blames_endpoint {
                    latest.record(&outcome);
                    history.record(RunRecord::from_outcome(&outcome));
                    let stats = history.stats();
                    let now = (
                        stats.dropped.load(Ordering::Relaxed),
                        stats.disk_bytes.load(Ordering::Relaxed),
                    );
                    // The figures change about once a second; the gauges follow then.
                    if now != history_seen {
                        metrics.history(now.0, now.1);
                        history_seen = now;
                    }
                    paging.observe(&outcome);
                }
                log_outcome(&outcome);
            }
            Report::Skipped { probe, ticks } => {
                metrics.record_skipped(&probe, ticks);
                tracing::warn!(probe = %probe.name, ticks, "Skipped scheduled runs: the previous run was still going.");
            }
        }
    }
    paging.settle(true);
}

/// One structured line per run.
pub fn log_outcome(outcome: &Outcome) {
    let o = &outcome.observation;
    let ms = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e4).round() / 10.0);
    match o.failure() {
        None => tracing::info!(
            probe = %outcome.probe.name,
            location = %outcome.probe.location,
            result = "success",
            status = o.http_status,
            ttfb_ms = ms(o.ttfb()),
            ttft_ms = ms(o.ttft()),
            total_ms = ms(o.total()),
            output_tokens = o.output_tokens,
            "Probe run finished."
        ),
        Some(f) => tracing::warn!(
            probe = %outcome.probe.name,
            location = %outcome.probe.location,
            result = "failure",
            reason = f.reason.as_str(),
            status = o.http_status,
            ttft_ms = ms(o.ttft()),
            total_ms = ms(o.total()),
            error = %f.message,
            "Probe run failed."
        ),
    }
}
