//! Entry points for the `cargo fuzz` targets in `fuzz/` (an external crate, so it sees
//! only `pub` items). Not part of the API: compiled only with `--features fuzzing`, which
//! fuzz/Cargo.toml turns on; hidden from the docs and not used by the binary.
//!
//! Why a module of thin wrappers rather than making the parsers `pub`: the per-protocol
//! parsers return `generation::EventFacts`, which lives in a private module and is an internal
//! contract between the parsers and the stream driver. Wrapping them here keeps those
//! types crate-private; the fuzzers only need "did it panic, and did it succeed or fail".
//! The framing decoders are already `pub` and are re-exported as they are. The HTTP
//! API's parameter parsers live in the private server module; [`results_query`] and
//! [`probe_name`] hand out their results as plain values.

pub use crate::probe::framing::{Decoder, Event, FramingError, NdjsonDecoder, SseDecoder};

use std::time::SystemTime;

use crate::config::Expect;
use crate::outcome::Failure;
use crate::probe::{kinds, kserve_v2};

/// Every per-protocol event parser, by the kind that uses it: the kinds' own list
/// ([`Kind`](crate::probe::kinds::Kind)), so a new kind is fuzzed without an edit here.
/// `Parser::ALL` is every kind; those that do not stream (kserve_v2, http) parse nothing.
pub use crate::probe::kinds::Kind as Parser;

/// What a parser made of an event, without the crate-private facts type.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    pub text: String,
    pub other_output: bool,
    pub output_tokens: Option<u64>,
    pub done: bool,
    pub model: Option<String>,
}

/// Runs one parser on one framed event.
pub fn parse_event(parser: Parser, event: &Event) -> Result<Parsed, Failure> {
    let Some(parse) = kinds::event_parser(parser) else {
        return Ok(Parsed::default());
    };
    let facts = parse(event)?;
    Ok(Parsed {
        text: facts.text,
        other_output: facts.other_output,
        output_tokens: facts.output_tokens,
        done: facts.done,
        model: facts.model,
    })
}

/// The `kserve_v2` response check (a whole JSON body, not a stream).
pub fn kserve_check_response(body: &[u8], expect: &Expect) -> Result<(), Failure> {
    kserve_v2::check_response(body, expect)
}

/// The `kserve_v2_grpc` response check on a gRPC-framed `ModelInferResponse` body.
pub fn kserve_grpc_check_response(body: &[u8], expect: &Expect) -> Result<(), Failure> {
    crate::probe::kserve_v2_grpc::check_response_body(body, expect)
}

/// What `/api/v1/results` made of a query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultsQuery {
    pub probe: Option<String>,
    pub location: Option<String>,
    pub since: SystemTime,
    pub until: SystemTime,
    pub limit: usize,
    /// The cursor as the API would hand it out again.
    pub cursor: Option<String>,
}

/// `/api/v1/results`' parser on a raw query string (what follows `?`), at `now`.
pub fn results_query(raw: Option<&str>, now: SystemTime) -> Result<ResultsQuery, String> {
    let (q, cursor, limit) = crate::server::results_query(raw, now)?;
    Ok(ResultsQuery {
        probe: q.probe,
        location: q.location,
        since: q.since,
        until: q.until,
        limit,
        cursor: cursor.map(crate::store::Cursor::encode),
    })
}

/// The check on `{name}` in `/probes/{name}` and `/api/v1/probes/{name}`.
pub fn probe_name(name: &str) -> Result<(), String> {
    crate::server::probe_name(name).map(|_| ())
}
