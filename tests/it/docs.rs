//! Every ```yaml block of README.md and docs/*.md is checked, by the convention written in
//! docs/README.md (and /work/notes/LAYOUT.md):
//!
//! - no marker: (part of) a probes.yaml with its top-level keys. A block without `probes:`
//!   gets a minimal probe added after its last line. It must pass the library's loader
//!   (`config::parse`, as `inferprobe check` does), in a directory of its own, with every
//!   `${VAR}` it names without a default set to a dummy value (a `${VAR:-default}` is left
//!   unset, so that the default the reader sees is what is checked);
//! - `<!-- docs-check: invalid -->`: a mistake, shown with what inferprobe says about it.
//!   It must fail the loader, and each message must be printed in the doc below the block
//!   (before the next heading), so the doc shows what `check` really prints;
//! - `<!-- docs-check: other KIND -->`: YAML that is not a probes.yaml, checked by KIND:
//!   `alertmanager` (amtool check-config), `prometheus-rules` (promtool check rules),
//!   `prometheus` (promtool check config), `kubernetes` (parsed as YAML, every document)
//!   or `yaml` (parsed). promtool and amtool are skipped with a reason on a developer's
//!   machine without them, never under CI=true;
//! - `<!-- docs-check: files NAME ... -->`, beside either of the first two: files the
//!   block names, made next to it (`NAME/` is a folder with one image).
//!
//! A ```json block must be one JSON value or JSON Lines.
//!
//! Every problem is reported at once, each naming the doc and the line of its block.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use inferprobe::config;

/// What a probes.yaml block without `probes:` is checked with: one LLM probe, so that
/// `defaults` keys that only LLM kinds take (`slo.ttft_p95`) are checked too.
const MINIMAL_PROBE: &str = "probes:\n  - {name: docs-check, kind: openai_chat, url: \"http://127.0.0.1:8000/v1/chat/completions\", model: docs-model}\n";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md (whatever files the docs hold today), as
/// (path relative to the repository, text).
fn documents() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_owned()];
    if let Ok(entries) = std::fs::read_dir(repo().join("docs")) {
        let mut docs: Vec<String> = entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("docs/{n}"))
            .collect();
        docs.sort();
        names.extend(docs);
    }
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(repo().join(&n)).unwrap_or_else(|e| panic!("{n}: {e}"));
            (n, text)
        })
        .collect()
}

/// The names of the `${VAR}` references in `text`: those written without a default, and
/// those with one.
fn env_references(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut bare, mut defaulted) = (BTreeSet::new(), BTreeSet::new());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find('}') else { break };
        let inner = &rest[..end];
        match inner.split_once(":-") {
            Some((name, _)) => defaulted.insert(name.to_owned()),
            None => bare.insert(inner.to_owned()),
        };
        rest = &rest[end + 1..];
    }
    (bare, defaulted)
}

/// A dummy value for a variable a doc leaves to the reader's environment, shaped by its
/// name so that it is valid where such a variable goes (a URL, an address, a region).
fn dummy_value(name: &str) -> String {
    let name = name.to_ascii_uppercase();
    if name.contains("URL") {
        "https://dummy.example.com".to_owned()
    } else if name.contains("LISTEN") || name.contains("ADDR") {
        "127.0.0.1:9464".to_owned()
    } else if name.contains("LOCATION") || name.contains("REGION") {
        "docs-region".to_owned()
    } else {
        "dummy-secret-0123".to_owned()
    }
}

/// The markers of a block, read: what kind of check, and the files to make.
struct Markers {
    check: Check,
    files: Vec<String>,
}

enum Check {
    ProbesYaml,
    Invalid,
    Other(String),
}

