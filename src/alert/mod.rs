//! Paging decisions: a pure state machine that turns outcomes into firing, reminder and
//! resolved notifications. No I/O and no clock of its own (`now` is passed in), so every
//! path is a unit test; `notify` delivers what it decides and `store` keeps its state.
//!
//! Per probe (and so per location: one agent has one) there are two alerts, told apart
//! by severity, which also makes the dedup key (`inferprobe/<probe>/<location>/<severity>`):
//!
//! - **down** (`InferenceEndpointDown`, severity `critical` by default): fires after
//!   `failure_threshold` consecutive failed runs and resolves after `success_threshold`
//!   consecutive good ones. With the defaults (3 and 2) at a 30 s interval, a dead endpoint
//!   pages about 60-90 s after it died, and one lucky answer does not end the page.
//! - **degraded** (`InferenceEndpointDegraded`, `warning`): the endpoint answers, but its
//!   TTFT or total p95 over the last `slo.window` good runs is above target, a burst's
//!   first-token times spread wider than `slo.burst_spread` (requests queue), or it keeps
//!   answering 429 (throttled, not down, unless `rate_limited: down`). Same thresholds,
//!   counted in evaluations. It never fires while the down alert does: a dead endpoint
//!   is not "slow", and one page is enough.
//!
//! With `alert.warmup_grace`, runs in the endpoint's warm-up (after a restart:
//! probe/lane.rs) do not page: one that failed as a warming server fails (loading, or a
//! timeout) neither starts nor extends a streak, and none is judged for the degraded
//! alert. A good one still counts toward resolving; a refusal or an error still pages.
//!
//! What is persisted ([`ProbeAlerts`] without the latency window) changes only when a
//! streak starts or ends or an alert changes, so a healthy fleet writes nothing.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::config::{AlertConfig, RateLimited, Severity, Slo};
use crate::human::seconds;
use crate::outcome::{FailureReason, Outcome, ProbeIdentity};
use crate::stats::percentile;
use crate::time_zone::TimeZone;

mod kept;
mod notice;
mod words;
use crate::unix_time::unix_ms;
use kept::Kept;
pub use notice::{ChangeSite, model_change_notice};
pub use words::rfc3339;
use words::{Ended, describe_degraded, describe_down, host_of, lasted, resolved_summary, with_failure};

/// How long a resolved alert is still re-sent to Alertmanager, so that a lost "resolved"
/// post is repaired (Prometheus keeps resolved alerts for the same 15 minutes).
pub const RESOLVED_RETENTION: Duration = Duration::from_secs(15 * 60);

/// Which of a probe's two alerts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Condition {
    Down,
    Degraded,
    /// `inferprobe test-alert`.
    Test,
    /// The served model changed: a notice (alert/notice.rs), never a page.
    #[serde(rename = "model_change")]
    ModelChange,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Down => "down",
            Condition::Degraded => "degraded",
            Condition::Test => "test",
            Condition::ModelChange => "model_change",
        }
    }

    pub fn alertname(self) -> &'static str {
        match self {
            Condition::Down => "InferenceEndpointDown",
            Condition::Degraded => "InferenceEndpointDegraded",
            Condition::Test => "InferprobeTestAlert",
            Condition::ModelChange => "InferenceModelChanged",
        }
    }
}

/// What a notification announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertEvent {
    Firing,
    Reminder,
    Resolved,
    /// Something to know, not to act on (a model change): opens nothing, resolves
    /// nothing, wakes nobody.
    Notice,
}

impl AlertEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertEvent::Firing => "firing",
            AlertEvent::Reminder => "reminder",
            AlertEvent::Resolved => "resolved",
            AlertEvent::Notice => "notice",
        }
    }
}

/// The last good run before trouble started, for "it used to take 300 ms".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoodRun {
    pub at: SystemTime,
    pub ttft_seconds: Option<f64>,
    pub total_seconds: Option<f64>,
}

