//! The chat robots (DingTalk, WeCom, Feishu) through `inferprobe test-alert`, against
//! in-process fakes that answer as the platforms document: HTTP 200 whatever happened,
//! the verdict in the body's code. Each fake checks what the real one checks: DingTalk's
//! signature in the URL and its keyword, WeCom's key, Feishu's signature in the body,
//! each signature recomputed here with the documented algorithm.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine as _;

use crate::support::*;

const DINGTALK_SECRET: &str = "SECtest-dingtalk";
const FEISHU_SECRET: &str = "feishu-test-secret";

fn hmac_base64(key: &[u8], data: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    base64::engine::general_purpose::STANDARD.encode(ring::hmac::sign(&key, data).as_ref())
}

fn query<'a>(path: &'a str, name: &str) -> Option<&'a str> {
    path.split_once('?')?
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// The code a platform would answer `r` with.
fn judge(r: &Received) -> serde_json::Value {
    let body = r.json();
    if r.path.starts_with("/robot/send") {
        // DingTalk: signed (`timestamp`, `sign` in the query) and keyword-secured.
        let (Some(ts), Some(sign)) = (query(&r.path, "timestamp"), query(&r.path, "sign")) else {
            return serde_json::json!({"errcode": 310000, "errmsg": "sign not match"});
        };
        let sign = percent_encoding::percent_decode_str(sign).decode_utf8().unwrap();
        let want = hmac_base64(
            DINGTALK_SECRET.as_bytes(),
            format!("{ts}\n{DINGTALK_SECRET}").as_bytes(),
        );
        if sign != want {
            return serde_json::json!({"errcode": 310000, "errmsg": "sign not match"});
        }
        let text = body["markdown"]["text"].as_str().unwrap_or_default();
        if body["msgtype"] != "markdown" || !text.contains("inferprobe-alert") {
            return serde_json::json!({"errcode": 310000, "errmsg": "keywords not in content"});
        }
        return serde_json::json!({"errcode": 0, "errmsg": "ok"});
    }
    if r.path.starts_with("/cgi-bin/webhook/send") {
        // WeCom: the key is the credential.
        if query(&r.path, "key") != Some("good-key") {
            return serde_json::json!({"errcode": 93000, "errmsg": "invalid webhook url"});
        }
        return serde_json::json!({"errcode": 0, "errmsg": "ok"});
    }
    // Feishu: signed in the body.
    let ts = body["timestamp"].as_str().unwrap_or_default();
    let want = hmac_base64(format!("{ts}\n{FEISHU_SECRET}").as_bytes(), b"");
    if body["sign"] != want.as_str() {
        return serde_json::json!({"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"});
    }
    serde_json::json!({"code": 0, "msg": "success", "data": {}})
}

/// What a fake robot received, each request with the answer it gave.
type RobotLog = Arc<Mutex<Vec<(Received, serde_json::Value)>>>;

/// A fake of all three platforms, routed by path.
fn fake_robots() -> (SocketAddr, RobotLog) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    let addr = answering_server(move |r| {
        let answer = judge(r);
        seen.lock().unwrap().push((r.clone(), answer.clone()));
        reply(200, &answer.to_string())
    });
    (addr, log)
}

#[test]
fn a_robot_that_accepts_is_accepted_and_one_that_refuses_inside_a_200_is_rejected() {
    let (robots, log) = fake_robots();
    let good = format!(
        "  - name: ding\n    kind: dingtalk\n    url: http://{robots}/robot/send?access_token=T\n    secret: {DINGTALK_SECRET}\n    keyword: inferprobe-alert\n    at_mobiles: [\"13800000000\"]\n\
         \x20 - name: wecom\n    kind: wecom\n    url: http://{robots}/cgi-bin/webhook/send?key=good-key\n\
         \x20 - name: feishu\n    kind: feishu\n    url: http://{robots}/open-apis/bot/v2/hook/H\n    secret: {FEISHU_SECRET}\n"
    );
    let (code, stdout) = test_alert(&good);
    assert_eq!(code, Some(0), "{stdout}");
    for name in ["ding", "wecom", "feishu"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(name) && l.contains("accepted")),
            "{name}: {stdout}"
        );
    }
    {
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 3, "one post each");
        assert!(
            log.iter()
                .all(|(_, answer)| answer["errcode"] == 0 || answer["code"] == 0)
        );
    }

    // The same robots refusing, each inside an HTTP 200: no keyword for DingTalk's
    // keyword-secured robot, a wrong key for WeCom, a wrong secret for Feishu.
    let bad = format!(
        "  - name: ding\n    kind: dingtalk\n    url: http://{robots}/robot/send?access_token=T\n    secret: {DINGTALK_SECRET}\n\
         \x20 - name: wecom\n    kind: wecom\n    url: http://{robots}/cgi-bin/webhook/send?key=old-key\n\
         \x20 - name: feishu\n    kind: feishu\n    url: http://{robots}/open-apis/bot/v2/hook/H\n    secret: not-the-secret\n"
    );
    let (code, stdout) = test_alert(&bad);
    assert_eq!(code, Some(1), "{stdout}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {stdout}"))
            .to_owned()
    };
    let ding = line("ding");
    assert!(
        ding.contains("REJECTED") && ding.contains("310000") && ding.contains("keyword"),
        "{ding}"
    );
    let wecom = line("wecom");
    assert!(wecom.contains("REJECTED") && wecom.contains("93000"), "{wecom}");
    let feishu = line("feishu");
    assert!(
        feishu.contains("REJECTED") && feishu.contains("19021") && feishu.contains("secret"),
        "{feishu}"
    );
    // Refusals are not retried: one more post each.
    assert_eq!(log.lock().unwrap().len(), 6);
    // Secrets never show.
    for secret in [DINGTALK_SECRET, "old-key", "not-the-secret", "access_token=T"] {
        assert!(!stdout.contains(secret), "{secret} in {stdout}");
    }
}

