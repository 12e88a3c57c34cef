//! The metrics' unit tests: recording, detail, reloads, the formats.

use super::*;
use crate::outcome::{Failure, FailureReason, Observation};
use prometheus_client::encoding::prometheus_protobuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

thread_local! {
    static PROBES: [Arc<ProbeIdentity>; 2] = [false, true].map(|full_metrics| Arc::new(ProbeIdentity {
        name: "chat".into(),
        kind: "openai_chat",
        model: "m".into(),
        location: "eu-west".into(),
        labels: vec![("team".into(), "ml".into())],
        endpoint: "http://x/".into(),
        query: String::new(),
        full_metrics,
    }));
}

/// The test probe, one identity per detail (as the agent builds it once).
fn probe(full: bool) -> Arc<ProbeIdentity> {
    PROBES.with(|p| p[usize::from(full)].clone())
}

/// Metrics with `probes` configured, as the agent does before their runs.
fn configured(probes: &[Arc<ProbeIdentity>]) -> Metrics {
    let m = Metrics::new("test");
    m.configured(probes.len(), false, probes, &[]);
    m
}

fn outcome(fail: Option<FailureReason>) -> Outcome {
    let t0 = Instant::now();
    let mut o = Observation::new(t0);
    o.prompt_bucket = "short";
    o.marks.headers = Some(t0 + Duration::from_millis(10));
    o.marks.first_token = Some(t0 + Duration::from_millis(300));
    o.marks.last_token = Some(t0 + Duration::from_millis(400));
    o.marks.end = Some(t0 + Duration::from_millis(410));
    o.output_tokens = Some(5);
    o.chunk_gaps = vec![Duration::from_millis(25); 4];
    if let Some(r) = fail {
        o.result = Err(Failure::new(r, "x"));
    }
    Outcome {
        probe: probe(false),
        started_at: SystemTime::now(),
        schedule_lag: Duration::ZERO,
        trace: None,
        observation: o,
        conditions: Default::default(),
        burst: None,
    }
}

#[test]
fn the_agents_own_exhaustion_is_an_agent_series_not_an_endpoint_failure() {
    let m = configured(&[probe(false)]);
    m.record(&outcome(None));
    m.record(&outcome(Some(FailureReason::AgentError)));
    m.record(&outcome(Some(FailureReason::AgentError)));
    let text = m.render_text();
    assert!(!text.contains("result=\"failure\""), "{text}");
    assert!(!text.contains("agent_error\""), "{text}");
    assert!(
        text.contains(r#"inferprobe_agent_errors_total{location="test",probe="chat"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"inferprobe_up{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml"} 1"#
        ),
        "{text}"
    );
}

fn full(mut o: Outcome) -> Outcome {
    o.probe = probe(true);
    o
}

