//! The dialects the simulator serves, found by route: each kind's, as the list of kinds
//! names them ([`Kind::dialects`]). The [`Dialect`] trait itself is the probe's
//! (probe/dialect.rs): each kind writes its dialect in its own file, next to the parser
//! that reads the same messages, so one file holds both sides of a protocol. The
//! stream's timing and faults are the simulator's (stream.rs); a dialect only says what
//! the messages look like.
//! May import: the list of kinds (probe/kinds.rs), which names each kind's dialects.

use crate::probe::dialect::Dialect;
use crate::probe::kinds::Kind;

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