fn read_markers(markers: &[String]) -> Result<Markers, String> {
    let mut check = Check::ProbesYaml;
    let mut files = Vec::new();
    for m in markers {
        let mut words = m.split_whitespace();
        match (words.next(), words.next()) {
            (Some("invalid"), None) => check = Check::Invalid,
            (Some("other"), Some(kind)) if words.next().is_none() => check = Check::Other(kind.to_owned()),
            (Some("files"), Some(first)) => {
                files.push(first.to_owned());
                files.extend(words.map(str::to_owned));
            }
            _ => {
                return Err(format!(
                    "unknown marker `<!-- docs-check: {m} -->`; the markers are `invalid`, `other KIND` and `files NAME ...`"
                ));
            }
        }
    }
    if !files.is_empty() && matches!(check, Check::Other(_)) {
        return Err("`files` is for probes.yaml blocks, not `other` ones".to_owned());
    }
    Ok(Markers { check, files })
}

/// A directory holding the block as probes.yaml and the files its markers name.
fn stage(block: &str, files: &[String]) -> PathBuf {
    let dir = crate::support::temp_dir("docs-block");
    for name in files {
        let path = dir.join(name.trim_end_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if name.ends_with('/') {
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("photo.jpg"), tiny_jpeg()).unwrap();
        } else if name.ends_with(".jpg") || name.ends_with(".jpeg") || name.ends_with(".png") {
            std::fs::write(&path, tiny_jpeg()).unwrap();
        } else {
            std::fs::write(&path, "What is the capital of France?\n---\nSay hi.\n").unwrap();
        }
    }
    std::fs::write(dir.join("probes.yaml"), block).unwrap();
    dir
}

/// The first bytes of a JPEG: enough for the loader, which checks that an image file is
/// a regular file of a sane size (it is decoded when a probe is built, not by `check`).
fn tiny_jpeg() -> &'static [u8] {
    &[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0x00]
}

/// The block as the loader sees it: a mapping of top-level keys, with a probe added when
/// it has none (after its last line, so the block's line numbers stay as they are).
fn as_probes_yaml(text: &str) -> Result<String, String> {
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let Some(map) = value.as_mapping() else {
        return Err(
            "a probes.yaml block is a mapping of its top-level keys (agent, defaults, receivers, routes, probes); mark other YAML with `<!-- docs-check: other KIND -->`"
                .to_owned(),
        );
    };
    if map.contains_key("probes") {
        Ok(text.to_owned())
    } else {
        Ok(format!("{text}{MINIMAL_PROBE}"))
    }
}

/// The loader's verdict on a staged block, with the env the block needs.
fn load(dir: &Path, text: &str) -> Result<config::Config, config::ConfigErrors> {
    let (bare, _) = env_references(text);
    let env = |name: &str| bare.contains(name).then(|| dummy_value(name));
    config::parse(text, &dir.join("probes.yaml"), &env)
}

