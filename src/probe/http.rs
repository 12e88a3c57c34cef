//! `http`: any method and body, for health endpoints, non-streaming inference APIs and
//! anything else with a URL. Success is an accepted status (any 2xx unless
//! `expect.status` lists others), a body read to its end within the cap, and the optional
//! `expect.contains` text in it. TTFB is the response head; total is the last body byte.
//!
//! The whole kind is here: its config `Spec` and the `check` of its keys, the probe
//! (`build`, the request, `run`), the response parser, and its tests; kinds.rs lists
//! it. Imports config, outcome, payload and endpoint.rs.

use bytes::Bytes;
use schemars::JsonSchema;
use serde::Deserialize;

use std::sync::Arc;

use super::endpoint::{self, Endpoint};
use super::{BuildContext, BuildError};
use super::{Probe, RunLimits};
use crate::config::OwnKeys;
use crate::config::formats::HttpMethod;
use crate::config::{Diagnostics, Images, KindKeys, ProbeConfig, Upload};
use crate::outcome::{FailureReason, Observation};
use crate::payload::images::{Image, ImageSet, bucket_of};

/// Body bytes kept for `expect.contains`.
const MAX_KEPT_BODY: usize = 64 * 1024;

/// What an `http` probe sends: any method, and a body or images to upload.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub method: http::Method,
    pub body: Option<String>,
    pub images: Option<Images>,
}

/// The keys only `http` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// http: the request method (default POST with a body, else GET).
    #[schemars(with = "Option<HttpMethod>")]
    method: Option<String>,
    /// http: the request body, sent as written.
    body: Option<String>,
}

impl OwnKeys for Keys {
    /// A body may carry a credential (a token in a JSON field).
    const SECRETS: &'static [&'static str] = &["body"];

    fn instead(key: &str, _asking: &str) -> Option<String> {
        (key == "body").then(|| " (LLM kinds build their own body)".to_owned())
    }
}

/// Checks the `http` keys of a probe into its [`Spec`]: `method`, and `body` or
/// `images` (not both).
pub(crate) fn check(cx: &mut Diagnostics, keys: KindKeys<'_, Keys>) -> Option<Spec> {
    let method = endpoint::check_method(cx, &keys, keys.own.method.as_deref(), keys.own.body.is_some());
    let images = keys.common.images.clone();
    if images.is_some() && keys.own.body.is_some() {
        keys.error(
            cx,
            "body",
            "an http probe sends either `body` or `images`, not both",
        );
    }
    Some(Spec {
        method: method?,
        body: keys.own.body,
        images,
    })
}

pub struct HttpProbe {
    endpoint: Endpoint,
    method: http::Method,
    body: Bytes,
    /// Images to upload instead of `body`, and how. Boxed: most `http` probes upload
    /// nothing, and inline this was 80 bytes a probe.
    uploads: Option<Box<(ImageSet, Upload)>>,
}

/// The multipart boundary: fixed, and long and odd enough never to occur in an image.
macro_rules! boundary {
    () => {
        "inferprobe-7d1f0c9a3b5e42f8a6c1"
    };
}
const BOUNDARY: &str = boundary!();
const MULTIPART: &str = concat!("multipart/form-data; boundary=", boundary!());

impl HttpProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        let uploads = match &spec.images {
            Some(images) => Some(Box::new((
                ImageSet::build(images, &cx.images)?,
                images.upload.clone(),
            ))),
            None => None,
        };
        let base: &[_] = match (uploads.as_deref(), spec.body.is_some()) {
            (Some((_, Upload::Multipart { .. })), _) => &[(http::header::CONTENT_TYPE, MULTIPART)],
            (_, true) => &[(http::header::CONTENT_TYPE, "application/json")],
            _ => &[],
        };
        // Uploads are POSTs unless the config says otherwise.
        let method = match (&uploads, spec.method == http::Method::GET) {
            (Some(_), true) => http::Method::POST,
            _ => spec.method.clone(),
        };
        Ok(HttpProbe {
            endpoint: Endpoint::build(config, &cx.roots, base)?,
            method,
            body: Bytes::from(spec.body.clone().unwrap_or_default()),
            uploads,
        })
    }
}

impl Probe for HttpProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let (body, images) = match self.uploads.as_deref() {
            None => (self.body.clone(), Vec::new()),
            Some((set, upload)) => {
                let images = set.next();
                (upload_body(upload, &images), images)
            }
        };
        let mut request = self.endpoint.request(&self.method, body);
        if let (Some((_, Upload::Raw)), Some(image)) = (self.uploads.as_deref(), images.first()) {
            request.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(image.media_type),
            );
        }
        let cx = &limits.start();
        let mut obs = Observation::new(cx.start);
        obs.image_bucket = bucket_of(&images);
        let Some(mut response) = self
            .endpoint
            .open(request, cx, &mut obs, cx.deadline, FailureReason::TimeoutTotal)
            .await
        else {
            return obs;
        };
        let result = endpoint::read_body(&mut response.body, MAX_KEPT_BODY, cx, &mut obs).await;
        obs.bytes_received = response.body.received();
        obs.result = result.and_then(|kept| {
            let text = String::from_utf8_lossy(&kept);
            endpoint::check_output(
                self.endpoint.expect(),
                &text,
                obs.bytes_received > 0,
                None,
                FailureReason::Assertion,
            )
        });
        self.endpoint.redact(&mut obs);
        obs
    }
}

/// The request body for an upload: the raw file, or a multipart form with one file part
/// per image.
fn upload_body(upload: &Upload, images: &[Arc<Image>]) -> Bytes {
    match upload {
        Upload::Raw => images.first().map(|i| i.bytes.clone()).unwrap_or_default(),
        Upload::Multipart { field } => {
            let mut body = Vec::with_capacity(images.iter().map(|i| i.bytes.len() + 256).sum());
            for image in images {
                body.extend_from_slice(
                    format!(
                        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{}\"\r\nContent-Type: {}\r\n\r\n",
                        image.name.replace('"', ""),
                        image.media_type
                    )
                    .as_bytes(),
                );
                body.extend_from_slice(&image.bytes);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
            Bytes::from(body)
        }
    }
}
