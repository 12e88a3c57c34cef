//! Prometheus remote_write 1.0, for agents that cannot be scraped: every `interval` a
//! snapshot of our own metrics becomes a `WriteRequest` (protobuf, snappy block
//! format), pushed with the protocol's headers.
//!
//! The snapshot is our text exposition, parsed back into series: the one rendering of
//! our metrics serves both `/metrics` and the push, so they never disagree.
//!
//! Snapshots wait in a bounded queue and go out oldest first (a series' samples must
//! arrive in time order). 5xx, 429 and network errors are retried with backoff while
//! newer snapshots queue behind; when the queue is full the oldest is dropped; a 4xx is
//! the receiver refusing the data (bad labels, too old): dropped. Each case is counted
//! in `inferprobe_remote_write_*`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use crate::config::RemoteWriteConfig;
use crate::metrics::Metrics;
use crate::net::{TlsRoots, backoff, control_plane_client};
use crate::probe::BuildError;

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
pub fn parse_exposition(text: &str) -> Vec<(Vec<(String, String)>, f64)> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(parse_line)
        .collect()
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

/// One snapshot: every series, with `job` and `instance` added as a scrape would, at
/// time `at`. Labels sorted by name, as the protocol requires.
pub fn snapshot(text: &str, job: &str, instance: &str, at: SystemTime) -> Vec<TimeSeries> {
    let timestamp = i64::try_from(at.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()).unwrap_or(0);
    parse_exposition(text)
        .into_iter()
        .map(|(mut labels, value)| {
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
        })
        .collect()
}

/// A request body: protobuf, then snappy's block format (not the framed one).
pub fn encode(series: &[TimeSeries]) -> Vec<u8> {
    let request = WriteRequest {
        timeseries: series.to_vec(),
    };
    let raw = prost::Message::encode_to_vec(&request);
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("snappy compresses any input")
}

/// A snapshot split into request bodies.
struct Queued {
    bodies: VecDeque<(Vec<u8>, u64)>,
}

/// The running pusher.
pub struct Pusher {
    config: RemoteWriteConfig,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
    instance: String,
}

enum Outcome {
    Sent,
    Retry(Option<Duration>, String),
    Rejected(String),
}

impl Pusher {
    /// `instance` is what a scrape would call this agent (used unless configured).
    pub fn build(
        config: RemoteWriteConfig,
        roots: &TlsRoots,
        metrics: Arc<Metrics>,
        instance: String,
    ) -> Result<Pusher, BuildError> {
        let client = control_plane_client(roots, config.ca_file.as_deref(), config.timeout)?;
        let instance = config.instance.clone().unwrap_or(instance);
        Ok(Pusher {
            config,
            client,
            metrics,
            instance,
        })
    }

    /// Pushes every `interval` until `cancel`, then makes a last push of what is
    /// queued (bounded by the timeout), so a stopping agent's final state arrives.
    pub async fn run(self, cancel: CancellationToken) {
        let mut queue: VecDeque<Queued> = VecDeque::new();
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry_at: Option<tokio::time::Instant> = None;
        let mut attempts = 0u32;
        tracing::info!(host = %self.config.host, interval = ?self.config.interval, "Pushing metrics with remote_write.");
        loop {
            let retry = async {
                match retry_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => {
                    self.enqueue(&mut queue);
                    let _ = tokio::time::timeout(self.config.timeout, self.drain(&mut queue, &mut attempts)).await;
                    return;
                }
                _ = tick.tick() => {
                    self.enqueue(&mut queue);
                    if retry_at.is_none() {
                        retry_at = self.drain(&mut queue, &mut attempts).await;
                    }
                }
                _ = retry => {
                    retry_at = self.drain(&mut queue, &mut attempts).await;
                }
            }
            self.metrics.push_queue(queue.len());
        }
    }

    fn enqueue(&self, queue: &mut VecDeque<Queued>) {
        let series = snapshot(
            &self.metrics.render_text(),
            &self.config.job,
            &self.instance,
            SystemTime::now(),
        );
        let bodies = series
            .chunks(self.config.max_samples_per_send)
            .map(|chunk| (encode(chunk), chunk.len() as u64))
            .collect();
        queue.push_back(Queued { bodies });
        while queue.len() > self.config.queue_snapshots {
            if let Some(old) = queue.pop_front() {
                let samples: u64 = old.bodies.iter().map(|(_, n)| n).sum();
                self.metrics.push_samples("dropped_queue_full", samples);
                tracing::warn!(samples, "remote_write queue full: dropped the oldest snapshot.");
            }
        }
    }

    /// Sends queued bodies in order until done (`None`) or until one must wait (the
    /// time to try again).
    async fn drain(&self, queue: &mut VecDeque<Queued>, attempts: &mut u32) -> Option<tokio::time::Instant> {
        while let Some(front) = queue.front_mut() {
            let Some((body, samples)) = front.bodies.front() else {
                queue.pop_front();
                continue;
            };
            match self.send(body.clone()).await {
                Outcome::Sent => {
                    *attempts = 0;
                    self.metrics.push_request("success");
                    self.metrics.push_samples("sent", *samples);
                    self.metrics.push_succeeded(SystemTime::now());
                    front.bodies.pop_front();
                }
                Outcome::Rejected(why) => {
                    self.metrics.push_request("rejected");
                    self.metrics.push_samples("dropped_rejected", *samples);
                    tracing::error!(host = %self.config.host, error = %why, "remote_write rejected a request; dropped (a 4xx is not retried).");
                    front.bodies.pop_front();
                }
                Outcome::Retry(after, why) => {
                    *attempts += 1;
                    self.metrics.push_request("retry");
                    let wait = backoff(*attempts, self.config.max_backoff).max(after.unwrap_or_default());
                    tracing::warn!(host = %self.config.host, error = %why, retry_in = ?wait, "remote_write failed; will retry.");
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
            Err(e) => return Outcome::Retry(None, e.without_url().to_string()),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .map(Duration::from_secs);
        let text = response.text().await.unwrap_or_default();
        let why = format!(
            "HTTP {status}: {}",
            text.trim().chars().take(300).collect::<String>()
        );
        match status {
            200..=299 => Outcome::Sent,
            429 | 500..=599 => Outcome::Retry(retry_after, why),
            _ => Outcome::Rejected(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_parses_back_into_series() {
        let text = "# HELP inferprobe_up x\n# TYPE inferprobe_up gauge\n\
            inferprobe_up{probe=\"chat\",model=\"meta/llama \\\"3\\\" \\\\ x\",location=\"eu\"} 1\n\
            inferprobe_e2e_latency_seconds_bucket{probe=\"chat\",le=\"+Inf\"} 12\n\
            inferprobe_probes{location=\"eu\"} 3\n\
            inferprobe_build_info{version=\"0.1.0\"} 1\n\
            inferprobe_schedule_lag_seconds_sum 0.25\n\
            inferprobe_x{a=\"\"} +Inf\n";
        let parsed = parse_exposition(text);
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
    fn a_snapshot_adds_job_and_instance_and_sorts_labels() {
        let at = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let series = snapshot(
            "inferprobe_up{probe=\"chat\",location=\"eu\"} 0\n",
            "inferprobe",
            "agent-1:9464",
            at,
        );
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
        let body = encode(&series);
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let back: WriteRequest = prost::Message::decode(raw.as_slice()).unwrap();
        assert_eq!(back.timeseries, series);
    }
}
