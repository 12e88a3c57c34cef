//! The agent's own port (default 9464), apart from any service it watches:
//!
//! - `GET /metrics`: our metrics; protobuf or OpenMetrics when the scraper asks for it,
//!   else the Prometheus text format 0.0.4. The text formats are streamed (scrape.rs).
//! - `GET /healthz`: the process is alive.
//! - `GET /readyz`: a configuration is loaded and the probes are scheduled.
//! - `GET /api/v1/probes`: each probe's latest outcome as JSON (no secrets);
//!   `GET /api/v1/probes/{name}`: one probe, with its active alerts (pages link here).
//! - `GET /api/v1/alerts`: active alerts (firing, and resolved in the last 15 minutes).
//! - `GET /api/v1/results?probe=&location=&since=&until=&limit=&cursor=`: run history,
//!   oldest first, paginated by an opaque cursor.
//! - `GET /api/v1/model_changes?probe=&location=&since=&until=&limit=`: changes of the
//!   served model, oldest first (events, not failures).
//! - `GET /`: the status page; `GET /probes/{name}`: one probe with its recent runs
//!   (rendered by [`page`]).
//!
//! Reads metrics, the store and the alert board only. History queries run on the
//! blocking pool, never on the async workers that serve `/metrics`. Connections are
//! accepted by [`listener`] (limits, timeouts, TLS) and secured by [`webconfig`]
//! (`--web.config.file`); every response carries the security headers.

mod listener;
mod page;
mod scrape;
pub mod webconfig;

pub use listener::{ListenerLimits, raise_descriptor_limit};
pub use webconfig::{WebConfig, WebHandle};

/// The agent's port when neither `--listen` nor agent.listen says otherwise.
pub const DEFAULT_PORT: u16 = 9464;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::alert::Firing;
use crate::metrics::{Metrics, TextFormat};
use crate::store::{Cursor, HistoryReader, Latest, RunQuery, RunRecord, StoreError};
use crate::time_zone::TimeZone;
use page::{AgentView, ProbeView};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PROTOBUF: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

#[derive(Clone)]
pub struct ServerState {
    pub metrics: Arc<Metrics>,
    pub latest: Arc<Latest>,
    /// Active alerts, as paging last published them.
    pub alerts: tokio::sync::watch::Receiver<Arc<Vec<Firing>>>,
    pub history: Arc<HistoryReader>,
    /// Runs that started more than this long ago (ms) are surely in the history.
    pub settle_ms: Arc<std::sync::atomic::AtomicU64>,
    /// agent.timezone: the zone the status page shows times in.
    pub time_zone: Arc<std::sync::RwLock<TimeZone>>,
    pub ready: Arc<AtomicBool>,
    pub location: String,
    pub started_at: SystemTime,
    pub board: Arc<BoardCache>,
    pub probe_list: Arc<ProbeListCache>,
}

/// The status page, reused for a few seconds and rebuilt by one request at a time: a
/// dozen people watching the page during an incident must not each re-read a week of
/// history, nor each hold a copy of its HTML.
#[derive(Default)]
pub struct BoardCache {
    cached: Mutex<Option<(Instant, bytes::Bytes)>>,
    building: tokio::sync::Mutex<()>,
}

/// The probe list's JSON, built by one request at a time and shared by those that
/// waited for it: at 10,000 probes each build took 30-57 MB for a 2 MB answer,
/// and 50 clients that asked at once and read slowly held 2.9 GB (RELIABILITY.md).
#[derive(Default)]
pub struct ProbeListCache {
    /// The last answer and when its build finished.
    last: Mutex<Option<(Instant, bytes::Bytes)>>,
    building: tokio::sync::Mutex<()>,
}

impl ProbeListCache {
    /// The last answer if its build finished after `asked`: it is then at most one
    /// build's time (tens of milliseconds at 10,000 probes) older than the request.
    fn finished_since(&self, asked: Instant) -> Option<bytes::Bytes> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref()
            .filter(|(at, _)| *at >= asked)
            .map(|(_, b)| b.clone())
    }
}

/// How long the status page is reused.
const BOARD_TTL: Duration = Duration::from_secs(5);
/// Runs on a probe's page.
const RECENT_RUNS: usize = 100;
/// `/api/v1/results` page size: default and most.
const RESULTS_LIMIT: (usize, usize) = (100, 1000);

