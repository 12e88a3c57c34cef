use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::*;
use crate::config::{AlertConfig, RateLimited, Severity, Slo};
use crate::outcome::{Failure, FailureReason, Observation, Outcome, ProbeIdentity};

const STEP: Duration = Duration::from_secs(30);

/// What one run did.
#[derive(Clone, Copy, Debug)]
enum Run {
    Ok,
    /// A good run with this TTFT and total (ms).
    Timed(u64, u64),
    Fail(FailureReason),
    Throttled,
}
use Run::*;

fn identity(name: &str) -> Arc<ProbeIdentity> {
    Arc::new(ProbeIdentity {
        name: name.into(),
        kind: "openai_chat",
        model: "llama-3-8b".into(),
        location: "eu-west".into(),
        labels: vec![("team".into(), "ml".into())],
        endpoint: "https://llm.example.com/v1/chat/completions".into(),
        query: String::new(),
        full_metrics: false,
    })
}

fn outcome(probe: &Arc<ProbeIdentity>, run: Run, at: SystemTime) -> Outcome {
    let start = Instant::now();
    let mut o = Observation::new(start);
    match run {
        Ok => {
            o.marks.first_token = Some(start + Duration::from_millis(300));
            o.marks.end = Some(start + Duration::from_millis(900));
            o.http_status = Some(200);
        }
        Timed(ttft, total) => {
            o.marks.first_token = Some(start + Duration::from_millis(ttft));
            o.marks.end = Some(start + Duration::from_millis(total));
            o.http_status = Some(200);
        }
        Fail(reason) => {
            o.http_status = (reason == FailureReason::Http5xx).then_some(503);
            o.result = Err(Failure::new(reason, format!("the endpoint said no ({reason})")));
        }
        Throttled => {
            o.http_status = Some(429);
            o.result = Err(Failure::new(
                FailureReason::RateLimited,
                "HTTP 429 (Retry-After: 5)",
            ));
        }
    }
    Outcome {
        probe: probe.clone(),
        started_at: at,
        schedule_lag: Duration::ZERO,
        trace: None,
        observation: o,
        conditions: Default::default(),
        burst: None,
    }
}

fn alert_config() -> AlertConfig {
    AlertConfig {
        failure_threshold: 3,
        success_threshold: 2,
        reminder: None,
        severity: Severity::Critical,
        slo_severity: Severity::Warning,
        runbook_url: Some("https://runbooks.example.com/llm".into()),
        down_receivers: vec!["pager".into()],
        degraded_receivers: vec!["pager".into()],
        rate_limited: RateLimited::Throttled,
        model_changes: true,
        model_change_receivers: vec!["pager".into()],
        warmup_grace: false,
    }
}

fn rules(alert: AlertConfig, slo: Slo) -> HashMap<Arc<str>, Rules> {
    HashMap::from([(
        "chat".into(),
        Rules {
            alert: Arc::new(alert),
            slo: Arc::new(slo),
        },
    )])
}

/// A state machine and a clock that moves one interval per run.
struct Harness {
    alerting: Alerting,
    probe: Arc<ProbeIdentity>,
    now: SystemTime,
    rules: HashMap<Arc<str>, Rules>,
    /// The last saved state, as the store would hold it.
    saved: Option<String>,
}

impl Harness {
    fn new(alert: AlertConfig, slo: Slo) -> Self {
        let rules = rules(alert, slo);
        let mut alerting = Alerting::new("eu-west", "http://agent.example:9464");
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(alerting.configure(rules.clone(), &[], now), Changes::default());
        Harness {
            alerting,
            probe: identity("chat"),
            now,
            rules,
            saved: None,
        }
    }

    fn run(&mut self, run: Run) -> Vec<Notification> {
        self.now += STEP;
        let changes = self
            .alerting
            .observe(&outcome(&self.probe, run, self.now), self.now);
        for (probe, state) in changes.saved {
            assert_eq!(probe, "chat");
            self.saved = state;
        }
        changes.notifications
    }

    fn runs(&mut self, runs: &[Run]) -> Vec<Notification> {
        runs.iter().flat_map(|r| self.run(*r)).collect()
    }

