//! The simulator's gRPC side, on the same port as its HTTP/1.1 (a connection that opens
//! with HTTP/2's preface is served here): `grpc.health.v1.Health/Check` and
//! `inference.GRPCInferenceService` (ServerLive, ServerReady, ModelReady, ModelMetadata,
//! ModelInfer), with the script's processing time (`ttft`) and the gRPC faults.
//!
//! Per request, the `x-sim` metadata (a probe's `headers:`) overrides the script as the
//! query string does for HTTP: `x-sim: grpc_fault=unavailable&ttft=50ms` (with
//! `long_message=true`, a failed call's message runs to 5,000 characters); a status
//! fault's message quotes the `x-sim-echo` header, as servers that echo a request do.
//!
//! ModelInfer answers a deterministic "classifier": the label is the sum of the input's
//! values modulo 10 (for BYTES, their total length), as `predict` (INT64 [1, 1]) and
//! `predict_proba` (FP64 [1, 10]); in raw contents when the request sent raw contents,
//! typed ones otherwise. The messages are the prober's own (probe/grpc.rs), so both sides
//! agree by construction; tests against MLServer check them against a real server.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use clap::ValueEnum;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{Shared, SimRecord, drawn, script_for};
use crate::probe::grpc::{
    self, Flag, HealthCheckRequest, HealthCheckResponse, ModelInferRequest, ModelInferResponse,
    ModelMetadataResponse, ModelRef, Tensor, TensorContents, TensorMetadata,
};

/// HTTP/2's connection preface starts so; HTTP/1.1 request lines never do.
pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// What can go wrong in a gRPC answer, as servers and proxies show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GrpcFault {
    /// The call fails with UNAVAILABLE (a draining or overloaded server).
    Unavailable,
    /// RESOURCE_EXHAUSTED (a full queue, a rate limit).
    ResourceExhausted,
    /// DEADLINE_EXCEEDED (the server gave up within the call's grpc-timeout).
    DeadlineExceeded,
    /// UNIMPLEMENTED (no such method or service).
    Unimplemented,
    /// NOT_FOUND (no such model).
    NotFound,
    /// INVALID_ARGUMENT (a tensor the model does not take).
    InvalidArgument,
    /// INTERNAL (the model raised).
    Internal,
    /// UNKNOWN.
    Unknown,
    /// DATA_LOSS.
    DataLoss,
    /// Health NOT_SERVING; ModelReady `ready: false`.
    NotServing,
    /// The message, then the stream ends with no trailers: no grpc-status at all.
    NoStatus,
    /// A message prefix that promises more bytes than follow, then status OK.
    CutFrame,
    /// A prefix with an undefined compressed flag, then status OK.
    MalformedFrame,
    /// Headers, then the stream is reset (RST_STREAM) before any message.
    Reset,
    /// Read the call, never answer.
    Stall,
    /// HTTP 200 with text/html, as a proxy's error page.
    WrongContentType,
}

impl GrpcFault {
    /// The status a fault fails the call with, for the status faults.
    fn status(self) -> Option<tonic::Code> {
        use tonic::Code;
        Some(match self {
            GrpcFault::Unavailable => Code::Unavailable,
            GrpcFault::ResourceExhausted => Code::ResourceExhausted,
            GrpcFault::DeadlineExceeded => Code::DeadlineExceeded,
            GrpcFault::Unimplemented => Code::Unimplemented,
            GrpcFault::NotFound => Code::NotFound,
            GrpcFault::InvalidArgument => Code::InvalidArgument,
            GrpcFault::Internal => Code::Internal,
            GrpcFault::Unknown => Code::Unknown,
            GrpcFault::DataLoss => Code::DataLoss,
            _ => return None,
        })
    }
}

/// Serves one HTTP/2 connection until the client leaves.
pub(super) async fn serve(socket: TcpStream, shared: Arc<Shared>) {
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(answer(request, &shared).await) }
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(socket), service)
        .await;
}

/// A response body played frame by frame: data, trailers, or an error (hyper resets
/// the stream on an error).
struct Scripted(VecDeque<Result<Frame<Bytes>, std::io::Error>>);

impl hyper::body::Body for Scripted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front())
    }
}

type Response = http::Response<Scripted>;

fn response(content_type: &str, frames: Vec<Result<Frame<Bytes>, std::io::Error>>) -> Response {
    http::Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Scripted(frames.into()))
        .expect("a response from valid parts")
}

