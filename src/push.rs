//! Prometheus remote_write 1.0, for agents that cannot be scraped: every `interval` a
//! snapshot of our own metrics becomes a `WriteRequest` (protobuf, snappy block
//! format), pushed with the protocol's headers.
//!
//! The snapshot is built from the metrics themselves (`Metrics::each_sample`): the series
//! of the text format 0.0.4, same names, labels and values, without rendering text and
//! parsing it back.
//!
//! Snapshots wait in a bounded queue and go out oldest first (a series' samples must
//! arrive in time order). 5xx, 429 and network errors are retried with backoff while
//! newer snapshots queue behind; when the queue is full the oldest is dropped; a 4xx is
//! the receiver refusing the data (bad labels, too old): dropped. Each case is counted
//! in `inferprobe_remote_write_*`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::config::RemoteWriteConfig;
use crate::metrics::Metrics;
use crate::net::{
    TlsRoots, TlsSetupError, backoff, control_plane_client, describe_error, read_capped, retry_after,
};
use crate::redact::SharedRedactor;
use crate::unix_time::unix_ms_i64;

/// The remote_write 1.0 messages (prometheus/prompb types.proto and remote.proto),
/// with their field tags.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// Parses the Prometheus text format (0.0.4) into `(labels with __name__, value)`.
/// Lines it cannot read are skipped: they come from our own encoder.
pub fn parse_exposition(text: &str) -> impl Iterator<Item = (Vec<(String, String)>, f64)> + '_ {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(parse_line)
}

fn parse_line(line: &str) -> Option<(Vec<(String, String)>, f64)> {
    let name_end = line.find(['{', ' '])?;
    let mut labels = vec![("__name__".to_owned(), line[..name_end].to_owned())];
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            rest = rest.trim_start_matches(',');
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find("=\"")?;
            let name = rest[..eq].to_owned();
            rest = &rest[eq + 2..];
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (_, c) => value.push(c),
                }
            };
            rest = &rest[end + 1..];
            labels.push((name, value));
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((labels, value))
}

/// One series of a snapshot: `job` and `instance` added as a scrape would add them,
/// labels sorted by name (the protocol requires it), one sample at `timestamp` (ms).
fn to_series(
    mut labels: Vec<(String, String)>,
    value: f64,
    job: &str,
    instance: &str,
    timestamp: i64,
) -> TimeSeries {
    for (k, v) in [("job", job), ("instance", instance)] {
        if !labels.iter().any(|(n, _)| n == k) {
            labels.push((k.to_owned(), v.to_owned()));
        }
    }
    labels.sort_by(|a, b| a.0.cmp(&b.0));
    TimeSeries {
        labels: labels
            .into_iter()
            .map(|(name, value)| Label { name, value })
            .collect(),
        samples: vec![Sample { value, timestamp }],
    }
}

/// A request body: protobuf, then snappy's block format (not the framed one).
pub fn encode(series: Vec<TimeSeries>) -> Vec<u8> {
    let raw = prost::Message::encode_to_vec(&WriteRequest { timeseries: series });
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("snappy compresses any input")
}

/// A snapshot, ready to send: compressed request bodies with their sample counts.
struct Snapshot {
    bodies: VecDeque<(Vec<u8>, u64)>,
    bytes: usize,
}

/// Takes our metrics' samples and encodes them chunk by chunk, so that no more than one
/// request's series are ever held at once (10,000 probes make ~150,000 series).
fn take_snapshot(metrics: &Metrics, job: &str, instance: &str, max_samples: usize) -> Snapshot {
    let timestamp = unix_ms_i64(SystemTime::now());
    let mut bodies = VecDeque::new();
    let mut chunk = Vec::with_capacity(max_samples);
    let flush = |chunk: &mut Vec<TimeSeries>, bodies: &mut VecDeque<(Vec<u8>, u64)>| {
        if !chunk.is_empty() {
            let n = chunk.len() as u64;
            bodies.push_back((encode(std::mem::take(chunk)), n));
        }
    };
    let taken = metrics.each_sample(&mut |labels, value| {
        chunk.push(to_series(labels, value, job, instance, timestamp));
        if chunk.len() >= max_samples {
            flush(&mut chunk, &mut bodies);
        }
    });
    if let Err(e) = taken {
        tracing::warn!(error = %e, "remote_write: the agent's own series are missing from this snapshot.");
    }
    flush(&mut chunk, &mut bodies);
    let bytes = bodies.iter().map(|(b, _)| b.len()).sum();
    Snapshot { bodies, bytes }
}

/// The running pusher.
pub struct Pusher {
    config: RemoteWriteConfig,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
    instance: String,
    /// The config's secrets, removed from what the receiver answers before it is logged.
    redactor: SharedRedactor,
}

enum Outcome {
    Sent,
    Retry(Option<Duration>, String),
    Rejected(String),
}

/// The last push when the agent stops (or the pusher is replaced) is kept short: the
/// stop must fit in the shutdown grace of systemd and Kubernetes.
const FINAL_PUSH: Duration = Duration::from_secs(5);

