//! The table: every fault, how it is served to each kind, the reason each kind must
//! report and what its message must say.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use inferprobe::outcome::FailureReason;

use super::STALL;
use super::servers::{closing_server, h2_reset_server, http_base, status_reply};
use super::wire::{Wire, endless, line_100mb, oversized, partial};
use crate::support::{BodyEnd, Received, Step, chunked_reply, closed_port, scripted_server, tls};

/// Where one run goes: the base URL, extra YAML, and a check on what the server saw.
pub struct Target {
    pub base: String,
    pub extra: String,
    pub after: Option<Box<dyn Fn() -> Result<(), String> + Send>>,
}

impl Target {
    pub fn at(base: String) -> Self {
        Target {
            base,
            extra: String::new(),
            after: None,
        }
    }

    pub fn scripted(script: impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static) -> Self {
        Target::at(http_base(scripted_server(script)))
    }

    /// `https://localhost:PORT`, with `cert` trusted through `tls.ca_file`.
    pub fn trusting(port: u16, cert: &tls::Issued) -> Self {
        Target {
            base: format!("https://localhost:{port}"),
            extra: format!("tls: {{ca_file: {}}}", tls::ca_file(&cert.pem).display()),
            after: None,
        }
    }

    pub fn reply(bytes: Vec<u8>) -> Self {
        Target::scripted(move |_| vec![Step::Write(bytes.clone())])
    }
}

/// One fault: how to serve it to a kind, the reason each kind must report (`None`:
/// success), text the failure message must hold, and a note for debatable reasons.
pub struct Fault {
    pub name: &'static str,
    pub serve: fn(&Wire) -> Target,
    pub expect: fn(&Wire) -> Option<FailureReason>,
    pub message_has: fn(&Wire) -> Option<&'static str>,
    pub note: &'static str,
}

use FailureReason as R;

pub fn none(_: &Wire) -> Option<&'static str> {
    None
}

