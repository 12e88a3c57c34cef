//! probes.yaml loading: the repository's example stays valid, and every broken file in
//! tests/config_errors reports exactly the problems in its `.expected` twin, each with
//! line, column, probe and key.

use std::path::{Path, PathBuf};
use std::process::Command;

use inferprobe::config::{self, Kind, Schedule};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn the_repository_probes_yaml_is_valid() {
    let path = repo("probes.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let config = config::parse(&text, &path, &no_env).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<_> = config.probes.iter().map(|p| &*p.name).collect();
    assert_eq!(
        names,
        [
            "vllm-chat",
            "llamacpp-completions",
            "vllm-health",
            "vllm-vision",
            "vllm-responses",
            "ollama-llava",
            "tgi",
            "claude",
            "mlserver-digits",
            "triton-resnet",
            "torchserve-upload",
        ]
    );
    // One example of every kind.
    let mut kinds: Vec<_> = config.probes.iter().map(|p| p.kind.as_str()).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds.len(), 8, "{kinds:?}");
    assert_eq!(config.probes[0].kind, Kind::OpenAiChat);
    // ${VLLM_URL:-default} falls back to the default when unset.
    assert_eq!(
        config.probes[0].url.to_string(),
        "http://127.0.0.1:8000/v1/chat/completions"
    );
    assert!(matches!(config.probes[1].schedule, Schedule::Cron { .. }));
    assert_eq!(config.agent.location.as_deref(), Some("local"));
}

#[test]
fn env_vars_fill_urls_and_headers() {
    let path = repo("probes.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let env = |name: &str| (name == "VLLM_URL").then(|| "https://vllm.internal:8443".to_owned());
    let config = config::parse(&text, &path, &env).unwrap();
    assert_eq!(
        config.probes[0].url.to_string(),
        "https://vllm.internal:8443/v1/chat/completions"
    );
}

#[test]
fn every_broken_file_reports_exactly_its_expected_problems() {
    let dir = repo("tests/config_errors");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let expected = std::fs::read_to_string(path.with_extension("expected")).unwrap();
        let errors = match config::parse(&text, &path, &no_env) {
            Ok(_) => panic!("{} parsed without errors", path.display()),
            Err(e) => e.0,
        };
        let prefix = format!("{}:", path.display());
        let got: Vec<String> = errors
            .iter()
            .map(|e| e.to_string().strip_prefix(&prefix).unwrap().to_owned())
            .collect();
        let want: Vec<&str> = expected.lines().collect();
        assert_eq!(got, want, "{}", path.display());
        // Every problem names a real position in the file.
        for e in &errors {
            assert!(e.line >= 1 && e.column >= 1, "{e}");
        }
        checked += 1;
    }
    assert!(checked >= 7, "only {checked} corpus files");
}

#[test]
fn check_exits_0_on_the_example_and_64_naming_line_and_column_on_an_unknown_key() {
    let bin = env!("CARGO_BIN_EXE_inferprobe");
    let ok = Command::new(bin)
        .args(["check", "-c"])
        .arg(repo("probes.yaml"))
        .env_remove("VLLM_URL")
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );

    let bad = repo("tests/config_errors/unknown_key.yaml");
    let out = Command::new(bin)
        .args(["check", "-c"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("timout"))
        .expect("the unknown key is named");
    assert!(
        line.starts_with(&format!(
            "{}:7:5: probe \"chat2\": probes[1].timout: unknown key",
            bad.display()
        )),
        "{line}"
    );
}

