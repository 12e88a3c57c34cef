//! DingTalk (钉钉) custom robots: `POST .../robot/send?access_token=T` with a markdown
//! message. Wire facts, from DingTalk's custom robot documentation:
//!
//! - body: `{"msgtype":"markdown","markdown":{"title","text"},"at":{"atMobiles":[..],
//!   "isAtAll":bool}}`; a mobile is mentioned only if `@<mobile>` is also in the text.
//! - signing (optional, the robot's "加签" setting): `&timestamp=MS&sign=S` added to the
//!   URL, `S = urlencode(base64(HMAC-SHA256(key = secret, data = "MS\nsecret")))`, MS in
//!   milliseconds and within an hour of DingTalk's clock.
//! - the answer is HTTP 200 whatever happened: `{"errcode":0,"errmsg":"ok"}` on success,
//!   130101 when throttled (20 messages a minute, then ten minutes' ban), 310000 when the
//!   robot's security settings refuse it (keyword, signature, timestamp or IP).
//!
//! An endpoint's words are data, never markup (chat.rs escapes them).

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Verdict;
use super::chat::{self, Message};
use crate::config::{Diagnostics, OwnKeys, ReceiverKeys, Secret};

/// The keys only a dingtalk receiver takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// dingtalk: the robot's signing secret (`SEC...`), when its security setting is
    /// "加签" (sign); e.g. "${DINGTALK_SECRET}". A secret: never shown.
    secret: Option<String>,
    /// dingtalk: the robot's custom keyword, when its security setting is "自定义关键词";
    /// put in every message, or the robot refuses it (errcode 310000).
    keyword: Option<String>,
    /// dingtalk: mobile numbers to mention (@) on critical pages.
    #[serde(default)]
    at_mobiles: Vec<String>,
    /// dingtalk: mention everyone in the group (@all) on critical pages.
    #[serde(default)]
    at_all: bool,
    /// dingtalk: the most messages sent to this robot in any minute (2 to 100; default
    /// 20, DingTalk's own limit, past which it bans the robot for ten minutes); when more
    /// alerts change, they are merged into fewer messages, each naming every alert.
    max_per_minute: Option<u32>,
}

impl OwnKeys for Keys {
    const SECRETS: &'static [&'static str] = &["secret"];
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub secret: Option<Secret>,
    pub keyword: Option<String>,
    pub at_mobiles: Vec<String>,
    pub at_all: bool,
    pub max_per_minute: u32,
}

pub(crate) fn check(cx: &mut Diagnostics, keys: ReceiverKeys<'_, Keys>) -> Option<Spec> {
    let before = cx.error_count();
    let own = &keys.own;
    chat::check_robot_keys(
        cx,
        &keys,
        own.secret.as_deref(),
        own.keyword.as_deref(),
        &own.at_mobiles,
    );
    let max_per_minute = chat::max_per_minute(cx, &keys, own.max_per_minute);
    if cx.error_count() > before {
        return None;
    }
    Some(Spec {
        secret: own.secret.clone().map(Secret::new),
        keyword: own.keyword.clone(),
        at_mobiles: own.at_mobiles.clone(),
        at_all: own.at_all,
        max_per_minute,
    })
}

/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "DingTalk got one message; nothing expires it, `--resolve` sends the resolved one.";

/// Longest text sent, in bytes: DingTalk cuts long markdown messages (about 20,000
/// bytes), and a page is read on a phone.
pub(super) const MAX_TEXT_BYTES: usize = 4000;

/// Throttled robots are banned for ten minutes after 20 messages in a minute.
const THROTTLED_FOR: Duration = Duration::from_secs(600);

/// One markdown message, to the robot's URL, signed if the robot has a secret.
pub(super) fn request(url: &str, spec: &Spec, message: &Message, now: SystemTime) -> (String, Value) {
    let url = match &spec.secret {
        Some(secret) => signed_url(url, secret.expose(), now),
        None => url.to_owned(),
    };
    (url, message_body(spec, message))
}

/// `url` with DingTalk's `timestamp` and `sign` added.
fn signed_url(url: &str, secret: &str, now: SystemTime) -> String {
    let ms = crate::unix_time::unix_ms(now);
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}timestamp={ms}&sign={}", sign(secret, ms))
}

