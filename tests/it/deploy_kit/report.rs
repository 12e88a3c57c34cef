//! The weekly report's deploy files: the systemd service and timer (they parse, the timer
//! fires on Monday 09:00 in Shanghai, the service keeps the agent's hardening and never
//! retries a send), and the Kubernetes CronJob (rendered in exactly one region, in that
//! region's namespace, with its ConfigMap, Secret and image, on the same schedule as the
//! timer, and selected by none of the agents' selectors); the CronJob's and the
//! service's commands run with the kit's probes.yaml and the README's `report:` example.

use std::process::Command;

use serde_yaml::Value;

use super::kubernetes::selects;
use super::*;
use crate::support::*;

const SERVICE: &str = "deploy/systemd/inferprobe-report.service";
const TIMER: &str = "deploy/systemd/inferprobe-report.timer";
const AGENT_SERVICE: &str = "deploy/systemd/inferprobe.service";
const CRONJOB: &str = "deploy/kubernetes/report/cronjob.yaml";
/// The one region whose overlay sends the fleet's report.
pub const REPORT_OVERLAY: &str = "us-east";
/// Where the report's figures come from in the Kubernetes kit.
const PROMETHEUS: &str = "http://prometheus.monitoring.svc:9090";
/// When both sends happen: the CronJob's `schedule` and `timeZone`.
const SCHEDULE: &str = "0 9 * * 1";
const ZONE: &str = "Asia/Shanghai";

/// A unit file's settings, `(section, key, value)` in order; comments and blank lines
/// left out.
fn unit(path: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in read(path).lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{path}: not Key=value: {line}"));
        out.push((section.clone(), key.to_owned(), value.to_owned()));
    }
    out
}

fn values<'a>(settings: &'a [(String, String, String)], section: &str, key: &str) -> Vec<&'a str> {
    settings
        .iter()
        .filter(|(s, k, _)| s == section && k == key)
        .map(|(_, _, v)| v.as_str())
        .collect()
}

/// The cron schedule `M H * * D` as a systemd calendar event in `zone`, for this one
/// shape (the kit's); anything else is for the test to learn first.
fn cron_as_calendar(cron: &str, zone: &str) -> String {
    let fields: Vec<&str> = cron.split_whitespace().collect();
    let [minute, hour, "*", "*", day] = fields[..] else {
        panic!("cron_as_calendar knows `M H * * D` only, not {cron:?}");
    };
    let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    let day = days[day.parse::<usize>().unwrap() % 7];
    let (hour, minute): (u32, u32) = (hour.parse().unwrap(), minute.parse().unwrap());
    format!("{day} *-*-* {hour:02}:{minute:02}:00 {zone}")
}

/// `systemd-analyze calendar`'s next two elapses after a fixed moment, in UTC.
fn next_elapses(analyze: &std::path::Path, spec: &str) -> String {
    let (ok, out) = run(Command::new(analyze)
        .env("TZ", "UTC")
        .args([
            "calendar",
            "--base-time=2026-12-05 00:00:00 UTC",
            "--iterations=2",
        ])
        .arg(spec));
    assert!(ok, "systemd-analyze calendar {spec:?}:\n{out}");
    out.lines()
        .filter(|l| l.contains("Next elapse:") || l.contains("Iter. #2:"))
        .map(|l| format!("{}\n", l.trim()))
        .collect()
}