/// How the port is served: its limits and its security settings.
#[derive(Debug, Clone)]
pub struct PortSettings {
    pub limits: ListenerLimits,
    /// Replaced on SIGHUP when a web config file is given.
    pub web: WebHandle,
}

impl Default for PortSettings {
    /// The limits for the process's descriptor limit as it is now, no TLS, no auth.
    fn default() -> Self {
        let nofile = rlimit::Resource::NOFILE.get().map_or(1024, |(soft, _)| soft);
        PortSettings {
            limits: ListenerLimits::for_descriptor_limit(nofile),
            web: WebHandle::default(),
        }
    }
}

/// Serves until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    state: ServerState,
    port: PortSettings,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let own_metrics = state.metrics.clone();
    let app = Router::new()
        .route("/", get(status_page))
        .route("/probes/{name}", get(probe_page))
        .route("/api/v1/results", get(results))
        .route("/api/v1/model_changes", get(model_changes))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/probes", get(probes))
        .route("/api/v1/probes/{name}", get(probe))
        .route("/api/v1/alerts", get(alerts))
        .with_state(state);
    listener::serve(listener, app, port.web, port.limits, own_metrics, shutdown).await
}

async fn metrics(State(s): State<ServerState>, headers: HeaderMap) -> Response {
    match negotiate(&headers) {
        Exposition::Protobuf => (
            [(header::CONTENT_TYPE, PROTOBUF)],
            scrape::protobuf_body(s.metrics),
        )
            .into_response(),
        Exposition::OpenMetrics => (
            [(header::CONTENT_TYPE, OPENMETRICS)],
            scrape::body(s.metrics, TextFormat::OpenMetrics),
        )
            .into_response(),
        Exposition::Text => (
            [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
            scrape::body(s.metrics, TextFormat::Prometheus),
        )
            .into_response(),
    }
}

/// The formats `/metrics` speaks, in the order taken when a scraper rates two alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Exposition {
    /// What Prometheus asks for first with native histograms enabled: the only format
    /// that can carry them.
    Protobuf,
    OpenMetrics,
    Text,
}

/// The format the Accept headers rate highest (`q`, 1 when absent; 0 refuses it); the
/// text format when they name none we speak. Protobuf only as Prometheus names it
/// (`proto=io.prometheus.client.MetricFamily;encoding=delimited`): another message or
/// framing under the same media type is not what we send.
fn negotiate(headers: &HeaderMap) -> Exposition {
    let ranges = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    let mut best: Option<(f32, Exposition)> = None;
    for range in ranges {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut q = 1.0_f32;
        let (mut proto, mut encoding) = (None, None);
        for param in parts {
            let (name, value) = param.split_once('=').unwrap_or((param, ""));
            let value = value.trim().trim_matches('"');
            match name.trim().to_ascii_lowercase().as_str() {
                "q" => q = value.parse().unwrap_or(0.0),
                "proto" => proto = Some(value),
                "encoding" => encoding = Some(value),
                _ => {}
            }
        }
        let format = match media.as_str() {
            "application/vnd.google.protobuf"
                if proto == Some("io.prometheus.client.MetricFamily") && encoding == Some("delimited") =>
            {
                Exposition::Protobuf
            }
            "application/openmetrics-text" => Exposition::OpenMetrics,
            "text/plain" | "text/*" | "*/*" => Exposition::Text,
            _ => continue,
        };
        if q <= 0.0 {
            continue;
        }
        let better =
            best.is_none_or(|(best_q, best_format)| q > best_q || (q == best_q && format < best_format));
        if better {
            best = Some((q, format));
        }
    }
    best.map_or(Exposition::Text, |(_, format)| format)
}

async fn readyz(State(s): State<ServerState>) -> Response {
    if s.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}

async fn probes(State(s): State<ServerState>) -> Response {
    let asked = Instant::now();
    let text = {
        // One build at a time; whoever waited for it takes its answer.
        let _building = s.probe_list.building.lock().await;
        match s.probe_list.finished_since(asked) {
            Some(text) => text,
            None => {
                // Off the workers: at 10,000 probes this is tens of milliseconds of CPU,
                // which on a worker would delay the runs it shares that worker with, and
                // their timestamps.
                let (latest, location) = (s.latest.clone(), s.location.clone());
                let built = tokio::task::spawn_blocking(move || {
                    let mut body = latest.to_json();
                    body["location"] = serde_json::Value::from(location.as_str());
                    bytes::Bytes::from(body.to_string())
                });
                let Ok(text) = built.await else {
                    return StatusCode::INTERNAL_SERVER_ERROR.into_response();
                };
                *s.probe_list.last.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((Instant::now(), text.clone()));
                text
            }
        }
    };
    ([(header::CONTENT_TYPE, "application/json")], paced(text)).into_response()
}

