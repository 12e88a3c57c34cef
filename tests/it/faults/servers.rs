//! The servers that play faults beyond byte scripts: plain replies with a status, an
//! HTTP/2 server that resets its stream, and one that closes at once.

use std::time::Duration;

use super::wire::Wire;
use crate::support::tls;

pub fn status_reply(status: &str, content_type: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

pub fn http_base(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}")
}

/// An HTTP/2 server (ALPN h2, over TLS with `cert`) that answers 200 with the start of a
/// healthy body, then resets the stream (RST_STREAM INTERNAL_ERROR) while the connection
/// stays up.
pub fn h2_reset_server(wire: Wire, cert: &tls::Issued) -> u16 {
    tls::tls_server(cert, b"h2", move |tls| async move {
        let Ok(mut conn) = h2::server::handshake(tls).await else {
            return;
        };
        while let Some(Ok((_request, mut respond))) = conn.accept().await {
            tokio::spawn(async move {
                let response = http::Response::builder()
                    .status(200)
                    .header("content-type", wire.content_type())
                    .body(())
                    .unwrap();
                let Ok(mut send) = respond.send_response(response, false) else {
                    return;
                };
                let body = wire.body();
                let part = if wire.streams() {
                    wire.preamble() + &wire.token("Hi")
                } else {
                    body[..body.len() / 2].to_owned()
                };
                let _ = send.send_data(bytes::Bytes::from(part), false);
                tokio::time::sleep(Duration::from_millis(50)).await;
                send.send_reset(h2::Reason::INTERNAL_ERROR);
            });
        }
    })
}

/// A server that accepts and at once closes, before reading a byte.
pub fn closing_server() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            drop(s);
        }
    });
    addr
}
