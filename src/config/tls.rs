//! `tls:` of a probe: a private CA, the name to verify, and skipping verification (a
//! warning).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::diagnostics::Diagnostics;
use super::values::existing_file;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsConfig {
    /// Extra PEM root certificates (for private CAs), added to the system roots.
    pub ca_file: Option<PathBuf>,
    /// SNI and certificate name to use instead of the URL's host.
    pub server_name: Option<String>,
    /// Accept any certificate (self-signed test endpoints). Off unless set per probe,
    /// and `check` warns about every probe that sets it: a prober that cannot see an
    /// expired or wrong certificate misses what users' clients will refuse.
    pub insecure_skip_verify: bool,
}

/// TLS settings for the probe's endpoint.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Tls")]
pub(super) struct RawTls {
    /// A PEM file of extra CA certificates to trust (a private CA), relative to this
    /// file.
    pub(super) ca_file: Option<String>,
    /// The name to verify the server's certificate against (default: the URL's host).
    pub(super) server_name: Option<String>,
    /// Do not verify the server's certificate: measured, but not safe; a warning.
    pub(super) insecure_skip_verify: Option<bool>,
}

/// `tls`: a CA file that must be readable now, and a warning for skipped verification.
pub(super) fn probe_tls(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    raw_tls: Option<RawTls>,
) -> TlsConfig {
    let key = |k: &str| format!("{prefix}.{k}");
    let tls = raw_tls.unwrap_or_default();
    let ca_file = tls
        .ca_file
        .and_then(|f| existing_file(cx, p, &key("tls.ca_file"), &f));
    let insecure_skip_verify = tls.insecure_skip_verify.unwrap_or(false);
    if insecure_skip_verify {
        cx.warn(
            p,
            &key("tls.insecure_skip_verify"),
            "TLS certificates are not verified: expired, self-signed or wrong-host certificates will not fail this probe",
        );
    }
    TlsConfig {
        ca_file,
        server_name: tls.server_name,
        insecure_skip_verify,
    }
}
