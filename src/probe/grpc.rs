//! gRPC over the probes' own phase-timed HTTP/2: one unary call, framed by hand, so DNS,
//! connect, TLS and the first response byte are measured by the same client as every
//! HTTP kind (a gRPC channel would hide them). Shared by `kserve_v2_grpc` and
//! `grpc_health`, and by the simulator's side of both services.
//!
//! Wire facts (gRPC over HTTP/2, grpc/grpc doc/PROTOCOL-HTTP2.md): a call is `POST
//! /{package.Service}/{Method}` with `content-type: application/grpc`, `te: trailers` and
//! optionally `grpc-timeout` (`{n}m` for milliseconds). Each message is a 5-byte prefix
//! (1 byte compressed flag, 4 bytes big-endian length) and the protobuf bytes. The
//! answer is HTTP 200 whatever happened; the call's outcome is `grpc-status` (a decimal
//! code, 0 = OK) and `grpc-message` (percent-encoded UTF-8) in the trailers, or in the
//! headers alone when the server fails the call before any message ("Trailers-Only").
//!
//! The messages are derived by hand from the protocols' published field numbers and
//! types (no .proto file, no protoc), as push.rs does for remote_write:
//! `grpc.health.v1` (grpc/grpc doc/health-checking.md) and the Open Inference Protocol's
//! `inference.GRPCInferenceService` (KServe's "Open Inference Protocol" gRPC spec, the
//! same messages Triton and MLServer serve). Fields a probe never reads (`parameters`
//! maps) are left out: protobuf decoders skip fields they do not know.
//!
//! Imports config, net (through endpoint.rs), outcome and the redactor; tonic for the
//! status codes' names.

use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Arc;

use super::RunContext;
use super::endpoint::{self, Endpoint};
use crate::config::{Common, Diagnostics, ProbeConfig};
use crate::net::TlsRoots;
use crate::outcome::{Failure, FailureReason, Observation};

/// Response bytes kept for decoding: a classifier's answer is far smaller.
const MAX_KEPT_RESPONSE: usize = 16 * 1024 * 1024;

/// `grpc.health.v1.Health/Check`.
pub(crate) const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
/// `inference.GRPCInferenceService`'s methods.
pub(crate) const SERVER_LIVE: &str = "/inference.GRPCInferenceService/ServerLive";
pub(crate) const SERVER_READY: &str = "/inference.GRPCInferenceService/ServerReady";
pub(crate) const MODEL_READY: &str = "/inference.GRPCInferenceService/ModelReady";
pub(crate) const MODEL_METADATA: &str = "/inference.GRPCInferenceService/ModelMetadata";
pub(crate) const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// grpc.health.v1: `HealthCheckRequest { string service = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

/// grpc.health.v1: `HealthCheckResponse { ServingStatus status = 1; }`, the enum
/// UNKNOWN = 0, SERVING = 1, NOT_SERVING = 2, SERVICE_UNKNOWN = 3.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// (`ServerLiveRequest` and `ServerReadyRequest` are empty messages.)
/// `ServerLiveResponse { bool live = 1; }`, `ServerReadyResponse { bool ready = 1; }`,
/// `ModelReadyResponse { bool ready = 1; }`: one bool at tag 1.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Flag {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

/// `ModelReadyRequest` and `ModelMetadataRequest`: `{ string name = 1; string version = 2; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ModelRef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `ModelMetadataResponse.TensorMetadata { string name = 1; string datatype = 2; repeated int64 shape = 3; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TensorMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}

/// `ModelMetadataResponse { string name = 1; repeated string versions = 2; string platform = 3;
/// repeated TensorMetadata inputs = 4; repeated TensorMetadata outputs = 5; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ModelMetadataResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "2")]
    pub versions: Vec<String>,
    #[prost(string, tag = "3")]
    pub platform: String,
    #[prost(message, repeated, tag = "4")]
    pub inputs: Vec<TensorMetadata>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<TensorMetadata>,
}

/// `InferTensorContents`: one repeated field per datatype family (FP16 and BF16 have
/// none: they travel only as raw contents).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TensorContents {
    #[prost(bool, repeated, tag = "1")]
    pub bool_contents: Vec<bool>,
    /// INT8, INT16, INT32.
    #[prost(int32, repeated, tag = "2")]
    pub int_contents: Vec<i32>,
    #[prost(int64, repeated, tag = "3")]
    pub int64_contents: Vec<i64>,
    /// UINT8, UINT16, UINT32.
    #[prost(uint32, repeated, tag = "4")]
    pub uint_contents: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    pub uint64_contents: Vec<u64>,
    #[prost(float, repeated, tag = "6")]
    pub fp32_contents: Vec<f32>,
    #[prost(double, repeated, tag = "7")]
    pub fp64_contents: Vec<f64>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub bytes_contents: Vec<Vec<u8>>,
}

