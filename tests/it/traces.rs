//! A trace for every run, end to end with the real binary: the endpoint records the
//! `traceparent` of every request (valid per W3C Trace Context, one fresh trace per run),
//! and the run's trace id is found in the results API, the log line, the probe's page,
//! `once --format json`, the pages (the real Alertmanager, fake PagerDuty and webhook
//! receivers) and the span exported over OTLP/HTTP, which an in-process receiver decodes
//! with the spec's messages.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// An Alertmanager that routes everything nowhere: we read its API.
const BLACKHOLE: &str = "route:\n  receiver: blackhole\n  group_wait: 1s\nreceivers:\n  - name: blackhole\n";

/// `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, neither id all zeros (W3C Trace Context
/// level 1, section 3.2); returns the trace id and span id.
fn parse_traceparent(s: &str) -> Context {
    let parts: Vec<&str> = s.split('-').collect();
    assert_eq!(parts.len(), 4, "{s}");
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    assert_eq!(parts[0], "00", "{s}");
    assert!(hex(parts[1], 32) && parts[1].bytes().any(|b| b != b'0'), "{s}");
    assert!(hex(parts[2], 16) && parts[2].bytes().any(|b| b != b'0'), "{s}");
    assert!(hex(parts[3], 2), "{s}");
    (parts[1].to_owned(), parts[2].to_owned(), parts[3].to_owned())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The endpoint: `/ok` answers 200, `/down` 503; every request is recorded.
fn endpoint() -> (std::net::SocketAddr, Arc<Mutex<Vec<Received>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let addr = answering_server(move |r| {
        log.lock().unwrap().push(r.clone());
        if r.path.starts_with("/down") {
            reply(503, "{\"error\":\"no healthy upstream\"}")
        } else {
            reply(200, "{\"status\":\"ok\"}")
        }
    });
    (addr, seen)
}

/// A `traceparent`'s trace id, span id and flags, in hex.
type Context = (String, String, String);

/// The path and context of every request received so far.
fn contexts(seen: &Mutex<Vec<Received>>) -> Vec<(String, Option<Context>)> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|r| (r.path.clone(), r.header("traceparent").map(parse_traceparent)))
        .collect()
}

