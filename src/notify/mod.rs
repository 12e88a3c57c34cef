//! Delivering notifications: one [`Receiver`] per configured receiver, and one delivery
//! loop per receiver that drains its part of the durable outbox in order. Each kind of
//! receiver is one file (its keys, its request, its verdict on the answer), listed in
//! kinds.rs; what is here is the same for all: sending, retrying, the outbox.
//!
//! Delivery is at least once: a notification leaves the outbox only after the receiver
//! accepted it, so a crash in between sends it again on restart. Every format carries a
//! key the receiver deduplicates on (PagerDuty's `dedup_key`, Alertmanager's label set,
//! the webhook's `id`), which makes that repeat harmless.
//!
//! Retry rules: 5xx, 408, 429 and network errors are retried with exponential backoff
//! and jitter (a 429's Retry-After is honoured), up to `max_backoff` between tries and
//! `give_up_after` in all; any other 4xx is the receiver saying the page is wrong, which
//! no retry will fix: it is dropped, logged and counted. A receiver's file may read more
//! in an answer than its status (a platform that refuses inside an HTTP 200).

mod alertmanager;
mod chat;
mod digest;
mod dingtalk;
mod document;
mod email;
mod feishu;
pub mod kinds;
mod pace;
mod pagerduty;
mod slack;
mod webhook;
mod wecom;

pub use alertmanager::DEFAULT_RESEND_INTERVAL;
pub use document::Document;
pub use kinds::{ReceiverKind, ReceiverSpec, takes_notices};
pub use pace::Pacing;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::alert::{Alert, AlertEvent, Firing, Notification};
use crate::config::ReceiverConfig;
use crate::metrics::Metrics;
use crate::net::{TlsRoots, backoff, describe_error, read_capped, retry_after};
use crate::redact::SharedRedactor;
use crate::store::{AlertStore, Pending};

/// What a receiver's answer means, as its kind reads it (`verdict` in its file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Worth trying again: the receiver is busy or broken for now; not before
    /// `at_least` if the platform says how long it holds back (a chat robot's rate limit).
    Retry {
        at_least: Option<Duration>,
    },
    /// Refused for good: the page or the receiver's config is wrong; `hint` says what to
    /// look at (the signing secret, the robot's keyword, its IP allow-list).
    Rejected {
        hint: Option<&'static str>,
    },
}

impl Verdict {
    /// The retry rules by HTTP status alone: what every receiver's answer means unless
    /// its body says otherwise.
    pub fn by_status(status: u16) -> Verdict {
        match status {
            200..=299 => Verdict::Accepted,
            408 | 429 | 500..=599 => Verdict::Retry { at_least: None },
            _ => Verdict::Rejected { hint: None },
        }
    }
}