/// `ModelInferRequest.InferInputTensor` and `ModelInferResponse.InferOutputTensor`: `{ string
/// name = 1; string datatype = 2; repeated int64 shape = 3; (parameters = 4)
/// InferTensorContents contents = 5; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Tensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(message, optional, tag = "5")]
    pub contents: Option<TensorContents>,
}

/// `ModelInferRequest.InferRequestedOutputTensor { string name = 1; (parameters = 2) }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RequestedOutput {
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `ModelInferRequest { string model_name = 1; string model_version = 2; string id = 3;
/// (parameters = 4) repeated InferInputTensor inputs = 5; repeated
/// InferRequestedOutputTensor outputs = 6; repeated bytes raw_input_contents = 7; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ModelInferRequest {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<Tensor>,
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<RequestedOutput>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub raw_input_contents: Vec<Vec<u8>>,
}

/// `ModelInferResponse { string model_name = 1; string model_version = 2; string id = 3;
/// (parameters = 4) repeated InferOutputTensor outputs = 5; repeated bytes
/// raw_output_contents = 6; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ModelInferResponse {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<Tensor>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub raw_output_contents: Vec<Vec<u8>>,
}

/// One message in gRPC's length-prefixed framing, uncompressed.
pub(crate) fn frame(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(5 + len);
    out.put_u8(0);
    out.put_u32(len as u32);
    message
        .encode(&mut out)
        .expect("a BytesMut with room for the message");
    out.freeze()
}

/// The one message of a unary response body: exactly one uncompressed frame. A frame
/// cut short is a truncated answer; anything else that is not one whole frame does not
/// follow the protocol.
pub(crate) fn unframe(body: &[u8]) -> Result<&[u8], Failure> {
    if body.is_empty() {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            "the call succeeded (grpc-status 0) with no response message",
        ));
    }
    let Some((prefix, rest)) = body.split_first_chunk::<5>() else {
        return Err(Failure::new(
            FailureReason::Truncated,
            format!(
                "the response ended inside a message's 5-byte prefix ({} bytes)",
                body.len()
            ),
        ));
    };
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    match prefix[0] {
        0 => {}
        // We send no grpc-accept-encoding, so a compressed message was never asked for.
        1 => {
            return Err(Failure::new(
                FailureReason::InvalidResponse,
                "the response message is compressed, which the probe did not ask for",
            ));
        }
        flag => {
            return Err(Failure::new(
                FailureReason::InvalidResponse,
                format!("malformed gRPC frame: compressed flag {flag} (0 or 1)"),
            ));
        }
    }
    if rest.len() < len {
        return Err(Failure::new(
            FailureReason::Truncated,
            format!(
                "the response message ended after {} of its {len} bytes",
                rest.len()
            ),
        ));
    }
    if rest.len() > len {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "{} bytes after the one response message of a unary call",
                rest.len() - len
            ),
        ));
    }
    Ok(rest)
}

/// The failure reason of a gRPC status other than OK. A status is the server's answer
/// (a call that got no connection fails in the transport, as `connect`), so UNAVAILABLE
/// is the server's trouble, as a 503 is.
pub(crate) fn reason_for(code: tonic::Code) -> FailureReason {
    use tonic::Code;
    match code {
        Code::ResourceExhausted => FailureReason::RateLimited,
        Code::DeadlineExceeded => FailureReason::TimeoutTotal,
        // The caller's fault, as a 4xx is.
        Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::Unauthenticated => FailureReason::Http4xx,
        // The server's, as a 5xx is.
        Code::Unavailable
        | Code::Internal
        | Code::Unknown
        | Code::DataLoss
        | Code::Cancelled
        | Code::Aborted => FailureReason::Http5xx,
        Code::Ok => FailureReason::InvalidResponse,
    }
}

