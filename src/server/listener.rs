//! The accept loop of the agent's own port: what keeps a hostile or careless client of
//! `/metrics` or the status page from starving the probes.
//!
//! Every connection costs a file descriptor, and the probes need descriptors to reach
//! the endpoints they watch: a port that accepts without bound lets a few hundred silent
//! connections turn every probe into a false "connect: Too many open files" page. So:
//!
//! - at most [`ListenerLimits::max_connections`] connections are open; one more is
//!   accepted and closed at once (counted), so the kernel's backlog does not fill either;
//! - a new connection must deliver a complete request head (TLS handshake included)
//!   within `header_read_timeout`, else it is closed: silent connections and slowloris;
//! - a kept-alive connection may wait `idle_timeout` for the first byte of its next
//!   request, and then has `header_read_timeout` for the rest of the head (Go's
//!   `IdleTimeout` and `ReadHeaderTimeout`);
//! - a failed accept (EMFILE) backs off instead of spinning on the listener.
//!
//! The default cap follows the process's descriptor limit (see
//! [`ListenerLimits::for_descriptor_limit`]), raised to the hard limit at start by
//! [`raise_descriptor_limit`].

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::webconfig::{WebConfig, WebHandle};
use crate::metrics::Metrics;

/// Limits of the agent's own port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections open at once; more are closed at once.
    pub max_connections: usize,
    /// From accept, or from the first byte of a later request, to a complete request head.
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for the first byte of its next request.
    pub idle_timeout: Duration,
}

/// Descriptors kept for the probes, the store and the runtime whatever the cap.
const RESERVED_DESCRIPTORS: u64 = 64;
/// Enough for Prometheus, a few dashboards and people on the status page.
const MOST_CONNECTIONS: u64 = 1024;

impl ListenerLimits {
    /// A quarter of the descriptors above a reserve, between 4 and 1,024: under
    /// `ulimit -n 256` that is 48 connections, leaving the probes ~200 descriptors
    /// however many clients try; at the common 1,024 soft limit (not raised) 240; above
    /// ~4,200 (any raised limit) 1,024.
    pub fn for_descriptor_limit(nofile: u64) -> Self {
        let cap = (nofile.saturating_sub(RESERVED_DESCRIPTORS) / 4).clamp(4, MOST_CONNECTIONS);
        ListenerLimits {
            max_connections: usize::try_from(cap).unwrap_or(4),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (as Go runtimes do at start) and
/// returns the soft limit now in force, or `None` where it cannot be read.
pub fn raise_descriptor_limit() -> Option<u64> {
    let (soft, hard) = rlimit::Resource::NOFILE.get().ok()?;
    if soft < hard {
        match rlimit::Resource::NOFILE.set(hard, hard) {
            Ok(()) => return Some(hard),
            Err(e) => tracing::warn!(error = %e, soft, hard, "Cannot raise the open-file limit."),
        }
    }
    Some(soft)
}

/// One connection's progress, read by its watchdog.
#[derive(Default)]
struct Activity {
    /// Requests being answered now.
    in_flight: AtomicUsize,
    /// Requests started on this connection.
    started: AtomicU64,
    /// When the connection last became idle, in ms since it was accepted.
    idle_since_ms: AtomicU64,
    /// When the first byte of the request head now arriving came, in ms since accept;
    /// `NO_HEAD` while no head is arriving.
    head_since_ms: AtomicU64,
}

const NO_HEAD: u64 = u64::MAX;

impl Activity {
    fn new() -> Self {
        Activity {
            head_since_ms: AtomicU64::new(NO_HEAD),
            ..Activity::default()
        }
    }

    /// Bytes arrived while no request was being answered: a head has begun.
    fn note_read(&self, opened: Instant) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let _ = self.head_since_ms.compare_exchange(
                NO_HEAD,
                ms_since(opened),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
}

fn ms_since(opened: Instant) -> u64 {
    u64::try_from(opened.elapsed().as_millis()).unwrap_or(NO_HEAD - 1)
}

/// The connection's stream, noting when request bytes arrive (for the watchdog).
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
    opened: Instant,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.note_read(this.opened);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Ends a request's count when its response is ready (or its handler panics).
struct InFlight {
    activity: Arc<Activity>,
    opened: Instant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.activity
            .idle_since_ms
            .store(ms_since(self.opened), Ordering::Relaxed);
        self.activity.in_flight.fetch_sub(1, Ordering::Release);
    }
}

/// What every connection shares.
struct Shared {
    app: TowerToHyperService<Router>,
    web: WebHandle,
    limits: ListenerLimits,
    metrics: Arc<Metrics>,
    open: AtomicUsize,
}

/// Serves `app` on `listener` until `shutdown` fires, then lets requests in flight
/// finish (up to a few seconds) and closes every connection.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    web: WebHandle,
    limits: ListenerLimits,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared {
        app: TowerToHyperService::new(app),
        web,
        limits,
        metrics,
        open: AtomicUsize::new(0),
    });
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                backoff = Duration::ZERO;
                a
            }
            Err(e) => {
                // Out of descriptors (or another transient failure): the pending
                // connection stays in the backlog, so retrying at once would spin.
                backoff = (backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
                shared.metrics.listener_accept_error();
                tracing::warn!(error = %e, retry_in = ?backoff, "Cannot accept a connection on the agent's port.");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(backoff) => continue,
                }
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            shared.metrics.listener_rejected();
            tracing::debug!(%peer, max = limits.max_connections, "Connection refused: the agent's port is at max_connections.");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let open = shared.open.fetch_add(1, Ordering::Relaxed) + 1;
            shared.metrics.listener_open(open);
            serve_connection(stream, &shared, shutdown).await;
            let open = shared.open.fetch_sub(1, Ordering::Relaxed) - 1;
            shared.metrics.listener_open(open);
            drop(permit);
        });
    }
    drop(listener);
    connections.close();
    // Requests in flight get a moment; idle and half-sent connections are closed.
    let _ = tokio::time::timeout(Duration::from_secs(5), connections.wait()).await;
    Ok(())
}

