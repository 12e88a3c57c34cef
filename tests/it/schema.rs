//! probes.schema.json, the JSON Schema editors check probes.yaml with, against the loader:
//! the committed file is what `inferprobe schema` prints; a real draft 2020-12 validator
//! (boon) accepts every file the loader accepts (the shipped one, the Kubernetes kit's,
//! the test fixtures and every config written in the tests), and refuses unknown kinds
//! and unknown keys at the path where they are, with the same keys as the loader.

use std::path::{Path, PathBuf};
use std::process::Command;

use boon::{Compiler, Draft, ErrorKind, SchemaIndex, Schemas, ValidationError};
use inferprobe::config;
use serde_json::Value;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

const SCHEMA_URL: &str = "file:///probes.schema.json";

/// The schema as the command prints it, compiled by the validator.
struct Validator {
    schemas: Schemas,
    index: SchemaIndex,
    schema: Value,
}

impl Validator {
    fn new() -> Validator {
        let schema: Value = serde_json::from_str(&config::json_schema()).expect("the schema is JSON");
        assert_eq!(
            schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "draft 2020-12"
        );
        let mut compiler = Compiler::new();
        compiler.set_default_draft(Draft::V2020_12);
        compiler
            .add_resource(SCHEMA_URL, schema.clone())
            .expect("the schema loads");
        let mut schemas = Schemas::new();
        let index = compiler
            .compile(SCHEMA_URL, &mut schemas)
            .unwrap_or_else(|e| panic!("the schema compiles against the 2020-12 meta-schema: {e:#}"));
        Validator {
            schemas,
            index,
            schema,
        }
    }

    /// Every leaf error as (instance path, message); empty when the file is valid.
    fn errors(&self, yaml: &str) -> Vec<(String, String)> {
        let instance = to_json(yaml);
        match self.schemas.validate(&instance, self.index) {
            Ok(()) => Vec::new(),
            Err(e) => {
                let mut out = Vec::new();
                leaves(&e, &mut out);
                out
            }
        }
    }

    /// The keys of the object schema `$defs/<name>` (or of the root).
    fn keys(&self, def: &str) -> Vec<String> {
        let schema = if def.is_empty() {
            &self.schema
        } else {
            &self.schema["$defs"][def]
        };
        assert_eq!(
            schema["additionalProperties"], false,
            "{def}: unknown keys refused"
        );
        let mut keys: Vec<String> = schema["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{def} has properties"))
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }
}

/// YAML to JSON as the editor sees it, parsed by the loader's own YAML library.
fn to_json(yaml: &str) -> Value {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("YAML: {e}\n{yaml}"))
}

fn leaves(e: &ValidationError, out: &mut Vec<(String, String)>) {
    if e.causes.is_empty() {
        let message = match &e.kind {
            // The key's own path, as an editor underlines the key.
            ErrorKind::AdditionalProperties { got } => {
                for key in got {
                    out.push((
                        format!("{}/{key}", e.instance_location),
                        format!("unknown key {key}"),
                    ));
                }
                return;
            }
            kind => kind.to_string(),
        };
        out.push((e.instance_location.to_string(), message));
    }
    for cause in &e.causes {
        leaves(cause, out);
    }
}

/// The loader's verdict, with every `${VAR}` set: a URL for names with URL in them,
/// else a word (and unset where the name says it is missing).
fn loader_accepts(yaml: &str, path: &Path) -> Result<(), String> {
    let env = |name: &str| match name {
        n if n.contains("MISSING") => None,
        n if n.contains("URL") => Some("http://127.0.0.1:9".to_owned()),
        _ => Some("x".to_owned()),
    };
    config::parse(yaml, path, &env)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn assert_valid(v: &Validator, path: &Path, yaml: &str) {
    let errors = v.errors(yaml);
    assert!(
        errors.is_empty(),
        "{} is refused by the schema: {errors:#?}",
        path.display()
    );
}

#[test]
fn the_committed_schema_is_what_the_command_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .arg("schema")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed, config::json_schema());
    let committed = std::fs::read_to_string(repo("probes.schema.json")).unwrap_or_default();
    assert!(
        committed == printed,
        "probes.schema.json differs from `inferprobe schema`; regenerate it with\n    \
         cargo run -- schema > probes.schema.json"
    );
}

