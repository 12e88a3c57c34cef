//! Probes: one file per API kind behind the small [`Probe`] trait; kinds.rs is the closed
//! list of them ([`kinds::Kind`], [`AnyProbe`]) and the dispatch (no registry: the list
//! of kinds is the `kind:` tag of the YAML). generation.rs is the streaming driver the
//! LLM kinds share, endpoint.rs the phase-timed request every kind sends with, and
//! dialect.rs the trait each streaming kind implements to write its protocol's side in
//! the simulator.
//!
//! A probe sends one request and says what happened; it never sleeps, retries or records
//! metrics. [`ReadyProbe::run_once`] gives every run its deadlines and stamps the result
//! into an [`Outcome`]; [`ReadyProbe::run_at_tick`] and [`ReadyProbe::run_in_turn`] first
//! take the run's turn on its endpoint's lane (lane.rs: the agent's runs of one server
//! take turns, a cold probe's wait for its idle window), and a burst probe's run sends
//! its requests (alone, then together) through the same one-request path. Probes import
//! config, outcome, net, payload, redact and human (ARCHITECTURE.md's rooms table, held
//! by tests/it/architecture.rs).

mod answer;
pub mod anthropic;
pub mod dialect;
mod endpoint;
pub mod framing;
mod generation;
pub(crate) mod grpc;
pub mod grpc_health;
pub mod http;
mod identity;
pub mod kinds;
pub mod kserve_v2;
pub mod kserve_v2_grpc;
pub mod lane;
pub mod llamacpp;
pub mod ollama;
pub mod openai;
pub mod openai_responses;
pub(crate) mod structured;
pub(crate) mod tensors;
pub mod tgi;
pub(crate) mod tools;
pub mod trace;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::config::{MetricsDetail, ProbeConfig, Schedule, display_url};
use crate::net::TlsRoots;
use crate::outcome::{
    Burst, Conditions, Failure, FailureReason, Observation, Outcome, ProbeIdentity, Timing, TraceContext,
};
use crate::payload::images::{ImageError, ImageStore};
use crate::redact::{Redactor, SharedRedactor};
pub use kinds::AnyProbe;
use lane::{Lane, Lanes};

/// What building a probe needs besides its config: the TLS roots (loaded once), the
/// image store (shared, so each image is encoded once for all probes and reloads), the
/// config's secrets (kept out of every message and shown endpoint) and the endpoints'
/// lanes (shared by the probes of one endpoint, kept across reloads).
#[derive(Clone)]
pub struct BuildContext {
    pub roots: TlsRoots,
    pub images: Arc<ImageStore>,
    pub redactor: SharedRedactor,
    pub lanes: Arc<Lanes>,
}

impl BuildContext {
    pub fn new() -> Self {
        BuildContext {
            roots: TlsRoots::system(),
            images: Arc::new(ImageStore::default()),
            redactor: SharedRedactor::default(),
            lanes: Arc::default(),
        }
    }
}