/// The upper-case name gRPC's documentation gives a code (`RESOURCE_EXHAUSTED`).
pub(crate) fn code_name(code: tonic::Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// A call's status as the server sent it: `Ok(None)` without a `grpc-status`,
/// `Err` for one that is not a status code. Parsed here rather than with
/// `tonic::Status::from_header_map`, which panics on a malformed
/// `grpc-status-details-bin`: a server's bytes must never crash the agent.
fn status_of(headers: &http::HeaderMap) -> Result<Option<(tonic::Code, String)>, Failure> {
    let Some(raw) = headers.get("grpc-status") else {
        return Ok(None);
    };
    let code = std::str::from_utf8(raw.as_bytes())
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|n| (0..=16).contains(n))
        .ok_or_else(|| {
            Failure::new(
                FailureReason::InvalidResponse,
                format!(
                    "grpc-status {:?} is not a gRPC status code (0 to 16)",
                    super::preview(&String::from_utf8_lossy(raw.as_bytes()))
                ),
            )
        })?;
    let message = headers
        .get("grpc-message")
        .map(|m| crate::redact::percent_decode(&String::from_utf8_lossy(m.as_bytes())))
        .unwrap_or_default();
    Ok(Some((tonic::Code::from_i32(code), message)))
}

/// The failure for a status other than OK: the code's name and the server's message,
/// secrets removed before it is cut to one line.
fn status_failure(code: tonic::Code, message: &str, endpoint: &Endpoint) -> Failure {
    let mut text = format!("gRPC {}", code_name(code));
    let cleaned = endpoint.redactor().clean(message);
    if let Some(detail) = endpoint::error_detail(cleaned.as_bytes()) {
        text.push_str(": ");
        text.push_str(&detail);
    }
    Failure::new(reason_for(code), text)
}

/// The endpoint of a gRPC probe: the probe's URL is the server (`http://host:port`,
/// plaintext HTTP/2 with prior knowledge, or `https://`, TLS with ALPN h2), each call
/// names its own path.
pub(crate) fn endpoint(
    config: &Arc<ProbeConfig>,
    roots: &TlsRoots,
) -> Result<Endpoint, crate::net::TlsSetupError> {
    Ok(Endpoint::build(
        config,
        roots,
        &[
            (http::header::CONTENT_TYPE, "application/grpc"),
            (http::header::TE, "trailers"),
        ],
    )?
    .http2_only())
}

/// A gRPC probe's url names the server only: every call has its own path, and a query
/// string has nowhere to go.
pub(crate) fn check_server_url(cx: &mut Diagnostics, keys: &Common<'_>) {
    if let Some(url) = keys.url
        && (!matches!(url.path(), "" | "/") || url.query().is_some())
    {
        cx.error(
            keys.probe,
            &format!("{}.url", keys.prefix),
            format!(
                "a gRPC server's url is its scheme, host and port only (http://host:port for plaintext HTTP/2, https://host:port for TLS), not {:?}: kind {} calls its own methods",
                url.path_and_query().map(|p| p.as_str()).unwrap_or_default(),
                keys.kind.as_str()
            ),
        );
    }
}

/// A call's request, built before the clock starts. `grpc-timeout` tells the server the
/// run's budget, so a server that cannot answer in time says DEADLINE_EXCEEDED.
pub(crate) fn request(
    endpoint: &Endpoint,
    path: &str,
    message: Bytes,
    timeout: std::time::Duration,
) -> http::Request<http_body_util::Full<Bytes>> {
    let mut request = endpoint.request_to(&http::Method::POST, path, message);
    if let Ok(v) = http::HeaderValue::from_str(&format!("{}m", timeout.as_millis().clamp(1, 99_999_999))) {
        request.headers_mut().insert("grpc-timeout", v);
    }
    request
}

/// Makes one unary call: sends, checks the HTTP status and content type, reads the body
/// and its trailers within the run's deadline, and judges `grpc-status`. `Some` with the
/// decoded message on OK; `None` with `obs.result` set otherwise. Marks the end.
pub(crate) async fn call<M: prost::Message + Default>(
    endpoint: &Endpoint,
    request: http::Request<http_body_util::Full<Bytes>>,
    cx: &RunContext,
    obs: &mut Observation,
) -> Option<M> {
    let mut response = endpoint
        .open(request, cx, obs, cx.deadline, FailureReason::TimeoutTotal)
        .await?;
    let headers = response.response.headers().clone();
    let result = judge(endpoint, &headers, &mut response, cx, obs).await;
    match result {
        Ok(message) => Some(message),
        Err(failure) => {
            obs.result = Err(failure);
            None
        }
    }
}

