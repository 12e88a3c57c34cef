//! The HTTP API's parameter parsers: `/api/v1/results`' query string, a probe name from
//! a path (`/probes/{name}`, `/api/v1/probes/{name}`), and a time as `since`/`until`
//! and `report --since` take it. Byte 0 picks `now` (the Unix epoch, today, or the last
//! second we print, so `7d` ago and `until` + 1 s meet both ends of the range); the rest
//! is the text, as a query string, a name and a time.
//! Checks: no panic; an accepted query has `since <= until`, a limit of 1 to 1000,
//! names that are label values, and times that print as RFC 3339 (as the handler prints
//! them); a refusal says something, in at most 600 bytes however long the input.
#![no_main]

use std::time::{Duration, SystemTime};

use inferprobe::config::valid_label_value;
use inferprobe::fuzzing::{probe_name, results_query};
use inferprobe::human::{time_arg, time_range};
use libfuzzer_sys::fuzz_target;

const MAX_MESSAGE: usize = 600;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let now = match pick % 4 {
        0 => SystemTime::UNIX_EPOCH,
        1 => SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        2 => time_range().1,
        _ => SystemTime::now(),
    };
    let text = String::from_utf8_lossy(rest);
    let print = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();

    match results_query(Some(&text), now) {
        Ok(q) => {
            assert!(q.since <= q.until, "{q:?}");
            assert!((1..=1000).contains(&q.limit), "{q:?}");
            for name in [&q.probe, &q.location].into_iter().flatten() {
                assert!(valid_label_value(name), "{q:?}");
            }
            let _ = (print(q.since), print(q.until));
        }
        Err(e) => assert!(!e.is_empty() && e.len() <= MAX_MESSAGE, "{} bytes: {e}", e.len()),
    }
    match probe_name(&text) {
        Ok(()) => assert!(valid_label_value(&text)),
        Err(e) => assert!(!e.is_empty() && e.len() <= MAX_MESSAGE, "{e}"),
    }
    match time_arg(&text, now) {
        Ok(t) => {
            let (first, last) = time_range();
            assert!(first <= t && t <= last);
            let _ = print(t);
        }
        Err(e) => assert!(!e.is_empty() && e.len() <= MAX_MESSAGE, "{e}"),
    }
});