/// DingTalk's signature of a timestamp (ms): HMAC-SHA256 keyed with the secret over
/// "MS\nsecret", base64, then percent-encoded for the query string.
fn sign(secret: &str, ms: u64) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, format!("{ms}\n{secret}").as_bytes());
    let encoded = base64::engine::general_purpose::STANDARD.encode(tag.as_ref());
    utf8_percent_encode(&encoded, NON_ALPHANUMERIC).to_string()
}

/// One page's message body (the tests' view of what a page looks like).
#[cfg(test)]
pub fn body(spec: &Spec, n: &crate::alert::Notification) -> Value {
    message_body(spec, &Message::page(n))
}

fn message_body(spec: &Spec, m: &Message) -> Value {
    let mobiles: Vec<&str> = if m.wakes {
        spec.at_mobiles.iter().map(String::as_str).collect()
    } else {
        Vec::new()
    };
    // DingTalk mentions a mobile only when the text also says `@<mobile>`; the
    // mentions and the keyword come after the cut, so a long page keeps them.
    let mut tail = String::new();
    if !mobiles.is_empty() {
        let ats: Vec<String> = mobiles.iter().map(|m| format!("@{m}")).collect();
        tail.push_str(&format!("\n\n{}", ats.join(" ")));
    }
    if let Some(keyword) = &spec.keyword {
        tail.push_str(&format!("\n\n{keyword}"));
    }
    let text = format!("### {}\n\n{}", m.heading, m.markdown);
    let text = chat::cut_bytes(&text, MAX_TEXT_BYTES.saturating_sub(tail.len())) + &tail;
    json!({
        "msgtype": "markdown",
        "markdown": {"title": m.title, "text": text},
        "at": {"atMobiles": mobiles, "isAtAll": m.wakes && spec.at_all},
    })
}

/// The robot's word is its `errcode`, inside an HTTP 200.
pub(super) fn verdict(status: u16, body: &str) -> Verdict {
    match chat::code(status, body, "errcode") {
        Err(verdict) => verdict,
        Ok(0) => Verdict::Accepted,
        Ok(130101) => Verdict::Retry {
            at_least: Some(THROTTLED_FOR),
        },
        Ok(310000) => Verdict::Rejected {
            hint: Some(
                "the robot's security settings refused it: check `secret` (signing), `keyword`, or the robot's IP allow-list",
            ),
        },
        Ok(300001 | 400101 | 400102 | 400105 | 400106) => Verdict::Rejected {
            hint: Some("the access_token in `url` is not a working robot's"),
        },
        Ok(_) => Verdict::Rejected { hint: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented algorithm, computed independently (Python's hmac, hashlib,
    /// base64 and urllib.parse.quote_plus) for this secret and timestamp.
    #[test]
    fn signs_as_dingtalk_documents() {
        assert_eq!(
            sign("SEC000example", 1_700_000_000_000),
            "xyAXnOeEx8mcnUUlZoyxvRe%2FLa8u0eqZaWsTXunfdkQ%3D"
        );
        let url = signed_url(
            "https://oapi.dingtalk.com/robot/send?access_token=T",
            "SEC000example",
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_000),
        );
        assert_eq!(
            url,
            "https://oapi.dingtalk.com/robot/send?access_token=T&timestamp=1700000000000&sign=xyAXnOeEx8mcnUUlZoyxvRe%2FLa8u0eqZaWsTXunfdkQ%3D"
        );
    }

    #[test]
    fn the_errcode_inside_a_200_decides() {
        assert_eq!(verdict(200, r#"{"errcode":0,"errmsg":"ok"}"#), Verdict::Accepted);
        assert_eq!(
            verdict(200, r#"{"errcode":130101,"errmsg":"send too fast"}"#),
            Verdict::Retry {
                at_least: Some(THROTTLED_FOR)
            }
        );
        for refused in [
            r#"{"errcode":310000,"errmsg":"keywords not in content"}"#,
            r#"{"errcode":40008,"errmsg":"param error"}"#,
            r#"{"errcode":300001,"errmsg":"token is not exist"}"#,
            "ok",
            "",
        ] {
            assert!(
                matches!(verdict(200, refused), Verdict::Rejected { .. }),
                "{refused}"
            );
        }
        assert_eq!(verdict(503, ""), Verdict::Retry { at_least: None });
    }
}
