//! The agent's HTTP clients and what they share. Two clients, two rooms:
//! [`probe_client`], the probe's phase-timed path (hyper and tokio-rustls, a timestamp
//! at DNS, connect, TLS and response headers), and [`control_plane`], reqwest for the
//! agent's own traffic (pages to receivers, remote_write, the fleet report's queries),
//! with its retry helpers. Both take their TLS settings from [`TlsRoots`] here.
//!
//! Imports only config (TLS settings, files) and outcome (failure reasons); nothing here
//! knows about LLM protocols, alerts or metrics. Everything is re-exported, so callers
//! write `crate::net::X`.

mod control_plane;
mod probe_client;

pub use control_plane::{backoff, control_plane_client, describe_error, read_capped, retry_after};
pub use probe_client::{BodyError, BodyStream, HttpClient, NetError, ResponseStream, is_agent_exhaustion};

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls::pki_types::ServerName;

/// Why a client (probe or control plane) could not be set up: its TLS settings (a bad
/// CA file, a bad server name).
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("cannot read CA file {path}: {message}")]
    CaFile { path: String, message: String },
    #[error("invalid TLS server name `{0}`")]
    ServerName(String),
    #[error("TLS setup failed: {0}")]
    Tls(String),
}

/// TLS settings: the system roots (or, on images without a CA bundle, Mozilla's roots
/// compiled in), loaded once, and one client config per CA file, shared by every probe
/// that uses it (a root store is ~100 KB: thousands of copies would dominate memory).
#[derive(Clone)]
pub struct TlsRoots {
    roots: Arc<rustls::RootCertStore>,
    configs: Arc<Mutex<std::collections::HashMap<Option<std::path::PathBuf>, Arc<rustls::ClientConfig>>>>,
}

impl TlsRoots {
    pub fn system() -> Self {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if roots.is_empty() {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        TlsRoots {
            roots: Arc::new(roots),
            configs: Arc::default(),
        }
    }

    /// The TLS settings for a CA file (system roots plus the file), built once per file.
    pub fn client_config(&self, ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
        let key = ca_file.map(Path::to_path_buf);
        if let Some(c) = self.configs.lock().expect("tls configs").get(&key) {
            return Ok(c.clone());
        }
        let config = self.make_client_config(ca_file)?;
        self.configs
            .lock()
            .expect("tls configs")
            .insert(key, config.clone());
        Ok(config)
    }

    /// For `tls.insecure_skip_verify`: any certificate is accepted, but the handshake's
    /// signatures are still checked (a broken server still fails as `tls`).
    pub fn unverified_client_config(&self) -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(AnyCertificate(provider.clone()));
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }

    fn make_client_config(&self, ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
        let mut roots = (*self.roots).clone();
        if let Some(path) = ca_file {
            let ca_err = |message: String| TlsSetupError::CaFile {
                path: path.display().to_string(),
                message,
            };
            let pem = crate::config::files::read_regular(path, crate::config::files::MAX_CA_FILE_BYTES)
                .map_err(|e| ca_err(e.to_string()))?;
            let certs: Vec<_> = rustls::pki_types::pem::PemObject::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| ca_err(format!("{e:?}")))?;
            if certs.is_empty() {
                return Err(ca_err("no PEM certificate in the file".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| ca_err(e.to_string()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Accepts every certificate chain; verifies handshake signatures with the provider's
/// algorithms, so the connection is still a working TLS session.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// This machine's name: `$HOSTNAME` (set in containers and pods), else the kernel's.
pub fn host_name() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}