/// Everything a page says, in the receiver-neutral form each receiver formats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub condition: Condition,
    pub severity: Severity,
    pub dedup_key: String,
    pub probe: String,
    pub location: String,
    pub kind: String,
    pub model: String,
    /// Without credentials or query string.
    pub endpoint: String,
    pub host: String,
    /// The probe's static labels.
    pub labels: Vec<(String, String)>,
    /// One line: what is wrong, where.
    pub summary: String,
    /// A few lines for the person who gets woken up.
    pub description: String,
    /// A failure reason (`http_5xx`, ...), `slow` or `throttled`.
    pub reason: String,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    /// The W3C trace id of the last bad run (the last failed one for a down alert), to
    /// find the server's trace of it; `None` when the probe does not trace. Absent from
    /// state saved before traces (hence the default).
    #[serde(default)]
    pub trace_id: Option<String>,
    /// The first bad run of the streak that fired the alert.
    pub since: SystemTime,
    pub fired_at: SystemTime,
    pub resolved_at: Option<SystemTime>,
    /// Consecutive bad runs (or evaluations) so far.
    pub bad_runs: u32,
    pub last_good: Option<GoodRun>,
    pub runbook_url: Option<String>,
    /// This probe on the agent's own API.
    pub api_url: String,
}

impl Alert {
    pub fn alertname(&self) -> &'static str {
        self.condition.alertname()
    }

    /// A clearly marked test page for `inferprobe test-alert`.
    pub fn test(location: &str, api_base: &str, severity: Severity, now: SystemTime) -> Alert {
        Alert {
            condition: Condition::Test,
            severity,
            dedup_key: format!("inferprobe/test/{location}"),
            probe: "inferprobe-test".into(),
            location: location.into(),
            kind: "test".into(),
            model: String::new(),
            endpoint: String::new(),
            host: String::new(),
            labels: Vec::new(),
            summary: format!("[TEST] inferprobe test alert from {location}: no action needed"),
            description: format!(
                "This is a test page sent by `inferprobe test-alert` from location {location} \
                 to prove that the paging path works. Nothing is broken; no action is needed."
            ),
            reason: "test".into(),
            last_status: None,
            last_error: None,
            trace_id: None,
            since: now,
            fired_at: now,
            resolved_at: None,
            bad_runs: 0,
            last_good: None,
            runbook_url: None,
            api_url: format!("{api_base}/api/v1/probes"),
        }
    }
}

/// One thing to tell the receivers, with the receivers to tell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// Unique per event and stable across retries and restarts: receivers may dedupe on it.
    pub id: String,
    pub event: AlertEvent,
    pub alert: Alert,
    pub receivers: Vec<String>,
}

/// A firing alert and who was told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Firing {
    pub alert: Alert,
    pub receivers: Vec<String>,
    pub last_sent: SystemTime,
    pub reminders: u32,
}

impl Firing {
    /// Firing, or resolved within [`RESOLVED_RETENTION`]: still worth showing and re-sending.
    pub fn is_current(&self, now: SystemTime) -> bool {
        self.alert
            .resolved_at
            .is_none_or(|t| now.duration_since(t).unwrap_or_default() < RESOLVED_RETENTION)
    }
}

/// Consecutive bad and good runs for one alert, and the alert if it fires.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Track {
    bad: u32,
    /// Good runs in a row while the alert fires, toward resolving it (capped at the
    /// success threshold); 0 otherwise, where nothing reads it. So a healthy probe's
    /// state never changes and nothing is written for it, not even for its first runs
    /// (that was a write per new probe per run: 5.5 % of the agent's CPU in the first
    /// minute of 3,000 new probes, BENCHMARKS.md).
    good: u32,
    bad_since: Option<SystemTime>,
    /// The last good run before this bad streak.
    good_before: Option<GoodRun>,
    /// Boxed: a `Firing` is ~500 bytes and almost every probe's two tracks have none;
    /// inline, 10,000 probes' alert state took ~20 MB, boxed ~4 MB.
    firing: Option<Box<Firing>>,
}

