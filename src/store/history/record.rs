//! One finished run as the history keeps it ([`RunRecord`]), made from an outcome, and
//! its JSON as the API shows it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::outcome::{Outcome, TokenSource, Warmup};

/// Failure messages are kept this short.
const MESSAGE_CHARS: usize = 300;

/// One finished run as the history keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// When the run started (wall clock).
    pub at: SystemTime,
    /// Shared with the probe's identity: a run record costs no copy of the name.
    pub probe: Arc<str>,
    pub location: Arc<str>,
    /// The failure reason's label value; `None` for a successful run.
    pub reason: Option<String>,
    pub message: Option<String>,
    pub status: Option<u16>,
    pub ttfb: Option<Duration>,
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    pub total: Option<Duration>,
    pub output_tokens: Option<u64>,
    /// Token counts' sources (`usage`, `events`, `estimated`); input tokens as counted.
    pub output_token_source: Option<&'static str>,
    pub input_tokens: Option<u64>,
    pub input_token_source: Option<&'static str>,
    pub prompt_bucket: String,
    pub image_bucket: String,
    /// The W3C trace id the run's requests carried (32 hex digits).
    pub trace_id: Option<String>,
    /// What the run met at its endpoint (the outcome's `Conditions`): the time since
    /// this agent's last request to it, and the time from the tick to the request.
    /// `None` for runs kept before the history recorded them.
    pub idle: Option<Duration>,
    pub waited: Option<Duration>,
    /// A cold probe's run that found the endpoint idle for its whole `cold.idle`.
    pub cold: bool,
    /// The endpoint's warm-up the run fell in: when it restarted, and what showed it.
    pub warmup: Option<Warmup>,
    /// A burst run's spread (standard deviation over mean) and slowdown (mean over the
    /// request sent alone); `None` for a run of one request, or a burst that had no
    /// figure (a request of it failed).
    pub burst_spread: Option<f64>,
    pub burst_slowdown: Option<f64>,
}

impl RunRecord {
    pub fn from_outcome(outcome: &Outcome) -> RunRecord {
        let o = &outcome.observation;
        RunRecord {
            at: outcome.started_at,
            probe: outcome.probe.name.clone(),
            location: outcome.probe.location.clone(),
            reason: o.failure().map(|f| f.reason.as_str().to_owned()),
            // Messages are redacted where they enter the outcome, so a plain cut is
            // enough here.
            message: o
                .failure()
                .map(|f| crate::human::shorten(&f.message, MESSAGE_CHARS)),
            status: o.http_status,
            ttfb: o.ttfb(),
            ttft: o.ttft(),
            tpot: o.tpot(),
            total: o.total(),
            output_tokens: o.output_tokens,
            output_token_source: o.token_source.map(TokenSource::as_str),
            input_tokens: o.input_tokens,
            input_token_source: o.input_token_source.map(TokenSource::as_str),
            prompt_bucket: o.prompt_bucket.to_owned(),
            image_bucket: o.image_bucket.to_owned(),
            trace_id: outcome.trace.map(|t| t.trace_id_hex()),
            idle: Some(outcome.conditions.idle),
            waited: Some(outcome.conditions.waited),
            cold: outcome.conditions.cold,
            // The cause may quote the server (a model's name): redacted where the lane
            // wrote it, cut here as messages are.
            warmup: outcome.conditions.warmup.as_ref().map(|w| Warmup {
                since: w.since,
                cause: crate::human::shorten(&w.cause, MESSAGE_CHARS),
            }),
            burst_spread: outcome.burst.as_deref().and_then(|b| b.spread()),
            burst_slowdown: outcome.burst.as_deref().and_then(|b| b.slowdown()),
        }
    }

    pub fn success(&self) -> bool {
        self.reason.is_none()
    }

    /// `cold` or `warm`; `None` for a run kept before the history recorded it (its idle
    /// time is unknown too).
    pub fn start(&self) -> Option<&'static str> {
        self.idle.map(|_| if self.cold { "cold" } else { "warm" })
    }

    pub fn to_json(&self) -> serde_json::Value {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        serde_json::json!({
            "probe": &*self.probe,
            "location": &*self.location,
            "started_at": humantime::format_rfc3339_millis(self.at).to_string(),
            "success": self.success(),
            "reason": self.reason,
            "message": self.message,
            "http_status": self.status,
            "ttfb_seconds": secs(self.ttfb),
            "ttft_seconds": secs(self.ttft),
            "tpot_seconds": secs(self.tpot),
            "total_seconds": secs(self.total),
            "output_tokens": self.output_tokens,
            "output_token_source": self.output_token_source,
            "input_tokens": self.input_tokens,
            "input_token_source": self.input_token_source,
            "prompt_bucket": self.prompt_bucket,
            "image_bucket": self.image_bucket,
            "trace_id": self.trace_id,
            "idle_seconds": secs(self.idle),
            "waited_seconds": secs(self.waited),
            "start": self.start(),
            "warmup_since": self.warmup.as_ref().map(|w| humantime::format_rfc3339_millis(w.since).to_string()),
            "warmup_cause": self.warmup.as_ref().map(|w| w.cause.as_str()),
            "burst_spread": self.burst_spread,
            "burst_slowdown": self.burst_slowdown,
        })
    }
}

