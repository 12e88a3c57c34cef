//! What `inferprobe report` reads of probes.yaml, and nothing else: each probe's name,
//! kind, SLO targets and token prices (with `defaults:`' targets and prices), and
//! `agent.timezone`, and `agent.data_dir` when the report's figures come from the agent's store. The report
//! runs where the agent's environment often is not (a laptop, a CronJob), so the other
//! keys are taken out of the file's value ([`keep_report_keys`]) before `${VAR}` is
//! substituted: a variable only the agent needs (its `listen`, an endpoint's URL, a
//! key in a header, a receiver's webhook) is never looked up, and no stand-in for it
//! can reach a check. What is kept is checked by the agent's own checks, so a variable
//! the report needs that is not set is the same positioned error `check` gives.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::Value;

use super::agent::check_agent;
use super::alerting::{RawSlo, Slo};
use super::cost::{Cost, RawCost};
use super::defaults::check_defaults;
use super::diagnostics::{ConfigError, Diagnostics};
use super::probe::{check_name, slo_and_cost};
use super::receivers::{ReceiverConfig, check_receivers};
use super::reporting::{ReportConfig, check_report};
use super::root::{ProbeItem, probe_item, probe_items};
use super::values::Secret;
use crate::probe::kinds::Kind;

/// Where the report's figures come from, for what it reads of `agent:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportSource {
    /// The store in `agent.data_dir`: the report reads the key.
    AgentDataDir,
    /// `--data-dir` or `--prometheus` says: of `agent:`, only its `timezone` is read.
    Elsewhere,
}

/// The keys of each section the report reads; a section not named is not read.
const DEFAULTS_KEYS: [&str; 2] = ["slo", "cost"];
const PROBE_KEYS: [&str; 4] = ["name", "kind", "slo", "cost"];
const AGENT_KEYS: [&str; 2] = ["data_dir", "timezone"];

/// probes.yaml as `inferprobe report` reads it.
#[derive(Debug, Clone)]
pub struct ReportView {
    /// `agent.data_dir` (relative paths: to the config file), when it was read.
    pub data_dir: Option<PathBuf>,
    /// `agent.timezone`: the report's times are in it unless `--timezone` says.
    pub timezone: crate::time_zone::TimeZone,
    /// `report:` (read when sending: to whom, the link, the period).
    pub report: Option<ReportConfig>,
    /// The receivers `report:` names, when sending.
    pub receivers: Vec<ReceiverConfig>,
    /// The values `${VAR}` put where credentials go in those receivers, for the redactor.
    pub secrets: Vec<Secret>,
    pub probes: Vec<ReportProbe>,
    /// Allowed but risky settings among the keys read, positioned like errors.
    pub warnings: Vec<ConfigError>,
}

/// What the report reads of one probe.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportProbe {
    pub name: Arc<str>,
    pub slo: Arc<Slo>,
    /// LLM kinds: its token prices (its own `cost`, over `defaults.cost`).
    pub cost: Option<Arc<Cost>>,
}

/// One probe's keys the report reads, after [`keep_report_keys`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReportProbe {
    name: String,
    // Read before the rest, by `Diagnostics::read_kind`; here so that serde takes it.
    #[allow(dead_code)]
    kind: Kind,
    slo: Option<RawSlo>,
    cost: Option<RawCost>,
}

/// Takes every key the report does not read out of `root`, the file's value: what is
/// left is the sections and keys above, each as the file wrote it. A section or probe
/// that is not a mapping is left as it is, for its check to refuse.
pub(super) fn keep_report_keys(root: &mut Value, source: ReportSource, send: bool) {
    let Value::Mapping(map) = root else {
        return;
    };
    // Sending: `report:` and the receivers it names (as written: a name is not a
    // `${VAR}`), each with its keys, for they are all needed to send.
    let named: Vec<String> = map
        .get("report")
        .and_then(|r| r.get("receivers"))
        .and_then(Value::as_sequence)
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if send && let Some(Value::Sequence(receivers)) = map.get_mut("receivers") {
        receivers.retain(|r| {
            r.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| named.iter().any(|m| m == n))
        });
    }
    let agent_keys: &[&str] = match source {
        ReportSource::AgentDataDir => &AGENT_KEYS,
        ReportSource::Elsewhere => &AGENT_KEYS[1..],
    };
    map.retain(|key, _| match key.as_str() {
        Some("agent" | "defaults" | "probes") => true,
        Some("report" | "receivers") => send,
        _ => false,
    });
    let keep = |value: &mut Value, keys: &[&str]| {
        if let Value::Mapping(m) = value {
            m.retain(|k, _| k.as_str().is_some_and(|k| keys.contains(&k)));
        }
    };
    if let Some(agent) = map.get_mut("agent") {
        keep(agent, agent_keys);
    }
    if let Some(defaults) = map.get_mut("defaults") {
        keep(defaults, &DEFAULTS_KEYS);
    }
    if let Some(Value::Sequence(probes)) = map.get_mut("probes") {
        for probe in probes {
            keep(probe, &PROBE_KEYS);
        }
    }
}

