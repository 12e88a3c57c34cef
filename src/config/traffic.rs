//! How a probe's requests meet its endpoint, beside the requests themselves: taking
//! turns with the agent's other probes of the same server (`overlap`), cold runs that
//! wait for the server to go idle (`cold`), bursts of identical requests sent together
//! (`burst`) and how long a restarted server counts as warming up (`warmup`), into
//! [`Traffic`]. What each is for: docs/measurements.md ("What a steady probe cannot see").

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::diagnostics::Diagnostics;
use super::formats::Duration as DurationText;
use super::values::{duration, fmt_duration};

/// How long after a restart (or a model change) a server's runs count as its warm-up,
/// unless the probe says: vLLM compiles and captures graphs for its first requests,
/// llama.cpp and Ollama warm their caches; most settle within a few minutes.
pub const DEFAULT_WARMUP: Duration = Duration::from_secs(5 * 60);

/// Requests a burst sends together, at least and at most: one is not a burst, and more
/// than 16 is a load test, not a probe.
pub const BURST_SIZES: std::ops::RangeInclusive<u32> = 2..=16;

/// A probe's traffic settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traffic {
    /// Whether its runs may overlap the agent's other runs of the same endpoint
    /// (`overlap: true`); by default they take turns.
    pub overlap: bool,
    /// The server its requests reach, when the user named it (`server:`): probes
    /// with one name are one endpoint whatever their URLs.
    pub server: Option<String>,
    /// A cold probe's idle time: it runs only once the endpoint has had no request
    /// from this agent for this long, and the agent's other probes of it hold off.
    pub cold: Option<Duration>,
    /// Requests sent together each run, after one sent alone; `None` for one request.
    pub burst: Option<u32>,
    /// How long after a restart the endpoint's runs are marked as its warm-up.
    pub warmup: Duration,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            overlap: false,
            server: None,
            cold: None,
            burst: None,
            warmup: DEFAULT_WARMUP,
        }
    }
}

/// `cold:` of a probe.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Cold")]
pub(super) struct RawCold {
    /// How long the endpoint must have had no request from this agent before each
    /// run, e.g. 6m for Ollama (it unloads a model after 5 minutes idle), 2m for
    /// Knative's scale to zero. The agent's other probes of the endpoint hold off for
    /// that long before each cold run.
    #[schemars(with = "DurationText")]
    pub(super) idle: String,
}

/// What `check_traffic` reads: the probe's own keys and what it inherits.
pub(super) struct RawTraffic {
    pub(super) overlap: Option<bool>,
    pub(super) server: Option<String>,
    pub(super) cold: Option<RawCold>,
    pub(super) burst: Option<u32>,
    pub(super) warmup: Option<String>,
}