#[test]
fn success_fills_histograms_and_failure_only_counts() {
    let m = configured(&[probe(true)]);
    m.record(&full(outcome(None)));
    m.record(&full(outcome(Some(FailureReason::Http5xx))));
    let text = m.render_text();
    assert!(text.contains(r#"inferprobe_runs_total{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml",prompt_bucket="short",result="success",reason="none"} 1"#), "{text}");
    assert!(text.contains(r#"result="failure",reason="http_5xx"} 1"#));
    assert!(text.contains(r#"inferprobe_ttft_seconds_count{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml",prompt_bucket="short"} 1"#));
    assert!(text.contains(r#"inferprobe_chunk_gap_seconds_count{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml"} 4"#));
    assert!(text.contains(
        r#"inferprobe_up{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml"} 0"#
    ));
}

#[test]
fn the_basic_detail_keeps_what_slos_need_and_nothing_else() {
    let m = configured(&[probe(false)]);
    m.record(&outcome(None));
    m.record(&outcome(Some(FailureReason::Http5xx)));
    let text = m.render_text();
    let names: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("inferprobe_") && l.contains("probe=\"chat\""))
        .filter_map(|l| l.split('{').next())
        .collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            "inferprobe_e2e_latency_seconds_bucket",
            "inferprobe_e2e_latency_seconds_count",
            "inferprobe_e2e_latency_seconds_sum",
            "inferprobe_last_run_timestamp_seconds",
            "inferprobe_last_success_timestamp_seconds",
            "inferprobe_runs_total",
            "inferprobe_tokens_total",
            "inferprobe_ttft_seconds_bucket",
            "inferprobe_ttft_seconds_count",
            "inferprobe_ttft_seconds_sum",
            "inferprobe_up",
        ],
        "{text}"
    );
    // No prompt split, ten buckets, and the schedule lag only at the agent's full detail.
    assert!(text.contains(r#"inferprobe_runs_total{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml",result="success",reason="none"} 1"#), "{text}");
    assert!(!text.contains("prompt_bucket"), "{text}");
    assert_eq!(
        text.matches("inferprobe_ttft_seconds_bucket{").count(),
        10,
        "{text}"
    );
    assert!(!text.contains("schedule_lag_seconds_count"), "{text}");
    m.configured(1, true, &[], &[]);
    m.record(&outcome(None));
    assert!(
        m.render_text()
            .contains("inferprobe_schedule_lag_seconds_count{location=\"test\"} 1")
    );
    m.configured(1, false, &[], &[]);
    assert!(!m.render_text().contains("schedule_lag_seconds_count"));
}

#[test]
fn a_probe_whose_detail_changes_leaves_no_stale_series() {
    let m = configured(&[probe(true)]);
    m.record(&full(outcome(None)));
    m.record(&full(outcome(Some(FailureReason::Http5xx))));
    let after = outcome(None);
    let (old, new) = (vec![probe(true)], vec![probe(false)]);
    m.configured(1, false, &new, &old);
    let text = m.render_text();
    let of_chat = |t: &str| t.lines().filter(|l| l.contains("probe=\"chat\"")).count();
    // Nothing until the rebuilt probe runs.
    assert_eq!(of_chat(&text), 0, "{text}");
    m.record(&after);
    let text = m.render_text();
    assert!(
        !text.contains("prompt_bucket") && !text.contains("ttfb"),
        "{text}"
    );
    // Runs, up and two timestamps, TTFT and total, tokens by direction.
    assert_eq!(of_chat(&text), 1 + 3 + 2 * 12 + 2, "{text}");
    // Rebuilt with the same labels and detail: counters go on, gauges go until the next run.
    let rebuilt = vec![Arc::new((*probe(false)).clone())];
    m.configured(1, false, &rebuilt, &new);
    let text = m.render_text();
    assert!(text.contains(r#"result="success",reason="none"} 1"#), "{text}");
    assert!(!text.contains("inferprobe_up{"), "{text}");
    // A run of the old build finishing after the reload still counts, once.
    m.record(&after);
    assert!(m.render_text().contains(r#"result="success",reason="none"} 2"#));
    // A removed probe leaves nothing behind, and a late run of it adds nothing back.
    m.configured(0, false, &[], &rebuilt);
    assert_eq!(of_chat(&m.render_text()), 0);
    let mut late = outcome(None);
    late.probe = rebuilt[0].clone();
    m.record(&late);
    m.record_skipped(&rebuilt[0], 1);
    assert_eq!(of_chat(&m.render_text()), 0);
    assert_eq!(of_chat(&m.render_openmetrics()), 0);
}

#[test]
fn a_probe_not_configured_records_nothing() {
    let m = Metrics::new("test");
    m.record(&outcome(None));
    m.record_skipped(&probe(false), 3);
    assert!(!m.render_text().contains("probe=\"chat\""));
}

#[test]
fn skipped_ticks_appear_at_the_first_skip() {
    let m = configured(&[probe(false)]);
    assert!(!m.render_text().contains("skipped_runs_total{"));
    m.record_skipped(&probe(false), 2);
    m.record_skipped(&probe(false), 1);
    assert!(m.render_text().contains(
        r#"inferprobe_skipped_runs_total{probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml"} 3"#
    ));
}

#[test]
fn tokens_are_counted_by_direction_from_the_first_run_that_reports_them() {
    let m = configured(&[probe(false)]);
    let mut o = outcome(None);
    o.observation.output_tokens = None;
    m.record(&o);
    assert!(!m.render_text().contains("inferprobe_tokens_total"));
    o.observation.input_tokens = Some(12);
    o.observation.output_tokens = Some(5);
    m.record(&o);
    // A failed run's tokens cost too.
    let mut failed = outcome(Some(FailureReason::Truncated));
    failed.observation.input_tokens = Some(12);
    failed.observation.output_tokens = Some(2);
    m.record(&failed);
    let text = m.render_text();
    let labels = r#"probe="chat",kind="openai_chat",model="m",location="eu-west",team="ml""#;
    assert!(
        text.contains(&format!(
            "inferprobe_tokens_total{{{labels},direction=\"input\"}} 24"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "inferprobe_tokens_total{{{labels},direction=\"output\"}} 7"
        )),
        "{text}"
    );
    assert!(text.contains("# TYPE inferprobe_tokens_total counter"), "{text}");
}

fn traced(mut o: Outcome, id: u8) -> Outcome {
    o.trace = Some(crate::outcome::TraceContext {
        trace_id: [id; 16],
        span_id: [1; 8],
        sampled: true,
    });
    o
}

#[test]
fn openmetrics_carries_the_runs_trace_ids_as_exemplars_on_ttft_and_total_only() {
    let m = configured(&[probe(false)]);
    let plain = configured(&[probe(false)]);
    let (a, b) = (outcome(None), outcome(None));
    m.record(&traced(a.clone(), 0xab));
    m.record(&traced(b.clone(), 0xcd));
    plain.record(&a);
    plain.record(&b);
    let om = m.render_openmetrics();
    let exemplars: Vec<&str> = om.lines().filter(|l| l.contains(" # {")).collect();
    // Both runs fell in the same TTFT bucket (0.5) and total bucket: the last one's id.
    assert_eq!(exemplars.len(), 2, "{om}");
    let id = "cd".repeat(16);
    assert!(
        exemplars[0].starts_with("inferprobe_e2e_latency_seconds_bucket{"),
        "{om}"
    );
    assert!(
        exemplars[1].starts_with("inferprobe_ttft_seconds_bucket{"),
        "{om}"
    );
    for line in &exemplars {
        assert!(line.contains(r#"{le="0.5","#), "{line}");
        assert!(
            line.contains(&format!(r#"}} 2 # {{trace_id="{id}"}} "#)),
            "{line}"
        );
        let (value, at) = line.rsplit_once(' ').unwrap();
        let value = value.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap();
        assert!(value > 0.25 && value <= 0.5, "{line}");
        let at: f64 = at.parse().unwrap();
        assert!((at - unix_seconds(b.started_at)).abs() < 0.001, "{line}");
    }
    // Without the exemplars, the lines are the library's own, byte for byte.
    let stripped: String = om
        .lines()
        .map(|l| l.split_once(" # {").map_or(l, |(head, _)| head))
        .fold(String::new(), |acc, l| acc + l + "\n");
    // The agent's own families keep their series in a hash map, whose order differs
    // between two registries: the lines are compared, not their order.
    let lines = |s: &str| {
        let mut v: Vec<String> = s.lines().map(str::to_owned).collect();
        v.sort();
        v
    };
    assert_eq!(lines(&stripped), lines(&plain.render_openmetrics()));
    // The text format 0.0.4 has none, and is the same as without traces.
    assert!(!m.render_text().contains("trace_id"));
    assert_eq!(lines(&m.render_text()), lines(&plain.render_text()));
}

#[test]
fn openmetrics_output_ends_with_eof() {
    let m = configured(&[probe(false)]);
    m.record(&outcome(None));
    assert!(m.render_openmetrics().trim_end().ends_with("# EOF"));
}

#[test]
fn every_series_has_our_prefix() {
    let m = configured(&[probe(false)]);
    m.record(&outcome(None));
    for line in m.render_text().lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("inferprobe_"), "{line}");
    }
}

fn decode(mut body: &[u8]) -> Vec<prometheus_protobuf::prometheus_data_model::MetricFamily> {
    let mut families = Vec::new();
    while !body.is_empty() {
        families.push(prost::Message::decode_length_delimited(&mut body).unwrap());
    }
    families
}

#[test]
fn ttft_and_total_go_out_native_in_protobuf_beside_their_classic_buckets() {
    let m = configured(&[probe(false)]);
    m.record(&outcome(None));
    let families = decode(&m.render_protobuf().unwrap());
    for name in ["inferprobe_ttft_seconds", "inferprobe_e2e_latency_seconds"] {
        let family = families.iter().find(|f| f.name == name).expect(name);
        let h = family.metric[0].histogram.as_ref().unwrap();
        assert_eq!(h.schema, i32::from(SLO_NATIVE_SCHEMA), "{name}");
        assert_eq!(h.sample_count, 1, "{name}");
        assert_eq!(h.positive_delta, [1], "{name}");
        assert_eq!(h.bucket.len(), SLO_BUCKETS.len() + 1, "{name}");
    }
    // The text formats have the classic buckets only, as before.
    let text = m.render_text();
    assert_eq!(
        text.matches("inferprobe_ttft_seconds_bucket{").count(),
        SLO_BUCKETS.len() + 1
    );
}

#[test]
fn no_latency_spread_grows_a_native_histogram_past_its_bucket_bound() {
    let m = configured(&[probe(false)]);
    // A microsecond to three hours, 400 steps of 5 %: ~440 buckets at schema 3.
    for i in 0..400 {
        let mut o = outcome(None);
        let start = o.observation.marks.start;
        o.observation.marks.end = Some(start + Duration::from_secs_f64(1e-6 * 1.05_f64.powi(i)));
        m.record(&o);
    }
    let families = decode(&m.render_protobuf().unwrap());
    let family = families
        .iter()
        .find(|f| f.name == "inferprobe_e2e_latency_seconds")
        .unwrap();
    let native = family.metric[0].histogram.as_ref().unwrap();
    let mut count = 0_i64;
    let populated = native
        .positive_delta
        .iter()
        .filter(|d| {
            count += **d;
            count > 0
        })
        .count();
    assert!(populated <= SLO_NATIVE_MAX_BUCKETS, "{populated} buckets");
    assert!(native.schema < i32::from(SLO_NATIVE_SCHEMA), "{}", native.schema);
    assert_eq!(native.sample_count, 400);
}

#[test]
fn a_large_protobuf_family_goes_out_in_bounded_messages_with_every_series() {
    let probes: Vec<_> = (0..1200)
        .map(|i| {
            Arc::new(ProbeIdentity {
                name: format!("p{i}").into(),
                ..(*probe(false)).clone()
            })
        })
        .collect();
    let m = configured(&probes);
    for p in &probes {
        let mut o = outcome(None);
        o.probe = p.clone();
        m.record(&o);
    }
    let families = decode(&m.render_protobuf().unwrap());
    let up: Vec<_> = families.iter().filter(|f| f.name == "inferprobe_up").collect();
    assert_eq!(up.len(), 3, "1,200 probes in messages of 500");
    assert!(up.iter().all(|f| f.metric.len() <= 500));
    assert_eq!(up.iter().map(|f| f.metric.len()).sum::<usize>(), 1200);
    let text = m.render_text();
    assert_eq!(text.matches("\ninferprobe_up{").count(), 1200);
}
