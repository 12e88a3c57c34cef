//! The probe's HTTP path, with a timestamp at each phase: DNS, TCP connect, TLS, response
//! headers. Built on hyper's connection API and tokio-rustls directly, because a pooled
//! client (reqwest) hides these phases. Probes see only [`HttpClient`] and
//! [`BodyStream`]; nothing here knows about LLM protocols.
//!
//! By default every run opens a fresh connection, as a new user does; with
//! `reuse_connections` an idle connection is kept between runs and the run reports that
//! it reused one (so its TTFB has no connect or TLS in it).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

use super::{TlsRoots, TlsSetupError};
use crate::config::TlsConfig;
use crate::outcome::{FailureReason, Marks, Observation};

/// The connect attempt each address gets when more addresses remain.
const PER_ADDRESS_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// hyper's errors before a response head: a reply that is not HTTP is the server's
/// protocol fault; anything else is the connection breaking.
fn http_error(e: &hyper::Error) -> NetError {
    if e.is_parse() || e.is_parse_too_large() || e.is_parse_status() {
        NetError::Protocol(describe_hyper_error(e))
    } else {
        NetError::Http(describe_hyper_error(e))
    }
}

/// Why a request got no response headers.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot resolve {host}: {message}")]
    Dns { host: String, message: String },
    #[error("cannot connect to {addr}: {message}")]
    Connect { addr: String, message: String },
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    #[error("{0}")]
    Http(String),
    #[error("not an HTTP response: {0}")]
    Protocol(String),
    /// The agent itself is out of file descriptors or memory: says nothing about the
    /// endpoint.
    #[error(
        "the agent cannot {what}: {message} (the agent is out of file descriptors or memory, not the endpoint's fault)"
    )]
    Agent { what: &'static str, message: String },
}

impl NetError {
    pub fn reason(&self) -> FailureReason {
        match self {
            NetError::Dns { .. } => FailureReason::Dns,
            NetError::Connect { .. } => FailureReason::Connect,
            NetError::Tls(_) => FailureReason::Tls,
            // The connection was up but closed or broke before a full response head.
            NetError::Http(_) => FailureReason::Truncated,
            NetError::Protocol(_) => FailureReason::InvalidResponse,
            NetError::Agent { .. } => FailureReason::AgentError,
        }
    }
}

/// Whether this process cannot open one more file right now.
fn out_of_descriptors_now() -> bool {
    std::fs::File::open("/dev/null").is_err_and(|e| is_agent_exhaustion(&e))
}

/// Whether an I/O error is the agent's own exhaustion (no descriptor left in the process
/// or the system, no memory or buffers) rather than anything the endpoint did.
pub fn is_agent_exhaustion(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::OutOfMemory
        || matches!(
            e.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
        )
}

struct TlsTarget {
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    /// Waits until the connection can take a request; fails at once if it closed. Right
    /// after a response ends, hyper may not have marked the connection idle yet, so a
    /// synchronous `is_ready()` check would throw good connections away.
    async fn ready(&mut self) -> bool {
        match self {
            Sender::H1(s) => s.ready().await.is_ok(),
            Sender::H2(s) => s.ready().await.is_ok(),
        }
    }
}

/// An open connection: the request sender plus the task that drives the socket. The task
/// is aborted when the connection is dropped, so a cancelled run leaves nothing behind.
struct Connection {
    sender: Sender,
    driver: AbortHandle,
}

