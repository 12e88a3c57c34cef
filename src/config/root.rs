//! The file as a whole: its top-level keys, read in the order that lets each section use
//! what the earlier ones gave (the agent's `metrics` under `defaults`, receivers' names
//! under `alert` and `routes`, the routes in every probe), and every probe, each with its
//! kind read first.

use std::collections::HashMap;
use std::sync::Arc;

use serde_yaml::Value;

use super::agent::{AgentConfig, check_agent};
use super::alerting::defaults_alert;
use super::defaults::check_defaults;
use super::diagnostics::{ConfigError, Diagnostics};
use super::positions::suggest;
use super::probe::{ProbeConfig, RawProbe, check_probe, own_keys_of_probe};
use super::receivers::{ReceiverConfig, check_receivers};
use super::reporting::{ReportConfig, check_report};
use super::routes::check_routes;
use super::sharing::Sections;
use super::values::Secret;
use crate::probe::kinds::Kind;
use crate::time_zone::TimeZone;

/// A validated `probes.yaml`.
#[derive(Debug, Clone)]
pub struct Config {
    pub agent: AgentConfig,
    pub receivers: Vec<ReceiverConfig>,
    /// `report:`: the weekly report sent by itself.
    pub report: Option<ReportConfig>,
    /// Shared with the probes built from them: the running agent holds each once.
    pub probes: Vec<Arc<ProbeConfig>>,
    /// Probes of the file that other shards run (`--shard`): not ours, but not gone,
    /// and they take their slots of their endpoints' intervals (schedule/phase.rs).
    pub other_shards: Vec<Arc<ProbeConfig>>,
    /// Allowed but risky settings, positioned like errors.
    pub warnings: Vec<ConfigError>,
    /// Every value a `${VAR}` put where credentials go (any part of a probe's URL or
    /// body, a header, a receiver's URL or key, remote_write's URL and credentials): all
    /// are treated as secrets. One put elsewhere (a model, a region, a label) is not.
    pub secrets: Vec<Secret>,
}

pub(super) fn check_root(cx: &mut Diagnostics, root: Value) -> Option<Config> {
    let Value::Mapping(map) = root else {
        cx.error(
            None,
            "",
            "the file must be a mapping with `agent`, `defaults` and `probes`",
        );
        return None;
    };
    let mut agent = Value::Null;
    let mut defaults = Value::Null;
    let mut receivers = None;
    let mut routes = None;
    let mut probes = None;
    let mut report = None;
    for (k, v) in map {
        match k.as_str() {
            Some("agent") => agent = v,
            Some("defaults") => defaults = v,
            Some("receivers") => receivers = Some(v),
            Some("routes") => routes = Some(v),
            Some("probes") => probes = Some(v),
            Some("report") => report = Some(v),
            Some(other) => {
                const TOP: [&str; 6] = ["agent", "defaults", "receivers", "routes", "probes", "report"];
                let message = match suggest(other, &TOP) {
                    Some(s) => format!("unknown key `{other}`; did you mean `{s}`?"),
                    None => format!("unknown key `{other}`; expected one of {}", TOP.join(", ")),
                };
                let position = cx.index().locate_key(other);
                cx.error_at(position, None, other, message);
            }
            None => cx.error(None, "", "top-level keys must be strings"),
        }
    }
    let agent = check_agent(cx, agent);
    let mut defaults = check_defaults(cx, defaults);
    // `agent.metrics` is agent-wide: what probes get when `defaults` does not say.
    if let (Some(d), Some(a)) = (defaults.as_mut(), agent.as_ref()) {
        d.metrics = d.metrics.or(Some(a.metrics));
    }
    let zone = agent.as_ref().map_or(TimeZone::UTC, |a| a.timezone);
    let (receivers, receiver_names) = check_receivers(cx, receivers, zone);
    let report = report.and_then(|r| check_report(cx, r, &receivers, &receiver_names, zone));
    if let Some(d) = defaults.as_mut() {
        d.alert = defaults_alert(cx, std::mem::take(&mut d.alert), &receiver_names);
    }
    let items = probe_items(cx, probes);
    let probe_names: Vec<String> = items
        .iter()
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect();
    let mut routes = check_routes(cx, routes, &receiver_names, &probe_names);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    let mut sections = Sections::default();
    for (i, mut value) in items.into_iter().enumerate() {
        let ProbeItem { prefix, name, kind } = probe_item(cx, &mut seen, i, &mut value);
        // The kind's own keys out first: what is left is the keys every probe has.
        let own = own_keys_of_probe(cx, &mut value, &prefix, name.as_deref(), kind);
        let Some(raw) = cx.section::<RawProbe>(value, &prefix, name.as_deref()) else {
            continue;
        };
        // Checked even after a problem in the section (the file is refused anyway,
        // and the key that had it is settled), so that every problem shows in one pass.
        let p = check_probe(
            cx,
            &mut sections,
            raw,
            kind,
            own,
            &prefix,
            defaults.as_ref(),
            &receiver_names,
            routes.as_mut(),
        );
        if let Some(p) = p {
            out.push(Arc::new(p));
        }
    }
    if let Some(routes) = &routes {
        routes.warn_unused(cx);
    }
    Some(Config {
        agent: agent?,
        receivers,
        report,
        probes: out,
        other_shards: Vec::new(),
        warnings: Vec::new(),
        secrets: Vec::new(),
    })
}

/// The items of `probes:`; a list that is missing, empty or not a list is said.
pub(super) fn probe_items(cx: &mut Diagnostics, probes: Option<Value>) -> Vec<Value> {
    match probes {
        Some(Value::Sequence(items)) if !items.is_empty() => items,
        Some(Value::Sequence(_)) | None => {
            cx.error(None, "probes", "at least one probe is needed");
            Vec::new()
        }
        Some(_) => {
            cx.error(None, "probes", "must be a list of probes");
            Vec::new()
        }
    }
}

/// What a probe's check starts from, read before the rest of it.
pub(super) struct ProbeItem {
    /// Its key path, `probes[i]`.
    pub(super) prefix: String,
    /// Its name, when it has one: it labels every message about the probe.
    pub(super) name: Option<String>,
    /// `None` when missing or unknown (said, and a stand-in put in the value).
    pub(super) kind: Option<Kind>,
}

/// The `i`-th probe's key path, name and kind; a name an earlier probe has (in `seen`)
/// is refused.
pub(super) fn probe_item(
    cx: &mut Diagnostics,
    seen: &mut HashMap<String, usize>,
    i: usize,
    value: &mut Value,
) -> ProbeItem {
    let prefix = format!("probes[{i}]");
    let name = value.get("name").and_then(Value::as_str).map(str::to_owned);
    if let Some(name) = &name
        && let Some(first) = seen.insert(name.clone(), i)
    {
        cx.error(
            Some(name),
            &format!("{prefix}.name"),
            format!("duplicate name; probes[{first}] has it already"),
        );
    }
    let kind = cx.read_kind::<Kind>(value, &prefix, name.as_deref(), "http");
    ProbeItem { prefix, name, kind }
}
