//! `kind: email` against a real SMTP server (aiosmtpd, support/smtp.rs): implicit TLS and
//! STARTTLS on rustls with a private CA, AUTH, several recipients, plain text and HTML;
//! a wrong password is REJECTED with a hint, and a server without STARTTLS is refused
//! rather than sent the password in clear.

use std::time::Duration;

use crate::support::smtp::{Mode, SmtpSink};
use crate::support::tls::{Authority, ca_file};
use crate::support::*;

const USER: &str = "probe@example.com";
const PASSWORD: &str = "smtp-pass-Zq81";

fn receiver(name: &str, url: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    kind: email\n    url: {url}\n    from: \"inferprobe <probes@example.com>\"\n    to: [oncall@example.com, \"Team ML <ml@example.com>\"]\n{extra}"
    )
}

#[test]
fn a_page_reaches_a_real_smtp_server_over_implicit_tls_and_starttls_with_auth() {
    let ca = Authority::new("inferprobe test CA");
    let cert = ca.server(&["127.0.0.1"]);
    let Some(implicit) = SmtpSink::start(Mode::Implicit, Some(&cert), Some((USER, PASSWORD))) else {
        return;
    };
    let Some(starttls) = SmtpSink::start(Mode::StartTls, Some(&cert), Some((USER, PASSWORD))) else {
        return;
    };
    let ca_path = ca_file(&ca.pem());
    let auth = format!(
        "    username: {USER}\n    password: {PASSWORD}\n    ca_file: {}\n",
        ca_path.display()
    );
    let receivers = receiver("mail-tls", &format!("smtps://127.0.0.1:{}", implicit.port), &auth)
        + &receiver(
            "mail-starttls",
            &format!("smtp://127.0.0.1:{}", starttls.port),
            &auth,
        );
    let (code, out) = test_alert(&receivers);
    assert_eq!(code, Some(0), "{out}");
    for name in ["mail-tls", "mail-starttls"] {
        assert!(
            out.lines().any(|l| l.starts_with(name) && l.contains("accepted")),
            "{name}: {out}"
        );
    }
    assert!(!out.contains(PASSWORD), "{out}");
    for sink in [&implicit, &starttls] {
        let got = sink.messages();
        // One transaction per recipient, each message naming both in its To: header.
        let envelopes: Vec<&serde_json::Value> = got.iter().map(|m| &m.envelope["to"]).collect();
        assert_eq!(
            envelopes,
            [
                &serde_json::json!(["oncall@example.com"]),
                &serde_json::json!(["ml@example.com"])
            ]
        );
        let m = &got[0];
        let e = &m.envelope;
        assert_eq!(e["tls"], true, "{e}");
        assert_eq!(e["user"], USER, "logged in: {e}");
        assert_eq!(e["from"], "probes@example.com");
        let to = e["header_to"].as_str().unwrap();
        assert!(
            to.contains("oncall@example.com") && to.contains("Team ML <ml@example.com>"),
            "{to}"
        );
        assert_eq!(e["content_type"], "multipart/alternative");
        let subject = e["subject"].as_str().unwrap();
        assert!(subject.starts_with("[inferprobe] 🚨 "), "{subject}");
        assert!(subject.contains("test alert from eu-test"), "{subject}");
        let text = e["text"].as_str().unwrap();
        assert!(text.contains("critical · eu-test"), "{text}");
        let html = e["html"].as_str().unwrap();
        assert!(
            html.contains("<h2") && html.contains("test alert from eu-test"),
            "{html}"
        );
        assert!(!m.raw.contains(PASSWORD));
    }
}

