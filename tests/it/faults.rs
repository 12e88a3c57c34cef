//! The fault matrix: every probe kind against every endpoint fault we know of, each with
//! the reason a user should see, the run ending by its timeout (2 s, first token 1 s) and
//! no panic. Faults are served byte-exact, built from each kind's own wire format where
//! the fault is protocol-level. The faults that could grow memory (an endless stream, a
//! 100 MB line, an oversized body) also run through the real binary while its peak RSS
//! is watched. `cargo test --test it faults:: -- --nocapture` prints the matrix that
//! RELIABILITY.md records.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;
use inferprobe::outcome::FailureReason;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every run's limits, and how far past the total timeout a run may end.
const LIMITS: &str = "timeout: 2s\nfirst_token_timeout: 1s";
const TIMEOUT: Duration = Duration::from_secs(2);
const MARGIN: Duration = Duration::from_millis(600);

/// How long a stalled server keeps its socket open: far past any run's end.
const STALL: Duration = Duration::from_secs(10);

/// The default `max_response_bytes` (8 MiB): the bodies below are built to exceed it.
const MB: u64 = 1024 * 1024;

/// The faults that run in-process and would be only as "bounded" as the test process:
/// these also run through the binary with its peak RSS watched.
const MEMORY_FAULTS: [&str; 3] = ["endless_stream", "line_100mb", "oversized_body"];

/// A generous bound on the agent's peak RSS while all eight kinds read one of the memory
/// faults at once. The agent's own caps allow at most: one 1 MiB event buffer per
/// streaming kind (6), the 8 MiB body cap for kserve_v2 (which parses the whole body), 64
/// KiB for http, plus the runtime and TLS roots (~10-20 MB): ~35 MB. A reader that kept
/// the 100 MB line, or the 20 MB body of each of eight kinds, would blow past it.
const RSS_BOUND_KB: u64 = 100 * 1024;

// ---------------------------------------------------------------------------------------
// Each kind's wire format.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Sse,
    Ndjson,
    /// One JSON document (kserve_v2, http): no events, TTFB and total only.
    Json,
}

#[derive(Debug, Clone, Copy)]
struct Wire {
    kind: &'static str,
    path: &'static str,
    framing: Framing,
}

const WIRES: [Wire; 9] = [
    Wire {
        kind: "openai_chat",
        path: "/v1/chat/completions",
        framing: Framing::Sse,
    },
    Wire {
        kind: "openai_completions",
        path: "/v1/completions",
        framing: Framing::Sse,
    },
    Wire {
        kind: "openai_responses",
        path: "/v1/responses",
        framing: Framing::Sse,
    },
    Wire {
        kind: "anthropic",
        path: "/v1/messages",
        framing: Framing::Sse,
    },
    Wire {
        kind: "ollama",
        path: "/api/chat",
        framing: Framing::Ndjson,
    },
    Wire {
        kind: "tgi",
        path: "/generate_stream",
        framing: Framing::Sse,
    },
    Wire {
        kind: "llamacpp",
        path: "/completion",
        framing: Framing::Sse,
    },
    Wire {
        kind: "kserve_v2",
        path: "/v2/models/m/infer",
        framing: Framing::Json,
    },
    Wire {
        kind: "http",
        path: "/health",
        framing: Framing::Json,
    },
];

impl Wire {
    fn streams(&self) -> bool {
        self.framing != Framing::Json
    }

    /// The probe's YAML against `base` (scheme and authority).
    fn yaml(&self, base: &str, extra: &str) -> String {
        let specific = match self.kind {
            "kserve_v2" => "input: {name: x, datatype: FP32, shape: [1, 2], data: [0.1, 0.2]}",
            // A health check: the body must say it is healthy.
            "http" => "expect: {contains: '\"status\":\"ok\"'}",
            _ => "model: m\nmax_tokens: 7",
        };
        format!(
            "name: {}\nkind: {}\nurl: {base}{}\n{LIMITS}\n{specific}\n{extra}",
            self.kind, self.kind, self.path
        )
    }

