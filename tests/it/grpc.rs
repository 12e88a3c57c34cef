//! The gRPC kinds end to end: `kserve_v2_grpc` and `grpc_health` against the simulator's
//! gRPC side (plaintext HTTP/2 and behind TLS with ALPN h2), every gRPC fault class with
//! its reason, the server's message redacted and bounded; and, where MLServer runs
//! (`scripts/real-servers/mlserver.sh`), the same probes against the real server.

use std::time::Duration;

use crate::support::{closed_port, run_probe, simulator, tls};
use inferprobe::outcome::{FailureReason, Outcome};
use inferprobe::simulate::Script;

/// sklearn's `load_digits().data[0]`, a "0" (as in scripts/real-servers/probes-mlserver.yaml).
const DIGIT: &str = "[0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15, 10, 15, 5, 0, 0, 3, 15, 2, 0, 11, 8, 0, 0, 4, 12, 0, 0, 8, 8, 0, 0, 5, 8, 0, 0, 9, 8, 0, 0, 4, 11, 0, 1, 12, 7, 0, 0, 2, 14, 5, 10, 12, 0, 0, 0, 0, 6, 13, 10, 0, 0, 0]";

/// A `kserve_v2_grpc` probe of the simulator's classifier: the values 1, 2, 3, 1 sum to
/// 7, the label it answers.
fn infer(url: &str, sim: &str, extra: &str) -> String {
    format!(
        "name: g\nkind: kserve_v2_grpc\nurl: {url}\nmodel: digits\ntimeout: 2s\nheaders: {{x-sim: \"{sim}\"}}\ninput: {{name: input-0, datatype: FP32, shape: [1, 4], data: [1, 2, 3, 1]}}\n{extra}"
    )
}

fn health(url: &str, sim: &str, extra: &str) -> String {
    format!("name: h\nkind: grpc_health\nurl: {url}\ntimeout: 2s\nheaders: {{x-sim: \"{sim}\"}}\n{extra}")
}

fn assert_ok(o: &Outcome) {
    assert!(o.observation.success(), "{:?}", o.observation.result);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inference_over_grpc_is_checked_and_timed_like_rest() {
    let sim = simulator(Script::default()).await;
    let url = format!("http://{}", sim.addr);
    let o = run_probe(&infer(
        &url,
        "ttft=40ms",
        "ready_check: true\nexpect: {outputs: [predict, predict_proba], output_shape: [1, 1], top_label: 7}",
    ))
    .await;
    assert_ok(&o);
    let obs = &o.observation;
    assert!(
        obs.dns().is_some() && obs.connect().is_some(),
        "phases of a fresh connection"
    );
    assert!(obs.ready_check.is_some(), "ModelReady is its own phase");
    assert!(
        obs.ttfb().unwrap() >= Duration::from_millis(40),
        "{:?}",
        obs.ttfb()
    );
    assert!(obs.total().unwrap() >= obs.ttfb().unwrap());
    assert_eq!(obs.http_status, Some(200));

    // The same checks as kserve_v2, from the same code.
    let o = run_probe(&infer(&url, "ttft=1ms", "expect: {top_label: 3}")).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Assertion);
    assert_eq!(
        f.message,
        "expected top label \"3\", got \"7\" (output \"predict\")"
    );
    let o = run_probe(&infer(&url, "ttft=1ms", "expect: {outputs: [logits]}")).await;
    assert_eq!(o.observation.failure().unwrap().reason, FailureReason::Assertion);

    // FP16 has no typed field: it goes as raw_input_contents, and the simulator answers
    // raw too (1.0 is 0x3C00: bytes 0x00 + 0x3C sum to 60, label 0).
    let o = run_probe(&format!(
        "name: f\nkind: kserve_v2_grpc\nurl: {url}\nmodel: m\nmodel_version: \"2\"\nheaders: {{x-sim: ttft=1ms}}\ninput: {{name: x, datatype: FP16, shape: [1, 1], data: [1.0]}}\nexpect: {{top_label: 0, output_shape: [1, 1]}}"
    ))
    .await;
    assert_ok(&o);
}