    /// Kills the agent and starts a new one from what was saved.
    fn restart(&mut self) {
        let mut fresh = Alerting::new("eu-west", "http://agent.example:9464");
        if let Some(saved) = &self.saved {
            fresh.restore("chat", saved).expect("saved state loads");
        }
        let changes = fresh.configure(self.rules.clone(), &[], self.now);
        assert!(changes.notifications.is_empty(), "a restart alone sends nothing");
        self.alerting = fresh;
    }
}

fn events(notes: &[Notification]) -> Vec<(AlertEvent, Condition)> {
    notes.iter().map(|n| (n.event, n.alert.condition)).collect()
}

fn slo(ttft_ms: Option<u64>, total_ms: Option<u64>) -> Slo {
    Slo {
        ttft_p95: ttft_ms.map(Duration::from_millis),
        total_p95: total_ms.map(Duration::from_millis),
        window: 10,
        availability_bp: None,
        burst_spread_pct: None,
    }
}

#[test]
fn fires_after_failure_threshold_consecutive_failures() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let down = Fail(FailureReason::Http5xx);
    assert!(h.runs(&[Ok, down, down]).is_empty());
    let notes = h.run(down);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Down)]);
    let n = &notes[0];
    assert_eq!(n.receivers, ["pager"]);
    assert_eq!(n.alert.severity, Severity::Critical);
    assert_eq!(n.alert.dedup_key, "inferprobe/chat/eu-west/critical");
    assert_eq!(n.alert.reason, "http_5xx");
    assert_eq!(n.alert.last_status, Some(503));
    assert_eq!(n.alert.bad_runs, 3);
    assert_eq!(n.alert.host, "llm.example.com");
    assert_eq!(n.alert.api_url, "http://agent.example:9464/api/v1/probes/chat");
    assert_eq!(
        n.alert.since,
        h.now - 2 * STEP,
        "since the first failure of the streak"
    );
}

#[test]
fn the_page_says_what_happened_in_words() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let down = Fail(FailureReason::Http5xx);
    let notes = h.runs(&[Ok, down, down, down]);
    let a = &notes[0].alert;
    assert_eq!(
        a.summary,
        "chat is DOWN from eu-west: the server fails (HTTP 5xx) (3 failed runs in a row)"
    );
    for needle in [
        "Users in eu-west cannot get answers from model llama-3-8b at https://llm.example.com/v1/chat/completions.",
        "Last error: the endpoint said no (http_5xx)",
        "Last HTTP status: 503",
        "(1m, 3 runs in a row)",
        "TTFT 300 ms, total 900 ms",
        "Runbook: https://runbooks.example.com/llm",
        "Details: http://agent.example:9464/probes/chat",
    ] {
        assert!(
            a.description.contains(needle),
            "{needle:?} not in:\n{}",
            a.description
        );
    }
    let good = a.last_good.as_ref().expect("last good run");
    assert_eq!(good.ttft_seconds, Some(0.3));
}

/// The times in a page's words, as on-call in Shanghai reads them; the alert's own
/// times (what receivers send as `startsAt`, `timestamp`) are the same instants.
#[test]
fn pages_say_their_times_in_the_agents_zone_with_its_offset() {
    let shanghai = TimeZone::parse("Asia/Shanghai").unwrap();
    let mut h = Harness::new(alert_config(), Slo::default());
    h.alerting.set_time_zone(shanghai);
    let down = Fail(FailureReason::Http5xx);
    // The clock starts at 2027-01-15T08:00:00Z; each run is 30 s later.
    let notes = h.runs(&[Ok, down, down, down]);
    let a = &notes[0].alert;
    for needle in [
        "\nFailing since 2027-01-15 16:01:00 +08:00 (Asia/Shanghai) (1m, 3 runs in a row).",
        "\nLast good run: 2027-01-15 16:00:30 +08:00 (Asia/Shanghai), TTFT 300 ms, total 900 ms.",
    ] {
        assert!(
            a.description.contains(needle),
            "{needle:?} not in:\n{}",
            a.description
        );
    }
    assert!(!a.description.contains("2027-01-15T"), "{}", a.description);
    assert_eq!(rfc3339(a.since), "2027-01-15T08:01:00Z");
    assert_eq!(rfc3339(a.fired_at), "2027-01-15T08:02:00Z");
    assert_eq!(rfc3339(a.last_good.as_ref().unwrap().at), "2027-01-15T08:00:30Z");
    // The resolved page keeps the firing text below what ended it.
    let notes = h.runs(&[Ok, Ok]);
    assert_eq!(events(&notes), [(AlertEvent::Resolved, Condition::Down)]);
    assert!(
        notes[0]
            .alert
            .description
            .contains("Failing since 2027-01-15 16:01:00 +08:00 (Asia/Shanghai)"),
        "{}",
        notes[0].alert.description
    );

    let mut h = Harness::new(alert_config(), slo(Some(500), None));
    h.alerting.set_time_zone(shanghai);
    // Judged from the 5th slow run (08:02:30Z); fired at the 7th.
    let notes = h.runs(&[Timed(800, 1000); 7]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Degraded)]);
    let d = &notes[0].alert.description;
    assert!(
        d.contains("\nSince 2027-01-15 16:02:30 +08:00 (Asia/Shanghai) (1m).\nLast good run: 2027-01-15 16:02:00 +08:00 (Asia/Shanghai), TTFT 800 ms"),
        "{d}"
    );
}