fn trailers(code: tonic::Code, message: &str) -> http::HeaderMap {
    let mut t = http::HeaderMap::new();
    t.insert("grpc-status", http::HeaderValue::from(code as i32));
    if !message.is_empty() {
        // grpc-message is percent-encoded UTF-8: everything but printable ASCII and `%`.
        let encoded: String = message
            .bytes()
            .map(|b| match b {
                b' '..=b'~' if b != b'%' => (b as char).to_string(),
                b => format!("%{b:02X}"),
            })
            .collect();
        if let Ok(v) = http::HeaderValue::from_str(&encoded) {
            t.insert("grpc-message", v);
        }
    }
    t
}

/// A call failed before any message: the status in the headers alone (Trailers-Only).
fn failed(code: tonic::Code, message: &str) -> Response {
    let mut r = response("application/grpc", Vec::new());
    r.headers_mut().extend(trailers(code, message));
    r
}

fn ok(message: &impl Message) -> Response {
    response(
        "application/grpc",
        vec![
            Ok(Frame::data(grpc::frame(message))),
            Ok(Frame::trailers(trailers(tonic::Code::Ok, ""))),
        ],
    )
}

async fn answer(request: http::Request<Incoming>, shared: &Shared) -> Response {
    let received = Instant::now();
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let path = request.uri().path().to_owned();
    let overrides = request
        .headers()
        .get("x-sim")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let script = script_for(&shared.script, &overrides);
    // A server that quotes the request in its error (a header carrying a key, as some
    // do), and one whose message runs on: what the probe must redact and bound.
    let echo = request
        .headers()
        .get("x-sim-echo")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let long = overrides.split('&').any(|kv| kv == "long_message=true");
    let fault = script.grpc_fault.filter(|_| drawn(&script, id));
    let mut record = SimRecord::new(id, &path, None, received);
    record.grpc_fault = fault;
    let body = match request.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return failed(tonic::Code::Internal, "the request broke"),
    };
    if fault == Some(GrpcFault::Stall) {
        shared.log.push(record.clone());
        // The client gives up; hyper drops this future with the connection or stream.
        std::future::pending::<()>().await;
    }
    tokio::time::sleep_until(received + script.ttft).await;
    record.headers_written = Some(Instant::now());
    let reply = match fault {
        Some(f) if f.status().is_some() => {
            let code = f.status().expect("checked");
            let mut message = format!("simulated {}: try again later", grpc::code_name(code));
            if let Some(echo) = &echo {
                message.push_str(&format!(" (request header: {echo})"));
            }
            if long {
                message.push_str(&" and again".repeat(500));
            }
            failed(code, &message)
        }
        Some(GrpcFault::WrongContentType) => {
            let mut r = response(
                "text/html",
                vec![Ok(Frame::data(Bytes::from_static(
                    b"<html>502 Bad Gateway</html>",
                )))],
            );
            *r.status_mut() = http::StatusCode::OK;
            r
        }
        Some(GrpcFault::Reset) => response(
            "application/grpc",
            vec![Err(std::io::Error::other("simulated reset"))],
        ),
        _ => route(&path, &body, fault),
    };
    let reply = match fault {
        Some(GrpcFault::NoStatus | GrpcFault::CutFrame | GrpcFault::MalformedFrame) => mangle(reply, fault),
        _ => reply,
    };
    record.done_written = Some(Instant::now());
    shared.log.push(record);
    reply
}

/// The framing faults, applied to a good answer's message.
fn mangle(reply: Response, fault: Option<GrpcFault>) -> Response {
    let (parts, Scripted(mut frames)) = reply.into_parts();
    let Some(Ok(first)) = frames.pop_front() else {
        return http::Response::from_parts(parts, Scripted(frames));
    };
    let Ok(data) = first.into_data() else {
        return http::Response::from_parts(parts, Scripted(frames));
    };
    let mut bytes = data.to_vec();
    let frames = match fault {
        Some(GrpcFault::NoStatus) => vec![Ok(Frame::data(Bytes::from(bytes)))],
        Some(GrpcFault::CutFrame) => {
            bytes.truncate(bytes.len().saturating_sub(3).max(5));
            let promised = (bytes.len() as u32 - 5) + 3;
            bytes[1..5].copy_from_slice(&promised.to_be_bytes());
            let mut v = vec![Ok(Frame::data(Bytes::from(bytes)))];
            v.extend(frames);
            v
        }
        _ => {
            bytes[0] = 7;
            let mut v = vec![Ok(Frame::data(Bytes::from(bytes)))];
            v.extend(frames);
            v
        }
    };
    http::Response::from_parts(parts, Scripted(frames.into()))
}

