//! [`Endpoint`]: one phase-timed request to where a probe points, the same for every
//! kind (streaming or not): the client, the request target and headers, sending within
//! a deadline that blames the phase in progress, judging the status (with the error
//! body's message, secrets removed), reading a whole body, and the `expect` checks on
//! the output.
//!
//! Imports config, outcome, net and the redactor.

use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;

use super::{RunContext, redactor_for};
use crate::config::{Diagnostics, Expect, KindKeys, ProbeConfig, closest};
use crate::net::{BodyError, BodyStream, HttpClient, ResponseStream, TlsRoots};
use crate::outcome::{Failure, FailureReason, Observation};
use crate::redact::Redactor;

/// The protocol's own request headers (content type, accept), the same for every probe
/// of a kind, so held as a static list rather than per probe.
pub(crate) type BaseHeaders = &'static [(http::HeaderName, &'static str)];

const USER_AGENT: &str = concat!("inferprobe/", env!("CARGO_PKG_VERSION"));

/// Bytes of an error body read for its message.
const MAX_ERROR_BODY: usize = 4096;

/// Where a probe sends and what it checks, the same for every kind: the client, the
/// request target, the headers (the user's marked sensitive), the `expect` checks, and
/// the secrets to keep out of messages.
pub(crate) struct Endpoint {
    client: HttpClient,
    path_and_query: http::uri::PathAndQuery,
    /// The protocol's own headers (content type, accept).
    base: BaseHeaders,
    /// Basic auth from the URL and the user's headers, marked sensitive. The request's
    /// header map is made per run from these: a map kept per probe was ~330 bytes (3 MB
    /// at 10,000 probes), and each run cloned it anyway.
    extra: Box<[(http::HeaderName, http::HeaderValue)]>,
    /// The probe's config, shared with the built probe: `expect` and the size limit
    /// are read from it rather than copied (~250 bytes a probe, with the checks' own).
    config: Arc<ProbeConfig>,
    /// The probe's own secrets (header values, URL credentials), to keep out of
    /// messages; `None` for the many probes without any (a redactor is ~110 bytes).
    redactor: Option<Box<Redactor>>,
}

impl Endpoint {
    /// `base` headers are the protocol's own (content type, accept); the user's headers
    /// from the config override them.
    pub fn build(
        config: &Arc<ProbeConfig>,
        roots: &TlsRoots,
        base: BaseHeaders,
    ) -> Result<Self, crate::net::TlsSetupError> {
        let mut extra = Vec::new();
        // Credentials in the URL (`https://user:pass@host/...`) are sent as Basic auth,
        // as curl and browsers do; an Authorization header in the config wins.
        if let Some(basic) = basic_auth_from_url(&config.url)
            && let Ok(mut v) = http::HeaderValue::from_str(&basic)
        {
            v.set_sensitive(true);
            extra.push((http::header::AUTHORIZATION, v));
        }
        for (name, value) in &config.headers {
            if let Ok(mut v) = http::HeaderValue::from_str(value.expose()) {
                v.set_sensitive(true);
                extra.push((name.clone(), v));
            }
        }
        Ok(Endpoint {
            client: HttpClient::new(&config.url, roots, &config.tls, config.reuse_connections)?,
            path_and_query: config
                .url
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            base,
            extra: extra.into_boxed_slice(),
            config: config.clone(),
            redactor: Some(redactor_for(config)).filter(|r| !r.is_empty()).map(Box::new),
        })
    }

    /// The probe's own secrets, to keep out of messages.
    pub fn redactor(&self) -> &Redactor {
        static NONE: LazyLock<Redactor> = LazyLock::new(Redactor::default);
        self.redactor.as_deref().unwrap_or(&NONE)
    }

    /// What the output must be (`expect:`).
    pub fn expect(&self) -> &Expect {
        &self.config.expect
    }

    /// HTTP/2 on every connection, as gRPC needs (see `HttpClient::http2_only`).
    pub fn http2_only(mut self) -> Self {
        self.client = self.client.http2_only();
        self
    }

