//! Numbers and text as people read them, on the status page, in pages and in reports.
//! A leaf module.

use std::time::{Duration, SystemTime};

/// `812 ms`, `1.23 s`, `143 s`.
pub fn seconds(s: f64) -> String {
    // Below 0.95 ms a whole number would round a fast check to "0 ms" or "1 ms": one
    // decimal, and never a bare zero.
    if s < 0.000_95 {
        let ms = s * 1000.0;
        if ms < 0.05 {
            "< 0.1 ms".to_owned()
        } else {
            format!("{ms:.1} ms")
        }
    // Below 999.5 ms, so rounding never prints "1000 ms".
    } else if s < 0.9995 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 100.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.0} s")
    }
}

/// A duration in one or two units: `45 s`, `12 min`, `3 h 20 min`, `2 d 4 h`.
pub fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => match (s % 3600) / 60 {
            0 => format!("{} h", s / 3600),
            m => format!("{} h {m} min", s / 3600),
        },
        _ => match (s % 86_400) / 3600 {
            0 => format!("{} d", s / 86_400),
            h => format!("{} d {h} h", s / 86_400),
        },
    }
}

/// A share as a percentage with two decimals, never rounded up to 100 %: one failure
/// in 100,000 runs must still show.
pub fn percent(v: f64) -> String {
    if v >= 1.0 {
        "100%".into()
    } else {
        format!("{:.2}%", (v * 10_000.0).floor() / 100.0)
    }
}

/// `2026-11-30 19:04:05` (UTC).
pub fn clock(t: SystemTime) -> String {
    let text = humantime::format_rfc3339_seconds(t).to_string();
    text.trim_end_matches('Z').replacen('T', " ", 1)
}

/// At most `max` characters, with an ellipsis when cut: the one way text is shortened
/// for people. For text that may hold a server's words, redact before cutting:
/// [`crate::redact::Redactor::shorten`].
pub fn shorten(s: &str, max: usize) -> String {
    let head = first_chars(s, max);
    if head.len() == s.len() {
        s.to_owned()
    } else {
        format!("{head}…")
    }
}

/// The first `max` characters of `s` (all of it if shorter), cut on a character
/// boundary and marked nowhere: for a limit of the receiving side (PagerDuty's summary)
/// and for [`shorten`]s that add their own mark.
pub fn first_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// One line safe to print to a terminal or a text log: a server's or receiver's words
/// cannot move the cursor, recolour, ring, erase or reorder what we print, nor fake a
/// line of their own. Line breaks and tabs become spaces; every other C0 and C1
/// control, DEL and the bidirectional overrides and isolates are shown escaped
/// (`\u{1b}`), so the text stays readable and nothing is silently lost.
pub fn printable(s: &str) -> String {
    neutralise(s, false)
}

/// As [`printable`], keeping line breaks (`\n`): for whole documents such as a report.
pub fn printable_text(s: &str) -> String {
    neutralise(s, true)
}

