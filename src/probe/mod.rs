//! Probes: one file per API kind behind the small [`Probe`] trait, and the closed
//! [`AnyProbe`] enum that dispatches to them (no registry: the list of kinds is the
//! `kind:` tag of the YAML).
//!
//! A probe sends one request and says what happened; it never sleeps, retries or records
//! metrics. [`ReadyProbe::run_once`] gives every run its deadlines and stamps the result
//! into an [`Outcome`]. Probes see only config, outcome, framing, net and payload.

pub mod anthropic;
pub mod framing;
pub mod http;
pub mod ollama;
pub mod openai;
mod stream;
pub mod tgi;

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::config::{Kind, ProbeConfig, display_url};
use crate::net::{BuildError, TlsRoots};
use crate::outcome::{Failure, FailureReason, Observation, Outcome, ProbeIdentity};

/// The deadlines of one run. The probe takes its own start instant after preparing the
/// request (so request building is never inside the measured time); the deadlines are
/// set a few microseconds earlier, when the run begins.
#[derive(Debug, Clone, Copy)]
pub struct RunContext {
    /// The whole response, terminator included, must be in by then.
    pub deadline: tokio::time::Instant,
    /// The first generated token must be in by then (streaming kinds).
    pub first_token_deadline: tokio::time::Instant,
}

/// One request, measured.
pub trait Probe {
    fn run(&self, cx: &RunContext) -> impl Future<Output = Observation> + Send;
}

/// The closed set of probe kinds.
pub enum AnyProbe {
    OpenAi(openai::OpenAiProbe),
    Ollama(ollama::OllamaProbe),
    Tgi(tgi::TgiProbe),
    Anthropic(anthropic::AnthropicProbe),
    Http(http::HttpProbe),
}

impl Probe for AnyProbe {
    async fn run(&self, cx: &RunContext) -> Observation {
        match self {
            AnyProbe::OpenAi(p) => p.run(cx).await,
            AnyProbe::Ollama(p) => p.run(cx).await,
            AnyProbe::Tgi(p) => p.run(cx).await,
            AnyProbe::Anthropic(p) => p.run(cx).await,
            AnyProbe::Http(p) => p.run(cx).await,
        }
    }
}

/// A probe built from its config: client made, prompts loaded, identity fixed. This is
/// what the scheduler runs; the config it came from is kept to detect changes on reload.
pub struct ReadyProbe {
    pub config: ProbeConfig,
    pub identity: Arc<ProbeIdentity>,
    probe: AnyProbe,
}

impl ReadyProbe {
    pub fn build(config: &ProbeConfig, location: &str, roots: &TlsRoots) -> Result<Self, BuildError> {
        let probe = match config.kind {
            Kind::OpenAiChat | Kind::OpenAiCompletions | Kind::OpenAiResponses => {
                AnyProbe::OpenAi(openai::OpenAiProbe::build(config, roots)?)
            }
            Kind::Ollama => AnyProbe::Ollama(ollama::OllamaProbe::build(config, roots)?),
            Kind::Tgi => AnyProbe::Tgi(tgi::TgiProbe::build(config, roots)?),
            Kind::Anthropic => AnyProbe::Anthropic(anthropic::AnthropicProbe::build(config, roots)?),
            Kind::Http => AnyProbe::Http(http::HttpProbe::build(config, roots)?),
        };
        let identity = ProbeIdentity {
            name: config.name.clone(),
            kind: config.kind.as_str(),
            model: config.model.clone().unwrap_or_default(),
            location: location.to_owned(),
            labels: config.labels.clone(),
            endpoint: display_url(&config.url),
        };
        Ok(ReadyProbe {
            config: config.clone(),
            identity: Arc::new(identity),
            probe,
        })
    }

    /// Runs the probe once with its deadlines. Never fails: a failed run is an
    /// `Outcome` with a reason. The outer timeout is a safety net: probes enforce their
    /// own deadlines so that a timed-out run keeps the phases it did measure.
    pub async fn run_once(&self) -> Outcome {
        let started_at = SystemTime::now();
        let begun = Instant::now();
        let now = tokio::time::Instant::from_std(begun);
        let cx = RunContext {
            deadline: now + self.config.timeout,
            first_token_deadline: now + self.config.first_token_timeout,
        };
        let grace = std::time::Duration::from_millis(500);
        let observation = match tokio::time::timeout_at(cx.deadline + grace, self.probe.run(&cx)).await {
            Ok(o) => o,
            Err(_) => Observation::failed(
                begun,
                Failure::new(
                    FailureReason::TimeoutTotal,
                    format!("no result within {:?}", self.config.timeout),
                ),
            ),
        };
        Outcome {
            probe: self.identity.clone(),
            started_at,
            schedule_lag: std::time::Duration::ZERO,
            observation,
        }
    }
}

/// The start of a server's text for a message: at most 80 characters.
pub(crate) fn preview(s: &str) -> String {
    let mut p: String = s.chars().take(80).collect();
    if p.len() < s.len() {
        p.push_str("...");
    }
    p
}

/// Removes configured secrets (header values, and the token part of `Bearer x`) from
/// text that comes back from a server, since error bodies sometimes echo credentials.
#[derive(Debug, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(config: &ProbeConfig) -> Self {
        let mut secrets = Vec::new();
        for (_, value) in &config.headers {
            let v = value.expose();
            // Short values (`application/json`-like, `1`) are not secrets and would
            // garble messages; API keys are long.
            for part in std::iter::once(v).chain(v.split_whitespace()) {
                if part.len() >= 8 {
                    secrets.push(part.to_owned());
                }
            }
        }
        if let Some(q) = config.url.query() {
            secrets.extend(
                q.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(_, v)| v.to_owned())
                    .filter(|v| v.len() >= 8),
            );
        }
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    pub fn clean(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "<redacted>");
            }
        }
        out
    }
}