/// Every `trace_id` field in the agent's JSON log lines of finished runs, by probe.
fn logged_trace_ids(lines: &[String]) -> Vec<(String, Option<String>)> {
    lines
        .iter()
        .filter(|l| l.contains("Probe run"))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["probe"].as_str().unwrap().to_owned(),
                v["trace_id"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn attributes(kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

#[test]
fn every_run_carries_a_fresh_trace_found_in_every_surface() {
    let Some(am) = Alertmanager::start(BLACKHOLE) else {
        return;
    };
    let (addr, seen) = endpoint();
    let pd = FakeReceiver::start(202);
    let hook = FakeReceiver::start(200);
    let collector = FakeReceiver::start(200);
    let dir = temp_dir("traces-e2e");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!(
            "agent:\n  location: eu-test\n  tracing: {{otlp_endpoint: \"http://{collector}/v1/traces\"}}\n\
             receivers:\n  - {{name: am, kind: alertmanager, url: \"http://{am}\", max_backoff: 1s}}\n\
             \x20 - {{name: pager, kind: pagerduty, url: \"http://{pd}/v2/enqueue\", routing_key: rk-0123456789, max_backoff: 500ms}}\n\
             \x20 - {{name: hook, kind: webhook, url: \"http://{hook}/hook\", max_backoff: 500ms}}\n\
             probes:\n\
             \x20 - {{name: up, kind: http, url: \"http://{addr}/ok\", interval: 1s, timeout: 900ms}}\n\
             \x20 - {{name: quiet, kind: http, url: \"http://{addr}/ok?quiet\", interval: 1s, timeout: 900ms, trace: {{enabled: false}}}}\n\
             \x20 - name: down\n    kind: http\n    url: \"http://{addr}/down\"\n    interval: 1s\n    timeout: 900ms\n    trace: {{sampled: false}}\n\
             \x20   alert: {{failure_threshold: 2, receivers: [am, pager, hook]}}\n",
            collector = collector.addr,
            am = am.addr,
            pd = pd.addr,
            hook = hook.addr,
        ),
    )
    .unwrap();
    let agent = Daemon::start(&config, &[]);
    wait_until("a page at every receiver", Duration::from_secs(30), || {
        pd.accepted_count() > 0
            && hook.accepted_count() > 0
            && !am.alerts_named("InferenceEndpointDown").is_empty()
    });
    wait_until("3 runs of each probe", Duration::from_secs(20), || {
        let c = contexts(&seen);
        ["/ok", "/ok?quiet", "/down"]
            .iter()
            .all(|p| c.iter().filter(|(path, _)| path == p).count() >= 3)
    });

    // What the endpoint received: one valid, fresh traceparent per traced run, none
    // for the probe that turned tracing off, the sampled flag as configured.
    let received = contexts(&seen);
    let mut trace_ids: HashMap<String, (String, String)> = HashMap::new();
    for (path, context) in &received {
        match (path.as_str(), context) {
            ("/ok?quiet", None) => {}
            ("/ok?quiet", Some(c)) => panic!("an untraced probe sent {c:?}"),
            (_, None) => panic!("{path}: no traceparent"),
            (p, Some((trace, span, flags))) => {
                assert_eq!(flags, if p == "/down" { "00" } else { "01" }, "{p}");
                let old = trace_ids.insert(trace.clone(), (p.to_owned(), span.clone()));
                assert!(old.is_none(), "trace id {trace} sent twice");
            }
        }
    }
    let spans: HashSet<&String> = trace_ids.values().map(|(_, s)| s).collect();
    assert_eq!(spans.len(), trace_ids.len(), "span ids repeat");
    // The trace ids each probe's requests carried so far (runs go on while we look).
    let of = |probe_path: &str| -> HashSet<String> {
        contexts(&seen)
            .into_iter()
            .filter(|(p, _)| p == probe_path)
            .filter_map(|(_, c)| c.map(|c| c.0))
            .collect()
    };

    // The results API: each run's trace id is the one its request carried.
    let settled = || {
        let (status, _, body) = http_get(&agent.addr, "/api/v1/results?since=10m", None);
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["results"].as_array().unwrap().clone()
    };
    wait_until("settled runs in the API", Duration::from_secs(20), || {
        settled().len() >= 6
    });
    for r in settled() {
        let (probe, id) = (r["probe"].as_str().unwrap(), &r["trace_id"]);
        match probe {
            "quiet" => assert!(id.is_null(), "{r}"),
            "up" => assert!(of("/ok").contains(id.as_str().unwrap()), "{r}"),
            _ => assert!(of("/down").contains(id.as_str().unwrap()), "{r}"),
        }
    }
    let (_, _, latest) = http_get(&agent.addr, "/api/v1/probes/up", None);
    let latest: serde_json::Value = serde_json::from_str(&latest).unwrap();
    let last_up = latest["last_run"]["trace_id"].as_str().unwrap().to_owned();
    assert!(of("/ok").contains(&last_up), "{latest}");

    // The log line of each run.
    let logs = agent.all_logs.lock().unwrap().clone();
    let logged = logged_trace_ids(&logs);
    assert!(logged.len() >= 9, "{logged:?}");
    let now_up = of("/ok");
    for (probe, id) in &logged {
        match (probe.as_str(), id) {
            ("quiet", None) => {}
            ("up", Some(id)) => assert!(now_up.contains(id), "{probe} {id}"),
            ("down", Some(id)) => assert!(of("/down").contains(id), "{probe} {id}"),
            other => panic!("log line {other:?}"),
        }
    }

    // The probe's page lists its runs with their trace ids (from the history, which
    // the last run reaches within the writer's commit window).
    let page = || http_get(&agent.addr, "/probes/up", None).2;
    assert!(page().contains("<th>trace id</th>"));
    wait_until(
        "the last run's trace id on its page",
        Duration::from_secs(5),
        || page().contains(&format!("<code>{last_up}</code>")),
    );

    // The pages of the failing probe carry the trace id of one of its failed runs.
    let down_now = of("/down");
    let hooked = hook.accepted();
    let id = hooked[0]["alert"]["trace_id"].as_str().unwrap();
    assert!(down_now.contains(id), "webhook: {}", hooked[0]);
    assert!(
        hooked[0]["alert"]["description"]
            .as_str()
            .unwrap()
            .contains("Trace id of the last failed run: ")
    );
    let paged = pd.accepted();
    let id = paged[0]["payload"]["custom_details"]["trace_id"]
        .as_str()
        .unwrap();
    assert!(down_now.contains(id), "pagerduty: {}", paged[0]);
    let alerts = am.alerts_named("InferenceEndpointDown");
    let id = alerts[0]["annotations"]["trace_id"].as_str().unwrap();
    assert!(down_now.contains(id), "alertmanager: {}", alerts[0]);
    // A trace id is never a label (Alertmanager's or a metric's).
    assert!(alerts[0]["labels"].get("trace_id").is_none());
    assert!(
        !agent.metrics().contains("trace_id=\""),
        "a trace id in /metrics' labels"
    );

    // The collector: one CLIENT span per traced run, with the ids the request carried,
    // its phases as events and the run's attributes.
    wait_until("spans at the collector", Duration::from_secs(20), || {
        collector.accepted_count() >= 2
    });
    let calls = collector.calls.lock().unwrap().clone();
    let all: HashMap<String, (String, (), String)> = contexts(&seen)
        .into_iter()
        .filter_map(|(p, c)| c.map(|(t, s, _)| (t, (p, (), s))))
        .collect();
    let mut exported = 0;
    for (request, _) in &calls {
        assert_eq!(request.path, "/v1/traces");
        assert_eq!(request.header("content-type"), Some("application/x-protobuf"));
        let export = ExportTraceServiceRequest::decode(request.body.as_slice()).expect("OTLP protobuf");
        for rs in &export.resource_spans {
            let resource = attributes(&rs.resource.as_ref().unwrap().attributes);
            assert_eq!(resource["service.name"], "inferprobe");
            assert_eq!(resource["inferprobe.location"], "eu-test");
            for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                exported += 1;
                let trace = hex(&span.trace_id);
                let (path, _, span_id) = all
                    .get(&trace)
                    .unwrap_or_else(|| panic!("exported trace {trace} was never sent"));
                assert_eq!(&hex(&span.span_id), span_id, "the span is the request's parent");
                assert!(span.parent_span_id.is_empty());
                assert_eq!(span.kind, 3, "SPAN_KIND_CLIENT");
                assert_eq!(span.name, "inferprobe http");
                let a = attributes(&span.attributes);
                assert_eq!(a["inferprobe.kind"], "http");
                assert_eq!(a["inferprobe.location"], "eu-test");
                // The phases in the order they happen (DNS only where a name was
                // resolved; `end` only for a response that ended: a 503 fails at its
                // status, and its span ends when the result was recorded).
                let ok = path != "/down";
                let events: Vec<&str> = span.events.iter().map(|e| e.name.as_str()).collect();
                let want: Vec<&str> = ["dns", "connect", "first_byte", "end"]
                    .into_iter()
                    .filter(|e| *e != "dns" || events.contains(&"dns"))
                    .filter(|e| *e != "end" || ok)
                    .collect();
                assert_eq!(events, want, "{trace}");
                let times: Vec<u64> = span.events.iter().map(|e| e.time_unix_nano).collect();
                assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
                assert!(span.start_time_unix_nano <= times[0]);
                let last = *times.last().unwrap();
                if ok {
                    assert_eq!(last, span.end_time_unix_nano, "the end event ends the span");
                } else {
                    assert!(last <= span.end_time_unix_nano);
                }
                if path == "/down" {
                    assert_eq!(a["inferprobe.probe"], "down");
                    assert_eq!(a["inferprobe.result"], "failure");
                    assert_eq!(a["inferprobe.reason"], "http_5xx");
                    assert_eq!(a["http.response.status_code"], "503");
                    assert_eq!(span.status.as_ref().unwrap().code, 2, "STATUS_CODE_ERROR");
                    assert_eq!(span.flags & 0xff, 0, "not sampled");
                } else {
                    assert_eq!(a["inferprobe.probe"], "up");
                    assert_eq!(a["inferprobe.result"], "success");
                    assert_eq!(a["http.response.status_code"], "200");
                    assert!(!a.contains_key("inferprobe.reason"));
                    assert_eq!(span.flags & 0xff, 1, "sampled");
                }
            }
        }
    }
    assert!(exported >= 4, "{exported} spans exported");
}

/// An unreachable collector costs the runs nothing: they go on, and the loss is said in
/// the log (rate-limited), not once per run.
#[test]
fn an_unreachable_collector_is_logged_and_runs_go_on() {
    let (addr, seen) = endpoint();
    let dir = temp_dir("traces-no-collector");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!(
            "agent:\n  location: eu-test\n  tracing: {{otlp_endpoint: \"http://127.0.0.1:{}\"}}\n\
             probes:\n  - {{name: up, kind: http, url: \"http://{addr}/ok\", interval: 1s, timeout: 900ms}}\n",
            closed_port()
        ),
    )
    .unwrap();
    let mut agent = Daemon::start(&config, &[]);
    let warning = agent.wait_for_log("Cannot export run spans", Duration::from_secs(20));
    let v: serde_json::Value = serde_json::from_str(&warning).unwrap();
    assert_eq!(v["level"], "WARN");
    assert!(v["spans"].as_u64().unwrap() >= 1);
    assert!(v["collector"] == "127.0.0.1", "{warning}");
    wait_until("runs after the failed export", Duration::from_secs(10), || {
        seen.lock().unwrap().len() >= 4
    });
    let logs = agent.all_logs.lock().unwrap().clone();
    assert_eq!(
        logs.iter()
            .filter(|l| l.contains("Cannot export run spans"))
            .count(),
        1,
        "said once a minute at most"
    );
    assert!(logs.iter().filter(|l| l.contains("Probe run finished.")).count() >= 3);
}