/// What a receiver made of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Accepted,
    /// Worth trying again (5xx, 408, 429, network), not before `after` if given.
    Retry {
        after: Option<Duration>,
        why: String,
    },
    /// The receiver refused it for good (4xx).
    Rejected {
        why: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ReceiverError {
    #[error("receiver \"{name}\": {message}")]
    Build { name: String, message: String },
}

/// A configured receiver, ready to send.
pub struct Receiver {
    pub config: ReceiverConfig,
    client: reqwest::Client,
    /// The SMTP connection settings of an email receiver.
    mailer: Option<email::Mailer>,
    /// The config's secrets, removed from what the receiver answers before that is
    /// logged or printed.
    redactor: SharedRedactor,
}

/// Longest receiver answer kept for logs and `test-alert`.
const MAX_ANSWER_CHARS: usize = 300;

impl Receiver {
    /// `redactor` holds the whole config's secrets ([`crate::redact::Redactor::for_config`]).
    pub fn build(
        config: ReceiverConfig,
        roots: &TlsRoots,
        redactor: SharedRedactor,
    ) -> Result<Receiver, ReceiverError> {
        let err = |message: String| ReceiverError::Build {
            name: config.name.clone(),
            message,
        };
        let client = crate::net::control_plane_client(roots, config.ca_file.as_deref(), config.timeout)
            .map_err(|e| err(e.to_string()))?;
        let mailer = match &config.spec {
            ReceiverSpec::Email(spec) => {
                Some(email::Mailer::build(spec, config.ca_file.as_deref(), config.timeout).map_err(err)?)
            }
            _ => None,
        };
        Ok(Receiver {
            config,
            client,
            mailer,
            redactor,
        })
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Sends one notification.
    pub async fn send(&self, n: &Notification, now: SystemTime) -> Delivery {
        match kinds::request(&self.config, n, now) {
            kinds::Request::Post { url, body } => self.post(&url, &body).await,
            kinds::Request::Mail(mail) => self.mail(&mail).await,
        }
    }

    /// Sends a digest or a report; a receiver that takes none refuses it.
    pub async fn send_document(&self, doc: &Document, now: SystemTime) -> Delivery {
        match kinds::document_request(&self.config, doc, now) {
            Some(kinds::Request::Post { url, body }) => self.post(&url, &body).await,
            Some(kinds::Request::Mail(mail)) => self.mail(&mail).await,
            None => Delivery::Rejected {
                why: format!(
                    "a {} receiver takes no digests or reports",
                    self.config.kind.as_str()
                ),
            },
        }
    }

    /// Sends one e-mail through the receiver's SMTP server.
    async fn mail(&self, mail: &email::Mail) -> Delivery {
        let (Some(mailer), ReceiverSpec::Email(spec)) = (&self.mailer, &self.config.spec) else {
            return Delivery::Rejected {
                why: "not an email receiver".into(),
            };
        };
        match mailer.send(spec, mail).await {
            Delivery::Accepted => Delivery::Accepted,
            Delivery::Retry { after, why } => Delivery::Retry {
                after,
                why: self.answer(&why, false),
            },
            Delivery::Rejected { why } => Delivery::Rejected {
                why: self.answer(&why, false),
            },
        }
    }

    /// Sends the first of `pages` merged into one message (a chat robot's, see
    /// [`kinds::merged_request`]); returns how many it carried. A receiver that takes
    /// one page per request is sent the first alone.
    async fn send_merged(&self, pages: &[Notification], now: SystemTime) -> (Delivery, usize) {
        match kinds::merged_request(&self.config, pages, now) {
            Some((url, body, taken)) => (self.post(&url, &body).await, taken),
            None => (self.send(&pages[0], now).await, 1),
        }
    }

    /// Sends one notification now, not through the outbox (`test-alert`: the operator
    /// wants the answer now): a retryable failure is tried again twice, quickly, so a
    /// receiver that is really down is reported in seconds, not after `give_up_after`.
    pub async fn send_now(&self, n: &Notification, now: SystemTime) -> Delivery {
        let mut result = self.send(n, now).await;
        for attempt in 1..3 {
            let Delivery::Retry { after, .. } = &result else {
                break;
            };
            let wait = backoff(attempt, Duration::from_secs(2)).max(after.unwrap_or_default());
            tokio::time::sleep(wait.min(Duration::from_secs(5))).await;
            result = self.send(n, SystemTime::now()).await;
        }
        result
    }

    /// Alertmanager only: re-sends the alerts still active, so they do not expire.
    async fn resend(&self, active: &[Firing], now: SystemTime) -> Delivery {
        let alerts: Vec<(&Alert, AlertEvent)> = active
            .iter()
            .filter(|f| f.receivers.iter().any(|r| r == &self.config.name))
            .map(|f| {
                let event = if f.alert.resolved_at.is_some() {
                    AlertEvent::Resolved
                } else {
                    AlertEvent::Firing
                };
                (&f.alert, event)
            })
            .collect();
        if alerts.is_empty() {
            return Delivery::Accepted;
        }
        let Some(resend_interval) = self.config.spec.resend_interval() else {
            return Delivery::Accepted;
        };
        let url = alertmanager::alerts_url(self.config.url.expose());
        self.post(&url, &alertmanager::body(&alerts, now, resend_interval))
            .await
    }

    async fn post(&self, url: &str, body: &serde_json::Value) -> Delivery {
        let mut request = self.client.post(url).json(body);
        for (name, value) in &self.config.headers {
            request = request.header(name, value.expose());
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                return Delivery::Retry {
                    after: None,
                    why: self.answer(&describe_error(e), false),
                };
            }
        };
        let status = response.status();
        let retry_after = retry_after(&response);
        // The read is capped: the body may end in a secret's start.
        let body = read_capped(response).await;
        let verdict = kinds::verdict(self.config.kind, status.as_u16(), &body);
        delivery(verdict, status.as_u16(), retry_after, &self.answer(&body, true))
    }

    /// A receiver's words as we log and print them: secrets out (a body cut by the
    /// read cap may end in a secret's start), one line, no terminal controls.
    fn answer(&self, text: &str, cut: bool) -> String {
        let redactor = self.redactor.current();
        let clean = if cut {
            redactor.clean_cut(text)
        } else {
            redactor.clean(text)
        };
        crate::human::printable(&redactor.shorten(&clean, MAX_ANSWER_CHARS))
    }
}

/// An attempt's result from the receiver's verdict; `body` is the answer as it may be
/// shown (secrets out), for the log.
fn delivery(verdict: Verdict, status: u16, retry_after: Option<Duration>, body: &str) -> Delivery {
    let why = || {
        let body = body.trim();
        if body.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {body}")
        }
    };
    match verdict {
        Verdict::Accepted => Delivery::Accepted,
        Verdict::Retry { at_least } => Delivery::Retry {
            after: retry_after.max(at_least),
            why: why(),
        },
        Verdict::Rejected { hint: None } => Delivery::Rejected { why: why() },
        Verdict::Rejected { hint: Some(hint) } => Delivery::Rejected {
            why: format!("{} ({hint})", why()),
        },
    }
}

