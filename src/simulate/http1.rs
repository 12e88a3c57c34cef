//! The simulator's wire code: the little HTTP/1.1 it speaks by hand, so that its faults
//! are exactly what a broken server writes (see the module above). Reading a request head
//! (httparse), and building a JSON response, a chunked head and chunks.
//!
//! The fake servers of the integration tests (tests/it/support) use these same pieces, so
//! there is one HTTP/1 server code in the repository. Imports nothing of the crate.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest request head and body the simulator reads.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The end of a chunked body.
pub const LAST_CHUNK: &str = "0\r\n\r\n";

/// A parsed request head: what the simulator and the test servers need of it.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: String,
    /// The request target as sent, query string included.
    pub target: String,
    /// Names as sent; values as text (bytes that are not UTF-8 replaced).
    pub headers: Vec<(String, String)>,
    /// Bytes of the head, blank line included: the body starts there.
    pub len: usize,
}

impl RequestHead {
    /// Parses the request head at the start of `buf`; `Ok(None)` while it is incomplete.
    pub fn parse(buf: &[u8]) -> Result<Option<RequestHead>, httparse::Error> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let httparse::Status::Complete(len) = req.parse(buf)? else {
            return Ok(None);
        };
        Ok(Some(RequestHead {
            method: req.method.unwrap_or("GET").to_owned(),
            target: req.path.unwrap_or("/").to_owned(),
            headers: req
                .headers
                .iter()
                .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
                .collect(),
            len,
        }))
    }

    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body's length as Content-Length says (0 without one).
    pub fn content_length(&self) -> usize {
        self.header("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// One request as the simulator routes it.
pub(super) struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub close: bool,
    pub body: Vec<u8>,
}

/// Reads one request. `Ok(None)` when the peer closed between requests.
pub(super) async fn read_request(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Request>> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(head) = RequestHead::parse(buf).map_err(std::io::Error::other)? {
            let length = head.content_length();
            if length > MAX_BODY {
                return Err(std::io::Error::other("request body too large"));
            }
            let close = head
                .header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close"));
            let (path, query) = head.target.split_once('?').unwrap_or((&head.target, ""));
            let (path, query) = (path.to_owned(), query.to_owned());
            while buf.len() < head.len + length {
                let n = socket.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(None);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[head.len..head.len + length].to_vec();
            buf.drain(..head.len + length);
            return Ok(Some(Request {
                method: head.method,
                path,
                query,
                close,
                body,
            }));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too large"));
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A whole response with a JSON `body` (sized by Content-Length), `extra` headers after
/// the framing ones.
pub fn json_response(status: u16, reason: &str, body: &str, extra: &[(&str, &str)]) -> String {
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}

/// The head of a 200 response with a chunked body of `content_type`, `extra` headers
/// between the two.
pub fn chunked_head(content_type: &str, extra: &[(&str, &str)]) -> String {
    let mut out = format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n");
    for (k, v) in extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("Transfer-Encoding: chunked\r\n\r\n");
    out
}

/// Appends `message` to `out` as one chunk of a chunked body.
pub fn push_chunk(out: &mut String, message: &str) {
    out.push_str(&format!("{:x}\r\n{message}\r\n", message.len()));
}

/// Writes [`json_response`] in one write; false when the peer is gone.
pub(super) async fn write_json(
    socket: &mut TcpStream,
    status: u16,
    reason: &str,
    body: &serde_json::Value,
    extra: &[(&str, &str)],
) -> bool {
    let response = json_response(status, reason, &body.to_string(), extra);
    socket.write_all(response.as_bytes()).await.is_ok()
}

/// Writes messages as HTTP chunks, in one write.
pub(super) async fn write_chunks(socket: &mut TcpStream, messages: &[String]) -> std::io::Result<()> {
    let mut out = String::new();
    for m in messages {
        push_chunk(&mut out, m);
    }
    socket.write_all(out.as_bytes()).await
}

/// Holds the connection open and silent until the client gives up (bounded, so a
/// client that never closes cannot pin a task forever).
pub(super) async fn wait_for_peer_close(socket: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(600), async {
        loop {
            match socket.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_parsed_once_complete() {
        let raw = b"POST /v1/completions?ttft=1s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
        assert!(RequestHead::parse(&raw[..20]).unwrap().is_none());
        let head = RequestHead::parse(raw).unwrap().unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.target, "/v1/completions?ttft=1s");
        assert_eq!(head.len, raw.len() - 2);
        assert_eq!(head.content_length(), 2);
        assert_eq!(head.header("CONNECTION"), Some("close"));
        assert!(RequestHead::parse(b"\x00\x01 nonsense\r\n\r\n").is_err());
    }

    #[test]
    fn responses_are_framed_as_on_the_wire() {
        assert_eq!(
            json_response(429, "Too Many Requests", "{}", &[("Retry-After", "1")]),
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: 2\r\nRetry-After: 1\r\n\r\n{}"
        );
        let mut out = chunked_head("text/event-stream", &[("Cache-Control", "no-cache")]);
        push_chunk(&mut out, "data: [DONE]\n\n");
        out.push_str(LAST_CHUNK);
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
        );
    }
}