impl Track {
    fn bad_run(&mut self, now: SystemTime, last_good: Option<&GoodRun>) {
        if self.bad == 0 {
            self.bad_since = Some(now);
            self.good_before = last_good.cloned();
        }
        self.bad = self.bad.saturating_add(1);
        self.good = 0;
    }

    fn good_run(&mut self, success_threshold: u32) {
        self.bad = 0;
        self.bad_since = None;
        self.good_before = None;
        self.good = match self.firing {
            Some(_) => (self.good + 1).min(success_threshold),
            None => 0,
        };
    }
}

/// What one probe's alerts remember.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeAlerts {
    down: Track,
    degraded: Track,
    /// Not persisted: it changes every run; after a restart it is filled by the next one.
    #[serde(skip)]
    last_good: Option<GoodRun>,
    /// Refilled after a restart.
    #[serde(skip)]
    window: Window,
}

/// Good runs' TTFT and total (seconds), newest last.
type Window = VecDeque<(Option<f64>, f64)>;

impl ProbeAlerts {
    fn persisted_part(&self) -> (Track, Track) {
        (self.down.clone(), self.degraded.clone())
    }
}

/// A probe's rules, from its config.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// Shared with the probe's config (and between probes with equal rules).
    pub alert: std::sync::Arc<AlertConfig>,
    pub slo: std::sync::Arc<Slo>,
}

/// What one step changed: notifications to enqueue, and probe states to save (`None`:
/// delete). Enqueue and save together, atomically, or a crash in between could lose a
/// page or send one twice.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    pub notifications: Vec<Notification>,
    pub saved: Vec<(String, Option<String>)>,
}

/// The verdict of one run for paging.
enum Verdict<'a> {
    Good(GoodRun),
    Throttled,
    Bad(&'a crate::outcome::Failure),
}

/// Every probe's alert state.
#[derive(Debug)]
pub struct Alerting {
    location: String,
    api_base: String,
    /// Shared, so a run takes a reference count, not a copy of the rules.
    rules: HashMap<std::sync::Arc<str>, std::sync::Arc<Rules>>,
    probes: HashMap<std::sync::Arc<str>, Kept>,
    /// Resolved alerts still re-sent to Alertmanager; not persisted.
    recently_resolved: Vec<Firing>,
    /// agent.timezone: the zone of the times in a page's words.
    zone: TimeZone,
}

impl Alerting {
    /// `api_base` is how people reach this agent (`http://host:9464`).
    pub fn new(location: &str, api_base: &str) -> Self {
        Alerting {
            location: location.to_owned(),
            api_base: api_base.trim_end_matches('/').to_owned(),
            rules: HashMap::new(),
            probes: HashMap::new(),
            recently_resolved: Vec::new(),
            zone: TimeZone::UTC,
        }
    }

    /// The zone of the times in the pages decided from now on (start or reload).
    pub fn set_time_zone(&mut self, zone: TimeZone) {
        self.zone = zone;
    }

    /// Loads a probe's saved state (from [`Changes::saved`]) after a restart.
    pub fn restore(&mut self, probe: &str, saved: &str) -> Result<(), serde_json::Error> {
        let state: ProbeAlerts = serde_json::from_str(saved)?;
        self.probes.insert(probe.into(), Kept::keep(state));
        Ok(())
    }

