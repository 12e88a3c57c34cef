//! How probes meet their endpoint (issue 29), against the built-in simulator playing a
//! server with few slots (`--slots`), a model that unloads when idle (`--cold-after`)
//! and one that is still loading (503 `Loading model`): probes of one endpoint never
//! run at once in an agent, in `once` or across listed regions; a cold probe finds the
//! endpoint idle because the agent holds its other probes off; a burst on one slot
//! spreads and raises the degraded alert, on four it does not; a loading server opens
//! a warm-up whose grace keeps it from paging. The same against real llama.cpp servers
//! is in traffic_real.rs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use inferprobe::simulate::{Script, SimRecord};

use crate::support::{
    Daemon, answering_server, http_get, metric_sum, reply, simulator, temp_dir, wait_until,
};

/// A server whose answers take about 150 ms to the first token and 200 ms in all.
fn one_request_is_200ms(slots: u32) -> Script {
    Script {
        ttft: Duration::from_millis(150),
        token_gap: Duration::from_millis(6),
        tokens: 8,
        slots,
        ..Script::default()
    }
}

/// Pairs of the simulator's requests that were served at the same time.
fn overlapping(records: &[SimRecord]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (i, a) in records.iter().enumerate() {
        for b in &records[i + 1..] {
            let (Some(a_end), Some(b_end)) = (a.done_written, b.done_written) else {
                continue;
            };
            if a.received < b_end && b.received < a_end {
                out.push((a.id, b.id));
            }
        }
    }
    out
}

fn start_agent(tag: &str, yaml: &str) -> Daemon {
    let dir = temp_dir(tag);
    let path = dir.join("probes.yaml");
    std::fs::write(&path, yaml).unwrap();
    Daemon::start(&path, &[])
}

/// The agent's last run of `probe`, as the API shows it.
fn last_run(agent: &Daemon, probe: &str) -> serde_json::Value {
    let (_, _, body) = http_get(&agent.addr, &format!("/api/v1/probes/{probe}"), None);
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["last_run"].clone()
}

