//! Lanes: what one agent knows of each endpoint it probes, shared by all its probes of
//! that endpoint (the same scheme, host and port: one server, whatever the path).
//!
//! - **Turns.** Runs of one endpoint take turns: on a server with one slot, two probes
//!   run at once would each measure the other's queue (a probe alone gets TTFT 50 ms;
//!   beside another, 2.4 s). A probe with `overlap: true` does not wait its turn.
//! - **Idle time.** When the agent's last request to the endpoint ended, so each run
//!   says how long the endpoint had been idle before it (`Conditions::idle`).
//! - **Quiet before a cold run.** A cold probe announces its next tick; from `idle`
//!   before it the agent's other probes of the endpoint hold off ([`Lane::holds_off`]),
//!   so the agent itself does not keep the server warm.
//! - **Restarts.** A loading answer, a server that accepts connections again after
//!   refusing them, a changed model identity or a server that says it loaded the model
//!   for a request: each starts the endpoint's warm-up ([`Lane::after_run`]).
//!
//! Lanes outlive reloads ([`Lanes`] is kept by the agent's `BuildContext`), so a rebuilt
//! probe keeps its endpoint's idle time and restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crate::outcome::{FailureReason, Observation, Warmup};

/// A server's own load time above this means it loaded the model for the request (a
/// warm Ollama says a few milliseconds; a load takes seconds).
pub const LOAD_MEANS_COLD: Duration = Duration::from_secs(1);

/// After this long without a request a server may unload its model by itself (Ollama's
/// default `keep_alive`): loading it again then is the server's way, not a restart.
pub const UNLOADS_AFTER: Duration = Duration::from_secs(5 * 60);

/// A restart within this many warm-up windows of the last warm-up's start opens no new
/// one: a server that restarts again and again is failing, not warming up, and must not
/// keep the paging grace of a warm-up (`alert.warmup_grace`) for good. With the default
/// 5-minute window a flapping server is graced 5 minutes in 20 and paged in the others.
pub const REWARM_AFTER_WINDOWS: u32 = 4;

/// Every lane of an agent, by endpoint.
#[derive(Debug, Default)]
pub struct Lanes {
    lanes: Mutex<HashMap<String, Arc<Lane>>>,
}

impl Lanes {
    /// The lane of a probe's endpoint (see [`lane_key`]), made at its first use.
    pub fn lane(&self, url: &http::Uri, server: Option<&str>) -> Arc<Lane> {
        let key = lane_key(url, server);
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        lanes
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Lane::new(key)))
            .clone()
    }
}

/// What makes two probes' endpoints one: the `server` the user named, or else the
/// URL's scheme, host and port (the scheme's default when the URL has none). The host
/// is compared in lower case without a trailing dot, and this machine's loopback
/// names (`localhost`, `127.0.0.1`, `[::1]`) are one: a newcomer writes one probe with
/// each and means one server. Names are not resolved: two hosted APIs behind one
/// CDN address are not one server.
pub fn lane_key(url: &http::Uri, server: Option<&str>) -> String {
    if let Some(name) = server {
        return format!("server {name}");
    }
    let scheme = url.scheme_str().unwrap_or("http");
    let port = url.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
    let host = url.host().unwrap_or_default().to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host);
    let host = match host {
        "127.0.0.1" | "[::1]" | "localhost" => "localhost",
        other => other,
    };
    format!("{scheme}://{host}:{port}")
}

/// One endpoint, as this agent uses it.
#[derive(Debug)]
pub struct Lane {
    key: String,
    /// Held by a run of a probe that takes turns, from before its request to after its
    /// identity ask; tokio's lock is fair, so probes come in the order they asked.
    turn: tokio::sync::Mutex<()>,
    state: Mutex<State>,
}

impl State {
    fn idle(&self, now: Instant) -> Duration {
        if self.in_flight > 0 {
            return Duration::ZERO;
        }
        now.saturating_duration_since(self.last_end.unwrap_or(self.opened))
    }
}

#[derive(Debug)]
struct State {
    /// When the lane was made (the agent's start, for its endpoints).
    opened: Instant,
    /// When the last request to the endpoint ended.
    last_end: Option<Instant>,
    /// Requests in flight (more than one only for probes that overlap).
    in_flight: u32,
    /// Cold probes' coming runs, each keeping the endpoint quiet before it.
    quiet: Vec<Quiet>,
    restarts: Restarts,
}

