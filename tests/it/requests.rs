//! Golden checks of what each kind sends, on the bytes a fake server received: method,
//! path, headers and the exact JSON shape of each protocol, images included.

use crate::support::*;
use base64::Engine as _;

const REPLY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Runs a probe once against a recording server and returns what it received.
async fn sent(kind: &str, path: &str, extra: &str) -> Received {
    let (addr, seen) = recording_server(REPLY);
    run_probe(&format!(
        "name: g\nkind: {kind}\nurl: http://{addr}{path}\nmodel: tiny-vlm\nmax_tokens: 12\nprompts: {{inline: [\"What colour is the sign?\"]}}\ntimeout: 3s\n{extra}"
    ))
    .await;
    let all = seen.lock().unwrap().clone();
    assert_eq!(all.len(), 1, "{kind}: {} requests", all.len());
    all.into_iter().next().unwrap()
}

const ONE_IMAGE: &str = "images: {builtin: [scene-224.jpg]}";

/// Whether `b64` decodes to the built-in scene-224.jpg (the tests then swap it for a
/// placeholder and compare the rest of the body whole).
fn is_scene_224(b64: &str) -> bool {
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
    let img = image::load_from_memory(&bytes).unwrap();
    (img.width(), img.height()) == (224, 224) && bytes.starts_with(&[0xff, 0xd8])
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_chat_text() {
    let r = sent(
        "openai_chat",
        "/v1/chat/completions",
        "headers: {Authorization: \"Bearer k-123\"}",
    )
    .await;
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    assert_eq!(r.header("authorization"), Some("Bearer k-123"));
    assert!(r.header("user-agent").unwrap().starts_with("inferprobe/"));
    assert!(r.header("host").unwrap().starts_with("127.0.0.1:"));
    assert_eq!(
        r.json(),
        serde_json::json!({
            "model": "tiny-vlm",
            "messages": [{"role": "user", "content": "What colour is the sign?"}],
            "max_tokens": 12,
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_chat_with_an_image_and_detail() {
    let r = sent(
        "openai_chat",
        "/v1/chat/completions",
        "images: {builtin: [scene-224.jpg], detail: low}",
    )
    .await;
    let mut v = r.json();
    let url = v["messages"][0]["content"][1]["image_url"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let b64 = url
        .strip_prefix("data:image/jpeg;base64,")
        .expect("a JPEG data URL");
    assert!(is_scene_224(b64));
    v["messages"][0]["content"][1]["image_url"]["url"] = "IMAGE".into();
    assert_eq!(
        v["messages"],
        serde_json::json!([{"role": "user", "content": [
            {"type": "text", "text": "What colour is the sign?"},
            {"type": "image_url", "image_url": {"url": "IMAGE", "detail": "low"}}
        ]}])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_completions() {
    let r = sent("openai_completions", "/v1/completions", "").await;
    assert_eq!(
        r.json(),
        serde_json::json!({"model": "tiny-vlm", "prompt": "What colour is the sign?", "max_tokens": 12,
            "stream": true, "stream_options": {"include_usage": true}})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_responses_with_an_image() {
    let r = sent("openai_responses", "/v1/responses", ONE_IMAGE).await;
    let mut v = r.json();
    let url = v["input"][0]["content"][1]["image_url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(is_scene_224(url.strip_prefix("data:image/jpeg;base64,").unwrap()));
    v["input"][0]["content"][1]["image_url"] = "IMAGE".into();
    assert_eq!(
        v,
        serde_json::json!({"model": "tiny-vlm", "max_output_tokens": 12, "stream": true, "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "What colour is the sign?"},
                {"type": "input_image", "image_url": "IMAGE"}
            ]}
        ]})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ollama_chat_and_generate_with_raw_base64_images() {
    let r = sent("ollama", "/api/chat", ONE_IMAGE).await;
    assert_eq!(r.path, "/api/chat");
    let mut v = r.json();
    assert!(is_scene_224(v["messages"][0]["images"][0].as_str().unwrap()));
    v["messages"][0]["images"][0] = "IMAGE".into();
    assert_eq!(
        v,
        serde_json::json!({"model": "tiny-vlm", "stream": true, "options": {"num_predict": 12},
            "messages": [{"role": "user", "content": "What colour is the sign?", "images": ["IMAGE"]}]})
    );

    let r = sent("ollama", "/api/generate", "").await;
    assert_eq!(
        r.json(),
        serde_json::json!({"model": "tiny-vlm", "prompt": "What colour is the sign?", "stream": true,
            "options": {"num_predict": 12}})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tgi() {
    let r = sent("tgi", "/generate_stream", "").await;
    assert_eq!(
        r.json(),
        serde_json::json!({"inputs": "What colour is the sign?", "parameters": {"max_new_tokens": 12, "details": true}})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn llamacpp() {
    let r = sent("llamacpp", "/completion", "").await;
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    assert_eq!(
        r.json(),
        serde_json::json!({"prompt": "What colour is the sign?", "n_predict": 12, "stream": true})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_with_an_image_block_and_its_headers() {
    let r = sent(
        "anthropic",
        "/v1/messages",
        &format!("{ONE_IMAGE}\nheaders: {{x-api-key: sk-ant-1}}"),
    )
    .await;
    assert_eq!(r.header("x-api-key"), Some("sk-ant-1"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    let mut v = r.json();
    assert!(is_scene_224(
        v["messages"][0]["content"][0]["source"]["data"].as_str().unwrap()
    ));
    v["messages"][0]["content"][0]["source"]["data"] = "IMAGE".into();
    assert_eq!(
        v,
        serde_json::json!({"model": "tiny-vlm", "max_tokens": 12, "stream": true, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "IMAGE"}},
            {"type": "text", "text": "What colour is the sign?"}
        ]}]})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_version_header_can_be_overridden() {
    let r = sent(
        "anthropic",
        "/v1/messages",
        "headers: {anthropic-version: \"2024-01-01\"}",
    )
    .await;
    assert_eq!(r.header("anthropic-version"), Some("2024-01-01"));
}

#[tokio::test(flavor = "multi_thread")]
async fn images_rotate_and_set_the_image_bucket() {
    let sim = simulator(inferprobe::simulate::Script::default()).await;
    let probe = build_probe(&format!(
        "name: v\nkind: openai_chat\nurl: http://{}/v1/chat/completions?ttft=5ms&tokens=2\nmodel: m\nimages: {{builtin: [scene-224.jpg, chart-640x480.png]}}",
        sim.addr
    ));
    let buckets: Vec<_> = [probe.run_once().await, probe.run_once().await]
        .iter()
        .map(|o| {
            assert!(o.observation.success(), "{:?}", o.observation.result);
            o.observation.image_bucket
        })
        .collect();
    assert_eq!(buckets, ["small", "medium"]);
}
