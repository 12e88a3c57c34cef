//! When the server's process started, as the server says: a new start is a restart that
//! no run saw, a server that came back between two runs, refusing nothing, with the same
//! model (a tiny llama-server restarts in a second; a probe every 30 s sees no refusal).
//!
//! Where servers say it, on their `/metrics` (asked at most every [`START_REFRESH`]):
//!
//! - llama.cpp (`--metrics`): the `Process-Start-Time-Unix` header. Despite its name it is
//!   the host's monotonic clock at the start, in microseconds (15177912118 on a host up
//!   4.2 hours): an opaque value, new with each process.
//! - Prometheus clients' process collector: `process_start_time_seconds`, Unix seconds
//!   (vLLM, SGLang and most Python and Go servers).
//! - llama.cpp without `--metrics` (it answers 501 there): `/props`' `media_marker`,
//!   which recent builds draw at random when the process starts
//!   (`<__media_Yt6wzh1y...__>`); older builds' fixed `<__media__>` says nothing.
//!
//! Several processes behind one address (replicas behind a load balancer) answer with
//! several starts in turn. A start seen before that comes back, or a Unix start earlier
//! than the last look at another process (two were running at once), says so: the start
//! is then no longer read for the probe, rather than a restart every minute.

use std::time::{Duration, Instant, SystemTime};

/// How often a probe's server is asked for its start at most: a restart between runs
/// shows within this, plus the probe's interval. A shorter warm-up is asked after more
/// often ([`start_refresh`]).
pub const START_REFRESH: Duration = Duration::from_secs(60);

/// How often the start is asked for a probe whose restarts open a `warmup` window: a
/// fifth of it (a restart is marked within the window's first fifth), between a second
/// and [`START_REFRESH`].
pub fn start_refresh(warmup: Duration) -> Duration {
    (warmup / 5).clamp(Duration::from_secs(1), START_REFRESH)
}

/// The largest `/metrics` read: vLLM's, with its histograms, is 50-150 KB.
pub const MAX_METRICS_BODY: u64 = 1024 * 1024;
/// How often a server that has no start to give (no `/metrics`, or none in it) is
/// asked again: it may be restarted with `--metrics`.
const UNSAID_REFRESH: Duration = Duration::from_secs(5 * 60);
/// Clock skew between the agent's and the server's hosts allowed when a Unix start is
/// compared with the last look.
const SKEW: Duration = Duration::from_secs(60);
/// Starts remembered, to tell a returning process (a replica) from a new one.
const REMEMBERED: usize = 16;

/// What a `/metrics` answer says of the process's start: the value as given, and for a
/// Prometheus start its Unix seconds.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Start {
    pub value: String,
    pub unix: Option<f64>,
}

/// The start a `/metrics` answer gives, from its headers or its body.
pub(super) fn start_of(headers: &http::HeaderMap, body: &[u8]) -> Option<Start> {
    if let Some(v) = headers
        .get("process-start-time-unix")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        return Some(Start {
            value: super::clean(v),
            unix: None,
        });
    }
    if body.first() == Some(&b'{') {
        let props: serde_json::Value = serde_json::from_slice(body).ok()?;
        let marker = props.get("media_marker")?.as_str()?;
        return (marker != "<__media__>" && !marker.is_empty()).then(|| Start {
            value: super::clean(marker),
            unix: None,
        });
    }
    let text = String::from_utf8_lossy(body);
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("process_start_time_seconds")?;
        // The series itself, not `process_start_time_seconds_x`; labels allowed.
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            return None;
        }
        let after_labels = rest.rsplit_once('}').map_or(rest, |(_, r)| r);
        let token = after_labels.split_whitespace().next()?;
        let unix = token.parse::<f64>().ok().filter(|t| t.is_finite() && *t > 0.0)?;
        Some(Start {
            value: format!("{unix:.0}"),
            unix: Some(unix),
        })
    })
}

/// One probe's view of its server's start.
#[derive(Debug, Default)]
pub(super) struct StartWatch {
    next_try: Option<Instant>,
    current: Option<String>,
    seen: Vec<String>,
    last_look: Option<SystemTime>,
    /// Several processes answer: starts say nothing of restarts here.
    several: bool,
}

impl StartWatch {
    /// Whether the server is due to be asked now, `refresh` after the last time; if so,
    /// counted as asked.
    pub fn due(&mut self, now: Instant, refresh: Duration) -> bool {
        if self.several || self.next_try.is_some_and(|t| now < t) {
            return false;
        }
        self.next_try = Some(now + refresh);
        true
    }

    /// The server answered without a start: ask it again later, not every minute.
    pub fn unsaid(&mut self, now: Instant) {
        self.next_try = Some(now + UNSAID_REFRESH);
    }

