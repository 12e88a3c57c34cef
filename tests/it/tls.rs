//! HTTPS probes: the TLS phase is measured, a certificate we do not trust fails the run
//! as `tls`, and a private CA can be trusted per probe with `tls.ca_file`.

use inferprobe::outcome::FailureReason;

use crate::support::tls;

/// An HTTPS server for `localhost` with a fresh self-signed certificate; answers every
/// request with a small JSON body. Returns its port and the certificate's PEM.
fn https_server() -> (u16, String) {
    let cert = tls::self_signed(&["localhost"]);
    let body = "{\"status\":\"ok\"}";
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    (tls::https_server(&cert, reply.into_bytes()), cert.pem)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_certificate_fails_as_tls() {
    let (port, _) = https_server();
    let o = crate::support::run_probe(&format!(
        "name: t\nkind: http\nurl: https://localhost:{port}/health\ntimeout: 3s"
    ))
    .await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::Tls, "{}", f.message);
    assert!(f.message.to_lowercase().contains("certificate"), "{}", f.message);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_ca_is_trusted_with_ca_file_and_the_tls_phase_is_timed() {
    let (port, pem) = https_server();
    let ca = tls::ca_file(&pem);
    let o = crate::support::run_probe(&format!(
        "name: t\nkind: http\nurl: https://localhost:{port}/health\ntimeout: 3s\ntls: {{ca_file: {}}}\nexpect: {{contains: ok}}",
        ca.display()
    ))
    .await;
    let obs = &o.observation;
    assert!(obs.success(), "{:?}", obs.result);
    assert!(obs.tls().is_some() && obs.connect().is_some());
    assert!(obs.ttfb().unwrap() >= obs.tls().unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_for_another_name_fails_as_tls() {
    let (port, pem) = https_server();
    let ca = tls::ca_file(&pem);
    // Trusted CA, but we ask for a name the certificate does not carry.
    let o = crate::support::run_probe(&format!(
        "name: t\nkind: http\nurl: https://127.0.0.1:{port}/health\ntimeout: 3s\ntls: {{ca_file: {}}}",
        ca.display()
    ))
    .await;
    assert_eq!(o.observation.failure().unwrap().reason, FailureReason::Tls);
}

#[tokio::test(flavor = "multi_thread")]
async fn insecure_skip_verify_accepts_an_untrusted_certificate_and_check_warns() {
    let (port, _) = https_server();
    let yaml = format!(
        "name: t\nkind: http\nurl: https://127.0.0.1:{port}/health\ntimeout: 3s\ntls: {{insecure_skip_verify: true}}\nexpect: {{contains: ok}}"
    );
    let o = crate::support::run_probe(&yaml).await;
    let obs = &o.observation;
    assert!(obs.success(), "{:?}", obs.result);
    assert!(obs.tls().is_some());

    // `check` names the probe and the key, with its position, as a warning; exit 0.
    let dir = crate::support::temp_dir("tls-check");
    let file = dir.join("probes.yaml");
    std::fs::write(
        &file,
        format!(
            "probes:\n  - name: lab\n    kind: http\n    url: https://127.0.0.1:{port}/health\n    tls:\n      insecure_skip_verify: true\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["check", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "warning: {}:6:29: probe \"lab\": probes[0].tls.insecure_skip_verify: TLS certificates are not verified",
            file.display()
        )),
        "{text}"
    );
    assert!(text.contains("ok, 1 probes, 1 warning(s)"), "{text}");
}
