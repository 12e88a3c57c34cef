//! `kserve_v2_grpc`: the Open Inference Protocol over gRPC (`inference.GRPCInferenceService`,
//! Triton's, KServe's and MLServer's gRPC API): the same `input`, `ready_check`, `outputs`
//! and output `expect` checks as `kserve_v2`, one unary `ModelInfer` call.
//!
//! Wire facts (the protocol's gRPC spec; messages in grpc.rs): `ModelInferRequest` names
//! the model and version and carries each input tensor's values either in its typed
//! `contents` (one repeated field per datatype family: `int_contents` for INT8-INT32,
//! `uint_contents` for UINT8-UINT32, `fp32_contents`, `bytes_contents`...) or, all
//! inputs alike, in `raw_input_contents` (little-endian, row-major; BYTES elements each
//! prefixed by a 4-byte little-endian length). The response answers in the same two
//! forms (`raw_output_contents` when the server prefers raw). FP16 and BF16 have no typed
//! field: they exist only as raw contents.
//!
//! Which form a probe sends: typed contents, which every server of the protocol decodes
//! (MLServer, Triton and KServe's model servers all do), except for FP16 and BF16
//! inputs, which only raw contents can carry. Responses are read in whichever form the
//! server chose. An encoded image (`image: bytes`) travels as the file's own bytes (gRPC
//! carries bytes; REST's JSON needs them in base64).
//!
//! With `ready_check`, `ModelReady` is called first and timed as its own phase; a model
//! that is not ready fails the run before any inference is sent.
//!
//! Imports config, outcome, payload and the shared machinery (endpoint.rs, grpc.rs,
//! tensors.rs).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;

use super::endpoint::Endpoint;
use super::grpc::{
    self, Flag, ModelInferRequest, ModelInferResponse, ModelRef, RequestedOutput, Tensor, TensorContents,
};
use super::tensors::{self, OutputTensor};
use super::{BuildContext, BuildError, Probe, RunContext, RunLimits};
use crate::config::OwnKeys;
use crate::config::{
    Diagnostics, Images, KindKeys, ProbeConfig, RawInput, TensorData, TensorInput, tensor_input,
};
use crate::outcome::{Failure, FailureReason, Observation};
use crate::payload::images::{ImageError, ImageSet, bucket_of};

/// What a `kserve_v2_grpc` probe sends and asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The tensor to send.
    pub input: TensorInput,
    /// The images an image tensor is made of.
    pub images: Option<Images>,
    /// Call `ModelReady` first.
    pub ready_check: bool,
    /// Output tensors to ask for (all, when empty).
    pub outputs: Vec<String>,
    /// The model version to ask for; empty leaves it to the server.
    pub model_version: String,
}

/// The keys only the Open Inference Protocol kinds take, as `kserve_v2_grpc` reads them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// kserve_v2: the input tensor to send.
    input: Option<RawInput>,
    /// Call ModelReady before each inference (its own phase).
    ready_check: Option<bool>,
    /// The output tensors to request (default: all).
    outputs: Option<Vec<String>>,
    /// kserve_v2_grpc: the model version to ask for (default: the server's choice).
    model_version: Option<String>,
}

impl OwnKeys for Keys {}

/// Checks the `kserve_v2_grpc` keys of a probe into its [`Spec`]: the url (a server,
/// not a path), `input` (required, its literal values of its datatype), images for it,
/// `ready_check`, `outputs` and `model_version`.
pub(crate) fn check(cx: &mut Diagnostics, keys: KindKeys<'_, Keys>) -> Option<Spec> {
    grpc::check_server_url(cx, &keys.common);
    let c = &keys.common;
    let images = c.images.clone();
    let input = tensor_input(cx, c.probe, c.prefix, keys.own.input, images.as_ref())?;
    if let TensorData::Literal(values) = &input.data
        && let Err(message) = encode_literal(&input.datatype, values)
    {
        cx.error(c.probe, &format!("{}.input.data", c.prefix), message);
        return None;
    }
    Some(Spec {
        input,
        images,
        ready_check: keys.own.ready_check.unwrap_or(false),
        outputs: keys.own.outputs.unwrap_or_default(),
        // Unset and empty mean the same, in the protocol too: the server's default version.
        model_version: keys.own.model_version.unwrap_or_default(),
    })
}

/// An input tensor's values on the wire.
enum Values {
    Typed(TensorContents),
    Raw(Vec<u8>),
}