    fn content_type(&self) -> &'static str {
        match self.framing {
            Framing::Sse => "text/event-stream",
            Framing::Ndjson => "application/x-ndjson",
            Framing::Json => "application/json",
        }
    }

    /// A 200 head. Streams are close-delimited; a JSON body of `len` bytes says so.
    fn head(&self, len: Option<usize>) -> String {
        let length = len
            .map(|n| format!("Content-Length: {n}\r\n"))
            .unwrap_or_default();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\n{length}Connection: close\r\n\r\n",
            self.content_type()
        )
    }

    fn frame(&self, event: Option<&str>, data: &str) -> String {
        match (self.framing, event) {
            (Framing::Ndjson, _) => format!("{data}\n"),
            (_, Some(name)) => format!("event: {name}\ndata: {data}\n\n"),
            (_, None) => format!("data: {data}\n\n"),
        }
    }

    /// What a healthy stream sends before any content (nothing that counts as a token).
    fn preamble(&self) -> String {
        match self.kind {
            "openai_chat" => self.frame(
                None,
                r#"{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            ),
            "openai_responses" => self.frame(
                Some("response.created"),
                r#"{"type":"response.created","response":{"id":"r","status":"in_progress"}}"#,
            ),
            "anthropic" => self.frame(
                Some("message_start"),
                r#"{"type":"message_start","message":{"id":"m1","model":"m","usage":{"input_tokens":5,"output_tokens":1}}}"#,
            ) + &self.frame(Some("ping"), r#"{"type":"ping"}"#),
            _ => String::new(),
        }
    }

    /// One content event carrying `text` (a JSON string body, already escaped).
    fn token(&self, text: &str) -> String {
        match self.kind {
            "openai_chat" => self.frame(
                None,
                &format!(r#"{{"model":"m","choices":[{{"index":0,"delta":{{"content":"{text}"}}}}]}}"#),
            ),
            "openai_completions" => self.frame(
                None,
                &format!(r#"{{"model":"m","choices":[{{"index":0,"text":"{text}"}}]}}"#),
            ),
            "openai_responses" => self.frame(
                Some("response.output_text.delta"),
                &format!(r#"{{"type":"response.output_text.delta","delta":"{text}"}}"#),
            ),
            "anthropic" => self.frame(
                Some("content_block_delta"),
                &format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{text}"}}}}"#),
            ),
            "ollama" => self.frame(
                None,
                &format!(r#"{{"model":"m","message":{{"role":"assistant","content":"{text}"}},"done":false}}"#),
            ),
            "tgi" => self.frame(
                None,
                &format!(r#"{{"index":1,"token":{{"id":1,"text":"{text}","logprob":-0.5,"special":false}},"generated_text":null,"details":null}}"#),
            ),
            "llamacpp" => self.frame(
                None,
                &format!(r#"{{"index":0,"content":"{text}","tokens":[1],"stop":false,"tokens_predicted":1}}"#),
            ),
            other => unreachable!("{other} does not stream"),
        }
    }

    /// The protocol's finish signal and terminator.
    fn end(&self) -> String {
        match self.kind {
            "openai_chat" => {
                self.frame(
                    None,
                    r#"{"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                ) + "data: [DONE]\n\n"
            }
            "openai_completions" => {
                self.frame(
                    None,
                    r#"{"model":"m","choices":[{"index":0,"text":"","finish_reason":"stop"}]}"#,
                ) + "data: [DONE]\n\n"
            }
            "openai_responses" => self.frame(
                Some("response.completed"),
                r#"{"type":"response.completed","response":{"status":"completed","usage":{"output_tokens":3}}}"#,
            ),
            "anthropic" => {
                self.frame(
                    Some("message_delta"),
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
                ) + &self.frame(Some("message_stop"), r#"{"type":"message_stop"}"#)
            }
            "ollama" => self.frame(None, r#"{"model":"m","done":true,"eval_count":3}"#),
            "tgi" => self.frame(
                None,
                r#"{"index":2,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":"Hi there","details":{"finish_reason":"eos_token","generated_tokens":3}}"#,
            ),
            "llamacpp" => self.frame(
                None,
                r#"{"index":0,"content":"","tokens":[],"stop":true,"model":"m","tokens_predicted":3,"stop_type":"eos"}"#,
            ),
            other => unreachable!("{other} does not stream"),
        }
    }

    /// A healthy body: a whole stream, or the JSON document.
    fn body(&self) -> String {
        match self.kind {
            "kserve_v2" => {
                r#"{"model_name":"m","model_version":"1","outputs":[{"name":"predict","shape":[1,1],"datatype":"INT64","data":[3]}]}"#.to_owned()
            }
            "http" => r#"{"status":"ok"}"#.to_owned(),
            _ => self.preamble() + &self.token("Hi") + &self.token(" there") + &self.end(),
        }
    }

    /// The whole healthy response.
    fn healthy(&self) -> Vec<u8> {
        let body = self.body();
        let len = (!self.streams()).then_some(body.len());
        (self.head(len) + &body).into_bytes()
    }

    /// The protocol's own in-band error, as its servers send it (llm-protocols.md);
    /// `None` for the kinds whose protocol has none.
    fn in_band_error(&self) -> Option<String> {
        let message = "engine failure mid-stream";
        Some(match self.kind {
            // vLLM and llama.cpp keep 200 and send an error object as a data event.
            "openai_chat" | "openai_completions" => {
                self.frame(
                    None,
                    &format!(r#"{{"error":{{"object":"error","message":"{message}","type":"InternalServerError","code":500}}}}"#),
                ) + "data: [DONE]\n\n"
            }
            "openai_responses" => self.frame(
                Some("response.failed"),
                &format!(r#"{{"type":"response.failed","response":{{"status":"failed","error":{{"code":"server_error","message":"{message}"}}}}}}"#),
            ),
            "anthropic" => self.frame(
                Some("error"),
                &format!(r#"{{"type":"error","error":{{"type":"overloaded_error","message":"{message}"}}}}"#),
            ),
            "ollama" => self.frame(None, &format!(r#"{{"error":"{message}"}}"#)),
            "tgi" => self.frame(None, &format!(r#"{{"error":"{message}","error_type":"generation"}}"#)),
            // llama.cpp's own `error:` field, not `data:`.
            "llamacpp" => format!(
                "error: {{\"code\":500,\"message\":\"{message}\",\"type\":\"server_error\"}}\n\n"
            ),
            _ => return None,
        })
    }
}

fn status_reply(status: &str, content_type: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn http_base(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}")
}

// ---------------------------------------------------------------------------------------
// TLS servers: certificates generated here, trusted (or not) per fault.

/// A certificate for `names`, valid from `from` to `until` (years), self-signed.
fn certificate(
    names: &[&str],
    from: i32,
    until: i32,
) -> (
    rustls::pki_types::CertificateDer<'static>,
    PrivateKeyDer<'static>,
    String,
) {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(until, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let pem = cert.pem();
    (
        cert.der().clone(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        pem,
    )
}

/// Writes `pem` to a fresh file, for `tls.ca_file`.
fn ca_file(pem: &str) -> std::path::PathBuf {
    let path = temp_dir("faults-ca").join("ca.pem");
    std::fs::write(&path, pem).unwrap();
    path
}

fn tls_acceptor(
    cert: rustls::pki_types::CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    alpn: &[u8],
) -> tokio_rustls::TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A listener on a fresh port, usable from synchronous setup code inside the runtime.
fn tokio_listener() -> (tokio::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (tokio::net::TcpListener::from_std(l).unwrap(), port)
}

/// An HTTPS/1.1 server answering `reply` once the handshake succeeds (it must not, in
/// the TLS faults: the reply proves it if it does).
fn https_server(
    cert: rustls::pki_types::CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    reply: Vec<u8>,
) -> u16 {
    let acceptor = tls_acceptor(cert, key, b"http/1.1");
    let (listener, port) = tokio_listener();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, reply) = (acceptor.clone(), reply.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tls.write_all(&reply).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

/// An HTTP/2 server (ALPN h2) that answers 200 with the start of a healthy body, then
/// resets the stream (RST_STREAM INTERNAL_ERROR) while the connection stays up.
fn h2_reset_server(
    wire: Wire,
    cert: rustls::pki_types::CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> u16 {
    let acceptor = tls_acceptor(cert, key, b"h2");
    let (listener, port) = tokio_listener();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut conn) = h2::server::handshake(tls).await else {
                    return;
                };
                while let Some(Ok((_request, mut respond))) = conn.accept().await {
                    tokio::spawn(async move {
                        let response = http::Response::builder()
                            .status(200)
                            .header("content-type", wire.content_type())
                            .body(())
                            .unwrap();
                        let Ok(mut send) = respond.send_response(response, false) else {
                            return;
                        };
                        let body = wire.body();
                        let part = if wire.streams() {
                            wire.preamble() + &wire.token("Hi")
                        } else {
                            body[..body.len() / 2].to_owned()
                        };
                        let _ = send.send_data(bytes::Bytes::from(part), false);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        send.send_reset(h2::Reason::INTERNAL_ERROR);
                    });
                }
            });
        }
    });
    port
}

/// A server that accepts and at once closes, before reading a byte.
fn closing_server() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            drop(s);
        }
    });
    addr
}

// ---------------------------------------------------------------------------------------
// The table.

/// Where one run goes: the base URL, extra YAML, and a check on what the server saw.
struct Target {
    base: String,
    extra: String,
    after: Option<Box<dyn Fn() -> Result<(), String> + Send>>,
}

impl Target {
    fn at(base: String) -> Self {
        Target {
            base,
            extra: String::new(),
            after: None,
        }
    }

    fn scripted(script: impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static) -> Self {
        Target::at(http_base(scripted_server(script)))
    }

    fn reply(bytes: Vec<u8>) -> Self {
        Target::scripted(move |_| vec![Step::Write(bytes.clone())])
    }
}

/// One fault: how to serve it to a kind, the reason each kind must report (`None`:
/// success), text the failure message must hold, and a note for debatable reasons.
struct Fault {
    name: &'static str,
    serve: fn(&Wire) -> Target,
    expect: fn(&Wire) -> Option<FailureReason>,
    message_has: fn(&Wire) -> Option<&'static str>,
    note: &'static str,
}

use FailureReason as R;

fn none(_: &Wire) -> Option<&'static str> {
    None
}

fn faults() -> Vec<Fault> {
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
                let (cert, key, pem) = certificate(&["localhost"], 2020, 2021);
                let port = https_server(cert, key, w.healthy());
                Target {
                    base: format!("https://localhost:{port}"),
                    extra: format!("tls: {{ca_file: {}}}", ca_file(&pem).display()),
                    after: None,
                }
            },
            expect: |_| Some(R::Tls),
            message_has: |_| Some("expired"),
            note: "trusted via ca_file, right name: only the dates are wrong",
        },
        Fault {
            name: "tls_self_signed_certificate",
            serve: |w| {
                let (cert, key, _) = certificate(&["localhost"], 2024, 2099);
                Target::at(format!(
                    "https://localhost:{}",
                    https_server(cert, key, w.healthy())
                ))
            },
            expect: |_| Some(R::Tls),
            message_has: |_| Some("UnknownIssuer"),
            note: "",
        },
        Fault {
            name: "tls_wrong_host_certificate",
            serve: |w| {
                let (cert, key, pem) = certificate(&["other.example"], 2024, 2099);
                let port = https_server(cert, key, w.healthy());
                Target {
                    base: format!("https://localhost:{port}"),
                    extra: format!("tls: {{ca_file: {}}}", ca_file(&pem).display()),
                    after: None,
                }
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
            expect: |_| Some(R::Http5xx),
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
                let (cert, key, pem) = certificate(&["localhost"], 2024, 2099);
                let port = h2_reset_server(*w, cert, key);
                Target {
                    base: format!("https://localhost:{port}"),
                    extra: format!("tls: {{ca_file: {}}}", ca_file(&pem).display()),
                    after: None,
                }
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

/// A healthy response up to its first token (streams) or half its body (JSON).
fn partial(w: &Wire) -> Vec<u8> {
    if w.streams() {
        (w.head(None) + &w.preamble() + &w.token("Hi")).into_bytes()
    } else {
        let body = w.body();
        (w.head(Some(body.len())) + &body[..body.len() / 2]).into_bytes()
    }
}

fn endless(w: &Wire) -> impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static {
    let (start, again) = if w.streams() {
        (
            (w.head(None) + &w.preamble()).into_bytes(),
            w.token("more").into_bytes(),
        )
    } else {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n";
        (head.as_bytes().to_vec(), b"1\r\n \r\n".to_vec())
    };
    move |_| {
        vec![
            Step::Write(start.clone()),
            Step::Repeat {
                bytes: again.clone(),
                total: u64::MAX,
                gap: Duration::from_millis(2),
            },
        ]
    }
}

fn line_100mb(w: &Wire) -> impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static {
    let total = 100 * MB;
    let start = match w.framing {
        Framing::Sse => w.head(None) + "data: ",
        Framing::Ndjson => w.head(None),
        Framing::Json => w.head(Some(total as usize)),
    };
    move |_| {
        vec![
            Step::Write(start.clone().into_bytes()),
            Step::Repeat {
                bytes: vec![b'a'; 64 * 1024],
                total,
                gap: Duration::ZERO,
            },
        ]
    }
}

fn oversized(w: &Wire) -> impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static {
    let total = 20 * MB;
    let (start, again) = match w.kind {
        "kserve_v2" => {
            let open = r#"{"outputs":[{"name":"p","shape":[1,-1],"datatype":"INT64","data":["#;
            (
                w.head(Some(open.len() + total as usize)) + open,
                b"0,".repeat(1024),
            )
        }
        "http" => {
            let open = r#"{"status":"ok","pad":""#;
            (w.head(Some(open.len() + total as usize)) + open, vec![b'a'; 4096])
        }
        // Events of 4 KB: few enough that parsing keeps up in a debug build.
        _ => (
            w.head(None) + &w.preamble(),
            w.token(&"word ".repeat(800)).into_bytes(),
        ),
    };
    move |_| {
        vec![
            Step::Write(start.clone().into_bytes()),
            Step::Repeat {
                bytes: again.clone(),
                total,
                gap: Duration::ZERO,
            },
        ]
    }
}

// ---------------------------------------------------------------------------------------
// Running it.

/// One cell of the matrix.
struct Cell {
    fault: &'static str,
    kind: &'static str,
    expected: Option<FailureReason>,
    got: Option<FailureReason>,
    message: String,
    elapsed: Duration,
    problems: Vec<String>,
}

fn label(r: Option<FailureReason>) -> &'static str {
    r.map(FailureReason::as_str).unwrap_or("success")
}

async fn run_cell(fault: &Fault, wire: Wire) -> tokio::task::JoinHandle<Cell> {
    let target = (fault.serve)(&wire);
    let yaml = wire.yaml(&target.base, &target.extra);
    let (name, expected, message_has) = (fault.name, (fault.expect)(&wire), (fault.message_has)(&wire));
    tokio::spawn(async move {
        let started = Instant::now();
        // A panic inside the run fails the task: the join below reports it.
        let o = run_probe(&yaml).await;
        let elapsed = started.elapsed();
        let obs = &o.observation;
        let got = obs.failure().map(|f| f.reason);
        let message = obs.failure().map(|f| f.message.clone()).unwrap_or_default();
        let mut problems = Vec::new();
        if got != expected {
            problems.push(format!(
                "expected {}, got {}: {message}",
                label(expected),
                label(got)
            ));
        }
        if let Some(needle) = message_has
            && !message.contains(needle)
        {
            problems.push(format!("message lacks {needle:?}: {message}"));
        }
        if elapsed > TIMEOUT + MARGIN {
            problems.push(format!(
                "took {elapsed:?}, past the {TIMEOUT:?} timeout + {MARGIN:?}"
            ));
        }
        if let Some(after) = &target.after
            && let Err(e) = after()
        {
            problems.push(e);
        }
        Cell {
            fault: name,
            kind: wire.kind,
            expected,
            got,
            message,
            elapsed,
            problems,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_kind_against_every_fault() {
    // Heavy: the matrix and the binary runs load the two cores, and elapsed times are
    // asserted.
    let _alone = heavy();
    let faults = faults();
    let suite = Instant::now();
    let mut cells = Vec::new();
    // One fault at a time, its eight kinds at once.
    for fault in &faults {
        let mut runs = Vec::new();
        for wire in WIRES {
            runs.push(run_cell(fault, wire).await);
        }
        for (run, wire) in runs.into_iter().zip(WIRES) {
            match run.await {
                Ok(cell) => cells.push(cell),
                Err(e) => cells.push(Cell {
                    fault: fault.name,
                    kind: wire.kind,
                    expected: (fault.expect)(&wire),
                    got: None,
                    message: String::new(),
                    elapsed: Duration::ZERO,
                    problems: vec![format!("the run panicked: {e}")],
                }),
            }
        }
    }
    let wall = suite.elapsed();
    println!("{}", render(&faults, &cells, wall));
    let failed: Vec<String> = cells
        .iter()
        .flat_map(|c| {
            c.problems
                .iter()
                .map(move |p| format!("{} x {}: {p}", c.fault, c.kind))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} problems:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// The matrix as Markdown: one row per fault, one column per kind, each cell the reason
/// and elapsed time (a cell that failed its checks is marked ✗).
fn render(faults: &[Fault], cells: &[Cell], wall: Duration) -> String {
    let mut out = String::new();
    let kinds: Vec<&str> = WIRES.iter().map(|w| w.kind).collect();
    writeln!(out, "| fault | {} |", kinds.join(" | ")).unwrap();
    writeln!(out, "|---|{}", "---|".repeat(kinds.len())).unwrap();
    for fault in faults {
        let row: Vec<String> = kinds
            .iter()
            .map(|k| {
                let c = cells
                    .iter()
                    .find(|c| c.fault == fault.name && c.kind == *k)
                    .unwrap();
                let mark = match (c.problems.is_empty(), c.got == c.expected) {
                    (true, _) => String::new(),
                    (false, true) => " ✗".to_owned(),
                    (false, false) => format!(" ✗ (want {})", label(c.expected)),
                };
                format!("{} {:.2}s{mark}", label(c.got), c.elapsed.as_secs_f64())
            })
            .collect();
        writeln!(out, "| {} | {} |", fault.name, row.join(" | ")).unwrap();
    }
    writeln!(out).unwrap();
    for fault in faults.iter().filter(|f| !f.note.is_empty()) {
        writeln!(out, "- {}: {}", fault.name, fault.note).unwrap();
    }
    let passed = cells.iter().filter(|c| c.problems.is_empty()).count();
    let slowest = cells.iter().map(|c| c.elapsed).max().unwrap_or_default();
    writeln!(
        out,
        "\nfaults: {} (plus the healthy control); runs: {} ({} faulty, {} control); passed: {passed}; slowest run: {:.2}s; matrix wall time: {:.1}s",
        faults.len() - 1,
        cells.len(),
        cells.len() - WIRES.len(),
        WIRES.len(),
        slowest.as_secs_f64(),
        wall.as_secs_f64()
    )
    .unwrap();
    if let Some(c) = cells.iter().find(|c| c.fault == "http2_stream_reset") {
        writeln!(
            out,
            "example message (http2_stream_reset x {}): {}",
            c.kind, c.message
        )
        .unwrap();
    }
    out
}

/// Peak RSS (VmHWM, kB) of a process, from /proc.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_stays_bounded_through_the_binary() {
    // Heavy: the matrix and the binary runs load the two cores, and elapsed times are
    // asserted.
    let _alone = heavy();
    let faults = faults();
    let mut report = String::new();
    for name in MEMORY_FAULTS {
        let fault = faults.iter().find(|f| f.name == name).unwrap();
        // All eight kinds in one agent process, at once: the worst case for its memory.
        let mut yaml = String::from("probes:\n");
        for wire in WIRES {
            let target = (fault.serve)(&wire);
            for (i, line) in wire.yaml(&target.base, &target.extra).lines().enumerate() {
                let lead = if i == 0 { "  - " } else { "    " };
                writeln!(yaml, "{lead}{line}").unwrap();
            }
        }
        let dir = temp_dir("faults-rss");
        let config = dir.join("probes.yaml");
        std::fs::write(&config, &yaml).unwrap();
        let started = Instant::now();
        let (peak, output) = tokio::task::spawn_blocking(move || {
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_inferprobe"))
                .args(["once", "--format", "json", "-c"])
                .arg(&config)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let pid = child.id();
            // Poll the high-water mark while it runs; the last read before exit holds the peak.
            let watcher = std::thread::spawn(move || {
                let mut peak = 0;
                while let Some(kb) = vm_hwm_kb(pid) {
                    peak = peak.max(kb);
                    std::thread::sleep(Duration::from_millis(5));
                }
                peak
            });
            let output = child.wait_with_output().unwrap();
            (watcher.join().unwrap(), output)
        })
        .await
        .unwrap();
        let elapsed = started.elapsed();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let results: Vec<serde_json::Value> =
            stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(
            results.len(),
            WIRES.len(),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        for (wire, result) in WIRES.iter().zip(&results) {
            assert_eq!(result["kind"], wire.kind);
            assert_eq!(
                result["reason"].as_str(),
                (fault.expect)(wire).map(FailureReason::as_str),
                "{name} x {}: {}",
                wire.kind,
                result["message"]
            );
        }
        // The agent process must not exit with a panic or a signal: it reports failures.
        assert_eq!(output.status.code(), Some(1), "{name}: {:?}", output.status);
        assert!(elapsed < TIMEOUT + Duration::from_secs(3), "{name}: {elapsed:?}");
        let received: u64 = results
            .iter()
            .map(|r| r["bytes_received"].as_u64().unwrap_or(0))
            .sum();
        writeln!(
            report,
            "{name}: {} kinds at once, peak RSS {:.1} MB (bound {} MB), {:.1} MB received in total, {:.2}s",
            WIRES.len(),
            peak as f64 / 1024.0,
            RSS_BOUND_KB / 1024,
            received as f64 / MB as f64,
            elapsed.as_secs_f64()
        )
        .unwrap();
        assert!(peak > 0, "{name}: no VmHWM read");
        assert!(peak < RSS_BOUND_KB, "{name}: peak RSS {peak} kB");
    }
    println!("{report}");
}
