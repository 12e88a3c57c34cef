//! `--web.config.file`: the Prometheus exporter-toolkit web configuration (the file that
//! secures node_exporter and blackbox_exporter) read into what the agent's port does:
//! TLS (rustls, ring), client certificates, basic auth with bcrypt hashes, and extra
//! response headers; plus the security headers every response carries anyway.
//!
//! The format and its rules follow exporter-toolkit's web-configuration.md: unknown keys
//! are errors; `client_auth_type` takes Go's five policy names; a client CA without a
//! policy that uses it is an error; only five headers may be set, two of them from a
//! fixed list of values. What rustls cannot honour (TLS 1.0/1.1, Go cipher suite and
//! curve names) and what we do not implement (`client_allowed_sans`, `rate_limit`) is
//! refused with a positioned error rather than silently ignored. The file is read at
//! start and again on SIGHUP (new certificates, users, headers; a bad file keeps the
//! running one); exporter-toolkit re-reads it per request instead.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use base64::Engine as _;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio_rustls::TlsAcceptor;

use crate::config::{ConfigErrors, Diagnostics};

/// Sent on every response of the agent's port. The status page has inline CSS and
/// SVG and no script, so nothing else needs loading; no page may frame it.
pub const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    (
        "content-security-policy",
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

/// The headers `http_server_config.headers` may set (exporter-toolkit keeps this list
/// private "to ensure consistency in the Prometheus ecosystem"), with their allowed
/// values where the header is an enumeration.
const SETTABLE_HEADERS: [(&str, &[&str]); 5] = [
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// Verified (user, password) pairs kept, as exporter-toolkit does: a scrape every 15 s
/// must not cost a bcrypt (~70 ms at cost 10) each time.
const AUTH_CACHE_ENTRIES: usize = 100;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    tls_server_config: Option<TlsSpec>,
    #[serde(default)]
    http_server_config: Option<HttpSpec>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
    #[serde(default)]
    auth_excluded_paths: Option<Vec<String>>,
    #[serde(default)]
    rate_limit: Option<serde_yaml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsSpec {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSpec {
    /// We serve HTTP/1.1 only; accepted so that an exporter's file works unchanged.
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// Go's `tls.ClientAuthType` names, as the file spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    fn parse(s: &str) -> Option<ClientAuth> {
        Some(match s {
            "" | "NoClientCert" => ClientAuth::NoClientCert,
            "RequestClientCert" => ClientAuth::RequestClientCert,
            // The old name, still accepted by exporter-toolkit.
            "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
            _ => return None,
        })
    }

    fn verifies(self) -> bool {
        matches!(
            self,
            ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
        )
    }
}

/// Whether a request may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Granted,
    Denied,
}

/// Basic auth: users and their bcrypt hashes, and the verdicts already computed.
struct BasicAuth {
    users: HashMap<String, String>,
    /// Compared against when the user is unknown, so that timing does not tell which
    /// users exist.
    decoy: String,
    excluded_paths: Vec<String>,
    /// (user, keyed hash of the password) -> verdict. No password is kept.
    cache: Mutex<HashMap<(String, u64), bool>>,
    hasher: std::collections::hash_map::RandomState,
    /// One bcrypt at a time: a flood of wrong passwords costs one core, not all.
    bcrypt: tokio::sync::Mutex<()>,
    /// Checks waiting for that one bcrypt; past [`MAX_WAITING_CHECKS`] more are refused
    /// at once instead of queueing for a minute.
    waiting: std::sync::atomic::AtomicUsize,
}

/// Uncached password checks allowed to wait for the bcrypt at once. A scraper's verdict
/// is cached after its first scrape (and kept across reloads), so only a flood waits.
const MAX_WAITING_CHECKS: usize = 16;

/// The agent port's security settings: TLS, basic auth, response headers.
pub struct WebConfig {
    tls: Option<TlsAcceptor>,
    auth: Option<BasicAuth>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Default for WebConfig {
    /// No file: plain HTTP, no auth, the security headers.
    fn default() -> Self {
        WebConfig {
            tls: None,
            auth: None,
            headers: SECURITY_HEADERS
                .iter()
                .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
                .collect(),
        }
    }
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the users' hashes.
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field(
                "basic_auth_users",
                &self.auth.as_ref().map_or(0, |a| a.users.len()),
            )
            .field("headers", &self.headers)
            .finish()
    }
}

/// The web config in force, replaced whole by a reload; each connection takes the one in
/// force when it is accepted.
#[derive(Clone, Default)]
pub struct WebHandle(Arc<RwLock<Arc<WebConfig>>>);

impl WebHandle {
    pub fn new(config: WebConfig) -> Self {
        WebHandle(Arc::new(RwLock::new(Arc::new(config))))
    }

    pub fn current(&self) -> Arc<WebConfig> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Re-reads `path`; a bad file changes nothing and says why.
    pub fn reload(&self, path: &Path) -> Result<Arc<WebConfig>, ConfigErrors> {
        let mut fresh = WebConfig::load(path)?;
        fresh.keep_verdicts_from(&self.current());
        let fresh = Arc::new(fresh);
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        Ok(fresh)
    }
}

impl std::fmt::Debug for WebHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.current().fmt(f)
    }
}