impl Pusher {
    /// `instance` is what a scrape would call this agent (used unless configured).
    pub fn build(
        config: RemoteWriteConfig,
        roots: &TlsRoots,
        redactor: SharedRedactor,
        metrics: Arc<Metrics>,
        instance: String,
    ) -> Result<Pusher, TlsSetupError> {
        let client = control_plane_client(roots, config.ca_file.as_deref(), config.timeout)?;
        let instance = config.instance.clone().unwrap_or(instance);
        Ok(Pusher {
            config,
            client,
            metrics,
            instance,
            redactor,
        })
    }

    /// Pushes every `interval` until `cancel`, then makes a last, short push. When it
    /// replaces a pusher (a reload), `previous` finishes first, so samples stay in time
    /// order at the receiver.
    pub async fn run(self, cancel: CancellationToken, previous: Option<tokio::task::JoinHandle<()>>) {
        if let Some(previous) = previous {
            let _ = previous.await;
        }
        let mut queue: VecDeque<Snapshot> = VecDeque::new();
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry_at: Option<tokio::time::Instant> = None;
        let mut attempts = 0u32;
        tracing::info!(host = %self.redactor.current().clean(&self.config.host), interval = ?self.config.interval, "Pushing metrics with remote_write.");
        loop {
            let retry = async {
                match retry_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => self.enqueue(&mut queue).await,
                _ = retry => retry_at = None,
            }
            if retry_at.is_none() {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    r = self.drain(&mut queue, &mut attempts) => retry_at = r,
                }
            }
            self.metrics.push_queue(queue.len());
        }
        let last = async {
            self.enqueue(&mut queue).await;
            self.drain(&mut queue, &mut attempts).await;
        };
        let _ = tokio::time::timeout(FINAL_PUSH, last).await;
    }

    /// Takes a snapshot (off the async workers: rendering and encoding thousands of
    /// series is CPU work) and queues it, dropping the oldest beyond the bounds.
    async fn enqueue(&self, queue: &mut VecDeque<Snapshot>) {
        let metrics = self.metrics.clone();
        let (job, instance, max) = (
            self.config.job.clone(),
            self.instance.clone(),
            self.config.max_samples_per_send,
        );
        let Ok(snapshot) =
            tokio::task::spawn_blocking(move || take_snapshot(&metrics, &job, &instance, max)).await
        else {
            return;
        };
        queue.push_back(snapshot);
        let mut bytes: usize = queue.iter().map(|s| s.bytes).sum();
        while queue.len() > 1
            && (queue.len() > self.config.queue_snapshots || bytes > self.config.queue_max_bytes)
        {
            if let Some(old) = queue.pop_front() {
                bytes -= old.bytes;
                let samples: u64 = old.bodies.iter().map(|(_, n)| n).sum();
                self.metrics.push_samples("dropped_queue_full", samples);
                tracing::warn!(samples, "remote_write queue full: dropped the oldest snapshot.");
            }
        }
    }

    /// Sends queued bodies in order until done (`None`) or until one must wait (the
    /// time to try again).
    async fn drain(
        &self,
        queue: &mut VecDeque<Snapshot>,
        attempts: &mut u32,
    ) -> Option<tokio::time::Instant> {
        while let Some(front) = queue.front_mut() {
            let Some((body, samples)) = front.bodies.front() else {
                queue.pop_front();
                continue;
            };
            let samples = *samples;
            match self.send(body.clone()).await {
                Outcome::Sent => {
                    *attempts = 0;
                    self.metrics.push_request("success");
                    self.metrics.push_samples("sent", samples);
                    self.metrics.push_succeeded(SystemTime::now());
                    if let Some((b, _)) = front.bodies.pop_front() {
                        front.bytes -= b.len();
                    }
                }
                Outcome::Rejected(why) => {
                    self.metrics.push_request("rejected");
                    self.metrics.push_samples("dropped_rejected", samples);
                    tracing::error!(host = %self.redactor.current().clean(&self.config.host), error = %why, "remote_write rejected a request; dropped (a 4xx is not retried).");
                    if let Some((b, _)) = front.bodies.pop_front() {
                        front.bytes -= b.len();
                    }
                }
                Outcome::Retry(after, why) => {
                    *attempts += 1;
                    self.metrics.push_request("retry");
                    // A Retry-After is honoured, up to our own longest wait.
                    let wait = backoff(*attempts, self.config.max_backoff)
                        .max(after.unwrap_or_default().min(self.config.max_backoff));
                    tracing::warn!(host = %self.redactor.current().clean(&self.config.host), error = %why, retry_in = ?wait, "remote_write failed; will retry.");
                    return Some(tokio::time::Instant::now() + wait);
                }
            }
        }
        None
    }

    async fn send(&self, body: Vec<u8>) -> Outcome {
        let mut request = self
            .client
            .post(self.config.url.expose())
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .header(http::header::CONTENT_ENCODING, "snappy")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .body(body);
        if let Some((user, password)) = &self.config.basic_auth {
            request = request.basic_auth(user, Some(password.expose()));
        }
        if let Some(token) = &self.config.bearer_token {
            request = request.bearer_auth(token.expose());
        }
        for (name, value) in &self.config.headers {
            request = request.header(name, value.expose());
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Outcome::Retry(None, self.redactor.current().clean(&describe_error(e))),
        };
        let status = response.status().as_u16();
        let after = retry_after(&response);
        let text = read_capped(response).await;
        // The read is capped: the body may end in a secret's start.
        let why = format!(
            "HTTP {status}: {}",
            self.redactor.current().clean_cut(text.trim())
        );
        match status {
            200..=299 => Outcome::Sent,
            429 | 500..=599 => Outcome::Retry(after, why),
            _ => Outcome::Rejected(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn the_exposition_parses_back_into_series() {
        let text = "# HELP inferprobe_up x\n# TYPE inferprobe_up gauge\n\
            inferprobe_up{probe=\"chat\",model=\"meta/llama \\\"3\\\" \\\\ x\",location=\"eu\"} 1\n\
            inferprobe_e2e_latency_seconds_bucket{probe=\"chat\",le=\"+Inf\"} 12\n\
            inferprobe_probes{location=\"eu\"} 3\n\
            inferprobe_build_info{version=\"0.1.0\"} 1\n\
            inferprobe_schedule_lag_seconds_sum 0.25\n\
            inferprobe_x{a=\"\"} +Inf\n";
        let parsed: Vec<_> = parse_exposition(text).collect();
        assert_eq!(parsed.len(), 6);
        let l = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            parsed[0],
            (
                l(&[
                    ("__name__", "inferprobe_up"),
                    ("probe", "chat"),
                    ("model", "meta/llama \"3\" \\ x"),
                    ("location", "eu")
                ]),
                1.0
            )
        );
        assert_eq!(parsed[1].0[2], ("le".to_owned(), "+Inf".to_owned()));
        assert_eq!(
            parsed[4],
            (l(&[("__name__", "inferprobe_schedule_lag_seconds_sum")]), 0.25)
        );
        assert_eq!(parsed[5].1, f64::INFINITY);
    }

    #[test]
    fn our_own_exposition_round_trips_even_with_hostile_label_values() {
        use crate::outcome::{Observation, Outcome, ProbeIdentity};
        let model = "org/m \"quoted\" back\\slash\nnewline {braces}=,";
        let probe = Arc::new(ProbeIdentity {
            name: "chat".into(),
            kind: "openai_chat",
            model: model.into(),
            location: "eu".into(),
            labels: vec![("team".into(), "a-b.c".into())],
            endpoint: "http://x/".into(),
            query: String::new(),
            full_metrics: false,
        });
        let start = std::time::Instant::now();
        let mut o = Observation::new(start);
        o.marks.first_token = Some(start + Duration::from_millis(5));
        o.marks.end = Some(start + Duration::from_millis(9));
        let metrics = Metrics::new("eu");
        metrics.configured(1, true, std::slice::from_ref(&probe), &[]);
        metrics.notification("pager \"one\"", "firing", "delivered");
        metrics.record_skipped(&probe, 2);
        metrics.record(&Outcome {
            probe,
            started_at: SystemTime::now(),
            schedule_lag: Duration::ZERO,
            trace: None,
            observation: o,
            conditions: Default::default(),
            burst: None,
        });
        let text = metrics.render_text();
        let series: Vec<_> = parse_exposition(&text).collect();
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        assert_eq!(series.len(), samples, "every sample line parses");
        let up = series
            .iter()
            .find(|(l, _)| l[0].1 == "inferprobe_up")
            .expect("inferprobe_up");
        assert!(
            up.0.contains(&("model".to_owned(), model.to_owned())),
            "{:?}",
            up.0
        );
        assert_eq!(up.1, 1.0);
        // Within one snapshot, no two series share a label set.
        let mut keys: Vec<_> = series.iter().map(|(l, _)| l.clone()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), series.len());
        // remote_write takes the same samples from the metrics themselves, text unused.
        let mut taken = Vec::new();
        metrics
            .each_sample(&mut |labels, value| taken.push((labels, value)))
            .unwrap();
        let sorted = |mut v: Vec<(Vec<(String, String)>, f64)>| {
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        assert_eq!(sorted(taken), sorted(series));
    }

    #[test]
    fn a_snapshot_adds_job_and_instance_and_sorts_labels() {
        let at = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let series: Vec<TimeSeries> = parse_exposition("inferprobe_up{probe=\"chat\",location=\"eu\"} 0\n")
            .map(|(labels, value)| to_series(labels, value, "inferprobe", "agent-1:9464", unix_ms_i64(at)))
            .collect();
        let names: Vec<&str> = series[0].labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["__name__", "instance", "job", "location", "probe"]);
        assert_eq!(
            series[0].samples,
            [Sample {
                value: 0.0,
                timestamp: 1_800_000_000_123
            }]
        );
        // The body decodes back (snappy block format, then protobuf).
        let body = encode(series.clone());
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let back: WriteRequest = prost::Message::decode(raw.as_slice()).unwrap();
        assert_eq!(back.timeseries, series);
    }
}
