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
        AlertEvent::Notice => "ℹ️",
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

/// Whether a page says that nothing is wrong: a resolution, or a notice.
pub(super) fn quiet(n: &Notification) -> bool {
    matches!(n.event, AlertEvent::Resolved | AlertEvent::Notice)
}

/// One message to a robot, whatever it carries (one page, or several merged): each
/// robot's file turns it into its platform's body, adding mentions and its keyword.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Message {
    /// Plain and short (a DingTalk title, a Feishu card's header).
    pub title: String,
    /// The title as a markdown heading's text: an endpoint's words escaped.
    pub heading: String,
    /// The body as markdown, without the heading.
    pub markdown: String,
    /// The body as plain text, for messages that mention (WeCom's `text`).
    pub plain: String,
    /// Whether it should wake the people the robot mentions ([`wakes`]).
    pub wakes: bool,
    /// Whether everything in it is resolved (a green card rather than a red one).
    pub all_clear: bool,
}

impl Message {
    /// One page.
    pub fn page(n: &Notification) -> Message {
        let a = &n.alert;
        let mut plain = format!("{} · {}\n{}", a.severity.as_str(), a.location, a.description);
        if !a.api_url.is_empty() {
            plain.push_str(&format!("\n{}", a.api_url));
        }
        Message {
            title: title(n),
            heading: format!("{} {}", mark(n), escape(&a.summary)),
            markdown: markdown(n, false),
            plain,
            wakes: wakes(n),
            all_clear: quiet(n),
        }
    }

    /// The first of `pages` merged into one message of at most about `max_bytes`: one
    /// line each, naming its alert, as many as fit; the count taken is returned, and the
    /// message says how many more follow. A robot's limit is per message, so a storm of
    /// changes goes out in a few messages rather than being throttled (and lost to a ban).
    pub fn merged(pages: &[Notification], max_bytes: usize) -> (Message, usize) {
        // Room kept for the heading, the "more follow" line, mentions and a keyword.
        let budget = max_bytes.saturating_sub(600);
        let (mut markdown, mut plain) = (String::new(), String::new());
        let mut taken = 0;
        for n in pages {
            let a = &n.alert;
            let summary = crate::human::first_chars(&a.summary, 160);
            let mut md = format!(
                "- {} **{}** · {} · {}",
                mark(n),
                escape(summary),
                a.severity.as_str(),
                escape(&a.location)
            );
            if !a.api_url.is_empty() {
                md.push_str(&format!(" · [results]({})", a.api_url));
            }
            let text = format!("- {} {} · {}", mark(n), summary, a.severity.as_str());
            // The first always goes in, cut if it must, so a message is never empty.
            if taken > 0 && markdown.len().max(plain.len()) + md.len().max(text.len()) + 1 > budget {
                break;
            }
            markdown.push_str(&cut_bytes(&md, budget));
            markdown.push('\n');
            plain.push_str(&cut_bytes(&text, budget));
            plain.push('\n');
            taken += 1;
        }
        let merged = &pages[..taken];
        let count = |event: AlertEvent| merged.iter().filter(|n| n.event == event).count();
        let mut parts = Vec::new();
        for (event, word) in [
            (AlertEvent::Firing, "firing"),
            (AlertEvent::Reminder, "still firing"),
            (AlertEvent::Resolved, "resolved"),
            (AlertEvent::Notice, "notices"),
        ] {
            let n = count(event);
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        let all_clear = merged.iter().all(quiet);
        let mark = if all_clear { "✅" } else { "🚨" };
        let title = format!("{mark} {} alerts changed: {}", taken, parts.join(", "));
        let rest = pages.len() - taken;
        if rest > 0 {
            let more = format!("…and {rest} more in the next message");
            markdown.push_str(&more);
            plain.push_str(&more);
        }
        let message = Message {
            heading: title.clone(),
            title,
            markdown: markdown.trim_end().to_owned(),
            plain: plain.trim_end().to_owned(),
            wakes: merged.iter().any(wakes),
            all_clear,
        };
        (message, taken)
    }
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

/// The robots' own limit when the receiver sets none: DingTalk and WeCom take 20 a
/// minute (DingTalk then bans the robot for ten minutes).
pub(super) const DEFAULT_MAX_PER_MINUTE: u32 = 20;

/// `max_per_minute`, checked: at least 2 (one message at once and one more within the
/// minute, see pace.rs) and at most Feishu's 100.
pub(super) fn max_per_minute<K>(cx: &mut Diagnostics, keys: &ReceiverKeys<'_, K>, value: Option<u32>) -> u32 {
    let value = value.unwrap_or(DEFAULT_MAX_PER_MINUTE);
    if !(2..=100).contains(&value) {
        keys.error(cx, "max_per_minute", "must be between 2 and 100");
    }
    value
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

    fn pages(n: usize) -> Vec<Notification> {
        (0..n)
            .map(|i| {
                let mut page = crate::notify::tests::notification(AlertEvent::Firing);
                page.alert.summary =
                    format!("svc-{i:03} is DOWN from 华东-上海: the server fails (HTTP 5xx)");
                page
            })
            .collect()
    }

    #[test]
    fn a_merged_message_names_what_fits_and_says_how_many_follow() {
        let storm = pages(300);
        let (m, taken) = Message::merged(&storm, 4000);
        assert!(taken > 1 && taken < 300, "{taken}");
        assert!(m.markdown.len() + m.heading.len() < 4000, "{}", m.markdown.len());
        for (i, page) in storm.iter().enumerate() {
            let named = m.markdown.contains(&page.alert.summary[..7]);
            assert_eq!(named, i < taken, "svc-{i:03}");
        }
        assert!(
            m.markdown
                .ends_with(&format!("…and {} more in the next message", 300 - taken))
        );
        assert!(m.wakes, "a critical page that fires is among them");
        assert_eq!(m.title, format!("🚨 {taken} alerts changed: {taken} firing"));

        let (m, taken) = Message::merged(&storm[..3], 4000);
        assert_eq!(taken, 3);
        assert!(!m.markdown.contains("more in the next message"));
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
