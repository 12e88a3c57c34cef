//! The [`Dialect`] trait: what one streaming protocol's simulator writes, and the list of
//! dialects the simulator serves, found by route.
//!
//! Each kind writes its dialect in its own file (src/probe/<kind>.rs, in the section "The
//! simulator's side of this protocol."), next to the parser that reads the same messages,
//! so one file holds both sides of a protocol. The stream's timing and faults are the
//! simulator's (stream.rs); a dialect only says what the messages look like.
//! May import: the list of kinds (probe/kinds.rs), which names each kind's dialects.

use std::time::Duration;

use crate::probe::kinds::Kind;

/// One streaming protocol, as the simulator writes it. Messages come back already framed
/// (by [`Reply::frame`]): the stream code puts each in its own HTTP chunk.
pub trait Dialect: Sync {
    /// The path it is served on (POST).
    fn route(&self) -> &'static str;

    /// Messages are JSON lines (`application/x-ndjson`), not server-sent events.
    fn ndjson(&self) -> bool {
        false
    }

    /// The JSON pointer of the request's output cap (a top-level `max_completion_tokens`
    /// is read for every dialect when this one is absent).
    fn max_tokens_at(&self) -> &'static str;

    /// What comes before any token (a role chunk, the protocol's opening events).
    fn preamble(&self, _reply: &Reply) -> Vec<String> {
        Vec::new()
    }

    /// Token `i` of `n` (`u32::MAX` for a stream that never ends).
    fn token(&self, reply: &Reply, i: u32, n: u32, word: &str) -> String;

    /// Everything after the last of `n` tokens, terminator included. `elapsed` since the
    /// request, for protocols where the server reports its own durations.
    fn finish(&self, reply: &Reply, n: u32, elapsed: Duration) -> Vec<String>;

    /// An error after the stream started, in this protocol's own shape.
    fn in_band_error(&self, reply: &Reply) -> Vec<String>;

    /// A message that is not valid JSON, in this protocol's framing.
    fn garbage(&self) -> String {
        if self.ndjson() {
            "{\"message\": garbage\n".to_owned()
        } else {
            "data: {\"choices\": [{\"delta\": garbage\n\n".to_owned()
        }
    }

    /// The end of a stream that generated nothing.
    fn empty_end(&self, reply: &Reply) -> Vec<String> {
        self.finish(reply, 0, Duration::ZERO)
    }
}

/// Every dialect the simulator serves: each kind's, from the list of kinds.
fn all() -> impl Iterator<Item = &'static dyn Dialect> {
    Kind::ALL
        .into_iter()
        .flat_map(|kind| kind.dialects().iter().copied())
}

/// The dialect served on `path`.
pub(super) fn for_path(path: &str) -> Option<&'static dyn Dialect> {
    all().find(|d| d.route() == path)
}

/// The output cap, wherever this protocol puts it.
pub(super) fn max_tokens(dialect: &dyn Dialect, body: &serde_json::Value) -> Option<u64> {
    body.pointer(dialect.max_tokens_at())
        .or_else(|| body.get("max_completion_tokens"))
        .and_then(|v| v.as_u64())
}

/// One request's reply: the facts its messages carry, and their framing.
pub struct Reply<'a> {
    /// `sim-N`, N counting requests from 0.
    pub id: String,
    /// The request's `model`, `sim-model` without one.
    pub model: &'a str,
    /// Unix seconds.
    pub created: u64,
    /// The request asked for a usage message (OpenAI's `stream_options.include_usage`).
    pub include_usage: bool,
    /// The dialect's [`Dialect::ndjson`].
    pub(super) ndjson: bool,
}

impl Reply<'_> {
    /// One message: `data` as a JSON line, or as an SSE event (named `event`, if given).
    pub fn frame(&self, event: Option<&str>, data: &serde_json::Value) -> String {
        if self.ndjson {
            return format!("{data}\n");
        }
        match event {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_has_one_dialect() {
        let mut routes: Vec<&str> = all().map(|d| d.route()).collect();
        let dialects = routes.len();
        routes.sort();
        routes.dedup();
        assert_eq!(routes.len(), dialects);
        assert!(routes.contains(&"/v1/chat/completions") && routes.contains(&"/generate_stream"));
        assert_eq!(for_path("/api/generate").map(|d| d.ndjson()), Some(true));
        assert!(for_path("/v1/models").is_none());
    }

    #[test]
    fn the_output_cap_is_read_where_the_protocol_puts_it() {
        let tgi = for_path("/generate_stream").unwrap();
        let body = serde_json::json!({"parameters": {"max_new_tokens": 5}, "max_completion_tokens": 9});
        assert_eq!(max_tokens(tgi, &body), Some(5));
        assert_eq!(
            max_tokens(tgi, &serde_json::json!({"max_completion_tokens": 9})),
            Some(9)
        );
    }
}