/// Literal values of `datatype` as typed contents (raw for FP16 and BF16); an error
/// names the first value the datatype cannot hold.
fn encode_literal(datatype: &str, values: &[serde_json::Value]) -> Result<Values, String> {
    let bad = |i: usize, v: &serde_json::Value| {
        format!("value {v} (at index {i}) does not fit datatype {datatype}")
    };
    let int = |i: usize, v: &serde_json::Value, min: i64, max: i64| {
        v.as_i64()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| bad(i, v))
    };
    let uint =
        |i: usize, v: &serde_json::Value, max: u64| v.as_u64().filter(|n| *n <= max).ok_or_else(|| bad(i, v));
    let float = |i: usize, v: &serde_json::Value| v.as_f64().ok_or_else(|| bad(i, v));
    let each = values.iter().enumerate();
    let mut c = TensorContents::default();
    match datatype {
        "BOOL" => {
            c.bool_contents = each
                .map(|(i, v)| match v {
                    serde_json::Value::Bool(b) => Ok(*b),
                    v if v.as_u64() == Some(0) => Ok(false),
                    v if v.as_u64() == Some(1) => Ok(true),
                    v => Err(bad(i, v)),
                })
                .collect::<Result<_, _>>()?
        }
        "INT8" | "INT16" | "INT32" => {
            let bits = datatype[3..].parse::<u32>().unwrap_or(32);
            let (min, max) = (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1);
            c.int_contents = each
                .map(|(i, v)| int(i, v, min, max).map(|n| n as i32))
                .collect::<Result<_, _>>()?
        }
        "INT64" => {
            c.int64_contents = each
                .map(|(i, v)| int(i, v, i64::MIN, i64::MAX))
                .collect::<Result<_, _>>()?
        }
        "UINT8" | "UINT16" | "UINT32" => {
            let bits = datatype[4..].parse::<u32>().unwrap_or(32);
            c.uint_contents = each
                .map(|(i, v)| uint(i, v, (1u64 << bits) - 1).map(|n| n as u32))
                .collect::<Result<_, _>>()?
        }
        "UINT64" => {
            c.uint64_contents = each
                .map(|(i, v)| uint(i, v, u64::MAX))
                .collect::<Result<_, _>>()?
        }
        "FP32" => {
            c.fp32_contents = each
                .map(|(i, v)| float(i, v).map(|f| f as f32))
                .collect::<Result<_, _>>()?
        }
        "FP64" => c.fp64_contents = each.map(|(i, v)| float(i, v)).collect::<Result<_, _>>()?,
        "BYTES" => {
            c.bytes_contents = each
                .map(|(i, v)| match v {
                    serde_json::Value::String(s) => Ok(s.as_bytes().to_vec()),
                    v => Err(bad(i, v)),
                })
                .collect::<Result<_, _>>()?
        }
        "FP16" | "BF16" => {
            let mut raw = Vec::with_capacity(values.len() * 2);
            for (i, v) in each {
                let f = float(i, v)? as f32;
                let half = if datatype == "FP16" {
                    f32_to_f16(f)
                } else {
                    f32_to_bf16(f)
                };
                raw.extend_from_slice(&half.to_le_bytes());
            }
            return Ok(Values::Raw(raw));
        }
        other => return Err(format!("datatype {other} has no gRPC encoding")),
    }
    Ok(Values::Typed(c))
}

