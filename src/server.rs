//! The agent's own port (default 9464), apart from any service it watches:
//!
//! - `GET /metrics`: our metrics; OpenMetrics when the scraper asks for it, else the
//!   Prometheus text format 0.0.4.
//! - `GET /healthz`: the process is alive.
//! - `GET /readyz`: a configuration is loaded and the probes are scheduled.
//! - `GET /api/v1/probes`: each probe's latest outcome as JSON (no secrets);
//!   `GET /api/v1/probes/{name}`: one probe, with its active alerts (pages link here).
//! - `GET /api/v1/alerts`: active alerts (firing, and resolved in the last 15 minutes).
//! - `GET /`: a plain index of the above.
//!
//! Reads metrics, the store and the alert board only.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::alert::Firing;
use crate::metrics::Metrics;
use crate::store::Latest;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone)]
pub struct ServerState {
    pub metrics: Arc<Metrics>,
    pub latest: Arc<Latest>,
    /// Active alerts, as paging last published them.
    pub alerts: tokio::sync::watch::Receiver<Arc<Vec<Firing>>>,
    pub ready: Arc<AtomicBool>,
    pub location: String,
}

/// Serves until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    state: ServerState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/probes", get(probes))
        .route("/api/v1/probes/{name}", get(probe))
        .route("/api/v1/alerts", get(alerts))
        .with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

async fn metrics(State(s): State<ServerState>, headers: HeaderMap) -> Response {
    let wants_openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if wants_openmetrics {
        (
            [(header::CONTENT_TYPE, OPENMETRICS)],
            s.metrics.render_openmetrics(),
        )
            .into_response()
    } else {
        ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], s.metrics.render_text()).into_response()
    }
}

async fn readyz(State(s): State<ServerState>) -> Response {
    if s.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}

async fn probes(State(s): State<ServerState>) -> Response {
    let mut body = s.latest.to_json();
    body["location"] = serde_json::Value::from(s.location.as_str());
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn probe(State(s): State<ServerState>, Path(name): Path<String>) -> Response {
    let Some(mut body) = s.latest.probe_json(&name) else {
        return (StatusCode::NOT_FOUND, format!("no probe named {name:?}\n")).into_response();
    };
    body["location"] = serde_json::Value::from(s.location.as_str());
    let alerts = s.alerts.borrow().clone();
    body["alerts"] = alerts
        .iter()
        .filter(|f| f.alert.probe == name)
        .map(alert_json)
        .collect();
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn alerts(State(s): State<ServerState>) -> Response {
    let alerts = s.alerts.borrow().clone();
    let list: Vec<serde_json::Value> = alerts.iter().map(alert_json).collect();
    let body = serde_json::json!({ "location": s.location, "alerts": list });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn alert_json(f: &Firing) -> serde_json::Value {
    let a = &f.alert;
    let time = |t: std::time::SystemTime| crate::alert::rfc3339(t);
    serde_json::json!({
        "alertname": a.alertname(),
        "state": if a.resolved_at.is_some() { "resolved" } else { "firing" },
        "severity": a.severity.as_str(),
        "probe": a.probe,
        "summary": a.summary,
        "description": a.description,
        "reason": a.reason,
        "last_status": a.last_status,
        "since": time(a.since),
        "fired_at": time(a.fired_at),
        "resolved_at": a.resolved_at.map(time),
        "receivers": f.receivers,
    })
}

async fn index(State(s): State<ServerState>) -> Html<String> {
    Html(format!(
        "<!doctype html><meta charset=utf-8><title>inferprobe</title>\
         <h1>inferprobe {}</h1><p>Location: {}</p><ul>\
         <li><a href=\"/metrics\">/metrics</a></li>\
         <li><a href=\"/api/v1/probes\">/api/v1/probes</a></li>\
         <li><a href=\"/api/v1/alerts\">/api/v1/alerts</a></li>\
         <li><a href=\"/healthz\">/healthz</a>, <a href=\"/readyz\">/readyz</a></li></ul>",
        env!("CARGO_PKG_VERSION"),
        html_escape(&s.location)
    ))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
