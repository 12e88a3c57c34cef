//! `probes.yaml`: loading a file into a validated [`Config`], every problem positioned.
//!
//! Loading is three steps, so that `inferprobe check` can print every problem at once:
//! 1. YAML syntax (serde_norway; a syntax error stops here, with its line and column);
//! 2. each section and each probe is deserialized on its own (unknown keys, wrong types);
//! 3. semantic checks (durations, URLs, cron, labels, files).
//!
//! `${ENV}` is substituted in every string value before step 2 (env.rs).
//!
//! Every check says its problems through one [`Diagnostics`] value, passed in
//! (diagnostics.rs); positions come from [`PositionIndex`], built from the YAML event
//! stream on the first problem, so every message reads `FILE:LINE:COLUMN: probe "x":
//! key: ...`, sorted by line, column and key.
//!
//! The rooms, cut by section, each file the section's serde shape, its validated type and
//! its check (ARCHITECTURE.md has the table of which may import which; no circles):
//! root.rs the file's top-level keys; routes.rs `routes:` (which receivers each probe
//! alert pages, decided at load); agent.rs, defaults.rs, receivers.rs, probe.rs (the keys
//! every probe has), expect.rs, tls.rs, content.rs (prompts, images, tensors),
//! alerting.rs (`alert`, `slo`), cost.rs, tracing.rs, remote_write.rs; below them
//! values.rs (durations, URLs, headers, labels, files), formats.rs (the schema's string
//! formats), diagnostics.rs and positions.rs; env.rs `${VAR}`; sharing.rs equal sections
//! held once; schema.rs `inferprobe schema`; report_view.rs the keys `inferprobe report`
//! reads, and only those ([`load_for_report`]); url.rs, files.rs, nesting.rs and yaml.rs as
//! their names say. The keys of one kind only are the kind's: its file in probe/
//! declares them and checks them, and builds its part of [`ProbeConfig::spec`].
//!
//! This file declares the rooms and says what the crate may use; it defines nothing the
//! rooms import. config's one arrow out is to `probe::kinds`: [`Kind`] and [`KindSpec`]
//! live with the probes, probe.rs hands each probe's own keys to the kind, and the
//! kinds' files use [`Diagnostics`] to position their errors: the price of a kind being
//! one file.

use std::path::Path;

use serde_yaml::Value;

mod agent;
mod alerting;
mod answer;
mod content;
mod cost;
mod defaults;
mod diagnostics;
mod env;
mod expect;
pub mod files;
pub(crate) mod formats;
pub(crate) use formats::documented_enum;
mod nesting;
mod own_keys;
mod positions;
mod probe;
mod prompts;
mod receivers;
mod remote_write;
mod report_view;
mod reporting;
mod root;
mod routes;
mod schema;
mod sharing;
mod tls;
mod tracing;
mod traffic;
mod url;
mod values;
// The file's text into a YAML value without serde_yaml's whole-file event list.
mod yaml;

pub use agent::{AgentConfig, HistoryConfig, MetricsDetail};
pub use alerting::{
    AlertConfig, DEFAULT_FAILURE_THRESHOLD, DEFAULT_SUCCESS_THRESHOLD, RateLimited, Severity, Slo,
};
pub use answer::{AnswerCheck, AnswerSchema};
pub use content::{
    BUILTIN_IMAGES, BuiltinImage, ImageFormat, ImageSource, Images, Scene, TENSOR_DATATYPES, TensorData,
    TensorInput, Upload,
};
pub(crate) use content::{RawInput, tensor_input};
pub use cost::{Cost, DEFAULT_CURRENCY, TokenBudget};
pub use defaults::{DEFAULT_INTERVAL, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT};
pub(crate) use diagnostics::Diagnostics;
pub use diagnostics::{ConfigError, ConfigErrors};
pub(crate) use env::names_a_secret;
pub use env::substitute_env;
pub use expect::{ANSWER_FINISH_REASONS, Expect, Pattern};
pub(crate) use own_keys::{KeysOf, KindList, NoKeys, OwnKeys};
pub use positions::PositionIndex;
pub(crate) use positions::closest;
pub(crate) use probe::{Common, KindKeys};
pub use probe::{ProbeConfig, Schedule, Temperature, display_url};
pub use prompts::{CustomPrompt, PromptBucket, Prompts};
pub use receivers::ReceiverConfig;
pub(crate) use receivers::{ReceiverCommon, ReceiverKeys};
pub use remote_write::RemoteWriteConfig;
pub use report_view::{ReportProbe, ReportSource, ReportView};
pub use reporting::{DEFAULT_REPORT_PERIOD, ReportConfig};
pub use root::Config;
pub use schema::json_schema;
pub use tls::TlsConfig;
pub use tracing::{TraceConfig, TracingConfig};
pub use traffic::{BURST_SIZES, DEFAULT_WARMUP, Traffic};
pub use url::{Url, UrlError, parse_url, to_uri};
pub use values::{RESERVED_LABELS, Secret, valid_label_value};

