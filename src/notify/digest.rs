//! Digest receivers (`digest:` on a receiver): what is routed to them waits in the
//! outbox and goes out as one document on the receiver's schedule.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::{
    Delivery, DeliveryContext, Document, Receiver, current_alerts, publish_pending, readable, remove,
    sleep_or_cancel,
};
use crate::alert::Notification;
use crate::net::backoff;

/// Most notifications one digest holds: a day of an agent's changes, with room.
const MAX_DIGESTED: usize = 10_000;

/// A digest receiver's loop: what is routed to it waits in the outbox, and on each of
/// `calendar`'s times it is sent one document listing what fired, what resolved and
/// what is still open ([`Document::digest`]). Kept until the receiver takes it (queued
/// pages are not expired: they wait for their digest by design); a digest that cannot
/// be sent by the next one's time is folded into it.
pub(super) async fn deliver_digests(
    receiver: Arc<Receiver>,
    cx: DeliveryContext,
    calendar: crate::calendar::Calendar,
    cancel: CancellationToken,
) {
    let name = receiver.name().to_owned();
    let mut since = SystemTime::now();
    loop {
        let Some(due) = calendar.next_after(SystemTime::now()) else {
            tracing::error!(receiver = %name, schedule = calendar.expr(), "The digest's schedule never fires again; no more digests.");
            return;
        };
        let wait = due.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let next = calendar.next_after(due + Duration::from_millis(1));
        let mut attempts = 0;
        loop {
            if cancel.is_cancelled() {
                return;
            }
            let store = cx.store.clone();
            let lookup = name.clone();
            let queued = match tokio::task::spawn_blocking(move || store.pending_batch(&lookup, MAX_DIGESTED))
                .await
            {
                Ok(Ok(queued)) => queued,
                Ok(Err(e)) => {
                    tracing::error!(receiver = %name, error = %e, "Cannot read the outbox for the digest; retrying in 5 s.");
                    sleep_or_cancel(Duration::from_secs(5), &cancel).await;
                    continue;
                }
                Err(_) => return,
            };
            let now = SystemTime::now();
            let pages = readable(&cx, &receiver, queued, now, false).await;
            let notifications: Vec<Notification> = pages.iter().map(|(_, n)| n.clone()).collect();
            let open = current_alerts(&cx.active, now);
            let doc = Document::digest(&name, &notifications, &open, since, now, calendar.zone());
            let outcome = receiver.send_document(&doc, now).await;
            let result = match &outcome {
                Delivery::Accepted => "delivered",
                Delivery::Rejected { .. } => "rejected",
                Delivery::Retry { .. } => "failed",
            };
            for (_, n) in &pages {
                cx.metrics.notification(&name, n.event.as_str(), result);
            }
            match outcome {
                Delivery::Accepted => {
                    for (pending, _) in &pages {
                        remove(&cx, pending.id).await;
                    }
                    tracing::info!(receiver = %name, notifications = pages.len(), title = %doc.title, "Digest delivered.");
                }
                Delivery::Rejected { why } => {
                    for (pending, _) in &pages {
                        remove(&cx, pending.id).await;
                    }
                    tracing::error!(receiver = %name, notifications = pages.len(), error = %why, "Receiver rejected the digest; its notifications are dropped.");
                }
                Delivery::Retry { after, why } => {
                    attempts += 1;
                    let wait = backoff(attempts, receiver.config.max_backoff)
                        .max(after.unwrap_or_default().min(receiver.config.max_backoff));
                    let retry_at = SystemTime::now() + wait;
                    if next.is_some_and(|n| retry_at >= n) {
                        tracing::warn!(receiver = %name, error = %why, "Digest not delivered; what it holds goes with the next one.");
                        break;
                    }
                    tracing::warn!(receiver = %name, attempts, retry_in = ?wait, error = %why, "Digest not delivered; will retry.");
                    sleep_or_cancel(wait, &cancel).await;
                    if cancel.is_cancelled() {
                        return;
                    }
                    continue;
                }
            }
            since = now;
            break;
        }
        publish_pending(&cx, &name).await;
    }
}