#[test]
fn a_wrong_password_is_rejected_with_a_hint_and_no_starttls_is_no_login() {
    let ca = Authority::new("inferprobe test CA");
    let cert = ca.server(&["127.0.0.1"]);
    let Some(implicit) = SmtpSink::start(Mode::Implicit, Some(&cert), Some((USER, PASSWORD))) else {
        return;
    };
    let Some(plain) = SmtpSink::start(Mode::Plain, None, None) else {
        return;
    };
    let ca_path = ca_file(&ca.pem());
    let receivers = receiver(
        "wrong-pass",
        &format!("smtps://127.0.0.1:{}", implicit.port),
        &format!(
            "    username: {USER}\n    password: Wr0ng-Qx-8812\n    ca_file: {}\n",
            ca_path.display()
        ),
    ) + &receiver(
        "no-starttls",
        &format!("smtp://127.0.0.1:{}", plain.port),
        &format!("    username: {USER}\n    password: {PASSWORD}\n"),
    );
    let (code, out) = test_alert(&receivers);
    assert_eq!(code, Some(1), "{out}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {out}"))
            .to_owned()
    };
    let wrong = line("wrong-pass");
    assert!(
        wrong.contains("REJECTED") && wrong.contains("535") && wrong.contains("`username` and `password`"),
        "{wrong}"
    );
    // The server offers no STARTTLS: nothing is sent, the password least of all.
    let clear = line("no-starttls");
    assert!(clear.contains("FAILED") || clear.contains("REJECTED"), "{clear}");
    assert!(clear.to_lowercase().contains("tls"), "{clear}");
    assert!(plain.messages().is_empty());
    for secret in [PASSWORD, "Wr0ng-Qx-8812"] {
        assert!(!out.contains(secret), "{secret} in {out}");
    }
}

#[test]
fn a_relay_without_tls_takes_pages_when_the_config_says_so() {
    let Some(plain) = SmtpSink::start(Mode::Plain, None, None) else {
        return;
    };
    let (code, out) = test_alert(&receiver(
        "relay",
        &format!("smtp://127.0.0.1:{}", plain.port),
        "    starttls: false\n",
    ));
    assert_eq!(code, Some(0), "{out}");
    wait_until("the relay has the page", Duration::from_secs(5), || {
        plain.messages().len() == 2
    });
    assert_eq!(plain.messages()[0].envelope["tls"], false);
}

#[test]
fn test_alert_sends_a_digest_receiver_a_test_digest() {
    let Some(plain) = SmtpSink::start(Mode::Plain, None, None) else {
        return;
    };
    let (code, out) = test_alert(&receiver(
        "daily",
        &format!("smtp://127.0.0.1:{}", plain.port),
        "    starttls: false\n    digest: {schedule: \"0 9 * * *\", timezone: Asia/Shanghai}\n",
    ));
    assert_eq!(code, Some(0), "{out}");
    wait_until("the digest arrived", Duration::from_secs(5), || {
        plain.messages().len() == 2
    });
    let m = &plain.messages()[0].envelope;
    let subject = m["subject"].as_str().unwrap();
    assert_eq!(
        subject,
        "inferprobe daily digest: 1 fired, 0 resolved, 0 still open"
    );
    let text = m["text"].as_str().unwrap();
    assert!(
        text.contains("[TEST] inferprobe test alert") && text.contains("+08:00"),
        "{text}"
    );
}

#[test]
fn a_refused_recipient_does_not_keep_the_page_from_the_others() {
    let Some(relay) = SmtpSink::refusing(Mode::Plain, None, None, &["gone@example.com"]) else {
        return;
    };
    let url = format!("smtp://127.0.0.1:{}", relay.port);
    let (code, out) = test_alert(&format!(
        "  - name: team\n    kind: email\n    url: {url}\n    starttls: false\n    from: probes@example.com\n    to: [gone@example.com, oncall@example.com]\n\
         \x20 - name: only-gone\n    kind: email\n    url: {url}\n    starttls: false\n    from: probes@example.com\n    to: gone@example.com\n"
    ));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("team") && l.contains("accepted")),
        "{out}"
    );
    let gone = out
        .lines()
        .find(|l| l.starts_with("only-gone"))
        .unwrap_or_default();
    assert!(gone.contains("REJECTED") && gone.contains("550"), "{out}");
    wait_until("oncall has the page", Duration::from_secs(5), || {
        relay.messages().len() == 1
    });
    assert_eq!(
        relay.messages()[0].envelope["to"],
        serde_json::json!(["oncall@example.com"])
    );
}