/// `once --format json` shows the trace id the request carried.
#[test]
fn once_shows_the_trace_id_it_sent() {
    let (addr, seen) = endpoint();
    let dir = temp_dir("traces-once");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        format!("probes:\n  - {{name: up, kind: http, url: \"http://{addr}/ok\"}}\n"),
    )
    .unwrap();
    let mut ids = HashSet::new();
    for _ in 0..2 {
        let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
            .args(["once", "--format", "json", "-c"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let shown = v["trace_id"].as_str().unwrap().to_owned();
        let sent = seen
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .header("traceparent")
            .map(parse_traceparent);
        assert_eq!(sent.unwrap().0, shown);
        ids.insert(shown);
    }
    assert_eq!(ids.len(), 2, "a fresh trace per run");
}

/// A run is one span: kserve_v2's readiness check and its inference carry the same
/// `traceparent`, and the outcome says it.
#[tokio::test(flavor = "multi_thread")]
async fn a_readiness_check_shares_its_runs_traceparent() {
    let (addr, seen) = endpoint();
    let outcome = run_probe(&format!(
        "name: digits\nkind: kserve_v2\nurl: http://{addr}/v2/models/digits/infer\nready_check: true\ntimeout: 3s\n\
         input: {{name: input-0, datatype: FP32, shape: [1, 4], data: [0.1, 0.5, 0.2, 0.9]}}\n"
    ))
    .await;
    let received = contexts(&seen);
    let paths: Vec<&str> = received.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["/v2/models/digits/ready", "/v2/models/digits/infer"]);
    let trace = outcome.trace.expect("a traced run");
    let sent = format!("00-{}-{}-01", hex(&trace.trace_id), hex(&trace.span_id));
    assert_eq!(trace.traceparent(), sent);
    for (path, context) in received {
        let (t, s, _) = context.unwrap_or_else(|| panic!("{path}: no traceparent"));
        assert_eq!(format!("00-{t}-{s}-01"), sent, "{path}");
    }
}