/// What a delivery loop needs besides its receiver: the store holding the outbox it
/// drains, the metrics it counts deliveries in, the alerts active now.
#[derive(Clone)]
pub struct DeliveryContext {
    pub store: Arc<AlertStore>,
    pub metrics: Arc<Metrics>,
    /// Alerts active now, for Alertmanager's re-sends.
    pub active: watch::Receiver<Arc<Vec<Firing>>>,
    /// The chat robots' per-minute buckets, kept across reloads.
    pub pacing: Arc<Pacing>,
}

/// Drains `receiver`'s outbox until `cancel`: oldest first, each until accepted,
/// rejected or expired. `wake` is notified when something is enqueued. `previous` is
/// the loop this one replaces (after a reload): it finishes its current send first, so
/// no notification is sent by both.
pub async fn deliver(
    receiver: Arc<Receiver>,
    cx: DeliveryContext,
    wake: Arc<Notify>,
    cancel: CancellationToken,
    previous: Option<tokio::task::JoinHandle<()>>,
) {
    if let Some(previous) = previous {
        let _ = previous.await;
    }
    if let Some(calendar) = receiver.config.digest.clone() {
        return digest::deliver_digests(receiver, cx, calendar, cancel).await;
    }
    let name = receiver.name().to_owned();
    // Receivers that hold state rather than events (Alertmanager) are re-sent what is
    // active; the others wait for work with the same clock.
    let resends = receiver.config.spec.resend_interval().is_some();
    let resend_interval = receiver
        .config
        .spec
        .resend_interval()
        .unwrap_or(DEFAULT_RESEND_INTERVAL);
    let mut next_resend = tokio::time::Instant::now() + resend_interval;
    loop {
        if cancel.is_cancelled() {
            return;
        }
        // Alertmanager: re-send what is active on its own clock, whatever the queue
        // holds, so firing alerts never expire there while a retry waits.
        if resends && tokio::time::Instant::now() >= next_resend {
            next_resend = tokio::time::Instant::now() + resend_interval;
            let now = SystemTime::now();
            let active = current_alerts(&cx.active, now);
            if active.iter().any(|f| f.receivers.contains(&name)) {
                match receiver.resend(&active, now).await {
                    Delivery::Accepted => cx.metrics.notification(&name, "resend", "delivered"),
                    Delivery::Retry { why, .. } | Delivery::Rejected { why } => {
                        cx.metrics.notification(&name, "resend", "failed");
                        tracing::warn!(receiver = %name, error = %why, "Re-sending active alerts to Alertmanager failed; next try at the next re-send.");
                    }
                }
            }
        }
        let store = cx.store.clone();
        let lookup = name.clone();
        let head = match tokio::task::spawn_blocking(move || store.next_pending(&lookup)).await {
            Ok(Ok(head)) => head,
            Ok(Err(e)) => {
                tracing::error!(receiver = %name, error = %e, "Cannot read the outbox; retrying in 5 s.");
                sleep_or_cancel(Duration::from_secs(5), &cancel).await;
                continue;
            }
            Err(_) => return,
        };
        let now = SystemTime::now();
        // Nothing due: wait for new work, the head's retry time or the next re-send.
        let wait = match &head {
            None => Some(resend_interval),
            Some(p) => p
                .next_attempt_at
                .duration_since(now)
                .ok()
                .filter(|w| !w.is_zero()),
        };
        if let Some(wait) = wait {
            let mut until = tokio::time::Instant::now() + wait;
            if resends {
                until = until.min(next_resend);
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = wake.notified() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
            continue;
        }
        let head = head.expect("a due notification");
        // A chat robot: not past its limit; what is due behind the head goes with it.
        let batch = match receiver.config.spec.max_per_minute() {
            Some(limit) => {
                let wait = cx.pacing.wait(&name, limit, tokio::time::Instant::now());
                if !wait.is_zero() {
                    sleep_or_cancel(wait, &cancel).await;
                    continue;
                }
                due_batch(&cx, &name, head, now).await
            }
            None => vec![head],
        };
        let mut pages = readable(&cx, &receiver, batch, now, true).await;
        if pages.is_empty() {
            publish_pending(&cx, &name).await;
            continue;
        }
        if resends {
            let active = current_alerts(&cx.active, now);
            for (_, n) in &mut pages {
                *n = latest_state(n.clone(), &active);
            }
        }
        // Not raced with `cancel`: a send is bounded by the receiver's timeout, and
        // one cut off after the receiver took it would be sent again.
        let (delivery, taken) = match &pages[..] {
            [(_, one)] => (receiver.send(one, now).await, 1),
            many => {
                let notifications: Vec<Notification> = many.iter().map(|(_, n)| n.clone()).collect();
                receiver.send_merged(&notifications, now).await
            }
        };
        if let Some(limit) = receiver.config.spec.max_per_minute() {
            cx.pacing.spend(&name, limit, tokio::time::Instant::now());
        }
        let sent = &pages[..taken];
        let merged = taken > 1;
        match delivery {
            Delivery::Accepted => {
                for (pending, n) in sent {
                    let event = n.event.as_str();
                    cx.metrics.notification(&name, event, "delivered");
                    remove(&cx, pending.id).await;
                    tracing::info!(receiver = %name, id = %n.id, event, merged, summary = %n.alert.summary, "Notification delivered.");
                }
            }
            Delivery::Rejected { why } => {
                for (pending, n) in sent {
                    let event = n.event.as_str();
                    cx.metrics.notification(&name, event, "rejected");
                    remove(&cx, pending.id).await;
                    tracing::error!(receiver = %name, id = %n.id, event, merged, error = %why, "Receiver rejected a notification; dropped (a 4xx is not retried).");
                }
            }
            Delivery::Retry { after, why } => {
                let attempts = sent.iter().map(|(p, _)| p.attempts).max().unwrap_or(0) + 1;
                // A Retry-After is honoured, up to our own longest wait.
                let wait = backoff(attempts, receiver.config.max_backoff)
                    .max(after.unwrap_or_default().min(receiver.config.max_backoff));
                let mut saved = true;
                for (pending, n) in sent {
                    let event = n.event.as_str();
                    cx.metrics.notification(&name, event, "failed");
                    tracing::warn!(receiver = %name, id = %n.id, event, attempts, merged, retry_in = ?wait, error = %why, "Notification not delivered; will retry.");
                    let store = cx.store.clone();
                    let id = pending.id;
                    let stored = tokio::task::spawn_blocking(move || {
                        store.retry_at(id, attempts, SystemTime::now() + wait)
                    })
                    .await;
                    saved &= matches!(stored, Ok(Ok(())));
                }
                if !saved {
                    // The retry time is not stored: wait here instead of hammering.
                    sleep_or_cancel(wait, &cancel).await;
                }
            }
        }
        publish_pending(&cx, &name).await;
    }
}

/// Longest run of notifications one chat message merges: more than any robot's size
/// cap holds, so the cap decides.
const MAX_MERGED: usize = 200;

/// The head and the notifications right behind it that are due too, in order: one
/// not yet due stops the run, so nothing overtakes what is queued before it.
async fn due_batch(cx: &DeliveryContext, receiver: &str, head: Pending, now: SystemTime) -> Vec<Pending> {
    let store = cx.store.clone();
    let name = receiver.to_owned();
    let queued = tokio::task::spawn_blocking(move || store.pending_batch(&name, MAX_MERGED)).await;
    let Ok(Ok(queued)) = queued else {
        return vec![head];
    };
    let due: Vec<Pending> = queued
        .into_iter()
        .take_while(|p| p.next_attempt_at <= now)
        .collect();
    if due.first().is_some_and(|p| p.id == head.id) {
        due
    } else {
        vec![head]
    }
}

/// The notifications of `batch` still worth sending: one that cannot be read, or (if
/// `expire`) was undeliverable for longer than `give_up_after`, leaves the outbox here.
async fn readable(
    cx: &DeliveryContext,
    receiver: &Receiver,
    batch: Vec<Pending>,
    now: SystemTime,
    expire: bool,
) -> Vec<(Pending, Notification)> {
    let name = receiver.name();
    let mut pages = Vec::with_capacity(batch.len());
    for pending in batch {
        let queued: Notification = match serde_json::from_str(&pending.payload) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(receiver = %name, id = pending.id, error = %e, "Dropping an unreadable notification from the outbox.");
                remove(cx, pending.id).await;
                continue;
            }
        };
        // Paging queues notices only for receivers that take them; one queued before a
        // reload changed the receiver (its kind, its url) would be sent as a page.
        if queued.event == AlertEvent::Notice
            && let Err(why) = takes_notices(&receiver.config)
        {
            tracing::info!(receiver = %name, id = %queued.id, why, "Dropping a notice this receiver no longer takes.");
            remove(cx, pending.id).await;
            continue;
        }
        if expire
            && now.duration_since(pending.created_at).unwrap_or_default() > receiver.config.give_up_after
        {
            tracing::error!(receiver = %name, id = %queued.id, attempts = pending.attempts, "Giving up on a notification: undeliverable for longer than give_up_after.");
            cx.metrics.notification(name, queued.event.as_str(), "expired");
            remove(cx, pending.id).await;
            continue;
        }
        pages.push((pending, queued));
    }
    pages
}