    /// Failure messages may quote what the server sent, which may echo credentials.
    pub fn redact(&self, obs: &mut Observation) {
        if let Err(f) = &mut obs.result {
            f.message = self.redactor().clean(&f.message);
        }
    }

    /// The request to send; built before a run's clock starts.
    pub fn request(&self, method: &http::Method, body: Bytes) -> http::Request<Full<Bytes>> {
        self.build_request(method, http::Uri::from(self.path_and_query.clone()), body)
    }

    /// A request to another path on the same server (e.g. a readiness check).
    pub fn request_to(&self, method: &http::Method, path: &str, body: Bytes) -> http::Request<Full<Bytes>> {
        let uri = http::Uri::try_from(path).unwrap_or_else(|_| http::Uri::from(self.path_and_query.clone()));
        self.build_request(method, uri, body)
    }

    fn build_request(
        &self,
        method: &http::Method,
        uri: http::Uri,
        body: Bytes,
    ) -> http::Request<Full<Bytes>> {
        // Set part by part: the builder's checks would repeat what `build` checked once.
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = method.clone();
        *request.uri_mut() = uri;
        // Room for the run's `traceparent` too. Inserted in order, so the user's
        // headers override the protocol's, and an Authorization header in the config
        // overrides the URL's credentials.
        let headers = request.headers_mut();
        headers.reserve(2 + self.base.len() + self.extra.len());
        headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        );
        for (name, value) in self.base {
            headers.insert(name.clone(), http::HeaderValue::from_static(value));
        }
        for (name, value) in &self.extra {
            headers.insert(name.clone(), value.clone());
        }
        request
    }

    /// Sends and checks the status: `Some` with the response when the body is worth
    /// reading, `None` with `obs.result` set otherwise.
    pub async fn open(
        &self,
        request: http::Request<Full<Bytes>>,
        cx: &RunContext,
        obs: &mut Observation,
        head_deadline: tokio::time::Instant,
        head_timeout_reason: FailureReason,
    ) -> Option<ResponseStream<'_>> {
        let mut request = request;
        if let Some(trace) = &cx.trace {
            super::trace::stamp(request.headers_mut(), trace);
        }
        let mut response = send(
            &self.client,
            request,
            obs,
            head_deadline,
            head_timeout_reason,
            self.config.max_response_bytes,
        )
        .await?;
        check_status(&mut response, self.expect(), cx, obs, self.redactor())
            .await
            .then_some(response)
    }
}

impl Endpoint {
    /// GET `path` on the same server, outside any run (the model's identity and the
    /// server's start, probe/identity.rs): the headers and body of a 2xx answer of at
    /// most `limit` bytes, complete within `timeout`; `None` for anything else, which
    /// says nothing about the run. `Ok(None)`: the server answered but not with a 2xx
    /// (it has no such endpoint, or refuses it); `Err(())`: no answer (a timeout, a
    /// broken connection, a body over `limit`).
    pub async fn fetch(
        &self,
        path: &str,
        limit: u64,
        timeout: std::time::Duration,
    ) -> Result<Option<(http::HeaderMap, Vec<u8>)>, ()> {
        let mut request = self.request_to(&http::Method::GET, path, Bytes::new());
        request.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/json"),
        );
        request.headers_mut().remove(http::header::CONTENT_TYPE);
        let start = Instant::now();
        let deadline = tokio::time::Instant::from_std(start) + timeout;
        let mut obs = Observation::new(start);
        let mut response = send(
            &self.client,
            request,
            &mut obs,
            deadline,
            FailureReason::TimeoutTotal,
            limit,
        )
        .await
        .ok_or(())?;
        if !response.response.status().is_success() {
            return Ok(None);
        }
        let headers = response.response.headers().clone();
        let mut body = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, response.body.next()).await {
                Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
                Ok(Ok(None)) => return Ok(Some((headers, body))),
                _ => return Err(()),
            }
        }
    }
}