impl Default for BuildContext {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a probe could not be built from a valid config (a CA file that does not parse,
/// an image file that is not an image).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Client(#[from] crate::net::TlsSetupError),
    #[error(transparent)]
    Image(#[from] ImageError),
}

/// A run's time limits, from the probe's config.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    pub timeout: Duration,
    pub first_token_timeout: Duration,
    /// The run's trace context, sent as `traceparent` on every request of the run;
    /// `None` when the probe turned tracing off.
    pub trace: Option<TraceContext>,
}

impl RunLimits {
    /// Starts the clock: called by a probe once its request is built, so building it
    /// (an image can be megabytes of JSON) is neither measured nor taken from the budget.
    pub fn start(&self) -> RunContext {
        let start = Instant::now();
        let now = tokio::time::Instant::from_std(start);
        RunContext {
            start,
            deadline: now + self.timeout,
            first_token_deadline: now + self.first_token_timeout,
            trace: self.trace,
        }
    }
}

/// A started run: its start instant and deadlines.
#[derive(Debug, Clone, Copy)]
pub struct RunContext {
    pub start: Instant,
    /// The whole response, terminator included, must be in by then.
    pub deadline: tokio::time::Instant,
    /// The first generated token must be in by then (streaming kinds).
    pub first_token_deadline: tokio::time::Instant,
    /// The run's trace context (see [`RunLimits::trace`]).
    pub trace: Option<TraceContext>,
}

/// One request, measured.
pub trait Probe {
    fn run(&self, limits: &RunLimits) -> impl Future<Output = Observation> + Send;
}

/// A probe built from its config: client made, prompts loaded, identity fixed. This is
/// what the scheduler runs; the config it came from is kept to detect changes on reload.
pub struct ReadyProbe {
    /// Shared with the probe's endpoint, which reads its checks from it.
    pub config: Arc<ProbeConfig>,
    pub identity: Arc<ProbeIdentity>,
    probe: AnyProbe,
    redactor: SharedRedactor,
    /// Asks the server which model it serves, after runs (probe/identity.rs); `None`
    /// for kinds whose servers have nothing to ask.
    served: Option<Box<identity::IdentityFetcher>>,
    /// Its endpoint's lane: turns, idle time, cold holds, restarts (lane.rs).
    lane: Arc<Lane>,
    /// This built probe's mark on its lane's holds: a rebuilt probe's holds are its own.
    holder: u64,
    /// Whether it said that its turns on the endpoint come late (once is enough).
    warned_of_turns: std::sync::atomic::AtomicBool,
    /// When its ticks began to be held off for cold runs, while they are.
    held_since: std::sync::Mutex<Option<Instant>>,
}

/// Tells built probes apart on their lanes.
static HOLDERS: AtomicU64 = AtomicU64::new(1);

impl Drop for ReadyProbe {
    fn drop(&mut self) {
        self.lane.forget(self.holder);
    }
}

impl ReadyProbe {
    pub fn build(
        config: &Arc<ProbeConfig>,
        location: &Arc<str>,
        cx: &BuildContext,
    ) -> Result<Self, BuildError> {
        let probe = AnyProbe::build(config, cx)?;
        let identity = ProbeIdentity {
            name: config.name.clone(),
            kind: config.kind.as_str(),
            model: config.model.clone().unwrap_or_default(),
            location: location.clone(),
            labels: config.labels.clone(),
            // Where it connects is shown; a secret in the URL (a `${VAR}` named as one) is
            // `<redacted>`.
            endpoint: cx.redactor.current().clean(&display_url(&config.url)),
            query: config
                .url
                .query()
                .map(|q| cx.redactor.current().clean(&format!("?{q}")))
                .unwrap_or_default(),
            full_metrics: config.metrics == MetricsDetail::Full,
        };
        Ok(ReadyProbe {
            config: config.clone(),
            identity: Arc::new(identity),
            probe,
            redactor: cx.redactor.clone(),
            served: identity::IdentityFetcher::new(config, &cx.roots).map(Box::new),
            lane: cx.lanes.lane(&config.url, config.traffic.server.as_deref()),
            holder: HOLDERS.fetch_add(1, Ordering::Relaxed),
            warned_of_turns: Default::default(),
            held_since: Default::default(),
        })
    }

    /// Its endpoint's lane.
    pub fn lane(&self) -> &Arc<Lane> {
        &self.lane
    }

    /// Runs the probe once, in its turn on its endpoint (after the agent's other runs of
    /// it that are going), as `once` does.
    pub async fn run_in_turn(&self) -> Outcome {
        let asked = Instant::now();
        let _turn = self.take_turn().await;
        self.run(asked).await
    }

