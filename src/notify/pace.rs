//! Keeping a chat robot under its per-minute limit: a token bucket per receiver.
//!
//! A robot that gets more than its limit in a minute refuses the rest (DingTalk then
//! bans it for ten minutes), so the delivery loop asks the bucket before each message,
//! and while it waits the changes pile up in the outbox and go out merged into one.
//!
//! The bucket holds `burst` messages (a quarter of the limit, at most 5: Feishu's
//! per-second limit) and refills at
//! `(limit - burst)` a minute, so no 60-second window ever holds more than `limit`
//! messages: a first burst of changes is sent at once, one by one, and a storm after it
//! is paced to one message every few seconds, each naming everything that changed since
//! the last.
//!
//! The buckets outlive a reload ([`Pacing`]): a receiver's loop replaced by a reload
//! must not start again with a full bucket. They do not outlive a restart; the robot's
//! "throttled" answer, retried after a minute, covers that.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// One receiver's bucket.
#[derive(Debug, Clone)]
pub struct Pace {
    limit: u32,
    burst: f64,
    per_second: f64,
    tokens: f64,
    updated: Instant,
}

impl Pace {
    /// A full bucket for at most `limit` messages a minute (`limit` >= 2, as the
    /// config checks).
    pub fn new(limit: u32, now: Instant) -> Pace {
        let limit = limit.max(2);
        // Feishu also takes no more than 5 a second, whatever the minute's limit.
        let burst = f64::from((limit / 4).clamp(1, 5));
        Pace {
            limit,
            burst,
            per_second: (f64::from(limit) - burst) / 60.0,
            tokens: burst,
            updated: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.updated = now;
    }

    /// How long until a message may go: zero when one may go now.
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 {
            return Duration::ZERO;
        }
        // Rounded up to the millisecond, so the wake-up finds the token there.
        let seconds = (1.0 - self.tokens) / self.per_second;
        Duration::from_millis((seconds * 1000.0).ceil() as u64)
    }

    /// Counts one message sent (or tried: a throttled try counts at the robot too).
    pub fn spend(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens - 1.0).max(-1.0);
    }
}

/// Every receiver's bucket, by name, shared by the delivery loops across reloads.
#[derive(Debug, Default)]
pub struct Pacing {
    buckets: Mutex<HashMap<String, Pace>>,
}

impl Pacing {
    /// How long until `receiver` may be sent a message ([`Pace::wait`]).
    pub fn wait(&self, receiver: &str, limit: u32, now: Instant) -> Duration {
        self.with(receiver, limit, now, |pace| pace.wait(now))
    }

    /// Counts one message to `receiver` ([`Pace::spend`]).
    pub fn spend(&self, receiver: &str, limit: u32, now: Instant) {
        self.with(receiver, limit, now, |pace| pace.spend(now));
    }

    /// `receiver`'s bucket as its last loop left it, or a full one; a changed limit
    /// starts a new bucket.
    fn with<T>(&self, receiver: &str, limit: u32, now: Instant, f: impl FnOnce(&mut Pace) -> T) -> T {
        let mut buckets = self.buckets.lock().expect("pacing lock");
        let pace = buckets
            .entry(receiver.to_owned())
            .or_insert_with(|| Pace::new(limit, now));
        if pace.limit != limit.max(2) {
            *pace = Pace::new(limit, now);
        }
        f(pace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends as fast as the bucket lets, for `span`, and returns when each went.
    fn send_greedily(limit: u32, span: Duration) -> Vec<Duration> {
        let start = Instant::now();
        let mut pace = Pace::new(limit, start);
        let mut now = start;
        let mut sent = Vec::new();
        while now - start <= span {
            let wait = pace.wait(now);
            if wait.is_zero() {
                pace.spend(now);
                sent.push(now - start);
            } else {
                now += wait;
            }
        }
        sent
    }

    #[test]
    fn no_minute_holds_more_than_the_limit() {
        for limit in [2, 3, 5, 20, 100] {
            let sent = send_greedily(limit, Duration::from_secs(600));
            for (i, first) in sent.iter().enumerate() {
                let within = sent[i..]
                    .iter()
                    .take_while(|t| **t - *first < Duration::from_secs(60))
                    .count();
                assert!(
                    within <= limit as usize,
                    "limit {limit}: {within} in a minute from {first:?}"
                );
            }
            // The pace is the limit less the burst, kept up: a storm that lasts is
            // merged into fewer messages anyway.
            let burst = (limit / 4).clamp(1, 5);
            // (Less one: the waits are rounded up to the millisecond.)
            let steady = burst + 10 * (limit - burst) - 1;
            assert!(sent.len() as u32 >= steady, "limit {limit}: {} sent", sent.len());
        }
    }

    #[test]
    fn a_first_burst_goes_at_once_then_the_pace_is_even() {
        let sent = send_greedily(20, Duration::from_secs(60));
        assert_eq!(&sent[..5], &[Duration::ZERO; 5], "{sent:?}");
        assert_eq!(sent[5], Duration::from_secs(4), "{sent:?}");
    }

    #[test]
    fn a_bucket_is_kept_by_name_unless_the_limit_changes() {
        let pacing = Pacing::default();
        let now = Instant::now();
        for _ in 0..5 {
            pacing.spend("chat", 20, now);
        }
        assert!(!pacing.wait("chat", 20, now).is_zero());
        assert!(pacing.wait("other", 20, now).is_zero());
        assert!(
            pacing.wait("chat", 30, now).is_zero(),
            "a new limit, a new bucket"
        );
    }
}