/// IEEE half precision, rounded to nearest even (FP16 has no typed field).
fn f32_to_f16(f: f32) -> u16 {
    let bits = f.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rest = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = u32::from(rest > mid || (rest == mid && half & 1 == 1));
        return sign | (half + round) as u16;
    }
    let half = ((e as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    let round = u32::from(rest > 0x1000 || (rest == 0x1000 && half & 1 == 1));
    sign | (half + round) as u16
}

/// bfloat16: the upper half of an f32, rounded to nearest even.
fn f32_to_bf16(f: f32) -> u16 {
    let bits = f.to_bits();
    if f.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

pub struct KserveGrpcProbe {
    endpoint: Endpoint,
    /// `ModelReady`'s request, when checked.
    ready: Option<Bytes>,
    /// One framed `ModelInferRequest` per image (or one for literal data), built once.
    requests: Vec<(Bytes, &'static str)>,
    next: AtomicUsize,
}

impl KserveGrpcProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        let endpoint = grpc::endpoint(config, &cx.roots)?;
        let model_name = config.model.clone().unwrap_or_default();
        let input = &spec.input;
        let message = |values: Values| {
            let mut tensor = Tensor {
                name: input.name.clone(),
                datatype: input.datatype.clone(),
                shape: input.shape.clone(),
                contents: None,
            };
            let mut raw_input_contents = Vec::new();
            match values {
                Values::Typed(c) => tensor.contents = Some(c),
                Values::Raw(raw) => raw_input_contents.push(raw),
            }
            grpc::frame(&ModelInferRequest {
                model_name: model_name.clone(),
                model_version: spec.model_version.clone(),
                id: "inferprobe".into(),
                inputs: vec![tensor],
                outputs: spec
                    .outputs
                    .iter()
                    .map(|name| RequestedOutput { name: name.clone() })
                    .collect(),
                raw_input_contents,
            })
        };
        let requests = match &input.data {
            TensorData::Literal(values) => {
                let values = encode_literal(&input.datatype, values)
                    .expect("literal values are checked against their datatype by `check`");
                vec![(message(values), "none")]
            }
            _ => {
                let images = spec
                    .images
                    .as_ref()
                    .expect("config requires images for image inputs");
                let images = ImageSet::build(images, &cx.images)?;
                images
                    .images()
                    .iter()
                    .map(|image| {
                        let mut c = TensorContents::default();
                        match input.data {
                            TensorData::ImagePixels { .. } => {
                                let pixels = tensors::image_pixels(input, image)?;
                                if input.datatype == "FP32" {
                                    c.fp32_contents = pixels.iter().map(|v| f32::from(*v) / 255.0).collect();
                                } else {
                                    c.uint_contents = pixels.iter().map(|v| u32::from(*v)).collect();
                                }
                            }
                            _ => c.bytes_contents = vec![image.bytes.to_vec()],
                        }
                        Ok((message(Values::Typed(c)), bucket_of(std::slice::from_ref(image))))
                    })
                    .collect::<Result<Vec<_>, ImageError>>()?
            }
        };
        let ready = spec.ready_check.then(|| {
            grpc::frame(&ModelRef {
                name: model_name.clone(),
                version: spec.model_version.clone(),
            })
        });
        Ok(KserveGrpcProbe {
            endpoint,
            ready,
            requests,
            next: AtomicUsize::new(0),
        })
    }
}

impl Probe for KserveGrpcProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let (body, bucket) =
            self.requests[self.next.fetch_add(1, Ordering::Relaxed) % self.requests.len()].clone();
        let ready = self
            .ready
            .as_ref()
            .map(|m| grpc::request(&self.endpoint, grpc::MODEL_READY, m.clone(), limits.timeout));
        let request = grpc::request(&self.endpoint, grpc::MODEL_INFER, body, limits.timeout);
        // One budget for the readiness check and the inference together.
        let cx = &limits.start();

        let mut obs = if let Some(ready) = ready {
            let mut check = Observation::new(cx.start);
            let answer: Option<Flag> = grpc::call(&self.endpoint, ready, cx, &mut check).await;
            let mut obs = Observation::new(Instant::now());
            obs.image_bucket = bucket;
            obs.ready_check = Some(obs.marks.start.saturating_duration_since(check.marks.start));
            let failure = match (answer, check.result) {
                (Some(Flag { value: true }), _) => None,
                (Some(_), _) => Some(Failure::new(
                    FailureReason::Loading,
                    "model not ready: ModelReady answered ready: false",
                )),
                (None, Err(f)) => Some(Failure::new(f.reason, format!("model not ready: {}", f.message))),
                (None, Ok(())) => unreachable!("a call without an answer sets its failure"),
            };
            if let Some(failure) = failure {
                obs.http_status = check.http_status;
                obs.result = Err(failure);
                self.endpoint.redact(&mut obs);
                return obs;
            }
            obs
        } else {
            let mut obs = Observation::new(cx.start);
            obs.image_bucket = bucket;
            obs
        };
        self.infer(request, cx, &mut obs).await;
        self.endpoint.redact(&mut obs);
        obs
    }
}

impl KserveGrpcProbe {
    async fn infer(
        &self,
        request: http::Request<http_body_util::Full<Bytes>>,
        cx: &RunContext,
        obs: &mut Observation,
    ) {
        // The inference is timed from here, after any readiness check.
        obs.marks.start = Instant::now();
        if let Some(response) = grpc::call::<ModelInferResponse>(&self.endpoint, request, cx, obs).await {
            obs.result = decode_outputs(&response)
                .and_then(|outputs| tensors::check_outputs(&outputs, self.endpoint.expect()));
        }
    }
}

