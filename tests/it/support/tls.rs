//! Certificates for the tests' TLS peers (rcgen), and the server side of a handshake
//! (rustls with ring, the provider the agent uses): self-signed certificates with chosen
//! names and dates, a private CA signing server and client certificates, an acceptor, and
//! the CA file a probe's `tls.ca_file` names.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A certificate and its private key.
pub struct Issued {
    pub der: CertificateDer<'static>,
    pub pem: String,
    key: rcgen::KeyPair,
}

impl Issued {
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.serialize_der()))
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A TLS server with this certificate, offering `alpn` (`b"http/1.1"`, `b"h2"`).
    pub fn acceptor(&self, alpn: &[u8]) -> tokio_rustls::TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.der.clone()], self.key())
            .unwrap();
        config.alpn_protocols = vec![alpn.to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// A self-signed certificate for `names`, valid from January 1st of `from` to January 1st
/// of `until`.
pub fn self_signed_between(names: &[&str], from: i32, until: i32) -> Issued {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(until, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Issued {
        der: cert.der().clone(),
        pem: cert.pem(),
        key,
    }
}

/// A self-signed certificate for `names`, valid today (2024 to 2099).
pub fn self_signed(names: &[&str]) -> Issued {
    self_signed_between(names, 2024, 2099)
}

/// Writes `pem` to a fresh file, for a probe's `tls.ca_file`.
pub fn ca_file(pem: &str) -> std::path::PathBuf {
    let path = super::temp_dir("ca").join("ca.pem");
    std::fs::write(&path, pem).unwrap();
    path
}

/// A private certificate authority.
pub struct Authority {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Authority {
    pub fn new(common_name: &str) -> Authority {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        let key = rcgen::KeyPair::generate().unwrap();
        Authority {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// The CA's own certificate, to trust.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> Issued {
        self.sign(
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap(),
        )
    }

    /// A client certificate (extended key usage `clientAuth`) for `name`.
    pub fn client(&self, name: &str) -> Issued {
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: rcgen::CertificateParams) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            der: cert.der().clone(),
            pem: cert.pem(),
            key,
        }
    }
}

/// A listener on a fresh port, usable from synchronous setup code inside the runtime.
fn listener() -> (tokio::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (tokio::net::TcpListener::from_std(l).unwrap(), port)
}

/// An HTTPS/1.1 server on a fresh port (returned) with `cert`: once a handshake succeeds,
/// it reads the request head and answers `reply`, then closes. Needs a Tokio runtime.
pub fn https_server(cert: &Issued, reply: Vec<u8>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let reply = Arc::new(reply);
    tls_server(cert, b"http/1.1", move |mut tls| {
        let reply = reply.clone();
        async move {
            let mut buf = vec![0u8; 8192];
            let mut seen = Vec::new();
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = tls.write_all(&reply).await;
            let _ = tls.shutdown().await;
        }
    })
}

/// A TLS server on a fresh port (returned) with `cert`, offering `alpn`, that hands each
/// accepted connection to `serve`. Needs a Tokio runtime.
pub fn tls_server<F, Fut>(cert: &Issued, alpn: &[u8], serve: F) -> u16
where
    F: Fn(tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let acceptor = cert.acceptor(alpn);
    let (listener, port) = listener();
    let serve = Arc::new(serve);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, serve) = (acceptor.clone(), serve.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve(tls).await;
                }
            });
        }
    });
    port
}