#[tokio::test(flavor = "multi_thread")]
async fn images_travel_as_bytes_and_as_pixels() {
    let sim = simulator(Script::default()).await;
    let url = format!("http://{}", sim.addr);
    for input in [
        "{name: image, datatype: BYTES, shape: [1], image: bytes}",
        "{name: pixels, datatype: UINT8, shape: [1, 3, 16, 20], image: pixels, layout: NCHW}",
        "{name: pixels, datatype: FP32, shape: [1, 8, 8, 3], image: pixels}",
    ] {
        let o = run_probe(&format!(
            "name: i\nkind: kserve_v2_grpc\nurl: {url}\nmodel: resnet\nheaders: {{x-sim: ttft=1ms}}\nimages: {{builtin: [scene-224.png]}}\ninput: {input}\nexpect: {{output_shape: [1, 1]}}"
        ))
        .await;
        assert_ok(&o);
        assert_ne!(o.observation.image_bucket, "none");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_not_ready_fails_before_the_inference() {
    let sim = simulator(Script::default()).await;
    let url = format!("http://{}", sim.addr);
    let o = run_probe(&infer(
        &url,
        "grpc_fault=not-serving&ttft=1ms",
        "ready_check: true",
    ))
    .await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Loading);
    assert_eq!(f.message, "model not ready: ModelReady answered ready: false");
    assert!(o.observation.ready_check.is_some());
    let o = run_probe(&infer(
        &url,
        "grpc_fault=unavailable&ttft=1ms",
        "ready_check: true",
    ))
    .await;
    let f = o.observation.failure().unwrap();
    assert!(
        f.message.starts_with("model not ready: gRPC UNAVAILABLE"),
        "{}",
        f.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_is_up_only_when_serving() {
    let sim = simulator(Script::default()).await;
    let url = format!("http://{}", sim.addr);
    assert_ok(&run_probe(&health(&url, "ttft=1ms", "")).await);
    assert_ok(&run_probe(&health(&url, "ttft=1ms", "service: inference")).await);

    let o = run_probe(&health(&url, "grpc_fault=not-serving&ttft=1ms", "")).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Http5xx);
    assert_eq!(f.message, "the server is NOT_SERVING, not SERVING");

    let o = run_probe(&health(&url, "ttft=1ms", "service: billing")).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Http4xx);
    assert_eq!(f.message, "gRPC NOT_FOUND: unknown service \"billing\"");
}

/// Every gRPC fault class gets its reason, for both kinds.
#[tokio::test(flavor = "multi_thread")]
async fn every_grpc_fault_gets_its_reason() {
    let sim = simulator(Script::default()).await;
    let url = format!("http://{}", sim.addr);
    let cases = [
        (
            "unavailable",
            FailureReason::Http5xx,
            "gRPC UNAVAILABLE: simulated",
        ),
        (
            "resource-exhausted",
            FailureReason::RateLimited,
            "gRPC RESOURCE_EXHAUSTED",
        ),
        (
            "deadline-exceeded",
            FailureReason::TimeoutTotal,
            "gRPC DEADLINE_EXCEEDED",
        ),
        ("unimplemented", FailureReason::Http4xx, "gRPC UNIMPLEMENTED"),
        ("not-found", FailureReason::Http4xx, "gRPC NOT_FOUND"),
        (
            "invalid-argument",
            FailureReason::Http4xx,
            "gRPC INVALID_ARGUMENT",
        ),
        ("internal", FailureReason::Http5xx, "gRPC INTERNAL"),
        ("unknown", FailureReason::Http5xx, "gRPC UNKNOWN"),
        ("data-loss", FailureReason::Http5xx, "gRPC DATA_LOSS"),
        (
            "no-status",
            FailureReason::InvalidResponse,
            "without a grpc-status",
        ),
        (
            "cut-frame",
            FailureReason::Truncated,
            "the response message ended after",
        ),
        (
            "malformed-frame",
            FailureReason::InvalidResponse,
            "malformed gRPC frame",
        ),
        ("reset", FailureReason::Truncated, ""),
        (
            "wrong-content-type",
            FailureReason::InvalidResponse,
            "not application/grpc",
        ),
    ];
    for (fault, reason, words) in cases {
        let sim_keys = format!("grpc_fault={fault}&ttft=1ms");
        for probe in [infer(&url, &sim_keys, ""), health(&url, &sim_keys, "")] {
            let o = run_probe(&probe).await;
            let f = o
                .observation
                .failure()
                .unwrap_or_else(|| panic!("{fault} passed"));
            assert_eq!(f.reason, reason, "{fault}: {}", f.message);
            assert!(f.message.contains(words), "{fault}: {}", f.message);
        }
    }

    // A server that never answers: the run's deadline, blamed on the wait for headers.
    let o = run_probe(&format!(
        "name: h\nkind: grpc_health\nurl: {url}\ntimeout: 300ms\nheaders: {{x-sim: grpc_fault=stall}}"
    ))
    .await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::TimeoutTotal);
    assert!(
        f.message.contains("waiting for response headers"),
        "{}",
        f.message
    );

    // No server: no connection, whatever gRPC would have said.
    let down = format!("http://127.0.0.1:{}", closed_port());
    let o = run_probe(&health(&down, "", "")).await;
    assert_eq!(o.observation.failure().unwrap().reason, FailureReason::Connect);

    // An HTTP/1.1-only server (here the simulator's REST side is not reachable by h2,
    // so use a raw HTTP/1.1 reply): not a gRPC answer.
    let rest = crate::support::raw_server(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        Duration::from_millis(100),
    );
    let o = run_probe(&health(&format!("http://{rest}"), "", "")).await;
    let f = o.observation.failure().unwrap();
    assert!(
        matches!(
            f.reason,
            FailureReason::InvalidResponse | FailureReason::Truncated
        ),
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_servers_message_is_redacted_and_bounded() {
    let sim = simulator(Script::default()).await;
    let url = format!("http://{}", sim.addr);
    let secret = "sk-live-0123456789abcdef";
    let o = run_probe(&format!(
        "name: h\nkind: grpc_health\nurl: {url}\nheaders: {{x-sim: \"grpc_fault=internal&ttft=1ms&long_message=true\", x-sim-echo: \"{secret}\"}}"
    ))
    .await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Http5xx);
    assert!(
        f.message.starts_with("gRPC INTERNAL: simulated INTERNAL"),
        "{}",
        f.message
    );
    assert!(!f.message.contains(secret), "{}", f.message);
    assert!(
        f.message.chars().count() <= 220,
        "{} chars",
        f.message.chars().count()
    );
}

/// A TLS terminator with ALPN h2 in front of the simulator, as a gRPC ingress is.
fn tls_front(backend: std::net::SocketAddr) -> (u16, String) {
    let cert = tls::self_signed(&["localhost"]);
    let port = tls::tls_server(&cert, b"h2", move |mut tls| async move {
        let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else {
            return;
        };
        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
    });
    (port, cert.pem)
}

#[tokio::test(flavor = "multi_thread")]
async fn over_tls_with_alpn_h2_the_tls_phase_is_timed() {
    let sim = simulator(Script::default()).await;
    let (port, pem) = tls_front(sim.addr);
    let ca = tls::ca_file(&pem);
    let url = format!("https://localhost:{port}");
    let tls = format!("tls: {{ca_file: {}}}", ca.display());
    let o = run_probe(&health(&url, "ttft=1ms", &tls)).await;
    assert_ok(&o);
    assert!(o.observation.tls().is_some(), "the TLS phase is measured");
    let o = run_probe(&infer(
        &url,
        "ttft=1ms",
        &format!("{tls}\nexpect: {{top_label: 7}}"),
    ))
    .await;
    assert_ok(&o);

    // Without the CA: the certificate is refused, as for HTTP.
    let o = run_probe(&health(&url, "ttft=1ms", "")).await;
    assert_eq!(o.observation.failure().unwrap().reason, FailureReason::Tls);
}

/// The real MLServer of scripts/real-servers/mlserver.sh (gRPC on 18091, model `digits`
/// version `v1`; `MLSERVER_GRPC=host:port` moves it). .ci/run starts it, so under
/// `CI=true` (or `INFERPROBE_REQUIRE_MLSERVER=1`) a missing server is a failure; on a
/// developer's machine without it the test says why and passes.
#[tokio::test(flavor = "multi_thread")]
async fn a_real_mlserver_over_grpc() {
    let addr = std::env::var("MLSERVER_GRPC").unwrap_or_else(|_| "127.0.0.1:18091".into());
    let reachable = std::net::TcpStream::connect_timeout(
        &addr.parse().expect("MLSERVER_GRPC is host:port"),
        Duration::from_secs(1),
    )
    .is_ok();
    if !reachable {
        let why = format!(
            "no MLServer gRPC port at {addr}: start one with scripts/real-servers/mlserver.sh (a venv from PyPI, ~1 min)"
        );
        let required = std::env::var("CI").is_ok_and(|v| v == "true")
            || std::env::var("INFERPROBE_REQUIRE_MLSERVER").is_ok();
        assert!(!required, "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let probe = |top_label: u8| {
        format!(
            "name: mlserver-digits-grpc\nkind: kserve_v2_grpc\nurl: http://{addr}\nmodel: digits\nmodel_version: v1\nready_check: true\ntimeout: 10s\ninput: {{name: input-0, datatype: FP32, shape: [1, 64], data: {DIGIT}}}\nexpect: {{outputs: [predict], output_shape: [1, 1], top_label: {top_label}}}"
        )
    };
    let o = run_probe(&probe(0)).await;
    assert_ok(&o);
    assert!(o.observation.ready_check.is_some());
    // The label is read from the answer, not assumed.
    let o = run_probe(&probe(3)).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Assertion);
    assert_eq!(
        f.message,
        "expected top label \"3\", got \"0\" (output \"predict\")"
    );
    // A model it does not have: MLServer 1.7.1 fails ModelReady with UNKNOWN (a
    // ModelNotFound error), not NOT_FOUND.
    let o = run_probe(&probe(0).replace("model: digits", "model: nope")).await;
    let f = o.observation.failure().unwrap();
    assert!(f.message.starts_with("model not ready: gRPC "), "{}", f.message);
    // MLServer 1.7.1 serves no grpc.health.v1: the call is UNIMPLEMENTED, said so.
    let o = run_probe(&format!("name: h\nkind: grpc_health\nurl: http://{addr}")).await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Http4xx);
    assert!(f.message.starts_with("gRPC UNIMPLEMENTED"), "{}", f.message);
}

/// `reuse_connections` keeps the HTTP/2 connection between runs, as for HTTP: the second
/// run has no connect phase.
#[tokio::test(flavor = "multi_thread")]
async fn a_kept_connection_is_reused_and_said_so() {
    let sim = simulator(Script::default()).await;
    let probe = crate::support::build_probe(&health(
        &format!("http://{}", sim.addr),
        "ttft=1ms",
        "reuse_connections: true",
    ));
    let first = probe.run_once().await;
    assert_ok(&first);
    assert!(!first.observation.connection_reused);
    let second = probe.run_once().await;
    assert_ok(&second);
    assert!(second.observation.connection_reused);
    assert!(second.observation.connect().is_none());
}