/// A cold run to come: from `from` the other probes hold off, until the run begins or
/// `until` passes (a probe removed before its run holds nobody off for long).
#[derive(Debug, Clone, Copy)]
struct Quiet {
    holder: u64,
    from: Instant,
    tick: Instant,
    until: Instant,
}

/// What the endpoint's answers said of restarts.
#[derive(Debug, Default)]
struct Restarts {
    /// The last restart seen: when (monotonic, for windows) and what showed it.
    last: Option<(Instant, Warmup)>,
    /// Whether a run succeeded since: until one has, loading answers are the same
    /// restart, not new ones.
    served_since: bool,
    /// Whether the last run could not connect.
    unreachable: bool,
    /// The identity digest each probe saw last: probes of one server ask different
    /// things of it (one kind's `/v1/models`, another's `/api/ps`).
    digests: HashMap<Arc<str>, String>,
    /// The server's process start each probe saw last (probe/identity/start.rs).
    starts: HashMap<Arc<str>, String>,
}

/// A request in flight on a lane; its drop is the end of the request (the endpoint's
/// idle time starts again), however the run ended.
#[derive(Debug)]
pub struct Active<'a> {
    lane: &'a Lane,
    /// How long the endpoint had been idle before this request.
    pub idle: Duration,
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        let mut s = self.lane.state();
        s.in_flight = s.in_flight.saturating_sub(1);
        s.last_end = Some(Instant::now());
    }
}