#[test]
fn the_report_service_sends_once_from_prometheus_with_the_agents_hardening() {
    let service = unit(SERVICE);
    assert_eq!(values(&service, "Service", "Type"), ["oneshot"]);
    let exec = values(&service, "Service", "ExecStart");
    assert_eq!(exec.len(), 1, "{exec:?}");
    let words: Vec<&str> = exec[0].split_whitespace().collect();
    assert_eq!(words[0], "/usr/local/bin/inferprobe", "{exec:?}");
    let after = |flag: &str| {
        let i = words.iter().position(|w| *w == flag);
        i.and_then(|i| words.get(i + 1)).copied()
    };
    assert_eq!(after("report"), Some("--send"), "{exec:?}");
    assert_eq!(after("-c"), Some("/etc/inferprobe/probes.yaml"), "{exec:?}");
    assert_eq!(after("--prometheus"), Some("${PROMETHEUS_URL}"), "{exec:?}");
    // The default URL is set before the env file, which overrides it.
    let url = values(&service, "Service", "Environment");
    assert_eq!(url, ["PROMETHEUS_URL=http://localhost:9090"]);
    assert_eq!(
        values(&service, "Service", "EnvironmentFile"),
        ["-/etc/inferprobe/env"]
    );
    // A retry would send the report again to receivers that accepted it.
    assert!(values(&service, "Service", "Restart").is_empty());
    assert!(!values(&service, "Service", "TimeoutStartSec").is_empty());
    // Everything the agent's unit hardens, but what is the agent's own: its command,
    // reload, state directory, descriptors, restarts and drain.
    let own = [
        "ExecStart",
        "ExecReload",
        "Environment",
        "EnvironmentFile",
        "StateDirectory",
        "LimitNOFILE",
        "Restart",
        "RestartSec",
        "TimeoutStopSec",
    ];
    let agent = unit(AGENT_SERVICE);
    let hardening: Vec<_> = agent
        .iter()
        .filter(|(s, k, _)| s == "Service" && !own.contains(&k.as_str()))
        .collect();
    assert!(hardening.len() >= 15, "{hardening:?}");
    for setting in hardening {
        assert!(
            service.contains(setting),
            "{SERVICE} lacks the agent's {setting:?}"
        );
    }
    assert!(values(&service, "Service", "StateDirectory").is_empty());
    assert!(
        values(&service, "Install", "WantedBy").is_empty(),
        "started by its timer only"
    );
}

