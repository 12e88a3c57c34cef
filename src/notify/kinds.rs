//! THE closed list of receiver kinds: the `kind:` values of `receivers:`
//! ([`ReceiverKind`]), the keys each takes of its own (its file's `Keys`), what they
//! become ([`ReceiverSpec`]), and the dispatch from one to the next: check (own keys ->
//! spec), request (notification -> URL and body), verdict (the receiver's answer ->
//! delivered or not). Plain enums and exhaustive matches, as probe/kinds.rs.
//!
//! Adding a receiver:
//! 1. `notify/<kind>.rs`: its `Keys` (the serde shape of the keys only it takes, a doc
//!    comment per key for the schema; `NoKeys` when it has none) and `check` (keys in,
//!    its `Spec` out), `request` (what is sent for one notification) and `verdict` (what
//!    its answer means: the status, and the body for a platform that refuses inside an
//!    HTTP 200); `mod <kind>;` in notify/mod.rs.
//! 2. Here, one line in each list: [`ReceiverKind`] (with its YAML name and a doc
//!    comment), [`ReceiverKind::ALL`], [`ReceiverKind::as_str`], each rule of
//!    [`ReceiverKind`], [`ReceiverSpec`], `keys`, `check_spec`, `request` and `verdict`.
//!
//! A key of a receiver's own needs nothing else: the loader hands it to that kind alone,
//! tells a receiver of another kind which kinds take it, treats it as a secret if its
//! `Keys` says so, and the schema says the same to editors.

use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value as Json;
use serde_yaml::Value;

use super::chat::Message;
use super::document::Document;
use super::email::Mail;
use super::{Verdict, alertmanager, dingtalk, email, feishu, pagerduty, slack, webhook, wecom};
use crate::alert::Notification;
use crate::config::{Diagnostics, KeysOf, KindList, ReceiverCommon, ReceiverConfig, ReceiverKeys, Secret};

/// Where notifications go: the API the receiver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReceiverKind {
    /// Alertmanager's API v2 (`POST /api/v2/alerts`); firing alerts re-sent.
    Alertmanager,
    /// PagerDuty Events API v2.
    Pagerduty,
    /// Any URL: one JSON object per notification (docs/alerting.md).
    Webhook,
    /// A Slack incoming webhook: a text message.
    Slack,
    /// A DingTalk (钉钉) custom robot: a markdown message, signed if the robot has a secret.
    Dingtalk,
    /// A WeCom (企业微信) group robot: a markdown message, or text when it mentions.
    Wecom,
    /// A Feishu (飞书, Lark) custom bot: a card, signed if the bot has a secret.
    Feishu,
    /// E-mail over SMTP (`url: smtps://host:465` or `smtp://host:587` with STARTTLS).
    Email,
}