pub fn faults() -> Vec<Fault> {
    vec![
        Fault {
            name: "healthy (control)",
            serve: |w| Target::reply(w.healthy()),
            expect: |_| None,
            message_has: none,
            note: "the success path of each wire format below: faults differ from it only by the fault",
        },
        Fault {
            name: "connection_refused",
            serve: |_| Target::at(format!("http://127.0.0.1:{}", closed_port())),
            expect: |_| Some(R::Connect),
            message_has: |_| Some("refused"),
            note: "",
        },
        Fault {
            name: "dns_failure",
            serve: |_| Target::at("http://no-such-host.invalid".to_owned()),
            expect: |_| Some(R::Dns),
            // No message check: a slow resolver ends in "timed out ... resolving the host".
            message_has: none,
            note: "`.invalid` never resolves (RFC 6761)",
        },
        Fault {
            name: "tls_expired_certificate",
            serve: |w| {
                let cert = tls::self_signed_between(&["localhost"], 2020, 2021);
                Target::trusting(tls::https_server(&cert, w.healthy()), &cert)
            },
            expect: |_| Some(R::Tls),
            message_has: |_| Some("expired"),
            note: "trusted via ca_file, right name: only the dates are wrong",
        },
        Fault {
            name: "tls_self_signed_certificate",
            serve: |w| {
                let cert = tls::self_signed(&["localhost"]);
                Target::at(format!(
                    "https://localhost:{}",
                    tls::https_server(&cert, w.healthy())
                ))
            },
            expect: |_| Some(R::Tls),
            message_has: |_| Some("UnknownIssuer"),
            note: "",
        },
        Fault {
            name: "tls_wrong_host_certificate",
            serve: |w| {
                let cert = tls::self_signed(&["other.example"]);
                Target::trusting(tls::https_server(&cert, w.healthy()), &cert)
            },
            expect: |_| Some(R::Tls),
            message_has: |_| Some("not valid for name"),
            note: "trusted via ca_file, valid dates: only the name is wrong",
        },
        Fault {
            name: "stall_before_headers",
            serve: |_| Target::scripted(|_| vec![Step::Hold(STALL)]),
            expect: |w| {
                Some(if w.streams() {
                    R::TimeoutFirstToken
                } else {
                    R::TimeoutTotal
                })
            },
            message_has: |_| Some("waiting for response headers"),
            note: "streaming kinds wait for headers as long as for the first token (1 s)",
        },
        Fault {
            name: "stall_after_headers",
            serve: |w| {
                let head = w.head((!w.streams()).then_some(w.body().len()));
                Target::scripted(move |_| vec![Step::Write(head.clone().into_bytes()), Step::Hold(STALL)])
            },
            expect: |w| {
                Some(if w.streams() {
                    R::TimeoutFirstToken
                } else {
                    R::TimeoutTotal
                })
            },
            message_has: none,
            note: "",
        },
        Fault {
            name: "stall_mid_stream",
            serve: |w| {
                let part = partial(w);
                Target::scripted(move |_| vec![Step::Write(part.clone()), Step::Hold(STALL)])
            },
            expect: |_| Some(R::TimeoutTotal),
            message_has: none,
            note: "after the first token (streams) or half the body (JSON)",
        },
        Fault {
            name: "slow_drip_1_byte_per_s",
            serve: |w| {
                let body = w.body();
                let head = w.head((!w.streams()).then_some(body.len()));
                Target::scripted(move |_| {
                    vec![
                        Step::Write(head.clone().into_bytes()),
                        Step::Drip(body.clone().into_bytes(), Duration::from_secs(1)),
                    ]
                })
            },
            expect: |w| {
                Some(if w.streams() {
                    R::TimeoutFirstToken
                } else {
                    R::TimeoutTotal
                })
            },
            message_has: none,
            note: "a healthy body, one byte a second after the head",
        },
        Fault {
            name: "truncated_stream",
            serve: |w| {
                // Streams: a first token and half of the next event; JSON: half the
                // promised Content-Length. Then the connection closes.
                let mut cut = partial(w);
                if w.streams() {
                    let next = w.token("cut");
                    cut.extend_from_slice(&next.as_bytes()[..next.len() / 2]);
                }
                Target::reply(cut)
            },
            expect: |_| Some(R::Truncated),
            message_has: none,
            note: "",
        },
        Fault {
            name: "aborted_after_done",
            serve: |w| {
                // The whole answer, terminator included, in HTTP chunks; then the
                // connection closes without the chunked body's last chunk (as a server
                // that aborts a stream after [DONE] does).
                let body = w.body();
                Target::reply(chunked_reply(w.content_type(), &[&body], BodyEnd::Cut))
            },
            expect: |_| Some(R::Truncated),
            message_has: |w| w.streams().then_some("the HTTP body broke after"),
            note: "the complete answer (streams: up to and including the terminator), then the chunked body never ends: the connection closes without its last chunk",
        },
        Fault {
            name: "garbage_bytes",
            serve: |_| Target::reply(b"\x00\x13\xfe\xffSSH-2.0-OpenSSH_9.6\r\n\x8f\x01garbage".to_vec()),
            expect: |_| Some(R::InvalidResponse),
            message_has: |_| Some("not an HTTP response"),
            note: "bytes that are not HTTP at all (another service on the port)",
        },
        Fault {
            name: "garbage_body",
            serve: |w| {
                let noise: Vec<u8> = (0..4096u32)
                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                    .collect();
                let mut out = w.head((!w.streams()).then_some(noise.len())).into_bytes();
                out.extend_from_slice(&noise);
                Target::reply(out)
            },
            expect: |w| {
                Some(if w.kind == "http" {
                    R::Assertion
                } else {
                    R::InvalidResponse
                })
            },
            message_has: none,
            note: "200 and binary noise; http bodies may be anything, so only its `contains` check fails",
        },
        Fault {
            name: "invalid_utf8",
            serve: |w| {
                let bad = "\u{1}BAD\u{1}";
                let body = match w.kind {
                    "kserve_v2" => w.body().replace("\"m\"", &format!("\"{bad}\"")),
                    "http" => format!(r#"{{"status":"{bad}"}}"#),
                    _ => w.preamble() + &w.token(bad) + &w.end(),
                };
                // \u{1}: a placeholder for the bytes 0xFF 0xFE, which a &str cannot hold.
                let body: Vec<u8> = body.bytes().map(|b| if b == 1 { 0xff } else { b }).collect();
                let mut out = w.head((!w.streams()).then_some(body.len())).into_bytes();
                out.extend_from_slice(&body);
                Target::reply(out)
            },
            expect: |w| {
                Some(if w.kind == "http" {
                    R::Assertion
                } else {
                    R::InvalidResponse
                })
            },
            message_has: |w| (w.kind != "http").then_some("not valid UTF-8"),
            note: "0xFF inside a JSON string; http reads bodies as bytes (they may be binary), so its `contains` check fails",
        },
        Fault {
            name: "json_not_the_protocol_shape",
            serve: |w| {
                let body = if w.streams() {
                    w.frame(None, r#"{"hello":"world"}"#) + &w.end()
                } else {
                    r#"{"hello":"world"}"#.to_owned()
                };
                Target::reply((w.head((!w.streams()).then_some(body.len())) + &body).into_bytes())
            },
            expect: |w| {
                Some(if w.kind == "http" {
                    R::Assertion
                } else {
                    R::InvalidResponse
                })
            },
            message_has: none,
            note: "valid JSON, wrong object; http has no protocol shape, only its `contains` check",
        },
        Fault {
            name: "in_band_error",
            serve: |w| {
                let body = match (w.in_band_error(), w.kind) {
                    (Some(error), _) => w.preamble() + &w.token("Hi") + &error,
                    // The Open Inference Protocol has no in-band error: errors are non-2xx.
                    // A 200 carrying an error object is what a broken model server sends.
                    (None, "kserve_v2") => r#"{"error":"model failed"}"#.to_owned(),
                    (None, _) => r#"{"status":"error","error":"model failed"}"#.to_owned(),
                };
                Target::reply((w.head((!w.streams()).then_some(body.len())) + &body).into_bytes())
            },
            expect: |w| {
                Some(match w.kind {
                    "kserve_v2" => R::InvalidResponse,
                    "http" => R::Assertion,
                    _ => R::StreamError,
                })
            },
            message_has: |w| w.streams().then_some("engine failure mid-stream"),
            note: "each protocol's own error event after a first token; kserve_v2 and http have none: a 200 error body is not an inference response (kserve_v2) or fails the health check (http)",
        },
        Fault {
            name: "http_500",
            serve: |_| {
                Target::reply(status_reply(
                    "500 Internal Server Error",
                    "application/json",
                    "",
                    r#"{"error":{"message":"CUDA out of memory"}}"#,
                ))
            },
            expect: |_| Some(R::Http5xx),
            message_has: |_| Some("HTTP 500: CUDA out of memory"),
            note: "",
        },
        Fault {
            name: "http_502_html",
            serve: |_| {
                Target::reply(status_reply(
                    "502 Bad Gateway",
                    "text/html",
                    "",
                    "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>\n",
                ))
            },
            expect: |_| Some(R::Http5xx),
            message_has: |_| Some("HTTP 502: <html>"),
            note: "",
        },
        Fault {
            name: "http_503_retry_after",
            serve: |_| {
                Target::reply(status_reply(
                    "503 Service Unavailable",
                    "application/json",
                    "Retry-After: 30\r\n",
                    r#"{"error":"model is loading"}"#,
                ))
            },
            // A 503 that says the model is loading: up, not serving yet (a restart).
            expect: |_| Some(R::Loading),
            message_has: |_| Some("HTTP 503 (Retry-After: 30): model is loading"),
            note: "",
        },
        Fault {
            name: "http_429",
            serve: |_| {
                Target::reply(status_reply(
                    "429 Too Many Requests",
                    "application/json",
                    "Retry-After: 5\r\n",
                    r#"{"error":{"message":"rate limit reached","type":"rate_limit_exceeded"}}"#,
                ))
            },
            expect: |_| Some(R::RateLimited),
            message_has: |_| Some("Retry-After: 5"),
            note: "",
        },
        Fault {
            name: "redirect_loop",
            serve: |w| {
                let seen = Arc::new(AtomicUsize::new(0));
                let count = seen.clone();
                let path = w.path;
                let addr = scripted_server(move |_| {
                    count.fetch_add(1, Ordering::SeqCst);
                    vec![Step::Write(status_reply(
                        "302 Found",
                        "text/plain",
                        &format!("Location: {path}\r\n"),
                        "",
                    ))]
                });
                Target {
                    base: http_base(addr),
                    extra: String::new(),
                    after: Some(Box::new(move || match seen.load(Ordering::SeqCst) {
                        1 => Ok(()),
                        n => Err(format!("the looping server saw {n} requests, not 1")),
                    })),
                }
            },
            expect: |_| Some(R::InvalidResponse),
            message_has: |_| Some("HTTP 302"),
            note: "redirects are not followed (a probe reports what the endpoint does); a 3xx is not an answer, and the loop is never entered",
        },
        Fault {
            name: "redirect_to_another_host",
            serve: |w| {
                let other = Arc::new(AtomicUsize::new(0));
                let count = other.clone();
                let healthy = w.healthy();
                let elsewhere = scripted_server(move |_| {
                    count.fetch_add(1, Ordering::SeqCst);
                    vec![Step::Write(healthy.clone())]
                });
                let location = format!("Location: http://{elsewhere}{}\r\n", w.path);
                Target {
                    base: http_base(scripted_server(move |_| {
                        vec![Step::Write(status_reply(
                            "307 Temporary Redirect",
                            "text/plain",
                            &location,
                            "",
                        ))]
                    })),
                    extra: String::new(),
                    after: Some(Box::new(move || match other.load(Ordering::SeqCst) {
                        0 => Ok(()),
                        n => Err(format!(
                            "the other host got {n} requests: a redirect was followed"
                        )),
                    })),
                }
            },
            expect: |_| Some(R::InvalidResponse),
            message_has: |_| Some("HTTP 307"),
            note: "not followed: the request (and its credentials) never reaches the other host",
        },
        Fault {
            name: "endless_stream",
            serve: |w| Target::scripted(endless(w)),
            expect: |_| Some(R::TimeoutTotal),
            message_has: none,
            note: "streams: valid tokens every 2 ms, never a terminator; JSON: a chunked body that never ends",
        },
        Fault {
            name: "line_100mb",
            serve: |w| Target::scripted(line_100mb(w)),
            expect: |_| Some(R::InvalidResponse),
            message_has: |w| {
                Some(if w.streams() {
                    "exceeded 1048576 bytes"
                } else {
                    "8388608-byte cap"
                })
            },
            note: "one 100 MB event with no line end: streams stop at the 1 MiB event cap, JSON at the 8 MiB body cap",
        },
        Fault {
            name: "oversized_body",
            serve: |w| Target::scripted(oversized(w)),
            expect: |_| Some(R::InvalidResponse),
            message_has: |_| Some("8388608-byte cap"),
            note: "20 MB of well-formed events (or a 20 MB JSON document) against the default 8 MiB max_response_bytes",
        },
        Fault {
            name: "wrong_content_type",
            serve: |w| {
                if w.streams() {
                    // The whole stream, labelled as one JSON document.
                    let body = w.body();
                    Target::reply(status_reply("200 OK", "application/json", "", &body))
                } else {
                    // A proxy's login page with 200, where JSON should be.
                    Target::reply(status_reply(
                        "200 OK",
                        "text/html",
                        "",
                        "<html><body><form action=\"/login\">Sign in</form></body></html>",
                    ))
                }
            },
            expect: |w| {
                Some(match w.kind {
                    "http" => R::Assertion,
                    _ => R::InvalidResponse,
                })
            },
            message_has: |w| w.streams().then_some("expected content type"),
            note: "streams check the content type; kserve_v2 and http accept any label and judge the body (an HTML page where JSON should be)",
        },
        Fault {
            name: "http2_stream_reset",
            serve: |w| {
                let cert = tls::self_signed(&["localhost"]);
                Target::trusting(h2_reset_server(*w, &cert), &cert)
            },
            expect: |_| Some(R::Truncated),
            message_has: |_| Some("stream error received"),
            note: "RST_STREAM after the head and a first token (half the body for JSON), over TLS with ALPN h2",
        },
        Fault {
            name: "close_after_accept",
            serve: |_| Target::at(http_base(closing_server())),
            expect: |_| Some(R::Truncated),
            message_has: none,
            note: "connected, then closed before any response: the answer is cut off before it began",
        },
    ]
}
