//! `report`: the SLO report for a period, from this agent's store or (with
//! `--prometheus`) for the whole fleet, as Markdown, HTML or JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use inferprobe::config::{self, ReportSource, ReportView};
use inferprobe::human::{printable, printable_json, printable_text};
use inferprobe::report::{self, Report};
use inferprobe::store;
use inferprobe::time_zone::TimeZone;

use super::{DEFAULT_DATA_DIR, EXIT_BAD_CONFIG, log_warnings, refused};
use crate::{ReportFormat, ReportRequest};

pub async fn run(path: &Path, request: ReportRequest) -> ExitCode {
    let config = if path.exists() {
        // Only what the report reads: it runs where the agent's environment is not set.
        let source = match (&request.data_dir, &request.prometheus) {
            (None, None) => ReportSource::AgentDataDir,
            _ => ReportSource::Elsewhere,
        };
        match config::load_for_report(path, source, request.send) {
            Ok(view) => {
                log_warnings(&view.warnings);
                Some(view)
            }
            Err(errors) => return refused(&errors),
        }
    } else {
        eprintln!(
            "note: {} not found: reporting without SLO targets",
            path.display()
        );
        None
    };
    let now = std::time::SystemTime::now();
    let time = |flag: &str, v: &str| {
        inferprobe::human::time_arg(v, now).map_err(|why| format!("{flag} {v:?} {why}"))
    };
    let default_since = match config.as_ref().and_then(|c| c.report.as_ref()) {
        Some(r) if request.send => format!("{}s", r.period.as_secs()),
        _ => "7d".to_owned(),
    };
    let since_arg = request.since.clone().unwrap_or(default_since);
    let period = time("--since", &since_arg).and_then(|since| {
        let until = match &request.until {
            Some(u) => time("--until", u)?,
            None => now,
        };
        if since >= until {
            return Err("--since must be before --until".to_owned());
        }
        Ok((since, until))
    });
    let (since, until) = match period {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let time_zone = match request.timezone.as_deref().map(TimeZone::parse) {
        Some(Ok(tz)) => tz,
        Some(Err(e)) => {
            eprintln!("error: --timezone: {e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
        // Sent, it reads as the agent's own scheduled report does: in report.timezone.
        None => match config.as_ref() {
            Some(c) if request.send => c.report.as_ref().map_or(c.timezone, |r| r.timezone),
            Some(c) => c.timezone,
            None => TimeZone::UTC,
        },
    };
    let costs = report::costs_by_probe(config.as_ref());
    let targets = report::targets_by_probe(config.as_ref());
    let target_of = move |probe: &str| targets.get(probe).copied().unwrap_or_default();
    let report = match &request.prometheus {
        Some(url) => match report::prometheus::report(url, since, until, target_of).await {
            Ok(r) => r,
            // An unusable URL is a bad flag; a query that failed is a failure.
            Err(e @ report::prometheus::PrometheusError::Url { .. }) => {
                eprintln!("error: --prometheus: {e}");
                return ExitCode::from(EXIT_BAD_CONFIG);
            }
            Err(e) => {
                eprintln!("error: {}", printable(&e.to_string()));
                return ExitCode::FAILURE;
            }
        },
        None => match local_report(request.data_dir, config.as_ref(), since, until, target_of).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let report = report.with_costs(&costs).with_time_zone(time_zone);
    if request.send {
        return match config.as_ref() {
            Some(view) => send(view, &report).await,
            None => {
                eprintln!(
                    "error: --send needs the config's `report:` section, and {} is not there",
                    path.display()
                );
                ExitCode::from(EXIT_BAD_CONFIG)
            }
        };
    }
    let text = match request.format {
        ReportFormat::Markdown => report.to_markdown(),
        ReportFormat::Html => report.to_html(),
        ReportFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&report.to_json()).expect("JSON values serialize")
        ),
    };
    match request.output {
        Some(file) => {
            if let Err(e) = std::fs::write(&file, text) {
                eprintln!("error: cannot write {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
        }
        // The report quotes endpoints' messages, from a history that older versions
        // may have written raw.
        None if matches!(request.format, ReportFormat::Json) => out!("{}", printable_json(&text)),
        None => out!("{}", printable_text(&text)),
    }
    ExitCode::SUCCESS
}

/// The report from one agent's store (`--data-dir`, else agent.data_dir).
async fn local_report(
    data_dir: Option<PathBuf>,
    config: Option<&ReportView>,
    since: std::time::SystemTime,
    until: std::time::SystemTime,
    target_of: impl Fn(&str) -> inferprobe::stats::Targets + Send + 'static,
) -> Result<Report, String> {
    let dir = data_dir
        .or_else(|| config.and_then(|c| c.data_dir.clone()))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let db = dir.join(store::DB_FILE);
    if !db.exists() {
        return Err(format!(
            "no store at {} (give the agent's --data-dir)",
            db.display()
        ));
    }
    tokio::task::spawn_blocking(move || {
        let history = store::HistoryReader::open(&db)?;
        let source = format!("the local store {}", db.display());
        Report::from_history(&history, source, since, until, target_of)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()))
}

/// `--send`: the report to the receivers `report:` names, one line each, as
/// `test-alert` prints them.
async fn send(view: &ReportView, report: &Report) -> ExitCode {
    let Some(section) = &view.report else {
        eprintln!("error: --send needs a `report:` section naming its receivers");
        return ExitCode::from(EXIT_BAD_CONFIG);
    };
    let mut redactor = inferprobe::redact::Redactor::default();
    for rc in &view.receivers {
        redactor.add_receiver(rc);
    }
    for secret in &view.secrets {
        redactor.add(secret.expose());
    }
    let redactor = inferprobe::redact::SharedRedactor::new(redactor);
    let roots = inferprobe::net::TlsRoots::system();
    let mut receivers = Vec::new();
    for rc in &view.receivers {
        match inferprobe::notify::Receiver::build(rc.clone(), &roots, redactor.clone()) {
            Ok(r) => receivers.push(std::sync::Arc::new(r)),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let doc = inferprobe::agent::reporting::document(report, section.link.as_deref());
    let mut all_ok = true;
    for (name, result) in inferprobe::agent::reporting::send(&doc, &receivers).await {
        match result {
            inferprobe::notify::Delivery::Accepted => outln!("{name:<20} accepted"),
            inferprobe::notify::Delivery::Retry { why, .. } => {
                all_ok = false;
                outln!("{name:<20} FAILED    {why}");
            }
            inferprobe::notify::Delivery::Rejected { why } => {
                all_ok = false;
                outln!("{name:<20} REJECTED  {why}");
            }
        }
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