    /// Takes a new set of rules (start or reload). A probe that is gone has its alerts
    /// resolved and its state deleted: nobody can fix what is no longer watched. A probe
    /// that moved to another shard (`elsewhere`) is forgotten without resolving: it is
    /// still watched, and its new owner pages for it.
    pub fn configure(
        &mut self,
        rules: HashMap<std::sync::Arc<str>, Rules>,
        elsewhere: &[String],
        now: SystemTime,
    ) -> Changes {
        self.rules = rules
            .into_iter()
            .map(|(name, r)| (name, std::sync::Arc::new(r)))
            .collect();
        let mut changes = Changes::default();
        let gone: Vec<std::sync::Arc<str>> = self
            .probes
            .keys()
            .filter(|p| !self.rules.contains_key(*p))
            .cloned()
            .collect();
        for probe in gone {
            let mut state = self.probes.remove(&probe).map(Kept::open).unwrap_or_default();
            if elsewhere.iter().any(|e| **e == *probe) {
                changes.saved.push((probe.to_string(), None));
                continue;
            }
            for track in [&mut state.down, &mut state.degraded] {
                if let Some(firing) = track.firing.take() {
                    changes
                        .notifications
                        .push(self.resolve(*firing, now, Ended::Removed, &[]));
                }
            }
            changes.saved.push((probe.to_string(), None));
        }
        changes
    }