/// The report's view of `root`, already cut by [`keep_report_keys`] and substituted;
/// `None` only after an error.
pub(super) fn check_report_view(cx: &mut Diagnostics, root: Value, send: bool) -> Option<ReportView> {
    let Value::Mapping(mut map) = root else {
        cx.error(
            None,
            "",
            "the file must be a mapping with `agent`, `defaults` and `probes`",
        );
        return None;
    };
    let agent = check_agent(cx, map.remove("agent").unwrap_or(Value::Null))?;
    let (receivers, names) = check_receivers(cx, map.remove("receivers"), agent.timezone);
    let report = match map.remove("report") {
        Some(r) => check_report(cx, r, &receivers, &names, agent.timezone),
        None if send => {
            cx.error(
                None,
                "report",
                "`report --send` sends to the receivers a `report:` section names (report: {receivers: [...]})",
            );
            None
        }
        None => None,
    };
    let defaults = check_defaults(cx, map.remove("defaults").unwrap_or(Value::Null));
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut probes = Vec::new();
    for (i, mut value) in probe_items(cx, map.remove("probes")).into_iter().enumerate() {
        let ProbeItem { prefix, name, kind } = probe_item(cx, &mut seen, i, &mut value);
        let Some(raw) = cx.section::<RawReportProbe>(value, &prefix, name.as_deref()) else {
            continue;
        };
        check_name(cx, &prefix, &raw.name);
        let p = Some(raw.name.as_str());
        let (slo, cost) = slo_and_cost(cx, p, &prefix, kind, raw.slo, raw.cost, defaults.as_ref());
        if let Some(slo) = slo {
            probes.push(ReportProbe {
                name: raw.name.into(),
                slo: Arc::new(slo),
                cost: cost.map(Arc::new),
            });
        }
    }
    Some(ReportView {
        data_dir: agent.data_dir,
        timezone: agent.timezone,
        report,
        receivers,
        secrets: Vec::new(),
        probes,
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::ReportSource;
    use crate::config::parse_for_report;

    /// Everything the agent needs from the environment, nothing of it set: the report
    /// reads its keys and leaves the rest alone.
    const FILE: &str = r#"
agent:
  listen: ${LISTEN}
  location: ${REGION}
  data_dir: ${DATA_DIR:-/var/lib/inferprobe}
  timezone: Asia/Shanghai
  remote_write: {url: "${RW_URL}", bearer_token: "${RW_TOKEN}"}
receivers:
  - {name: chat, kind: slack, url: "${SLACK_WEBHOOK_URL}"}
defaults:
  headers: {Authorization: "Bearer ${API_KEY}"}
  slo: {availability: 99.5}
  cost: {input_per_million: 0.15, output_per_million: 0.6, currency: USD}
probes:
  - name: eu-chat
    kind: openai_chat
    url: ${EU_ENDPOINT}/v1/chat/completions
    model: ${MODEL}
    slo: {ttft_p95: 2s}
    alert: {receivers: [chat], runbook_url: "${RUNBOOK}"}
  - name: health
    kind: http
    url: ${HEALTH_URL}
    body: '{"key": "${BODY_KEY}"}'
    slo: {total_p95: 500ms}
"#;

    #[test]
    fn the_report_reads_its_keys_and_no_variable_of_the_agents() {
        let looked_up = std::cell::RefCell::new(Vec::new());
        let env = |name: &str| {
            looked_up.borrow_mut().push(name.to_owned());
            None
        };
        let view = parse_for_report(
            FILE,
            Path::new("/etc/p.yaml"),
            &env,
            ReportSource::AgentDataDir,
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(looked_up.into_inner(), ["DATA_DIR"]);
        assert_eq!(view.data_dir.as_deref(), Some(Path::new("/var/lib/inferprobe")));
        assert_eq!(view.timezone.name(), "Asia/Shanghai");
        let names: Vec<&str> = view.probes.iter().map(|p| &*p.name).collect();
        assert_eq!(names, ["eu-chat", "health"]);
        let chat = &view.probes[0];
        assert_eq!(chat.slo.ttft_p95, Some(Duration::from_secs(2)));
        assert_eq!(chat.slo.availability(), Some(0.995));
        assert_eq!(chat.cost.as_ref().map(|c| c.currency.as_str()), Some("USD"));
        // Not an LLM kind: no TTFT target and no prices inherited.
        assert_eq!(view.probes[1].slo.ttft_p95, None);
        assert_eq!(view.probes[1].cost, None);
    }

    #[test]
    fn a_variable_the_report_reads_is_still_a_positioned_error() {
        let text = FILE
            .replace("${DATA_DIR:-/var/lib/inferprobe}", "${DATA_DIR}")
            .replace("- name: health", "- name: ${HEALTH_NAME}")
            .replace("ttft_p95: 2s", "ttft_p95: \"${TTFT}\"");
        let errors = parse_for_report(
            &text,
            Path::new("p.yaml"),
            &|_| None,
            ReportSource::AgentDataDir,
            false,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            errors,
            "p.yaml:5:13: agent.data_dir: environment variable DATA_DIR is not set\n\
             p.yaml:19:21: probe \"eu-chat\": probes[0].slo.ttft_p95: environment variable TTFT is not set\n\
             p.yaml:21:11: probes[1].name: environment variable HEALTH_NAME is not set"
        );
        // With the store given elsewhere, `agent.data_dir` is not read.
        let errors = parse_for_report(
            &text,
            Path::new("p.yaml"),
            &|_| None,
            ReportSource::Elsewhere,
            false,
        )
        .unwrap_err();
        assert_eq!(errors.0.len(), 2, "{errors}");
    }

    #[test]
    fn what_the_report_reads_is_checked_as_check_checks_it() {
        let text = FILE.replace("ttft_p95: 2s", "ttft_p95: soon").replace(
            "slo: {total_p95: 500ms}",
            "slo: {ttft_p95: 1s}\n    cost: {input_per_million: 1}",
        );
        let errors = parse_for_report(
            &text,
            Path::new("p.yaml"),
            &|_| None,
            ReportSource::Elsewhere,
            false,
        )
        .unwrap_err()
        .to_string();
        let agent = crate::config::parse(&text, Path::new("p.yaml"), &|_| None)
            .unwrap_err()
            .to_string();
        for line in errors.lines() {
            assert!(agent.contains(line), "check does not say {line:?}:\n{agent}");
        }
        assert_eq!(errors.lines().count(), 3, "{errors}");
    }
}