/// Unset, the zone is UTC and a page reads as it always did; a reload that sets one
/// re-words a firing alert at its next run.
#[test]
fn pages_keep_rfc3339_in_utc_and_take_a_new_zone_at_the_next_run() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let down = Fail(FailureReason::Http5xx);
    let notes = h.runs(&[Ok, down, down, down]);
    let d = &notes[0].alert.description;
    assert!(
        d.contains("\nFailing since 2027-01-15T08:01:00Z (1m, 3 runs in a row).\nLast good run: 2027-01-15T08:00:30Z,"),
        "{d}"
    );
    h.alerting
        .set_time_zone(TimeZone::parse("America/New_York").unwrap());
    assert!(h.runs(&[down]).is_empty());
    let d = &h.alerting.firing()[0].description;
    assert!(
        d.contains("Failing since 2027-01-15 03:01:00 -05:00 (America/New_York) (1m 30s, 4 runs in a row)."),
        "{d}"
    );
}

/// `test-alert`'s page says when it was sent, in the zone real pages use.
#[test]
fn the_test_page_says_when_it_was_sent_in_the_agents_zone() {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let shanghai = TimeZone::parse("Asia/Shanghai").unwrap();
    let a = Alert::test("eu-west", "http://agent:9464", Severity::Critical, now).sent_at(shanghai, now);
    assert!(
        a.description
            .ends_with("no action is needed.\nSent at 2027-01-15 16:00:00 +08:00 (Asia/Shanghai)."),
        "{}",
        a.description
    );
    assert_eq!(a.fired_at, now);
    let a = Alert::test("eu-west", "http://agent:9464", Severity::Critical, now).sent_at(TimeZone::UTC, now);
    assert!(
        a.description.ends_with("\nSent at 2027-01-15T08:00:00Z."),
        "{}",
        a.description
    );
}

#[test]
fn flapping_never_fires() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let down = Fail(FailureReason::Connect);
    for _ in 0..50 {
        assert!(h.runs(&[down, down, Ok]).is_empty());
    }
}

#[test]
fn one_page_per_incident_however_long() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let notes = h.runs(&[Fail(FailureReason::TimeoutFirstToken); 500]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Down)]);
}

#[test]
fn resolves_after_success_threshold_once() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let down = Fail(FailureReason::Truncated);
    h.runs(&[down, down, down]);
    // One good run between failures does not resolve, nor re-fire.
    assert!(h.runs(&[Ok, down, down, down, down, Ok]).is_empty());
    let notes = h.run(Ok);
    assert_eq!(events(&notes), [(AlertEvent::Resolved, Condition::Down)]);
    let a = &notes[0].alert;
    assert_eq!(a.resolved_at, Some(h.now));
    assert_eq!(
        a.summary,
        "RESOLVED: chat is up again from eu-west after 4m 30s down (7 failed runs)"
    );
    assert!(
        a.description
            .starts_with("The endpoint answers again. It lasted 4m 30s."),
        "{}",
        a.description
    );
    assert_eq!(
        notes[0].id,
        format!("{}/resolved/{}", a.dedup_key, unix_ms(a.fired_at))
    );
    assert!(h.runs(&[Ok; 20]).is_empty());
    // A new incident is a new page with a new id.
    let again = h.runs(&[down, down, down]);
    assert_eq!(events(&again), [(AlertEvent::Firing, Condition::Down)]);
    assert_ne!(again[0].alert.fired_at, a.fired_at);
}

