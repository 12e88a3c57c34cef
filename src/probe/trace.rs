//! The W3C trace context of a run: fresh random ids for every run, sent as the
//! `traceparent` header of every request the run makes.
//!
//! One run is one client span: the readiness check and the main request of a run carry
//! the same `traceparent` (same trace id, our span as their parent), so the server's spans
//! for both hang under the run in one trace, and the span the OTLP export sends (when
//! configured) is the one the server saw as its parent.
//!
//! The ids come from the operating system's CSPRNG (getrandom): a trace id must not be
//! guessable by whoever sees other runs' ids, and W3C asks for random ids.

use crate::outcome::TraceContext;

/// The request header that carries the context (W3C Trace Context, version 00).
pub const TRACEPARENT: &str = "traceparent";

/// A fresh context: random trace and span ids, neither all zero (W3C calls an all-zero
/// id invalid). `None` only when the OS cannot give random bytes, in which case the run
/// goes out without a trace rather than with a predictable one.
pub fn fresh(sampled: bool) -> Option<TraceContext> {
    let mut bytes = [0u8; 24];
    // An all-zero draw has a chance of 2^-64 per id; drawing again costs nothing.
    for _ in 0..4 {
        getrandom::fill(&mut bytes).ok()?;
        let trace_id: [u8; 16] = bytes[..16].try_into().expect("16 bytes");
        let span_id: [u8; 8] = bytes[16..].try_into().expect("8 bytes");
        if trace_id != [0; 16] && span_id != [0; 8] {
            return Some(TraceContext {
                trace_id,
                span_id,
                sampled,
            });
        }
    }
    None
}

/// Puts the run's context on a request, replacing any `traceparent` already there (the
/// config refuses a user header of that name while tracing is on, so none is).
pub fn stamp(headers: &mut http::HeaderMap, trace: &TraceContext) {
    if let Ok(v) = http::HeaderValue::from_str(&trace.traceparent()) {
        headers.insert(http::HeaderName::from_static(TRACEPARENT), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, neither id all zeros (W3C Trace Context
    /// level 1, section 3.2).
    fn valid_traceparent(s: &str) -> bool {
        let parts: Vec<&str> = s.split('-').collect();
        let hex =
            |p: &str, n: usize| p.len() == n && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        parts.len() == 4
            && parts[0] == "00"
            && hex(parts[1], 32)
            && hex(parts[2], 16)
            && hex(parts[3], 2)
            && parts[1].bytes().any(|b| b != b'0')
            && parts[2].bytes().any(|b| b != b'0')
    }

    #[test]
    fn fresh_contexts_are_valid_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let t = fresh(true).expect("the OS gives random bytes");
            assert!(valid_traceparent(&t.traceparent()), "{}", t.traceparent());
            assert!(t.traceparent().ends_with("-01"));
            assert!(seen.insert(t.trace_id), "a trace id repeated");
        }
        assert!(fresh(false).unwrap().traceparent().ends_with("-00"));
    }

    #[test]
    fn stamping_replaces_a_header_of_that_name() {
        let mut h = http::HeaderMap::new();
        h.insert(TRACEPARENT, http::HeaderValue::from_static("stale"));
        let t = fresh(true).unwrap();
        stamp(&mut h, &t);
        assert_eq!(h.get_all(TRACEPARENT).iter().count(), 1);
        assert_eq!(h[TRACEPARENT], t.traceparent().as_str());
    }
}
