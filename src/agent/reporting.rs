//! The weekly report sent by itself: rendered from the local store on `report.schedule`
//! and sent to `report.receivers` (e-mail the HTML, the chat robots a summary with the
//! link); `inferprobe report --send` uses the same words and sending for a timer or a
//! CronJob (the fleet report, from Prometheus).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::config::{Config, Cost, ReportConfig};
use crate::net::backoff;
use crate::notify::{Delivery, Document, Receiver};
use crate::report::Report;
use crate::report::verdict::Outcome;
use crate::stats::Targets;
use crate::store::HistoryReader;

/// The report as a document: its verdicts as the summary, its HTML whole.
pub fn document(report: &Report, link: Option<&str>) -> Document {
    let verdicts = report.verdicts();
    let met = verdicts.iter().filter(|v| v.outcome == Outcome::Met).count();
    let zone = report.time_zone;
    let title = format!(
        "inferprobe SLO report {} to {}: {met} of {} probes met their SLO",
        zone.short(report.since, true),
        zone.short(report.until, true),
        verdicts.len()
    );
    let lines: Vec<(bool, String)> = verdicts
        .iter()
        .map(|v| (v.outcome != Outcome::NotMet, v.line()))
        .collect();
    let note = report.coverage_note();
    Document::summary(&title, &lines, note.as_deref(), link, report.to_html())
}

/// Sends `doc` to each receiver, a few quick tries each (as `test-alert`): who took it.
pub async fn send(doc: &Document, receivers: &[Arc<Receiver>]) -> Vec<(String, Delivery)> {
    let mut out = Vec::new();
    for receiver in receivers {
        let mut result = receiver.send_document(doc, SystemTime::now()).await;
        for attempt in 1..4 {
            let Delivery::Retry { after, .. } = &result else {
                break;
            };
            let wait = backoff(attempt, Duration::from_secs(30)).max(after.unwrap_or_default());
            tokio::time::sleep(wait.min(Duration::from_secs(60))).await;
            result = receiver.send_document(doc, SystemTime::now()).await;
        }
        out.push((receiver.name().to_owned(), result));
    }
    out
}

/// What the scheduled report needs of the config, taken when it is (re)started.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Scheduled {
    pub report: ReportConfig,
    /// The receivers it names, as configured: one that changes restarts the schedule.
    pub receivers: Vec<crate::config::ReceiverConfig>,
    targets: BTreeMap<String, Targets>,
    costs: BTreeMap<String, Cost>,
}

impl Scheduled {
    /// `None` when the file sets no `report.schedule`.
    pub(super) fn of(config: &Config) -> Option<Scheduled> {
        let report = config.report.clone().filter(|r| r.schedule.is_some())?;
        let targets = config
            .probes
            .iter()
            .map(|p| (p.name.to_string(), crate::report::targets_of(&p.slo)))
            .collect();
        let costs = config
            .probes
            .iter()
            .filter_map(|p| Some((p.name.to_string(), (**p.cost.as_ref()?).clone())))
            .collect();
        let receivers = config
            .receivers
            .iter()
            .filter(|r| report.receivers.contains(&r.name))
            .cloned()
            .collect();
        Some(Scheduled {
            report,
            receivers,
            targets,
            costs,
        })
    }

    /// Until `cancel`: at each time of the schedule, the report of the period that ends
    /// then, from the store at `db`, sent to the receivers.
    pub(super) async fn run(self, receivers: Vec<Arc<Receiver>>, db: PathBuf, cancel: CancellationToken) {
        let Some(calendar) = self.report.schedule.clone() else {
            return;
        };
        loop {
            let Some(due) = calendar.next_after(SystemTime::now()) else {
                tracing::error!(
                    schedule = calendar.expr(),
                    "report.schedule never fires again; no more reports."
                );
                return;
            };
            let wait = due.duration_since(SystemTime::now()).unwrap_or_default();
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            let until = SystemTime::now();
            let since = until
                .checked_sub(self.report.period)
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let targets = self.targets.clone();
            let path = db.clone();
            let rendered = tokio::task::spawn_blocking(move || {
                let history = HistoryReader::open(&path)?;
                let source = format!("the local store {}", path.display());
                Report::from_history(&history, source, since, until, |p| {
                    targets.get(p).copied().unwrap_or_default()
                })
            })
            .await;
            let report = match rendered {
                Ok(Ok(r)) => r.with_costs(&self.costs).with_time_zone(self.report.timezone),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "Cannot read the store for the scheduled report; the next one is at its time.");
                    continue;
                }
                Err(_) => return,
            };
            let doc = document(&report, self.report.link.as_deref());
            for (name, result) in send(&doc, &receivers).await {
                match result {
                    Delivery::Accepted => {
                        tracing::info!(receiver = %name, title = %doc.title, "Scheduled report delivered.");
                    }
                    Delivery::Retry { why, .. } | Delivery::Rejected { why } => {
                        tracing::error!(receiver = %name, error = %why, "Scheduled report not delivered.");
                    }
                }
            }
        }
    }
}