#[test]
fn thresholds_are_configurable() {
    let mut alert = alert_config();
    alert.failure_threshold = 1;
    alert.success_threshold = 5;
    let mut h = Harness::new(alert, Slo::default());
    assert_eq!(h.run(Fail(FailureReason::Dns)).len(), 1);
    assert!(h.runs(&[Ok; 4]).is_empty());
    assert_eq!(events(&h.run(Ok)), [(AlertEvent::Resolved, Condition::Down)]);
}

#[test]
fn reminders_repeat_while_firing_with_their_own_ids() {
    let mut alert = alert_config();
    alert.reminder = Some(Duration::from_secs(300));
    let mut h = Harness::new(alert, Slo::default());
    let notes = h.runs(&[Fail(FailureReason::Http5xx); 3 + 30]);
    // Fired at run 3, then every 10 runs (5 minutes at 30 s).
    assert_eq!(
        events(&notes),
        [
            (AlertEvent::Firing, Condition::Down),
            (AlertEvent::Reminder, Condition::Down),
            (AlertEvent::Reminder, Condition::Down),
            (AlertEvent::Reminder, Condition::Down),
        ]
    );
    let ids: std::collections::HashSet<_> = notes.iter().map(|n| n.id.clone()).collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(
        notes[3].alert.bad_runs, 33,
        "a reminder carries the current count"
    );
    let resolved = h.runs(&[Ok, Ok]);
    assert_eq!(events(&resolved), [(AlertEvent::Resolved, Condition::Down)]);
}

#[test]
fn severities_and_dedup_keys_follow_the_config() {
    let mut alert = alert_config();
    alert.severity = Severity::Error;
    alert.slo_severity = Severity::Info;
    let mut h = Harness::new(alert, slo(Some(500), None));
    let notes = h.runs(&[Fail(FailureReason::Tls); 3]);
    assert_eq!(notes[0].alert.severity, Severity::Error);
    assert_eq!(notes[0].alert.dedup_key, "inferprobe/chat/eu-west/error");
    h.runs(&[Ok, Ok]);
    let notes = h.runs(&[Timed(900, 1000); 10]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Degraded)]);
    assert_eq!(notes[0].alert.severity, Severity::Info);
    assert_eq!(notes[0].alert.dedup_key, "inferprobe/chat/eu-west/info");
}

#[test]
fn rate_limiting_is_throttled_not_down() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let notes = h.runs(&[Throttled; 10]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Degraded)]);
    let a = &notes[0].alert;
    assert_eq!(a.reason, "throttled");
    assert_eq!(a.severity, Severity::Warning);
    assert_eq!(a.last_status, Some(429));
    assert!(
        a.summary.contains("is DEGRADED from eu-west: it is throttled"),
        "{}",
        a.summary
    );
    assert_eq!(
        events(&h.runs(&[Ok, Ok])),
        [(AlertEvent::Resolved, Condition::Degraded)]
    );
}

#[test]
fn rate_limiting_can_count_as_down() {
    let mut alert = alert_config();
    alert.rate_limited = RateLimited::Down;
    let mut h = Harness::new(alert, Slo::default());
    let notes = h.runs(&[Throttled; 3]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Down)]);
    assert_eq!(notes[0].alert.reason, "rate_limited");
}