/// The probe's traffic keys. A cold probe's runs must be far enough apart to find the
/// endpoint idle: the shortest gap between its runs (its interval, or between its cron
/// fires) must exceed its idle time plus its timeout.
pub(super) fn check_traffic(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    raw: RawTraffic,
    default_overlap: Option<bool>,
    shortest_gap: Option<Duration>,
    timeout: Option<Duration>,
) -> Traffic {
    let key = |k: &str| format!("{prefix}.{k}");
    let burst = raw.burst.filter(|n| {
        let fits = BURST_SIZES.contains(n);
        if !fits {
            cx.error(
                p,
                &key("burst"),
                format!(
                    "must be between {} and {} requests sent together",
                    BURST_SIZES.start(),
                    BURST_SIZES.end()
                ),
            );
        }
        fits
    });
    let cold = raw.cold.and_then(|c| {
        let idle = duration(cx, p, &key("cold.idle"), &c.idle)?;
        if let (Some(gap), Some(timeout)) = (shortest_gap, timeout)
            && gap <= idle + timeout
        {
            cx.error(
                p,
                &key("cold.idle"),
                format!(
                    "runs {} apart cannot find the endpoint idle for {} (plus the {} timeout): make the interval longer than {}",
                    fmt_duration(gap),
                    fmt_duration(idle),
                    fmt_duration(timeout),
                    fmt_duration(idle + timeout)
                ),
            );
            return None;
        }
        Some(idle)
    });
    let burst = burst.filter(|_| {
        if cold.is_some() {
            cx.error(
                p,
                &key("burst"),
                "a cold probe sends one request: the burst's requests after it would find the endpoint warm",
            );
        }
        cold.is_none()
    });
    let server = raw.server.and_then(|s| {
        let name = s.trim();
        if name.is_empty() {
            cx.error(p, &key("server"), "must name the server (or leave the key out)");
            return None;
        }
        Some(name.to_string())
    });
    let warmup = match raw.warmup {
        Some(w) => duration(cx, p, &key("warmup"), &w).unwrap_or(DEFAULT_WARMUP),
        None => DEFAULT_WARMUP,
    };
    Traffic {
        overlap: raw.overlap.or(default_overlap).unwrap_or(false),
        server,
        cold,
        burst,
        warmup,
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use std::path::Path;
    use std::time::Duration;

    fn errors(text: &str) -> Vec<String> {
        match parse(text, Path::new("t.yaml"), &|_| None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn a_cold_probe_needs_runs_further_apart_than_its_idle_time() {
        let e = errors(
            "probes:\n  - name: c\n    kind: http\n    url: http://h/x\n    interval: 5m\n    timeout: 10s\n    cold: {idle: 6m}\n",
        );
        assert_eq!(
            e,
            [
                "t.yaml:7:18: probe \"c\": probes[0].cold.idle: runs 5m apart cannot find the endpoint idle for 6m (plus the 10s timeout): make the interval longer than 6m 10s"
            ]
        );
        let e = errors(
            "probes:\n  - name: c\n    kind: http\n    url: http://h/x\n    schedule: \"0 */5 * * * *\"\n    timeout: 10s\n    cold: {idle: 6m}\n",
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("runs 5m apart"), "{e:?}");
        let ok = parse(
            "probes:\n  - name: c\n    kind: http\n    url: http://h/x\n    interval: 15m\n    cold: {idle: 6m}\n",
            Path::new("t.yaml"),
            &|_| None,
        )
        .unwrap();
        assert_eq!(ok.probes[0].traffic.cold, Some(Duration::from_secs(360)));
        assert!(!ok.probes[0].traffic.overlap);
    }

    #[test]
    fn a_burst_is_two_to_sixteen_requests_and_halves_the_inherited_timeout() {
        let e = errors("probes:\n  - name: b\n    kind: http\n    url: http://h/x\n    burst: 1\n");
        assert_eq!(
            e,
            ["t.yaml:5:12: probe \"b\": probes[0].burst: must be between 2 and 16 requests sent together"]
        );
        let ok = parse(
            "probes:\n  - name: b\n    kind: http\n    url: http://h/x\n    burst: 4\n",
            Path::new("t.yaml"),
            &|_| None,
        )
        .unwrap();
        assert_eq!(ok.probes[0].traffic.burst, Some(4));
        // A lone request and the burst, each within the timeout, fit in the interval.
        assert_eq!(ok.probes[0].timeout, Duration::from_secs(15));
        let e = errors(
            "probes:\n  - name: b\n    kind: http\n    url: http://h/x\n    interval: 30s\n    timeout: 20s\n    burst: 4\n",
        );
        assert_eq!(
            e,
            [
                "t.yaml:6:14: probe \"b\": probes[0].timeout: a burst run sends twice (alone, then the burst), each within the timeout: 20s twice is longer than the interval (30s)"
            ]
        );
    }

    #[test]
    fn overlap_is_inherited_from_defaults_and_warmup_defaults_to_five_minutes() {
        let ok = parse(
            "defaults: {overlap: true}\nprobes:\n  - {name: a, kind: http, url: \"http://h/x\"}\n  - {name: b, kind: http, url: \"http://h/y\", overlap: false, warmup: 2m}\n",
            Path::new("t.yaml"),
            &|_| None,
        )
        .unwrap();
        assert!(ok.probes[0].traffic.overlap);
        assert!(!ok.probes[1].traffic.overlap);
        assert_eq!(ok.probes[0].traffic.warmup, super::DEFAULT_WARMUP);
        assert_eq!(ok.probes[1].traffic.warmup, Duration::from_secs(120));
    }

    #[test]
    fn a_named_server_is_kept_trimmed_and_an_empty_one_is_an_error() {
        let ok = parse(
            "probes:\n  - {name: a, kind: http, url: \"http://h/x\", server: \" gpu-1 \"}\n  - {name: b, kind: http, url: \"http://h/y\"}\n",
            Path::new("t.yaml"),
            &|_| None,
        )
        .unwrap();
        assert_eq!(ok.probes[0].traffic.server.as_deref(), Some("gpu-1"));
        assert_eq!(ok.probes[1].traffic.server, None);
        let e = errors("probes:\n  - {name: a, kind: http, url: \"http://h/x\", server: \" \"}\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("t.yaml:2:") && e[0].contains("probes[0].server: must name the server"),
            "{e:?}"
        );
    }
}