/// The doc's text after the block, up to the next heading or ```yaml block: where a
/// mistake's message is shown.
fn shown_after(doc: &str, block: &crate::support::markdown::Block) -> String {
    let after: Vec<&str> = doc.lines().skip(block.line).collect();
    // Past the block's own lines and its closing fence.
    let body = block.text.lines().count() + 1;
    after
        .iter()
        .skip(body)
        .take_while(|l| !l.starts_with('#') && !l.trim_start().starts_with("```yaml"))
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks one block; `Err` says what is wrong (the caller adds where).
fn check_block(doc: &str, block: &crate::support::markdown::Block) -> Result<(), String> {
    let markers = read_markers(&block.markers)?;
    if !block.closed {
        return Err("the block has no closing fence".to_owned());
    }
    match markers.check {
        Check::ProbesYaml | Check::Invalid => {
            let text = as_probes_yaml(&block.text)?;
            let dir = stage(&text, &markers.files);
            let verdict = load(&dir, &text);
            let _ = std::fs::remove_dir_all(&dir);
            match (markers.check, verdict) {
                (Check::ProbesYaml, Ok(_)) => Ok(()),
                (Check::ProbesYaml, Err(errors)) => Err(format!(
                    "inferprobe check refuses it:\n{}",
                    errors
                        .0
                        .iter()
                        .map(|e| format!(
                            "    line {} of the doc (line {} of the block): {}{}",
                            block.line + e.line,
                            e.line,
                            if e.key.is_empty() {
                                String::new()
                            } else {
                                format!("{}: ", e.key)
                            },
                            e.message
                        ))
                        .collect::<Vec<_>>()
                        .join("\n")
                )),
                (_, Ok(_)) => Err("marked `invalid`, but inferprobe check accepts it".to_owned()),
                (_, Err(errors)) => {
                    let shown = shown_after(doc, block);
                    let missing: Vec<String> = errors
                        .0
                        .iter()
                        .filter(|e| !shown.contains(&e.message))
                        .map(|e| format!("    {}", e.message))
                        .collect();
                    if missing.is_empty() {
                        Ok(())
                    } else {
                        Err(format!(
                            "marked `invalid`; the doc must show what inferprobe prints for it, below the block, and does not show:\n{}",
                            missing.join("\n")
                        ))
                    }
                }
            }
        }
        Check::Other(kind) => check_other(&kind, &block.text),
    }
}

/// YAML that is not a probes.yaml, by its kind.
fn check_other(kind: &str, text: &str) -> Result<(), String> {
    let tool = |name: &str, package: &str, args: &[&str]| -> Result<(), String> {
        let Some(bin) = crate::support::require_tool(
            name,
            &format!("checks the docs' {kind} examples; apt-get install {package}"),
        ) else {
            return Ok(());
        };
        let dir = crate::support::temp_dir("docs-other");
        let file = dir.join(format!("{kind}.yml"));
        std::fs::write(&file, text).unwrap();
        let out = Command::new(bin).args(args).arg(&file).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{name} {} refuses it:\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    match kind {
        "alertmanager" => tool("amtool", "prometheus-alertmanager", &["check-config"]),
        "prometheus-rules" => tool("promtool", "prometheus", &["check", "rules"]),
        "prometheus" => tool("promtool", "prometheus", &["check", "config"]),
        "kubernetes" | "yaml" => {
            for document in serde_yaml::Deserializer::from_str(text) {
                <serde_yaml::Value as serde::Deserialize>::deserialize(document)
                    .map_err(|e| format!("not YAML: {e}"))?;
            }
            Ok(())
        }
        other => Err(format!(
            "unknown kind `other {other}`; the kinds are alertmanager, prometheus-rules, prometheus, kubernetes, yaml"
        )),
    }
}

/// A ```json block: one JSON value (a webhook body), or JSON Lines (log lines), as a
/// program reading it would need.
fn check_json(text: &str) -> Result<(), String> {
    if serde_json::from_str::<serde_json::Value>(text).is_ok() {
        return Ok(());
    }
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        serde_json::from_str::<serde_json::Value>(line).map_err(|e| {
            format!(
                "neither one JSON value nor JSON Lines: line {} of the block: {e}",
                i + 1
            )
        })?;
    }
    Ok(())
}

/// Every problem of one document, each as `FILE:LINE: why`, in the order of the lines;
/// and how many yaml blocks were checked.
fn problems(name: &str, doc: &str) -> (Vec<String>, usize) {
    let parsed = crate::support::markdown::parse(doc);
    let mut out: Vec<(usize, String)> = parsed
        .stray_markers
        .iter()
        .map(|(line, m)| {
            (*line, format!("{name}:{line}: `<!-- docs-check: {m} -->` stands before no code block (it must be on the line right above the fence)"))
        })
        .collect();
    let mut checked = 0;
    for block in &parsed.blocks {
        if block.lang == "json" {
            if let Err(why) = check_json(&block.text) {
                out.push((
                    block.line,
                    format!("{name}:{}: the ```json block: {why}", block.line),
                ));
            }
            continue;
        }
        if !matches!(block.lang.as_str(), "yaml" | "yml") {
            if !block.markers.is_empty() {
                out.push((
                    block.line,
                    format!(
                        "{name}:{}: a docs-check marker on a ```{} block; markers are for ```yaml blocks",
                        block.line, block.lang
                    ),
                ));
            }
            continue;
        }
        checked += 1;
        if let Err(why) = check_block(doc, block) {
            out.push((
                block.line,
                format!("{name}:{}: the ```yaml block: {why}", block.line),
            ));
        }
    }
    out.sort_by_key(|(line, _)| *line);
    (out.into_iter().map(|(_, problem)| problem).collect(), checked)
}

#[test]
fn every_yaml_block_in_the_docs_passes_its_check() {
    let mut all = Vec::new();
    let mut checked = 0;
    for (name, text) in documents() {
        let (problems, n) = problems(&name, &text);
        all.extend(problems);
        checked += n;
    }
    assert!(
        all.is_empty(),
        "{} problem(s) in the docs' YAML:\n{}",
        all.len(),
        all.join("\n")
    );
    // The README's own example at least: a test that checks nothing proves nothing.
    assert!(checked >= 1, "no ```yaml block found in the docs");
    eprintln!("checked {checked} yaml blocks");
}

/// The checker itself fails where it must, naming the file and the block's line: a bad
/// probes.yaml, an "invalid" block that is valid, a mistake whose message the doc does
/// not show, an unknown marker, a stray marker.
#[test]
fn the_checker_reports_each_bad_block_with_its_file_and_line() {
    let doc = "# Doc\n\n```json\n{\"a\": 1,}\n```\n\n```yaml\ndefaults:\n  interval: 30\n```\n\n<!-- docs-check: invalid -->\n```yaml\ndefaults:\n  interval: 30s\n```\n\n<!-- docs-check: invalid -->\n```yaml\ndefaults:\n  timeout: 5\n```\n\nSays nothing.\n\n<!-- docs-check: other yml -->\n```yaml\na: 1\n```\n\n<!-- docs-check: invalid -->\n\n```yaml\ndefaults: {}\n```\n\n<!-- docs-check: invalid -->\n```yaml\nprobes:\n  - {name: a, kind: http, url: \"localhost:8000/health\"}\n```\n\n```text\nprobes.yaml:2:29: probe \"a\": probes[0].url: has no scheme: add `http://` or `https://` before the host\n```\n";
    let (problems, checked) = problems("planted.md", doc);
    assert_eq!(checked, 6, "{problems:#?}");
    let expected = [
        "planted.md:3: the ```json block: neither one JSON value nor JSON Lines: line 1 of the block: trailing comma at line 1 column 9",
        "planted.md:7: the ```yaml block: inferprobe check refuses it:\n    line 9 of the doc (line 2 of the block): defaults.interval: `30` is a number; write a duration with its unit, like `30s`",
        "planted.md:13: the ```yaml block: marked `invalid`, but inferprobe check accepts it",
        "planted.md:19: the ```yaml block: marked `invalid`; the doc must show what inferprobe prints for it, below the block, and does not show:\n    `5` is a number; write a duration with its unit, like `5s`",
        "planted.md:27: the ```yaml block: unknown kind `other yml`; the kinds are alertmanager, prometheus-rules, prometheus, kubernetes, yaml",
        "planted.md:31: `<!-- docs-check: invalid -->` stands before no code block (it must be on the line right above the fence)",
    ];
    assert_eq!(problems, expected);
}

#[test]
fn env_references_are_told_apart_by_their_default() {
    let (bare, defaulted) = env_references("url: ${A_URL:-http://x}/v1\nkey: \"Bearer ${KEY}\" $$ ${B}");
    assert_eq!(bare.into_iter().collect::<Vec<_>>(), ["B", "KEY"]);
    assert_eq!(defaulted.into_iter().collect::<Vec<_>>(), ["A_URL"]);
}