/// Firing alerts and those resolved lately, as paging last published them.
fn current_alerts(active: &watch::Receiver<Arc<Vec<Firing>>>, now: SystemTime) -> Vec<Firing> {
    active
        .borrow()
        .iter()
        .filter(|f| f.is_current(now))
        .cloned()
        .collect()
}

/// Alertmanager holds state, not events: if the alert has moved on since this
/// notification was queued (resolved, or fired again), send it as it is now.
fn latest_state(queued: Notification, active: &[Firing]) -> Notification {
    let newer = active
        .iter()
        .find(|f| f.alert.dedup_key == queued.alert.dedup_key && f.alert.fired_at >= queued.alert.fired_at);
    match newer {
        Some(f) if f.alert != queued.alert => Notification {
            id: queued.id,
            event: if f.alert.resolved_at.is_some() {
                AlertEvent::Resolved
            } else {
                AlertEvent::Firing
            },
            alert: f.alert.clone(),
            receivers: queued.receivers,
        },
        _ => queued,
    }
}

async fn remove(cx: &DeliveryContext, id: i64) {
    let store = cx.store.clone();
    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || store.remove(id)).await {
        tracing::error!(error = %e, "Cannot remove a notification from the outbox.");
    }
}

/// Updates `inferprobe_notifications_pending` for one receiver from the store.
async fn publish_pending(cx: &DeliveryContext, receiver: &str) {
    let store = cx.store.clone();
    let name = receiver.to_owned();
    if let Ok(Ok(n)) = tokio::task::spawn_blocking(move || store.pending_count(&name)).await {
        cx.metrics.notifications_pending(receiver, n);
    }
}

