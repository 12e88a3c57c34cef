//! E-mail over SMTP: `url: smtps://host:465` (implicit TLS) or `smtp://host:587`
//! (STARTTLS, required unless `starttls: false`), with AUTH when `username` is set, to
//! several recipients. Each page is one message, plain text and HTML (multipart/
//! alternative), so a phone's mail client and a desktop one both read it well.
//!
//! The verdict is SMTP's own: a 5xx reply is permanent (rejected: a wrong password, an
//! unknown recipient, a refused sender), a 4xx transient (retried), and a connection or
//! TLS failure retried as any unreachable receiver is.

use std::time::Duration;

use lettre::address::Envelope;
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use schemars::JsonSchema;
use serde::Deserialize;

use super::Delivery;
use super::chat;
use crate::alert::{AlertEvent, Notification};
use crate::config::{Diagnostics, OwnKeys, ReceiverKeys, Secret};
use crate::human::html_escape;

/// The keys only an email receiver takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// email: the sender, e.g. "inferprobe <probes@example.com>".
    from: Option<String>,
    /// email: the recipients, one address or a list.
    #[serde(default)]
    to: Recipients,
    /// email: the SMTP AUTH user name, when the server asks for one.
    username: Option<String>,
    /// email: the SMTP AUTH password, e.g. "${SMTP_PASSWORD}". A secret: never shown.
    password: Option<String>,
    /// email: with `url: smtp://...`, whether STARTTLS is required (default true); false
    /// only for a relay on this host or a network you trust, as the password and pages
    /// then travel in clear text.
    starttls: Option<bool>,
}

impl OwnKeys for Keys {
    const SECRETS: &'static [&'static str] = &["password"];
}

/// `to: oncall@example.com` or `to: [a@example.com, b@example.com]`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged, expecting = "must be an e-mail address or a list of them")]
enum Recipients {
    One(String),
    Many(Vec<String>),
}

impl Default for Recipients {
    fn default() -> Self {
        Recipients::Many(Vec::new())
    }
}

impl Recipients {
    fn list(&self) -> &[String] {
        match self {
            Recipients::One(one) => std::slice::from_ref(one),
            Recipients::Many(many) => many,
        }
    }
}

/// How the connection to the SMTP server is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// TLS from the first byte (`smtps://`, usually port 465).
    Implicit,
    /// STARTTLS, refused if the server does not offer it (`smtp://`, usually 587).
    StartTls,
    /// No TLS (`smtp://` with `starttls: false`).
    Plain,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub from: Mailbox,
    pub to: Vec<Mailbox>,
    pub credentials: Option<(String, Secret)>,
    pub server: Server,
}

/// Where the mail goes: the receiver's `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub host: String,
    pub port: u16,
    pub security: Security,
}

/// An `smtp://` or `smtps://` URL: host and port, nothing else (credentials go in
/// `username` and `password`, where they are known to be secrets).
pub fn parse_url(text: &str) -> Result<(String, u16, bool), String> {
    let lower = text.to_ascii_lowercase();
    let (implicit, rest) = if let Some(rest) = lower.strip_prefix("smtps://") {
        (true, &text[8..8 + rest.len()])
    } else if let Some(rest) = lower.strip_prefix("smtp://") {
        (false, &text[7..7 + rest.len()])
    } else {
        return Err("an email receiver's url is `smtps://host[:port]` (implicit TLS) or `smtp://host[:port]` (STARTTLS)".into());
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        return Err("put the SMTP user and password in `username` and `password`, not in the url".into());
    }
    if authority.is_empty() || authority.contains(['/', '?', '#']) {
        return Err("must be `smtp(s)://host[:port]`, with no path or query".into());
    }
    let default_port = if implicit { 465 } else { 587 };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("`{port}` is not a port"))?;
            (host, port)
        }
        _ => (authority, default_port),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("has no host".into());
    }
    Ok((host.to_owned(), port, implicit))
}