/// Serialized JSON safe to print: serde escapes C0 controls inside strings but leaves
/// DEL, C1 controls and the bidirectional controls raw; they become `\uXXXX` escapes,
/// which keep the JSON valid and its strings unchanged. Line breaks and tabs outside
/// strings are the document's own layout and stay.
pub fn printable_json(json: &str) -> String {
    if !json
        .chars()
        .any(|c| is_unsafe(c) && !matches!(c, '\n' | '\r' | '\t'))
    {
        return json.to_owned();
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if is_unsafe(c) && !matches!(c, '\n' | '\r' | '\t') {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether [`printable`] would leave `s` as it is.
pub fn is_printable(s: &str) -> bool {
    !s.chars().any(|c| is_unsafe(c) || c == '\t')
}

fn neutralise(s: &str, keep_newlines: bool) -> String {
    if is_printable(s) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' if keep_newlines => out.push('\n'),
            // A CRLF document stays one line break.
            '\r' if keep_newlines => {}
            '\n' | '\r' | '\t' => out.push(' '),
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Characters a terminal acts on instead of showing: C0 and C1 controls, DEL, NEL,
/// the line and paragraph separators and the bidirectional embeddings, overrides and
/// isolates (which reorder what follows, "Trojan source" style).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// Text safe inside HTML elements and quoted attributes.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A point in time as the API and the report take it: RFC 3339, Unix seconds, or a
/// duration meaning that long before `now` (`15m`, `7d`). `None` for anything else, and
/// for times outside [`time_range`]; [`time_arg`] says why.
pub fn parse_time(v: &str, now: SystemTime) -> Option<SystemTime> {
    time_arg(v, now).ok()
}

/// The times we take: 1970-01-01 to 9999-12-31T23:59:59Z. Times are printed as RFC 3339,
/// which has neither years before the Unix epoch (humantime panics on them) nor
/// five-digit years, so a time outside this range is refused when it is read, not when
/// it is shown.
pub fn time_range() -> (SystemTime, SystemTime) {
    (
        SystemTime::UNIX_EPOCH,
        SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799),
    )
}

/// [`parse_time`], saying what is wrong: a value that is not a time, or a time outside
/// [`time_range`]. Total: no input panics (`1e308`, `-1`, `NaN`, `99999999999y`).
pub fn time_arg(v: &str, now: SystemTime) -> Result<SystemTime, String> {
    const FORMS: &str = "use RFC 3339 (2026-11-30T12:00:00Z), Unix seconds, or a duration ago (15m, 7d)";
    let (first, last) = time_range();
    let in_range = |t: Option<SystemTime>| match t {
        Some(t) if (first..=last).contains(&t) => Ok(t),
        _ => Err("is out of range: times run from 1970-01-01 to 9999-12-31".to_owned()),
    };
    if let Ok(t) = humantime::parse_rfc3339_weak(v) {
        return in_range(Some(t));
    }
    // With an offset (`2026-11-30T12:00:00+02:00`), which humantime does not take.
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return in_range(Some(SystemTime::from(t)));
    }
    if let Ok(secs) = v.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("is not a time: Unix seconds are 0 or more; {FORMS}"));
        }
        // `Duration::from_secs_f64` panics beyond u64 seconds: test the range first.
        let max = last.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        if secs > max.as_secs_f64() {
            return in_range(None);
        }
        return in_range(SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs_f64(secs)));
    }
    match humantime::parse_duration(v) {
        Ok(d) => in_range(now.checked_sub(d)),
        Err(_) => Err(format!("is not a time: {FORMS}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_never_round_a_failure_away() {
        assert_eq!(percent(0.99996), "99.99%");
        assert_eq!(percent(1.0), "100%");
        assert_eq!(percent(0.5), "50.00%");
    }

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span(Duration::from_secs(42)), "42 s");
        assert_eq!(span(Duration::from_secs(600)), "10 min");
        assert_eq!(span(Duration::from_secs(3600 * 3 + 1200)), "3 h 20 min");
        assert_eq!(span(Duration::from_secs(86_400 * 2)), "2 d");
    }

    #[test]
    fn times_out_of_range_or_malformed_are_refused_not_panicked_on() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for v in [
            "1e308",
            "1e19",
            "18446744073709551616",
            "-1",
            "NaN",
            "inf",
            "99999999999999999999y",
            "100y",
            "0000-01-01T00:00:00+00:00",
            "1969-12-31T23:59:59Z",
            "",
            "\0",
            "15m\0",
        ] {
            let e = time_arg(v, now).unwrap_err();
            assert!(e.contains("range") || e.contains("not a time"), "{v:?}: {e}");
        }
        // Every time we accept can be printed.
        for v in ["0", "253402300799", "9999-12-31T23:59:59Z", "56y"] {
            let t = time_arg(v, now).unwrap_or_else(|e| panic!("{v}: {e}"));
            let _ = humantime::format_rfc3339_millis(t).to_string();
        }
    }

    #[test]
    fn terminal_controls_are_shown_not_obeyed() {
        let hostile = "ok\u{1b}[2J\u{1b}]0;pwned\u{7}\rFAKE\nline\u{8}\u{7f}\u{85}\u{9b}31m\u{202e}txt\u{2066}x\u{2069}\ttab";
        let one = printable(hostile);
        assert_eq!(
            one,
            "ok\\u{1b}[2J\\u{1b}]0;pwned\\u{7} FAKE line\\u{8}\\u{7f}\\u{85}\\u{9b}31m\\u{202e}txt\\u{2066}x\\u{2069} tab"
        );
        assert!(!one.chars().any(is_unsafe), "{one}");
        let doc = printable_text("| a |\r\n| \u{1b}[31mb |\n");
        assert_eq!(doc, "| a |\n| \\u{1b}[31mb |\n");
        let v = serde_json::json!({"probe": "a\u{202e}b\u{9b}c\u{7f}\u{1b}d\ne"});
        let json = printable_json(&serde_json::to_string_pretty(&v).unwrap());
        assert!(!json.chars().any(|c| is_unsafe(c) && c != '\n'), "{json}");
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v, "the strings are unchanged");
        // Ordinary text, accents and emoji included, is untouched.
        let plain = "Paris — café ✅ 東京";
        assert_eq!(printable(plain), plain);
    }

    #[test]
    fn seconds_pick_a_unit() {
        assert_eq!(seconds(0.8124), "812 ms");
        assert_eq!(seconds(1.234), "1.23 s");
        assert_eq!(seconds(143.2), "143 s");
        assert_eq!(seconds(0.9996), "1.00 s");
    }

    #[test]
    fn sub_millisecond_values_are_shown_as_such() {
        assert_eq!(seconds(0.000_4), "0.4 ms");
        assert_eq!(seconds(0.000_94), "0.9 ms");
        assert_eq!(seconds(0.000_96), "1 ms");
        assert_eq!(seconds(0.000_01), "< 0.1 ms");
        assert_eq!(seconds(0.0), "< 0.1 ms");
        assert_eq!(seconds(0.0123), "12 ms");
    }
}