/// The web config and the certificate and key files it names: regular files only (a FIFO
/// must not hang `check` or a reload, `/dev/zero` must not fill memory), this large at most.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The most expensive bcrypt accepted. Every check of an unknown password costs one hash,
/// doubling with each step: about 70 ms at 10, 1 s at 14, days at 31 (the decoy hash made
/// at load alone would stall a reload).
const MAX_BCRYPT_COST: u32 = 14;

impl WebConfig {
    /// Reads and checks a web config file; every problem with its position.
    pub fn load(path: &Path) -> Result<WebConfig, ConfigErrors> {
        let text = crate::config::files::read_regular_text(path, MAX_FILE_BYTES)
            .map_err(|e| ConfigErrors::unreadable(path, format!("cannot read the web config file: {e}")))?;
        WebConfig::parse(&text, path)
    }

    /// Checks web config text; relative file names are read from `file`'s directory.
    pub fn parse(text: &str, file: &Path) -> Result<WebConfig, ConfigErrors> {
        let mut cx = Diagnostics::new(file, text);
        let spec = deserialize(&mut cx, text).unwrap_or_default();
        let config = build(&mut cx, spec);
        cx.finish().map(|_no_warnings| config)
    }

    pub fn tls_acceptor(&self) -> Option<&TlsAcceptor> {
        self.tls.as_ref()
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    pub fn has_basic_auth(&self) -> bool {
        self.auth.is_some()
    }

    /// Good verdicts of users whose hash did not change carry over a reload: a scraper
    /// must not queue behind a flood of wrong passwords because certificates were rotated.
    fn keep_verdicts_from(&mut self, old: &WebConfig) {
        let (Some(new), Some(old)) = (self.auth.as_mut(), old.auth.as_ref()) else {
            return;
        };
        new.hasher = old.hasher.clone();
        let kept = old
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((user, _), granted)| **granted && new.users.get(user) == old.users.get(user))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        *new.cache.get_mut().unwrap_or_else(|p| p.into_inner()) = kept;
    }

    /// Basic auth, when users are configured: the credentials must match a user's hash.
    pub async fn authorize<B>(&self, request: &http::Request<B>) -> Access {
        let Some(auth) = &self.auth else {
            return Access::Granted;
        };
        if auth.excluded_paths.iter().any(|p| p == request.uri().path()) {
            return Access::Granted;
        }
        let Some((user, password)) = basic_credentials(request.headers()) else {
            return Access::Denied;
        };
        let key = (user.clone(), {
            let mut h = auth.hasher.build_hasher();
            h.write(password.as_bytes());
            h.finish()
        });
        if let Some(&ok) = auth.cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return if ok { Access::Granted } else { Access::Denied };
        }
        use std::sync::atomic::Ordering;
        if auth.waiting.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING_CHECKS {
            auth.waiting.fetch_sub(1, Ordering::AcqRel);
            return Access::Denied;
        }
        struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&auth.waiting);
        let known = auth.users.get(&user);
        let hash = known.cloned().unwrap_or_else(|| auth.decoy.clone());
        let ok = {
            let _one_at_a_time = auth.bcrypt.lock().await;
            tokio::task::spawn_blocking(move || bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false))
                .await
                .unwrap_or(false)
        } && known.is_some();
        let mut cache = auth.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= AUTH_CACHE_ENTRIES {
            // A flood of wrong passwords must not evict the scraper's good verdict (it
            // would then queue behind the flood's bcrypts): wrong ones go first.
            cache.retain(|_, granted| *granted);
            if cache.len() >= AUTH_CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(key, ok);
        if ok { Access::Granted } else { Access::Denied }
    }

    /// The security headers, with the file's `http_server_config.headers` in their place.
    pub fn add_headers(&self, headers: &mut HeaderMap) {
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
    }
}