/// `Basic <base64>` for credentials in a URL's userinfo, if it has any.
fn basic_auth_from_url(url: &http::Uri) -> Option<String> {
    use base64::Engine as _;
    let (userinfo, _) = url.authority()?.as_str().rsplit_once('@')?;
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let pair = format!(
        "{}:{}",
        crate::redact::percent_decode(user),
        crate::redact::percent_decode(password)
    );
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    ))
}

/// Sends the request, recording phases into `obs`. On failure `obs.result` is set and
/// `None` returned. `head_deadline` bounds everything up to the response headers;
/// running out of it is blamed on the phase that was in progress.
async fn send<'c>(
    client: &'c HttpClient,
    request: http::Request<Full<Bytes>>,
    obs: &mut Observation,
    head_deadline: tokio::time::Instant,
    head_timeout_reason: FailureReason,
    max_body_bytes: u64,
) -> Option<ResponseStream<'c>> {
    let sent = tokio::time::timeout_at(head_deadline, client.send(request, obs, max_body_bytes)).await;
    match sent {
        Ok(Ok(stream)) => {
            obs.http_status = Some(stream.response.status().as_u16());
            Some(stream)
        }
        Ok(Err(e)) => {
            obs.result = Err(Failure::new(e.reason(), e.to_string()));
            None
        }
        Err(_) => {
            let waited = humantime::format_duration(round_ms(
                head_deadline.duration_since(tokio::time::Instant::from_std(obs.marks.start)),
            ));
            let m = &obs.marks;
            let (reason, what) = if m.dns_done.is_none() && !obs.connection_reused {
                (FailureReason::Dns, "resolving the host")
            } else if m.connect_done.is_none() && !obs.connection_reused {
                (FailureReason::Connect, "connecting")
            } else if client.is_tls() && m.tls_done.is_none() && !obs.connection_reused {
                (FailureReason::Tls, "in the TLS handshake")
            } else {
                (head_timeout_reason, "waiting for response headers")
            };
            obs.result = Err(Failure::new(reason, format!("timed out after {waited} {what}")));
            None
        }
    }
}

/// Deadlines are set a few microseconds before a run's start instant; show whole ms.
fn round_ms(d: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis((d.as_secs_f64() * 1000.0).round() as u64)
}

/// Fails the run unless the status is accepted: listed in `expect.status`, or any 2xx
/// when the list is empty. For a rejected status the error body's message (secrets
/// removed) goes into the failure message.
async fn check_status(
    stream: &mut ResponseStream<'_>,
    expect: &Expect,
    cx: &RunContext,
    obs: &mut Observation,
    redactor: &Redactor,
) -> bool {
    let status = stream.response.status().as_u16();
    let accepted = if expect.status.is_empty() {
        (200..300).contains(&status)
    } else {
        expect.status.contains(&status)
    };
    if accepted {
        return true;
    }
    let reason = FailureReason::for_status(status).unwrap_or(FailureReason::Assertion);
    let mut message = if reason == FailureReason::Assertion {
        format!("expected status {:?}, got {status}", expect.status)
    } else {
        format!("HTTP {status}")
    };
    if let Some(after) = stream
        .response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
    {
        message.push_str(&format!(" (Retry-After: {after})"));
    }
    // The message is a nicety: never let a slow error body hold the run long.
    let wait = cx
        .deadline
        .min(tokio::time::Instant::now() + std::time::Duration::from_secs(1));
    let body = read_prefix(&mut stream.body, MAX_ERROR_BODY, wait).await;
    // Redacted before `error_detail` cuts it (and after, for what JSON decoding
    // reveals); a body cut by the read cap may end in a secret's start.
    let text = String::from_utf8_lossy(&body);
    let text = if body.len() >= MAX_ERROR_BODY {
        redactor.clean_cut(&text)
    } else {
        redactor.clean(&text)
    };
    let detail = error_detail(text.as_bytes());
    if let Some(detail) = &detail {
        message.push_str(": ");
        message.push_str(&redactor.clean(detail));
    }
    let reason = match detail {
        Some(d) if status == 503 && says_loading(&d) => FailureReason::Loading,
        _ => reason,
    };
    obs.result = Err(Failure::new(reason, message));
    false
}