#[test]
fn the_report_timer_fires_on_monday_at_nine_in_shanghai_like_the_cronjob() {
    let timer = unit(TIMER);
    let calendar = values(&timer, "Timer", "OnCalendar");
    assert_eq!(calendar.len(), 1, "{calendar:?}");
    assert_eq!(values(&timer, "Timer", "Persistent"), ["true"]);
    // Unit= unset: it starts the service of its own name.
    assert!(values(&timer, "Timer", "Unit").is_empty());
    assert_eq!(values(&timer, "Install", "WantedBy"), ["timers.target"]);
    let cronjob = yaml(CRONJOB);
    assert_eq!(str_at(&cronjob, "spec.schedule"), SCHEDULE);
    assert_eq!(str_at(&cronjob, "spec.timeZone"), ZONE);
    inferprobe::time_zone::TimeZone::parse(ZONE).unwrap();

    let Some(analyze) = require_tool(
        "systemd-analyze",
        "parses the report's unit files and the timer's OnCalendar; apt-get install systemd",
    ) else {
        return;
    };
    let elapses = next_elapses(&analyze, calendar[0]);
    assert_eq!(
        elapses, "Next elapse: Mon 2026-12-07 01:00:00 UTC\nIter. #2: Mon 2026-12-14 01:00:00 UTC\n",
        "09:00 in Shanghai is 01:00 UTC"
    );
    // The CronJob's schedule, read as systemd reads a calendar, elapses at the same times.
    assert_eq!(next_elapses(&analyze, &cron_as_calendar(SCHEDULE, ZONE)), elapses);

    // Both units, with the command pointed at the built binary (verify wants it to
    // exist): no error and no warning (an unknown key is only a warning).
    let dir = temp_dir("report-units");
    let bin = env!("CARGO_BIN_EXE_inferprobe");
    let mut paths = Vec::new();
    for file in [SERVICE, TIMER] {
        let path = dir.join(std::path::Path::new(file).file_name().unwrap());
        std::fs::write(&path, read(file).replace("/usr/local/bin/inferprobe", bin)).unwrap();
        paths.push(path);
    }
    let (ok, out) = run(Command::new(&analyze).arg("verify").args(&paths));
    assert!(ok && out.trim().is_empty(), "systemd-analyze verify:\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without kubectl: the report's kustomization, read as kustomize would read it.
#[test]
fn the_report_kustomization_holds_together() {
    let mut sending = Vec::new();
    for overlay in OVERLAYS {
        let k = yaml(&format!("{KUBERNETES}/overlays/{overlay}/kustomization.yaml"));
        let bases = k["bases"].as_sequence().unwrap();
        if bases.iter().any(|b| b == "../../report") {
            sending.push(overlay);
        }
    }
    // eu-west is the region the README's step copies: a copy must not send a second one.
    assert_eq!(sending, [REPORT_OVERLAY], "one region sends the fleet's report");
    let report = yaml(&format!("{KUBERNETES}/report/kustomization.yaml"));
    assert_eq!(report["resources"].as_sequence().unwrap().len(), 1);
    assert_eq!(report["resources"][0], "cronjob.yaml");
    let base = yaml(&format!("{KUBERNETES}/base/kustomization.yaml"));
    let (labels, agents) = (&report["commonLabels"], &base["commonLabels"]);
    assert_eq!(labels["app.kubernetes.io/name"], agents["app.kubernetes.io/name"]);
    assert!(
        !selects(agents, labels),
        "the agents' selectors would take the report's pods: {labels:?}"
    );

    let cronjob = yaml(CRONJOB);
    assert_eq!(str_at(&cronjob, "metadata.namespace"), "inferprobe-$(REGION)");
    let pod = at(&cronjob, "spec.jobTemplate.spec.template.spec");
    assert_eq!(
        str_at(pod, "volumes.0.configMap.name"),
        str_at(&base, "configMapGenerator.0.name")
    );
    assert_eq!(
        str_at(pod, "containers.0.envFrom.0.secretRef.name"),
        str_at(&base, "secretGenerator.0.name")
    );
    let sts: Value = serde_yaml::from_str(&read(&format!("{KUBERNETES}/base/statefulset.yaml"))).unwrap();
    let agent = at(&sts, "spec.template.spec.containers.0");
    let container = &pod["containers"][0];
    // The overlays' `images:` names the agent's image: the report's must be the same.
    assert_eq!(container["image"], agent["image"]);
    assert_eq!(container["securityContext"], agent["securityContext"]);
}

/// The CronJob of one rendered overlay: there only in [`REPORT_OVERLAY`], and there with
/// the schedule, command and the region's own ConfigMap, Secret and image.
pub fn check_report_cronjob(overlay: &str, docs: &[Value]) {
    let of_kind = |kind: &str| docs.iter().filter(|d| d["kind"] == kind).collect::<Vec<_>>();
    let cronjobs = of_kind("CronJob");
    if overlay != REPORT_OVERLAY {
        assert!(cronjobs.is_empty(), "{overlay} sends a report too: one per fleet");
        return;
    }
    assert_eq!(cronjobs.len(), 1, "{overlay}: one CronJob");
    let cronjob = cronjobs[0];
    assert_eq!(
        str_at(cronjob, "metadata.namespace"),
        format!("inferprobe-{overlay}")
    );
    assert_eq!(str_at(cronjob, "spec.schedule"), SCHEDULE);
    assert_eq!(str_at(cronjob, "spec.timeZone"), ZONE);
    assert_eq!(str_at(cronjob, "spec.concurrencyPolicy"), "Forbid");
    let job = at(cronjob, "spec.jobTemplate.spec");
    assert_eq!(job["backoffLimit"], 0, "a retry would send it twice");
    assert!(job["activeDeadlineSeconds"].is_u64());
    let pod = at(job, "template.spec");
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["automountServiceAccountToken"], false);
    let container = at(pod, "containers.0");
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "report",
            "--send",
            "-c",
            "/etc/inferprobe/probes.yaml",
            "--prometheus",
            PROMETHEUS
        ]
    );

    // The region's probes.yaml, mounted where `-c` reads it, and its Secret.
    let sts = of_kind("StatefulSet")[0];
    let agent_pod = at(sts, "spec.template.spec");
    let agent = at(agent_pod, "containers.0");
    let config = str_at(agent_pod, "volumes.0.configMap.name");
    assert!(config.starts_with("inferprobe-config-"), "{config}: generated");
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["configMap"]["name"] == config)
        .expect("the probes' ConfigMap mounted");
    assert!(
        container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|m| m["name"] == volume["name"] && m["mountPath"] == "/etc/inferprobe"),
        "mounted where -c reads it"
    );
    assert_eq!(container["envFrom"], agent["envFrom"], "the region's Secret");
    assert_eq!(container["image"], agent["image"], "the overlay's image");
    assert_eq!(container["securityContext"], agent["securityContext"]);
    assert_eq!(
        at(pod, "securityContext.runAsUser"),
        at(agent_pod, "securityContext.runAsUser")
    );

    // The report's pods are no agent: no selector of the agents' takes them.
    let labels = at(job, "template.metadata.labels");
    assert!(labels.as_mapping().is_some_and(|m| !m.is_empty()), "{labels:?}");
    assert!(!selects(at(sts, "spec.selector.matchLabels"), labels));
    for service in of_kind("Service") {
        assert!(
            !selects(&service["spec"]["selector"], labels),
            "{:?} routes to the report's pods",
            service["metadata"]["name"]
        );
    }
}