/// serde quotes the offending value ("invalid type: string \"...\""): in this file it may
/// be a password or a key, so it is left out.
fn hide_values(message: &str) -> String {
    let Some(at) = ["invalid type", "invalid value"]
        .iter()
        .filter_map(|w| message.find(w))
        .min()
    else {
        return message.to_owned();
    };
    let mut out = message[..at].to_owned();
    let mut quoted = false;
    for c in message[at..].chars() {
        if c == '"' {
            if !quoted {
                out.push_str("\"…\"");
            }
            quoted = !quoted;
        } else if !quoted {
            out.push(c);
        }
    }
    out
}

/// `Authorization: Basic base64(user:password)`.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// A problem with a key itself (not allowed, not supported), reported at the key.
fn error_key(cx: &mut Diagnostics, key: &str, message: impl Into<String>) {
    let position = cx.index().locate_key(key);
    cx.error_at(position, None, key, message);
}
fn deserialize(cx: &mut Diagnostics, text: &str) -> Option<FileSpec> {
    if text.trim().is_empty() {
        return Some(FileSpec::default());
    }
    let de = serde_yaml::Deserializer::from_str(text);
    match serde_path_to_error::deserialize::<_, Option<FileSpec>>(de) {
        Ok(spec) => Some(spec.unwrap_or_default()),
        Err(e) => {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            let inner = e.into_inner();
            let (line, column) = match inner.location() {
                Some(l) => (l.line(), l.column()),
                None => cx.index().locate(&path),
            };
            let mut message = inner.to_string();
            if let Some(i) = message.find(" at line ") {
                message.truncate(i);
            }
            // serde_norway starts with the path of the mapping at fault, which we
            // print as the key.
            let message = match message.split_once(": ") {
                Some((head, rest)) if !head.contains(' ') && path.starts_with(head) => rest.to_owned(),
                _ => message,
            };
            let message = hide_values(&message)
                .replace("unknown field", "unknown key")
                .replace("missing field", "missing key");
            cx.error_at((line, column), None, &path, message);
            None
        }
    }
}

fn build(cx: &mut Diagnostics, spec: FileSpec) -> WebConfig {
    let mut config = WebConfig::default();
    if spec.rate_limit.is_some() {
        error_key(
            cx,
            "rate_limit",
            "not supported by inferprobe (its port caps connections instead: --web.max-connections)",
        );
    }
    if let Some(tls) = spec.tls_server_config {
        config.tls = server_tls(cx, tls).map(|c| TlsAcceptor::from(Arc::new(c)));
    }
    if let Some(http) = spec.http_server_config {
        for (name, value) in http.headers.unwrap_or_default() {
            header(cx, &mut config.headers, &name, &value);
        }
    }
    let users = spec.basic_auth_users.unwrap_or_default();
    let excluded_paths = spec.auth_excluded_paths.unwrap_or_default();
    if !users.is_empty() {
        config.auth = basic_auth(cx, users, excluded_paths);
    }
    config
}

fn header(cx: &mut Diagnostics, headers: &mut Vec<(HeaderName, HeaderValue)>, name: &str, value: &str) {
    let key = format!("http_server_config.headers.{name}");
    let Some((_, allowed)) = SETTABLE_HEADERS.iter().find(|(n, _)| *n == name) else {
        let names: Vec<&str> = SETTABLE_HEADERS.iter().map(|(n, _)| *n).collect();
        error_key(
            cx,
            &key,
            format!(
                "HTTP header {name:?} can not be configured; these can: {}",
                names.join(", ")
            ),
        );
        return;
    };
    if !allowed.is_empty() && !allowed.contains(&value) {
        cx.error(
            None,
            &key,
            format!("invalid value {value:?}; expected one of {allowed:?}"),
        );
        return;
    }
    let header = HeaderName::from_bytes(name.as_bytes()).expect("listed header names are valid");
    // "Unset if blank": the file adds nothing, and our own default stays.
    if value.is_empty() {
        return;
    }
    let Ok(value) = HeaderValue::from_str(value) else {
        cx.error(None, &key, "the value must be visible ASCII (no line breaks)");
        return;
    };
    headers.retain(|(n, _)| *n != header);
    headers.push((header, value));
}

