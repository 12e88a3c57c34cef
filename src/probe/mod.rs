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
pub mod kserve_v2;
pub mod ollama;
pub mod openai;
mod stream;
pub mod tgi;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::{Kind, ProbeConfig, display_url};
use crate::net::TlsRoots;
use crate::outcome::{Failure, FailureReason, Observation, Outcome, ProbeIdentity};
use crate::payload::images::{ImageError, ImageStore};

/// What building a probe needs besides its config: the TLS roots (loaded once) and the
/// image store (shared, so each image is encoded once for all probes and reloads).
#[derive(Clone)]
pub struct BuildContext {
    pub roots: TlsRoots,
    pub images: Arc<ImageStore>,
}

impl BuildContext {
    pub fn new() -> Self {
        BuildContext {
            roots: TlsRoots::system(),
            images: Arc::new(ImageStore::default()),
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
    Client(#[from] crate::net::BuildError),
    #[error(transparent)]
    Image(#[from] ImageError),
}

/// A run's time limits, from the probe's config.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    pub timeout: Duration,
    pub first_token_timeout: Duration,
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
}

/// One request, measured.
pub trait Probe {
    fn run(&self, limits: &RunLimits) -> impl Future<Output = Observation> + Send;
}

/// The closed set of probe kinds.
pub enum AnyProbe {
    OpenAi(openai::OpenAiProbe),
    Ollama(ollama::OllamaProbe),
    Tgi(tgi::TgiProbe),
    Anthropic(anthropic::AnthropicProbe),
    Kserve(kserve_v2::KserveProbe),
    Http(http::HttpProbe),
}

impl Probe for AnyProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        match self {
            AnyProbe::OpenAi(p) => p.run(limits).await,
            AnyProbe::Ollama(p) => p.run(limits).await,
            AnyProbe::Tgi(p) => p.run(limits).await,
            AnyProbe::Anthropic(p) => p.run(limits).await,
            AnyProbe::Kserve(p) => p.run(limits).await,
            AnyProbe::Http(p) => p.run(limits).await,
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
    pub fn build(config: &ProbeConfig, location: &str, cx: &BuildContext) -> Result<Self, BuildError> {
        let probe = match config.kind {
            Kind::OpenAiChat | Kind::OpenAiCompletions | Kind::OpenAiResponses => {
                AnyProbe::OpenAi(openai::OpenAiProbe::build(config, cx)?)
            }
            Kind::Ollama => AnyProbe::Ollama(ollama::OllamaProbe::build(config, cx)?),
            Kind::Tgi => AnyProbe::Tgi(tgi::TgiProbe::build(config, cx)?),
            Kind::Anthropic => AnyProbe::Anthropic(anthropic::AnthropicProbe::build(config, cx)?),
            Kind::KserveV2 => AnyProbe::Kserve(kserve_v2::KserveProbe::build(config, cx)?),
            Kind::Http => AnyProbe::Http(http::HttpProbe::build(config, cx)?),
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
        let limits = RunLimits {
            timeout: self.config.timeout,
            first_token_timeout: self.config.first_token_timeout,
        };
        // Probes enforce their own deadlines, so a timed-out run keeps the phases it did
        // measure; this outer bound is only a safety net.
        let bound = self.config.timeout + Duration::from_secs(2);
        let observation = match tokio::time::timeout(bound, self.probe.run(&limits)).await {
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
        Outcome {
            probe: self.identity.clone(),
            started_at,
            schedule_lag: Duration::ZERO,
            observation,
        }
    }
}

/// `%XX` and `+` decoded, for matching echoed query values.
fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
            for (_, v) in q.split('&').filter_map(|kv| kv.split_once('=')) {
                // A server may echo the value as sent or decoded.
                for form in [v.to_owned(), percent_decode(v)] {
                    if form.len() >= 8 {
                        secrets.push(form);
                    }
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_for_echoed_secrets() {
        assert_eq!(percent_decode("a%2Fb%3D%3D+c"), "a/b== c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%e2%82%ac"), "%zz€");
    }

    #[test]
    fn the_redactor_hides_header_and_query_secrets_in_both_forms() {
        let text = "probes:\n  - name: x\n    kind: http\n    url: https://h/p?key=abc%2Fdef%2Bghi&x=1\n    headers: {Authorization: \"Bearer tok-123456789\"}\n";
        let config = crate::config::parse(text, std::path::Path::new("t.yaml"), &|_| None).unwrap();
        let r = Redactor::new(&config.probes[0]);
        let cleaned = r.clean("got tok-123456789, abc%2Fdef%2Bghi and abc/def+ghi");
        assert_eq!(cleaned, "got <redacted>, <redacted> and <redacted>");
    }
}