impl Connection {
    /// Spawns the task that drives the socket.
    fn new<F>(sender: Sender, driver: F) -> Self
    where
        F: Future + Send + 'static,
    {
        let driver = tokio::spawn(async move {
            let _ = driver.await;
        })
        .abort_handle();
        Connection { sender, driver }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// One endpoint's client: knows where to connect and how, and (with reuse) holds one idle
/// connection between runs.
pub struct HttpClient {
    host: String,
    port: u16,
    /// `host[:port]` for the Host header.
    authority: HeaderValue,
    tls: Option<TlsTarget>,
    reuse: bool,
    /// Speak HTTP/2 whatever ALPN said, and over plain TCP without an upgrade (prior
    /// knowledge): gRPC is HTTP/2 only.
    http2_only: bool,
    idle: Mutex<Option<Connection>>,
}

/// The response head and the connection it came on (kept alive for reuse when the body
/// was read to the end).
pub struct ResponseStream<'a> {
    pub response: Response<()>,
    pub body: BodyStream<'a>,
}

impl HttpClient {
    pub fn new(url: &Uri, roots: &TlsRoots, tls: &TlsConfig, reuse: bool) -> Result<Self, TlsSetupError> {
        let https = url.scheme_str() == Some("https");
        let raw_host = url.host().unwrap_or_default();
        let host = raw_host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
        let authority = match url.port_u16() {
            Some(p) => format!("{raw_host}:{p}"),
            None => raw_host.to_owned(),
        };
        let tls = if https {
            let name = tls.server_name.as_deref().unwrap_or(&host).to_owned();
            let config = if tls.insecure_skip_verify {
                roots.unverified_client_config()
            } else {
                roots.client_config(tls.ca_file.as_deref())?
            };
            Some(TlsTarget {
                config,
                server_name: ServerName::try_from(name.clone())
                    .map_err(|_| TlsSetupError::ServerName(name))?,
            })
        } else {
            None
        };
        Ok(HttpClient {
            authority: HeaderValue::from_str(&authority)
                .map_err(|_| TlsSetupError::ServerName(authority.clone()))?,
            host,
            port,
            tls,
            reuse,
            http2_only: false,
            idle: Mutex::new(None),
        })
    }

    /// HTTP/2 on every connection (prior knowledge on plain TCP, h2 over TLS whatever
    /// ALPN chose), as gRPC needs.
    pub fn http2_only(mut self) -> Self {
        self.http2_only = true;
        self
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Sends `request` (origin-form URI) and returns when the response head has arrived.
    /// Fills `obs.marks` as phases complete and `obs.connection_reused` as soon as it is
    /// known, so a caller that times out can tell which phase it was in.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
        obs: &mut Observation,
        max_body_bytes: u64,
    ) -> Result<ResponseStream<'_>, NetError> {
        let mut idle = if self.reuse {
            self.idle.lock().expect("idle lock").take()
        } else {
            None
        };
        if let Some(conn) = &mut idle
            && !conn.sender.ready().await
        {
            idle = None;
        }
        let (conn, response) = match idle {
            Some(mut conn) => {
                obs.connection_reused = true;
                match self.exchange(&mut conn, copy_request(&request)).await {
                    Ok(r) => (conn, r),
                    // The server closed the idle connection before our request went out
                    // (keep-alive timeouts race with a 30 s interval): retry once on a
                    // fresh one, as pooling clients do. Never after the request was sent:
                    // that would send a generation twice.
                    Err(e) if e.is_canceled() => {
                        obs.connection_reused = false;
                        self.send_fresh(request, &mut obs.marks).await?
                    }
                    Err(e) => return Err(http_error(&e)),
                }
            }
            None => self.send_fresh(request, &mut obs.marks).await?,
        };
        obs.marks.headers = Some(Instant::now());
        let (head, body) = response.into_parts();
        Ok(ResponseStream {
            response: Response::from_parts(head, ()),
            body: BodyStream {
                body,
                limit: max_body_bytes,
                received: 0,
                trailers: None,
                conn: Some(conn),
                client: self,
            },
        })
    }

    /// Opens a new connection and sends the request on it.
    async fn send_fresh(
        &self,
        request: Request<Full<Bytes>>,
        marks: &mut Marks,
    ) -> Result<(Connection, Response<Incoming>), NetError> {
        let mut conn = self.connect(marks).await?;
        let response = self
            .exchange(&mut conn, request)
            .await
            .map_err(|e| http_error(&e))?;
        Ok((conn, response))
    }

