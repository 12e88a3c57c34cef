//! `once`: run each probe (or the ones named) once now, concurrently but those of one
//! endpoint one after another, and print the results as a table or JSON lines; exit 1
//! if any failed.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use inferprobe::human::{printable, printable_json};
use inferprobe::outcome::Outcome;
use inferprobe::probe::BuildContext;
use inferprobe::probe::build_probes;
use inferprobe::redact::SharedRedactor;

use super::{EXIT_BAD_CONFIG, load_or_report, location_of};
use crate::OutputFormat;

pub async fn run(path: &Path, only: &[String], format: OutputFormat, location: Option<String>) -> ExitCode {
    let mut config = match load_or_report(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(missing) = only
        .iter()
        .find(|n| !config.probes.iter().any(|p| *p.name == ***n))
    {
        eprintln!("error: no probe named \"{missing}\" in {}", path.display());
        return ExitCode::from(EXIT_BAD_CONFIG);
    }
    if !only.is_empty() {
        config.probes.retain(|p| only.iter().any(|n| **n == *p.name));
    }
    let location = location_of(location, &config);
    let cx = BuildContext {
        redactor: SharedRedactor::for_config(&config),
        ..BuildContext::new()
    };
    let probes = match build_probes(&config, &location.as_str().into(), &cx) {
        Ok(p) => p,
        Err((probe, e)) => {
            eprintln!("error: probe \"{probe}\": {e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    // Concurrently, but probes of one endpoint in turns (probe/lane.rs): two probes of
    // a one-slot server at once would each measure the other's queue.
    let tasks: Vec<_> = probes
        .into_iter()
        .map(|p| tokio::spawn(async move { p.run_in_turn().await }))
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        match t.await {
            Ok(o) => outcomes.push(o),
            Err(e) => {
                eprintln!("error: a probe task failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match format {
        OutputFormat::Json => {
            for o in &outcomes {
                outln!("{}", printable_json(&o.to_json().to_string()));
            }
        }
        OutputFormat::Table => print_table(&outcomes),
    }
    if outcomes.iter().all(|o| o.observation.success()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_table(outcomes: &[Outcome]) {
    let ms = |d: Option<Duration>| {
        d.map(|d| format!("{:.1}ms", d.as_secs_f64() * 1000.0))
            .unwrap_or_else(|| "-".into())
    };
    let rows: Vec<[String; 10]> = outcomes
        .iter()
        .map(|o| {
            let obs = &o.observation;
            [
                o.probe.name.to_string(),
                if obs.success() { "ok".into() } else { "FAIL".into() },
                obs.failure()
                    .map(|f| f.reason.to_string())
                    .unwrap_or_else(|| "-".into()),
                obs.http_status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                ms(obs.ttfb()),
                ms(obs.ttft()),
                ms(obs.tpot()),
                ms(obs.total()),
                obs.output_tokens
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "-".into()),
                obs.finish_reason.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = [
        "PROBE", "RESULT", "REASON", "STATUS", "TTFB", "TTFT", "TPOT", "TOTAL", "TOKENS", "FINISH",
    ];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    outln!("{}", line(header.to_vec()));
    for r in &rows {
        outln!("{}", line(r.iter().map(String::as_str).collect()));
    }
    for o in outcomes {
        if let Some(b) = o.burst.as_deref()
            && let (Some(spread), Some(max_min), Some(slowdown)) =
                (b.spread(), b.max_over_min(), b.slowdown())
        {
            outln!(
                "{}: burst of {}: {} spread {:.0} % of their mean, slowest {max_min:.1}× the fastest, {slowdown:.1}× the request alone",
                o.probe.name,
                b.requests.len(),
                if b.by_ttft() { "TTFTs" } else { "totals" },
                spread * 100.0
            );
        }
        if let Some(f) = o.observation.failure() {
            // Messages are made printable where they are made; this edge holds for
            // any message that did not come through a probe run.
            outln!("{}: {}: {}", o.probe.name, f.reason, printable(&f.message));
        } else if let Some(note) = &o.observation.note {
            outln!("{}: note: {}", o.probe.name, printable(note));
        }
    }
}
