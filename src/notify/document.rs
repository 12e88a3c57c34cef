//! What is sent to people rather than raised as an alert: the daily digest and the
//! weekly report. A document has a title, a short markdown body for the chat robots, the
//! same as plain text, and HTML for e-mail; each receiver kind that takes documents
//! (e-mail, the robots, Slack, webhooks) sends it its own way (kinds.rs); the receivers
//! that hold alert state (Alertmanager, PagerDuty) take none.

use super::chat::{Message, escape};
use crate::alert::{AlertEvent, Firing, Notification};
use crate::human::html_escape;
use crate::time_zone::TimeZone;

/// One line of a digest: an alert's summary, when, and its link.
type Entry<'a> = (&'a str, std::time::SystemTime, &'a str);

/// An alert's line: its summary, when it fired, its link.
fn fired_line(a: &crate::alert::Alert) -> Entry<'_> {
    (a.summary.as_str(), a.fired_at, a.api_url.as_str())
}

#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// The subject of an e-mail, the title of a robot's message.
    pub title: String,
    /// Markdown for the chat robots: short, read on a phone. Already escaped.
    pub markdown: String,
    /// The same as plain text (an e-mail's text part).
    pub text: String,
    /// A whole HTML page (an e-mail's HTML part).
    pub html: String,
    /// Whether everything in it is well: a green card rather than a red one.
    pub all_well: bool,
}

impl Document {
    /// As a robot's message: never mentions anyone (a digest wakes nobody).
    pub(super) fn message(&self) -> Message {
        Message {
            title: self.title.clone(),
            heading: escape(&self.title),
            markdown: self.markdown.clone(),
            plain: self.text.clone(),
            wakes: false,
            all_clear: self.all_well,
        }
    }

    /// A summary for people who read it on a phone, with the full thing as HTML: a
    /// report's verdicts (`lines`, each well or not and its words), a note, a link.
    pub fn summary(
        title: &str,
        lines: &[(bool, String)],
        note: Option<&str>,
        link: Option<&str>,
        html: String,
    ) -> Document {
        // The link first: a robot cuts a long message at its size cap, from the end.
        let mut markdown = link
            .map(|l| format!("[The full report]({l})\n\n"))
            .unwrap_or_default();
        let mut text = format!("{title}\n\n");
        for (well, line) in lines {
            let mark = if *well { "✅" } else { "❌" };
            markdown.push_str(&format!("- {mark} {}\n", escape(line)));
            text.push_str(&format!("- {mark} {line}\n"));
        }
        if let Some(note) = note {
            markdown.push_str(&format!("\n{}\n", escape(note)));
            text.push_str(&format!("\n{note}\n"));
        }
        if let Some(link) = link {
            text.push_str(&format!("\nThe full report: {link}\n"));
        }
        Document {
            title: title.to_owned(),
            markdown: markdown.trim_end().to_owned(),
            text,
            html,
            all_well: lines.iter().all(|(well, _)| *well),
        }
    }

    /// The daily digest of one receiver: what fired and what resolved since `since`
    /// (the notifications queued for it), and what is still open now (`open`: the
    /// alerts active for it), each with its link; a quiet day says so.
    pub fn digest(
        receiver: &str,
        queued: &[Notification],
        open: &[Firing],
        since: std::time::SystemTime,
        now: std::time::SystemTime,
        zone: TimeZone,
    ) -> Document {
        let of = |event: AlertEvent| -> Vec<&Notification> {
            queued.iter().filter(|n| n.event == event).collect()
        };
        let fired = of(AlertEvent::Firing);
        let resolved = of(AlertEvent::Resolved);
        let still: Vec<&Firing> = open
            .iter()
            .filter(|f| f.alert.resolved_at.is_none() && f.receivers.iter().any(|r| r == receiver))
            .collect();
        let notices = of(AlertEvent::Notice);
        let mut title = format!(
            "inferprobe daily digest: {} fired, {} resolved, {} still open",
            fired.len(),
            resolved.len(),
            still.len()
        );
        // Said only when there were some: most days no model changes.
        if !notices.is_empty() {
            title.push_str(&format!(", {} model changes", notices.len()));
        }
        let period = format!(
            "{} to {}",
            zone.clock_with_offset(since),
            zone.clock_with_offset(now)
        );
        let line_md = |summary: &str, when: std::time::SystemTime, link: &str| {
            let mut line = format!("- {} ({})", escape(summary), zone.clock_with_offset(when));
            if !link.is_empty() {
                line.push_str(&format!(" · [results]({link})"));
            }
            line
        };
        let line_text = |summary: &str, when: std::time::SystemTime| {
            format!("- {summary} ({})", zone.clock_with_offset(when))
        };
        let line_html = |summary: &str, when: std::time::SystemTime, link: &str| {
            let mut line = format!(
                "<li>{} ({})",
                html_escape(summary),
                html_escape(&zone.clock_with_offset(when))
            );
            if !link.is_empty() {
                line.push_str(&format!(r#" · <a href="{}">results</a>"#, html_escape(link)));
            }
            line.push_str("</li>");
            line
        };
        let mut markdown = format!("{}\n", escape(&period));
        let mut text = format!("{title}\n{period}\n");
        let mut html = format!(
            "<!doctype html><html><body style=\"font-family:sans-serif;line-height:1.4\"><h2>{}</h2><p>{}</p>",
            html_escape(&title),
            html_escape(&period)
        );
        let sections: [(&str, Vec<Entry>); 4] = [
            ("Fired", fired.iter().map(|n| fired_line(&n.alert)).collect()),
            (
                "Resolved",
                resolved
                    .iter()
                    .map(|n| {
                        let at = n.alert.resolved_at.unwrap_or(n.alert.fired_at);
                        (n.alert.summary.as_str(), at, n.alert.api_url.as_str())
                    })
                    .collect(),
            ),
            ("Still open", still.iter().map(|f| fired_line(&f.alert)).collect()),
            (
                "Model changes",
                notices.iter().map(|n| fired_line(&n.alert)).collect(),
            ),
        ];
        for (heading, items) in &sections {
            if items.is_empty() {
                continue;
            }
            markdown.push_str(&format!("\n**{heading}**\n"));
            text.push_str(&format!("\n{heading}:\n"));
            html.push_str(&format!("<h3>{heading}</h3><ul>"));
            for (summary, when, link) in items {
                markdown.push_str(&line_md(summary, *when, link));
                markdown.push('\n');
                text.push_str(&line_text(summary, *when));
                text.push('\n');
                html.push_str(&line_html(summary, *when, link));
            }
            html.push_str("</ul>");
        }
        if sections.iter().all(|(_, items)| items.is_empty()) {
            let quiet = "Nothing fired, resolved or stayed open for this receiver.";
            markdown.push_str(&format!("\n{quiet}\n"));
            text.push_str(&format!("\n{quiet}\n"));
            html.push_str(&format!("<p>{quiet}</p>"));
        }
        html.push_str("</body></html>");
        Document {
            title,
            markdown: markdown.trim_end().to_owned(),
            text,
            html,
            all_well: still.is_empty() && fired.is_empty(),
        }
    }
}