impl crate::stats::Run for RunRecord {
    fn at(&self) -> SystemTime {
        self.at
    }
    fn probe(&self) -> &str {
        &self.probe
    }
    fn location(&self) -> &str {
        &self.location
    }
    fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }
    fn ttft(&self) -> Option<Duration> {
        self.ttft
    }
    fn total(&self) -> Option<Duration> {
        self.total
    }
    fn cold(&self) -> bool {
        self.cold
    }
}

/// A run for tests elsewhere in the crate: TTFT is half of `total_ms`; a failure is a
/// 503 whose message holds markup (pages must escape it).
#[cfg(test)]
pub(crate) fn sample(probe: &str, at: SystemTime, ok: bool, total_ms: u64) -> RunRecord {
    RunRecord {
        at,
        probe: probe.into(),
        location: "eu".into(),
        reason: (!ok).then(|| "http_5xx".to_owned()),
        message: (!ok).then(|| "HTTP 503: <script>alert(1)</script>".to_owned()),
        status: Some(if ok { 200 } else { 503 }),
        ttfb: Some(Duration::from_micros(1_234)),
        ttft: ok.then(|| Duration::from_millis(total_ms / 2)),
        tpot: None,
        total: Some(Duration::from_millis(total_ms)),
        output_tokens: Some(7),
        output_token_source: Some("usage"),
        input_tokens: Some(24),
        input_token_source: Some("usage"),
        prompt_bucket: "short".into(),
        image_bucket: "none".into(),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        idle: Some(Duration::from_secs(30)),
        waited: Some(Duration::ZERO),
        cold: false,
        warmup: None,
        burst_spread: None,
        burst_slowdown: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Burst, Conditions, Observation, ProbeIdentity, Timing};
    use std::time::Instant;

    /// A burst run of a cold probe in a warm-up: every condition reaches the record, the
    /// cause cut as messages are.
    #[test]
    fn a_record_keeps_what_the_run_met() {
        let t0 = Instant::now();
        let mut o = Observation::new(t0);
        o.marks.first_token = Some(t0 + Duration::from_millis(300));
        o.marks.end = Some(t0 + Duration::from_millis(400));
        let timing = |ms: u64| {
            Some(Timing {
                ttft: Some(Duration::from_millis(ms)),
                total: Duration::from_millis(ms + 100),
            })
        };
        let since = SystemTime::now() - Duration::from_secs(40);
        let outcome = Outcome {
            probe: Arc::new(ProbeIdentity {
                name: "chat".into(),
                kind: "ollama",
                model: "m".into(),
                location: "eu".into(),
                labels: Vec::new(),
                endpoint: "http://x/".into(),
                query: String::new(),
                full_metrics: false,
            }),
            started_at: SystemTime::now(),
            schedule_lag: Duration::ZERO,
            trace: None,
            observation: o,
            conditions: Conditions {
                waited: Duration::from_secs(2),
                idle: Duration::from_secs(400),
                cold: true,
                warmup: Some(Warmup {
                    since,
                    cause: "x".repeat(1000),
                }),
            },
            burst: Some(Box::new(Burst {
                alone: timing(50),
                requests: vec![timing(50), timing(250), timing(450), timing(650)],
            })),
        };
        let r = RunRecord::from_outcome(&outcome);
        assert_eq!(r.idle, Some(Duration::from_secs(400)));
        assert_eq!(r.waited, Some(Duration::from_secs(2)));
        assert_eq!(r.start(), Some("cold"));
        let w = r.warmup.as_ref().unwrap();
        assert_eq!(w.since, since);
        // At most MESSAGE_CHARS and the mark of the cut.
        assert_eq!(w.cause.chars().count(), MESSAGE_CHARS + 1);
        assert!((r.burst_spread.unwrap() - 0.6389).abs() < 0.001);
        assert!((r.burst_slowdown.unwrap() - 7.0).abs() < 1e-9);
        let mut plain = outcome;
        plain.conditions = Conditions::default();
        plain.burst = None;
        let r = RunRecord::from_outcome(&plain);
        assert_eq!((r.start(), r.warmup, r.burst_spread), (Some("warm"), None, None));
    }
}
