//! `kserve_v2`: the Open Inference Protocol (KServe v2, Triton's and MLServer's REST API),
//! `POST /v2/models/{model}/infer`, one JSON request and one JSON response.
//!
//! Wire facts (../shared/reference/llm-protocols.md §8.1): the request carries `inputs`
//! with `name`, `shape`, `datatype` and row-major `data`; the response has `outputs` in
//! the same form; errors are non-2xx with `{"error": "..."}` (MLServer answers a wrong
//! shape with a 500 and a plain-text traceback). An image goes either as a BYTES tensor
//! holding the encoded file (the model decodes it) or as decoded pixels (UINT8 0-255 or
//! FP32 0-1, NHWC or NCHW). No streaming: TTFB and total apply, not TTFT.
//!
//! With `ready_check`, the model's `/ready` endpoint is asked first and timed as its own
//! phase; a model that is not ready fails the run before any inference is sent.
//!
//! The whole kind is here: its config `Spec` and the `check` of its keys, the probe
//! (`build`, the request, `run`), the response parser, and its tests; kinds.rs lists
//! it. Imports config, outcome, payload, endpoint.rs and tensors.rs (the output checks it
//! shares with `kserve_v2_grpc`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::endpoint::{self, Endpoint};
use super::tensors::{self, OutputTensor};
use super::{BuildContext, BuildError, Probe, RunContext, RunLimits};
use crate::config::OwnKeys;
use crate::config::formats::HttpMethod;
use crate::config::{
    Diagnostics, Expect, Images, KindKeys, ProbeConfig, RawInput, TensorData, TensorInput, tensor_input,
};
use crate::outcome::{Failure, FailureReason, Observation};
use crate::payload::images::{Image, ImageError, ImageSet, bucket_of};

/// Response bytes kept for parsing; a classifier's answer is far smaller.
const MAX_KEPT_RESPONSE: usize = 16 * 1024 * 1024;

/// What a `kserve_v2` probe sends and asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The tensor to send.
    pub input: TensorInput,
    /// The images an image tensor is made of.
    pub images: Option<Images>,
    /// Ask the model's `/ready` first.
    pub ready_check: bool,
    /// Output tensors to ask for (all, when empty).
    pub outputs: Vec<String>,
}

/// The keys only the Open Inference Protocol kinds take, as `kserve_v2` reads them.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// kserve_v2: the input tensor to send.
    input: Option<RawInput>,
    /// kserve_v2: ask the model's /ready before each inference (its own phase); the URL
    /// must end in /infer.
    ready_check: Option<bool>,
    /// kserve_v2: the output tensors to request (default: all).
    outputs: Option<Vec<String>>,
    /// Accepted and unused (kserve_v2 sends its own POST).
    #[schemars(with = "Option<HttpMethod>")]
    method: Option<String>,
    /// Accepted and unused (kserve_v2 builds its own body).
    body: Option<String>,
}

impl OwnKeys for Keys {
    const UNUSED: &'static [&'static str] = &["method", "body"];
}

/// Checks the `kserve_v2` keys of a probe into its [`Spec`]: `input` (required), images
/// for it, `ready_check` and `outputs`. `method` and `body` are accepted and unused, as
/// they always were (a method that is not one is an error).
pub(crate) fn check(cx: &mut Diagnostics, keys: KindKeys<'_, Keys>) -> Option<Spec> {
    endpoint::check_method(cx, &keys, keys.own.method.as_deref(), keys.own.body.is_some());
    let images = keys.common.images.clone();
    let c = &keys.common;
    let input = tensor_input(cx, c.probe, c.prefix, keys.own.input, images.as_ref());
    // `ready_check: true` asks `.../ready` next to `.../infer`.
    if keys.own.ready_check == Some(true)
        && c.url
            .is_some_and(|u| !u.path().trim_end_matches('/').ends_with("/infer"))
    {
        cx.error(
            c.probe,
            &format!("{}.ready_check", c.prefix),
            "needs a url ending in /infer (the check asks .../ready)",
        );
    }
    Some(Spec {
        input: input?,
        images,
        ready_check: keys.own.ready_check.unwrap_or(false),
        outputs: keys.own.outputs.unwrap_or_default(),
    })
}

