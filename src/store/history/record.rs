//! One finished run as the history keeps it ([`RunRecord`]), made from an outcome, and
//! its JSON as the API shows it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::outcome::{Outcome, TokenSource};

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
        }
    }

    pub fn success(&self) -> bool {
        self.reason.is_none()
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
    }
}