/// A WeCom robot as the platform keeps it: at most 20 messages in any minute (the 21st
/// gets 45009), and one throttled answer on demand.
struct LimitedRobot {
    addr: SocketAddr,
    /// Every post: when it came, its body, whether it was taken.
    log: Arc<Mutex<Vec<(std::time::Instant, serde_json::Value, bool)>>>,
}

impl LimitedRobot {
    fn start(throttle_post: usize) -> LimitedRobot {
        let log: Arc<Mutex<Vec<(std::time::Instant, serde_json::Value, bool)>>> = Arc::default();
        let seen = log.clone();
        let addr = answering_server(move |r| {
            let now = std::time::Instant::now();
            let mut log = seen.lock().unwrap();
            let within_minute = log
                .iter()
                .filter(|(t, _, taken)| *taken && now.duration_since(*t) < std::time::Duration::from_secs(60))
                .count();
            let taken = within_minute < 20 && log.len() != throttle_post;
            log.push((now, r.json(), taken));
            if taken {
                reply(200, r#"{"errcode":0,"errmsg":"ok"}"#)
            } else {
                reply(200, r#"{"errcode":45009,"errmsg":"api freq out of limit"}"#)
            }
        });
        LimitedRobot { addr, log }
    }

    /// The texts the robot took.
    fn taken(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, taken)| *taken)
            .map(|(_, body, _)| {
                body["markdown"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }
}

#[test]
fn thirty_alerts_in_a_minute_reach_a_robot_in_at_most_twenty_messages_each_named_once() {
    let _turn = heavy();
    // The third message is throttled once: it must come again, not be lost or doubled.
    let robot = LimitedRobot::start(2);
    let dir = temp_dir("robot-storm");
    let path = dir.join("probes.yaml");
    let mut yaml = format!(
        "agent:\n  location: eu-test\nreceivers:\n  - name: team-chat\n    kind: wecom\n    url: http://{}/cgi-bin/webhook/send?key=good-key\n    max_backoff: 1s\nprobes:\n",
        robot.addr
    );
    // Thirty endpoints down at once, each its own critical page; the robot names nobody,
    // so each goes as markdown.
    let refused = closed_port();
    for i in 0..30 {
        yaml.push_str(&format!(
            "  - name: svc-{i:02}\n    kind: http\n    url: http://127.0.0.1:{refused}/health\n    interval: 1s\n    timeout: 500ms\n    alert:\n      failure_threshold: 2\n"
        ));
    }
    std::fs::write(&path, yaml).unwrap();
    let _agent = Daemon::start(&path, &["--data-dir", dir.to_str().unwrap()]);
    let names: Vec<String> = (0..30).map(|i| format!("svc-{i:02}")).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let taken = robot.taken().join("\n");
        let missing: Vec<&String> = names.iter().filter(|n| !taken.contains(n.as_str())).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after 90 s the robot took no message naming {missing:?}; it took:\n{taken}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let taken = robot.taken();
    eprintln!("30 alerts reached the robot in {} messages", taken.len());
    assert!(taken.len() <= 20, "{} messages: {taken:#?}", taken.len());
    assert!(taken.len() < 30, "nothing was merged: {} messages", taken.len());
    for name in &names {
        // Each firing alert in one message: the throttled one was sent again, once.
        let firing = format!("{name} is DOWN");
        let named = taken.iter().filter(|t| t.contains(&firing)).count();
        assert_eq!(
            named,
            1,
            "{name} named in {named} messages:\n{}",
            taken.join("\n")
        );
    }
    let log = robot.log.lock().unwrap();
    let refused = log.iter().filter(|(_, _, taken)| !taken).count();
    assert_eq!(
        refused,
        1,
        "only the one throttled on purpose: {} posts",
        log.len()
    );
}

#[test]
fn test_alert_tries_a_throttled_robot_again_and_it_is_delivered_once() {
    let robot = LimitedRobot::start(0);
    let (code, stdout) = test_alert(&format!(
        "  - name: team-chat\n    kind: wecom\n    url: http://{}/cgi-bin/webhook/send?key=good-key\n",
        robot.addr
    ));
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("accepted"), "{stdout}");
    let log = robot.log.lock().unwrap();
    let taken: Vec<bool> = log.iter().map(|(_, _, taken)| *taken).collect();
    assert_eq!(taken, [false, true], "throttled once, then taken once");
}
