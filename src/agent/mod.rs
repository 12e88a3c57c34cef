//! The running daemon: [`Agent`] wires the modules together. It owns the outcome
//! channel, the scheduler (one timer for every probe), the fan-out loop, paging, the remote_write
//! pusher and the HTTP server; it applies reloads (build everything first, then swap)
//! and drains runs in flight on shutdown.
//!
//! - mod.rs: `Agent`: start, apply (diff, build, swap), shutdown.
//! - task.rs: the one handle on a task started from config (the pusher, delivery
//!   loops): compare the config, cancel the old task, start the new one, hand over.
//! - fanout.rs: the single consumer of the scheduler's events, and `log_outcome`.
//! - paging.rs: the alert state machine wired to the store and the delivery loops.
//!
//! The only module that wires siblings: it may import any of them, and none imports it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Schedule;
use crate::config::{Config, MetricsDetail, ProbeConfig, RemoteWriteConfig, TracingConfig};
use crate::metrics::Metrics;
use crate::net::TlsRoots;
use crate::notify::{Receiver, ReceiverError};
use crate::outcome::ProbeIdentity;
use crate::probe::ReadyProbe;
use crate::probe::lane::lane_key;
use crate::probe::{BuildContext, BuildError};
use crate::push::Pusher;
use crate::schedule::phase::Placing;
use crate::schedule::{Scheduled, Scheduler};
use crate::server;
use crate::store::{AlertStore, HistoryReader, HistoryWriter, Latest, StoreError};

mod fanout;
mod model_watch;
mod paging;
pub mod reporting;
mod task;

use fanout::{Current, fan_out};
use paging::Paging;
use task::Running;

