//! `test-alert`: one test notification straight to each receiver (not through the
//! outbox: the operator wants the answer now), a few quick tries each; one line per
//! receiver saying whether it was accepted.

use std::path::Path;
use std::process::ExitCode;

use inferprobe::alert::{Alert, Event, Notification};
use inferprobe::config::Severity;
use inferprobe::net::TlsRoots;
use inferprobe::notify::{Delivery, Receiver};
use inferprobe::redact::SharedRedactor;

use super::{DEFAULT_PORT, EXIT_BAD_CONFIG, load_or_report, location_of};

pub async fn run(
    path: &Path,
    only: &[String],
    location: Option<String>,
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
    let api_base = config
        .agent
        .external_url
        .clone()
        .unwrap_or_else(|| format!("http://localhost:{DEFAULT_PORT}"));
    let mut alert = Alert::test(&location, &api_base, severity, now);
    let event = if resolve {
        alert.resolved_at = Some(now);
        alert.summary = format!("RESOLVED: {}", alert.summary);
        Event::Resolved
    } else {
        Event::Firing
    };
    let roots = TlsRoots::system();
    let redactor = SharedRedactor::for_config(&config);
    let mut all_ok = true;
    for rc in config
        .receivers
        .iter()
        .filter(|r| only.is_empty() || only.contains(&r.name))
    {
        let receiver = match Receiver::build(rc.clone(), &roots, redactor.clone()) {
            Ok(r) => r,
            Err(e) => {
                println!("{:<20} FAILED    {e}", rc.name);
                all_ok = false;
                continue;
            }
        };
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
        let result = receiver.send_now(&n, now).await;
        // A `${VAR}` host is a secret; `why` is cleaned and printable already.
        let target = format!("{} {}", rc.kind.as_str(), redactor.current().clean(&rc.host));
        match result {
            Delivery::Accepted => println!("{:<20} accepted  ({target})", rc.name),
            Delivery::Retry { why, .. } => {
                all_ok = false;
                println!("{:<20} FAILED    ({target}) {why}", rc.name);
            }
            Delivery::Rejected { why } => {
                all_ok = false;
                println!("{:<20} REJECTED  ({target}) {why}", rc.name);
            }
        }
    }
    if !resolve && all_ok {
        println!(
            "Test alert {} sent (severity {}); Alertmanager expires it in 4 minutes, or run `inferprobe test-alert --resolve`.",
            alert.dedup_key,
            severity.as_str()
        );
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