fn basic_auth(
    cx: &mut Diagnostics,
    users: BTreeMap<String, String>,
    excluded_paths: Vec<String>,
) -> Option<BasicAuth> {
    let mut costs = Vec::new();
    for (user, hash) in &users {
        let key = format!("basic_auth_users.{user}");
        if user.contains(':') {
            cx.error(
                None,
                &key,
                "a user name cannot contain `:` (basic auth splits there)",
            );
        }
        match hash.parse::<bcrypt::HashParts>() {
            Ok(parts) if parts.get_cost() > MAX_BCRYPT_COST => cx.error(
                None,
                &key,
                format!(
                    "bcrypt cost {} is above {MAX_BCRYPT_COST}: each check would take seconds of CPU, so a few requests would stall the port; use 10 to 12",
                    parts.get_cost()
                ),
            ),
            Ok(parts) => costs.push(parts.get_cost()),
            // Not the value: it may be a password written where its hash belongs.
            Err(_) => cx.error(
                None,
                &key,
                "not a bcrypt hash; make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`",
            ),
        }
    }
    let cost = costs.into_iter().max()?;
    let decoy = match bcrypt::hash("inferprobe decoy password", cost) {
        Ok(h) => h,
        Err(e) => {
            cx.error(None, "basic_auth_users", format!("cannot use bcrypt: {e}"));
            return None;
        }
    };
    Some(BasicAuth {
        users: users.into_iter().collect(),
        decoy,
        excluded_paths,
        cache: Mutex::default(),
        hasher: std::collections::hash_map::RandomState::new(),
        bcrypt: tokio::sync::Mutex::new(()),
        waiting: std::sync::atomic::AtomicUsize::new(0),
    })
}

/// A PEM value from `<name>` (inline) or `<name>_file`, not both.
fn pem(
    cx: &mut Diagnostics,
    inline: Option<String>,
    file: Option<PathBuf>,
    name: &str,
) -> Option<(Vec<u8>, String)> {
    let key = |k: &str| format!("tls_server_config.{k}");
    match (inline, file) {
        (Some(_), Some(_)) => {
            cx.error(None, &key(name), format!("give {name} or {name}_file, not both"));
            None
        }
        (Some(text), None) => Some((text.into_bytes(), key(name))),
        (None, Some(path)) => {
            let full = cx.base_dir.join(&path);
            match crate::config::files::read_regular(&full, MAX_FILE_BYTES) {
                Ok(bytes) => Some((bytes, key(&format!("{name}_file")))),
                Err(e) => {
                    cx.error(
                        None,
                        &key(&format!("{name}_file")),
                        format!("cannot read {}: {e}", full.display()),
                    );
                    None
                }
            }
        }
        (None, None) => None,
    }
}