#[test]
fn slow_runs_fire_the_degraded_alert_and_fast_runs_resolve_it() {
    let mut h = Harness::new(alert_config(), slo(Some(500), Some(2000)));
    // Fewer than half a window (5 of 10) is not judged, slow or not.
    assert!(h.runs(&[Timed(800, 1000); 4]).is_empty());
    // From the 5th run on the p95 is over: the third such evaluation fires.
    let notes = h.runs(&[Timed(800, 1000); 3]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Degraded)]);
    let a = &notes[0].alert;
    assert_eq!(a.reason, "slow");
    assert!(
        a.summary
            .contains("TTFT p95 is 800 ms over the last 7 runs (target 500 ms)"),
        "{}",
        a.summary
    );
    assert!(
        !a.summary.contains("total"),
        "total is within target: {}",
        a.summary
    );
    // Fast runs push the slow ones out of the 10-run window: p95 (the 10th of 10) is
    // fast again only when all 10 are fast; then two good evaluations resolve.
    let notes = h.runs(&[Timed(100, 300); 11]);
    assert_eq!(events(&notes), [(AlertEvent::Resolved, Condition::Degraded)]);
    let s = &notes[0].alert.summary;
    assert!(
        s.starts_with("RESOLVED: chat is back within its latency targets from eu-west after "),
        "{s}"
    );
    assert!(s.ends_with(" degraded"), "{s}");
}

#[test]
fn the_down_alert_supersedes_the_degraded_one() {
    let mut h = Harness::new(alert_config(), slo(Some(500), None));
    h.runs(&[Timed(900, 1000); 10]);
    let notes = h.runs(&[Fail(FailureReason::Connect); 3]);
    assert_eq!(
        events(&notes),
        [
            (AlertEvent::Firing, Condition::Down),
            (AlertEvent::Resolved, Condition::Degraded)
        ]
    );
    assert!(
        notes[1]
            .alert
            .summary
            .starts_with("RESOLVED: chat is no longer DEGRADED from eu-west: it is DOWN now"),
        "{}",
        notes[1].alert.summary
    );
    // While down, slow answers between failures do not page as degraded.
    assert!(
        h.runs(&[Timed(900, 1000), Fail(FailureReason::Connect)])
            .is_empty()
    );
}

/// Saving alert state is a database write: a probe that only succeeds has nothing to
/// save, from its first run on, and after an incident the writes stop once it is over.
#[test]
fn a_healthy_probe_saves_nothing() {
    let mut h = Harness::new(alert_config(), slo(Some(2_000), None));
    let saves = |h: &mut Harness, run: Run| {
        h.now += STEP;
        let changes = h.alerting.observe(&outcome(&h.probe, run, h.now), h.now);
        changes.saved.len()
    };
    let fresh: usize = (0..20).map(|_| saves(&mut h, Ok)).sum();
    assert_eq!(fresh, 0, "a new, healthy probe wrote its state");
    let down = Fail(FailureReason::Truncated);
    for _ in 0..3 {
        assert_eq!(saves(&mut h, down), 1, "a failure streak is saved run by run");
    }
    let recovering: usize = (0..20).map(|_| saves(&mut h, Ok)).sum();
    assert!(recovering <= 3, "{recovering} saves while recovering");
    let after: usize = (0..20).map(|_| saves(&mut h, Ok)).sum();
    assert_eq!(after, 0, "a recovered probe kept writing its state");
}

#[test]
fn a_removed_probe_resolves_its_alerts_and_forgets_them() {
    let mut h = Harness::new(alert_config(), Slo::default());
    h.runs(&[Fail(FailureReason::Http5xx); 3]);
    let changes = h.alerting.configure(HashMap::new(), &[], h.now);
    assert_eq!(
        events(&changes.notifications),
        [(AlertEvent::Resolved, Condition::Down)]
    );
    assert!(
        changes.notifications[0]
            .alert
            .description
            .starts_with("The probe was removed from the configuration.")
    );
    assert_eq!(changes.saved, [("chat".to_owned(), None)]);
    assert!(h.alerting.firing().is_empty());
}

#[test]
fn outcomes_of_unknown_probes_are_ignored() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let other = identity("other");
    for _ in 0..5 {
        let o = outcome(&other, Fail(FailureReason::Dns), h.now);
        assert_eq!(h.alerting.observe(&o, h.now), Changes::default());
    }
}