/// How long a finished run may take to reach the history (queue and group commit), with
/// a wide margin.
const HISTORY_SLACK: Duration = Duration::from_secs(5);

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
    RemoteWrite(crate::net::TlsSetupError),
    #[error("agent.tracing: {0}")]
    Tracing(crate::otlp::OtlpError),
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
    /// agent.timezone, which the status page reads: a reload changes it in place.
    time_zone: Arc<std::sync::RwLock<crate::time_zone::TimeZone>>,
    /// The remote_write pusher, when configured.
    push: Option<Running<RemoteWriteConfig>>,
    /// The weekly report on `report.schedule`, when set.
    report: Option<Running<reporting::Scheduled>>,
    /// The store's file, which the scheduled report reads.
    db: PathBuf,
    /// Where the fan-out offers runs as OTLP spans (agent.tracing).
    spans: Arc<crate::otlp::Spans>,
    /// The OTLP exporter sending them, when configured.
    export: Option<Running<TracingConfig>>,
    /// `host:port` a scrape would call this agent: the pushed `instance` label.
    instance: String,
    /// Shared by every probe's identity.
    location: Arc<str>,
    build: BuildContext,
    scheduler: Scheduler<ReadyProbe>,
    /// The probes on the scheduler's grid, by name; each handle holds the built probe,
    /// whose config a reload compares with the new one (kept once, not beside a copy).
    probes: HashMap<Arc<str>, Scheduled<ReadyProbe>>,
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
        let store = Arc::new(AlertStore::open(&data_dir)?);
        let store_path = store.path().to_path_buf();
        let history = Arc::new(HistoryWriter::start(store.path(), config.agent.history)?);
        let reader = Arc::new(HistoryReader::open(store.path())?);
        let settle_ms = Arc::new(AtomicU64::new(0));
        let time_zone = Arc::new(std::sync::RwLock::new(config.agent.timezone));
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
        let runs = TaskTracker::new();
        let current = Current::default();
        let spans = Arc::new(crate::otlp::Spans::default());
        let fanout = tokio::spawn(fan_out(
            rx,
            metrics.clone(),
            latest.clone(),
            paging.clone(),
            history.clone(),
            current.clone(),
            spans.clone(),
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
                time_zone: time_zone.clone(),
                ready: ready.clone(),
                location: location.clone(),
                started_at: SystemTime::now(),
                board: Arc::default(),
                probe_list: Arc::default(),
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
            time_zone,
            push: None,
            report: None,
            db: store_path,
            spans,
            export: None,
            instance,
            location: location.into(),
            build: BuildContext::new(),
            scheduler: Scheduler::start(tx, runs.clone()),
            probes: HashMap::new(),
            current,
            runs,
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
    ///
    /// The steps: `diff` against what runs, `build` what is new or changed, `swap` it
    /// in, report what changed.
    pub fn apply(&mut self, config: &Config) -> Result<ReloadSummary, AgentError> {
        let diff = self.diff(config);
        let built = self.build(config, &diff.to_build)?;
        self.swap(config, built);
        Ok(diff.summary)
    }

    /// Which probes are new or changed (to be built), and the counts a reload reports.
    fn diff<'a>(&self, config: &'a Config) -> Diff<'a> {
        let mut summary = ReloadSummary::default();
        let mut to_build = Vec::new();
        for p in &config.probes {
            match self.probes.get(&p.name) {
                Some(s) if s.runner().built_from(p) => summary.unchanged += 1,
                existing => {
                    if existing.is_some() {
                        summary.changed += 1;
                    } else {
                        summary.added += 1;
                    }
                    to_build.push(p);
                }
            }
        }
        let wanted: HashSet<&str> = config.probes.iter().map(|p| &*p.name).collect();
        summary.removed = self.probes.keys().filter(|n| !wanted.contains(&***n)).count();
        Diff { summary, to_build }
    }

    /// Builds the probes in `to_build`, every receiver and, when it is new or changed,
    /// the remote_write pusher; nothing running changes.
    fn build(&mut self, config: &Config, to_build: &[&Arc<ProbeConfig>]) -> Result<Built, AgentError> {
        // Re-read the trust store and CA files: a reload is how rotated CAs take effect.
        self.build.roots = TlsRoots::system();
        // The new config's secrets are in force while it is built (shown endpoints use
        // them); if it is refused, the running config's are back when this drops.
        let secrets = self
            .build
            .redactor
            .replace_until_kept(crate::redact::Redactor::for_config(config));
        let probes = to_build
            .iter()
            .map(|p| {
                ReadyProbe::build(p, &self.location, &self.build)
                    .map(Arc::new)
                    .map_err(|e| AgentError::Probe(p.name.to_string(), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let receivers = config
            .receivers
            .iter()
            .map(|c| Receiver::build(c.clone(), &self.build.roots, self.build.redactor.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let pusher = match &config.agent.remote_write {
            Some(rw) if !task::runs_as(self.push.as_ref(), Some(rw)) => Some(
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
        let spans = match &config.agent.tracing {
            Some(t) if !task::runs_as(self.export.as_ref(), Some(t)) => Some(
                crate::otlp::Spans::build(t, &self.build.roots, self.build.redactor.clone(), &self.location)
                    .map_err(AgentError::Tracing)?,
            ),
            _ => None,
        };
        let report = match reporting::Scheduled::of(config) {
            Some(s) if !task::runs_as(self.report.as_ref(), Some(&s)) => {
                let receivers = s
                    .receivers
                    .iter()
                    .map(|c| {
                        Receiver::build(c.clone(), &self.build.roots, self.build.redactor.clone())
                            .map(Arc::new)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some((s, receivers))
            }
            _ => None,
        };
        secrets.keep();
        Ok(Built {
            report,
            probes,
            receivers,
            pusher,
            spans,
        })
    }

    /// Puts what was built in place of what it replaces: stops the probes that changed
    /// or went, tells everything that consumes outcomes, then starts the new loops.
    fn swap(&mut self, config: &Config, built: Built) {
        // Probes that stop or change: their loops end; their gauges go (a changed
        // probe's labels may differ); their runs in flight finish, and the busy flag
        // passes to the replacement so old and new runs never overlap.
        let wanted: HashMap<&str, &Arc<ProbeConfig>> = config.probes.iter().map(|p| (&*p.name, p)).collect();
        let mut stopped: HashMap<Arc<str>, Scheduled<ReadyProbe>> = self
            .probes
            .extract_if(|name, s| !wanted.get(&**name).is_some_and(|p| s.runner().built_from(p)))
            .inspect(|(_, s)| s.stop())
            .collect();
        // Unchanged probes whose endpoint gained or lost a probe take their new slot:
        // the same built probe, put back on the grid at its new phase.
        let locations = &config.agent.locations;
        if !locations.is_empty() && !locations.iter().any(|l| **l == *self.location) {
            tracing::warn!(
                location = %self.location,
                locations = %locations.join(", "),
                "agent.locations does not list this agent's location: its part of each slot comes from its name, and it may probe a server at the same moment as a listed region."
            );
        }
        let phases = phases(config, &self.location);
        let moved: Vec<Scheduled<ReadyProbe>> = self
            .probes
            .extract_if(|name, s| phases.get(name).is_some_and(|p| *p != s.phase()))
            .map(|(_, s)| s)
            .inspect(|s| s.stop())
            .collect();
        self.scheduler.forget_stopped();
        let retired: Vec<Arc<ProbeIdentity>> =
            stopped.values().map(|s| s.runner().identity.clone()).collect();
        let added: Vec<Arc<ProbeIdentity>> = built.probes.iter().map(|p| p.identity.clone()).collect();
        // Everything that consumes outcomes learns the new probes before their loops
        // start: a probe whose first tick is due at once would otherwise finish a run
        // the fan-out does not yet count as current, and that run would be lost.
        *self.current.write().expect("current lock") = self
            .probes
            .values()
            .chain(&moved)
            .map(|s| (s.runner().config.name.clone(), s.runner().identity.clone()))
            .chain(
                built
                    .probes
                    .iter()
                    .map(|p| (p.config.name.clone(), p.identity.clone())),
            )
            .collect();
        self.latest.configure(config.probes.iter().map(|p| &p.name));
        self.metrics.configured(
            self.probes.len() + moved.len() + built.probes.len(),
            config.agent.metrics == MetricsDetail::Full,
            &added,
            &retired,
        );
        self.paging.configure(config, built.receivers);
        self.history.set_limits(config.agent.history);
        *self.time_zone.write().unwrap_or_else(|p| p.into_inner()) = config.agent.timezone;
        for probe in built.probes {
            let busy = stopped
                .remove(&probe.config.name)
                .map(|s| s.busy().clone())
                .unwrap_or_default();
            self.start_probe(probe, &phases, busy);
        }
        for s in moved {
            self.start_probe(s.runner().clone(), &phases, s.busy().clone());
        }
        let longest = config.probes.iter().map(|p| p.timeout).max().unwrap_or_default();
        let settle = longest + HISTORY_SLACK;
        self.settle_ms.store(
            u64::try_from(settle.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.swap_pusher(config.agent.remote_write.as_ref(), built.pusher);
        self.swap_report(reporting::Scheduled::of(config), built.report);
        self.swap_export(config.agent.tracing.as_ref(), built.spans);
    }

    /// agent.tracing: the OTLP exporter started, replaced or stopped as the file says.
    /// The fan-out offers to the new queue at once; the old exporter sends what its queue
    /// holds, then ends, and nothing waits for it.
    fn swap_export(&mut self, wanted: Option<&TracingConfig>, exporter: Option<crate::otlp::Exporter>) {
        if task::runs_as(self.export.as_ref(), wanted) {
            return;
        }
        let export = self.spans.connect(exporter.filter(|_| wanted.is_some()));
        if let Some(old) = self.export.take() {
            drop(old.stop());
        }
        self.export = wanted
            .zip(export)
            .map(|(config, export)| Running::spawn(config.clone(), (), |cancel| export.run(cancel)));
    }

    /// remote_write: started, replaced or stopped as the file says. A replacement starts
    /// pushing once the old pusher has finished, so samples stay in time order.
    fn swap_pusher(&mut self, wanted: Option<&RemoteWriteConfig>, pusher: Option<Pusher>) {
        if task::runs_as(self.push.as_ref(), wanted) {
            return;
        }
        let previous = self.push.take().map(|old| old.stop());
        self.push = wanted
            .zip(pusher)
            .map(|(rw, pusher)| Running::spawn(rw.clone(), (), |cancel| pusher.run(cancel, previous)));
    }

    /// report.schedule: the scheduled report started, replaced or stopped as the file
    /// says; a replacement does not wait for the old one (a report in the middle of its
    /// sending finishes it).
    fn swap_report(
        &mut self,
        wanted: Option<reporting::Scheduled>,
        built: Option<(reporting::Scheduled, Vec<Arc<Receiver>>)>,
    ) {
        if task::runs_as(self.report.as_ref(), wanted.as_ref()) {
            return;
        }
        if let Some(old) = self.report.take() {
            old.cancel();
        }
        let db = self.db.clone();
        self.report = built.map(|(scheduled, receivers)| {
            Running::spawn(scheduled.clone(), (), |cancel| {
                scheduled.run(receivers, db, cancel)
            })
        });
    }

    fn start_probe(
        &mut self,
        probe: Arc<ReadyProbe>,
        phases: &HashMap<Arc<str>, Duration>,
        busy: Arc<AtomicBool>,
    ) {
        let name = probe.config.name.clone();
        let schedule = probe.config.schedule.clone();
        let phase = phases.get(&name).copied().unwrap_or_default();
        let scheduled = self.scheduler.add(probe, schedule, phase, busy);
        self.probes.insert(name, scheduled);
    }

    /// Stops scheduling, waits up to `drain` for runs in flight (their outcomes are
    /// still recorded), then stops the server. Returns whether every run finished.
    pub async fn shutdown(self, drain: Duration) -> bool {
        self.scheduler.stop_all();
        self.runs.close();
        let started = tokio::time::Instant::now();
        let drained = tokio::time::timeout(drain, self.runs.wait()).await.is_ok();
        if !drained {
            tracing::warn!(
                running = self.runs.len(),
                "Drain deadline passed: these runs were still running and are abandoned."
            );
        }
        // The timer's task ends with the scheduler, and its sender with it.
        drop(self.scheduler);
        // The fan-out loop ends once every sender (the timer, and finished runs handing over
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
        // The last runs' spans: no more are taken, what is queued goes out, within a few
        // seconds.
        self.spans.connect(None);
        if let Some(export) = self.export {
            crate::otlp::Export::drain(export.stop(), Duration::from_secs(5)).await;
        }
        if let Some(push) = self.push {
            // Its last push: what the runs just drained left in the metrics.
            let push = push.stop();
            let _ = tokio::time::timeout(Duration::from_secs(6), push).await;
        }
        self.server_shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.server).await;
        drained
    }
}

/// `http://<host>:<port>` of this agent, for links in pages when `agent.external_url`
/// is not set: the host name when listening on all addresses.
pub fn default_api_base(addr: Option<SocketAddr>) -> String {
    let Some(addr) = addr else {
        return format!("http://localhost:{}", crate::server::DEFAULT_PORT);
    };
    let host = if addr.ip().is_unspecified() {
        crate::net::host_name().unwrap_or_else(|| "localhost".into())
    } else {
        match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        }
    };
    format!("http://{host}:{}", addr.port())
}

/// Each interval probe's phase (schedule/phase.rs), placed over every probe of the file,
/// the other shards' included: probes of one endpoint take their own slots whichever
/// agent of the region runs them.
fn phases(config: &Config, location: &str) -> HashMap<Arc<str>, Duration> {
    let all: Vec<&Arc<ProbeConfig>> = config.probes.iter().chain(&config.other_shards).collect();
    let lanes: Vec<String> = all
        .iter()
        .map(|p| lane_key(&p.url, p.traffic.server.as_deref()))
        .collect();
    let placing: Vec<(Arc<str>, Placing)> = all
        .iter()
        .zip(&lanes)
        .filter_map(|(p, lane)| match p.schedule {
            Schedule::Interval(period) => Some((
                p.name.clone(),
                Placing {
                    name: &p.name,
                    lane,
                    period,
                    cold: p.traffic.cold.is_some(),
                },
            )),
            Schedule::Cron { .. } => None,
        })
        .collect();
    let places: Vec<Placing> = placing.iter().map(|(_, p)| *p).collect();
    let at = crate::schedule::phase::phases(&places, location, &config.agent.locations);
    placing.into_iter().map(|(n, _)| n).zip(at).collect()
}

/// What a reload changes, decided before anything is built.
struct Diff<'a> {
    summary: ReloadSummary,
    /// New and changed probes, in file order.
    to_build: Vec<&'a Arc<ProbeConfig>>,
}

/// Everything a config needs that is not running yet.
struct Built {
    /// Each in its final place from the start: a list of ~1.7 KB probes, moved into
    /// `Arc`s one by one, was 27 MB beside them at 10,000 probes.
    probes: Vec<Arc<ReadyProbe>>,
    receivers: Vec<Receiver>,
    /// Only when remote_write is new or changed.
    pusher: Option<Pusher>,
    /// Only when agent.tracing is new or changed.
    spans: Option<crate::otlp::Exporter>,
    /// Only when report.schedule (or a receiver it names) is new or changed.
    report: Option<(reporting::Scheduled, Vec<Arc<Receiver>>)>,
}