fn server_tls(cx: &mut Diagnostics, spec: TlsSpec) -> Option<rustls::ServerConfig> {
    let errors_before = cx.error_count();
    let at = |k: &str| format!("tls_server_config.{k}");
    let client_auth = match spec.client_auth_type.as_deref().map(ClientAuth::parse) {
        None => ClientAuth::NoClientCert,
        Some(Some(c)) => c,
        Some(None) => {
            cx.error(
                None,
                &at("client_auth_type"),
                format!(
                    "unknown value {:?}; expected one of NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert",
                    spec.client_auth_type.unwrap_or_default()
                ),
            );
            ClientAuth::NoClientCert
        }
    };
    for (key, given) in [
        (
            "cipher_suites",
            spec.cipher_suites.as_ref().is_some_and(|v| !v.is_empty()),
        ),
        (
            "curve_preferences",
            spec.curve_preferences.as_ref().is_some_and(|v| !v.is_empty()),
        ),
    ] {
        if given {
            error_key(
                cx,
                &at(key),
                "not supported: rustls offers only its own modern suites and curves (remove the key)",
            );
        }
    }
    if spec.client_allowed_sans.is_some() {
        error_key(
            cx,
            &at("client_allowed_sans"),
            "not supported by inferprobe; use a client CA that issues only to allowed clients",
        );
    }
    let min = version(
        cx,
        spec.min_version.as_deref(),
        "min_version",
        &rustls::version::TLS12,
    );
    let max = version(
        cx,
        spec.max_version.as_deref(),
        "max_version",
        &rustls::version::TLS13,
    );
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [&rustls::version::TLS12, &rustls::version::TLS13]
            .into_iter()
            .filter(|v| rank(v) >= rank(min) && rank(v) <= rank(max))
            .collect();
    if versions.is_empty() {
        cx.error(None, &at("max_version"), "max_version is below min_version");
    }
    let cert = pem(cx, spec.cert, spec.cert_file, "cert");
    let key = pem(cx, spec.key, spec.key_file, "key");
    let client_ca = pem(cx, spec.client_ca, spec.client_ca_file, "client_ca");
    let (Some((cert, cert_at)), Some((key, key_at))) = (cert, key) else {
        if cx.error_count() == errors_before {
            cx.error(
                None,
                "tls_server_config",
                "missing one of cert or cert_file, or of key or key_file",
            );
        }
        return None;
    };
    let certs: Vec<CertificateDer<'static>> =
        match CertificateDer::pem_slice_iter(&cert).collect::<Result<Vec<_>, _>>() {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => {
                cx.error(None, &cert_at, "no PEM certificate found");
                return None;
            }
            Err(e) => {
                cx.error(None, &cert_at, format!("not a PEM certificate: {e:?}"));
                return None;
            }
        };
    let key = match PrivateKeyDer::from_pem_slice(&key) {
        Ok(k) => k,
        Err(e) => {
            // Never the key's bytes.
            cx.error(None, &key_at, format!("no PEM private key found ({e:?})"));
            return None;
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>> = match (client_auth, client_ca)
    {
        (ClientAuth::NoClientCert, Some((_, ca_at))) => {
            cx.error(
                None,
                &ca_at,
                "client CAs are configured without a client_auth_type that uses them (e.g. RequireAndVerifyClientCert)",
            );
            None
        }
        (ClientAuth::NoClientCert, None) => None,
        (c, None) if c.verifies() => {
            cx.error(
                None,
                &at("client_auth_type"),
                "this policy verifies client certificates: give client_ca_file (or client_ca)",
            );
            None
        }
        (c, ca) if c.verifies() => {
            let (pem, ca_at) = ca.expect("checked above");
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                match cert.map(|c| roots.add(c)) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => cx.error(None, &ca_at, format!("not a usable CA certificate: {e}")),
                    Err(e) => cx.error(None, &ca_at, format!("not a PEM certificate: {e:?}")),
                }
            }
            if roots.is_empty() {
                cx.error(None, &ca_at, "no CA certificate found");
                return None;
            }
            let builder = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            );
            let builder = if c == ClientAuth::VerifyClientCertIfGiven {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            match builder.build() {
                Ok(v) => Some(v),
                Err(e) => {
                    cx.error(None, &ca_at, format!("cannot verify clients with these CAs: {e}"));
                    None
                }
            }
        }
        // Go asks for (or requires) a certificate but does not verify it; the CA,
        // if any, goes unused, as there.
        (c, _) => Some(Arc::new(AnyClientCert {
            provider: provider.clone(),
            mandatory: c == ClientAuth::RequireAnyClientCert,
        })),
    };
    if cx.error_count() > errors_before {
        return None;
    }
    let builder =
        match rustls::ServerConfig::builder_with_provider(provider).with_protocol_versions(&versions) {
            Ok(b) => b,
            Err(e) => {
                cx.error(None, "tls_server_config", format!("TLS setup failed: {e}"));
                return None;
            }
        };
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = match builder.with_single_cert(certs, key) {
        Ok(c) => c,
        Err(e) => {
            cx.error(
                None,
                &key_at,
                format!("the key does not fit the certificate: {e}"),
            );
            return None;
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ignore_client_order = spec.prefer_server_cipher_suites.unwrap_or(true);
    Some(config)
}

fn version(
    cx: &mut Diagnostics,
    given: Option<&str>,
    key: &str,
    default: &'static rustls::SupportedProtocolVersion,
) -> &'static rustls::SupportedProtocolVersion {
    match given {
        None => default,
        Some("TLS12") => &rustls::version::TLS12,
        Some("TLS13") => &rustls::version::TLS13,
        Some(v @ ("TLS10" | "TLS11")) => {
            cx.error(
                None,
                &format!("tls_server_config.{key}"),
                format!("{v} is not supported (rustls speaks TLS 1.2 and 1.3 only): use TLS12 or TLS13"),
            );
            default
        }
        Some(v) => {
            cx.error(
                None,
                &format!("tls_server_config.{key}"),
                format!("unknown TLS version {v:?}; expected TLS12 or TLS13"),
            );
            default
        }
    }
}

fn rank(v: &rustls::SupportedProtocolVersion) -> u16 {
    u16::from(v.version)
}

/// `RequestClientCert` and `RequireAnyClientCert`: a certificate is asked for (or
/// required) but its chain is not checked; the handshake's signature still is, so the
/// client holds the certificate's key.
#[derive(Debug)]
struct AnyClientCert {
    provider: Arc<rustls::crypto::CryptoProvider>,
    mandatory: bool,
}

impl rustls::server::danger::ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests;