/// Whether a 503's error says the model is still being loaded or warmed up: llama.cpp's
/// `Loading model`, Hugging Face's `Model x is currently loading`, a server "starting up"
/// or "not ready". Such a server is up and will serve soon: a restart, not a crash. One
/// that says loading went wrong (`error loading model`) is a server error.
pub(crate) fn says_loading(detail: &str) -> bool {
    const LOADING: [&str; 7] = [
        "loading",
        "warming up",
        "warm-up",
        "warmup",
        "not ready",
        "starting up",
        "initializing",
    ];
    const WENT_WRONG: [&str; 5] = ["error", "fail", "cannot", "could not", "unable"];
    let d = detail.to_ascii_lowercase();
    LOADING.iter().any(|w| d.contains(w)) && !WENT_WRONG.iter().any(|w| d.contains(w))
}

#[cfg(test)]
mod loading_tests {
    #[test]
    fn a_503_that_says_it_loads_is_loading_and_one_that_failed_to_is_not() {
        for said in [
            "Loading model",
            "Model meta-llama/Llama-3 is currently loading",
            "the server is warming up",
            "Model not ready",
        ] {
            assert!(super::says_loading(said), "{said}");
        }
        for said in [
            "error loading model",
            "failed to load model: out of memory",
            "no healthy upstream",
        ] {
            assert!(!super::says_loading(said), "{said}");
        }
    }
}

/// Reads up to `limit` bytes of a body, giving up quietly at the deadline or an error.
async fn read_prefix(body: &mut BodyStream<'_>, limit: usize, deadline: tokio::time::Instant) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < limit {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Ok(Some(chunk))) => out.extend_from_slice(&chunk[..chunk.len().min(limit - out.len())]),
            _ => break,
        }
    }
    out
}

/// The human part of an error body: `error.message`, `error`, `message` or `detail` of a
/// JSON body, else the start of the text. One line, at most 200 characters.
pub(crate) fn error_detail(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let from_json = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| json_error_message(&v));
    let detail = from_json.unwrap_or_else(|| text.to_owned());
    Some(one_line(&detail, 200))
}

/// An error the server sent inside a stream (an event's data, llama.cpp's `error:` field),
/// as a failed run: its message if it is a JSON error object, else the text's start.
pub(crate) fn in_band_error(raw: &str) -> Failure {
    let message = serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| json_error_message(&v))
        .unwrap_or_else(|| super::preview(raw));
    Failure::new(FailureReason::StreamError, format!("in-band error: {message}"))
}

/// The message of an in-band or body error object, in the shapes servers use:
/// `{"error":{"message":..}}`, `{"error":"..."}`, `{"message":..}`, `{"detail":..}`.
pub(crate) fn json_error_message(v: &serde_json::Value) -> Option<String> {
    let err = v.get("error").unwrap_or(v);
    for key in ["message", "detail"] {
        if let Some(m) = err.get(key).and_then(|m| m.as_str()) {
            return Some(m.to_owned());
        }
    }
    match err {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        other if v.get("error").is_some() => Some(other.to_string()),
        _ => None,
    }
}

pub(crate) fn one_line(s: &str, max_chars: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::human::shorten(&flat, max_chars)
}

