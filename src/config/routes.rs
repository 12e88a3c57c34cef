//! `routes:`: which receivers each probe alert pages, said once for the whole file
//! instead of in every probe's `alert.receivers`. Evaluated here, at load: an alert's
//! severity, its probe's name, kind and static labels are all known before anything
//! runs, so every probe alert leaves config with its receivers decided, and the
//! state machine in alert/ never sees a route.
//!
//! The order is Alertmanager's: routes are tried top to bottom, the first that matches
//! decides, and one with `continue: true` adds its receivers and lets the next ones try
//! too. A route without `match` matches every alert. A probe's own `alert.receivers` (or
//! `defaults.alert.receivers`) wins over every route, so files written before routes
//! page as they did.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::alerting::{AlertConfig, Severity, Slo, no_such_receiver};
use super::diagnostics::Diagnostics;
use super::formats::Name;
use super::positions::{not_one_of, suggest};
use crate::probe::kinds::Kind;

/// Where a probe alert goes: tried in order, the first route that matches decides.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Route")]
pub(super) struct RawRoute {
    /// Which alerts this route takes: every key given must match (default: every alert).
    #[serde(rename = "match")]
    matcher: Option<RawMatch>,
    /// The receivers these alerts page, by name; `[]` pages nobody.
    // Optional for serde, so that a route without it is told what the key is for.
    #[schemars(with = "Vec<String>")]
    receivers: Option<Vec<String>>,
    /// Keep trying the routes below after this one matched, adding theirs (default
    /// false: the first route that matches decides).
    #[serde(rename = "continue", default)]
    goes_on: bool,
}

/// What a route matches: the alert's severity, its probe's name, kind and static
/// labels. Within a key, any of a list; across keys, all of them.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "RouteMatch")]
struct RawMatch {
    /// The alert's severity, one or a list: the down alert's is `alert.severity`
    /// (default critical), the degraded alert's `alert.slo_severity` (default warning).
    #[serde(default, deserialize_with = "one_or_many")]
    #[schemars(with = "Option<OneOrList<Severity>>")]
    severity: Option<Vec<String>>,
    /// The probe's name, one or a list.
    #[serde(default, deserialize_with = "one_or_many")]
    #[schemars(with = "Option<OneOrList<Name>>")]
    probe: Option<Vec<String>>,
    /// The probe's kind, one or a list.
    #[serde(default, deserialize_with = "one_or_many")]
    #[schemars(with = "Option<OneOrList<Kind>>")]
    kind: Option<Vec<String>>,
    /// The probe's static labels (with `defaults.labels`): each must have exactly this
    /// value.
    labels: Option<BTreeMap<String, String>>,
}

/// One value, or a list of them: any of them matches.
// The schema's shape only: `one_or_many` reads these keys.
#[allow(dead_code)]
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "OneOrList{T}")]
enum OneOrList<T> {
    One(T),
    List(Vec<T>),
}

/// `severity: critical` and `severity: [warning, error]` both work.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    struct OneOrMany;
    impl<'de> Visitor<'de> for OneOrMany {
        type Value = Option<Vec<String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a value or a list of values")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(vec![v.to_owned()]))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<String>()? {
                out.push(s);
            }
            Ok(Some(out))
        }
    }
    d.deserialize_any(OneOrMany)
}

/// The file's routes, checked.
#[derive(Debug)]
pub(super) struct Routes {
    routes: Vec<Route>,
    /// Probes whose alerts went through the routes (not listing `alert.receivers`).
    routed_probes: usize,
}

#[derive(Debug)]
struct Route {
    /// `routes[2]`: where it is, for what is said about it.
    at: String,
    /// `None`: any.
    severities: Option<Vec<Severity>>,
    probes: Option<Vec<String>>,
    kinds: Option<Vec<Kind>>,
    labels: BTreeMap<String, String>,
    receivers: Vec<String>,
    goes_on: bool,
    /// Whether some probe alert of the file matched it.
    used: bool,
}

/// What a route may match of a probe, besides its alert's severity.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProbeFacts<'a> {
    pub(super) name: &'a str,
    /// `None` when the file's kind is unknown (said elsewhere): no `kind` matches it.
    pub(super) kind: Option<Kind>,
    /// With `defaults.labels`.
    pub(super) labels: &'a BTreeMap<String, String>,
}

