//! `check`: validate a config file (and a web config file) without running anything;
//! every problem printed as FILE:LINE:COLUMN: message, exit 64 if there is one. A valid
//! file's pages are shown by severity and receivers, so the tiers `routes:` make can be
//! seen before anyone is woken by them.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use inferprobe::config;
use inferprobe::server::WebConfig;

use super::EXIT_BAD_CONFIG;

/// `check -c FILE [--web.config.file WEB]`.
pub fn run(path: &Path, web_config_file: Option<&Path>) -> ExitCode {
    let code = check(path);
    match web_config_file {
        Some(web) if !check_web(web) => ExitCode::from(EXIT_BAD_CONFIG),
        _ => code,
    }
}

fn check(path: &Path) -> ExitCode {
    match config::load(path) {
        Ok(config) => {
            for w in &config.warnings {
                outln!("warning: {w}");
            }
            outln!(
                "{}: ok, {} probes{}",
                path.display(),
                config.probes.len(),
                match config.warnings.len() {
                    0 => String::new(),
                    n => format!(", {n} warning(s)"),
                }
            );
            if !config.receivers.is_empty() {
                for line in who_is_paged(&config) {
                    println!("{line}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors.0 {
                outln!("{e}");
            }
            outln!("{}: {} problem(s)", path.display(), errors.0.len());
            ExitCode::from(EXIT_BAD_CONFIG)
        }
    }
}

/// Names listed in a line of [`who_is_paged`] before "and N more".
const NAMES_SHOWN: usize = 8;

/// One line per severity, receivers and alert: `critical -> pager, team-chat: the down
/// alert of chat, embed`, most severe first.
fn who_is_paged(config: &config::Config) -> Vec<String> {
    let mut groups: BTreeMap<(config::Severity, String, &str), Vec<&str>> = BTreeMap::new();
    for probe in &config.probes {
        for (which, severity, receivers) in probe.alert.pages(&probe.slo) {
            let to = match receivers {
                [] => "nobody".to_owned(),
                names => names.join(", "),
            };
            groups
                .entry((severity, to, which))
                .or_default()
                .push(&*probe.name);
        }
    }
    let mut lines = vec!["Pages, by severity and receivers:".to_owned()];
    for ((severity, to, which), probes) in groups {
        let mut names = probes[..probes.len().min(NAMES_SHOWN)].join(", ");
        if probes.len() > NAMES_SHOWN {
            names.push_str(&format!(" and {} more", probes.len() - NAMES_SHOWN));
        }
        lines.push(format!(
            "  {} -> {to}: the {which} alert of {names}",
            severity.as_str()
        ));
    }
    lines
}

/// `check --web.config.file`: every problem, or ok; whether it is ok.
fn check_web(path: &Path) -> bool {
    match WebConfig::load(path) {
        Ok(web) => {
            outln!(
                "{}: ok, {}{}",
                path.display(),
                if web.is_tls() { "TLS" } else { "plain HTTP" },
                if web.has_basic_auth() { ", basic auth" } else { "" }
            );
            true
        }
        Err(errors) => {
            for e in &errors.0 {
                outln!("{e}");
            }
            outln!("{}: {} problem(s)", path.display(), errors.0.len());
            false
        }
    }
}
