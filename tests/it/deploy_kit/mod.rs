//! The deployment kit under deploy/: the Alertmanager example passes `amtool` and routes
//! and inhibits as documented (the routes with `amtool config routes test`, the
//! inhibitions in a real Alertmanager), the kustomize overlays render with their own
//! location, a region added by deploy/README's step shares a cluster with the shipped ones
//! without a clash, deploy/README's Kubernetes commands run as written, the example probes
//! are valid, the Dockerfile has the properties the README promises (it cannot be
//! built here: no Docker engine; scripts/image/ builds and starts the same image offline,
//! in .ci/run), and the weekly report's systemd timer and CronJob parse, agree on when,
//! and send one fleet report (report.rs).
//!
//! The overlays keep to what kustomize v2 understands (`bases`, `commonLabels`,
//! `patchesStrategicMerge`, `vars`), so they render both with a current kubectl and with
//! Debian's `kubernetes-client` (kubectl 1.20), which `.ci/run` installs; the structural
//! test makes the same checks on the files read with serde, without kubectl.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;

mod alertmanager;
mod dockerfile;
mod kubernetes;
mod report;

pub const ALERTMANAGER_YML: &str = "deploy/alertmanager/alertmanager.yml";
pub const KUBERNETES: &str = "deploy/kubernetes";
pub const DOCKERFILE: &str = "deploy/Dockerfile";
pub const OVERLAYS: [&str; 2] = ["eu-west", "us-east"];

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn yaml(path: &str) -> Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every document of a multi-document YAML stream.
pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Follows a path of mapping keys and sequence indexes ("spec.template.spec").
pub fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, key| match key.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[key],
    })
}

pub fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string in {v:?}"))
}

pub fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A tool on PATH, without the CI rule of `require_tool` (for tools CI cannot install).
pub fn optional_tool(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|p| p.join(name))
        .find(|p| p.is_file())
}