impl Route {
    fn matches(&self, severity: Severity, probe: &ProbeFacts) -> bool {
        self.severities.as_ref().is_none_or(|s| s.contains(&severity))
            && self
                .probes
                .as_ref()
                .is_none_or(|p| p.iter().any(|p| p == probe.name))
            && self
                .kinds
                .as_ref()
                .is_none_or(|k| probe.kind.is_some_and(|kind| k.contains(&kind)))
            && self.labels.iter().all(|(k, v)| probe.labels.get(k) == Some(v))
    }

    /// A route without `match`: the catch-all.
    fn matches_everything(&self) -> bool {
        self.severities.is_none() && self.probes.is_none() && self.kinds.is_none() && self.labels.is_empty()
    }

    /// Whether every alert this route matches, `other` matches too: then `other`, above
    /// it without `continue`, takes them all and this route never sees one.
    fn within(&self, other: &Route) -> bool {
        fn narrower<T: PartialEq>(mine: &Option<Vec<T>>, theirs: &Option<Vec<T>>) -> bool {
            match (mine, theirs) {
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(mine), Some(theirs)) => mine.iter().all(|m| theirs.contains(m)),
            }
        }
        narrower(&self.severities, &other.severities)
            && narrower(&self.probes, &other.probes)
            && narrower(&self.kinds, &other.kinds)
            && other.labels.iter().all(|(k, v)| self.labels.get(k) == Some(v))
    }
}

impl Routes {
    /// The receivers of one probe alert, in the order the routes name them; `None` when
    /// no route matches it.
    pub(super) fn receivers_of(&mut self, severity: Severity, probe: &ProbeFacts) -> Option<Vec<String>> {
        let mut out: Option<Vec<String>> = None;
        for route in &mut self.routes {
            if !route.matches(severity, probe) {
                continue;
            }
            route.used = true;
            let chosen = out.get_or_insert_with(Vec::new);
            for name in &route.receivers {
                if !chosen.contains(name) {
                    chosen.push(name.clone());
                }
            }
            if !route.goes_on {
                break;
            }
        }
        out
    }

    /// Routes one probe's alerts (a probe that lists no `alert.receivers`): each alert's
    /// receivers become what the routes give its severity. An alert that can fire and
    /// that no route matches pages nobody, which is said.
    pub(super) fn route_probe(
        &mut self,
        cx: &mut Diagnostics,
        prefix: &str,
        probe: &ProbeFacts,
        alert: &mut AlertConfig,
        slo: &Slo,
    ) {
        self.routed_probes += 1;
        let fires: Vec<&str> = alert.pages(slo).iter().map(|(which, _, _)| *which).collect();
        // The model change notice is routed as `info`; one no route takes goes to
        // nobody, which is not said: a notice nobody asked for is no loss.
        if alert.model_changes {
            alert.model_change_receivers = self.receivers_of(Severity::Info, probe).unwrap_or_default();
        }
        let tracks = [
            ("down", alert.severity, &mut alert.down_receivers),
            ("degraded", alert.slo_severity, &mut alert.degraded_receivers),
        ];
        for (which, severity, receivers) in tracks {
            match self.receivers_of(severity, probe) {
                Some(routed) => *receivers = routed,
                None => {
                    receivers.clear();
                    if fires.contains(&which) {
                        cx.warn(
                            Some(probe.name),
                            prefix,
                            format!(
                                "its {which} alert ({}) matches no route and the probe lists no \
                                 `alert.receivers`: it pages nobody; add a route for it, or a \
                                 last route without `match`",
                                severity.as_str()
                            ),
                        );
                    }
                }
            }
        }
    }

    /// After every probe is routed: routes that took no alert of the file are said (a
    /// label or name that no probe has, most often), as is a file whose routes are all
    /// overruled by lists.
    pub(super) fn warn_unused(&self, cx: &mut Diagnostics) {
        if self.routed_probes == 0 {
            cx.warn(
                None,
                "routes",
                "no probe's alerts are routed: every probe lists `alert.receivers` (or \
                 `defaults.alert.receivers` does), and a list wins over the routes",
            );
            return;
        }
        for (i, route) in self.routes.iter().enumerate() {
            // One that can never match is said so already, by `check_routes`; a catch-all
            // that nothing reaches yet is a safety net for the probes to come.
            if !route.used && !route.matches_everything() && shadowing(&self.routes, i).is_none() {
                cx.warn(
                    None,
                    &route.at,
                    "takes no alert of any probe in the file: no probe has this severity, \
                     name, kind and labels together, or the routes above take them first",
                );
            }
        }
    }
}

