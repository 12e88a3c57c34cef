use std::path::Path;

use crate::config::{Config, parse};

const RECEIVERS: &str = "receivers:
  - {name: pager, kind: pagerduty, routing_key: k}
  - {name: team-chat, kind: slack, url: \"http://chat.example/hook\"}
  - {name: ml-chat, kind: slack, url: \"http://chat.example/ml\"}
  - {name: daily-digest, kind: webhook, url: \"http://digest.example/\"}
";

const SEED_ROUTES: &str = "routes:
  - match: {severity: critical}
    receivers: [pager, team-chat]
  - match: {severity: warning, labels: {team: ml}}
    receivers: [ml-chat]
    continue: true
  - match: {severity: [warning, error]}
    receivers: [team-chat]
  - receivers: [daily-digest]
";

fn load(text: &str) -> Config {
    parse(text, Path::new("t.yaml"), &|_| None).unwrap_or_else(|e| panic!("{e:?}"))
}

fn warnings(config: &Config) -> Vec<String> {
    config.warnings.iter().map(ToString::to_string).collect()
}

/// Each probe's (down, degraded) receivers, in the file's order.
fn routed(config: &Config) -> Vec<(Vec<&str>, Vec<&str>)> {
    fn names(list: &[String]) -> Vec<&str> {
        list.iter().map(String::as_str).collect()
    }
    config
        .probes
        .iter()
        .map(|p| (names(&p.alert.down_receivers), names(&p.alert.degraded_receivers)))
        .collect()
}

fn probe(name: &str, extra: &str) -> String {
    format!("  - {{name: {name}, kind: http, url: \"http://h/{name}\"{extra}}}\n")
}

#[test]
fn the_seed_tiers_route_each_alert_by_severity_and_labels() {
    let text = format!(
        "{RECEIVERS}{SEED_ROUTES}probes:\n{}{}{}{}",
        probe("chat", ""),
        probe("embed", ", labels: {team: ml}"),
        probe("batch", ", alert: {severity: error, slo_severity: info}"),
        probe(
            "trend",
            ", labels: {team: ml}, alert: {severity: warning, slo_severity: info}"
        ),
    );
    let config = load(&text);
    assert_eq!(
        routed(&config),
        [
            (vec!["pager", "team-chat"], vec!["team-chat"]),
            // `continue` adds the next match's receivers after its own.
            (vec!["pager", "team-chat"], vec!["ml-chat", "team-chat"]),
            (vec!["team-chat"], vec!["daily-digest"]),
            (vec!["ml-chat", "team-chat"], vec!["daily-digest"]),
        ]
    );
    assert_eq!(warnings(&config), Vec::<String>::new());
}

#[test]
fn a_list_in_the_probe_or_its_defaults_wins_over_the_routes() {
    let text = format!(
        "{RECEIVERS}{SEED_ROUTES}probes:\n{}{}",
        probe("listed", ", alert: {receivers: [ml-chat]}"),
        probe("routed", ""),
    );
    assert_eq!(
        routed(&load(&text)),
        [
            (vec!["ml-chat"], vec!["ml-chat"]),
            (vec!["pager", "team-chat"], vec!["team-chat"]),
        ]
    );
    let text = format!(
        "{RECEIVERS}{SEED_ROUTES}defaults:\n  alert: {{receivers: [pager]}}\nprobes:\n{}",
        probe("chat", ""),
    );
    let config = load(&text);
    assert_eq!(routed(&config), [(vec!["pager"], vec!["pager"])]);
    assert_eq!(
        warnings(&config),
        [
            "t.yaml:6:1: routes: no probe's alerts are routed: every probe lists `alert.receivers` \
          (or `defaults.alert.receivers` does), and a list wins over the routes"
        ]
    );
}

#[test]
fn without_routes_or_lists_every_receiver_gets_every_alert() {
    let config = load(&format!("{RECEIVERS}probes:\n{}", probe("chat", "")));
    let all = vec!["pager", "team-chat", "ml-chat", "daily-digest"];
    assert_eq!(routed(&config), [(all.clone(), all)]);
}

#[test]
fn an_alert_no_route_matches_pages_nobody_and_is_said_if_it_can_fire() {
    let text = format!(
        "{RECEIVERS}routes:\n  - match: {{severity: critical}}\n    receivers: [pager]\nprobes:\n{}{}",
        probe("chat", ""),
        // No latency target and a 429 counts as down: its degraded alert never fires.
        probe("health", ", alert: {rate_limited: down}"),
    );
    let config = load(&text);
    assert_eq!(
        routed(&config),
        [(vec!["pager"], vec![]), (vec!["pager"], vec![])]
    );
    assert_eq!(
        warnings(&config),
        [
            "t.yaml:10:6: probe \"chat\": probes[0]: its degraded alert (warning) matches no route \
          and the probe lists no `alert.receivers`: it pages nobody; add a route for it, or a last \
          route without `match`"
        ]
    );
}

#[test]
fn probe_and_kind_match_by_name_or_list() {
    let text = format!(
        "{RECEIVERS}routes:
  - match: {{probe: [chat, embed], severity: critical}}
    receivers: [pager]
  - match: {{kind: [openai_chat, http], severity: critical}}
    receivers: [team-chat]
  - receivers: []
probes:\n{}{}{}",
        probe("chat", ""),
        probe("other", ""),
        probe("embed", ""),
    );
    let config = load(&text);
    assert_eq!(
        routed(&config),
        [
            (vec!["pager"], vec![]),
            (vec!["team-chat"], vec![]),
            (vec!["pager"], vec![])
        ]
    );
    // An explicit `[]` is a choice, not a gap: nothing is said.
    assert_eq!(warnings(&config), Vec::<String>::new());
}

#[test]
fn routes_that_can_never_match_or_match_nothing_are_said() {
    let text = format!(
        "{RECEIVERS}routes:
  - match: {{severity: critical}}
    receivers: [pager]
  - match: {{severity: critical, labels: {{team: ml}}}}
    receivers: [ml-chat]
  - match: {{labels: {{team: nobody}}}}
    receivers: [ml-chat]
  - receivers: [team-chat]
  - match: {{severity: info}}
    receivers: [daily-digest]
probes:\n{}",
        probe("chat", ""),
    );
    let config = load(&text);
    assert_eq!(
        warnings(&config),
        [
            "t.yaml:9:5: routes[1]: can never match: routes[0] above it matches every alert this \
             one would, and has no `continue`",
            "t.yaml:11:5: routes[2]: takes no alert of any probe in the file: no probe has this \
             severity, name, kind and labels together, or the routes above take them first",
            "t.yaml:14:5: routes[4]: can never match: routes[3] above it matches every alert and \
             has no `continue`",
        ]
    );
}

#[test]
fn a_catch_all_that_no_alert_reaches_yet_is_not_said() {
    let text = format!(
        "{RECEIVERS}routes:
  - match: {{severity: [critical, warning]}}
    receivers: [team-chat]
  - receivers: [daily-digest]
probes:\n{}",
        probe("chat", ""),
    );
    let config = load(&text);
    assert_eq!(routed(&config), [(vec!["team-chat"], vec!["team-chat"])]);
    assert_eq!(warnings(&config), Vec::<String>::new());
}

#[test]
fn a_route_that_continues_hides_none_below_it() {
    let text = format!(
        "{RECEIVERS}routes:
  - receivers: [ml-chat]
    continue: true
  - match: {{severity: critical}}
    receivers: [pager]
  - receivers: [team-chat]
probes:\n{}",
        probe("chat", ""),
    );
    let config = load(&text);
    assert_eq!(
        routed(&config),
        [(vec!["ml-chat", "pager"], vec!["ml-chat", "team-chat"])]
    );
    assert_eq!(warnings(&config), Vec::<String>::new());
}

/// A model change notice is routed as `info`: with the seed tiers, to the catch-all;
/// `model_changes: false` (here under `defaults`, one probe turning it back on) tells
/// nobody; without routes, every receiver the probe pages.
#[test]
fn model_change_notices_are_routed_as_info_and_can_be_turned_off() {
    let notices = |config: &Config| -> Vec<Vec<String>> {
        config
            .probes
            .iter()
            .map(|p| p.alert.model_change_receivers.clone())
            .collect()
    };
    let text = format!(
        "{RECEIVERS}{SEED_ROUTES}probes:\n{}{}",
        probe("chat", ""),
        probe("quiet", ", alert: {model_changes: false}"),
    );
    assert_eq!(notices(&load(&text)), [vec!["daily-digest".to_owned()], vec![]]);
    let text = format!(
        "{RECEIVERS}defaults: {{alert: {{model_changes: false}}}}\nprobes:\n{}{}",
        probe("chat", ""),
        probe("loud", ", alert: {model_changes: true, receivers: [ml-chat]}"),
    );
    let config = load(&text);
    assert_eq!(notices(&config), [vec![], vec!["ml-chat".to_owned()]]);
    assert!(!config.probes[0].alert.model_changes);
}