pub(crate) fn check(cx: &mut Diagnostics, keys: ReceiverKeys<'_, Keys>) -> Option<Spec> {
    let before = cx.error_count();
    let own = &keys.own;
    let server = match keys.common.url.map(parse_url) {
        Some(Ok((host, port, implicit))) => {
            let security = match (implicit, own.starttls) {
                (true, Some(false)) => {
                    keys.error(
                        cx,
                        "starttls",
                        "is for `smtp://`; an `smtps://` url is TLS from the start",
                    );
                    Security::Implicit
                }
                (true, _) => Security::Implicit,
                (false, Some(false)) => Security::Plain,
                (false, _) => Security::StartTls,
            };
            Some(Server { host, port, security })
        }
        Some(Err(message)) => {
            keys.error(cx, "url", message);
            None
        }
        // The loader has said that the `url` is missing.
        None => None,
    };
    let mailbox = |cx: &mut Diagnostics, key: &str, text: &str| match text.trim().parse::<Mailbox>() {
        Ok(m) => Some(m),
        Err(_) => {
            keys.error(
                cx,
                key,
                format!("`{}` is not an e-mail address like probes@example.com or \"Probes <probes@example.com>\"", text.trim()),
            );
            None
        }
    };
    let from = match &own.from {
        Some(f) => mailbox(cx, "from", f),
        None => {
            keys.error(cx, "from", "an email receiver needs a `from` address");
            None
        }
    };
    if own.to.list().is_empty() {
        keys.error(cx, "to", "an email receiver needs at least one address in `to`");
    }
    let to: Vec<Mailbox> = own
        .to
        .list()
        .iter()
        .enumerate()
        .filter_map(|(i, t)| mailbox(cx, &format!("to[{i}]"), t))
        .collect();
    let credentials = match (&own.username, &own.password) {
        (Some(user), Some(password)) if !user.is_empty() => {
            Some((user.clone(), Secret::new(password.clone())))
        }
        (None, None) => None,
        (Some(_), None) => {
            keys.error(cx, "password", "`username` is set: give its `password` too");
            None
        }
        _ => {
            keys.error(cx, "username", "`password` is set: give its `username` too");
            None
        }
    };
    if cx.error_count() > before {
        return None;
    }
    Some(Spec {
        from: from?,
        to,
        credentials,
        server: server?,
    })
}

/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "The recipients got one e-mail; nothing expires it, `--resolve` sends the resolved one.";

/// A receiver's SMTP connection settings, built once.
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl Mailer {
    /// `ca_file`: a PEM CA trusted besides the system's roots (a private relay).
    pub fn build(
        spec: &Spec,
        ca_file: Option<&std::path::Path>,
        timeout: Duration,
    ) -> Result<Mailer, String> {
        let server = &spec.server;
        let tls = || -> Result<TlsParameters, String> {
            let mut tls =
                TlsParameters::builder(server.host.clone()).certificate_store(CertificateStore::Default);
            if let Some(path) = ca_file {
                let pem = std::fs::read(path)
                    .map_err(|e| format!("cannot read ca_file {}: {e}", path.display()))?;
                let cert =
                    Certificate::from_pem(&pem).map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                tls = tls.add_root_certificate(cert);
            }
            tls.build_rustls().map_err(|e| e.to_string())
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&server.host)
            .port(server.port)
            .timeout(Some(timeout));
        builder = match server.security {
            Security::Implicit => builder.tls(Tls::Wrapper(tls()?)),
            Security::StartTls => builder.tls(Tls::Required(tls()?)),
            Security::Plain => builder.tls(Tls::None),
        };
        if let Some((user, password)) = &spec.credentials {
            builder = builder.credentials(Credentials::new(user.clone(), password.expose().to_owned()));
        }
        Ok(Mailer {
            transport: builder.build(),
        })
    }

    /// Sends one message to every recipient.
    pub async fn send(&self, spec: &Spec, mail: &Mail) -> Delivery {
        let mut message = Message::builder()
            .from(spec.from.clone())
            .subject(mail.subject.clone());
        for to in &spec.to {
            message = message.to(to.clone());
        }
        let message = match message.multipart(MultiPart::alternative_plain_html(
            mail.text.clone(),
            mail.html.clone(),
        )) {
            Ok(m) => m,
            Err(e) => {
                return Delivery::Rejected {
                    why: format!("cannot build the message: {e}"),
                };
            }
        };
        // One transaction per recipient: a server that refuses one address (someone who
        // left) ends the whole transaction, and the others would never get the page.
        let raw = message.formatted();
        let mut results = Vec::with_capacity(spec.to.len());
        for to in &spec.to {
            let envelope = match Envelope::new(Some(spec.from.email.clone()), vec![to.email.clone()]) {
                Ok(e) => e,
                Err(e) => {
                    results.push((to, Delivery::Rejected { why: e.to_string() }));
                    continue;
                }
            };
            let result = match self.transport.send_raw(&envelope, &raw).await {
                Ok(_) => Delivery::Accepted,
                Err(e) => verdict(&e),
            };
            results.push((to, result));
        }
        combined(results)
    }
}

/// One page's outcome from each recipient's: delivered if every recipient that can take
/// it did (a refused address is logged, not a reason to keep the page from the rest);
/// tried again if any failed for now (a retry may reach a recipient twice: at least
/// once); refused if every recipient refused it.
fn combined(results: Vec<(&Mailbox, Delivery)>) -> Delivery {
    if let Some((to, Delivery::Retry { after, why })) =
        results.iter().find(|(_, d)| matches!(d, Delivery::Retry { .. }))
    {
        return Delivery::Retry {
            after: *after,
            why: format!("to {}: {why}", to.email),
        };
    }
    let refused: Vec<String> = results
        .iter()
        .filter_map(|(to, d)| match d {
            Delivery::Rejected { why } => Some(format!("to {}: {why}", to.email)),
            _ => None,
        })
        .collect();
    if refused.len() == results.len() {
        return Delivery::Rejected {
            why: refused.join("; "),
        };
    }
    for why in &refused {
        tracing::warn!(error = %why, "A recipient refused the e-mail; the others got it.");
    }
    Delivery::Accepted
}