async fn sleep_or_cancel(d: Duration, cancel: &CancellationToken) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

#[cfg(test)]
mod notice_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// A receiver that reads only the status, as most do.
    fn classify(status: u16, retry_after: Option<Duration>, body: &str) -> Delivery {
        delivery(Verdict::by_status(status), status, retry_after, body)
    }

    #[test]
    fn retry_rules_follow_the_status() {
        assert_eq!(classify(200, None, ""), Delivery::Accepted);
        assert_eq!(classify(202, None, "{}"), Delivery::Accepted);
        for s in [500, 502, 503, 408] {
            assert!(matches!(classify(s, None, ""), Delivery::Retry { .. }), "{s}");
        }
        assert_eq!(
            classify(429, Some(Duration::from_secs(7)), "slow down"),
            Delivery::Retry {
                after: Some(Duration::from_secs(7)),
                why: "HTTP 429: slow down".into()
            }
        );
        for s in [400, 401, 403, 404, 413] {
            assert!(matches!(classify(s, None, ""), Delivery::Rejected { .. }), "{s}");
        }
        // A redirect is not followed: reported, not retried.
        assert!(matches!(classify(302, None, ""), Delivery::Rejected { .. }));
    }

    pub(super) fn notification(event: AlertEvent) -> Notification {
        use crate::config::Severity;
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut alert = Alert::test("eu-west", "http://agent:9464", Severity::Critical, t);
        alert.condition = crate::alert::Condition::Down;
        alert.probe = "chat".into();
        alert.kind = "openai_chat".into();
        alert.model = "llama".into();
        alert.host = "llm.example.com".into();
        alert.labels = vec![("team".into(), "ml".into())];
        alert.summary = "chat is DOWN from eu-west".into();
        alert.reason = "http_5xx".into();
        alert.last_status = Some(503);
        alert.dedup_key = "inferprobe/chat/eu-west/critical".into();
        if event == AlertEvent::Resolved {
            alert.resolved_at = Some(t + Duration::from_secs(90));
        }
        Notification {
            id: "inferprobe/chat/eu-west/critical/firing/1800000000000".into(),
            event,
            alert,
            receivers: vec!["x".into()],
        }
    }

    #[test]
    fn each_format_carries_what_its_receiver_needs() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_060);
        let firing = notification(AlertEvent::Firing);
        let resolved = notification(AlertEvent::Resolved);

        let am = alertmanager::body(
            &[(&firing.alert, AlertEvent::Firing)],
            now,
            Duration::from_secs(60),
        );
        let a = &am[0];
        assert_eq!(a["labels"]["alertname"], "InferenceEndpointDown");
        assert_eq!(a["labels"]["team"], "ml");
        assert_eq!(a["labels"]["model"], "llama");
        assert_eq!(a["endsAt"], "2027-01-15T08:05:00Z", "four re-sends ahead");
        let am = alertmanager::body(
            &[(&resolved.alert, AlertEvent::Resolved)],
            now,
            Duration::from_secs(60),
        );
        assert_eq!(am[0]["endsAt"], "2027-01-15T08:01:30Z", "ends when it resolved");
        assert_eq!(
            alertmanager::alerts_url("http://am:9093/"),
            "http://am:9093/api/v2/alerts"
        );
        assert_eq!(
            alertmanager::alerts_url("http://am:9093/api/v2/alerts"),
            "http://am:9093/api/v2/alerts"
        );

        let pd = pagerduty::body(&firing, "rk");
        assert_eq!(pd["event_action"], "trigger");
        assert_eq!(pd["payload"]["source"], "llm.example.com");
        assert_eq!(pd["payload"]["severity"], "critical");
        let pd = pagerduty::body(&resolved, "rk");
        assert_eq!(
            pd,
            serde_json::json!({"routing_key": "rk", "event_action": "resolve", "dedup_key": "inferprobe/chat/eu-west/critical"})
        );

        let hook = webhook::body(&firing, now);
        assert_eq!(hook["id"], firing.id);
        assert_eq!(hook["alert"]["labels"], serde_json::json!({"team": "ml"}));
        assert_eq!(hook["alert"]["last_status"], 503);
        let slack = slack::body(&firing);
        assert!(
            slack["text"]
                .as_str()
                .unwrap()
                .starts_with(":rotating_light: *chat is DOWN from eu-west* (critical)\n"),
            "{slack}"
        );
        let slack = slack::body(&notification(AlertEvent::Reminder));
        assert!(
            slack["text"]
                .as_str()
                .unwrap()
                .starts_with(":bell: Still firing:"),
            "{slack}"
        );
    }

    #[test]
    fn every_format_says_the_same_resolved_summary() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_060);
        let mut resolved = notification(AlertEvent::Resolved);
        let summary = "RESOLVED: chat is up again from eu-west after 4m 10s down (8 failed runs)";
        resolved.alert.summary = summary.into();
        let am = alertmanager::body(
            &[(&resolved.alert, AlertEvent::Resolved)],
            now,
            Duration::from_secs(60),
        );
        assert_eq!(am[0]["annotations"]["summary"], summary);
        assert_eq!(webhook::body(&resolved, now)["alert"]["summary"], summary);
        let slack = slack::body(&resolved);
        assert!(
            slack["text"]
                .as_str()
                .unwrap()
                .starts_with(&format!(":white_check_mark: *{summary}* (critical)\n")),
            "{slack}"
        );
        // PagerDuty's resolve event takes no text (Events API v2): it closes the incident
        // opened under the same dedup key, so nothing there can contradict the others.
        let pd = pagerduty::body(&resolved, "rk");
        assert_eq!(pd["event_action"], "resolve");
        assert!(pd.get("payload").is_none(), "{pd}");
    }

    /// An endpoint's error text reaches every format as data: Slack cannot be made to
    /// mention the channel or show a disguised link; the JSON formats carry it as a
    /// string, whatever it holds.
    fn dingtalk_spec() -> dingtalk::Spec {
        dingtalk::Spec {
            secret: None,
            keyword: None,
            at_mobiles: vec!["13800000000".into()],
            at_all: true,
            max_per_minute: 20,
        }
    }

    #[test]
    fn a_critical_page_that_fires_wakes_people_and_no_other_does() {
        let firing = notification(AlertEvent::Firing);
        assert_eq!(firing.alert.severity, crate::config::Severity::Critical);
        let ding = dingtalk::body(&dingtalk_spec(), &firing);
        assert_eq!(ding["at"]["atMobiles"][0], "13800000000");
        assert_eq!(ding["at"]["isAtAll"], true);
        assert!(
            ding["markdown"]["text"]
                .as_str()
                .unwrap()
                .contains("@13800000000")
        );
        let wecom_spec = wecom::Spec {
            at_mobiles: vec!["13800000000".into()],
            at_all: true,
            max_per_minute: 20,
        };
        let wecom = wecom::body(&wecom_spec, &firing);
        assert_eq!(wecom["msgtype"], "text");
        assert_eq!(
            wecom["text"]["mentioned_mobile_list"],
            serde_json::json!(["13800000000", "@all"])
        );
        for quiet in [
            notification(AlertEvent::Resolved),
            notification(AlertEvent::Reminder),
        ] {
            let ding = dingtalk::body(&dingtalk_spec(), &quiet);
            assert_eq!(ding["at"]["isAtAll"], false);
            assert_eq!(ding["at"]["atMobiles"], serde_json::json!([]));
            assert_eq!(wecom::body(&wecom_spec, &quiet)["msgtype"], "markdown");
        }
    }

    #[test]
    fn endpoint_words_are_data_in_every_format() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_060);
        let hostile =
            "<!channel> <@U024BE7LH> <!here|here> <https://evil.example|Runbook> a&b \"}], \u{1b}[2J";
        let mut n = notification(AlertEvent::Firing);
        n.alert.last_error = Some(hostile.into());
        n.alert.description = format!("chat failed: {hostile}");
        n.alert.summary = format!("chat is DOWN <!channel> {hostile}");
        let slack = slack::body(&n);
        let text = slack["text"].as_str().unwrap();
        for markup in ["<!channel>", "<!here", "<@U", "<https://", "|Runbook>"] {
            assert!(!text.contains(markup), "{markup} in {text}");
        }
        assert!(text.contains("&lt;!channel&gt; &lt;@U024BE7LH&gt;"), "{text}");
        assert!(
            text.contains("&lt;https://evil.example|Runbook&gt; a&amp;b"),
            "{text}"
        );
        // The structured formats keep the words exactly, as JSON strings.
        let hook = webhook::body(&n, now);
        assert_eq!(hook["alert"]["last_error"], hostile);
        let pd = pagerduty::body(&n, "rk");
        assert_eq!(pd["payload"]["custom_details"]["last_error"], hostile);
        let am = alertmanager::body(&[(&n.alert, AlertEvent::Firing)], now, Duration::from_secs(60));
        assert_eq!(am[0]["annotations"]["last_error"], hostile);
        // The chat robots' markdown: an endpoint's link, heading or mention stays text.
        n.alert.description = "see [here](https://evil.example) # big @all <at id=all></at>".into();
        let ding = dingtalk::body(&dingtalk_spec(), &n);
        let wecom = wecom::body(
            &wecom::Spec {
                at_mobiles: vec![],
                at_all: false,
                max_per_minute: 20,
            },
            &n,
        );
        let feishu = feishu::body(
            &feishu::Spec {
                secret: None,
                keyword: None,
                at_all: false,
                max_per_minute: 20,
            },
            &n,
        );
        let texts = [
            ding["markdown"]["text"].as_str().unwrap(),
            wecom["markdown"]["content"].as_str().unwrap(),
            feishu["card"]["elements"][0]["content"].as_str().unwrap(),
        ];
        for text in texts {
            assert!(
                text.contains(r"\[here\]\(https://evil.example\) \# big \@all \<at id=all\>"),
                "{text}"
            );
        }
        for v in [&hook, &pd, &am] {
            let wire = serde_json::to_string(v).unwrap();
            let back: serde_json::Value = serde_json::from_str(&wire).unwrap();
            assert_eq!(&back, v, "the body survives the wire unchanged");
            assert!(!wire.contains('\u{1b}'), "controls are escaped in JSON");
        }
    }

    #[test]
    fn alertmanager_gets_the_alert_as_it_is_now() {
        let queued = notification(AlertEvent::Firing);
        let mut now_resolved = queued.alert.clone();
        now_resolved.resolved_at = Some(now_resolved.fired_at + Duration::from_secs(60));
        let active = vec![Firing {
            alert: now_resolved.clone(),
            receivers: vec!["x".into()],
            last_sent: now_resolved.fired_at,
            reminders: 0,
        }];
        let sent = latest_state(queued.clone(), &active);
        assert_eq!((sent.event, sent.alert), (AlertEvent::Resolved, now_resolved));
        // An older incident's alert in the board does not replace a newer notification.
        let mut newer = queued.clone();
        newer.alert.fired_at += Duration::from_secs(600);
        assert_eq!(latest_state(newer.clone(), &active), newer);
    }
}