    /// Runs the probe at a scheduled tick: in its turn, unless the endpoint is being kept
    /// quiet for another probe's cold run (`None`: the tick is held off). A cold probe
    /// first waits out what is left of its idle window (a run that began before the
    /// window ended inside it), before its turn, so that no other probe waits on it.
    ///
    /// A hold never starves a probe: one held on its last tick too, longer ago than a
    /// hold lasts (its ticks keep falling in cold windows: a probe no more frequent than
    /// the cold one, or a second cold probe), runs right after the hold instead.
    pub async fn run_at_tick(&self) -> Option<Outcome> {
        let asked = Instant::now();
        if let Some(idle) = self.config.traffic.cold {
            // Re-read after each wait: a request in flight at the tick ends during it,
            // and the idle time counts from its end. At most two windows: the others are
            // held off meanwhile.
            let latest = asked + idle * 2;
            loop {
                let now = Instant::now();
                let rest = idle.saturating_sub(self.lane.idle(now));
                if rest.is_zero() || now >= latest {
                    break;
                }
                tokio::time::sleep(rest.min(latest - now)).await;
            }
        }
        let mut turn = self.take_turn().await;
        self.warn_of_a_long_turn(asked.elapsed());
        let now = Instant::now();
        if let Some(hold) = self.lane.holds_off(self.holder, now) {
            let since = *self
                .held_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(now);
            if now.saturating_duration_since(since) <= hold {
                return None;
            }
            drop(turn);
            while self.lane.holds_off(self.holder, Instant::now()).is_some() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            turn = self.take_turn().await;
        }
        *self.held_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let outcome = self.run(asked).await;
        drop(turn);
        Some(outcome)
    }

    /// The probe's turn on its endpoint, unless it overlaps the others.
    async fn take_turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.config.traffic.overlap {
            false => Some(self.lane.turn().await),
            true => None,
        }
    }

