//! Feishu (飞书, Lark) custom bots: `POST .../open-apis/bot/v2/hook/H` with a card.
//! Wire facts, from Feishu's custom bot documentation:
//!
//! - body: `{"msg_type":"interactive","card":{...}}`, at most 20 KB; a card's `markdown`
//!   element takes `<at id=all></at>` to mention everyone.
//! - signing (optional, the bot's "签名校验" setting): `"timestamp"` (Unix seconds, as a
//!   string) and `"sign"` in the body, `sign = base64(HMAC-SHA256(key = "TS\nsecret",
//!   data = ""))`: the key and data are the other way round from DingTalk's, and a
//!   signature made DingTalk's way is refused (19021).
//! - the answer: `{"code":0,"msg":"success"}` on success (older bots answer
//!   `{"StatusCode":0}`), 11232 when throttled (100 a minute, 5 a second), 19021 bad
//!   signature, 19022 IP not allowed, 19024 keyword missing, 9499 bad request.

use std::time::SystemTime;

use base64::Engine as _;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Verdict, chat};
use crate::alert::{AlertEvent, Notification};
use crate::config::{Diagnostics, OwnKeys, ReceiverKeys, Secret};

/// The keys only a feishu receiver takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// feishu: the bot's signing secret, when its security setting is "签名校验"
    /// (signature); e.g. "${FEISHU_SECRET}". A secret: never shown.
    secret: Option<String>,
    /// feishu: the bot's custom keyword, when its security setting is "自定义关键词";
    /// put in every message, or the bot refuses it (19024).
    keyword: Option<String>,
    /// feishu: mention everyone in the group (@all) on critical pages.
    #[serde(default)]
    at_all: bool,
}

impl OwnKeys for Keys {
    const SECRETS: &'static [&'static str] = &["secret"];
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub secret: Option<Secret>,
    pub keyword: Option<String>,
    pub at_all: bool,
}

pub(crate) fn check(cx: &mut Diagnostics, keys: ReceiverKeys<'_, Keys>) -> Option<Spec> {
    let before = cx.error_count();
    let own = &keys.own;
    chat::check_robot_keys(cx, &keys, own.secret.as_deref(), own.keyword.as_deref(), &[]);
    (cx.error_count() == before).then(|| Spec {
        secret: own.secret.clone().map(Secret::new),
        keyword: own.keyword.clone(),
        at_all: own.at_all,
    })
}

/// What becomes of a test page (`inferprobe test-alert`).
pub(super) const AFTER_TEST_PAGE: &str =
    "Feishu got one card; nothing expires it, `--resolve` sends the resolved one.";

/// The card's text, in bytes: Feishu takes 20 KB of body, and a page is read on a phone.
const MAX_TEXT_BYTES: usize = 8000;

/// One card, signed in its body if the bot has a secret.
pub(super) fn request(url: &str, spec: &Spec, n: &Notification, now: SystemTime) -> (String, Value) {
    let mut body = body(spec, n);
    if let Some(secret) = &spec.secret {
        let seconds = crate::unix_time::unix_ms(now) / 1000;
        body["timestamp"] = Value::String(seconds.to_string());
        body["sign"] = Value::String(sign(secret.expose(), seconds));
    }
    (url.to_owned(), body)
}

/// Feishu's signature of a timestamp (seconds): HMAC-SHA256 keyed with "TS\nsecret"
/// over nothing, base64.
fn sign(secret: &str, seconds: u64) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, format!("{seconds}\n{secret}").as_bytes());
    let tag = ring::hmac::sign(&key, b"");
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

pub fn body(spec: &Spec, n: &Notification) -> Value {
    let mut text = chat::markdown(n, false);
    if chat::wakes(n) && spec.at_all {
        text.push_str("\n\n<at id=all></at>");
    }
    if let Some(keyword) = &spec.keyword {
        text.push_str(&format!("\n\n{keyword}"));
    }
    let template = match n.event {
        AlertEvent::Firing | AlertEvent::Reminder => "red",
        AlertEvent::Resolved => "green",
    };
    json!({
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": true},
            "header": {
                "title": {"tag": "plain_text", "content": chat::title(n)},
                "template": template,
            },
            "elements": [{"tag": "markdown", "content": chat::cut_bytes(&text, MAX_TEXT_BYTES)}],
        },
    })
}

/// The bot's word is its `code` (or, from older bots, `StatusCode`), inside an HTTP 200.
pub(super) fn verdict(status: u16, body: &str) -> Verdict {
    let code =
        chat::code(status, body, "code").or_else(|e| chat::code(status, body, "StatusCode").map_err(|_| e));
    match code {
        Err(verdict) => verdict,
        Ok(0) => Verdict::Accepted,
        Ok(11232) => Verdict::Retry {
            at_least: Some(chat::THROTTLED_FOR),
        },
        Ok(19021) => Verdict::Rejected {
            hint: Some("the signature was refused: check `secret` and this host's clock"),
        },
        Ok(19022) => Verdict::Rejected {
            hint: Some("this host's IP is not on the bot's allow-list"),
        },
        Ok(19024) => Verdict::Rejected {
            hint: Some("the bot's keyword is missing: set `keyword`"),
        },
        Ok(_) => Verdict::Rejected { hint: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented algorithm, computed independently (Python's hmac, hashlib and
    /// base64) for this secret and timestamp; DingTalk's scheme gives another answer.
    #[test]
    fn signs_as_feishu_documents() {
        assert_eq!(
            sign("feishu-secret", 1_700_000_000),
            "OrBzY1Y01Gq+HgJsl+7OfWcMVwc7YocohQm5iiZwjhU="
        );
        let spec = Spec {
            secret: Some(Secret::new("feishu-secret")),
            keyword: None,
            at_all: false,
        };
        let n = crate::notify::tests::notification(AlertEvent::Firing);
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let (_, body) = request("https://open.feishu.cn/open-apis/bot/v2/hook/H", &spec, &n, now);
        assert_eq!(body["timestamp"], "1700000000");
        assert_eq!(body["sign"], "OrBzY1Y01Gq+HgJsl+7OfWcMVwc7YocohQm5iiZwjhU=");
        assert_eq!(body["msg_type"], "interactive");
    }

    #[test]
    fn the_code_inside_a_200_decides() {
        assert_eq!(
            verdict(200, r#"{"code":0,"msg":"success","data":{}}"#),
            Verdict::Accepted
        );
        assert_eq!(
            verdict(200, r#"{"StatusCode":0,"StatusMessage":"success"}"#),
            Verdict::Accepted
        );
        assert!(matches!(
            verdict(200, r#"{"code":11232,"msg":"frequency limited"}"#),
            Verdict::Retry { at_least: Some(_) }
        ));
        for refused in [
            r#"{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}"#,
            r#"{"code":19024,"msg":"Key Words Not Found"}"#,
            r#"{"code":9499,"msg":"Bad Request"}"#,
            "",
        ] {
            assert!(
                matches!(verdict(200, refused), Verdict::Rejected { .. }),
                "{refused}"
            );
        }
    }
}
