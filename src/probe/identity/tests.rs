use super::*;

/// The body of a capture in tests/transcripts/ (after the response's headers).
fn golden(name: &str) -> Value {
    let path = format!("{}/tests/transcripts/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let start = text.rfind("<<<\n").unwrap() + 4;
    serde_json::from_str(text[start..].trim()).unwrap()
}

fn served(model: &str, fingerprint: Option<&str>) -> Served {
    Served {
        model: Some(model.to_owned()),
        fingerprint: fingerprint.map(str::to_owned),
        identity: None,
        server_start: None,
    }
}

#[test]
fn llama_servers_model_list_gives_size_and_parameters() {
    let fields = parse(
        Source::Models,
        &golden("llama-server-tiny-models.txt"),
        "tiny-llama",
    );
    assert_eq!(
        fields,
        [
            ("owned_by", "llamacpp".to_owned()),
            ("n_params", "146624".to_owned()),
            ("size", "586496".to_owned()),
            ("ftype", "all F32".to_owned()),
        ]
    );
    // The fingerprint is the one the same server's chunks carry.
    let facts = BTreeMap::from([(Source::Models, fields)]);
    let id = identity_of(&served("tiny-llama", Some("b1-0c1e570")), &facts).unwrap();
    assert_eq!(id.summary, "tiny-llama (llama.cpp b1-0c1e570, 586 kB)");
    assert_eq!(
        (id.served_model.as_str(), id.fingerprint.as_str()),
        ("tiny-llama", "b1-0c1e570")
    );
    assert_eq!(id.digest.len(), 16);
    // Another size is another identity; the same facts the same one.
    let mut other = facts.clone();
    other.get_mut(&Source::Models).unwrap()[2].1 = "1172992".into();
    let moved = identity_of(&served("tiny-llama", Some("b1-0c1e570")), &other).unwrap();
    assert_ne!(moved.digest, id.digest);
    assert_eq!(
        identity_of(&served("tiny-llama", Some("b1-0c1e570")), &facts).unwrap(),
        id
    );
}

#[test]
fn the_list_entry_is_the_served_models_or_the_only_one() {
    let two = serde_json::json!({"data": [
        {"id": "a", "owned_by": "vllm", "root": "/models/a", "max_model_len": 4096, "created": 1},
        {"id": "b", "owned_by": "vllm", "root": "meta-llama/Llama-3-8B", "created": 2},
    ]});
    assert_eq!(
        parse(Source::Models, &two, "b"),
        [
            ("owned_by", "vllm".to_owned()),
            ("root", "meta-llama/Llama-3-8B".to_owned())
        ]
    );
    assert!(parse(Source::Models, &two, "c").is_empty());
}

#[test]
fn kserve_model_metadata_gives_its_versions() {
    let fields = parse(Source::V2Model, &golden("v2-model-metadata.txt"), "digits");
    assert_eq!(
        fields,
        [
            ("name", "digits".to_owned()),
            ("platform", "sklearn".to_owned()),
            ("versions", "v1".to_owned()),
        ]
    );
    // No model in the response: the metadata names it.
    let facts = BTreeMap::from([(Source::V2Model, fields)]);
    let id = identity_of(&Served::default(), &facts).unwrap();
    assert_eq!(id.summary, "digits (versions v1)");
    assert_eq!(id.served_model, "digits");
}

/// llama.cpp's `/props` (a real capture): path, alias, build and a hash of the chat
/// template; the per-request settings and slots left out.
#[test]
fn llama_props_give_path_build_and_a_template_hash() {
    let fields = parse(
        Source::Props,
        &golden("llama-server-tiny-props.txt"),
        "tiny-llama",
    );
    assert_eq!(
        fields.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        ["model_path", "model_alias", "build", "n_ctx", "template"]
    );
    assert_eq!(fields[1].1, "tiny-llama");
    assert_eq!(fields[2].1, "b1-0c1e570");
    let template = &fields[4].1;
    assert_eq!(template.len(), 8);
    let facts = BTreeMap::from([(Source::Props, fields.clone())]);
    let id = identity_of(&served("tiny-llama", Some("b1-0c1e570")), &facts).unwrap();
    assert_eq!(
        id.summary,
        format!("tiny-llama (llama.cpp b1-0c1e570, template {template})")
    );
}

#[test]
fn tgi_info_and_ollama_ps() {
    let info = serde_json::json!({"model_id": "bigscience/bloom-560m", "model_sha": "4f42c91d806a19ae1a46af6c3fb5f4990d884cd6", "version": "3.2.1", "sha": "abc", "max_input_tokens": 1024});
    let facts = BTreeMap::from([(Source::TgiInfo, parse(Source::TgiInfo, &info, ""))]);
    let id = identity_of(&Served::default(), &facts).unwrap();
    assert_eq!(id.summary, "bigscience/bloom-560m (TGI 3.2.1, sha 4f42c91d)");
    let ps = serde_json::json!({"models": [{"name": "llama3:8b", "model": "llama3:8b", "digest": "sha256:365c0bd3c000a25d28ddbf732fe1c6add414de7275464c4e4d1c3b5fcb5d8ad1", "expires_at": "2026-01-01T00:00:00Z", "details": {"quantization_level": "Q4_0", "parameter_size": "8.0B"}}]});
    let fields = parse(Source::OllamaPs, &ps, "llama3:8b");
    assert_eq!(fields.len(), 3, "{fields:?}");
    let facts = BTreeMap::from([(Source::OllamaPs, fields)]);
    let id = identity_of(&served("llama3:8b", None), &facts).unwrap();
    assert_eq!(id.summary, "llama3:8b (digest sha256:365c0bd3c000, Q4_0)");
}

#[test]
fn server_words_are_cleaned_and_capped() {
    let hostile = format!("\u{1b}[2J{}", "m".repeat(200));
    let c = clean(&hostile);
    assert!(c.chars().count() <= MAX_VALUE + 1, "{c}");
    assert!(!c.contains('\u{1b}'), "{c:?}");
    assert_eq!(from_response(&Served::default()), None);
}

#[test]
fn each_kind_asks_its_servers_own_routes() {
    let paths = |kind, path, query| {
        let (p, first) = plan(kind, path, query).unwrap();
        (first.iter().map(|s| p.of(*s)).collect::<Vec<_>>(), p)
    };
    let (first, p) = paths(Kind::OpenAiChat, "/v1/chat/completions", "");
    assert_eq!(first, ["/v1/models"]);
    assert_eq!(
        (p.of(Source::Props), p.of(Source::VllmVersion)),
        ("/props".into(), "/version".into())
    );
    assert_eq!(
        paths(Kind::LlamaCpp, "/completion", "").0,
        ["/props", "/v1/models"]
    );
    assert_eq!(paths(Kind::Tgi, "/generate_stream", "?k=1").0, ["/info?k=1"]);
    assert_eq!(paths(Kind::Ollama, "/api/generate", "").0, ["/api/ps"]);
    assert_eq!(
        paths(Kind::KserveV2, "/v2/models/digits/versions/v1/infer", "").0,
        ["/v2/models/digits/versions/v1"]
    );
    assert!(plan(Kind::OpenAiChat, "/gateway/chat", "").is_none());
    assert!(plan(Kind::Anthropic, "/v1/messages", "").is_none());
}

#[test]
fn sizes_read_as_people_read_them() {
    assert_eq!(bytes(586_496), "586 kB");
    assert_eq!(bytes(4_100_000_000), "4.1 GB");
    assert_eq!(bytes(12), "12 B");
}