    /// Says once, when a run waited for its turn more than half its interval, that the
    /// probes of its endpoint do not fit their turns: each run is late, and ticks will be
    /// skipped. A big hosted API serves many requests at once: `overlap: true` is for it.
    fn warn_of_a_long_turn(&self, waited: Duration) {
        let Schedule::Interval(interval) = self.config.schedule else {
            return;
        };
        if waited > interval / 2 && !self.warned_of_turns.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                probe = %self.config.name,
                endpoint = %self.lane.key(),
                waited_s = waited.as_secs_f64(),
                "Waited its turn behind this agent's other probes of the endpoint for more than half its interval (runs of one endpoint take turns): if the endpoint serves many requests at once, set `overlap: true` on its probes (or under defaults)."
            );
        }
    }

    /// A cold probe's next tick: the endpoint is kept quiet for its idle time before it.
    pub fn announce(&self, tick: tokio::time::Instant) {
        if let Some(idle) = self.config.traffic.cold {
            // The hold ends when the run begins; at the latest when it could have ended.
            let slack = self.config.timeout + idle + Duration::from_secs(5);
            self.lane.reserve(self.holder, tick.into_std(), idle, slack);
        }
    }

    /// Whether it was built from `config`: a reload leaves it running.
    pub fn built_from(&self, config: &Arc<ProbeConfig>) -> bool {
        Arc::ptr_eq(&self.config, config) || *self.config == **config
    }

    /// Runs the probe once with its deadlines, now, whatever else runs. Never fails: a
    /// failed run is an `Outcome` with a reason.
    pub async fn run_once(&self) -> Outcome {
        self.run(Instant::now()).await
    }

    /// One run, asked for at `asked` (the wait until now is the run's `waited`). The
    /// endpoint's lane sees the request from before it goes out until after the
    /// identity ask, so the idle time counts every request of the agent's.
    async fn run(&self, asked: Instant) -> Outcome {
        let started_at = SystemTime::now();
        let begun = Instant::now();
        let active = self.lane.begin(self.holder);
        let limits = RunLimits {
            timeout: self.config.timeout,
            first_token_timeout: self.config.first_token_timeout,
            trace: self
                .config
                .trace
                .enabled
                .then(|| trace::fresh(self.config.trace.sampled))
                .flatten(),
        };
        let (mut observation, burst) = match self.config.traffic.burst {
            None => (self.measure(&limits).await, None),
            Some(n) => {
                let (o, b) = self.burst(n, &limits).await;
                (o, Some(Box::new(b)))
            }
        };
        // Where server words enter the results: every surface (logs, history, pages,
        // the API, `once`) gets them without secrets and without control characters.
        if let Err(f) = &mut observation.result {
            f.message = crate::human::printable(&self.redactor.current().clean(&f.message));
        }
        // Which model answered: after the run, so never inside its clock. A failed
        // run says nothing of it (a half-read stream would look like another model).
        if observation.success() {
            observation.served.identity = match &self.served {
                Some(fetcher) => fetcher.identity(&observation.served).await,
                None => identity::from_response(&observation.served),
            };
            if let Some(fetcher) = &self.served {
                observation.served.server_start = fetcher.server_start().await;
            }
        }
        let idle = active.idle;
        let traffic = &self.config.traffic;
        let cold = traffic.cold.is_some_and(|needed| idle >= needed);
        let restart = self.lane.after_run(
            &self.config.name,
            &observation,
            idle,
            cold,
            traffic.warmup,
            begun,
            started_at,
        );
        drop(active);
        let conditions = Conditions {
            waited: begun.saturating_duration_since(asked),
            idle,
            cold,
            warmup: restart
                .filter(|(at, _)| begun.saturating_duration_since(*at) <= traffic.warmup)
                .map(|(_, w)| w),
        };
        Outcome {
            probe: self.identity.clone(),
            started_at,
            schedule_lag: Duration::ZERO,
            trace: limits.trace,
            observation,
            conditions,
            burst,
        }
    }

    /// One request, within its deadlines. Probes enforce their own deadlines, so a
    /// timed-out run keeps the phases it did measure; the outer bound here is only a
    /// safety net.
    async fn measure(&self, limits: &RunLimits) -> Observation {
        let begun = Instant::now();
        let bound = self.config.timeout + Duration::from_secs(2);
        match tokio::time::timeout(bound, self.probe.run(limits)).await {
            Ok(o) => o,
            Err(_) => Observation::failed(
                begun,
                Failure::new(
                    FailureReason::TimeoutTotal,
                    format!(
                        "no result within {}",
                        humantime::format_duration(self.config.timeout)
                    ),
                ),
            ),
        }
    }

    /// A burst run: one request alone, then `n` identical ones sent together, each
    /// request within the probe's deadlines. The run's observation is the burst's first
    /// failure (or the lone request's), else its slowest request, as the unluckiest of
    /// `n` users at once saw it; its tokens are every request's.
    async fn burst(&self, n: u32, limits: &RunLimits) -> (Observation, Burst) {
        let mut alone = self.measure(limits).await;
        // A server that fails one request alone gets no four more: the run has failed.
        if let Err(f) = &mut alone.result {
            f.message = format!(
                "the request sent alone before the burst: {}; the burst was not sent",
                f.message
            );
            return (alone, Burst::default());
        }
        let together = futures_util::future::join_all((0..n).map(|_| self.measure(limits))).await;
        let burst = Burst {
            alone: Timing::of(&alone),
            requests: together.iter().map(Timing::of).collect(),
        };
        // Every request's tokens cost, a failed one's included.
        let tokens = |f: fn(&Observation) -> Option<u64>| {
            std::iter::once(&alone)
                .chain(&together)
                .filter_map(f)
                .reduce(|a, b| a + b)
        };
        let (input, output) = (tokens(|o| o.input_tokens), tokens(|o| o.output_tokens));
        let (mut observation, which) = match together.iter().position(|o| !o.success()) {
            Some(i) => (
                together.into_iter().nth(i).expect("found"),
                format!("request {} of the burst of {n}", i + 1),
            ),
            None => {
                let key = |o: &Observation| if burst.by_ttft() { o.ttft() } else { o.total() };
                let slowest = together
                    .into_iter()
                    .max_by_key(|o| key(o))
                    .expect("a burst has requests");
                (slowest, String::new())
            }
        };
        if let Err(f) = &mut observation.result {
            f.message = format!("{which}: {}", f.message);
        }
        observation.turn_tokens = observation.turn_tokens.or(observation.output_tokens);
        if let Some(output) = output {
            observation.output_tokens = Some(output);
        }
        if let Some(input) = input {
            observation.input_tokens = Some(input);
        }
        (observation, burst)
    }
}