impl Lane {
    fn new(key: String) -> Self {
        Lane {
            key,
            turn: tokio::sync::Mutex::new(()),
            state: Mutex::new(State {
                opened: Instant::now(),
                last_end: None,
                in_flight: 0,
                quiet: Vec::new(),
                restarts: Restarts::default(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `scheme://host:port`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Waits until no other run that takes turns is using the endpoint.
    pub async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// How long the endpoint has been idle at `now`: since the last request ended, or
    /// since the lane was made; zero while a request is in flight.
    pub fn idle(&self, now: Instant) -> Duration {
        self.state().idle(now)
    }

    /// A request of `holder` starts: its idle time before, and its cold-run quiet is
    /// over (that of its ticks up to now). One lock: two requests that start together
    /// cannot both find the endpoint idle.
    pub fn begin(&self, holder: u64) -> Active<'_> {
        let now = Instant::now();
        let mut s = self.state();
        let idle = s.idle(now);
        s.in_flight += 1;
        s.quiet.retain(|q| !(q.holder == holder && q.tick <= now));
        Active { lane: self, idle }
    }

    /// A cold probe's next run at `tick`: the endpoint is to be quiet for `idle` before
    /// it; the hold ends when that run begins, or at the latest `slack` after the tick.
    pub fn reserve(&self, holder: u64, tick: Instant, idle: Duration, slack: Duration) {
        let mut s = self.state();
        s.quiet.retain(|q| !(q.holder == holder && q.tick == tick));
        s.quiet.push(Quiet {
            holder,
            from: tick.checked_sub(idle).unwrap_or(tick),
            tick,
            until: tick + slack,
        });
    }

    /// Drops every hold of `holder` (a cold probe that is gone).
    pub fn forget(&self, holder: u64) {
        self.state().quiet.retain(|q| q.holder != holder);
    }

    /// Whether a run of `holder` must not go now: another probe's cold run is due and
    /// the endpoint is being kept quiet for it; `Some` with how long that hold lasts at
    /// most. A held cold probe gives up its own hold of the tick it misses, or it would
    /// hold the other off in turn.
    pub fn holds_off(&self, holder: u64, now: Instant) -> Option<Duration> {
        let mut s = self.state();
        s.quiet.retain(|q| q.until > now);
        let hold = s
            .quiet
            .iter()
            .filter(|q| q.holder != holder && q.from <= now)
            .map(|q| q.until.saturating_duration_since(q.from))
            .max()?;
        s.quiet.retain(|q| !(q.holder == holder && q.tick <= now));
        Some(hold)
    }

    /// Reads a finished run of `probe` for a restart of the endpoint and says the last
    /// warm-up, with its monotonic start. `begun` and `started_at` are the run's start;
    /// `idle` the endpoint's idle time before it: a cold run's model load, or one after
    /// [`UNLOADS_AFTER`] idle, is the server's own unloading, not a restart. `warmup` is
    /// the probe's window ([`REWARM_AFTER_WINDOWS`]).
    #[allow(clippy::too_many_arguments)]
    pub fn after_run(
        &self,
        probe: &Arc<str>,
        observation: &Observation,
        idle: Duration,
        cold: bool,
        warmup: Duration,
        begun: Instant,
        started_at: SystemTime,
    ) -> Option<(Instant, Warmup)> {
        let mut s = self.state();
        let r = &mut s.restarts;
        let load_expected = cold || idle >= UNLOADS_AFTER;
        let seen = |cause: String, r: &mut Restarts| {
            if r.last
                .as_ref()
                .is_some_and(|(at, _)| begun.saturating_duration_since(*at) < warmup * REWARM_AFTER_WINDOWS)
            {
                return;
            }
            r.last = Some((
                begun,
                Warmup {
                    since: started_at,
                    cause,
                },
            ));
        };
        match observation.failure().map(|f| f.reason) {
            Some(FailureReason::Loading) => {
                // An answer, if only "loading": after refusals it is where the restart
                // shows first, and the good run after it is the same restart, not another.
                r.unreachable = false;
                // One restart however many loading answers it gives.
                if r.last.is_none() || r.served_since {
                    seen("the server answered that it is loading the model".into(), r);
                    r.served_since = false;
                }
            }
            Some(FailureReason::Connect) => r.unreachable = true,
            Some(_) => {}
            None => {
                if std::mem::take(&mut r.unreachable) {
                    seen(
                        "the endpoint accepts connections again after refusing them".into(),
                        r,
                    );
                }
                if let Some(identity) = &observation.served.identity {
                    let before = r.digests.insert(probe.clone(), identity.digest.clone());
                    if before.is_some_and(|d| d != identity.digest) {
                        seen(format!("the served model changed to {}", identity.summary), r);
                    }
                }
                if let Some(start) = &observation.served.server_start {
                    let before = r.starts.insert(probe.clone(), start.clone());
                    if before.is_some_and(|b| b != *start) {
                        seen(
                            "the server's process started anew (its start time changed)".into(),
                            r,
                        );
                    }
                }
                if let Some((_, load)) = observation
                    .server_reported
                    .iter()
                    .find(|(stage, d)| *stage == "load" && *d >= LOAD_MEANS_COLD && !load_expected)
                {
                    seen(
                        format!(
                            "the server loaded the model for this request ({})",
                            crate::human::seconds(load.as_secs_f64())
                        ),
                        r,
                    );
                }
                r.served_since = true;
            }
        }
        r.last.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Failure, ModelIdentity};

    fn lane() -> Arc<Lane> {
        Lanes::default().lane(
            &"http://Host.example:8080/v1/chat/completions".parse().unwrap(),
            None,
        )
    }

    #[test]
    fn one_server_is_one_lane_whatever_the_path() {
        let lanes = Lanes::default();
        let lane = |url: &str| lanes.lane(&url.parse().unwrap(), None);
        let a = lane("http://h:8080/v1/chat/completions");
        let b = lane("http://H:8080/v1/completions?x=1");
        let c = lane("http://h:8081/v1/completions");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(
            lane_key(&"https://api.example.com/v1".parse().unwrap(), None),
            "https://api.example.com:443"
        );
        assert_eq!(
            lane_key(&"https://API.example.com.:443/v1".parse().unwrap(), None),
            "https://api.example.com:443"
        );
    }

    #[test]
    fn the_loopback_names_are_one_server_and_a_named_server_joins_any_urls() {
        let lanes = Lanes::default();
        let lane = |url: &str, server: Option<&str>| lanes.lane(&url.parse().unwrap(), server);
        let local = lane("http://localhost:8080/v1/chat/completions", None);
        for same in ["http://127.0.0.1:8080/completion", "http://[::1]:8080/v1/models"] {
            assert!(Arc::ptr_eq(&local, &lane(same, None)), "{same}");
        }
        // Another address of the loopback net may be another server.
        assert!(!Arc::ptr_eq(&local, &lane("http://127.0.0.2:8080/", None)));
        // A gateway and the server's own gRPC port, named as one server by the user.
        let http = lane("https://gateway.example/v2/models/m/infer", Some("gpu-1"));
        let grpc = lane("http://10.0.0.7:8001", Some("gpu-1"));
        assert!(Arc::ptr_eq(&http, &grpc));
        assert!(!Arc::ptr_eq(&http, &lane("https://gateway.example/v1", None)));
    }

    #[test]
    fn the_idle_time_runs_from_the_last_request_and_stops_while_one_is_in_flight() {
        let lane = lane();
        let first = lane.begin(1);
        assert!(first.idle < Duration::from_secs(1));
        // Another probe that overlaps: the endpoint was not idle at all.
        let second = lane.begin(2);
        assert_eq!(second.idle, Duration::ZERO);
        drop(first);
        drop(second);
        std::thread::sleep(Duration::from_millis(20));
        let third = lane.begin(1);
        assert!(third.idle >= Duration::from_millis(20), "{:?}", third.idle);
    }

    #[test]
    fn a_cold_run_holds_the_others_off_from_its_idle_window_until_it_begins() {
        let lane = lane();
        let now = Instant::now();
        let tick = now + Duration::from_secs(600);
        lane.reserve(7, tick, Duration::from_secs(360), Duration::from_secs(30));
        // Before the window: nobody is held.
        assert!(lane.holds_off(1, now).is_none());
        assert!(lane.holds_off(1, tick - Duration::from_secs(361)).is_none());
        // In it: the others are (for at most the window and the slack), the cold probe
        // itself is not.
        assert_eq!(
            lane.holds_off(1, tick - Duration::from_secs(359)),
            Some(Duration::from_secs(390))
        );
        assert!(lane.holds_off(7, tick - Duration::from_secs(10)).is_none());
        // A hold whose run never came ends by itself.
        assert!(lane.holds_off(1, tick + Duration::from_secs(31)).is_none());
        // The run's begin ends the hold.
        lane.reserve(7, now, Duration::from_secs(5), Duration::from_secs(30));
        assert!(lane.holds_off(1, now).is_some());
        drop(lane.begin(7));
        assert!(lane.holds_off(1, now).is_none());
        // A removed cold probe holds nobody.
        lane.reserve(7, now, Duration::from_secs(5), Duration::from_secs(30));
        lane.forget(7);
        assert!(lane.holds_off(1, now).is_none());
        // Two cold probes: one held by the other's window gives up its own hold of the
        // tick it missed, so the other is not held by it in turn.
        lane.reserve(
            7,
            now + Duration::from_secs(10),
            Duration::from_secs(60),
            Duration::from_secs(30),
        );
        lane.reserve(8, now, Duration::from_secs(60), Duration::from_secs(30));
        assert!(lane.holds_off(8, now).is_some());
        assert!(lane.holds_off(7, now + Duration::from_secs(10)).is_none());
    }

    fn run(result: Result<(), FailureReason>) -> Observation {
        let mut o = Observation::new(Instant::now());
        o.result = result.map_err(|r| Failure::new(r, "x"));
        o
    }

    /// The default warm-up window: no new warm-up within 20 minutes of one.
    const FIVE_MINUTES: Duration = Duration::from_secs(300);

    /// Runs of one probe on a clock of whole minutes: `after(minute, observation)` reads
    /// the run begun then, after 30 s idle, not cold.
    struct Clock {
        lane: Arc<Lane>,
        probe: Arc<str>,
        t0: Instant,
        wall: SystemTime,
    }

    impl Clock {
        fn new() -> Self {
            Clock {
                lane: lane(),
                probe: "chat".into(),
                t0: Instant::now(),
                wall: SystemTime::now(),
            }
        }

        fn at(&self, minute: u64) -> SystemTime {
            self.wall + Duration::from_secs(60 * minute)
        }

        fn after(&self, minute: u64, o: &Observation) -> Option<SystemTime> {
            self.read(minute, o, Duration::from_secs(30), false)
        }

        fn read(&self, minute: u64, o: &Observation, idle: Duration, cold: bool) -> Option<SystemTime> {
            let begun = self.t0 + Duration::from_secs(60 * minute);
            self.lane
                .after_run(&self.probe, o, idle, cold, FIVE_MINUTES, begun, self.at(minute))
                .map(|(_, w)| w.since)
        }

        fn cause(&self) -> String {
            self.lane.state().restarts.last.as_ref().unwrap().1.cause.clone()
        }
    }

    #[test]
    fn loading_answers_and_a_server_back_after_refusing_are_restarts() {
        let c = Clock::new();
        assert_eq!(c.after(0, &run(Ok(()))), None);
        // Refused, then back: a restart, dated at the first good run.
        assert_eq!(c.after(1, &run(Err(FailureReason::Connect))), None);
        assert_eq!(c.after(2, &run(Ok(()))), Some(c.at(2)));
        assert!(c.cause().contains("accepts connections again"), "{}", c.cause());
        // Loading, an hour on: another; loading twice is one restart.
        assert_eq!(c.after(70, &run(Err(FailureReason::Loading))), Some(c.at(70)));
        assert_eq!(c.after(71, &run(Err(FailureReason::Loading))), Some(c.at(70)));
        assert_eq!(c.after(72, &run(Ok(()))), Some(c.at(70)));
        // Other failures say nothing of a restart.
        assert_eq!(c.after(140, &run(Err(FailureReason::Http5xx))), Some(c.at(70)));
        assert_eq!(c.after(141, &run(Err(FailureReason::Loading))), Some(c.at(141)));
    }

    #[test]
    fn a_server_that_restarts_again_within_four_windows_opens_no_new_warmup() {
        let c = Clock::new();
        assert_eq!(c.after(0, &run(Err(FailureReason::Loading))), Some(c.at(0)));
        // Flapping: up, loading again, up, loading...: still the first warm-up, which
        // ends (for paging's grace) at its probe's `warmup` (5 minutes here).
        for minute in (2..20).step_by(2) {
            assert_eq!(c.after(minute, &run(Ok(()))), Some(c.at(0)));
            assert_eq!(
                c.after(minute + 1, &run(Err(FailureReason::Loading))),
                Some(c.at(0))
            );
        }
        c.after(20, &run(Ok(())));
        assert_eq!(c.after(21, &run(Err(FailureReason::Loading))), Some(c.at(21)));
    }

    #[test]
    fn refusals_then_loading_then_answers_are_one_restart() {
        // A restarted server that refuses connections, then says it is loading, then
        // serves (a llama-server that listens before its model is loaded).
        let c = Clock::new();
        assert_eq!(c.after(0, &run(Ok(()))), None);
        assert_eq!(c.after(1, &run(Err(FailureReason::Connect))), None);
        assert_eq!(c.after(2, &run(Err(FailureReason::Loading))), Some(c.at(2)));
        let loading = c.cause();
        assert_eq!(c.after(3, &run(Ok(()))), Some(c.at(2)));
        assert_eq!(c.cause(), loading);
    }

    #[test]
    fn a_new_model_identity_and_a_load_the_server_did_not_owe_are_restarts() {
        let c = Clock::new();
        let with = |digest: &str, load: Duration| {
            let mut o = run(Ok(()));
            o.served.identity = Some(Arc::new(ModelIdentity {
                digest: digest.into(),
                summary: format!("model {digest}"),
                served_model: String::new(),
                fingerprint: String::new(),
            }));
            o.server_reported.push(("load", load));
            o
        };
        let warm_load = Duration::from_millis(4);
        let load = Duration::from_millis(3200);
        // The first identity is no change; a warm Ollama's few ms of load is no load.
        assert_eq!(c.after(0, &with("a", warm_load)), None);
        assert_eq!(c.after(1, &with("b", warm_load)), Some(c.at(1)));
        assert_eq!(c.cause(), "the served model changed to model b");
        // A cold run's load is what it went looking for; one after five idle minutes
        // the server's own unloading.
        assert_eq!(
            c.read(70, &with("b", load), Duration::from_secs(400), true),
            Some(c.at(1))
        );
        assert_eq!(
            c.read(71, &with("b", load), Duration::from_secs(300), false),
            Some(c.at(1))
        );
        // A load after half a minute: the server lost its model.
        assert_eq!(c.after(72, &with("b", load)), Some(c.at(72)));
        assert_eq!(c.cause(), "the server loaded the model for this request (3.20 s)");
    }

    #[test]
    fn a_new_process_start_is_a_restart_no_run_saw() {
        let c = Clock::new();
        let started = |at: &str| {
            let mut o = run(Ok(()));
            o.served.server_start = Some(at.into());
            o
        };
        // The first start is no change, nor the same one again, nor a run that has none.
        assert_eq!(c.after(0, &started("15171748523")), None);
        assert_eq!(c.after(1, &started("15171748523")), None);
        assert_eq!(c.after(2, &run(Ok(()))), None);
        assert_eq!(c.after(3, &started("15177912118")), Some(c.at(3)));
        assert_eq!(
            c.cause(),
            "the server's process started anew (its start time changed)"
        );
    }
}