impl ReceiverKind {
    /// Every kind, in the order of the list above.
    pub const ALL: [ReceiverKind; 8] = [
        ReceiverKind::Alertmanager,
        ReceiverKind::Pagerduty,
        ReceiverKind::Webhook,
        ReceiverKind::Slack,
        ReceiverKind::Dingtalk,
        ReceiverKind::Wecom,
        ReceiverKind::Feishu,
        ReceiverKind::Email,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReceiverKind::Alertmanager => "alertmanager",
            ReceiverKind::Pagerduty => "pagerduty",
            ReceiverKind::Webhook => "webhook",
            ReceiverKind::Slack => "slack",
            ReceiverKind::Dingtalk => "dingtalk",
            ReceiverKind::Wecom => "wecom",
            ReceiverKind::Feishu => "feishu",
            ReceiverKind::Email => "email",
        }
    }

    /// Whether its `url` is an HTTP endpoint posted to (all but e-mail, whose file
    /// reads its `smtp://` url itself).
    pub fn speaks_http(self) -> bool {
        match self {
            ReceiverKind::Alertmanager
            | ReceiverKind::Pagerduty
            | ReceiverKind::Webhook
            | ReceiverKind::Slack
            | ReceiverKind::Dingtalk
            | ReceiverKind::Wecom
            | ReceiverKind::Feishu => true,
            ReceiverKind::Email => false,
        }
    }

    /// What becomes of a test page sent there, for `test-alert` to say; `None` for a
    /// receiver that expires it by itself when its re-sends stop (Alertmanager), whose
    /// expiry `test-alert` words with its time.
    pub fn after_test_page(self) -> Option<&'static str> {
        match self {
            ReceiverKind::Alertmanager => None,
            ReceiverKind::Pagerduty => Some(pagerduty::AFTER_TEST_PAGE),
            ReceiverKind::Webhook => Some(webhook::AFTER_TEST_PAGE),
            ReceiverKind::Slack => Some(slack::AFTER_TEST_PAGE),
            ReceiverKind::Dingtalk => Some(dingtalk::AFTER_TEST_PAGE),
            ReceiverKind::Wecom => Some(wecom::AFTER_TEST_PAGE),
            ReceiverKind::Feishu => Some(feishu::AFTER_TEST_PAGE),
            ReceiverKind::Email => Some(email::AFTER_TEST_PAGE),
        }
    }

    /// Whether it takes documents (the daily digest, the weekly report): the receivers
    /// people read; not those that hold alert state (Alertmanager, PagerDuty).
    pub fn takes_documents(self) -> bool {
        match self {
            ReceiverKind::Webhook
            | ReceiverKind::Slack
            | ReceiverKind::Dingtalk
            | ReceiverKind::Wecom
            | ReceiverKind::Feishu
            | ReceiverKind::Email => true,
            ReceiverKind::Alertmanager | ReceiverKind::Pagerduty => false,
        }
    }

    /// Whether it is told of notices (a model change) at all: not Alertmanager, which
    /// holds alerts, and a notice would be one that fires; PagerDuty only where its
    /// Change Events URL is known ([`takes_notices`]).
    fn may_take_notices(self) -> bool {
        match self {
            ReceiverKind::Alertmanager => false,
            ReceiverKind::Pagerduty
            | ReceiverKind::Webhook
            | ReceiverKind::Slack
            | ReceiverKind::Dingtalk
            | ReceiverKind::Wecom
            | ReceiverKind::Feishu
            | ReceiverKind::Email => true,
        }
    }

    /// Where it sends when the receiver gives no `url` (`None`: the `url` is required).
    pub fn default_url(self) -> Option<&'static str> {
        match self {
            ReceiverKind::Pagerduty => Some(pagerduty::EVENTS_URL),
            ReceiverKind::Alertmanager
            | ReceiverKind::Webhook
            | ReceiverKind::Slack
            | ReceiverKind::Dingtalk
            | ReceiverKind::Wecom
            | ReceiverKind::Feishu
            | ReceiverKind::Email => None,
        }
    }
}

impl KindList for ReceiverKind {
    const ALL: &'static [ReceiverKind] = &ReceiverKind::ALL;

    fn name(self) -> &'static str {
        self.as_str()
    }

    fn keys(self) -> KeysOf {
        match self {
            ReceiverKind::Alertmanager => KeysOf::of::<alertmanager::Keys>(),
            ReceiverKind::Pagerduty => KeysOf::of::<pagerduty::Keys>(),
            ReceiverKind::Webhook => KeysOf::of::<webhook::Keys>(),
            ReceiverKind::Slack => KeysOf::of::<slack::Keys>(),
            ReceiverKind::Dingtalk => KeysOf::of::<dingtalk::Keys>(),
            ReceiverKind::Wecom => KeysOf::of::<wecom::Keys>(),
            ReceiverKind::Feishu => KeysOf::of::<feishu::Keys>(),
            ReceiverKind::Email => KeysOf::of::<email::Keys>(),
        }
    }
}

/// What a receiver's own keys became, checked: one variant per receiver's file.
#[derive(Debug, Clone, PartialEq)]
pub enum ReceiverSpec {
    Alertmanager(alertmanager::Spec),
    Pagerduty(pagerduty::Spec),
    Webhook,
    Slack,
    Dingtalk(dingtalk::Spec),
    Wecom(wecom::Spec),
    Feishu(feishu::Spec),
    Email(email::Spec),
}

impl ReceiverSpec {
    /// How often active alerts are re-sent, for receivers that hold state rather than
    /// events (Alertmanager).
    pub fn resend_interval(&self) -> Option<Duration> {
        match self {
            ReceiverSpec::Alertmanager(spec) => Some(spec.resend_interval),
            ReceiverSpec::Pagerduty(_)
            | ReceiverSpec::Webhook
            | ReceiverSpec::Slack
            | ReceiverSpec::Dingtalk(_)
            | ReceiverSpec::Wecom(_)
            | ReceiverSpec::Feishu(_)
            | ReceiverSpec::Email(_) => None,
        }
    }