/// A large answer (10 MB of JSON at 10,000 probes) as a body that hands the connection
/// 64 KiB at a time and yields to the other tasks between pieces: given whole, the
/// worker writing it to a fast client is busy for ~20 ms at once, and a run sharing the
/// worker reads its first token that much late (measured: TTFT max 42 ms against
/// 25 ms for a 20 ms stream, with one worker and this answer every 2 s).
fn paced(text: impl Into<bytes::Bytes>) -> axum::body::Body {
    axum::body::Body::new(Paced {
        rest: text.into(),
        yielded: false,
    })
}

struct Paced {
    rest: bytes::Bytes,
    yielded: bool,
}

impl hyper::body::Body for Paced {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        use std::task::Poll;
        const PIECE: usize = 64 * 1024;
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        if !std::mem::replace(&mut self.yielded, true) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.yielded = false;
        let n = self.rest.len().min(PIECE);
        let piece = self.rest.split_to(n);
        Poll::Ready(Some(Ok(hyper::body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

async fn probe(State(s): State<ServerState>, Path(name): Path<String>) -> Response {
    if let Err(message) = probe_name(&name) {
        return (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response();
    }
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

async fn status_page(State(s): State<ServerState>) -> Response {
    let fresh = |s: &ServerState| {
        s.board
            .cached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(at, _)| at.elapsed() < BOARD_TTL)
            .map(|(_, html)| html.clone())
    };
    let html = match fresh(&s) {
        Some(html) => html,
        None => {
            // One rebuild at a time: whoever waited finds the fresh page.
            let _building = s.board.building.lock().await;
            match fresh(&s) {
                Some(html) => html,
                None => {
                    // Built and rendered off the worker, once for every reader of the
                    // next seconds: at 10,000 probes the page is 12 MB of HTML, and 50
                    // slow readers rendering one each held 0.9 GB.
                    let s2 = s.clone();
                    let rendered = tokio::task::spawn_blocking(move || {
                        board(&s2, None).map(|b| bytes::Bytes::from(page::index(&b.0, &b.1)))
                    });
                    match rendered.await {
                        Ok(Ok(html)) => {
                            *s.board.cached.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some((Instant::now(), html.clone()));
                            html
                        }
                        Ok(Err(e)) => return history_error(&e),
                        Err(e) => return internal(&e.to_string()),
                    }
                }
            }
        }
    };
    // Sent in pieces, as the probe list (see `paced`).
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], paced(html)).into_response()
}

async fn probe_page(State(s): State<ServerState>, Path(name): Path<String>) -> Response {
    if let Err(message) = probe_name(&name) {
        return (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response();
    }
    if s.latest.probe_json(&name).is_none() {
        return (StatusCode::NOT_FOUND, format!("no probe named {name:?}\n")).into_response();
    }
    let s2 = s.clone();
    let built = tokio::task::spawn_blocking(move || {
        let (agent, mut views) = board(&s2, Some(&name))?;
        let recent = s2.history.recent(&name, &s2.location, RECENT_RUNS)?;
        Ok::<_, StoreError>((agent, views.pop(), recent))
    })
    .await;
    match built {
        Ok(Ok((agent, Some(view), recent))) => Html(page::probe_page(&agent, &view, &recent)).into_response(),
        Ok(Ok((_, None, _))) => StatusCode::NOT_FOUND.into_response(),
        Ok(Err(e)) => history_error(&e),
        Err(e) => internal(&e.to_string()),
    }
}

/// The most model changes the status page marks on its charts, all probes together.
const MAX_CHART_MARKS: usize = 1000;

/// The page's figures: every configured probe (or one), with 7 days of this
/// location's history, its latest outcome and its firing alerts.
fn board(s: &ServerState, only: Option<&str>) -> Result<(AgentView, Vec<ProbeView>), StoreError> {
    let now = SystemTime::now();
    let alerts = s.alerts.borrow().clone();
    let firing = |probe: &str| -> Vec<Firing> {
        alerts
            .iter()
            .filter(|f| f.alert.probe == probe && f.alert.resolved_at.is_none())
            .cloned()
            .collect()
    };
    let outcomes: Vec<_> = s
        .latest
        .outcomes()
        .into_iter()
        .filter(|(name, _)| only.is_none_or(|o| *o == **name))
        .collect();
    let query = RunQuery {
        probe: only.map(str::to_owned),
        location: Some(s.location.clone()),
        since: now
            .checked_sub(page::WINDOWS[2].0)
            .unwrap_or(SystemTime::UNIX_EPOCH),
        until: now + Duration::from_secs(1),
    };
    let first_runs = s.history.first_runs(&s.location)?;
    // The charts' markers: the changes of the longest chart span (24 h); a change is a
    // release, so a few, and the bound only guards against a flapping identity.
    let marked = RunQuery {
        since: now
            .checked_sub(page::WINDOWS[1].0)
            .unwrap_or(SystemTime::UNIX_EPOCH),
        ..query.clone()
    };
    let mut changes: HashMap<String, Vec<crate::store::ModelChange>> = HashMap::new();
    for c in s.history.model_changes(&marked, MAX_CHART_MARKS)? {
        changes.entry(c.probe.clone()).or_default().push(c);
    }
    let configured: std::collections::HashSet<&str> = outcomes.iter().map(|(n, _)| &**n).collect();
    let mut views: HashMap<Arc<str>, ProbeView> = HashMap::new();
    s.history.for_each_series(&query, |runs| {
        let name = runs[0].probe.clone();
        if configured.contains(&*name) {
            let view = ProbeView::new(&name, &runs, first_runs.get(&*name).copied(), firing(&name), now);
            views.insert(name, view);
        }
    })?;
    let probes = outcomes
        .into_iter()
        .map(|(name, last)| {
            let mut view = views.remove(&name).unwrap_or_else(|| {
                ProbeView::new(&name, &[], first_runs.get(&*name).copied(), firing(&name), now)
            });
            view.model_changes = changes.remove(&*name).unwrap_or_default();
            if let Some(o) = last {
                view.kind = Some(o.probe.kind.to_owned());
                view.model = Some(o.probe.model.clone()).filter(|m| !m.is_empty());
                view.endpoint = Some(o.probe.endpoint.clone());
                view.query.clone_from(&o.probe.query);
                // The history writer may be up to its commit window (half a second) behind.
                if view.last.as_ref().is_none_or(|r| r.at < o.started_at) {
                    let record = RunRecord::from_outcome(&o);
                    if !record.success() {
                        view.last_failure = Some(record.clone());
                    }
                    view.last = Some(record);
                }
            }
            view
        })
        .collect();
    let agent = AgentView {
        location: s.location.clone(),
        started_at: s.started_at,
        history_since: first_runs.values().min().copied(),
        now,
        time_zone: *s.time_zone.read().unwrap_or_else(|p| p.into_inner()),
    };
    Ok((agent, probes))
}

async fn results(State(s): State<ServerState>, RawQuery(raw): RawQuery) -> Response {
    let now = SystemTime::now();
    let query = match results_query(raw.as_deref(), now) {
        Ok(q) => q,
        Err(message) => return (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response(),
    };
    let (mut q, cursor, limit) = query;
    // Runs are written when they finish but listed by start: a run that started before
    // `complete_until` has surely finished and been written, so within it pages never
    // skip a run; later ones are served by the next query (since=complete_until).
    let settle = Duration::from_millis(s.settle_ms.load(Ordering::Relaxed));
    let complete_until = now
        .checked_sub(settle)
        .unwrap_or(SystemTime::UNIX_EPOCH)
        .max(SystemTime::UNIX_EPOCH);
    q.until = q.until.min(complete_until);
    q.since = q.since.min(q.until);
    let q2 = q.clone();
    let history = s.history.clone();
    let page = match tokio::task::spawn_blocking(move || history.results(&q2, cursor, limit)).await {
        Ok(Ok(page)) => page,
        Ok(Err(e)) => return history_error(&e),
        Err(e) => return internal(&e.to_string()),
    };
    let next = page.next.map(|c| {
        let mut link = format!(
            "/api/v1/results?since={}&until={}&limit={limit}&cursor={}",
            humantime::format_rfc3339_millis(q.since),
            humantime::format_rfc3339_millis(q.until),
            c.encode()
        );
        if let Some(p) = &q.probe {
            link += &format!("&probe={}", page::url_encode(p));
        }
        if let Some(l) = &q.location {
            link += &format!("&location={}", page::url_encode(l));
        }
        link
    });
    let body = serde_json::json!({
        "since": humantime::format_rfc3339_millis(q.since).to_string(),
        "until": humantime::format_rfc3339_millis(q.until).to_string(),
        "count": page.runs.len(),
        "results": page.runs.iter().map(RunRecord::to_json).collect::<Vec<_>>(),
        "complete_until": humantime::format_rfc3339_millis(complete_until).to_string(),
        "next_cursor": page.next.map(Cursor::encode),
        "next": next,
    });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// `/api/v1/model_changes`: the results' parameters (a cursor is refused: the changes
/// of a window are few, `limit` of them at most).
async fn model_changes(State(s): State<ServerState>, RawQuery(raw): RawQuery) -> Response {
    let (q, cursor, limit) = match results_query(raw.as_deref(), SystemTime::now()) {
        Ok(q) => q,
        Err(message) => return (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response(),
    };
    if cursor.is_some() {
        return (StatusCode::BAD_REQUEST, "cursor: model changes are not paged\n").into_response();
    }
    let (history, q2) = (s.history.clone(), q.clone());
    let changes = match tokio::task::spawn_blocking(move || history.model_changes(&q2, limit)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return history_error(&e),
        Err(e) => return internal(&e.to_string()),
    };
    let body = serde_json::json!({
        "since": humantime::format_rfc3339_millis(q.since).to_string(),
        "until": humantime::format_rfc3339_millis(q.until).to_string(),
        "count": changes.len(),
        "model_changes": changes.iter().map(crate::store::ModelChange::to_json).collect::<Vec<_>>(),
    });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// Longest query string `/api/v1/results` reads: its six parameters fit in a few
/// hundred bytes; anything longer is refused before it is decoded.
const MAX_QUERY_LEN: usize = 4096;

/// The parameters of `/api/v1/results`, from the raw query string. Total: any bytes
/// give either a query or a message naming the parameter and what is wrong with it
/// (unknown, repeated, a `%` not followed by two hex digits, not UTF-8 once decoded, not
/// a time, out of range). `since`/`until`: RFC 3339 (`2026-11-30T12:00:00Z`), Unix
/// seconds, or a duration meaning that long ago (`15m`, `7d`). Defaults: the last 24
/// hours.
pub(crate) fn results_query(
    raw: Option<&str>,
    now: SystemTime,
) -> Result<(RunQuery, Option<Cursor>, usize), String> {
    const KEYS: [&str; 6] = ["probe", "location", "since", "until", "limit", "cursor"];
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_QUERY_LEN {
        return Err(format!(
            "the query string is {} bytes; at most {MAX_QUERY_LEN}",
            raw.len()
        ));
    }
    let mut params: HashMap<&'static str, String> = HashMap::new();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = form_decode(k).map_err(|why| format!("a parameter name {why}"))?;
        let Some(key) = KEYS.iter().copied().find(|known| *known == k) else {
            return Err(format!(
                "unknown parameter {:?}; use {}",
                crate::human::shorten(&k, 40),
                KEYS.join(", ")
            ));
        };
        let v = form_decode(v).map_err(|why| format!("{key}: the value {why}"))?;
        if params.insert(key, v).is_some() {
            return Err(format!("{key} is given twice"));
        }
    }
    let shown = |v: &str| format!("{:?}", crate::human::shorten(v, 40));
    let time = |key: &str, default: SystemTime| -> Result<SystemTime, String> {
        match params.get(key) {
            None => Ok(default),
            Some(v) => crate::human::time_arg(v, now).map_err(|why| format!("{key}={} {why}", shown(v))),
        }
    };
    // The defaults stay in the printable range too, even with a clock at 1970 (a board
    // without a real-time clock, before NTP): the fuzzer found that one.
    let (first, last) = crate::human::time_range();
    let clamp = |t: Option<SystemTime>, or: SystemTime| t.unwrap_or(or).clamp(first, last);
    let since = time(
        "since",
        clamp(now.checked_sub(Duration::from_secs(86_400)), first),
    )?;
    let until = time("until", clamp(now.checked_add(Duration::from_secs(1)), last))?;
    if since > until {
        return Err("since is after until".into());
    }
    let limit = match params.get("limit") {
        None => RESULTS_LIMIT.0,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=RESULTS_LIMIT.1).contains(&n) => n,
            _ => return Err(format!("limit={}: give 1 to {}", shown(v), RESULTS_LIMIT.1)),
        },
    };
    let cursor = match params.get("cursor") {
        None => None,
        Some(c) => Some(
            Cursor::decode(c).ok_or_else(|| format!("cursor={} is not a cursor this API gave", shown(c)))?,
        ),
    };
    // Probe names and locations are label values (see config): anything else can match
    // nothing, so say so instead of answering an empty page.
    let name = |key: &str| -> Result<Option<String>, String> {
        match params.get(key) {
            None => Ok(None),
            Some(v) if crate::config::valid_label_value(v) => Ok(Some(v.clone())),
            Some(v) => Err(format!(
                "{key}={} is not a {key} name: 1-64 letters, digits, `_`, `-` or `.`",
                shown(v)
            )),
        }
    };
    let query = RunQuery {
        probe: name("probe")?,
        location: name("location")?,
        since,
        until,
    };
    Ok((query, cursor, limit))
}

/// Decodes one `application/x-www-form-urlencoded` component strictly: `+` is a space,
/// `%` must be followed by two hex digits, and the bytes must be UTF-8. The message
/// completes "the value ...".
fn form_decode(s: &str) -> Result<String, &'static str> {
    // Checked first: the percent-encoding crate keeps an invalid `%` as it is.
    let bytes = s.as_bytes();
    let hex = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_hexdigit);
    if (0..bytes.len()).any(|i| bytes[i] == b'%' && !(hex(i + 1) && hex(i + 2))) {
        return Err("has a `%` not followed by two hex digits");
    }
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| "is not UTF-8 once percent-decoded")
}

/// A probe name from a path segment (`/probes/{name}`, `/api/v1/probes/{name}`): a
/// label value, as the config requires, or a message to answer with 400.
pub(crate) fn probe_name(name: &str) -> Result<&str, String> {
    if crate::config::valid_label_value(name) {
        Ok(name)
    } else {
        Err(format!(
            "{:?} is not a probe name: 1-64 letters, digits, `_`, `-` or `.`",
            crate::human::shorten(name, 40)
        ))
    }
}

fn history_error(e: &StoreError) -> Response {
    tracing::error!(error = %e, "Cannot read the run history.");
    internal("cannot read the run history; see the agent's log")
}

fn internal(message: &str) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, format!("{message}\n")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_for(accept: &[&str]) -> Exposition {
        let mut headers = HeaderMap::new();
        for a in accept {
            headers.append(header::ACCEPT, a.parse().unwrap());
        }
        negotiate(&headers)
    }

    #[test]
    fn the_scrape_format_is_the_one_the_scraper_rates_highest() {
        // Prometheus 2.42 with --enable-feature=native-histograms, then without.
        let native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let classic = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(format_for(&[native]), Exposition::Protobuf);
        assert_eq!(format_for(&[classic]), Exposition::OpenMetrics);
        assert_eq!(format_for(&[]), Exposition::Text);
        assert_eq!(format_for(&["*/*"]), Exposition::Text);
        assert_eq!(format_for(&["application/json"]), Exposition::Text);
        // Rated lower than text, or refused: not taken.
        assert_eq!(
            format_for(&["application/openmetrics-text;q=0.2, text/plain"]),
            Exposition::Text
        );
        assert_eq!(
            format_for(&[
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0",
                "application/openmetrics-text; q=0.5"
            ]),
            Exposition::OpenMetrics
        );
        // Protobuf we do not send: another message, or no length-delimited framing.
        for other in [
            "application/vnd.google.protobuf;proto=io.prometheus.client.Other;encoding=delimited",
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text",
            "application/vnd.google.protobuf",
        ] {
            assert_eq!(format_for(&[other]), Exposition::Text, "{other}");
        }
        // Equal rates: the richer format.
        assert_eq!(
            format_for(&["text/plain, application/openmetrics-text"]),
            Exposition::OpenMetrics
        );
    }

    #[test]
    fn times_take_three_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(
            crate::human::parse_time("15m", now),
            Some(now - Duration::from_secs(900))
        );
        assert_eq!(crate::human::parse_time("1800000000", now), Some(now));
        assert_eq!(
            crate::human::parse_time("2027-01-15T08:00:00Z", now),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        );
        assert_eq!(
            crate::human::parse_time("2027-01-15T10:00:00+02:00", now),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        );
        assert_eq!(crate::human::parse_time("yesterday", now), None);
    }