/// The good answers, by method.
fn route(path: &str, body: &[u8], fault: Option<GrpcFault>) -> Response {
    let not_serving = fault == Some(GrpcFault::NotServing);
    let message = match grpc::unframe(body) {
        Ok(m) => m,
        Err(f) => return failed(tonic::Code::Internal, &f.message),
    };
    let bad = |what: &str| failed(tonic::Code::InvalidArgument, what);
    match path {
        grpc::HEALTH_CHECK => {
            let Ok(req) = HealthCheckRequest::decode(message) else {
                return bad("not a HealthCheckRequest");
            };
            if !matches!(
                req.service.as_str(),
                "" | "inference" | "inference.GRPCInferenceService"
            ) {
                return failed(
                    tonic::Code::NotFound,
                    &format!("unknown service {:?}", req.service),
                );
            }
            ok(&HealthCheckResponse {
                status: if not_serving { 2 } else { 1 },
            })
        }
        grpc::SERVER_LIVE | grpc::SERVER_READY => ok(&Flag { value: !not_serving }),
        grpc::MODEL_READY => ok(&Flag { value: !not_serving }),
        grpc::MODEL_METADATA => {
            let Ok(req) = ModelRef::decode(message) else {
                return bad("not a ModelMetadataRequest");
            };
            ok(&ModelMetadataResponse {
                name: req.name,
                versions: vec!["1".into()],
                platform: "inferprobe-simulator".into(),
                inputs: vec![TensorMetadata {
                    name: "input-0".into(),
                    datatype: "FP32".into(),
                    shape: vec![-1, 64],
                }],
                outputs: vec![TensorMetadata {
                    name: "predict".into(),
                    datatype: "INT64".into(),
                    shape: vec![-1, 1],
                }],
            })
        }
        grpc::MODEL_INFER => {
            let Ok(req) = ModelInferRequest::decode(message) else {
                return bad("not a ModelInferRequest");
            };
            let Some(input) = req.inputs.first() else {
                return bad("no inputs");
            };
            let raw = !req.raw_input_contents.is_empty();
            let label = label_of(input, req.raw_input_contents.first());
            ok(&prediction(req.model_name, label, raw))
        }
        _ => failed(tonic::Code::Unimplemented, &format!("unknown method {path}")),
    }
}

/// The sum of the input's values modulo 10 (BYTES: their total length; raw contents: the
/// sum of their bytes).
fn label_of(input: &Tensor, raw: Option<&Vec<u8>>) -> i64 {
    let sum: f64 = match (raw, &input.contents) {
        (Some(raw), _) => raw.iter().map(|b| f64::from(*b)).sum(),
        (None, Some(c)) => {
            c.bool_contents
                .iter()
                .map(|b| f64::from(u8::from(*b)))
                .sum::<f64>()
                + c.int_contents.iter().map(|n| f64::from(*n)).sum::<f64>()
                + c.int64_contents.iter().map(|n| *n as f64).sum::<f64>()
                + c.uint_contents.iter().map(|n| f64::from(*n)).sum::<f64>()
                + c.uint64_contents.iter().map(|n| *n as f64).sum::<f64>()
                + c.fp32_contents.iter().map(|f| f64::from(*f)).sum::<f64>()
                + c.fp64_contents.iter().sum::<f64>()
                + c.bytes_contents.iter().map(|b| b.len() as f64).sum::<f64>()
        }
        (None, None) => 0.0,
    };
    (sum.abs().round() as i64) % 10
}

fn prediction(model_name: String, label: i64, raw: bool) -> ModelInferResponse {
    let proba: Vec<f64> = (0..10).map(|i| if i == label { 0.91 } else { 0.01 }).collect();
    let mut outputs = vec![
        Tensor {
            name: "predict".into(),
            datatype: "INT64".into(),
            shape: vec![1, 1],
            contents: None,
        },
        Tensor {
            name: "predict_proba".into(),
            datatype: "FP64".into(),
            shape: vec![1, 10],
            contents: None,
        },
    ];
    let mut raw_output_contents = Vec::new();
    if raw {
        raw_output_contents.push(label.to_le_bytes().to_vec());
        raw_output_contents.push(proba.iter().flat_map(|p| p.to_le_bytes()).collect());
    } else {
        outputs[0].contents = Some(TensorContents {
            int64_contents: vec![label],
            ..Default::default()
        });
        outputs[1].contents = Some(TensorContents {
            fp64_contents: proba,
            ..Default::default()
        });
    }
    ModelInferResponse {
        model_name,
        model_version: "1".into(),
        id: "inferprobe".into(),
        outputs,
        raw_output_contents,
    }
}