/// Restarting (from the saved state) after any run of a scenario changes nothing in
/// what is sent: the same notifications, with the same ids, none lost, none repeated.
#[test]
fn a_restart_in_any_state_neither_loses_nor_repeats_a_notification() {
    let down = Fail(FailureReason::Http5xx);
    let scenario: Vec<Run> = [
        vec![Ok, down, down],               // pending failure
        vec![down, down, down],             // firing
        vec![Ok],                           // firing, pending resolve
        vec![down, down],                   // firing again
        vec![Ok, Ok, Ok],                   // resolved
        vec![Throttled; 4],                 // degraded (throttled) firing
        vec![Ok],                           // pending resolve of degraded
        vec![Ok, down, down, down, Ok, Ok], // down fires and resolves
    ]
    .concat();
    let mut alert = alert_config();
    alert.reminder = Some(Duration::from_secs(60));
    let mut straight = Harness::new(alert.clone(), Slo::default());
    let expected: Vec<(String, AlertEvent)> = straight
        .runs(&scenario)
        .into_iter()
        .map(|n| (n.id, n.event))
        .collect();
    assert!(expected.len() >= 8, "the scenario pages: {expected:?}");
    for cut in 0..=scenario.len() {
        let mut h = Harness::new(alert.clone(), Slo::default());
        let mut got: Vec<(String, AlertEvent)> = h
            .runs(&scenario[..cut])
            .into_iter()
            .map(|n| (n.id, n.event))
            .collect();
        h.restart();
        got.extend(h.runs(&scenario[cut..]).into_iter().map(|n| (n.id, n.event)));
        assert_eq!(got, expected, "restart after run {cut}");
    }
}

#[test]
fn a_restart_while_degraded_waits_for_data_before_resolving() {
    let mut h = Harness::new(alert_config(), slo(Some(500), None));
    let notes = h.runs(&[Timed(900, 1000); 10]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Degraded)]);
    h.restart();
    // The latency window starts empty: 4 fast runs are too few to judge.
    assert!(h.runs(&[Timed(100, 200); 4]).is_empty());
    assert_eq!(h.alerting.firing().len(), 1);
    let notes = h.runs(&[Timed(100, 200); 2]);
    assert_eq!(events(&notes), [(AlertEvent::Resolved, Condition::Degraded)]);
}

#[test]
fn active_alerts_keep_resolved_ones_for_a_while() {
    let mut h = Harness::new(alert_config(), Slo::default());
    h.runs(&[Fail(FailureReason::Http5xx); 3]);
    assert_eq!(h.alerting.active(h.now).len(), 1);
    h.runs(&[Ok, Ok]);
    let active = h.alerting.active(h.now);
    assert_eq!(active.len(), 1);
    assert!(active[0].alert.resolved_at.is_some());
    assert!(h.alerting.firing().is_empty());
    assert!(h.alerting.active(h.now + RESOLVED_RETENTION).is_empty());
}

#[test]
fn throttled_runs_between_failures_do_not_hide_an_outage() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let down = Fail(FailureReason::Http5xx);
    let notes = h.runs(&[down, Throttled, down, Throttled, down]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Down)]);
    // Nor do they resolve it: only good answers do.
    assert!(h.runs(&[Throttled; 6]).is_empty());
    assert_eq!(
        events(&h.runs(&[Ok, Ok])),
        [(AlertEvent::Resolved, Condition::Down)]
    );
}

#[test]
fn an_alert_that_fires_again_soon_is_not_re_sent_as_resolved() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let down = Fail(FailureReason::Http5xx);
    h.runs(&[down, down, down, Ok, Ok]);
    assert_eq!(
        events(&h.runs(&[down, down, down])),
        [(AlertEvent::Firing, Condition::Down)]
    );
    let active = h.alerting.active(h.now);
    assert_eq!(active.len(), 1, "{active:#?}");
    assert_eq!(active[0].alert.resolved_at, None);
}

#[test]
fn updates_of_a_firing_alert_keep_its_links() {
    let mut h = Harness::new(alert_config(), Slo::default());
    h.runs(&[Fail(FailureReason::Http5xx); 6]);
    let firing = h.alerting.firing();
    let d = &firing[0].description;
    assert!(d.contains("(2m 30s, 6 runs in a row)"), "{d}");
    assert!(
        d.contains(
            "\nRunbook: https://runbooks.example.com/llm\nDetails: http://agent.example:9464/probes/chat"
        ),
        "{d}"
    );
}