/// Builds every probe of a config, or says which one cannot be built.
pub fn build_probes(
    config: &crate::config::Config,
    location: &Arc<str>,
    cx: &BuildContext,
) -> Result<Vec<ReadyProbe>, (String, BuildError)> {
    config
        .probes
        .iter()
        .map(|p| ReadyProbe::build(p, location, cx).map_err(|e| (p.name.to_string(), e)))
        .collect()
}

/// The start of a server's text for a message: at most 80 characters. Cut with an
/// ellipsis, which tells the redaction (applied later, in `run_once`) that a secret's
/// start before it may be all that is left of one.
pub(crate) fn preview(s: &str) -> String {
    crate::human::shorten(s, 80)
}

/// The redactor for a probe's own secrets, applied where its error bodies are read;
/// `run_once` applies the whole config's.
pub(crate) fn redactor_for(config: &ProbeConfig) -> Redactor {
    let mut r = Redactor::default();
    r.add_probe(config);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redactor_hides_header_and_query_secrets_in_both_forms() {
        let text = "probes:\n  - name: x\n    kind: http\n    url: https://h/p?key=abc%2Fdef%2Bghi&x=1\n    headers: {Authorization: \"Bearer tok-123456789\"}\n";
        let config = crate::config::parse(text, std::path::Path::new("t.yaml"), &|_| None).unwrap();
        let r = redactor_for(&config.probes[0]);
        let cleaned = r.clean("got tok-123456789, abc%2Fdef%2Bghi and abc/def+ghi");
        assert_eq!(cleaned, "got <redacted>, <redacted> and <redacted>");
    }

    /// Where a probe connects is shown, from `${VAR}` too: the host, port and path (a
    /// long model name included); the credentials in the URL and a `${VAR}` named as a
    /// secret are not.
    #[test]
    fn shown_endpoints_hide_credentials_and_keep_the_host() {
        let text = "probes:\n  - name: a\n    kind: http\n    url: http://h.example/v2/models/llama-3-8b-instruct-long/infer/${TOKEN}?key=${KEY}\n  - name: b\n    kind: http\n    url: https://${HOST}:8443/health\n  - name: c\n    kind: http\n    url: ${EU_ENDPOINT}\n";
        let env = |n: &str| match n {
            "TOKEN" => Some("tok-abcdefgh12".to_owned()),
            "KEY" => Some("k".repeat(10)),
            "HOST" => Some("tenant.example.net".to_owned()),
            "EU_ENDPOINT" => Some(
                "https://probe-user:pw-0123456789@eu-gw.example.com:8443/v1/health?api_key=plainwords"
                    .to_owned(),
            ),
            _ => None,
        };
        let config = crate::config::parse(text, std::path::Path::new("t.yaml"), &env).unwrap();
        let cx = BuildContext {
            redactor: SharedRedactor::new(Redactor::for_config(&config)),
            ..BuildContext::new()
        };
        let a = ReadyProbe::build(&config.probes[0], &"x".into(), &cx).unwrap();
        assert_eq!(
            a.identity.endpoint,
            "http://h.example/v2/models/llama-3-8b-instruct-long/infer/<redacted>"
        );
        // The query is shown apart, its secret values redacted.
        assert_eq!(a.identity.query, "?key=<redacted>");
        let b = ReadyProbe::build(&config.probes[1], &"x".into(), &cx).unwrap();
        assert_eq!(b.identity.endpoint, "https://tenant.example.net:8443/health");
        let c = ReadyProbe::build(&config.probes[2], &"x".into(), &cx).unwrap();
        assert_eq!(c.identity.endpoint, "https://eu-gw.example.com:8443/v1/health");
        assert_eq!(c.identity.query, "?api_key=<redacted>");
        let r = cx.redactor.current();
        assert_eq!(
            r.clean("cannot connect to eu-gw.example.com:8443 as probe-user:pw-0123456789 with plainwords"),
            "cannot connect to eu-gw.example.com:8443 as <redacted>:<redacted> with <redacted>"
        );
    }
}