/// Reads a whole (non-streamed) body to its end within the deadline and the byte cap,
/// keeping its first `keep` bytes. Marks the end; the caller sets `obs.result`.
pub(crate) async fn read_body(
    body: &mut BodyStream<'_>,
    keep: usize,
    cx: &RunContext,
    obs: &mut Observation,
) -> Result<Vec<u8>, Failure> {
    let mut kept = Vec::new();
    let result = loop {
        match tokio::time::timeout_at(cx.deadline, body.next()).await {
            Err(_) => {
                break Err(timeout_failure(
                    FailureReason::TimeoutTotal,
                    "body not complete",
                    obs.marks.start,
                    cx.deadline,
                ));
            }
            Ok(Err(e @ BodyError::TooLarge { .. })) => {
                break Err(Failure::new(FailureReason::InvalidResponse, e.to_string()));
            }
            Ok(Err(e @ BodyError::Broken(_))) => {
                break Err(Failure::new(FailureReason::Truncated, e.to_string()));
            }
            Ok(Ok(None)) => {
                obs.marks.end = Some(Instant::now());
                break Ok(kept);
            }
            Ok(Ok(Some(chunk))) => {
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
        }
    };
    obs.bytes_received = body.received();
    result
}

pub(crate) fn timeout_failure(
    reason: FailureReason,
    what: &str,
    start: Instant,
    deadline: tokio::time::Instant,
) -> Failure {
    let after = deadline.into_std().saturating_duration_since(start);
    Failure::new(
        reason,
        format!("{what} within {}", humantime::format_duration(round_ms(after))),
    )
}

/// The `expect` checks on a complete response. `any_output` counts reasoning and tool
/// output too; `contains` looks at the answer text only. A miss of `contains`, `matches`
/// or `json` is `content`: `wrong_answer` for a model's answer, `assertion` for a body.
pub(crate) fn check_output(
    expect: &Expect,
    text: &str,
    any_output: bool,
    tokens: Option<u64>,
    content: FailureReason,
) -> Result<(), Failure> {
    let assertion = |what: String| {
        Err(Failure::new(
            content,
            format!("{what}; it starts {:?}", one_line(text, 80)),
        ))
    };
    if expect.non_empty && !any_output {
        return Err(Failure::new(
            FailureReason::EmptyOutput,
            "the response completed with no generated output",
        ));
    }
    if let Some(n) = tokens
        && n < expect.min_output_tokens
    {
        return Err(Failure::new(
            FailureReason::Assertion,
            format!(
                "expected at least {} output tokens, got {n}",
                expect.min_output_tokens
            ),
        ));
    }
    if let Some(needle) = &expect.contains
        && !text.contains(needle.as_str())
    {
        return assertion(format!("expected the output to contain {needle:?}"));
    }
    if let Some(pattern) = &expect.matches
        && !pattern.regex.is_match(text)
    {
        return assertion(format!("expected the output to match /{}/", pattern.source));
    }
    if expect.json
        && let Err(e) = serde_json::from_str::<serde_json::Value>(text.trim())
    {
        return assertion(format!("expected JSON output ({e})"));
    }
    Ok(())
}

/// `method`, for the kinds that send the user's request: an HTTP method, by default
/// POST when there is a body and GET otherwise.
pub(crate) fn check_method<K>(
    cx: &mut Diagnostics,
    keys: &KindKeys<'_, K>,
    method: Option<&str>,
    has_body: bool,
) -> Option<http::Method> {
    // HTTP allows methods of its own to a service; one a letter or two from a
    // standard one is most likely that one misspelt: sent as written, with a warning.
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    let Some(m) = method else {
        return Some(if has_body {
            http::Method::POST
        } else {
            http::Method::GET
        });
    };
    match http::Method::from_str(&m.to_ascii_uppercase()) {
        Ok(method) => {
            if !STANDARD.contains(&method.as_str())
                && let Some(s) = closest(method.as_str(), &STANDARD)
            {
                keys.warn(
                    cx,
                    "method",
                    format!(
                        "`{m}` is not a standard HTTP method (it is sent as written); did you mean `{s}`?"
                    ),
                );
            }
            Some(method)
        }
        Err(_) => {
            keys.error(cx, "method", format!("`{m}` is not an HTTP method"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(probe: &str) -> Endpoint {
        let text = format!("probes:\n  - {probe}\n");
        let config = crate::config::parse(&text, std::path::Path::new("t.yaml"), &|_| None).unwrap();
        Endpoint::build(
            &config.probes[0],
            &TlsRoots::system(),
            &[
                (http::header::CONTENT_TYPE, "application/json"),
                (http::header::ACCEPT, "text/event-stream"),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_request_carries_the_protocols_headers_and_the_users_win() {
        let plain = endpoint("{name: a, kind: http, url: \"http://h/p\"}");
        let r = plain.request(&http::Method::POST, Bytes::new());
        let h = r.headers();
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["accept"], "text/event-stream");
        assert!(h["user-agent"].to_str().unwrap().starts_with("inferprobe/"));
        assert_eq!(h.len(), 3);
        assert!(plain.redactor.is_none(), "no secrets, no redactor of its own");

        // The URL's credentials go as Basic auth, unless the config sets Authorization;
        // the user's headers override the protocol's, and are marked sensitive.
        let basic = endpoint("{name: a, kind: http, url: \"http://u:pw@h/p\"}");
        let r = basic.request(&http::Method::GET, Bytes::new());
        assert_eq!(r.headers()["authorization"], "Basic dTpwdw==");
        assert!(r.headers()["authorization"].is_sensitive());
        let mine = endpoint(
            "{name: a, kind: http, url: \"http://u:pw@h/p\", headers: {Authorization: Bearer t0k3n-123, Content-Type: text/plain}}",
        );
        let r = mine.request(&http::Method::GET, Bytes::new());
        let h = r.headers();
        assert_eq!(
            h.get_all("authorization").iter().collect::<Vec<_>>(),
            ["Bearer t0k3n-123"]
        );
        assert_eq!(
            h.get_all("content-type").iter().collect::<Vec<_>>(),
            ["text/plain"]
        );
        assert!(h["content-type"].is_sensitive());
        assert!(mine.redactor().clean("said t0k3n-123").contains("<redacted>"));
    }

    #[test]
    fn error_detail_finds_the_message_in_common_shapes() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"error":{"code":400,"message":"Expected 'messages' to be an array","type":"invalid_request_error"}}"#,
                "Expected 'messages' to be an array",
            ),
            (r#"{"error":"model not found"}"#, "model not found"),
            (r#"{"detail":"Not Found"}"#, "Not Found"),
            (
                "<html><body>502 Bad Gateway</body></html>",
                "<html><body>502 Bad Gateway</body></html>",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(error_detail(body.as_bytes()).as_deref(), Some(*want));
        }
        assert_eq!(error_detail(b"  "), None);
    }

    #[test]
    fn regex_and_json_expectations() {
        let regex = regex::Regex::new("(?i)^open").unwrap();
        let expect = Expect {
            matches: Some(crate::config::Pattern {
                source: "(?i)^open".into(),
                regex,
            }),
            ..Expect::default()
        };
        assert!(check_output(&expect, "Open 24h", true, None, FailureReason::Assertion).is_ok());
        let f = check_output(&expect, "closed", true, None, FailureReason::Assertion).unwrap_err();
        assert_eq!(f.reason, FailureReason::Assertion);
        assert!(f.message.contains("/(?i)^open/"), "{}", f.message);

        let json = Expect {
            json: true,
            ..Expect::default()
        };
        assert!(check_output(&json, " {\"answer\": 4} ", true, None, FailureReason::Assertion).is_ok());
        assert_eq!(
            check_output(&json, "{answer: 4", true, None, FailureReason::Assertion)
                .unwrap_err()
                .reason,
            FailureReason::Assertion
        );
    }

    #[test]
    fn error_detail_is_one_bounded_line() {
        let long = "x\n".repeat(500);
        let d = error_detail(long.as_bytes()).unwrap();
        assert!(!d.contains('\n'));
        assert!(d.chars().count() <= 203);
    }

    #[test]
    fn output_checks() {
        let expect = Expect {
            non_empty: true,
            min_output_tokens: 2,
            contains: Some("Paris".into()),
            ..Expect::default()
        };
        assert_eq!(
            check_output(&expect, "", false, Some(0), FailureReason::Assertion)
                .unwrap_err()
                .reason,
            FailureReason::EmptyOutput
        );
        assert_eq!(
            check_output(&expect, "Paris", true, Some(1), FailureReason::Assertion)
                .unwrap_err()
                .reason,
            FailureReason::Assertion
        );
        assert_eq!(
            check_output(&expect, "Lyon", true, Some(3), FailureReason::Assertion)
                .unwrap_err()
                .reason,
            FailureReason::Assertion
        );
        assert!(check_output(&expect, "It is Paris.", true, Some(3), FailureReason::Assertion).is_ok());
    }
}