    /// The host it sends to, for a kind whose `url` is not an HTTP one (e-mail's SMTP
    /// server); `None`: the host is the URL's.
    pub fn host(&self) -> Option<&str> {
        match self {
            ReceiverSpec::Email(spec) => Some(&spec.server.host),
            ReceiverSpec::Alertmanager(_)
            | ReceiverSpec::Pagerduty(_)
            | ReceiverSpec::Webhook
            | ReceiverSpec::Slack
            | ReceiverSpec::Dingtalk(_)
            | ReceiverSpec::Wecom(_)
            | ReceiverSpec::Feishu(_) => None,
        }
    }

    /// The most messages a minute the receiver takes, for the chat robots, which
    /// throttle (and ban) past their limit; changes beyond it are merged into one
    /// message ([`super::chat::Message::merged`]). `None`: one message per notification.
    pub fn max_per_minute(&self) -> Option<u32> {
        match self {
            ReceiverSpec::Dingtalk(spec) => Some(spec.max_per_minute),
            ReceiverSpec::Wecom(spec) => Some(spec.max_per_minute),
            ReceiverSpec::Feishu(spec) => Some(spec.max_per_minute),
            ReceiverSpec::Alertmanager(_)
            | ReceiverSpec::Pagerduty(_)
            | ReceiverSpec::Webhook
            | ReceiverSpec::Slack
            | ReceiverSpec::Email(_) => None,
        }
    }

    /// The credentials among its own keys, for the redactor.
    pub fn secrets(&self) -> Vec<&Secret> {
        match self {
            ReceiverSpec::Pagerduty(spec) => vec![&spec.routing_key],
            ReceiverSpec::Dingtalk(spec) => spec.secret.iter().collect(),
            ReceiverSpec::Feishu(spec) => spec.secret.iter().collect(),
            ReceiverSpec::Email(spec) => spec.credentials.iter().map(|(_, password)| password).collect(),
            ReceiverSpec::Alertmanager(_)
            | ReceiverSpec::Webhook
            | ReceiverSpec::Slack
            | ReceiverSpec::Wecom(_) => Vec::new(),
        }
    }
}

/// Checks a receiver's own keys (`own`, the mapping the loader set aside for its kind)
/// with its kind's check. Errors go to `cx`, positioned; `None` when there were any.
pub(crate) fn check_spec(
    cx: &mut Diagnostics,
    common: ReceiverCommon<'_>,
    own: Value,
) -> Option<ReceiverSpec> {
    match common.kind {
        ReceiverKind::Alertmanager => {
            run(cx, common, own, alertmanager::check).map(ReceiverSpec::Alertmanager)
        }
        ReceiverKind::Pagerduty => run(cx, common, own, pagerduty::check).map(ReceiverSpec::Pagerduty),
        ReceiverKind::Webhook => run(cx, common, own, webhook::check).map(|()| ReceiverSpec::Webhook),
        ReceiverKind::Slack => run(cx, common, own, slack::check).map(|()| ReceiverSpec::Slack),
        ReceiverKind::Dingtalk => run(cx, common, own, dingtalk::check).map(ReceiverSpec::Dingtalk),
        ReceiverKind::Wecom => run(cx, common, own, wecom::check).map(ReceiverSpec::Wecom),
        ReceiverKind::Feishu => run(cx, common, own, feishu::check).map(ReceiverSpec::Feishu),
        ReceiverKind::Email => run(cx, common, own, email::check).map(ReceiverSpec::Email),
    }
}

/// Reads a receiver's own keys with its serde shape, every problem said, and hands them
/// to the kind's `check`.
fn run<K: crate::config::OwnKeys, S>(
    cx: &mut Diagnostics,
    common: ReceiverCommon<'_>,
    own: Value,
    check: fn(&mut Diagnostics, ReceiverKeys<'_, K>) -> Option<S>,
) -> Option<S> {
    let own = cx.section::<K>(own, common.prefix, None)?;
    check(cx, ReceiverKeys { common, own })
}

/// Whether `receiver` is told of notices (a model change): `Err` says why not, for the
/// log line of the agent that leaves it out.
pub fn takes_notices(receiver: &ReceiverConfig) -> Result<(), &'static str> {
    if !receiver.kind.may_take_notices() {
        return Err("it holds alerts, and a model change is no alert");
    }
    if receiver.kind == ReceiverKind::Pagerduty && pagerduty::change_url(receiver.url.expose()).is_none() {
        return Err("its url does not end in /v2/enqueue, so its Change Events URL is not known");
    }
    Ok(())
}

/// What one notification becomes for a receiver: a JSON post, or an e-mail.
pub(super) enum Request {
    Post { url: String, body: Json },
    Mail(Mail),
}