async fn judge<M: prost::Message + Default>(
    endpoint: &Endpoint,
    headers: &http::HeaderMap,
    response: &mut crate::net::ResponseStream<'_>,
    cx: &RunContext,
    obs: &mut Observation,
) -> Result<M, Failure> {
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    // A server that fails the call at once answers with headers alone (Trailers-Only).
    if let Some((code, message)) = status_of(headers)?
        && code != tonic::Code::Ok
    {
        obs.marks.end = Some(std::time::Instant::now());
        return Err(status_failure(code, &message, endpoint));
    }
    if !content_type.starts_with("application/grpc") {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "content-type {:?}, not application/grpc: is this a gRPC server?",
                super::preview(content_type)
            ),
        ));
    }
    let body = endpoint::read_body(&mut response.body, MAX_KEPT_RESPONSE, cx, obs).await?;
    let status = match response.body.trailers() {
        Some(trailers) => status_of(trailers)?,
        None => None,
    };
    let status = match status {
        Some(s) => Some(s),
        None => status_of(headers)?,
    };
    let Some((code, message)) = status else {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            "the response ended without a grpc-status",
        ));
    };
    if code != tonic::Code::Ok {
        return Err(status_failure(code, &message, endpoint));
    }
    let bytes = unframe(&body)?;
    M::decode(bytes).map_err(|e| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!("the response message is not what the method returns: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_code_has_its_reason() {
        use tonic::Code;
        let cases = [
            (Code::Unavailable, FailureReason::Http5xx),
            (Code::ResourceExhausted, FailureReason::RateLimited),
            (Code::DeadlineExceeded, FailureReason::TimeoutTotal),
            (Code::Unimplemented, FailureReason::Http4xx),
            (Code::NotFound, FailureReason::Http4xx),
            (Code::InvalidArgument, FailureReason::Http4xx),
            (Code::Unauthenticated, FailureReason::Http4xx),
            (Code::PermissionDenied, FailureReason::Http4xx),
            (Code::Internal, FailureReason::Http5xx),
            (Code::Unknown, FailureReason::Http5xx),
            (Code::DataLoss, FailureReason::Http5xx),
        ];
        for (code, reason) in cases {
            assert_eq!(reason_for(code), reason, "{code:?}");
        }
        assert_eq!(code_name(Code::ResourceExhausted), "RESOURCE_EXHAUSTED");
        assert_eq!(code_name(Code::Unavailable), "UNAVAILABLE");
    }

    #[test]
    fn frames_round_trip_and_malformed_ones_are_told_apart() {
        let message = HealthCheckRequest {
            service: "digits".into(),
        };
        let framed = frame(&message);
        assert_eq!(&framed[..5], &[0, 0, 0, 0, 8]);
        let inner = unframe(&framed).unwrap();
        assert_eq!(
            <HealthCheckRequest as prost::Message>::decode(inner).unwrap(),
            message
        );
        let reason = |b: &[u8]| unframe(b).unwrap_err().reason;
        assert_eq!(reason(&framed[..7]), FailureReason::Truncated);
        assert_eq!(reason(&framed[..3]), FailureReason::Truncated);
        assert_eq!(reason(b""), FailureReason::InvalidResponse);
        assert_eq!(reason(&[1, 0, 0, 0, 0]), FailureReason::InvalidResponse);
        assert_eq!(reason(&[7, 0, 0, 0, 0]), FailureReason::InvalidResponse);
        assert_eq!(reason(&[0, 0, 0, 0, 0, 9]), FailureReason::InvalidResponse);
    }

    #[test]
    fn status_headers_are_parsed_without_trusting_them() {
        let mut h = http::HeaderMap::new();
        assert!(status_of(&h).unwrap().is_none());
        h.insert("grpc-status", http::HeaderValue::from_static("8"));
        h.insert(
            "grpc-message",
            http::HeaderValue::from_static("queue%20full%3A%20try%20later"),
        );
        // Invalid base64 here made tonic's own parser panic.
        h.insert("grpc-status-details-bin", http::HeaderValue::from_static("!!!"));
        let (code, message) = status_of(&h).unwrap().unwrap();
        assert_eq!(code, tonic::Code::ResourceExhausted);
        assert_eq!(message, "queue full: try later");
        h.insert("grpc-status", http::HeaderValue::from_static("99"));
        assert_eq!(status_of(&h).unwrap_err().reason, FailureReason::InvalidResponse);
    }
}