#[test]
fn a_resolve_reaches_the_receivers_paged_and_those_configured_now() {
    let mut h = Harness::new(alert_config(), Slo::default());
    h.runs(&[Fail(FailureReason::Http5xx); 3]);
    let mut alert = alert_config();
    alert.down_receivers = vec!["chat".into()];
    h.rules = rules(alert, Slo::default());
    assert_eq!(
        h.alerting.configure(h.rules.clone(), &[], h.now),
        Changes::default()
    );
    let notes = h.runs(&[Ok, Ok]);
    assert_eq!(notes[0].receivers, ["pager", "chat"]);
}

#[test]
fn each_alert_pages_its_own_receivers_and_resolves_to_them() {
    let mut alert = alert_config();
    alert.down_receivers = vec!["pager".into(), "chat".into()];
    alert.degraded_receivers = vec!["chat".into()];
    let mut h = Harness::new(alert, slo(Some(500), None));
    let notes = h.runs(&[Timed(900, 1000); 7]);
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Degraded)]);
    assert_eq!(notes[0].receivers, ["chat"]);
    // The degraded alert yields to the down alert: its resolve goes to whoever had its
    // page, not to the down alert's pager.
    let notes = h.runs(&[Fail(FailureReason::Connect); 3]);
    assert_eq!(
        events(&notes),
        [
            (AlertEvent::Firing, Condition::Down),
            (AlertEvent::Resolved, Condition::Degraded)
        ]
    );
    assert_eq!(notes[0].receivers, ["pager", "chat"]);
    assert_eq!(notes[1].receivers, ["chat"]);
    let notes = h.runs(&[Ok, Ok]);
    assert_eq!(events(&notes), [(AlertEvent::Resolved, Condition::Down)]);
    assert_eq!(notes[0].receivers, ["pager", "chat"]);
}

#[test]
fn latency_before_an_outage_does_not_judge_the_endpoint_after_it() {
    let mut h = Harness::new(alert_config(), slo(Some(500), None));
    h.runs(&[Timed(900, 1000); 4]);
    h.runs(&[Fail(FailureReason::Connect); 3]);
    // After recovery, four fast runs are too few to judge, and none of the slow ones
    // from before count.
    let notes = h.runs(&[Ok, Ok, Timed(100, 200), Timed(100, 200)]);
    assert_eq!(events(&notes), [(AlertEvent::Resolved, Condition::Down)]);
    assert!(h.runs(&[Timed(100, 200); 10]).is_empty());
}

#[test]
fn a_probe_moved_to_another_shard_is_forgotten_without_a_resolve() {
    let mut h = Harness::new(alert_config(), Slo::default());
    h.runs(&[Fail(FailureReason::Http5xx); 3]);
    let changes = h.alerting.configure(HashMap::new(), &["chat".to_owned()], h.now);
    assert!(changes.notifications.is_empty(), "{changes:?}");
    assert_eq!(changes.saved, [("chat".to_owned(), None)]);
}

#[test]
fn the_agents_own_exhaustion_never_pages_about_the_endpoint() {
    let mut h = Harness::new(alert_config(), Slo::default());
    let exhausted = Fail(FailureReason::AgentError);
    assert!(h.runs(&[Ok; 3]).is_empty());
    assert!(
        h.runs(&[exhausted; 50]).is_empty(),
        "runs the agent could not make fired an alert"
    );
    // Nor do they break or extend a real streak: 2 endpoint failures, the agent's own
    // trouble, 1 more failure is 3 in a row.
    let down = Fail(FailureReason::Connect);
    assert!(h.runs(&[down, down, exhausted, exhausted]).is_empty());
    assert_eq!(events(&h.run(down)), [(AlertEvent::Firing, Condition::Down)]);
    // And they do not resolve it.
    assert!(h.runs(&[exhausted; 10]).is_empty());
    assert_eq!(
        events(&h.runs(&[Ok, Ok])),
        [(AlertEvent::Resolved, Condition::Down)]
    );
}

#[test]
fn a_resolved_page_says_what_recovered_and_for_how_long() {
    // Down: 8 failed runs, then 2 good ones.
    let mut h = Harness::new(alert_config(), Slo::default());
    let down = Fail(FailureReason::Http5xx);
    h.runs(&[down; 8]);
    let notes = h.runs(&[Ok, Ok]);
    assert_eq!(events(&notes), [(AlertEvent::Resolved, Condition::Down)]);
    let a = &notes[0].alert;
    assert_eq!(
        a.summary,
        "RESOLVED: chat is up again from eu-west after 4m 30s down (8 failed runs)"
    );
    assert!(!a.summary.contains("DOWN"), "{}", a.summary);
    assert!(!a.summary.contains("in a row"), "{}", a.summary);
    // The firing text is kept below, for what it was.
    assert!(a.description.contains("runs in a row)."), "{}", a.description);
}

