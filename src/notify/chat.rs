//! What the chat robots (DingTalk, WeCom, Feishu) share: a page's words as markdown, with
//! an endpoint's words escaped so they stay text, and who a page wakes.

use super::Verdict;
use crate::alert::{AlertEvent, Notification};
use crate::config::Severity;
use crate::config::{Diagnostics, ReceiverKeys};

/// The mark a page starts with.
pub(super) fn mark(n: &Notification) -> &'static str {
    match n.event {
        AlertEvent::Firing => "🚨",
        AlertEvent::Reminder => "🔔 Still firing:",
        AlertEvent::Resolved => "✅",
    }
}

/// A short title: the mark and the summary's first 100 characters.
pub(super) fn title(n: &Notification) -> String {
    format!("{} {}", mark(n), crate::human::first_chars(&n.alert.summary, 100))
}

/// The page as markdown: the summary (as a heading if `heading`), the severity and
/// location, the description, and links to the probe and the runbook.
pub(super) fn markdown(n: &Notification, heading: bool) -> String {
    let a = &n.alert;
    let mut text = String::new();
    if heading {
        text.push_str(&format!("### {} {}\n\n", mark(n), escape(&a.summary)));
    }
    text.push_str(&format!(
        "**{}** · {}\n\n{}",
        a.severity.as_str(),
        escape(&a.location),
        escape(&a.description)
    ));
    if !a.api_url.is_empty() {
        text.push_str(&format!("\n\n[inferprobe: this probe's results]({})", a.api_url));
    }
    if let Some(runbook) = &a.runbook_url {
        text.push_str(&format!(" · [Runbook]({runbook})"));
    }
    text
}

/// Mentions wake people: for critical pages that fire, not for reminders or
/// resolutions, nor for lesser severities.
pub(super) fn wakes(n: &Notification) -> bool {
    n.alert.severity == Severity::Critical && n.event == AlertEvent::Firing
}

/// Markdown's characters in an endpoint's words, escaped: they stay text, so an error
/// body cannot make a link, a heading or a mention.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(
            c,
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '#' | '!' | '<' | '>' | '|' | '~' | '@'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `text` cut to at most `max` bytes of UTF-8 at a character's end, with "…" when cut:
/// the robots count bytes, and a Chinese character is three.
pub(super) fn cut_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let ellipsis = "…";
    let mut end = max.saturating_sub(ellipsis.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &text[..end])
}

/// A robot's limit is per minute: a throttled message is tried again no sooner than this.
pub(super) const THROTTLED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// The keys the robots share, checked: a signing `secret` and a `keyword` are not
/// blank, and each of `at_mobiles` is a mobile number (digits, with `+` and `-`).
pub(super) fn check_robot_keys<K>(
    cx: &mut Diagnostics,
    keys: &ReceiverKeys<'_, K>,
    secret: Option<&str>,
    keyword: Option<&str>,
    at_mobiles: &[String],
) {
    for (name, value) in [("secret", secret), ("keyword", keyword)] {
        if value.is_some_and(|v| v.trim().is_empty()) {
            keys.error(cx, name, "is empty");
        }
    }
    for (i, mobile) in at_mobiles.iter().enumerate() {
        let digits = mobile.chars().all(|c| c.is_ascii_digit() || c == '+' || c == '-');
        if mobile.is_empty() || !digits {
            keys.error(
                cx,
                &format!("at_mobiles[{i}]"),
                "must be a mobile number (digits)",
            );
        }
    }
}

/// The robot's result code (`field` of its JSON answer) from a successful HTTP answer;
/// the verdict already, when the status says it or the answer is not a robot's.
pub(super) fn code(status: u16, body: &str, field: &str) -> Result<i64, Verdict> {
    if !(200..=299).contains(&status) {
        return Err(Verdict::by_status(status));
    }
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get(field).and_then(serde_json::Value::as_i64))
        .ok_or(Verdict::Rejected {
            hint: Some("not the robot's answer: is `url` the robot's webhook?"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_in_an_endpoints_words_stays_text() {
        assert_eq!(
            escape("[click](http://x) **now** # `x` @all"),
            r"\[click\]\(http://x\) \*\*now\*\* \# \`x\` \@all"
        );
    }

    #[test]
    fn cuts_count_bytes_and_never_split_a_character() {
        assert_eq!(cut_bytes("short", 10), "short");
        let chinese = "推理服务不可用".repeat(10);
        let cut = cut_bytes(&chinese, 20);
        assert!(cut.len() <= 20, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.starts_with("推理服务"));
    }
}