pub struct KserveProbe {
    endpoint: Endpoint,
    /// `/v2/models/{model}[/versions/{v}]/ready`, when checked.
    ready_path: Option<String>,
    /// One request body per image (or one for literal data), built once.
    bodies: Vec<(Bytes, &'static str)>,
    next: AtomicUsize,
}

impl KserveProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        let endpoint = Endpoint::build(
            config,
            &cx.roots,
            &[(http::header::CONTENT_TYPE, "application/json")],
        )?;
        let input = &spec.input;
        let outputs: Vec<_> = spec.outputs.iter().map(|name| json!({"name": name})).collect();
        let body = |tensor: serde_json::Value| {
            let mut request = json!({"id": "inferprobe", "inputs": [tensor]});
            if !outputs.is_empty() {
                request["outputs"] = json!(outputs);
            }
            Bytes::from(request.to_string())
        };
        let bodies = match &input.data {
            TensorData::Literal(values) => vec![(body(tensor(input, json!(values))), "none")],
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
                        let data = image_tensor_data(input, image)?;
                        Ok((body(tensor(input, data)), bucket_of(std::slice::from_ref(image))))
                    })
                    .collect::<Result<Vec<_>, ImageError>>()?
            }
        };
        // Same server, same query string (it may carry a key): .../infer -> .../ready.
        let ready_path = spec.ready_check.then(|| {
            let path = config
                .url
                .path()
                .trim_end_matches('/')
                .trim_end_matches("/infer")
                .to_owned()
                + "/ready";
            match config.url.query() {
                Some(q) => format!("{path}?{q}"),
                None => path,
            }
        });
        Ok(KserveProbe {
            endpoint,
            ready_path,
            bodies,
            next: AtomicUsize::new(0),
        })
    }
}

fn tensor(input: &TensorInput, data: serde_json::Value) -> serde_json::Value {
    json!({"name": input.name, "shape": input.shape, "datatype": input.datatype, "data": data})
}

/// The tensor data for one image: its base64 file, or its pixels resized to the shape.
fn image_tensor_data(input: &TensorInput, image: &Image) -> Result<serde_json::Value, ImageError> {
    match input.data {
        TensorData::ImageBytes => Ok(json!([&*image.base64])),
        TensorData::ImagePixels { .. } => {
            let values = tensors::image_pixels(input, image)?;
            Ok(if input.datatype == "FP32" {
                json!(values.iter().map(|v| f32::from(*v) / 255.0).collect::<Vec<_>>())
            } else {
                json!(values)
            })
        }
        TensorData::Literal(_) => unreachable!("literal data has no image"),
    }
}

impl Probe for KserveProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let (body, bucket) =
            self.bodies[self.next.fetch_add(1, Ordering::Relaxed) % self.bodies.len()].clone();
        let ready = self
            .ready_path
            .as_ref()
            .map(|path| self.endpoint.request_to(&http::Method::GET, path, Bytes::new()));
        let request = self.endpoint.request(&http::Method::POST, body);
        // One budget for the readiness check and the inference together.
        let cx = &limits.start();

        if let Some(ready) = ready {
            let mut check = Observation::new(cx.start);
            let opened = self
                .endpoint
                .open(ready, cx, &mut check, cx.deadline, FailureReason::TimeoutTotal)
                .await;
            if let Some(mut response) = opened
                && let Err(f) = endpoint::read_body(&mut response.body, 0, cx, &mut check).await
            {
                check.result = Err(f);
            }
            let mut obs = Observation::new(Instant::now());
            obs.image_bucket = bucket;
            obs.ready_check = Some(obs.marks.start.saturating_duration_since(check.marks.start));
            match check.result {
                Ok(()) => {}
                Err(failure) => {
                    obs.http_status = check.http_status;
                    // A 5xx from `/ready` is the server saying the model is not loaded
                    // yet (KServe answers 503 while a model loads).
                    let reason = match failure.reason {
                        FailureReason::Http5xx => FailureReason::Loading,
                        other => other,
                    };
                    obs.result = Err(Failure::new(
                        reason,
                        format!("model not ready: {}", failure.message),
                    ));
                    return obs;
                }
            }
            return self.infer(request, cx, obs).await;
        }
        let mut obs = Observation::new(cx.start);
        obs.image_bucket = bucket;
        self.infer(request, cx, obs).await
    }
}

impl KserveProbe {
    async fn infer(
        &self,
        request: http::Request<http_body_util::Full<Bytes>>,
        cx: &RunContext,
        mut obs: Observation,
    ) -> Observation {
        // The inference is timed from here, after any readiness check.
        obs.marks.start = Instant::now();
        let Some(mut response) = self
            .endpoint
            .open(request, cx, &mut obs, cx.deadline, FailureReason::TimeoutTotal)
            .await
        else {
            return obs;
        };
        let body = match endpoint::read_body(&mut response.body, MAX_KEPT_RESPONSE, cx, &mut obs).await {
            Ok(b) => b,
            Err(f) => {
                obs.result = Err(f);
                return obs;
            }
        };
        obs.result = check_response(&body, self.endpoint.expect());
        self.endpoint.redact(&mut obs);
        obs
    }
}