fn runs(agent: &Daemon, probe: &str) -> f64 {
    metric_sum(
        &agent.metrics(),
        "inferprobe_runs_total",
        &[&format!("probe=\"{probe}\"")],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn probes_of_one_endpoint_take_turns_in_the_agent_even_when_their_ticks_coincide() {
    let sim = simulator(one_request_is_200ms(1)).await;
    // Both on a cron schedule firing every second, at the same instants: only the turns
    // keep them apart.
    let probe = |name: &str, path: &str| {
        format!(
            "  - {{name: {name}, kind: openai_chat, url: \"http://{}{path}\", model: m, schedule: \"* * * * * *\", timeout: 900ms}}\n",
            sim.addr
        )
    };
    let agent = start_agent(
        "turns-cron",
        &format!(
            "agent: {{location: t}}\nprobes:\n{}{}",
            probe("a", "/v1/chat/completions"),
            probe("b", "/v1/chat/completions?x=1")
        ),
    );
    wait_until("four runs of each", Duration::from_secs(20), || {
        runs(&agent, "a") >= 4.0 && runs(&agent, "b") >= 4.0
    });
    let records = sim.log.records();
    assert!(records.len() >= 8, "{}", records.len());
    assert_eq!(overlapping(&records), [], "requests served at once");
    // Nobody queued in the server's one slot: each TTFT is the server's own.
    for r in &records {
        let wait = r.started - r.received;
        assert!(
            wait < Duration::from_millis(5),
            "request {} waited {wait:?} for the slot",
            r.id
        );
    }
    // One of each pair waited its turn, and says so.
    let waited: Vec<f64> = ["a", "b"]
        .iter()
        .map(|p| last_run(&agent, p)["waited_seconds"].as_f64().unwrap())
        .collect();
    assert!(waited.iter().any(|w| *w > 0.1), "{waited:?}");
    for p in ["a", "b"] {
        let ttft = last_run(&agent, p)["ttft_seconds"].as_f64().unwrap();
        assert!(ttft < 0.3, "{p}: TTFT {ttft} s: it measured another probe's turn");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn once_runs_the_probes_of_one_endpoint_one_after_another_unless_they_overlap() {
    let sim = simulator(one_request_is_200ms(1)).await;
    let dir = temp_dir("turns-once");
    let path = dir.join("probes.yaml");
    // Three spellings of one server's address: a newcomer means one server.
    let port = sim.addr.port();
    let yaml = |overlap: bool| {
        let mut y = String::from("probes:\n");
        for (name, host) in [("a", "127.0.0.1"), ("b", "localhost"), ("c", "LOCALHOST")] {
            y.push_str(&format!(
                "  - {{name: {name}, kind: openai_chat, url: \"http://{host}:{port}/v1/chat/completions\", model: m, overlap: {overlap}}}\n",
            ));
        }
        y
    };
    let once = |yaml: String| {
        std::fs::write(&path, yaml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_inferprobe"))
            .args(["once", "--format", "json", "-c"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    let taking_turns = once(yaml(false));
    let served = sim.log.records();
    assert_eq!(served.len(), 3);
    assert_eq!(overlapping(&served), []);
    for run in &taking_turns {
        assert!(run["ttft_seconds"].as_f64().unwrap() < 0.3, "{run}");
    }
    // The check can fail: probes that overlap queue in the one slot.
    let overlapping_runs = once(yaml(true));
    let served: Vec<SimRecord> = sim.log.records().into_iter().skip(3).collect();
    assert!(!overlapping(&served).is_empty(), "{served:?}");
    let slowest = overlapping_runs
        .iter()
        .map(|r| r["ttft_seconds"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(slowest > 0.3, "{overlapping_runs:?}");
}

/// What two one-slot simulators served while an agent probed each every second, at
/// the same instants, the two probes written with `server` (e.g. `", server: gpu-1"`).
async fn two_addresses_probed(tag: &str, server: &str) -> Vec<SimRecord> {
    let (front, back) = (
        simulator(one_request_is_200ms(1)).await,
        simulator(one_request_is_200ms(1)).await,
    );
    let probe = |name: &str, addr: std::net::SocketAddr| {
        format!(
            "  - {{name: {name}, kind: openai_chat, url: \"http://{addr}/v1/chat/completions\", model: m, schedule: \"* * * * * *\", timeout: 900ms{server}}}\n",
        )
    };
    let agent = start_agent(
        tag,
        &format!(
            "agent: {{location: t}}\nprobes:\n{}{}",
            probe("a", front.addr),
            probe("b", back.addr)
        ),
    );
    wait_until("four runs of each", Duration::from_secs(20), || {
        runs(&agent, "a") >= 4.0 && runs(&agent, "b") >= 4.0
    });
    drop(agent);
    let mut both = front.log.records();
    both.extend(back.log.records());
    both
}

#[tokio::test(flavor = "multi_thread")]
async fn probes_that_name_one_server_take_turns_whatever_their_urls() {
    // Two addresses of one machine's GPU (say a gateway and the server's own port):
    // two simulators here, which the probes name as one server.
    let named = two_addresses_probed("turns-server", ", server: gpu-1").await;
    assert!(named.len() >= 8, "{}", named.len());
    assert_eq!(overlapping(&named), [], "requests served at once");
    // The check can fail: without the name they are two endpoints, and their
    // coinciding ticks meet.
    let apart = two_addresses_probed("turns-no-server", "").await;
    assert!(!overlapping(&apart).is_empty(), "{apart:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn regions_probe_a_one_slot_server_in_turns_of_their_own_listed_or_not() {
    let _heavy = crate::support::heavy();
    // Listed, each region takes half of every slot; unlisted, `eu` and `us` take parts
    // from their names, which land a third of a slot apart (schedule/phase.rs).
    for listed in ["locations: [eu, us]", ""] {
        let sim = simulator(one_request_is_200ms(1)).await;
        let config = |location: &str| {
            format!(
                "agent: {{location: {location}, {listed}}}\nprobes:\n  - {{name: chat, kind: openai_chat, url: \"http://{0}/v1/chat/completions\", model: m, interval: 2s}}\n  - {{name: completions, kind: openai_completions, url: \"http://{0}/v1/completions\", model: m, interval: 2s}}\n",
                sim.addr
            )
        };
        let eu = start_agent("regions-eu", &config("eu"));
        let us = start_agent("regions-us", &config("us"));
        wait_until(
            "three runs of each probe in each region",
            Duration::from_secs(20),
            || {
                [&eu, &us]
                    .iter()
                    .all(|a| runs(a, "chat") >= 3.0 && runs(a, "completions") >= 3.0)
            },
        );
        let records = sim.log.records();
        assert!(records.len() >= 12, "{listed}: {}", records.len());
        assert_eq!(
            overlapping(&records),
            [],
            "{listed}: two regions' requests served at once"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cold_probe_finds_the_endpoint_idle_and_holds_the_others_off() {
    // The model unloads after 1.5 s idle and takes 400 ms to load again.
    let sim = simulator(Script {
        cold_after: Some(Duration::from_millis(1500)),
        cold_load: Duration::from_millis(400),
        ..one_request_is_200ms(0)
    })
    .await;
    let agent = start_agent(
        "cold",
        &format!(
            "agent: {{location: t}}\nprobes:\n  - {{name: warm, kind: openai_completions, url: \"http://{0}/v1/completions\", model: m, interval: 1s, timeout: 900ms}}\n  - {{name: cold, kind: openai_chat, url: \"http://{0}/v1/chat/completions\", model: m, interval: 6s, timeout: 2s, cold: {{idle: 2s}}}}\n",
            sim.addr
        ),
    );
    wait_until("two cold runs", Duration::from_secs(30), || {
        runs(&agent, "cold") >= 2.0
    });
    // The server's log: before each cold request, 2 s without any request.
    let records = sim.log.records();
    let cold: Vec<&SimRecord> = records
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .collect();
    assert!(cold.len() >= 2);
    for c in &cold {
        // The first cold run may come before any warm one: the warm probe is held off
        // from the start when the cold probe's first tick is 2 s away.
        let last_before = records
            .iter()
            .filter(|r| r.id != c.id && r.received < c.received)
            .filter_map(|r| r.done_written)
            .max();
        if let Some(last_before) = last_before {
            let quiet = c.received - last_before;
            assert!(
                quiet >= Duration::from_millis(1950),
                "only {quiet:?} of quiet before cold run {}",
                c.id
            );
        }
        // The model had unloaded, as the agent's own warm probe would never have let it.
        assert!(c.ttft_ms().unwrap() >= 500.0, "{:?}", c.ttft_ms());
    }
    let warm_ttfts: Vec<f64> = records
        .iter()
        .filter(|r| r.path == "/v1/completions")
        .filter_map(SimRecord::ttft_ms)
        .collect();
    assert!(warm_ttfts.iter().filter(|t| **t < 300.0).count() * 2 > warm_ttfts.len());
    // The agent says which runs were cold, and counts the warm probe's held ticks.
    let run = last_run(&agent, "cold");
    assert_eq!(run["start"], "cold", "{run}");
    assert!(run["idle_seconds"].as_f64().unwrap() >= 2.0, "{run}");
    assert!(run["ttft_seconds"].as_f64().unwrap() >= 0.5, "{run}");
    assert_eq!(last_run(&agent, "warm")["start"], "warm");
    let m = agent.metrics();
    assert!(
        metric_sum(&m, "inferprobe_runs_total", &["probe=\"cold\"", "start=\"cold\""]) >= 2.0,
        "{m}"
    );
    assert_eq!(
        metric_sum(&m, "inferprobe_runs_total", &["probe=\"warm\"", "start=\"cold\""]),
        0.0
    );
    assert!(
        metric_sum(&m, "inferprobe_held_runs_total", &["probe=\"warm\""]) >= 2.0,
        "{m}"
    );
    assert!(m.contains("inferprobe_ttft_seconds_bucket{probe=\"cold\""), "{m}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_on_one_slot_spreads_and_raises_the_degraded_alert_and_on_four_it_does_not() {
    let _heavy = crate::support::heavy();
    // The first token after 50 ms, the answer in 200 ms: on one slot, four requests at
    // once get theirs after 50, 250, 450 and 650 ms (a spread of 64 %).
    let script = |slots| Script {
        ttft: Duration::from_millis(50),
        token_gap: Duration::from_millis(10),
        tokens: 15,
        slots,
        ..Script::default()
    };
    let one = simulator(script(1)).await;
    let four = simulator(script(4)).await;
    let probe = |name: &str, addr: std::net::SocketAddr| {
        format!(
            "  - {{name: {name}, kind: openai_chat, url: \"http://{addr}/v1/chat/completions\", model: m, interval: 4s, burst: 4, slo: {{burst_spread: 50}}, alert: {{failure_threshold: 2}}}}\n"
        )
    };
    let agent = start_agent(
        "burst",
        &format!(
            "agent: {{location: t}}\nprobes:\n{}{}",
            probe("one-slot", one.addr),
            probe("four-slots", four.addr)
        ),
    );
    let alerts = || -> Vec<serde_json::Value> {
        let (_, _, body) = http_get(&agent.addr, "/api/v1/alerts", None);
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["alerts"]
            .as_array()
            .unwrap()
            .clone()
    };
    wait_until(
        "the one-slot burst's degraded alert",
        Duration::from_secs(30),
        || {
            alerts()
                .iter()
                .any(|a| a["probe"] == "one-slot" && a["state"] == "firing")
        },
    );
    wait_until("three bursts on four slots", Duration::from_secs(20), || {
        runs(&agent, "four-slots") >= 3.0
    });
    let firing = alerts();
    let a = firing.iter().find(|a| a["probe"] == "one-slot").unwrap();
    assert_eq!(a["alertname"], "InferenceEndpointDegraded", "{a}");
    assert!(a["summary"].as_str().unwrap().contains("requests queue"), "{a}");
    assert!(!firing.iter().any(|a| a["probe"] == "four-slots"), "{firing:?}");

    let m = agent.metrics();
    let spread = |p: &str| metric_sum(&m, "inferprobe_burst_spread_ratio", &[&format!("probe=\"{p}\"")]);
    println!(
        "burst spreads: one slot {:.2}, four slots {:.2}",
        spread("one-slot"),
        spread("four-slots")
    );
    assert!(spread("one-slot") > 0.5, "{m}");
    // Served together, the four first tokens come within a few ms of the 50 ms; the
    // bound leaves room for a busy machine's scheduling and stays far below queueing.
    assert!(spread("four-slots") < 0.3, "{m}");
    let slowdown = metric_sum(&m, "inferprobe_burst_slowdown_ratio", &["probe=\"one-slot\""]);
    assert!(slowdown > 1.8, "{slowdown}");
    let run = last_run(&agent, "one-slot");
    assert_eq!(run["burst"]["requests"].as_array().unwrap().len(), 4, "{run}");
    assert_eq!(run["burst"]["by"], "ttft");
    // Five requests a run: one alone, then four together.
    let finished = runs(&agent, "one-slot") as usize;
    let served = one.log.records().len();
    assert!(
        (5 * finished..5 * finished + 5).contains(&served),
        "{served} requests for {finished} runs"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loading_server_opens_a_warmup_and_grace_keeps_it_from_paging() {
    let loading = Arc::new(AtomicBool::new(true));
    let state = loading.clone();
    let server = answering_server(move |_| {
        if state.load(Ordering::SeqCst) {
            reply(
                503,
                r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
            )
        } else {
            reply(200, r#"{"status":"ok"}"#)
        }
    });
    let probe = |name: &str, grace: bool| {
        format!(
            "  - {{name: {name}, kind: http, url: \"http://{server}/health?p={name}\", interval: 1s, overlap: true, warmup: 1m, alert: {{failure_threshold: 2, warmup_grace: {grace}}}}}\n"
        )
    };
    let agent = start_agent(
        "loading",
        &format!(
            "agent: {{location: t}}\nprobes:\n{}{}",
            probe("graced", true),
            probe("plain", false)
        ),
    );
    wait_until("four loading runs of each", Duration::from_secs(20), || {
        runs(&agent, "graced") >= 4.0 && runs(&agent, "plain") >= 4.0
    });
    let run = last_run(&agent, "graced");
    assert_eq!(run["reason"], "loading", "{run}");
    assert!(
        run["warmup"]["cause"]
            .as_str()
            .unwrap()
            .contains("loading the model"),
        "{run}"
    );
    let (_, _, body) = http_get(&agent.addr, "/api/v1/alerts", None);
    let alerts: serde_json::Value = serde_json::from_str(&body).unwrap();
    let down = |p: &str| {
        alerts["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["probe"] == p && a["alertname"] == "InferenceEndpointDown")
    };
    // The same answers page without grace and do not with it.
    assert!(down("plain"), "{alerts}");
    assert!(!down("graced"), "{alerts}");
    loading.store(false, Ordering::SeqCst);
    wait_until("a good run", Duration::from_secs(10), || {
        last_run(&agent, "graced")["success"] == true
    });
    let m = agent.metrics();
    assert_eq!(
        metric_sum(&m, "inferprobe_endpoint_restarts_total", &["probe=\"graced\""]),
        1.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_added_to_an_endpoint_by_a_reload_moves_the_others_to_new_slots() {
    let sim = simulator(one_request_is_200ms(1)).await;
    let probe = |name: &str| {
        format!(
            "  - {{name: {name}, kind: openai_chat, url: \"http://{}/v1/chat/completions\", model: m, interval: 2s}}\n",
            sim.addr
        )
    };
    let dir = temp_dir("turns-reload");
    let path = dir.join("probes.yaml");
    std::fs::write(&path, format!("agent: {{location: t}}\nprobes:\n{}", probe("a"))).unwrap();
    let mut agent = Daemon::start(&path, &[]);
    wait_until("a first run", Duration::from_secs(10), || {
        runs(&agent, "a") >= 1.0
    });
    std::fs::write(
        &path,
        format!("agent: {{location: t}}\nprobes:\n{}{}", probe("a"), probe("b")),
    )
    .unwrap();
    agent.signal("HUP");
    let line = agent.wait_for_log("Configuration reloaded.", Duration::from_secs(10));
    assert!(
        line.contains("\"added\":1") && line.contains("\"unchanged\":1"),
        "{line}"
    );
    let before = runs(&agent, "a");
    let served_before = sim.log.records().len();
    // Both go on, the moved one's runs still counted, in slots of their own.
    wait_until("three more runs of each", Duration::from_secs(20), || {
        runs(&agent, "a") >= before + 3.0 && runs(&agent, "b") >= 3.0
    });
    let after: Vec<SimRecord> = sim.log.records().into_iter().skip(served_before).collect();
    assert_eq!(overlapping(&after), []);
    for r in &after {
        assert!(
            r.started - r.received < Duration::from_millis(5),
            "request {} queued",
            r.id
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cold_probes_whose_quiet_windows_meet_still_run() {
    // Two cold probes of one endpoint, 4 s apart in an 8 s interval, each wanting 6 s
    // of quiet: each one's tick falls in the other's window, every time. Held forever
    // by each other but for the rule that a probe held twice in a row runs after the
    // hold.
    let sim = simulator(one_request_is_200ms(0)).await;
    let probe = |name: &str, path: &str| {
        format!(
            "  - {{name: {name}, kind: openai_chat, url: \"http://{}{path}\", model: m, interval: 8s, timeout: 1s, cold: {{idle: 6s}}}}\n",
            sim.addr
        )
    };
    let agent = start_agent(
        "cold-meet",
        &format!(
            "agent: {{location: t}}\nprobes:\n{}{}",
            probe("llama", "/v1/chat/completions"),
            probe("qwen", "/v1/completions")
        ),
    );
    wait_until("a run of each", Duration::from_secs(60), || {
        runs(&agent, "llama") >= 1.0 && runs(&agent, "qwen") >= 1.0
    });
    let m = agent.metrics();
    assert!(
        metric_sum(&m, "inferprobe_held_runs_total", &[]) >= 1.0,
        "they never met: {m}"
    );
}

#[test]
fn a_burst_goes_with_neither_a_cold_probe_nor_reused_connections() {
    let errors = |probe: &str| -> Vec<String> {
        match inferprobe::config::parse(
            &format!("probes:\n  - {{name: b, kind: http, url: \"http://h/x\", interval: 5m, {probe}}}\n"),
            std::path::Path::new("t.yaml"),
            &|_| None,
        ) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    };
    let cold = errors("burst: 4, cold: {idle: 2m}");
    assert_eq!(cold.len(), 1, "{cold:?}");
    assert!(
        cold[0].contains("burst: a cold probe sends one request"),
        "{cold:?}"
    );
    let reused = errors("burst: 4, reuse_connections: true");
    assert_eq!(reused.len(), 1, "{reused:?}");
    assert!(
        reused[0].contains("burst: does not go with reuse_connections"),
        "{reused:?}"
    );
    assert_eq!(errors("burst: 4"), Vec::<String>::new());
}

/// Nothing a probe sends changes the server for its other users: the probe's own
/// request carries no `keep_alive` (Ollama's setting of how long the model stays
/// loaded, for everyone), and everything else the agent asks (identity, the process
/// start) is a read-only GET.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_probe_sends_changes_nothing_on_the_server() {
    let seen: Arc<std::sync::Mutex<Vec<crate::support::Received>>> = Arc::default();
    let keep = seen.clone();
    let addr = answering_server(move |r| {
        keep.lock().unwrap().push(r.clone());
        match (r.method.as_str(), r.path.as_str()) {
            ("POST", "/api/chat") => crate::support::chunked_reply(
                "application/x-ndjson",
                &[
                    "{\"model\":\"llama3\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n",
                    "{\"model\":\"llama3\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"eval_count\":1,\"prompt_eval_count\":3,\"load_duration\":2000000}\n",
                ],
                crate::support::BodyEnd::LastChunk,
            ),
            ("POST", "/v1/chat/completions") => crate::support::chunked_reply(
                "text/event-stream",
                &[
                    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
                    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n",
                    "data: [DONE]\n\n",
                ],
                crate::support::BodyEnd::LastChunk,
            ),
            ("GET", "/api/ps") => reply(
                200,
                "{\"models\":[{\"name\":\"llama3:latest\",\"model\":\"llama3:latest\",\"digest\":\"abc\",\"expires_at\":\"2026-12-05T10:00:00Z\"}]}",
            ),
            ("GET", "/v1/models") => reply(
                200,
                "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\",\"owned_by\":\"llamacpp\"}]}",
            ),
            ("GET", "/props") => reply(200, "{\"model_path\":\"m.gguf\",\"build_info\":\"b1\"}"),
            _ => reply(404, "{}"),
        }
    });
    for probe in [
        format!(
            "name: o\nkind: ollama\nurl: http://{addr}/api/chat\nmodel: llama3\ninterval: 10m\ncold: {{idle: 6m}}\n"
        ),
        format!("name: c\nkind: openai_chat\nurl: http://{addr}/v1/chat/completions\nmodel: m\n"),
    ] {
        let p = crate::support::build_probe(&probe);
        for _ in 0..2 {
            let o = p.run_once().await;
            assert!(o.observation.success(), "{probe}: {:?}", o.observation.result);
        }
    }
    let seen = seen.lock().unwrap();
    let asked: Vec<String> = seen.iter().map(|r| format!("{} {}", r.method, r.path)).collect();
    for r in seen.iter() {
        let body = String::from_utf8_lossy(&r.body);
        assert!(!body.contains("keep_alive"), "{} {}: {body}", r.method, r.path);
        if r.method != "GET" {
            assert!(
                ["/api/chat", "/v1/chat/completions"].contains(&r.path.as_str()),
                "{asked:?}"
            );
        }
    }
    // The asks did happen, so the check above saw them.
    for wanted in ["GET /api/ps", "GET /v1/models", "GET /metrics"] {
        assert!(asked.iter().any(|a| a == wanted), "{wanted} in {asked:?}");
    }
}
