//! Probes: one file per API kind behind the small [`Probe`] trait; kinds.rs is the closed
//! list of them ([`kinds::Kind`], [`AnyProbe`]) and the dispatch (no registry: the list
//! of kinds is the `kind:` tag of the YAML). generation.rs is the streaming driver the
//! LLM kinds share, endpoint.rs the phase-timed request every kind sends with, and
//! dialect.rs the trait each streaming kind implements to write its protocol's side in
//! the simulator.
//!
//! A probe sends one request and says what happened; it never sleeps, retries or records
//! metrics. [`ReadyProbe::run_once`] gives every run its deadlines and stamps the result
//! into an [`Outcome`]. Probes import config, outcome, net, payload, redact and human
//! (ARCHITECTURE.md's rooms table, held by tests/it/architecture.rs).

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
use std::time::{Duration, Instant, SystemTime};

use crate::config::{MetricsDetail, ProbeConfig, display_url};
use crate::net::TlsRoots;
use crate::outcome::{Failure, FailureReason, Observation, Outcome, ProbeIdentity, TraceContext};
use crate::payload::images::{ImageError, ImageStore};
use crate::redact::{Redactor, SharedRedactor};
pub use kinds::AnyProbe;

/// What building a probe needs besides its config: the TLS roots (loaded once), the
/// image store (shared, so each image is encoded once for all probes and reloads) and
/// the config's secrets (kept out of every message and shown endpoint).
#[derive(Clone)]
pub struct BuildContext {
    pub roots: TlsRoots,
    pub images: Arc<ImageStore>,
    pub redactor: SharedRedactor,
}

impl BuildContext {
    pub fn new() -> Self {
        BuildContext {
            roots: TlsRoots::system(),
            images: Arc::new(ImageStore::default()),
            redactor: SharedRedactor::default(),
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
        })
    }

    /// Whether it was built from `config`: a reload leaves it running.
    pub fn built_from(&self, config: &Arc<ProbeConfig>) -> bool {
        Arc::ptr_eq(&self.config, config) || *self.config == **config
    }

    /// Runs the probe once with its deadlines. Never fails: a failed run is an
    /// `Outcome` with a reason. The outer timeout is a safety net: probes enforce their
    /// own deadlines so that a timed-out run keeps the phases it did measure.
    pub async fn run_once(&self) -> Outcome {
        let started_at = SystemTime::now();
        let begun = Instant::now();
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
        // Probes enforce their own deadlines, so a timed-out run keeps the phases it did
        // measure; this outer bound is only a safety net.
        let bound = self.config.timeout + Duration::from_secs(2);
        let mut observation = match tokio::time::timeout(bound, self.probe.run(&limits)).await {
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
        }
        Outcome {
            probe: self.identity.clone(),
            started_at,
            schedule_lag: Duration::ZERO,
            trace: limits.trace,
            observation,
        }
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