/// The first ```yaml block of deploy/README.md's "The weekly report".
fn readme_report_example() -> Value {
    let doc = read("deploy/README.md");
    let from = doc
        .find("## The weekly report")
        .expect("deploy/README.md lost its section");
    let rest = &doc[from..];
    let start = rest.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let end = rest[start..].find("```").expect("the block's end");
    serde_yaml::from_str(&rest[start..start + end]).unwrap()
}

/// `inferprobe <args>` (`-c` and `--prometheus` replaced) against the kit's probes.yaml
/// with the README's receivers and `report:` added and none of the agent's environment:
/// every flag and key must be taken and the run get as far as asking Prometheus (a closed
/// port here, so it exits 1 there).
fn runs_as_far_as_prometheus(what: &str, args: &[String]) {
    let example = readme_report_example();
    assert!(
        example["report"].get("schedule").is_none(),
        "the CronJob or timer sends: no report.schedule for the agents"
    );
    let mut kit = yaml(&format!("{KUBERNETES}/base/probes.yaml"));
    let added = example["receivers"].as_sequence().unwrap().clone();
    kit["receivers"].as_sequence_mut().unwrap().extend(added);
    kit["report"] = example["report"].clone();
    let dir = temp_dir("report-command");
    let config = dir.join("probes.yaml");
    std::fs::write(&config, serde_yaml::to_string(&kit).unwrap()).unwrap();
    let port = closed_port();
    let mut args = args.to_vec();
    for (flag, value) in [
        ("-c", config.display().to_string()),
        ("--prometheus", format!("http://127.0.0.1:{port}")),
    ] {
        let i = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{what}: no {flag}"));
        args[i + 1] = value;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        // What the region's Secret (or /etc/inferprobe/env) holds for the README's receivers.
        .env("SMTP_PASSWORD", "PLACEHOLDER-not-a-real-password")
        .env(
            "WECOM_WEBHOOK_URL",
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=PLACEHOLDER",
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {args:?}:\n{stderr}");
    assert!(
        stderr.contains(&format!("to http://127.0.0.1:{port} failed")),
        "{what}: stopped before asking Prometheus:\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_cronjobs_and_the_services_commands_run_with_the_kit_and_the_readmes_report_section() {
    let cronjob = yaml(CRONJOB);
    let container = at(&cronjob, "spec.jobTemplate.spec.template.spec.containers.0");
    // The image's entrypoint, then the CronJob's args.
    let mut args = vec!["--log-format".to_owned(), "json".to_owned()];
    args.extend(
        container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned()),
    );
    runs_as_far_as_prometheus("the CronJob", &args);

    let service = unit(SERVICE);
    let exec = values(&service, "Service", "ExecStart");
    let args: Vec<String> = exec[0].split_whitespace().skip(1).map(str::to_owned).collect();
    runs_as_far_as_prometheus("the systemd service", &args);
}