    /// Takes a start the server gave at `now`; true when it showed that several
    /// processes answer (once: the starts are not read after that).
    pub fn saw(&mut self, start: &Start, now: SystemTime) -> bool {
        if self.several {
            return false;
        }
        let last_look = self.last_look.replace(now);
        if self.current.as_deref() == Some(start.value.as_str()) {
            return false;
        }
        let earlier_than_last_look = match (start.unix, last_look) {
            (Some(unix), Some(look)) => {
                let look = look
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .saturating_sub(SKEW);
                unix < look.as_secs_f64()
            }
            _ => false,
        };
        if self.current.is_some() && (self.seen.contains(&start.value) || earlier_than_last_look) {
            self.several = true;
            self.current = None;
            return true;
        }
        if self.seen.len() == REMEMBERED {
            self.seen.remove(0);
        }
        self.seen.push(start.value.clone());
        self.current = Some(start.value.clone());
        false
    }

    /// The start to compare with the last run's: `None` when unknown or meaningless.
    pub fn current(&self) -> Option<String> {
        self.current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_says_it_in_a_header_and_prometheus_clients_in_the_body() {
        // The real server's answer, as captured: its headers, then its body.
        let capture = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/transcripts/llama-server-tiny-metrics.txt"
        ))
        .unwrap();
        let (head, body) = capture.split_once("<<<\n").unwrap();
        let captured: http::HeaderMap = head
            .lines()
            .filter_map(|l| l.strip_prefix("<<< ")?.split_once(": "))
            .filter_map(|(k, v)| Some((k.parse().ok()?, v.parse().ok()?)))
            .collect();
        assert_eq!(
            start_of(&captured, body.as_bytes()),
            Some(Start {
                value: "2519301239".into(),
                unix: None
            })
        );
        let body = b"# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.76490012345e+09\nprocess_start_time_seconds_x 3\n";
        let s = start_of(&http::HeaderMap::new(), body).unwrap();
        assert_eq!(s.value, "1764900123");
        assert_eq!(s.unix, Some(1_764_900_123.45));
        let labelled = b"process_start_time_seconds{pid=\"7\"} 1700000000\n";
        assert_eq!(
            start_of(&http::HeaderMap::new(), labelled).unwrap().value,
            "1700000000"
        );
        // llama.cpp's /props: the marker drawn at the process's start, not the old fixed one.
        let props = br#"{"build_info":"b1-0c1e570","media_marker":"<__media_jqqEbEmqdkVZe9pyicidgaGZJ0xtgfLU__>","total_slots":1}"#;
        assert_eq!(
            start_of(&http::HeaderMap::new(), props).unwrap().value,
            "<__media_jqqEbEmqdkVZe9pyicidgaGZJ0xtgfLU__>"
        );
        for nothing in [
            &br#"{"media_marker":"<__media__>"}"#[..],
            br#"{"build_info":"b1"}"#,
            &b"process_start_time_secondsx 5\n"[..],
            b"vllm:num_requests_running 0\n",
            b"process_start_time_seconds NaN\n",
        ] {
            assert_eq!(start_of(&http::HeaderMap::new(), nothing), None);
        }
    }

    fn opaque(v: &str) -> Start {
        Start {
            value: v.into(),
            unix: None,
        }
    }

    #[test]
    fn a_new_start_replaces_the_old_and_a_returning_one_means_replicas() {
        let now = SystemTime::now();
        let mut w = StartWatch::default();
        w.saw(&opaque("100"), now);
        w.saw(&opaque("100"), now);
        assert_eq!(w.current().as_deref(), Some("100"));
        // A restart.
        w.saw(&opaque("900"), now);
        assert_eq!(w.current().as_deref(), Some("900"));
        // The old process answers again: two processes share the address.
        assert!(w.saw(&opaque("100"), now));
        assert_eq!(w.current(), None);
        assert!(!w.saw(&opaque("5000"), now));
        assert_eq!(w.current(), None);
        assert!(!w.due(Instant::now(), START_REFRESH));
    }

    #[test]
    fn a_unix_start_before_the_last_look_is_another_process_not_a_restart() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let unix = |secs: f64| Start {
            value: format!("{secs:.0}"),
            unix: Some(secs),
        };
        let mut w = StartWatch::default();
        w.saw(&unix(1_799_000_000.0), t0);
        // Started after the last look: the same service, restarted.
        w.saw(&unix(1_800_000_030.0), t0 + Duration::from_secs(60));
        assert_eq!(w.current().as_deref(), Some("1800000030"));
        // Started a day ago, while the other ran: a replica.
        assert!(w.saw(&unix(1_799_900_000.0), t0 + Duration::from_secs(120)));
        assert_eq!(w.current(), None);
    }

    #[test]
    fn asked_once_a_minute_and_every_five_when_the_server_has_nothing_to_say() {
        let t = Instant::now();
        let minute = start_refresh(Duration::from_secs(300));
        assert_eq!(minute, START_REFRESH);
        assert_eq!(start_refresh(Duration::from_secs(20)), Duration::from_secs(4));
        assert_eq!(start_refresh(Duration::from_secs(2)), Duration::from_secs(1));
        let mut w = StartWatch::default();
        assert!(w.due(t, minute));
        assert!(!w.due(t + Duration::from_secs(30), minute));
        assert!(w.due(t + minute, minute));
        w.unsaid(t + minute);
        assert!(!w.due(t + minute * 2, minute));
        assert!(w.due(t + minute + UNSAID_REFRESH, minute));
    }
}