    #[test]
    fn bad_result_queries_say_what_is_wrong() {
        let now = SystemTime::now();
        let q = |query: &str| results_query(Some(query), now).map(|_| ()).unwrap_err();
        assert!(q("limit=0").contains("limit"));
        assert!(q("limit=5000").contains("1 to 1000"));
        assert!(q("since=soon").contains("RFC 3339"));
        assert!(q("cursor=x").contains("cursor"));
        assert!(q("probes=a").contains("unknown parameter"));
        assert!(q("since=1h&until=2h").contains("after"));
    }

    /// Each of these panicked the handler, was silently read as something else, or was
    /// answered with an empty page.
    #[test]
    fn hostile_result_queries_are_refused_with_the_parameter_named() {
        let now = SystemTime::now();
        let q = |query: &str| match results_query(Some(query), now) {
            Ok(_) => panic!("{query:?} accepted"),
            Err(e) => e,
        };
        for (query, says) in [
            ("since=1e308", "since=\"1e308\" is out of range"),
            ("until=1e308", "until=\"1e308\" is out of range"),
            ("since=18446744073709551616", "out of range"),
            ("since=100y", "out of range"),
            ("since=99999999999999999999999y", "since="),
            ("since=0000-01-01T00:00:00%2B00:00", "out of range"),
            ("since=-5", "Unix seconds are 0 or more"),
            ("since=NaN", "Unix seconds are 0 or more"),
            ("limit=99999999999999999999999", "limit="),
            ("limit=-1", "limit="),
            ("cursor=99999999999999999999.1", "cursor="),
            ("since=%00", "since="),
            ("since=1h&since=2h", "since is given twice"),
            (
                "since=%ZZ",
                "since: the value has a `%` not followed by two hex digits",
            ),
            ("since=%4", "two hex digits"),
            ("probe=%FF%FE", "probe: the value is not UTF-8"),
            ("%FF=1", "a parameter name is not UTF-8"),
            ("probe=a%20b", "probe=\"a b\" is not a probe name"),
            ("location=%0Aevil", "is not a location name"),
        ] {
            let e = q(query);
            assert!(e.contains(says), "{query:?}: {e}");
        }
        let long = format!("probe={}", "a".repeat(1 << 20));
        assert!(q(&long).contains("at most 4096"));
        // A long value is not echoed whole.
        let e = q(&format!("probe={}", "%C3%A9".repeat(600)));
        assert!(e.len() < 200, "{e}");
    }