    async fn exchange(
        &self,
        conn: &mut Connection,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper::Error> {
        match &mut conn.sender {
            Sender::H1(s) => {
                request
                    .headers_mut()
                    .insert(http::header::HOST, self.authority.clone());
                s.send_request(request).await
            }
            Sender::H2(s) => {
                // HTTP/2 carries scheme and authority in the request's pseudo-headers.
                let pq = request.uri().path_and_query().cloned();
                let mut parts = http::uri::Parts::default();
                parts.scheme = Some(if self.tls.is_some() {
                    http::uri::Scheme::HTTPS
                } else {
                    http::uri::Scheme::HTTP
                });
                parts.authority = http::uri::Authority::try_from(self.authority.as_bytes()).ok();
                parts.path_and_query = pq;
                if let Ok(uri) = Uri::from_parts(parts) {
                    *request.uri_mut() = uri;
                }
                s.send_request(request).await
            }
        }
    }

    async fn connect(&self, marks: &mut Marks) -> Result<Connection, NetError> {
        let addrs: Vec<_> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| {
                // getaddrinfo often reports its own lack of descriptors as a resolver
                // failure (the errno is lost): ask the process itself.
                if is_agent_exhaustion(&e) || out_of_descriptors_now() {
                    NetError::Agent {
                        what: "resolve the host",
                        message: e.to_string(),
                    }
                } else {
                    NetError::Dns {
                        host: self.host.clone(),
                        message: e.to_string(),
                    }
                }
            })?
            .collect();
        marks.dns_done = Some(Instant::now());
        if addrs.is_empty() {
            return Err(NetError::Dns {
                host: self.host.clone(),
                message: "no address found".into(),
            });
        }
        let mut last_err = None;
        let mut tcp = None;
        for (i, addr) in addrs.iter().enumerate() {
            // An address that never answers (an IPv6 route that blackholes) must not use
            // the whole budget while others wait: all but the last get a bounded try.
            let attempt = TcpStream::connect(addr);
            let result = if i + 1 < addrs.len() {
                match tokio::time::timeout(PER_ADDRESS_CONNECT_TIMEOUT, attempt).await {
                    Ok(r) => r,
                    Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")),
                }
            } else {
                attempt.await
            };
            match result {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                // No other address would fare better: the socket is ours to lack.
                Err(e) if is_agent_exhaustion(&e) => {
                    return Err(NetError::Agent {
                        what: "open a socket",
                        message: e.to_string(),
                    });
                }
                Err(e) => last_err = Some((addr.to_string(), e.to_string())),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            let (addr, message) = last_err.unwrap_or_else(|| (self.host.clone(), "no address found".into()));
            NetError::Connect { addr, message }
        })?;
        marks.connect_done = Some(Instant::now());
        // Small writes (the request) must leave at once.
        let _ = tcp.set_nodelay(true);

        match &self.tls {
            None if self.http2_only => handshake_h2(TokioIo::new(tcp)).await,
            None => self.handshake_h1(TokioIo::new(tcp)).await,
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let stream = connector
                    .connect(tls.server_name.clone(), tcp)
                    .await
                    .map_err(|e| NetError::Tls(e.to_string()))?;
                marks.tls_done = Some(Instant::now());
                let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                if h2 || self.http2_only {
                    handshake_h2(TokioIo::new(stream)).await
                } else {
                    self.handshake_h1(TokioIo::new(stream)).await
                }
            }
        }
    }

    async fn handshake_h1<T>(&self, io: TokioIo<T>) -> Result<Connection, NetError>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = http1::handshake(io).await.map_err(|e| http_error(&e))?;
        Ok(Connection::new(Sender::H1(sender), conn))
    }
}

async fn handshake_h2<T>(io: TokioIo<T>) -> Result<Connection, NetError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
        .await
        .map_err(|e| http_error(&e))?;
    Ok(Connection::new(Sender::H2(sender), conn))
}

/// Why a body could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("response body exceeded the {limit}-byte cap (max_response_bytes)")]
    TooLarge { limit: u64 },
    #[error("connection broke mid-body: {0}")]
    Broken(String),
}