/// `routes:`, checked against the file's receivers and probes. `None` when the file has
/// none, or after an error.
pub(super) fn check_routes(
    cx: &mut Diagnostics,
    value: Option<Value>,
    receivers: &[String],
    probes: &[String],
) -> Option<Routes> {
    let items = match value {
        None | Some(Value::Null) => return None,
        Some(Value::Sequence(items)) if !items.is_empty() => items,
        Some(Value::Sequence(_)) => {
            cx.error(
                None,
                "routes",
                "holds no route; remove it, and every receiver gets every alert",
            );
            return None;
        }
        Some(_) => {
            cx.error(None, "routes", "must be a list of routes");
            return None;
        }
    };
    let before = cx.error_count();
    let mut routes: Vec<Route> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("routes[{i}]");
        if let Some(raw) = cx.section::<RawRoute>(item, &at, None) {
            routes.push(route(cx, at, raw, receivers, probes));
        }
    }
    for (i, route) in routes.iter().enumerate() {
        if let Some(earlier) = shadowing(&routes, i) {
            let message = if earlier.matches_everything() {
                format!(
                    "can never match: {} above it matches every alert and has no `continue`",
                    earlier.at
                )
            } else {
                format!(
                    "can never match: {} above it matches every alert this one would, and has \
                     no `continue`",
                    earlier.at
                )
            };
            cx.warn(None, &route.at, message);
        }
    }
    (cx.error_count() == before).then_some(Routes {
        routes,
        routed_probes: 0,
    })
}

/// The route above `routes[i]` that takes every alert it would: then it never matches.
fn shadowing(routes: &[Route], i: usize) -> Option<&Route> {
    routes[..i]
        .iter()
        .find(|earlier| !earlier.goes_on && routes[i].within(earlier))
}

/// One route, its names checked; what is wrong is said and left out.
fn route(cx: &mut Diagnostics, at: String, raw: RawRoute, receivers: &[String], probes: &[String]) -> Route {
    let m = raw.matcher.unwrap_or_default();
    let key = |k: &str| format!("{at}.match.{k}");
    // `severity: x` is said at the key, `severity: [a, x]` at the item.
    let item_key = |k: &str, i: usize, list: &[String]| {
        if list.len() == 1 {
            key(k)
        } else {
            format!("{}[{i}]", key(k))
        }
    };
    let mut closed = |k: &str, list: Option<Vec<String>>| -> Option<Vec<String>> {
        let list = list?;
        if list.is_empty() {
            cx.error(
                None,
                &key(k),
                "an empty list matches nothing; leave the key out to match any",
            );
        }
        Some(list)
    };
    let severity_names = closed("severity", m.severity);
    let probe_names = closed("probe", m.probe);
    let kind_names = closed("kind", m.kind);

    const SEVERITIES: [Severity; 4] = [
        Severity::Critical,
        Severity::Error,
        Severity::Warning,
        Severity::Info,
    ];
    let severities = severity_names.map(|names| {
        let all: Vec<&str> = SEVERITIES.iter().map(|s| s.as_str()).collect();
        let mut out = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match SEVERITIES.iter().find(|s| s.as_str() == name) {
                Some(s) => out.push(*s),
                None => cx.error(None, &item_key("severity", i, &names), not_one_of(name, &all)),
            }
        }
        out
    });
    let kinds = kind_names.map(|names| {
        let all: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        let mut out = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match Kind::ALL.iter().find(|k| k.as_str() == name) {
                Some(k) => out.push(*k),
                None => cx.error(None, &item_key("kind", i, &names), not_one_of(name, &all)),
            }
        }
        out
    });
    if let Some(names) = &probe_names {
        for (i, name) in names.iter().enumerate() {
            if !probes.contains(name) {
                let message = match suggest(name, probes) {
                    Some(s) => format!("no probe named `{name}`; did you mean `{s}`?"),
                    None => format!("no probe named `{name}` in `probes:`"),
                };
                cx.error(None, &item_key("probe", i, names), message);
            }
        }
    }
    let receiver_names = raw.receivers.unwrap_or_else(|| {
        cx.error(
            None,
            &at,
            "a route needs `receivers`: the receivers the alerts it matches page (`[]` for nobody)",
        );
        Vec::new()
    });
    for (i, name) in receiver_names.iter().enumerate() {
        if !receivers.contains(name) {
            cx.error(
                None,
                &format!("{at}.receivers[{i}]"),
                no_such_receiver(name, receivers),
            );
        }
    }
    Route {
        at,
        severities,
        probes: probe_names,
        kinds,
        labels: m.labels.unwrap_or_default(),
        receivers: receiver_names,
        goes_on: raw.goes_on,
        used: false,
    }
}

#[cfg(test)]
mod tests;