/// A whole response body (one gRPC frame) through the same decoding and checks as a run,
/// for the fuzz targets: what a server's bytes can make of the probe.
#[cfg(feature = "fuzzing")]
pub(crate) fn check_response_body(body: &[u8], expect: &crate::config::Expect) -> Result<(), Failure> {
    let message = grpc::unframe(body)?;
    let response = <ModelInferResponse as prost::Message>::decode(message)
        .map_err(|e| invalid(format!("not a ModelInferResponse: {e}")))?;
    decode_outputs(&response).and_then(|outputs| tensors::check_outputs(&outputs, expect))
}

/// The response's outputs as values, from typed contents or raw contents alike.
pub(crate) fn decode_outputs(response: &ModelInferResponse) -> Result<Vec<OutputTensor>, Failure> {
    let raw = !response.raw_output_contents.is_empty();
    if raw && response.raw_output_contents.len() != response.outputs.len() {
        return Err(invalid(format!(
            "{} outputs but {} raw_output_contents",
            response.outputs.len(),
            response.raw_output_contents.len()
        )));
    }
    response
        .outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let data = if raw {
                raw_values(&o.datatype, &response.raw_output_contents[i])
            } else {
                Ok(typed_values(&o.datatype, o.contents.as_ref()))
            }
            .map_err(|m| invalid(format!("output {:?}: {m}", o.name)))?;
            Ok(OutputTensor {
                name: o.name.clone(),
                shape: o.shape.clone(),
                datatype: o.datatype.clone(),
                data,
            })
        })
        .collect()
}

fn invalid(message: String) -> Failure {
    Failure::new(FailureReason::InvalidResponse, message)
}

fn number(f: f64) -> serde_json::Value {
    serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// Typed contents as values: the field the datatype travels in (none: no data).
fn typed_values(datatype: &str, contents: Option<&TensorContents>) -> Vec<serde_json::Value> {
    let Some(c) = contents else {
        return Vec::new();
    };
    let json = |v: Vec<serde_json::Value>| v;
    match datatype {
        "BOOL" => json(c.bool_contents.iter().map(|b| (*b).into()).collect()),
        "INT8" | "INT16" | "INT32" => c.int_contents.iter().map(|n| (*n).into()).collect(),
        "INT64" => c.int64_contents.iter().map(|n| (*n).into()).collect(),
        "UINT8" | "UINT16" | "UINT32" => c.uint_contents.iter().map(|n| (*n).into()).collect(),
        "UINT64" => c.uint64_contents.iter().map(|n| (*n).into()).collect(),
        "FP32" => c.fp32_contents.iter().map(|f| number(f64::from(*f))).collect(),
        "FP64" => c.fp64_contents.iter().map(|f| number(*f)).collect(),
        "BYTES" => c
            .bytes_contents
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned().into())
            .collect(),
        _ => Vec::new(),
    }
}