    /// Folds one run in.
    pub fn observe(&mut self, outcome: &Outcome, now: SystemTime) -> Changes {
        let name = &outcome.probe.name;
        let Some(rules) = self.rules.get(name).cloned() else {
            return Changes::default();
        };
        // A run the agent could not make (out of descriptors or memory) says nothing about
        // the endpoint: it neither extends a failure streak nor breaks one; nor does a
        // failed run in the endpoint's warm-up, when the probe grants it grace.
        let in_grace = rules.alert.warmup_grace && outcome.conditions.warmup.is_some();
        if outcome
            .observation
            .failure()
            .is_some_and(|f| !f.reason.blames_endpoint() || (in_grace && f.reason.warming()))
        {
            return Changes::default();
        }
        // Taken out (and put back below) so the helpers can borrow `self`.
        let mut state = self
            .probes
            .get_mut(name)
            .map(|k| std::mem::take(k).open())
            .unwrap_or_default();
        let before = state.persisted_part();
        let mut notes = Vec::new();
        let o = &outcome.observation;
        let verdict = match o.failure() {
            None => Verdict::Good(GoodRun {
                at: outcome.started_at,
                ttft_seconds: o.ttft().map(|d| d.as_secs_f64()),
                total_seconds: o.total().map(|d| d.as_secs_f64()),
            }),
            Some(f)
                if f.reason == FailureReason::RateLimited
                    && rules.alert.rate_limited == RateLimited::Throttled =>
            {
                Verdict::Throttled
            }
            Some(f) => Verdict::Bad(f),
        };
        let a = &rules.alert;

        // The down alert. A throttled answer is neither: it proves the server is there
        // but not that users get answers, so it neither ends a failure streak nor
        // counts toward resolving.
        match &verdict {
            Verdict::Bad(_) => state.down.bad_run(now, state.last_good.as_ref()),
            Verdict::Good(_) => state.down.good_run(a.success_threshold),
            Verdict::Throttled => {}
        }
        let down_text = match &verdict {
            Verdict::Bad(f) => {
                let since = state.down.firing.as_ref().map(|f| f.alert.since);
                Some(describe_down(outcome, f, &state.down, since, now, self.zone))
            }
            _ => None,
        };
        if let Some((summary, description)) = &down_text {
            match &mut state.down.firing {
                None if state.down.bad >= a.failure_threshold => {
                    let alert = self.new_alert(
                        Condition::Down,
                        &rules,
                        outcome,
                        &state.down,
                        summary,
                        description,
                        now,
                    );
                    let alert = with_failure(alert, outcome);
                    notes.push(self.fire(&mut state.down, alert, &a.down_receivers, now));
                    // One page per probe: the degraded alert yields to the down alert.
                    if let Some(firing) = state.degraded.firing.take() {
                        notes.push(self.resolve(*firing, now, Ended::Superseded, &a.degraded_receivers));
                    }
                    state.degraded = Track::default();
                    // Latency from before the outage says nothing about after it.
                    state.window.clear();
                }
                Some(firing) => {
                    firing.alert.summary.clone_from(summary);
                    firing.alert.description = self.with_links(description, &rules, name);
                    firing.alert = with_failure(firing.alert.clone(), outcome);
                    // Every failed run of the incident, a good run between failures
                    // included: the resolved page says how many there were.
                    firing.alert.bad_runs = firing.alert.bad_runs.saturating_add(1);
                }
                None => {}
            }
        } else if state.down.firing.is_some() && state.down.good >= a.success_threshold {
            let firing = state.down.firing.take().expect("checked");
            notes.push(self.resolve(*firing, now, Ended::Recovered, &a.down_receivers));
            state.down.good = 0;
        }

        // The degraded alert: judged only while the endpoint answers and is not down, and
        // not in a warm-up the probe grants grace.
        if state.down.firing.is_none() && !matches!(verdict, Verdict::Bad(_)) && !in_grace {
            let breach = match &verdict {
                Verdict::Good(run) => {
                    // Kept only when there is a latency target to judge it by: ~500
                    // bytes a probe otherwise held for nothing (5 MB at 10,000 probes).
                    let judged = rules.slo.ttft_p95.is_some() || rules.slo.total_p95.is_some();
                    if let Some(total) = run.total_seconds
                        && judged
                    {
                        state.window.push_back((run.ttft_seconds, total));
                    }
                    while state.window.len() > rules.slo.window as usize {
                        state.window.pop_front();
                    }
                    worse(
                        slo_breach(&rules.slo, &state.window),
                        burst_breach(&rules.slo, outcome),
                    )
                }
                _ => Some(Some(
                    "it is throttled: the server answers HTTP 429 Too Many Requests".to_owned(),
                )),
            };
            match breach {
                // Too few runs to judge: neither good nor bad.
                None => {}
                Some(Some(what)) => {
                    state.degraded.bad_run(now, state.last_good.as_ref());
                    let reason = if matches!(verdict, Verdict::Throttled) {
                        "throttled"
                    } else {
                        "slow"
                    };
                    let since = state.degraded.firing.as_ref().map(|f| f.alert.since);
                    let (summary, description) =
                        describe_degraded(outcome, &what, &state.degraded, since, now, self.zone);
                    match &mut state.degraded.firing {
                        None if state.degraded.bad >= a.failure_threshold => {
                            let mut alert = self.new_alert(
                                Condition::Degraded,
                                &rules,
                                outcome,
                                &state.degraded,
                                &summary,
                                &description,
                                now,
                            );
                            alert.reason = reason.into();
                            alert.last_status = o.http_status;
                            notes.push(self.fire(&mut state.degraded, alert, &a.degraded_receivers, now));
                        }
                        Some(firing) => {
                            firing.alert.summary = summary;
                            firing.alert.description = self.with_links(&description, &rules, name);
                            firing.alert.reason = reason.into();
                            firing.alert.bad_runs = state.degraded.bad;
                        }
                        None => {}
                    }
                }
                Some(None) => {
                    state.degraded.good_run(a.success_threshold);
                    if state.degraded.firing.is_some() && state.degraded.good >= a.success_threshold {
                        let firing = state.degraded.firing.take().expect("checked");
                        notes.push(self.resolve(*firing, now, Ended::Recovered, &a.degraded_receivers));
                        state.degraded.good = 0;
                    }
                }
            }
        }
        if let Verdict::Good(run) = verdict {
            state.last_good = Some(run);
        }

        // Reminders for alerts that keep firing.
        if let Some(every) = a.reminder {
            for track in [&mut state.down, &mut state.degraded] {
                if let Some(firing) = &mut track.firing
                    && now.duration_since(firing.last_sent).unwrap_or_default() >= every
                {
                    firing.reminders += 1;
                    firing.last_sent = now;
                    notes.push(Notification {
                        id: format!(
                            "{}/reminder/{}/{}",
                            firing.alert.dedup_key,
                            unix_ms(firing.alert.fired_at),
                            firing.reminders
                        ),
                        event: AlertEvent::Reminder,
                        alert: firing.alert.clone(),
                        receivers: firing.receivers.clone(),
                    });
                }
            }
        }

        let mut changes = Changes {
            notifications: notes,
            saved: Vec::new(),
        };
        if state.persisted_part() != before {
            let json = serde_json::to_string(&state).expect("alert state serializes");
            changes.saved.push((name.to_string(), Some(json)));
        }
        let state = Kept::keep(state);
        match self.probes.get_mut(name) {
            Some(slot) => *slot = state,
            None => {
                self.probes.insert(name.clone(), state);
            }
        }
        changes
    }