#[derive(Deserialize)]
struct InferResponse {
    outputs: Vec<Output>,
}

#[derive(Deserialize)]
struct Output {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    data: Vec<serde_json::Value>,
}

/// Parses the response and applies the output checks.
pub(crate) fn check_response(body: &[u8], expect: &Expect) -> Result<(), Failure> {
    // JSON is UTF-8, but serde_json checks it only in strings it keeps: invalid bytes in a
    // field we skip (`model_name`, `id`) would pass. Check the whole body first.
    if std::str::from_utf8(body).is_err() {
        return Err(Failure::new(
            FailureReason::InvalidResponse,
            "the response body is not valid UTF-8",
        ));
    }
    let response: InferResponse = serde_json::from_slice(body).map_err(|e| {
        Failure::new(
            FailureReason::InvalidResponse,
            format!(
                "not an inference response ({e}): {}",
                super::preview(&String::from_utf8_lossy(body))
            ),
        )
    })?;
    let outputs: Vec<OutputTensor> = response
        .outputs
        .into_iter()
        .map(|o| OutputTensor {
            name: o.name,
            shape: o.shape,
            datatype: o.datatype,
            data: o.data,
        })
        .collect();
    tensors::check_outputs(&outputs, expect)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/transcripts/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        let start = text.rfind("<<<\n").unwrap() + 4;
        let end = text.find("\n### client-side").unwrap_or(text.len());
        text[start..end].trim().as_bytes().to_vec()
    }

    fn expect() -> Expect {
        Expect::default()
    }

    #[test]
    fn golden_mlserver_prediction() {
        let body = golden("v2-infer.txt");
        let mut e = expect();
        e.outputs = vec!["predict".into()];
        e.output_shape = Some(vec![1, 1]);
        e.top_label = Some("0".into());
        assert!(check_response(&body, &e).is_ok());
        e.top_label = Some("3".into());
        let f = check_response(&body, &e).unwrap_err();
        assert_eq!(f.reason, FailureReason::Assertion);
        assert_eq!(
            f.message,
            "expected top label \"3\", got \"0\" (output \"predict\")"
        );
    }

    #[test]
    fn golden_mlserver_probabilities_take_the_argmax() {
        let body = golden("v2-infer-proba.txt");
        let mut e = expect();
        e.top_label = Some("0".into());
        e.output_shape = Some(vec![1, 10]);
        assert!(check_response(&body, &e).is_ok());
    }

    #[test]
    fn invalid_utf8_in_a_skipped_field_is_invalid() {
        let body = b"{\"model_name\":\"\xff\",\"outputs\":[{\"name\":\"p\",\"shape\":[1],\"datatype\":\"INT64\",\"data\":[1]}]}";
        let f = check_response(body, &Expect::default()).unwrap_err();
        assert_eq!(f.reason, FailureReason::InvalidResponse);
    }

    #[test]
    fn missing_outputs_and_garbage() {
        let mut e = expect();
        e.outputs = vec!["logits".into()];
        let f = check_response(&golden("v2-infer.txt"), &e).unwrap_err();
        assert!(
            f.message.contains("the outputs are [\"predict\"]"),
            "{}",
            f.message
        );
        assert_eq!(
            check_response(b"{\"outputs\":[]}", &expect()).unwrap_err().reason,
            FailureReason::EmptyOutput
        );
        assert_eq!(
            check_response(b"Traceback (most recent call last):", &expect())
                .unwrap_err()
                .reason,
            FailureReason::InvalidResponse
        );
    }

    #[test]
    fn pixels_in_both_layouts() {
        let b = crate::config::BUILTIN_IMAGES
            .iter()
            .find(|b| b.name == "scene-224.jpg")
            .unwrap();
        let image = crate::payload::images::generate(b).unwrap();
        for (channels_first, shape, datatype) in [
            (false, vec![1, 32, 24, 3], "UINT8"),
            (true, vec![1, 3, 32, 24], "FP32"),
        ] {
            let input = TensorInput {
                name: "x".into(),
                datatype: datatype.into(),
                shape: shape.clone(),
                data: TensorData::ImagePixels { channels_first },
            };
            let data = image_tensor_data(&input, &image).unwrap();
            let values = data.as_array().unwrap();
            assert_eq!(values.len(), 32 * 24 * 3);
            if datatype == "FP32" {
                assert!(values.iter().all(|v| (0.0..=1.0).contains(&v.as_f64().unwrap())));
            }
        }
    }
}
