//! `http`: any method and body, for health endpoints, non-streaming inference APIs and
//! anything else with a URL. Success is an accepted status (any 2xx unless
//! `expect.status` lists others), a body read to its end within the cap, and the optional
//! `expect.contains` text in it. TTFB is the response head; total is the last body byte.

use std::time::Instant;

use bytes::Bytes;

use super::stream::{self, Endpoint};
use super::{Probe, RunContext};
use crate::config::ProbeConfig;
use crate::net::{BodyError, BuildError, TlsRoots};
use crate::outcome::{Failure, FailureReason, Observation};

/// Body bytes kept for `expect.contains`.
const MAX_KEPT_BODY: usize = 64 * 1024;

pub struct HttpProbe {
    endpoint: Endpoint,
    method: http::Method,
    body: Bytes,
}

impl HttpProbe {
    pub fn build(config: &ProbeConfig, roots: &TlsRoots) -> Result<Self, BuildError> {
        let base: &[_] = if config.body.is_some() {
            &[(http::header::CONTENT_TYPE, "application/json")]
        } else {
            &[]
        };
        Ok(HttpProbe {
            endpoint: Endpoint::build(config, roots, base)?,
            method: config.method.clone(),
            body: Bytes::from(config.body.clone().unwrap_or_default()),
        })
    }
}

impl Probe for HttpProbe {
    async fn run(&self, cx: &RunContext) -> Observation {
        let request = self.endpoint.request(&self.method, self.body.clone());
        let mut obs = Observation::new(Instant::now());
        let Some(mut response) = self
            .endpoint
            .open(request, cx, &mut obs, cx.deadline, FailureReason::TimeoutTotal)
            .await
        else {
            return obs;
        };
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
            stream::check_output(&self.endpoint.expect, &text, obs.bytes_received > 0, None)
        });
        obs
    }
}