/// The request that sends one notification to `receiver`.
pub(super) fn request(receiver: &ReceiverConfig, n: &Notification, now: SystemTime) -> Request {
    let url = receiver.url.expose();
    let (url, body) = match &receiver.spec {
        ReceiverSpec::Alertmanager(spec) => alertmanager::request(url, spec, n, now),
        ReceiverSpec::Pagerduty(spec) => pagerduty::request(url, spec, n),
        ReceiverSpec::Webhook => webhook::request(url, n, now),
        ReceiverSpec::Slack => slack::request(url, n),
        ReceiverSpec::Dingtalk(spec) => dingtalk::request(url, spec, &Message::page(n), now),
        ReceiverSpec::Wecom(spec) => wecom::request(url, spec, &Message::page(n)),
        ReceiverSpec::Feishu(spec) => feishu::request(url, spec, &Message::page(n), now),
        ReceiverSpec::Email(_) => return Request::Mail(Mail::page(n)),
    };
    Request::Post { url, body }
}

/// The request that sends a document (a digest, a report) to `receiver`; `None` for a
/// kind that takes none ([`ReceiverKind::takes_documents`]).
pub(super) fn document_request(
    receiver: &ReceiverConfig,
    doc: &Document,
    now: SystemTime,
) -> Option<Request> {
    let url = receiver.url.expose();
    let (url, body) = match &receiver.spec {
        ReceiverSpec::Webhook => webhook::document_request(url, doc, now),
        ReceiverSpec::Slack => slack::document_request(url, doc),
        ReceiverSpec::Dingtalk(spec) => dingtalk::request(url, spec, &doc.message(), now),
        ReceiverSpec::Wecom(spec) => wecom::request(url, spec, &doc.message()),
        ReceiverSpec::Feishu(spec) => feishu::request(url, spec, &doc.message(), now),
        ReceiverSpec::Email(_) => {
            return Some(Request::Mail(Mail {
                subject: doc.title.clone(),
                text: doc.text.clone(),
                html: doc.html.clone(),
            }));
        }
        ReceiverSpec::Alertmanager(_) | ReceiverSpec::Pagerduty(_) => return None,
    };
    Some(Request::Post { url, body })
}

/// One message to a chat robot naming the first of `pages`, as many as fit its size
/// cap, and how many it took; `None` for receivers that take one page per request.
pub(super) fn merged_request(
    receiver: &ReceiverConfig,
    pages: &[Notification],
    now: SystemTime,
) -> Option<(String, Json, usize)> {
    let url = receiver.url.expose();
    let (url, body, taken) = match &receiver.spec {
        ReceiverSpec::Dingtalk(spec) => {
            let (m, taken) = Message::merged(pages, dingtalk::MAX_TEXT_BYTES);
            let (url, body) = dingtalk::request(url, spec, &m, now);
            (url, body, taken)
        }
        ReceiverSpec::Wecom(spec) => {
            // A merge that wakes people goes as text, WeCom's smaller message.
            let cap = if spec.mentions() && pages.iter().any(super::chat::wakes) {
                wecom::MAX_TEXT_BYTES
            } else {
                wecom::MAX_CONTENT_BYTES
            };
            let (m, taken) = Message::merged(pages, cap);
            let (url, body) = wecom::request(url, spec, &m);
            (url, body, taken)
        }
        ReceiverSpec::Feishu(spec) => {
            let (m, taken) = Message::merged(pages, feishu::MAX_TEXT_BYTES);
            let (url, body) = feishu::request(url, spec, &m, now);
            (url, body, taken)
        }
        ReceiverSpec::Alertmanager(_)
        | ReceiverSpec::Pagerduty(_)
        | ReceiverSpec::Webhook
        | ReceiverSpec::Slack
        | ReceiverSpec::Email(_) => return None,
    };
    Some((url, body, taken))
}

/// What the answer of a receiver of `kind` says: its status, and its body where the
/// platform words a refusal inside a success.
pub(super) fn verdict(kind: ReceiverKind, status: u16, body: &str) -> Verdict {
    match kind {
        ReceiverKind::Alertmanager => alertmanager::verdict(status, body),
        ReceiverKind::Pagerduty => pagerduty::verdict(status, body),
        ReceiverKind::Webhook => webhook::verdict(status, body),
        ReceiverKind::Slack => slack::verdict(status, body),
        ReceiverKind::Dingtalk => dingtalk::verdict(status, body),
        ReceiverKind::Wecom => wecom::verdict(status, body),
        ReceiverKind::Feishu => feishu::verdict(status, body),
        // SMTP answers are judged by its file (email::Mailer::send), not as HTTP.
        ReceiverKind::Email => Verdict::by_status(status),
    }
}
