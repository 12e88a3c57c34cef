//! deploy/kubernetes: the example probes are valid, the kustomize overlays render with
//! their own location (with kubectl, and read as kustomize would without it), a region
//! added by deploy/README's step shares a cluster with the shipped ones without a clash,
//! and deploy/README's Kubernetes commands run as written.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_yaml::Value;

use super::*;
use crate::support::*;

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
        super::report::check_report_cronjob(overlay, &docs);
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
pub(super) fn selects(selector: &Value, labels: &Value) -> bool {
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
        super::report::check_report_cronjob(region, &docs);
        for other in regions.iter().filter(|o| **o != region) {
            assert!(!out.contains(other), "{region} mentions {other}");
        }
        stream.push_str(&out);
        stream.push_str("\n---\n");
    }
    assert!(!stream.contains("$(REGION)"), "a variable left unresolved");
    let docs = documents(&stream);
    // Regions added from eu-west send no second fleet report.
    assert_eq!(docs.iter().filter(|d| d["kind"] == "CronJob").count(), 1);

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
