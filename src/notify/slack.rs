//! Slack incoming webhooks: a `text` message, escaped as Slack asks (`&`, `<`, `>`), so
//! an endpoint's words in it cannot mention `@channel` or hide a link behind text: they
//! are data, never markup.

use serde_json::{Value, json};

use super::Verdict;
use super::document::Document;
use crate::alert::{AlertEvent, Notification};
use crate::config::{Diagnostics, NoKeys, ReceiverKeys};

/// A Slack receiver takes no keys of its own: its URL is its credential.
pub(crate) type Keys = NoKeys;

pub(crate) fn check(_: &mut Diagnostics, _: ReceiverKeys<'_, Keys>) -> Option<()> {
    Some(())
}

/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "Webhooks got one message; nothing expires it, `--resolve` sends the resolved one.";

pub(super) fn request(url: &str, n: &Notification) -> (String, Value) {
    (url.to_owned(), body(n))
}

/// A digest or a report: its title in bold and its plain text, escaped.
pub(super) fn document_request(url: &str, doc: &Document) -> (String, Value) {
    let text = format!("*{}*\n{}", slack_escape(&doc.title), slack_escape(&doc.text));
    (url.to_owned(), json!({ "text": text }))
}

/// Slack answers 200 `ok`; its refusals (`invalid_payload`, `no_service`,
/// `channel_is_archived`) come with 4xx statuses, which say it.
pub(super) fn verdict(status: u16, _body: &str) -> Verdict {
    Verdict::by_status(status)
}

pub fn body(n: &Notification) -> Value {
    let a = &n.alert;
    let mark = match n.event {
        AlertEvent::Firing => ":rotating_light:",
        AlertEvent::Reminder => ":bell: Still firing:",
        AlertEvent::Resolved => ":white_check_mark:",
        AlertEvent::Notice => ":information_source:",
    };
    let text = format!(
        "{mark} *{}* ({})\n{}",
        slack_escape(&a.summary),
        a.severity.as_str(),
        slack_escape(&a.description)
    );
    json!({ "text": text })
}

/// Slack's control characters in message text: `<!channel>`, `<@U123>` and
/// `<https://x|label>` all need a raw `<`, and `&` would start an entity.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