/// The kinds are listed with the probes they build (one file per kind).
pub use crate::notify::kinds::{ReceiverKind, ReceiverSpec};
pub use crate::probe::kinds::{Kind, KindSpec};

// ---------------------------------------------------------------------------------------
// Entry points.

/// Reads and validates a config file, resolving `${VAR}` from the process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = files::read_config_text(path)
        .map_err(|e| ConfigErrors::unreadable(path, format!("cannot read the file: {e}")))?;
    parse(&text, path, &|name| std::env::var(name).ok())
}

/// Validates config text. `file` names the file in messages and anchors relative paths;
/// `env` resolves `${VAR}` references (passed in so tests need no process environment).
pub fn parse(text: &str, file: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigErrors> {
    let (mut cx, mut root) = read(text, file)?;
    // `${VAR}` in every string value, before any section is read (env.rs).
    let substituted = env::substitute_all(&mut cx, &mut root, env);
    let config = root::check_root(&mut cx, root);
    let warnings = cx.finish()?;
    let mut config = config.expect("no errors means a config");
    config.warnings = warnings;
    config.secrets = substituted.into_iter().map(Secret::new).collect();
    Ok(config)
}

/// Reads a config file as `inferprobe report` does (report_view.rs): only the keys the
/// report reads, so a `${VAR}` only the agent needs may be unset.
pub fn load_for_report(path: &Path, source: ReportSource, send: bool) -> Result<ReportView, ConfigErrors> {
    let text = files::read_config_text(path)
        .map_err(|e| ConfigErrors::unreadable(path, format!("cannot read the file: {e}")))?;
    parse_for_report(&text, path, &|name| std::env::var(name).ok(), source, send)
}

/// As [`parse`], for the report: the keys it does not read are taken out before `${VAR}`
/// is substituted, and what is left is checked as [`parse`] checks it. With `send`, it
/// reads `report:` and the receivers that section names too.
pub fn parse_for_report(
    text: &str,
    file: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    source: ReportSource,
    send: bool,
) -> Result<ReportView, ConfigErrors> {
    let (mut cx, mut root) = read(text, file)?;
    report_view::keep_report_keys(&mut root, source, send);
    let secrets = env::substitute_all(&mut cx, &mut root, env);
    let view = report_view::check_report_view(&mut cx, root, send);
    let warnings = cx.finish()?;
    let mut view = view.expect("no errors means a view");
    view.warnings = warnings;
    view.secrets = secrets.into_iter().map(Secret::new).collect();
    Ok(view)
}

/// The file's text as a YAML value, within the bounds checked before any parser runs
/// (nesting.rs says why), with the diagnostics its checks say their problems through.
fn read<'t>(text: &'t str, file: &Path) -> Result<(Diagnostics<'t>, Value), ConfigErrors> {
    let cx = Diagnostics::new(file, text);
    let limit = |line, column, message: String| {
        Err(ConfigErrors(vec![ConfigError {
            file: file.display().to_string(),
            line,
            column,
            probe: None,
            key: String::new(),
            message,
        }]))
    };
    if text.len() as u64 > files::MAX_CONFIG_BYTES {
        return limit(
            1,
            1,
            format!(
                "the file is {} bytes; at most {}",
                text.len(),
                files::MAX_CONFIG_BYTES
            ),
        );
    }
    if let Some((line, column)) = nesting::too_deep(text) {
        return limit(
            line,
            column,
            format!(
                "`[` and `{{` nested more than {} levels deep; a probes.yaml needs a few",
                nesting::MAX_FLOW_DEPTH
            ),
        );
    }
    match yaml::parse(text) {
        Ok(root) => Ok((cx, root)),
        Err(e) => {
            let (line, column) = e.location().map(|l| (l.line(), l.column())).unwrap_or((1, 1));
            Err(ConfigErrors(vec![ConfigError {
                file: cx.file,
                line,
                column,
                probe: None,
                key: String::new(),
                message: format!("invalid YAML: {}", positions::strip_location(&e.to_string())),
            }]))
        }
    }
}