/// Raw contents as values: little-endian elements of the datatype's width; BYTES
/// elements each after a 4-byte little-endian length.
fn raw_values(datatype: &str, raw: &[u8]) -> Result<Vec<serde_json::Value>, String> {
    if datatype == "BYTES" {
        let mut out = Vec::new();
        let mut rest = raw;
        while !rest.is_empty() {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                return Err("a BYTES element's length is cut short".into());
            };
            let len = u32::from_le_bytes(*len) as usize;
            if tail.len() < len {
                return Err("a BYTES element is cut short".into());
            }
            out.push(String::from_utf8_lossy(&tail[..len]).into_owned().into());
            rest = &tail[len..];
        }
        return Ok(out);
    }
    let width = match datatype {
        "BOOL" | "INT8" | "UINT8" => 1,
        "INT16" | "UINT16" | "FP16" | "BF16" => 2,
        "INT32" | "UINT32" | "FP32" => 4,
        "INT64" | "UINT64" | "FP64" => 8,
        other => return Err(format!("unknown datatype {other:?}")),
    };
    if !raw.len().is_multiple_of(width) {
        return Err(format!(
            "{} raw bytes are not whole {datatype} elements",
            raw.len()
        ));
    }
    Ok(raw
        .chunks_exact(width)
        .map(|b| match datatype {
            "BOOL" => (b[0] != 0).into(),
            "INT8" => (b[0] as i8).into(),
            "UINT8" => b[0].into(),
            "INT16" => i16::from_le_bytes([b[0], b[1]]).into(),
            "UINT16" => u16::from_le_bytes([b[0], b[1]]).into(),
            "FP16" => number(f64::from(f16_to_f32(u16::from_le_bytes([b[0], b[1]])))),
            "BF16" => number(f64::from(f32::from_bits(
                u32::from(u16::from_le_bytes([b[0], b[1]])) << 16,
            ))),
            "INT32" => i32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(),
            "UINT32" => u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(),
            "FP32" => number(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            "INT64" => i64::from_le_bytes(b.try_into().expect("8 bytes")).into(),
            "UINT64" => u64::from_le_bytes(b.try_into().expect("8 bytes")).into(),
            _ => number(f64::from_le_bytes(b.try_into().expect("8 bytes"))),
        })
        .collect())
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let mant = f32::from(h & 0x3ff);
    sign * match exp {
        0 => mant * 2f32.powi(-24),
        0x1f if mant == 0.0 => f32::INFINITY,
        0x1f => f32::NAN,
        e => (1.0 + mant / 1024.0) * 2f32.powi(e - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(v: serde_json::Value) -> Vec<serde_json::Value> {
        v.as_array().unwrap().clone()
    }

    #[test]
    fn literals_go_in_the_field_of_their_datatype() {
        let Ok(Values::Typed(c)) = encode_literal("INT8", &values(json!([-128, 127]))) else {
            panic!()
        };
        assert_eq!(c.int_contents, vec![-128, 127]);
        let Ok(Values::Typed(c)) = encode_literal("FP32", &values(json!([0, 1.5]))) else {
            panic!()
        };
        assert_eq!(c.fp32_contents, vec![0.0, 1.5]);
        let Ok(Values::Typed(c)) = encode_literal("BYTES", &values(json!(["cat"]))) else {
            panic!()
        };
        assert_eq!(c.bytes_contents, vec![b"cat".to_vec()]);
        let Ok(Values::Typed(c)) = encode_literal("BOOL", &values(json!([true, 0]))) else {
            panic!()
        };
        assert_eq!(c.bool_contents, vec![true, false]);
        for (datatype, bad) in [
            ("INT8", json!([128])),
            ("UINT8", json!([-1])),
            ("INT32", json!([1.5])),
            ("FP32", json!(["x"])),
            ("BYTES", json!([1])),
            ("BOOL", json!([2])),
        ] {
            let e = encode_literal(datatype, &values(bad.clone())).err().unwrap();
            assert!(e.ends_with(&format!("does not fit datatype {datatype}")), "{e}");
        }
    }

    #[test]
    fn half_precision_travels_raw_and_reads_back() {
        let Ok(Values::Raw(raw)) = encode_literal("FP16", &values(json!([1.0, -2.5, 0.0001, 65504]))) else {
            panic!()
        };
        let back = raw_values("FP16", &raw).unwrap();
        let back: Vec<f64> = back.iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(&back[..2], &[1.0, -2.5]);
        assert!((back[2] - 0.0001).abs() < 1e-6, "{back:?}");
        assert_eq!(back[3], 65504.0);
        let Ok(Values::Raw(raw)) = encode_literal("BF16", &values(json!([1.0, -3.0]))) else {
            panic!()
        };
        assert_eq!(raw_values("BF16", &raw).unwrap(), vec![json!(1.0), json!(-3.0)]);
    }

    #[test]
    fn outputs_read_the_same_from_typed_and_raw_contents() {
        let typed = ModelInferResponse {
            outputs: vec![Tensor {
                name: "predict".into(),
                datatype: "INT64".into(),
                shape: vec![1, 1],
                contents: Some(TensorContents {
                    int64_contents: vec![7],
                    ..Default::default()
                }),
            }],
            ..Default::default()
        };
        let mut raw = typed.clone();
        raw.outputs[0].contents = None;
        raw.raw_output_contents = vec![7i64.to_le_bytes().to_vec()];
        assert_eq!(decode_outputs(&typed).unwrap(), decode_outputs(&raw).unwrap());
        assert_eq!(decode_outputs(&raw).unwrap()[0].data, vec![json!(7)]);
        raw.raw_output_contents[0].pop();
        assert_eq!(
            decode_outputs(&raw).unwrap_err().reason,
            FailureReason::InvalidResponse
        );
        let strings = raw_values("BYTES", b"\x03\x00\x00\x00cat\x00\x00\x00\x00").unwrap();
        assert_eq!(strings, vec![json!("cat"), json!("")]);
        assert!(raw_values("BYTES", b"\x09\x00\x00\x00cat").is_err());
    }
}
