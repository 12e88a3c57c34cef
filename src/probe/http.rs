//! `http`: any method and body, for health endpoints, non-streaming inference APIs and
//! anything else with a URL. Success is an accepted status (any 2xx unless
//! `expect.status` lists others), a body read to its end within the cap, and the optional
//! `expect.contains` text in it. TTFB is the response head; total is the last body byte.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;

use super::stream;
use super::{Probe, Redactor, RunContext};
use crate::config::{Expect, ProbeConfig};
use crate::net::{BodyError, BuildError, HttpClient, TlsRoots};
use crate::outcome::{Failure, FailureReason, Observation};

/// Body bytes kept for `expect.contains`.
const MAX_KEPT_BODY: usize = 64 * 1024;

pub struct HttpProbe {
    client: HttpClient,
    method: http::Method,
    path_and_query: http::uri::PathAndQuery,
    headers: http::HeaderMap,
    body: Bytes,
    expect: Expect,
    max_response_bytes: u64,
    redactor: Redactor,
}

/// `inferprobe/VERSION`, so endpoint owners can tell probe traffic from users'.
pub(crate) fn user_agent() -> http::HeaderValue {
    http::HeaderValue::from_static(concat!("inferprobe/", env!("CARGO_PKG_VERSION")))
}

impl HttpProbe {
    pub fn build(config: &ProbeConfig, roots: &TlsRoots) -> Result<Self, BuildError> {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::USER_AGENT, user_agent());
        if config.body.is_some() {
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
        }
        for (name, value) in &config.headers {
            if let Ok(mut v) = http::HeaderValue::from_str(value.expose()) {
                v.set_sensitive(true);
                headers.insert(name.clone(), v);
            }
        }
        Ok(HttpProbe {
            client: HttpClient::new(
                &config.url,
                roots,
                config.tls.ca_file.as_deref(),
                config.tls.server_name.as_deref(),
                config.reuse_connections,
            )?,
            method: config.method.clone(),
            path_and_query: config
                .url
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            headers,
            body: Bytes::from(config.body.clone().unwrap_or_default()),
            expect: config.expect.clone(),
            max_response_bytes: config.max_response_bytes,
            redactor: Redactor::new(config),
        })
    }
}

impl Probe for HttpProbe {
    async fn run(&self, cx: &RunContext) -> Observation {
        let mut request = http::Request::builder()
            .method(self.method.clone())
            .uri(http::Uri::from(self.path_and_query.clone()))
            .body(Full::new(self.body.clone()))
            .expect("a request from valid parts");
        *request.headers_mut() = self.headers.clone();

        let mut obs = Observation::new(Instant::now());
        let Some(mut response) = stream::send(
            &self.client,
            request,
            &mut obs,
            cx.deadline,
            FailureReason::TimeoutTotal,
            self.max_response_bytes,
        )
        .await
        else {
            return obs;
        };
        if !stream::check_status(&mut response, &self.expect, cx, &mut obs, &self.redactor).await {
            return obs;
        }
        let mut kept = Vec::new();
        let result = loop {
            match tokio::time::timeout_at(cx.deadline, response.body.next()).await {
                Err(_) => {
                    break Err(Failure::new(
                        FailureReason::TimeoutTotal,
                        format!(
                            "body not complete within {:?}",
                            cx.deadline.into_std() - obs.marks.start
                        ),
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
                    break Ok(());
                }
                Ok(Ok(Some(chunk))) => {
                    let room = MAX_KEPT_BODY.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
        };
        obs.bytes_received = response.body.received();
        obs.result = result.and_then(|()| {
            let text = String::from_utf8_lossy(&kept);
            stream::check_output(&self.expect, &text, obs.bytes_received > 0, None)
        });
        obs
    }
}
