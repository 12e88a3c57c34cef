//! Vision and classic inference: KServe v2 (literal tensors, encoded images, pixels,
//! readiness, faults) and image uploads over plain HTTP (multipart and raw), checked on
//! what the server received and on the outcome.

use crate::support::*;
use inferprobe::outcome::FailureReason;
use inferprobe::simulate::Script;

const DIGIT: &str = "[0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15, 10, 15, 5, 0, 0, 3, 15, 2, 0, 11, 8, 0, 0, 4, 12, 0, 0, 8, 8, 0, 0, 5, 8, 0, 0, 9, 8, 0, 0, 4, 11, 0, 1, 12, 7, 0, 0, 2, 14, 5, 10, 12, 0, 0, 0, 0, 6, 13, 10, 0, 0, 0]";

fn digits(addr: std::net::SocketAddr, query: &str, extra: &str) -> String {
    format!(
        "name: digits\nkind: kserve_v2\nurl: http://{addr}/v2/models/digits/infer?{query}\ntimeout: 2s\ninput: {{name: input-0, datatype: FP32, shape: [1, 64], data: {DIGIT}}}\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn kserve_literal_tensor_with_output_checks() {
    let sim = simulator(Script::default()).await;
    let o = run_probe(&digits(
        sim.addr,
        "ttft=40ms",
        "expect: {outputs: [predict, predict_proba], output_shape: [1, 1]}",
    ))
    .await;
    let obs = &o.observation;
    assert!(obs.success(), "{:?}", obs.result);
    assert!(obs.ttft().is_none(), "no tokens in a classifier answer");
    assert!(obs.total().unwrap().as_millis() >= 40);

    let o = run_probe(&digits(sim.addr, "", "expect: {outputs: [logits]}")).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Assertion);
    assert!(
        f.message.contains("expected an output named \"logits\""),
        "{}",
        f.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kserve_request_is_the_protocols_shape() {
    let body = r#"{"model_name":"digits","outputs":[{"name":"predict","shape":[1,1],"datatype":"INT64","data":[0]}]}"#;
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (addr, seen) = recording_server(Box::leak(reply.into_bytes().into_boxed_slice()));
    let o = run_probe(&digits(addr, "", "outputs: [predict]\nexpect: {top_label: 0}")).await;
    assert!(o.observation.success(), "{:?}", o.observation.result);
    let r = seen.lock().unwrap()[0].clone();
    assert_eq!(
        (r.method.as_str(), r.header("content-type")),
        ("POST", Some("application/json"))
    );
    let v = r.json();
    assert_eq!(v["inputs"][0]["name"], "input-0");
    assert_eq!(v["inputs"][0]["shape"], serde_json::json!([1, 64]));
    assert_eq!(v["inputs"][0]["datatype"], "FP32");
    assert_eq!(v["inputs"][0]["data"].as_array().unwrap().len(), 64);
    assert_eq!(v["outputs"], serde_json::json!([{"name": "predict"}]));
}

#[tokio::test(flavor = "multi_thread")]
async fn kserve_images_as_bytes_and_as_pixels() {
    let (addr, seen) = recording_server(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    let url = format!("http://{addr}/v2/models/resnet/infer");
    run_probe(&format!("name: b\nkind: kserve_v2\nurl: {url}\nimages: {{builtin: [scene-224.png]}}\ninput: {{name: image, datatype: BYTES, shape: [1], image: bytes}}")).await;
    run_probe(&format!("name: p\nkind: kserve_v2\nurl: {url}\nimages: {{builtin: [scene-640x480.jpg]}}\ninput: {{name: pixels, datatype: UINT8, shape: [1, 3, 16, 20], image: pixels, layout: NCHW}}")).await;
    let all = seen.lock().unwrap().clone();
    let bytes = all[0].json();
    let b64 = bytes["inputs"][0]["data"][0].as_str().unwrap();
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let pixels = all[1].json();
    assert_eq!(pixels["inputs"][0]["shape"], serde_json::json!([1, 3, 16, 20]));
    let data = pixels["inputs"][0]["data"].as_array().unwrap();
    assert_eq!(data.len(), 3 * 16 * 20);
    assert!(data.iter().all(|v| v.as_u64().is_some_and(|n| n <= 255)));
}

#[tokio::test(flavor = "multi_thread")]
async fn kserve_readiness_is_its_own_phase_and_gates_the_run() {
    let sim = simulator(Script::default()).await;
    let ok = run_probe(&digits(sim.addr, "", "ready_check: true")).await;
    assert!(ok.observation.success(), "{:?}", ok.observation.result);
    assert!(ok.observation.ready_check.is_some());

    let loading = run_probe(&format!(
        "name: d\nkind: kserve_v2\nurl: http://{}/v2/models/digits/infer?ready=false\nready_check: true\ninput: {{name: x, datatype: FP32, shape: [1], data: [1]}}",
        sim.addr
    ))
    .await;
    // The ready check goes to .../ready with the same query string.
    let f = loading.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Loading);
    assert_eq!(f.message, "model not ready: HTTP 503: Model not ready");
}

#[tokio::test(flavor = "multi_thread")]
async fn kserve_faults() {
    let sim = simulator(Script::default()).await;
    for (query, reason) in [
        ("fault=http-500", FailureReason::Http5xx),
        ("fault=garbage", FailureReason::InvalidResponse),
        ("fault=truncate", FailureReason::Truncated),
        ("fault=empty", FailureReason::EmptyOutput),
        ("fault=stall-headers", FailureReason::TimeoutTotal),
        ("fault=close", FailureReason::Truncated),
    ] {
        let o = run_probe(&digits(sim.addr, query, "")).await;
        let f = o
            .observation
            .failure()
            .unwrap_or_else(|| panic!("{query} succeeded"));
        assert_eq!(f.reason, reason, "{query}: {}", f.message);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn multipart_upload_as_torchserve_reads_it() {
    let (addr, seen) = recording_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    let o = run_probe(&format!(
        "name: up\nkind: http\nurl: http://{addr}/predictions/resnet\nimages: {{builtin: [scene-224.jpg, chart-640x480.png], per_run: 2}}"
    ))
    .await;
    assert!(o.observation.success(), "{:?}", o.observation.result);
    assert_eq!(o.observation.image_bucket, "medium");
    let r = seen.lock().unwrap()[0].clone();
    assert_eq!(r.method, "POST");
    let ct = r.header("content-type").unwrap();
    let boundary = ct
        .strip_prefix("multipart/form-data; boundary=")
        .expect("multipart");
    let body = String::from_utf8_lossy(&r.body);
    assert_eq!(body.matches(&format!("--{boundary}\r\n")).count(), 2);
    assert!(body.contains("Content-Disposition: form-data; name=\"data\"; filename=\"scene-224.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n"));
    assert!(body.contains("filename=\"chart-640x480.png\"\r\nContent-Type: image/png"));
    assert!(body.ends_with(&format!("--{boundary}--\r\n")));
}

#[tokio::test(flavor = "multi_thread")]
async fn raw_upload_and_the_simulated_prediction_endpoint() {
    let (addr, seen) = recording_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    run_probe(&format!(
        "name: raw\nkind: http\nurl: http://{addr}/predictions/resnet\nimages: {{builtin: [scene-224.png], upload: raw}}"
    ))
    .await;
    let r = seen.lock().unwrap()[0].clone();
    assert_eq!(r.header("content-type"), Some("image/png"));
    assert!(r.body.starts_with(b"\x89PNG"));

    let sim = simulator(Script::default()).await;
    let o = run_probe(&format!(
        "name: ts\nkind: http\nurl: http://{}/predictions/resnet\nimages: {{builtin: [scene-224.jpg], field: file}}\nexpect: {{contains: '\"parts\":1'}}",
        sim.addr
    ))
    .await;
    assert!(o.observation.success(), "{:?}", o.observation.result);
}