/// SMTP's own verdict: 5xx permanent, 4xx and a lost connection worth another try.
fn verdict(e: &lettre::transport::smtp::Error) -> Delivery {
    let why = describe(e);
    if e.is_permanent() {
        let hint = match e.status().map(|c| c.to_string()) {
            Some(code) if code.starts_with("535") || code.starts_with("534") => {
                " (the server refused the login: check `username` and `password`)"
            }
            Some(code) if code.starts_with("550") || code.starts_with("553") => {
                " (the server refused the sender or a recipient: check `from` and `to`)"
            }
            _ => "",
        };
        Delivery::Rejected {
            why: format!("{why}{hint}"),
        }
    } else {
        Delivery::Retry { after: None, why }
    }
}

/// The error and its causes, one line.
fn describe(e: &lettre::transport::smtp::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let words = cause.to_string();
        if !text.contains(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
        source = cause.source();
    }
    text
}

/// One e-mail's words: a subject, plain text, and the same as HTML.
#[derive(Debug, Clone, PartialEq)]
pub struct Mail {
    pub subject: String,
    pub text: String,
    pub html: String,
}

impl Mail {
    /// A page: the summary as the subject; the severity, location, description and
    /// links as text and HTML. An endpoint's words are escaped in the HTML.
    pub fn page(n: &Notification) -> Mail {
        let a = &n.alert;
        let mark = chat::mark(n);
        let subject = format!(
            "[inferprobe] {mark} {}",
            crate::human::first_chars(&a.summary, 150)
        );
        let mut text = format!(
            "{}\n\n{} · {}\n\n{}\n",
            a.summary,
            a.severity.as_str(),
            a.location,
            a.description
        );
        let mut links = Vec::new();
        if !a.api_url.is_empty() {
            text.push_str(&format!("\nThis probe's results: {}", a.api_url));
            links.push(format!(
                r#"<a href="{}">This probe's results</a>"#,
                html_escape(&a.api_url)
            ));
        }
        if let Some(runbook) = &a.runbook_url {
            text.push_str(&format!("\nRunbook: {runbook}"));
            links.push(format!(r#"<a href="{}">Runbook</a>"#, html_escape(runbook)));
        }
        let colour = match n.event {
            AlertEvent::Firing | AlertEvent::Reminder => "#b42318",
            AlertEvent::Resolved => "#067647",
            AlertEvent::Notice => "#175cd3",
        };
        let html = format!(
            concat!(
                "<!doctype html><html><body style=\"font-family:sans-serif;line-height:1.4\">",
                "<h2 style=\"color:{colour}\">{mark} {summary}</h2>",
                "<p><b>{severity}</b> · {location}</p>",
                "<pre style=\"white-space:pre-wrap;font-family:inherit\">{description}</pre>",
                "<p>{links}</p></body></html>"
            ),
            colour = colour,
            mark = mark,
            summary = html_escape(&a.summary),
            severity = a.severity.as_str(),
            location = html_escape(&a.location),
            description = html_escape(&a.description),
            links = links.join(" · "),
        );
        Mail { subject, text, html }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_urls_name_a_server_and_nothing_else() {
        assert_eq!(
            parse_url("smtps://mail.example.com"),
            Ok(("mail.example.com".into(), 465, true))
        );
        assert_eq!(
            parse_url("smtp://mail.example.com"),
            Ok(("mail.example.com".into(), 587, false))
        );
        assert_eq!(
            parse_url("SMTP://127.0.0.1:2525/"),
            Ok(("127.0.0.1".into(), 2525, false))
        );
        assert_eq!(parse_url("smtp://[::1]:25"), Ok(("::1".into(), 25, false)));
        for bad in [
            "https://mail.example.com",
            "smtp://user:pw@mail.example.com",
            "smtp://mail.example.com/inbox",
            "smtp://mail.example.com:0",
            "smtp://mail.example.com:x",
            "smtp://",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        let err = parse_url("smtp://user:pw@mail.example.com").unwrap_err();
        assert!(!err.contains("pw"), "{err}");
    }

    #[test]
    fn a_page_in_html_is_escaped_text() {
        let mut n = crate::notify::tests::notification(AlertEvent::Firing);
        n.alert.description = "<script>alert(1)</script> & <a href=x>".into();
        let mail = Mail::page(&n);
        assert!(
            mail.subject.starts_with("[inferprobe] 🚨 chat is DOWN"),
            "{}",
            mail.subject
        );
        assert!(
            mail.html
                .contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;a href=x&gt;")
        );
        assert!(!mail.html.contains("<script>"));
        assert!(
            mail.text.contains("<script>alert(1)</script>"),
            "plain text stays as it came"
        );
    }
}
