//! `test-alert`: one test notification straight to each receiver (not through the
//! outbox: the operator wants the answer now), a few quick tries each; one line per
//! receiver saying whether it was accepted.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use inferprobe::agent::default_api_base;
use inferprobe::alert::{Alert, AlertEvent, Notification};
use inferprobe::config::{ReceiverKind, Severity};
use inferprobe::net::TlsRoots;
use inferprobe::notify::{Delivery, Document, Receiver};
use inferprobe::redact::SharedRedactor;

use super::{DEFAULT_PORT, EXIT_BAD_CONFIG, load_or_report, location_of};

pub async fn run(
    path: &Path,
    only: &[String],
    location: Option<String>,
    listen: Option<SocketAddr>,
    severity: Severity,
    resolve: bool,
) -> ExitCode {
    let config = match load_or_report(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if config.receivers.is_empty() {
        eprintln!("error: {} has no `receivers:`", path.display());
        return ExitCode::from(EXIT_BAD_CONFIG);
    }
    if let Some(missing) = only
        .iter()
        .find(|n| !config.receivers.iter().any(|r| &r.name == *n))
    {
        eprintln!("error: no receiver named \"{missing}\" in {}", path.display());
        return ExitCode::from(EXIT_BAD_CONFIG);
    }
    let location = location_of(location, &config);
    let now = std::time::SystemTime::now();
    // The link must reach the agent that pages, as `run` builds it: its external URL,
    // else the address it listens on.
    let api_base = config.agent.external_url.clone().unwrap_or_else(|| {
        let addr = listen
            .or(config.agent.listen)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)));
        default_api_base(Some(addr))
    });
    let mut alert = Alert::test(&location, &api_base, severity, now).sent_at(config.agent.timezone, now);
    let event = if resolve {
        alert.resolved_at = Some(now);
        alert.summary = format!("RESOLVED: {}", alert.summary);
        AlertEvent::Resolved
    } else {
        AlertEvent::Firing
    };
    let roots = TlsRoots::system();
    let redactor = SharedRedactor::for_config(&config);
    let mut all_ok = true;
    let mut kinds = Vec::new();
    // Alertmanager expires an alert at its `endsAt`, four re-send intervals ahead (as
    // notify/alertmanager.rs sets it); with several, the last one to expire is said.
    let mut am_expiry = std::time::Duration::ZERO;
    for rc in config
        .receivers
        .iter()
        .filter(|r| only.is_empty() || only.contains(&r.name))
    {
        let receiver = match Receiver::build(rc.clone(), &roots, redactor.clone()) {
            Ok(r) => r,
            Err(e) => {
                outln!("{:<20} FAILED    {e}", rc.name);
                all_ok = false;
                continue;
            }
        };
        if !kinds.contains(&rc.kind) {
            kinds.push(rc.kind);
        }
        if let Some(resend_interval) = rc.spec.resend_interval() {
            am_expiry = am_expiry.max(4 * resend_interval);
        }
        let n = Notification {
            id: format!(
                "{}/test/{}",
                alert.dedup_key,
                humantime::format_rfc3339_millis(now)
            ),
            event,
            alert: alert.clone(),
            receivers: vec![rc.name.clone()],
        };
        // A digest receiver is sent what it will get: a digest, holding the test page.
        let result = match &rc.digest {
            Some(calendar) => {
                let day_ago = now
                    .checked_sub(std::time::Duration::from_secs(86_400))
                    .unwrap_or(now);
                let doc = Document::digest(
                    &rc.name,
                    std::slice::from_ref(&n),
                    &[],
                    day_ago,
                    now,
                    calendar.zone(),
                );
                receiver.send_document(&doc, now).await
            }
            None => receiver.send_now(&n, now).await,
        };
        // A `${VAR}` host is a secret; `why` is cleaned and printable already.
        let target = format!("{} {}", rc.kind.as_str(), redactor.current().clean(&rc.host));
        match result {
            Delivery::Accepted => outln!("{:<20} accepted  ({target})", rc.name),
            Delivery::Retry { why, .. } => {
                all_ok = false;
                outln!("{:<20} FAILED    ({target}) {why}", rc.name);
            }
            Delivery::Rejected { why } => {
                all_ok = false;
                outln!("{:<20} REJECTED  ({target}) {why}", rc.name);
            }
        }
    }
    if !resolve && all_ok {
        out!(
            "{}",
            what_happens_next(&alert.dedup_key, severity, &kinds, am_expiry)
        );
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What becomes of the test page, said for each kind of receiver it went to: only
/// Alertmanager expires an alert by itself, after `am_expiry`.
fn what_happens_next(
    key: &str,
    severity: Severity,
    kinds: &[ReceiverKind],
    am_expiry: std::time::Duration,
) -> String {
    let severity = severity.as_str();
    let expiry = humantime::format_duration(am_expiry);
    // Receivers that expire a page by themselves (Alertmanager) have no words of their
    // own: the expiry is said here, with its time.
    if kinds.iter().all(|k| k.after_test_page().is_none()) && !kinds.is_empty() {
        return format!(
            "Test alert {key} sent (severity {severity}); Alertmanager expires it in {expiry}, or run `inferprobe test-alert --resolve`.\n"
        );
    }
    let mut out = format!("Test alert {key} sent (severity {severity}).\n");
    let mut said = Vec::new();
    let am_line = format!("Alertmanager expires it in {expiry}.");
    for kind in kinds {
        let line = kind.after_test_page().unwrap_or(am_line.as_str());
        if !said.contains(&line) {
            said.push(line);
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str("Run `inferprobe test-alert --resolve` to resolve it.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_receiver_kind_is_described_truly() {
        let key = "inferprobe/test/eu";
        let minute = std::time::Duration::from_secs(60);
        let am = what_happens_next(key, Severity::Critical, &[ReceiverKind::Alertmanager], 4 * minute);
        assert_eq!(
            am,
            "Test alert inferprobe/test/eu sent (severity critical); Alertmanager expires it in 4m, or run `inferprobe test-alert --resolve`.\n"
        );
        // A shorter resend_interval expires it sooner, and the text says so.
        let short = what_happens_next(
            key,
            Severity::Critical,
            &[ReceiverKind::Alertmanager],
            4 * 15 * std::time::Duration::from_secs(1),
        );
        assert!(short.contains("expires it in 1m,"), "{short}");
        let mixed = what_happens_next(
            key,
            Severity::Critical,
            &[ReceiverKind::Webhook, ReceiverKind::Alertmanager],
            20 * minute,
        );
        assert!(mixed.contains("Alertmanager expires it in 20m."), "{mixed}");
        let hook = what_happens_next(key, Severity::Critical, &[ReceiverKind::Webhook], 4 * minute);
        assert!(!hook.contains("Alertmanager"), "{hook}");
        assert!(hook.contains("Webhooks got one message"), "{hook}");
        let pd = what_happens_next(key, Severity::Critical, &[ReceiverKind::Pagerduty], 4 * minute);
        assert!(!pd.contains("Alertmanager"), "{pd}");
        assert!(pd.contains("PagerDuty keeps the incident open"), "{pd}");
    }
}