#[test]
fn the_shipped_probes_yaml_names_the_schema_and_validates() {
    let v = Validator::new();
    let path = repo("probes.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.lines().next(),
        Some("# yaml-language-server: $schema=./probes.schema.json"),
        "the first line points editors at the schema"
    );
    loader_accepts(&text, &path).unwrap();
    assert_valid(&v, &path, &text);
}

/// Every probes.yaml of the Kubernetes kit, and the test fixtures the loader accepts.
#[test]
fn the_kit_and_the_fixtures_validate() {
    let v = Validator::new();
    let mut files = Vec::new();
    let mut dirs = vec![repo("deploy")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "probes.yaml") {
                files.push(path);
            }
        }
    }
    assert!(!files.is_empty(), "the kit has a probes.yaml");
    for entry in std::fs::read_dir(repo("tests/fixtures")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            files.push(path);
        }
    }
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        assert_valid(&v, path, &text);
    }
}

/// The string literals of a Rust file (plain and raw), unescaped enough for YAML:
/// the configs the tests write inline. A `format!` string comes with its placeholders
/// filled: a port after `:`, else a word.
fn string_literals(source: &str) -> Vec<String> {
    let bytes = source.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = source[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'\'' => {
                // A char literal ('"', '\\') or a lifetime: skip what could hide a quote.
                if bytes.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else if bytes.get(i + 1) == Some(&b'\\') && bytes.get(i + 3) == Some(&b'\'') {
                    i += 4;
                } else {
                    i += 1;
                }
            }
            b'r' if matches!(bytes.get(i + 1), Some(b'#' | b'"'))
                && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric() && bytes[i - 1] != b'_') =>
            {
                let hashes = source[i + 1..].bytes().take_while(|&b| b == b'#').count();
                let open = i + 1 + hashes;
                if bytes.get(open) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let Some(end) = source[open + 1..].find(&close) else {
                    break;
                };
                let text = source[open + 1..open + 1 + end].to_owned();
                out.push(fill_if_format(&source[..i], text));
                i = open + 1 + end + close.len();
            }
            b'"' => {
                let mut text = String::new();
                let mut chars = source[i + 1..].char_indices();
                let mut end = bytes.len();
                while let Some((at, c)) = chars.next() {
                    match c {
                        '"' => {
                            end = i + 1 + at + 1;
                            break;
                        }
                        '\\' => match chars.next().map(|(_, c)| c) {
                            Some('n') => text.push('\n'),
                            Some('t') => text.push('\t'),
                            Some('\n') => {
                                // A line continuation: the next line's indent goes too.
                                let rest = chars.as_str();
                                let skip = rest.len() - rest.trim_start().len();
                                for _ in 0..rest[..skip].chars().count() {
                                    chars.next();
                                }
                            }
                            Some(other) => text.push(other),
                            None => {}
                        },
                        c => text.push(c),
                    }
                }
                out.push(fill_if_format(&source[..i], text));
                i = end;
            }
            _ => i += 1,
        }
    }
    out
}