impl Harness {
    /// One run of `run`, changed by `with` first (a burst, a warm-up).
    fn run_with(&mut self, run: Run, with: impl FnOnce(&mut Outcome)) -> Vec<Notification> {
        self.now += STEP;
        let mut o = outcome(&self.probe, run, self.now);
        with(&mut o);
        self.alerting.observe(&o, self.now).notifications
    }
}

/// A burst of four whose first tokens came `ms` apart after 50 ms.
fn burst(step_ms: u64) -> Box<crate::outcome::Burst> {
    let t = |ms: u64| {
        Some(crate::outcome::Timing {
            ttft: Some(Duration::from_millis(ms)),
            total: Duration::from_millis(ms + 150),
        })
    };
    Box::new(crate::outcome::Burst {
        alone: t(50),
        requests: (0..4).map(|i| t(50 + i * step_ms)).collect(),
    })
}

#[test]
fn a_burst_spread_wider_than_its_target_degrades_and_a_tight_one_resolves() {
    let target = Slo {
        burst_spread_pct: Some(50),
        ..slo(None, None)
    };
    let mut h = Harness::new(alert_config(), target);
    // One slot: 50, 250, 450, 650 ms (64 %); three such bursts fire.
    let queued = |o: &mut Outcome| o.burst = Some(burst(200));
    assert!(h.run_with(Ok, queued).is_empty());
    assert!(h.run_with(Ok, queued).is_empty());
    let fired = h.run_with(Ok, queued);
    assert_eq!(events(&fired), [(AlertEvent::Firing, Condition::Degraded)]);
    assert!(
        fired[0].alert.summary.contains(
            "a burst of 4's first-token times spread 64 % of their mean (target 50 %): requests queue"
        ),
        "{}",
        fired[0].alert.summary
    );
    // Four slots: within 5 ms of each other.
    let together = |o: &mut Outcome| o.burst = Some(burst(2));
    assert!(h.run_with(Ok, together).is_empty());
    assert_eq!(
        events(&h.run_with(Ok, together)),
        [(AlertEvent::Resolved, Condition::Degraded)]
    );
}

#[test]
fn warmup_grace_holds_a_warming_servers_failures_but_not_its_errors() {
    let warmup = |o: &mut Outcome| {
        o.conditions.warmup = Some(crate::outcome::Warmup {
            since: UNIX_EPOCH,
            cause: "the server answered that it is loading the model".into(),
        })
    };
    let graced = AlertConfig {
        warmup_grace: true,
        ..alert_config()
    };
    let mut h = Harness::new(graced.clone(), slo(None, None));
    for _ in 0..6 {
        assert!(h.run_with(Fail(FailureReason::Loading), warmup).is_empty());
        assert!(
            h.run_with(Fail(FailureReason::TimeoutFirstToken), warmup)
                .is_empty()
        );
    }
    // A server that refuses or fails in its warm-up is still paged about.
    let mut h = Harness::new(graced, slo(None, None));
    let notes: Vec<_> = (0..3)
        .flat_map(|_| h.run_with(Fail(FailureReason::Http5xx), warmup))
        .collect();
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Down)]);
    // Without grace, loading is down like any failure.
    let mut h = Harness::new(alert_config(), slo(None, None));
    let notes: Vec<_> = (0..3)
        .flat_map(|_| h.run_with(Fail(FailureReason::Loading), warmup))
        .collect();
    assert_eq!(events(&notes), [(AlertEvent::Firing, Condition::Down)]);
    // Out of the warm-up, grace or not, loading pages.
    let mut h = Harness::new(
        AlertConfig {
            warmup_grace: true,
            ..alert_config()
        },
        slo(None, None),
    );
    assert_eq!(
        events(&h.runs(&[Fail(FailureReason::Loading); 3])),
        [(AlertEvent::Firing, Condition::Down)]
    );
}
