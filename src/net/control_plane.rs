//! The control-plane client: reqwest for the agent's own HTTP (pages to receivers,
//! remote_write, queries to Prometheus), never for probes, since a pooled client hides
//! the phases a probe times. With it, what every control-plane caller needs: error text
//! without secrets, a capped read of an error body, Retry-After, and backoff.
//!
//! Imports only the TLS settings of `net`.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::{TlsRoots, TlsSetupError};

/// The one client for control-plane HTTP (pages, remote_write): rustls with our
/// provider and roots, its own retries and redirects off (ours are counted).
pub fn control_plane_client(
    roots: &TlsRoots,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<reqwest::Client, TlsSetupError> {
    let tls = roots.client_config(ca_file)?;
    reqwest::Client::builder()
        .tls_backend_preconfigured((*tls).clone())
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .user_agent(concat!("inferprobe/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| TlsSetupError::Tls(e.to_string()))
}

/// Response bytes kept for error messages from control-plane peers: a misbehaving peer
/// must not make us read an endless body.
const MAX_ERROR_BODY: usize = 512;

/// reqwest's error text without the URL (a Slack URL is a secret).
pub fn describe_error(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

pub async fn read_capped(mut response: reqwest::Response) -> String {
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        out.extend_from_slice(&chunk);
        if out.len() >= MAX_ERROR_BODY {
            out.truncate(MAX_ERROR_BODY);
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response's Retry-After in seconds, if it has one.
pub fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// First retry delay of control-plane requests; doubles per attempt up to a maximum.
const INITIAL_BACKOFF: Duration = Duration::from_secs(1);

/// Exponential backoff with jitter: attempt 1 waits about 1 s, then 2, 4, ... up to
/// `max`, each scaled by a random factor in [0.5, 1) so that agents which lost the same
/// receiver at the same moment do not retry in lockstep.
pub fn backoff(attempts: u32, max: Duration) -> Duration {
    let exp = INITIAL_BACKOFF.saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
    exp.min(max).mul_f64(0.5 + 0.5 * random_unit())
}

/// A random number in [0, 1) from the std hasher's per-process random keys.
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let max = Duration::from_secs(300);
        for attempt in 1..=12 {
            let full = INITIAL_BACKOFF.saturating_mul(1 << (attempt - 1)).min(max);
            for _ in 0..20 {
                let d = backoff(attempt, max);
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?} vs {full:?}");
            }
        }
        assert!(backoff(1000, max) <= max);
    }
}
