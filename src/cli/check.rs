//! `check`: validate a config file (and a web config file) without running anything;
//! every problem printed as FILE:LINE:COLUMN: message, exit 64 if there is one.

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