    #[test]
    fn good_result_queries_decode_as_forms_do() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (q, cursor, limit) = results_query(
            Some("probe=vllm-chat&location=eu.1&since=2027-01-15T10:00:00%2B02:00&until=1800000001&limit=5&cursor=17.3&"),
            now,
        )
        .unwrap();
        assert_eq!(q.probe.as_deref(), Some("vllm-chat"));
        assert_eq!(q.location.as_deref(), Some("eu.1"));
        assert_eq!(q.since, now);
        assert_eq!(q.until, now + Duration::from_secs(1));
        assert_eq!((cursor.map(Cursor::encode), limit), (Some("17.3".to_owned()), 5));
        let (q, cursor, limit) = results_query(None, now).unwrap();
        assert_eq!((q.probe, cursor.is_none(), limit), (None, true, RESULTS_LIMIT.0));
        // With the clock at the epoch, the default `since` is the epoch, not a day before
        // it (which could not be printed).
        let (q, _, _) = results_query(None, SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(q.since, SystemTime::UNIX_EPOCH);
        let _ = humantime::format_rfc3339_millis(q.since).to_string();
    }

    #[test]
    fn probe_names_in_paths_are_label_values() {
        assert_eq!(probe_name("vllm-chat.eu_1"), Ok("vllm-chat.eu_1"));
        for bad in ["", "a b", "a\0b", "<script>", "é", &"a".repeat(65)] {
            assert!(
                probe_name(bad).unwrap_err().contains("not a probe name"),
                "{bad:?}"
            );
        }
        assert!(probe_name(&"x".repeat(100_000)).unwrap_err().len() < 200);
    }
}