fn fill_if_format(before: &str, text: String) -> String {
    if !before.trim_end().ends_with("format!(") {
        return text;
    }
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
        } else if let Some(end) = tail.find('}').filter(|_| tail.starts_with('{')) {
            out.push_str(if out.ends_with(':') { "9" } else { "x" });
            rest = &tail[end + 1..];
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The ```yaml blocks of a Markdown file.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in markdown.lines() {
        match (&mut block, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => block = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => out.extend(block.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

/// The schema never refuses what the loader accepts: every config the tests write inline
/// (string literals with a `probes:` key) and every ```yaml example of the docs that the
/// loader accepts validates.
#[test]
fn every_config_the_loader_accepts_in_the_tests_and_docs_validates() {
    let v = Validator::new();
    let mut accepted = 0;
    let mut refused_by_loader = 0;
    let mut sources = vec![repo("README.md")];
    for dir in ["tests", "docs"] {
        for entry in std::fs::read_dir(repo(dir)).into_iter().flatten() {
            sources.push(entry.unwrap().path());
        }
    }
    for path in sources {
        let candidates = match path.extension().and_then(|e| e.to_str()) {
            Some("rs") => string_literals(&std::fs::read_to_string(&path).unwrap()),
            // As the docs' own test reads them: a block without probes gets one.
            Some("md") => yaml_blocks(&std::fs::read_to_string(&path).unwrap())
                .into_iter()
                .map(|b| match b.lines().any(|l| l.starts_with("probes:")) {
                    true => b,
                    false => format!("{b}{PROBE}"),
                })
                .collect(),
            _ => continue,
        };
        for yaml in candidates {
            if !yaml.lines().any(|l| l.starts_with("probes:")) {
                continue;
            }
            // Files the configs name are looked up beside the test sources.
            if let Err(e) = loader_accepts(&yaml, &repo("tests/inline.yaml")) {
                if std::env::var_os("SCHEMA_DEBUG").is_some() {
                    eprintln!(
                        "REFUSED {}: {}\n{yaml}\n",
                        path.display(),
                        e.lines().next().unwrap_or("")
                    );
                }
                refused_by_loader += 1;
                continue;
            }
            accepted += 1;
            let errors = v.errors(&yaml);
            assert!(
                errors.is_empty(),
                "the loader accepts this config from {}, the schema refuses it: {errors:#?}\n{yaml}",
                path.display()
            );
        }
    }
    if std::env::var_os("SCHEMA_DEBUG").is_some() {
        eprintln!("{accepted} accepted, {refused_by_loader} refused by the loader");
    }
    // The corpus is real: most inline configs are valid ones.
    assert!(
        accepted >= 20,
        "{accepted} inline configs accepted ({refused_by_loader} refused)"
    );
}

const PROBE: &str = "probes:\n  - {name: h, kind: http, url: \"http://127.0.0.1:8000/health\"}\n";

/// Each object the schema closes, with a file that puts an unknown key in it: the loader
/// and the validator refuse it at the same key, and agree on the keys there are.
#[test]
fn unknown_keys_are_refused_where_they_are_with_the_loaders_keys() {
    let v = Validator::new();
    let llm = "  - name: c\n    kind: openai_chat\n    url: http://127.0.0.1:8000/v1/chat/completions\n    model: m\n";
    let kserve = "  - name: k\n    kind: kserve_v2\n    url: http://127.0.0.1:8000/v2/models/m/infer\n";
    let cases: Vec<(&str, String, &str)> = vec![
        ("", format!("zzz_unknown: 1\n{PROBE}"), "/zzz_unknown"),
        ("Agent", format!("agent: {{zzz_unknown: 1}}\n{PROBE}"), "/agent/zzz_unknown"),
        (
            "History",
            format!("agent: {{history: {{zzz_unknown: 1}}}}\n{PROBE}"),
            "/agent/history/zzz_unknown",
        ),
        (
            "RemoteWrite",
            format!("agent: {{remote_write: {{url: \"http://127.0.0.1:9090/api/v1/write\", zzz_unknown: 1}}}}\n{PROBE}"),
            "/agent/remote_write/zzz_unknown",
        ),
        (
            "BasicAuth",
            format!("agent: {{remote_write: {{url: \"http://127.0.0.1:9090/api/v1/write\", basic_auth: {{username: u, password: p, zzz_unknown: 1}}}}}}\n{PROBE}"),
            "/agent/remote_write/basic_auth/zzz_unknown",
        ),
        ("Defaults", format!("defaults: {{zzz_unknown: 1}}\n{PROBE}"), "/defaults/zzz_unknown"),
        (
            "Alert",
            format!("defaults: {{alert: {{zzz_unknown: 1}}}}\n{PROBE}"),
            "/defaults/alert/zzz_unknown",
        ),
        (
            "Slo",
            format!("defaults: {{slo: {{zzz_unknown: 1}}}}\n{PROBE}"),
            "/defaults/slo/zzz_unknown",
        ),
        (
            "Receiver",
            format!("receivers:\n  - {{name: r, kind: webhook, url: \"http://127.0.0.1:9/hook\", zzz_unknown: 1}}\n{PROBE}"),
            "/receivers/0/zzz_unknown",
        ),
        (
            "Probe",
            "probes:\n  - name: h\n    kind: http\n    url: http://127.0.0.1:8000/health\n    zzz_unknown: 1\n".to_owned(),
            "/probes/0/zzz_unknown",
        ),
        (
            "Expect",
            format!("probes:\n{llm}    expect: {{zzz_unknown: 1}}\n"),
            "/probes/0/expect/zzz_unknown",
        ),
        (
            "Tls",
            format!("probes:\n{llm}    tls: {{zzz_unknown: 1}}\n"),
            "/probes/0/tls/zzz_unknown",
        ),
        (
            "PromptsMapping",
            format!("probes:\n{llm}    prompts: {{inline: [hi], zzz_unknown: 1}}\n"),
            "/probes/0/prompts/zzz_unknown",
        ),
        (
            "ImagesMapping",
            format!("probes:\n{llm}    images: {{builtin: [scene-224.jpg], zzz_unknown: 1}}\n"),
            "/probes/0/images/zzz_unknown",
        ),
        (
            "Input",
            format!("probes:\n{kserve}    input: {{name: x, datatype: FP32, shape: [1], data: [0], zzz_unknown: 1}}\n"),
            "/probes/0/input/zzz_unknown",
        ),
        (
            "Alert",
            format!("probes:\n{llm}    alert: {{zzz_unknown: 1}}\n"),
            "/probes/0/alert/zzz_unknown",
        ),
    ];
    for (def, yaml, at) in &cases {
        // The loader: one problem, this key, and the keys it knows there.
        let message = loader_accepts(yaml, Path::new("t.yaml")).expect_err(yaml);
        let expected = message
            .lines()
            .find_map(|l| l.split("unknown key `zzz_unknown`; expected one of ").nth(1))
            .unwrap_or_else(|| panic!("{def}: the loader says {message}"));
        let mut loader_keys: Vec<String> = expected.split(", ").map(str::to_owned).collect();
        loader_keys.sort();
        assert_eq!(
            v.keys(def),
            loader_keys,
            "the schema's `{def}` keys are the loader's"
        );
        // The validator: exactly this key, where it is.
        let errors = v.errors(yaml);
        assert!(
            errors
                .iter()
                .any(|(path, m)| path == at && m == "unknown key zzz_unknown"),
            "{def}: no error at {at}: {errors:#?}\n{yaml}"
        );
        // Besides it, only the alternatives it ruled out on the way (`agent: null`).
        assert!(
            errors.iter().all(|(path, _)| is_at_or_above(path, at)),
            "{def}: errors elsewhere: {errors:#?}"
        );
    }
}

/// Whether `path` is `at` or one of the objects that hold it.
fn is_at_or_above(path: &str, at: &str) -> bool {
    path == at || at.starts_with(&format!("{path}/"))
}

#[test]
fn an_unknown_kind_is_refused_at_kind_with_the_list() {
    let v = Validator::new();
    let yaml = "probes:\n  - name: c\n    kind: vllm\n    url: http://127.0.0.1:8000/v1/chat/completions\n    model: m\n";
    assert!(loader_accepts(yaml, Path::new("t.yaml")).is_err());
    let errors = v.errors(yaml);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let (path, message) = &errors[0];
    assert_eq!(path, "/probes/0/kind");
    assert!(message.contains("openai_chat"), "{message}");
    // Every kind the loader knows is in the schema's list, and no other.
    let listed: Vec<&str> = v.schema["$defs"]["Kind"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let kinds: Vec<&str> = config::Kind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(listed, kinds);
    // Each with the text an editor shows for it (the variant's doc comment).
    let described = v.schema["$defs"]["Kind"]["enumDescriptions"].as_array().unwrap();
    assert_eq!(described.len(), kinds.len());
    assert!(
        described.iter().all(|d| d.as_str().is_some_and(|d| d.len() > 10)),
        "{described:?}"
    );
}

#[test]
fn a_duration_written_as_a_number_is_refused_at_its_key() {
    let v = Validator::new();
    for (yaml, at) in [
        (
            format!("defaults:\n  interval: 30\n{PROBE}"),
            "/defaults/interval",
        ),
        (
            "probes:\n  - name: h\n    kind: http\n    url: http://127.0.0.1:8000/health\n    timeout: 5\n"
                .to_owned(),
            "/probes/0/timeout",
        ),
    ] {
        assert!(loader_accepts(&yaml, Path::new("t.yaml")).is_err(), "{yaml}");
        let errors = v.errors(&yaml);
        assert!(!errors.is_empty(), "{yaml}");
        assert!(
            errors.iter().all(|(path, _)| is_at_or_above(path, at)),
            "{errors:#?}"
        );
        assert!(
            errors
                .iter()
                .any(|(path, m)| path == at && m.contains("string, but got number")),
            "{errors:#?}"
        );
    }
    // A duration the loader cannot read is refused too; one it can read is not.
    let bad = format!("defaults:\n  interval: 30 seconds please\n{PROBE}");
    assert_eq!(v.errors(&bad)[0].0, "/defaults/interval");
    for good in [
        "30s",
        "1m30s",
        "1.5h",
        "500ms",
        "2 hours 5 min",
        "${INTERVAL}",
        "${INTERVAL:-30s}",
    ] {
        let yaml = format!("defaults:\n  interval: \"{good}\"\n{PROBE}");
        assert_eq!(v.errors(&yaml), [], "{good}");
    }
}

#[test]
fn plain_lists_of_prompts_and_images_are_valid_and_mappings_too() {
    let v = Validator::new();
    let probe = "probes:\n  - name: c\n    kind: openai_chat\n    url: http://127.0.0.1:8000/v1/chat/completions\n    model: m\n";
    for extra in [
        "    prompts: [\"hi\"]\n",
        "    prompts: {inline: [\"hi\"]}\n",
        "    prompts: {builtin: [short, long]}\n",
        "    images: [scene-224.jpg]\n",
        "    images: {builtin: [scene-224.jpg], detail: low}\n",
        // A key written empty is no key.
        "    prompts: {builtin: [short], inline: }\n",
        "    images: {builtin: [scene-224.jpg], files: }\n",
    ] {
        let yaml = format!("{probe}{extra}");
        loader_accepts(&yaml, &repo("tests/inline.yaml")).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(v.errors(&yaml), [], "{yaml}");
    }
    // Closed sets are the loader's.
    for (extra, at) in [
        ("    prompts: {builtin: [tiny]}\n", "/probes/0/prompts"),
        (
            "    images: {builtin: [scene-224.jpg], detail: medium}\n",
            "/probes/0/images",
        ),
        ("    alert: {severity: urgent}\n", "/probes/0/alert/severity"),
        ("    expect: {status: [200, 1000]}\n", "/probes/0/expect/status"),
        // Exactly one source of prompts; at least one of images.
        (
            "    prompts: {builtin: [short], inline: [hi]}\n",
            "/probes/0/prompts",
        ),
        ("    prompts: {inline: }\n", "/probes/0/prompts"),
        ("    images: {detail: low}\n", "/probes/0/images"),
    ] {
        let yaml = format!("{probe}{extra}");
        assert!(loader_accepts(&yaml, Path::new("t.yaml")).is_err(), "{yaml}");
        let errors = v.errors(&yaml);
        assert!(!errors.is_empty(), "{yaml}");
        assert!(
            errors
                .iter()
                .all(|(path, _)| path.starts_with(at) || is_at_or_above(path, at)),
            "{yaml}{errors:#?}"
        );
    }
}

/// `${VAR}` may stand in any string the loader substitutes it in: the schema, which
/// cannot know the value, lets it pass where a pattern or a closed set would refuse it.
#[test]
fn env_references_pass_where_strings_have_a_format() {
    let v = Validator::new();
    let yaml = "agent:\n  location: \"${REGION}\"\n  external_url: \"${EXTERNAL_URL}\"\nprobes:\n  - name: k\n    kind: kserve_v2\n    url: \"${BASE_URL}/v2/models/m/infer\"\n    input: {name: x, datatype: \"${DATATYPE}\", shape: [1], data: [0]}\n    timeout: \"${TIMEOUT:-5s}\"\n";
    assert_eq!(v.errors(yaml), []);
}

/// The rules by kind the schema carries agree with the loader for every kind: a missing
/// `model`, `prompts` and `images` are refused by both or by neither.
#[test]
fn the_rules_by_kind_are_the_loaders() {
    let v = Validator::new();
    let mut refused = std::collections::BTreeMap::<&str, usize>::new();
    for kind in config::Kind::ALL {
        let base = format!(
            "probes:\n  - name: p\n    kind: {}\n    url: http://127.0.0.1:8000/v2/models/m/infer\n",
            kind.as_str()
        );
        for (key, extra) in [
            ("model", ""),
            ("prompts", "    model: m\n    prompts: [hi]\n"),
            ("images", "    model: m\n    images: [scene-224.jpg]\n"),
        ] {
            let yaml = format!("{base}{extra}");
            let loader = loader_accepts(&yaml, Path::new("t.yaml"))
                .err()
                .is_some_and(|e| e.contains(&format!("probes[0].{key}:")));
            let errors = v.errors(&yaml);
            let schema = errors.iter().any(|(path, m)| {
                path == &format!("/probes/0/{key}")
                    || (path == "/probes/0" && m.contains(&format!("'{key}'")))
            });
            assert_eq!(
                schema, loader,
                "{kind:?}: `{key}` refused by the loader: {loader}, by the schema: {schema}: {errors:#?}"
            );
            *refused.entry(key).or_default() += usize::from(loader);
        }
    }
    // Each rule refuses some kinds and not others (7 LLM kinds and kserve_v2_grpc of 11
    // need a model; 7 take images).
    let expected = [("images", 4), ("model", 8), ("prompts", 4)];
    assert_eq!(refused.into_iter().collect::<Vec<_>>(), expected);
}

/// Editors show a key's description on hover and in completion: every key has one.
#[test]
fn every_key_has_a_description() {
    let v = Validator::new();
    let mut objects = vec![("(root)".to_owned(), &v.schema)];
    for (name, def) in v.schema["$defs"].as_object().unwrap() {
        objects.push((name.clone(), def));
    }
    let mut keys = 0;
    for (name, object) in objects {
        for (key, property) in object["properties"].as_object().into_iter().flatten() {
            keys += 1;
            let description = property["description"].as_str().unwrap_or_default();
            assert!(
                description.len() > 10 && !description.contains('\n'),
                "{name}.{key}: {description:?}"
            );
        }
    }
    assert!(keys > 90, "{keys} keys");
}
