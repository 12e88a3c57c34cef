//! `grpc_health`: the standard gRPC health check, `grpc.health.v1.Health/Check`, as
//! blackbox_exporter's and Cloudprober's gRPC probes make it: one unary call for a
//! `service` name (empty: the server as a whole), up when the answer is SERVING.
//!
//! Wire facts (grpc/grpc doc/health-checking.md; messages in grpc.rs): the response's
//! `status` is UNKNOWN (0), SERVING (1), NOT_SERVING (2) or SERVICE_UNKNOWN (3, from
//! `Watch` only, though some servers answer `Check` with it); a server that does not know
//! the service fails the call with NOT_FOUND, one without the health service with
//! UNIMPLEMENTED (both `http_4xx`, as the caller's mistake).
//!
//! Imports config, outcome and the shared machinery (endpoint.rs, grpc.rs).

use schemars::JsonSchema;
use serde::Deserialize;

use super::endpoint::Endpoint;
use super::grpc::{self, HealthCheckRequest, HealthCheckResponse};
use super::{BuildContext, BuildError, Probe, RunLimits};
use crate::config::OwnKeys;
use crate::config::{Diagnostics, KindKeys, ProbeConfig};
use crate::outcome::{Failure, FailureReason, Observation};
use std::sync::Arc;

/// What a `grpc_health` probe asks about.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The service name; empty asks about the whole server.
    pub service: String,
}

/// The keys only `grpc_health` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// grpc_health: the service whose health to ask for (default "", the whole server).
    service: Option<String>,
}

impl OwnKeys for Keys {}

/// Checks the `grpc_health` keys of a probe into its [`Spec`]: the url (a server, not a
/// path) and `service`.
pub(crate) fn check(cx: &mut Diagnostics, keys: KindKeys<'_, Keys>) -> Option<Spec> {
    grpc::check_server_url(cx, &keys.common);
    Some(Spec {
        service: keys.own.service.unwrap_or_default(),
    })
}

pub struct GrpcHealthProbe {
    endpoint: Endpoint,
    service: String,
    /// The framed request, built once.
    request: bytes::Bytes,
}

impl GrpcHealthProbe {
    pub fn build(config: &Arc<ProbeConfig>, spec: &Spec, cx: &BuildContext) -> Result<Self, BuildError> {
        Ok(GrpcHealthProbe {
            endpoint: grpc::endpoint(config, &cx.roots)?,
            service: spec.service.clone(),
            request: grpc::frame(&HealthCheckRequest {
                service: spec.service.clone(),
            }),
        })
    }
}

impl Probe for GrpcHealthProbe {
    async fn run(&self, limits: &RunLimits) -> Observation {
        let request = grpc::request(
            &self.endpoint,
            grpc::HEALTH_CHECK,
            self.request.clone(),
            limits.timeout,
        );
        let cx = &limits.start();
        let mut obs = Observation::new(cx.start);
        if let Some(answer) = grpc::call::<HealthCheckResponse>(&self.endpoint, request, cx, &mut obs).await {
            obs.result = judge(&self.service, answer.status);
        }
        self.endpoint.redact(&mut obs);
        obs
    }
}

/// SERVING is up; anything else fails, saying what the server said.
fn judge(service: &str, status: i32) -> Result<(), Failure> {
    let what = if service.is_empty() {
        "the server".to_owned()
    } else {
        format!("service {service:?}")
    };
    let (reason, said) = match status {
        1 => return Ok(()),
        0 => (FailureReason::Http5xx, "UNKNOWN"),
        2 => (FailureReason::Http5xx, "NOT_SERVING"),
        3 => (FailureReason::Http4xx, "SERVICE_UNKNOWN"),
        _ => {
            return Err(Failure::new(
                FailureReason::InvalidResponse,
                format!("health status {status} is not a serving status (0 to 3)"),
            ));
        }
    };
    Err(Failure::new(reason, format!("{what} is {said}, not SERVING")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_serving_is_up() {
        assert!(judge("", 1).is_ok());
        let f = judge("", 2).unwrap_err();
        assert_eq!(f.reason, FailureReason::Http5xx);
        assert_eq!(f.message, "the server is NOT_SERVING, not SERVING");
        let f = judge("inference", 0).unwrap_err();
        assert_eq!(f.message, "service \"inference\" is UNKNOWN, not SERVING");
        assert_eq!(judge("x", 3).unwrap_err().reason, FailureReason::Http4xx);
        assert_eq!(judge("x", 9).unwrap_err().reason, FailureReason::InvalidResponse);
    }
}