/// Why the watchdog closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expired {
    Header,
    Idle,
}

async fn serve_connection(stream: tokio::net::TcpStream, shared: &Arc<Shared>, shutdown: CancellationToken) {
    let opened = Instant::now();
    let limits = shared.limits;
    // TLS settings of a reload apply to connections accepted after it; credentials and
    // headers to every request after it (see `serve_http`).
    let web = shared.web.current();
    match web.tls_acceptor() {
        None => serve_http(stream, shared, opened, shutdown).await,
        Some(acceptor) => {
            let handshake = tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
            let tls = tokio::select! {
                () = shutdown.cancelled() => return,
                h = handshake => h,
            };
            match tls {
                Ok(Ok(tls)) => serve_http(tls, shared, opened, shutdown).await,
                Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake on the agent's port failed."),
                Err(_) => shared.metrics.listener_timed_out("header"),
            }
        }
    }
}

async fn serve_http<S>(io: S, shared: &Arc<Shared>, opened: Instant, shutdown: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.limits;
    let activity = Arc::new(Activity::new());
    let io = Watched {
        inner: io,
        activity: activity.clone(),
        opened,
    };
    let service = {
        let shared = shared.clone();
        let activity = activity.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            activity.in_flight.fetch_add(1, Ordering::Acquire);
            activity.started.fetch_add(1, Ordering::Relaxed);
            activity.head_since_ms.store(NO_HEAD, Ordering::Relaxed);
            let guard = InFlight {
                activity: activity.clone(),
                opened,
            };
            let shared = shared.clone();
            // Read per request: a reload that revokes a password must reach a kept-alive
            // connection too, not only new ones.
            let web = shared.web.current();
            async move {
                let response = respond(&shared, &web, request).await;
                drop(guard);
                Ok::<_, Infallible>(response)
            }
        })
    };
    // hyper's own header timeout would also cut idle keep-alive waits short; the
    // watchdog keeps both clocks.
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let watchdog = watchdog(&activity, opened, limits);
    tokio::pin!(watchdog);
    tokio::select! {
        _ = conn.as_mut() => return,
        expired = &mut watchdog => {
            shared.metrics.listener_timed_out(match expired {
                Expired::Header => "header",
                Expired::Idle => "idle",
            });
            return;
        }
        () = shutdown.cancelled() => {}
    }
    // Shutting down: finish the request in flight, if any, then close.
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
}

/// Resolves when the connection has waited too long for a request: `header_read_timeout`
/// from accept or from a head's first byte, `idle_timeout` for that first byte between
/// requests. A request being answered pauses it.
async fn watchdog(activity: &Activity, opened: Instant, limits: ListenerLimits) -> Expired {
    let at = |ms: u64| opened + Duration::from_millis(ms);
    loop {
        let head = activity.head_since_ms.load(Ordering::Relaxed);
        let (from, limit, why) = if head != NO_HEAD {
            (at(head), limits.header_read_timeout, Expired::Header)
        } else if activity.started.load(Ordering::Relaxed) == 0 {
            (opened, limits.header_read_timeout, Expired::Header)
        } else {
            (
                at(activity.idle_since_ms.load(Ordering::Relaxed)),
                limits.idle_timeout,
                Expired::Idle,
            )
        };
        let deadline = from + limit;
        if activity.in_flight.load(Ordering::Acquire) == 0 && Instant::now() >= deadline {
            return why;
        }
        // Re-check at the deadline, and at least every second: a head may begin, or a
        // request end, meanwhile.
        let next = deadline.min(Instant::now() + Duration::from_secs(1));
        tokio::time::sleep_until(next).await;
    }
}

/// Authentication, then the app, then the headers every response carries.
async fn respond(shared: &Shared, web: &WebConfig, request: Request<Incoming>) -> Response<Body> {
    let mut response = match web.authorize(&request).await {
        super::webconfig::Access::Granted => {
            match hyper::service::Service::call(&shared.app, request).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        }
        super::webconfig::Access::Denied => {
            let mut r = Response::new(Body::from("Unauthorized\n"));
            *r.status_mut() = StatusCode::UNAUTHORIZED;
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
    };
    web.add_headers(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_probes_most_descriptors() {
        let at_256 = ListenerLimits::for_descriptor_limit(256);
        assert_eq!(at_256.max_connections, 48);
        assert!(256 - at_256.max_connections as u64 >= 200);
        assert_eq!(ListenerLimits::for_descriptor_limit(1024).max_connections, 240);
        assert_eq!(
            ListenerLimits::for_descriptor_limit(1 << 20).max_connections,
            1024
        );
        // Even an absurd limit leaves a working port.
        assert_eq!(ListenerLimits::for_descriptor_limit(10).max_connections, 4);
    }
}