/// A response body read frame by frame, with a byte cap so an endless or oversized body
/// cannot grow the agent's memory or run forever.
pub struct BodyStream<'a> {
    body: Incoming,
    limit: u64,
    received: u64,
    /// The trailers, once the body has ended with them (HTTP/2; gRPC's status is there).
    trailers: Option<http::HeaderMap>,
    /// Kept alive while the body is read; parked for the next run when reusing.
    conn: Option<Connection>,
    client: &'a HttpClient,
}

impl BodyStream<'_> {
    /// The next piece of body data, `None` at the end of the body.
    pub async fn next(&mut self) -> Result<Option<Bytes>, BodyError> {
        loop {
            match self.body.frame().await {
                None => {
                    self.release();
                    return Ok(None);
                }
                Some(Err(e)) => return Err(BodyError::Broken(describe_hyper_error(&e))),
                Some(Ok(frame)) => {
                    let data = match frame.into_data() {
                        Ok(data) => data,
                        Err(frame) => {
                            if let Ok(trailers) = frame.into_trailers() {
                                self.trailers = Some(trailers);
                            }
                            continue;
                        }
                    };
                    self.received += data.len() as u64;
                    if self.received > self.limit {
                        return Err(BodyError::TooLarge { limit: self.limit });
                    }
                    return Ok(Some(data));
                }
            }
        }
    }

    /// After the protocol's terminator: reads the rest of the body until it ends or
    /// `deadline`, so that a body that breaks instead of ending (a chunked body closed
    /// without its last chunk, a reset stream, a Content-Length not reached: hyper reports
    /// each as an error) is seen. Bytes after the terminator are counted, not kept. A body
    /// still open at the deadline is not an error (a proxy may hold it open); its
    /// connection is then not kept for reuse.
    pub async fn finish(&mut self, deadline: tokio::time::Instant) -> Result<(), BodyError> {
        loop {
            match tokio::time::timeout_at(deadline, self.next()).await {
                Err(_) | Ok(Ok(None)) => return Ok(()),
                Ok(Ok(Some(_))) => {}
                Ok(Err(e)) => return Err(e),
            }
        }
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// The trailers the body ended with, if any (known once `next` returned `None`).
    pub fn trailers(&self) -> Option<&http::HeaderMap> {
        self.trailers.as_ref()
    }

    /// The body ended cleanly: park the connection for the next run.
    fn release(&mut self) {
        if let Some(conn) = self.conn.take().filter(|_| self.client.reuse) {
            *self.client.idle.lock().expect("idle lock") = Some(conn);
        }
    }
}

/// `http::Request` is not `Clone` (its extensions may not be); ours carry none.
fn copy_request(r: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut c = Request::new(r.body().clone());
    *c.method_mut() = r.method().clone();
    *c.uri_mut() = r.uri().clone();
    *c.version_mut() = r.version();
    *c.headers_mut() = r.headers().clone();
    c
}

/// hyper's Display omits the cause ("connection error"); include it.
fn describe_hyper_error(e: &hyper::Error) -> String {
    use std::error::Error;
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

#[cfg(test)]
mod exhaustion_tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_or_memory_is_the_agents_error() {
        for code in [libc::EMFILE, libc::ENFILE, libc::ENOMEM, libc::ENOBUFS] {
            assert!(
                is_agent_exhaustion(&std::io::Error::from_raw_os_error(code)),
                "{code}"
            );
        }
        assert!(is_agent_exhaustion(&std::io::ErrorKind::OutOfMemory.into()));
        for code in [
            libc::ECONNREFUSED,
            libc::ETIMEDOUT,
            libc::EHOSTUNREACH,
            libc::ECONNRESET,
        ] {
            assert!(
                !is_agent_exhaustion(&std::io::Error::from_raw_os_error(code)),
                "{code}"
            );
        }
        let e = NetError::Agent {
            what: "open a socket",
            message: std::io::Error::from_raw_os_error(libc::EMFILE).to_string(),
        };
        assert_eq!(e.reason(), FailureReason::AgentError);
        assert!(e.to_string().contains("not the endpoint's fault"), "{e}");
    }
}