    /// Alerts to (re-)send to Alertmanager: all firing ones, and those resolved within
    /// [`RESOLVED_RETENTION`].
    pub fn active(&mut self, now: SystemTime) -> Vec<Firing> {
        self.recently_resolved.retain(|f| f.is_current(now));
        let mut out: Vec<Firing> = self
            .probes
            .values()
            .flat_map(Kept::tracks)
            .filter_map(|t| t.firing.as_deref())
            .cloned()
            .collect();
        out.extend(self.recently_resolved.iter().cloned());
        out.sort_by(|a, b| a.alert.dedup_key.cmp(&b.alert.dedup_key));
        out
    }

    /// Firing alerts, for the API and metrics.
    pub fn firing(&self) -> Vec<&Alert> {
        let mut out: Vec<&Alert> = self
            .probes
            .values()
            .flat_map(Kept::tracks)
            .filter_map(|t| t.firing.as_deref())
            .map(|f| &f.alert)
            .collect();
        out.sort_by(|a, b| a.dedup_key.cmp(&b.dedup_key));
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn new_alert(
        &self,
        condition: Condition,
        rules: &Rules,
        outcome: &Outcome,
        track: &Track,
        summary: &str,
        description: &str,
        now: SystemTime,
    ) -> Alert {
        let p: &ProbeIdentity = &outcome.probe;
        let severity = match condition {
            Condition::Degraded => rules.alert.slo_severity,
            _ => rules.alert.severity,
        };
        let description = self.with_links(description, rules, &p.name);
        let api_url = self.api_url(&p.name);
        Alert {
            condition,
            severity,
            dedup_key: format!("inferprobe/{}/{}/{}", p.name, self.location, severity.as_str()),
            probe: p.name.to_string(),
            location: self.location.clone(),
            kind: p.kind.to_owned(),
            model: p.model.clone(),
            endpoint: p.endpoint.clone(),
            host: host_of(&p.endpoint),
            labels: p.labels.clone(),
            summary: summary.to_owned(),
            description,
            reason: String::new(),
            last_status: None,
            last_error: None,
            trace_id: outcome.trace.map(|t| t.trace_id_hex()),
            since: track.bad_since.unwrap_or(now),
            fired_at: now,
            resolved_at: None,
            bad_runs: track.bad,
            last_good: track.good_before.clone(),
            runbook_url: rules.alert.runbook_url.clone(),
            api_url,
        }
    }

    fn api_url(&self, probe: &str) -> String {
        format!("{}/api/v1/probes/{probe}", self.api_base)
    }

    /// A description with the runbook and the probe's status page at the end.
    fn with_links(&self, description: &str, rules: &Rules, probe: &str) -> String {
        let mut d = description.to_owned();
        if let Some(url) = &rules.alert.runbook_url {
            d.push_str(&format!("\nRunbook: {url}"));
        }
        // The probe's page, for people; the JSON is the alert's own link (api_url).
        d.push_str(&format!("\nDetails: {}/probes/{probe}", self.api_base));
        d
    }

    fn fire(
        &mut self,
        track: &mut Track,
        alert: Alert,
        receivers: &[String],
        now: SystemTime,
    ) -> Notification {
        // The same alert resolved a moment ago must not be re-sent as resolved now.
        self.recently_resolved
            .retain(|f| f.alert.dedup_key != alert.dedup_key);
        let firing = Firing {
            alert,
            receivers: receivers.to_vec(),
            last_sent: now,
            reminders: 0,
        };
        let note = Notification {
            id: format!(
                "{}/firing/{}",
                firing.alert.dedup_key,
                unix_ms(firing.alert.fired_at)
            ),
            event: AlertEvent::Firing,
            alert: firing.alert.clone(),
            receivers: firing.receivers.clone(),
        };
        track.firing = Some(Box::new(firing));
        note
    }

    /// Resolves a firing alert: told to whoever was paged, and to the receivers the
    /// probe pages now (a reload may have added one).
    fn resolve(
        &mut self,
        mut firing: Firing,
        now: SystemTime,
        ended: Ended,
        current: &[String],
    ) -> Notification {
        for r in current {
            if !firing.receivers.contains(r) {
                firing.receivers.push(r.clone());
            }
        }
        firing.alert.resolved_at = Some(now);
        let lasted = lasted(firing.alert.since, now);
        firing.alert.summary = resolved_summary(&firing.alert, ended, &lasted);
        let why = ended.why(firing.alert.condition);
        firing.alert.description = format!("{why} It lasted {lasted}.\n{}", firing.alert.description);
        let note = Notification {
            id: format!(
                "{}/resolved/{}",
                firing.alert.dedup_key,
                unix_ms(firing.alert.fired_at)
            ),
            event: AlertEvent::Resolved,
            alert: firing.alert.clone(),
            receivers: firing.receivers.clone(),
        };
        self.recently_resolved.push(firing);
        note
    }
}

/// Two judgements as one: a breach if either breaks its target (both said), met if
/// either was judged and none breaks, `None` if neither could be judged.
fn worse(a: Option<Option<String>>, b: Option<Option<String>>) -> Option<Option<String>> {
    match (a, b) {
        (Some(Some(x)), Some(Some(y))) => Some(Some(format!("{x}; {y}"))),
        (Some(Some(x)), _) | (_, Some(Some(x))) => Some(Some(x)),
        (None, None) => None,
        _ => Some(None),
    }
}

/// A burst run against `slo.burst_spread`, judged per run (the seed's rule: a batch whose
/// latencies' standard deviation is above half their mean): `None` when there is no
/// target or the run has no spread (a failed request in the burst).
fn burst_breach(slo: &Slo, outcome: &Outcome) -> Option<Option<String>> {
    let target = slo.burst_spread_pct?;
    let burst = outcome.burst.as_deref()?;
    let spread = burst.spread()?;
    let of = if burst.by_ttft() {
        "first-token times"
    } else {
        "times"
    };
    Some((spread * 100.0 > f64::from(target)).then(|| {
        format!(
            "a burst of {}'s {of} spread {:.0} % of their mean (target {target} %): requests queue",
            burst.requests.len(),
            spread * 100.0
        )
    }))
}

/// `Some(Some(what))` when the window's p95 breaks a target, `Some(None)` when it meets
/// them, `None` when there are too few runs to say (just after a start or restart).
fn slo_breach(slo: &Slo, window: &VecDeque<(Option<f64>, f64)>) -> Option<Option<String>> {
    if slo.ttft_p95.is_none() && slo.total_p95.is_none() {
        return Some(None);
    }
    let needed = (slo.window as usize).div_ceil(2).max(5);
    if window.len() < needed {
        return None;
    }
    let n = window.len();
    let over = |what: &str, target: Option<Duration>, values: Vec<f64>| {
        let target = target?.as_secs_f64();
        let p95 = percentile(values, 0.95).filter(|p| *p > target)?;
        Some(format!(
            "{what} p95 is {} over the last {n} runs (target {})",
            seconds(p95),
            seconds(target)
        ))
    };
    let out: Vec<String> = [
        over(
            "TTFT",
            slo.ttft_p95,
            window.iter().filter_map(|(t, _)| *t).collect(),
        ),
        over(
            "total latency",
            slo.total_p95,
            window.iter().map(|(_, t)| *t).collect(),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    Some((!out.is_empty()).then(|| out.join("; ")))
}

#[cfg(test)]
mod tests;