#[test]
fn run_refuses_a_bad_config_with_exit_64() {
    let bin = env!("CARGO_BIN_EXE_inferprobe");
    let out = Command::new(bin)
        .args(["run", "--listen", "127.0.0.1:0", "-c"])
        .arg(repo("tests/config_errors/semantics.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("semantics.yaml:7:22"));
}

#[test]
fn secrets_from_the_environment_never_print() {
    let text = r#"
probes:
  - name: hosted
    kind: openai_chat
    url: https://api.example.com/v1/chat/completions?api-key=${KEY}
    model: m
    headers:
      Authorization: "Bearer ${KEY}"
"#;
    let env = |_: &str| Some("sk-very-secret-marker-123".to_owned());
    let config = config::parse(text, Path::new("x.yaml"), &env).unwrap();
    // Header values are redacted in Debug output; the endpoint as shown drops the query
    // string, where keys often travel.
    assert!(!format!("{:?}", config.probes[0].headers).contains("sk-very"));
    assert_eq!(
        config::display_url(&config.probes[0].url),
        "https://api.example.com/v1/chat/completions"
    );
}

#[test]
fn a_url_from_the_environment_goes_through_the_same_strict_parser() {
    let path = repo("probes.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let env = |name: &str| (name == "VLLM_URL").then(|| "http://vllm.internal:99999".to_owned());
    let errors = config::parse(&text, &path, &env).unwrap_err().0;
    let line = text
        .lines()
        .position(|l| l.contains("${VLLM_URL"))
        .expect("probes.yaml reads VLLM_URL")
        + 1;
    // Every probe that reads it, and nothing else.
    assert_eq!(
        errors.len(),
        text.matches("url: ${VLLM_URL").count(),
        "{errors:?}"
    );
    assert_eq!((errors[0].line, errors[0].key.as_str()), (line, "probes[0].url"));
    for e in &errors {
        assert!(e.key.ends_with(".url"), "{e}");
        // The message names the problem, not the value (which may hold a secret).
        assert_eq!(e.message, "has port 99999, out of range: ports are 1 to 65535");
    }
}

/// The README's example `defaults: slo:` (issue 14, item 1) pasted into the shipped
/// probes.yaml: `ttft_p95` applies to the LLM kinds and is skipped for the others.
#[test]
fn the_readmes_defaults_slo_in_probes_yaml_applies_where_it_fits() {
    let path = repo("probes.yaml");
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "\ndefaults:\n",
        "\ndefaults:\n  slo: {availability: 99.5, ttft_p95: 1s, total_p95: 5s}\n",
        1,
    );
    let config = config::parse(&text, &path, &no_env).unwrap_or_else(|e| panic!("{e}"));
    for p in &config.probes {
        // A probe's own slo keys win; the others come from defaults.
        assert!(p.slo.total_p95.is_some(), "{}", p.name);
        assert_eq!(p.slo.ttft_p95.is_some(), p.kind.is_llm(), "{}", p.name);
    }
}

/// `external_url: "${EXTERNAL_URL}"` (issue 14, item 3): substituted, then checked as a
/// URL; a link is no secret, so it is not redacted from what is shown.
#[test]
fn env_vars_fill_the_agents_external_url_and_location() {
    let text = "agent:\n  location: \"${REGION}\"\n  external_url: \"${EXTERNAL_URL}/\"\nprobes:\n  - {name: h, kind: http, url: \"http://127.0.0.1:8000/health\"}\n";
    let env = |name: &str| match name {
        "REGION" => Some("eu-west".to_owned()),
        "EXTERNAL_URL" => Some("http://probe-eu.example.com:9464".to_owned()),
        _ => None,
    };
    let config = config::parse(text, Path::new("t.yaml"), &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.agent.location.as_deref(), Some("eu-west"));
    assert_eq!(
        config.agent.external_url.as_deref(),
        Some("http://probe-eu.example.com:9464")
    );
    let env = |name: &str| (name == "EXTERNAL_URL").then(|| "probe-eu.example.com".to_owned());
    let errors = config::parse(
        "agent:\n  external_url: \"${EXTERNAL_URL}\"\nprobes:\n  - {name: h, kind: http, url: \"http://h/x\"}\n",
        Path::new("t.yaml"),
        &env,
    )
    .unwrap_err();
    assert_eq!(
        errors.to_string().trim(),
        "t.yaml:2:17: agent.external_url: `probe-eu.example.com` has no scheme: add `http://` or `https://` before the host; give a URL like http://probe-eu.example.com:9464"
    );
}

/// Plain lists (issue 14, item 6): `prompts: [...]` is `inline`, and `images: [...]` holds
/// built-in names and files, told apart by whether an item names a built-in image.
#[test]
fn plain_lists_of_prompts_and_images_are_accepted() {
    let dir = std::env::temp_dir().join(format!("inferprobe-plain-lists-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cat.jpg"), b"\xff\xd8\xff\xe0 not decoded by check").unwrap();
    let path = dir.join("probes.yaml");
    let text = "probes:\n  - name: v\n    kind: openai_chat\n    url: http://127.0.0.1:8000/v1/chat/completions\n    model: m\n    prompts: [\"Say hi\", \"Name a colour\"]\n    images: [cat.jpg, scene-224.jpg]\n  - name: w\n    kind: openai_chat\n    url: http://127.0.0.1:8000/v1/chat/completions\n    model: m\n    prompts: {inline: [\"Say hi\"]}\n    images: {builtin: [scene-224.jpg], files: [cat.jpg]}\n";
    let parsed = config::parse(text, &path, &no_env);
    std::fs::remove_dir_all(&dir).unwrap();
    let config = parsed.unwrap_or_else(|e| panic!("{e}"));
    let debug = format!("{:?}", config.probes[0].spec);
    assert!(
        debug.contains("Say hi") && debug.contains("Name a colour"),
        "{debug}"
    );
    assert!(
        debug.contains("cat.jpg") && debug.contains("scene-224.jpg"),
        "{debug}"
    );
    // In the order written; the mapping form (probe w) keeps working.
    assert!(debug.find("cat.jpg") < debug.find("scene-224.jpg"), "{debug}");
    let mapping = format!("{:?}", config.probes[1].spec);
    assert!(
        mapping.contains("cat.jpg") && mapping.contains("scene-224.jpg"),
        "{mapping}"
    );
}

/// `${VAR}` in every string value (issue 14): each key gets the value, `$$` stays a
/// literal `$`, and only values in the places credentials go become secrets; a model,
/// a label, a link or where an endpoint is (remote_write's host) is shown as it is.
#[test]
fn env_vars_fill_every_string_value_and_only_credentials_are_secrets() {
    use inferprobe::config::KindSpec;
    use inferprobe::redact::Redactor;
    let text = r#"
agent:
  location: "${REGION}"
  remote_write:
    url: "https://${RW_HOST}/api/v1/write"
    basic_auth: {username: "${RW_USER}", password: "${RW_PASSWORD}"}
    job: "inferprobe-${REGION}"
receivers:
  - {name: pager, kind: pagerduty, routing_key: "${ROUTING_KEY}"}
  - {name: hook, kind: webhook, url: "https://hooks.example.com/${HOOK_TOKEN}", headers: {X-Token: "${HOOK_HEADER}"}}
defaults:
  labels: {team: "${TEAM}"}
probes:
  - name: "${PROBE_NAME}"
    kind: openai_chat
    url: "https://api.example.com/v1/chat/completions?api-key=${API_KEY}"
    model: "${MODEL}"
    headers: {Authorization: "Bearer ${TOKEN}"}
    prompts: ["Say hi to ${USER_NAME}", "What costs $$5 or $5?"]
    alert: {runbook_url: "${RUNBOOK_BASE}/chat.md"}
    tls: {server_name: "${TLS_NAME}"}
  - name: post
    kind: http
    url: http://127.0.0.1:8000/hook
    body: '{"key": "${BODY_KEY}", "price": "$$9"}'
"#;
    let env = |name: &str| {
        Some(
            match name {
                "REGION" => "eu-west",
                "RW_HOST" => "mimir-eu.example.net",
                "RW_USER" => "tenant-user-secret",
                "RW_PASSWORD" => "rw-password-secret",
                "ROUTING_KEY" => "routing-key-secret",
                "HOOK_TOKEN" => "hook-token-secret",
                "HOOK_HEADER" => "hook-header-secret",
                "TEAM" => "search-and-ranking",
                "PROBE_NAME" => "chat-eu",
                "API_KEY" => "query-api-key-secret",
                "MODEL" => "llama-3.1-70b-instruct",
                "TOKEN" => "bearer-token-secret",
                "USER_NAME" => "Ada Lovelace",
                "RUNBOOK_BASE" => "https://runbooks.example.com/llm",
                "TLS_NAME" => "api.corp.example",
                "BODY_KEY" => "body-key-secret",
                _ => return None,
            }
            .to_owned(),
        )
    };
    let config = config::parse(text, Path::new("t.yaml"), &env).unwrap_or_else(|e| panic!("{e}"));
    let chat = &config.probes[0];
    assert_eq!(&*chat.name, "chat-eu");
    assert_eq!(chat.model.as_deref(), Some("llama-3.1-70b-instruct"));
    assert_eq!(
        chat.labels,
        [("team".to_owned(), "search-and-ranking".to_owned())]
    );
    assert_eq!(
        chat.alert.runbook_url.as_deref(),
        Some("https://runbooks.example.com/llm/chat.md")
    );
    assert_eq!(chat.tls.server_name.as_deref(), Some("api.corp.example"));
    let KindSpec::OpenAi(spec) = &chat.spec else {
        panic!("{:?}", chat.spec)
    };
    let prompts = format!("{:?}", spec.prompts);
    assert!(prompts.contains("Say hi to Ada Lovelace"), "{prompts}");
    // `$$` is a `$`, once: never read again as the start of a reference.
    assert!(prompts.contains("What costs $5 or $5?"), "{prompts}");
    let KindSpec::Http(post) = &config.probes[1].spec else {
        panic!()
    };
    assert_eq!(
        post.body.as_deref(),
        Some(r#"{"key": "body-key-secret", "price": "$9"}"#)
    );
    let rw = config.agent.remote_write.as_ref().unwrap();
    assert_eq!(rw.job, "inferprobe-eu-west");
    assert_eq!(rw.host, "mimir-eu.example.net");
    assert_eq!(config.agent.location.as_deref(), Some("eu-west"));

    let redactor = Redactor::for_config(&config);
    for secret in [
        "tenant-user-secret",
        "rw-password-secret",
        "routing-key-secret",
        "hook-token-secret",
        "hook-header-secret",
        "query-api-key-secret",
        "bearer-token-secret",
        "body-key-secret",
    ] {
        assert_eq!(
            redactor.clean(&format!("echo {secret} end")),
            "echo <redacted> end",
            "{secret}"
        );
    }
    for shown in [
        "mimir-eu.example.net",
        "llama-3.1-70b-instruct",
        "search-and-ranking",
        "https://runbooks.example.com/llm",
        "api.corp.example",
        "Ada Lovelace",
    ] {
        let text = format!("echo {shown} end");
        assert_eq!(redactor.clean(&text), text, "{shown}");
    }
}

/// A method a letter or two from a standard one is sent as written, with a warning
/// that names the likely one.
#[test]
fn a_misspelt_http_method_is_a_warning_with_the_likely_one() {
    let text = "probes:\n  - {name: h, kind: http, url: \"http://127.0.0.1:8000/x\", method: PSOT}\n  - {name: p, kind: http, url: \"http://127.0.0.1:8000/x\", method: PURGE}\n";
    let config = config::parse(text, Path::new("t.yaml"), &no_env).unwrap_or_else(|e| panic!("{e}"));
    let warnings: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "t.yaml:2:67: probe \"h\": probes[0].method: `PSOT` is not a standard HTTP method (it is sent as written); did you mean `POST`?"
        ]
    );
}

/// Substituted once: `$${X}` is the text `${X}`, even in a header (which the checks read
/// after substitution); and a number key written with a set `${VAR}` says why it fails.
#[test]
fn substitution_happens_once_and_number_keys_say_they_take_no_var() {
    let env = |name: &str| (name == "X" || name == "MAX_TOKENS").then(|| "64".to_owned());
    let text = "probes:\n  - name: h\n    kind: http\n    url: \"http://127.0.0.1:8000/x\"\n    headers: {X-Template: \"$${X} and ${X}\"}\n";
    let config = config::parse(text, Path::new("t.yaml"), &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.probes[0].headers[0].1.expose(), "${X} and 64");
    let text = "probes:\n  - name: c\n    kind: openai_chat\n    url: \"http://127.0.0.1:8000/v1/chat/completions\"\n    model: m\n    max_tokens: ${MAX_TOKENS}\n";
    let errors = config::parse(text, Path::new("t.yaml"), &env).unwrap_err();
    assert_eq!(
        errors.to_string(),
        "t.yaml:6:17: probe \"c\": probes[0].max_tokens: only string values take `${VAR}`; `max_tokens` takes a number, written in the file"
    );
}

#[test]
fn history_retention_takes_its_own_range_not_the_schedules_7_days() {
    let with = |retention: &str| {
        format!(
            "agent:\n  history:\n    retention: {retention}\nprobes:\n  - name: h\n    kind: http\n    url: http://127.0.0.1:1/health\n"
        )
    };
    let config = config::parse(&with("90d"), Path::new("t.yaml"), &no_env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.agent.history.retention.as_secs(), 90 * 86_400);
    for (bad, message) in [
        ("401d", "between 1h and 400d"),
        ("30m", "between 1h and 400d"),
        ("0s", "longer than zero"),
    ] {
        let errors = config::parse(&with(bad), Path::new("t.yaml"), &no_env)
            .unwrap_err()
            .0;
        assert!(
            errors.iter().any(|e| e.to_string().contains("agent.history.retention") && e.to_string().contains(message)),
            "{bad}: {errors:?}"
        );
    }
}

/// `cost` and `budget` inherit from `defaults` key by key, apply to LLM kinds only, and a
/// cron probe takes no inherited budget (its interval is what a budget stretches).
#[test]
fn cost_and_budget_inherit_where_they_fit() {
    let text = "defaults:\n  cost: {input_per_million: 0.15, output_per_million: 0.6}\n  budget: {tokens_per_day: 2000000}\nprobes:\n  - name: chat\n    kind: openai_chat\n    url: http://127.0.0.1:8000/v1/chat/completions\n    model: m\n  - name: eur\n    kind: anthropic\n    url: http://127.0.0.1:8000/v1/messages\n    model: m\n    cost: {output_per_million: 1.25, currency: EUR}\n    budget: {tokens_per_day: 5000}\n  - name: nightly\n    kind: ollama\n    url: http://127.0.0.1:11434/api/chat\n    model: m\n    schedule: \"0 0 3 * * *\"\n  - name: health\n    kind: http\n    url: http://127.0.0.1:8000/health\n";
    let config = config::parse(text, &repo("probes.yaml"), &no_env).unwrap_or_else(|e| panic!("{e}"));
    let by = |name: &str| config.probes.iter().find(|p| &*p.name == name).unwrap();
    let chat = by("chat").cost.clone().unwrap();
    assert_eq!(
        (
            chat.input_per_million,
            chat.output_per_million,
            chat.currency.as_str()
        ),
        (0.15, 0.6, "USD")
    );
    assert_eq!(by("chat").budget.unwrap().tokens_per_day, 2_000_000);
    let eur = by("eur").cost.clone().unwrap();
    assert_eq!(
        (
            eur.input_per_million,
            eur.output_per_million,
            eur.currency.as_str()
        ),
        (0.15, 1.25, "EUR")
    );
    assert_eq!(by("eur").budget.unwrap().tokens_per_day, 5000);
    assert!(by("nightly").cost.is_some() && by("nightly").budget.is_none());
    assert!(by("health").cost.is_none() && by("health").budget.is_none());
}
