//! The report's unit tests: every output of one built report, and its verdicts,
//! coverage and charts.

use super::*;
use std::time::UNIX_EPOCH;

fn report() -> Report {
    let s = |runs, failures, p95: f64| Summary {
        runs,
        failures,
        availability: Some((runs - failures) as f64 / runs as f64),
        ttft: Quantiles {
            p50: Some(p95 / 3.0),
            p95: Some(p95 / 2.0),
            p99: Some(p95 / 1.5),
        },
        total: Quantiles {
            p50: Some(p95 / 2.0),
            p95: Some(p95),
            p99: Some(p95 * 1.2),
        },
        ttft_attainment: Some(0.97),
        total_attainment: Some(0.9),
    };
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    Report {
        since: t0,
        until: t0 + Duration::from_secs(7 * 86_400),
        source: "test".into(),
        exact: true,
        rows: vec![Row {
            probe: "chat|api".into(),
            location: "eu".into(),
            targets: Targets {
                ttft: Some(Duration::from_millis(500)),
                total: None,
                availability: Some(0.999),
            },
            current: s(20_160, 40, 2.0),
            previous: s(20_160, 10, 1.6),
            tokens: [
                TokenTotals {
                    input: 1_000_000,
                    input_estimated: 200_000,
                    output: 500_000,
                },
                TokenTotals {
                    input: 800_000,
                    input_estimated: 0,
                    output: 400_000,
                },
            ],
            cost: Some(Cost {
                input_per_million: 0.15,
                output_per_million: 0.60,
                currency: "USD".into(),
            }),
            starts: Default::default(),
        }],
        incidents: vec![Incident {
            probe: "chat|api".into(),
            location: "eu".into(),
            started: t0 + Duration::from_secs(3600),
            ended: Some(t0 + Duration::from_secs(3600 + 1200)),
            duration: Duration::from_secs(1200),
            failed_runs: 40,
            reasons: vec![("http_5xx".into(), 38), ("timeout_total".into(), 2)],
        }],
        bucket: Duration::from_secs(86_400),
        trends: vec![Trend {
            probe: "chat|api".into(),
            periods: [0.998, 0.9995].map(|a| {
                (0..7)
                    .map(|day| Point {
                        runs: 2880,
                        failures: ((1.0 - a) * 2880.0) as u64 + day,
                        ttft_p95: Some(0.4 + 0.01 * day as f64),
                        total_p95: (day != 3).then_some(1.5),
                    })
                    .collect()
            }),
        }],
        data_from: Some(t0 - Duration::from_secs(7 * 86_400)),
        time_zone: TimeZone::UTC,
        model_changes: Vec::new(),
        probe_p95s: vec![ProbeP95 {
            probe: "chat|api".into(),
            ttft: [Some(0.48616), Some(0.412)],
            total: [Some(2.0), None],
        }],
    }
}

#[test]
fn markdown_has_every_section_and_escapes_pipes() {
    let md = report().to_markdown();
    for needle in [
        "# SLO report, 2027-01-15 08:00:00 to 2027-01-22 08:00:00 UTC (7 d)",
        "## Availability",
        "| chat\\|api | eu | 20160 | 40 | 99.80% | 99.95% | -0.15 pp | 99.90% | NO |",
        "## Time to first token",
        "| chat\\|api | eu | 667 ms | 1.00 s | 1.33 s | 800 ms | +25% |",
        "## SLO attainment",
        "| chat\\|api | eu | 500 ms | 97.00% | 97.00% | – | 90.00% | 90.00% |",
        "## Tokens and cost",
        // 1 M input at 0.15 and 0.5 M output at 0.60 per million; before, 0.8 M and
        // 0.4 M. The estimated part of the input is said.
        "| chat\\|api | eu | \\~1000000 (200000 estimated) | 500000 | 0.4500 USD | 0.3600 USD | +25% |",
        "## Top incidents",
        "| 1 | chat\\|api | eu | 2027-01-15 09:00:00 | 20 min | 40 | http_5xx ×38, timeout_total ×2 |",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in\n{md}");
    }
    // Every table row has as many cells as its header.
    for block in md.split("\n\n").filter(|b| b.starts_with('|')) {
        let widths: Vec<usize> = block
            .lines()
            .map(|l| l.replace("\\|", "").matches('|').count())
            .collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{block}");
    }
}

#[test]
fn json_carries_the_documented_fields() {
    let j = report().to_json();
    let p = &j["probes"][0];
    assert_eq!(p["probe"], "chat|api");
    assert_eq!(p["location"], "eu");
    assert_eq!(p["runs"], 20_160);
    assert_eq!(p["total_seconds"]["p95"], 2.0);
    assert_eq!(p["ttft_seconds"]["p99"].as_f64().unwrap(), 2.0 / 1.5);
    assert_eq!(p["availability_met"], false);
    assert_eq!(p["previous"]["failures"], 10);
    assert_eq!(j["incidents"][0]["duration_seconds"], 1200.0);
    assert_eq!(p["tokens"]["input"], 1_000_000);
    assert_eq!(p["tokens"]["input_estimated"], 200_000);
    assert_eq!(p["previous"]["tokens"]["output"], 400_000);
    assert!((p["cost"]["amount"].as_f64().unwrap() - 0.45).abs() < 1e-12);
    assert_eq!(p["cost"]["currency"], "USD");
    assert!((p["previous"]["cost"].as_f64().unwrap() - 0.36).abs() < 1e-12);
}

/// Names from label values are text in both documents, never markup.
#[test]
fn hostile_names_stay_text_in_markdown_and_html() {
    let mut r = report();
    let hostile = "x](https://evil.example) ![t](https://evil.example/p.png) <img src=x onerror=alert(1)> *b* _i_ `c` ~~s~~ &amp; \\| a\nb\r| c |";
    r.rows[0].probe = hostile.into();
    r.trends[0].probe = hostile.into();
    r.probe_p95s[0].probe = hostile.into();
    r.incidents[0].location = hostile.into();
    let md = r.to_markdown();
    // The verdict line: one list item, the name as text.
    assert!(
        md.contains("\n- ❌ x\\](https://evil.example) \\!\\[t\\]"),
        "{md}"
    );
    for raw in [
        "x](", " ![", " <img", " *b*", " _i_", " `c`", "~~s", " &amp;", "\nb", "\r",
    ] {
        assert!(!md.contains(raw), "{raw:?} in\n{md}");
    }
    assert!(md.contains("x\\](https://evil.example) \\!\\[t\\]"), "{md}");
    // Still one row per line, as many cells as the header.
    for block in md.split("\n\n").filter(|b| b.starts_with('|')) {
        let widths: Vec<usize> = block
            .lines()
            .map(|l| l.replace("\\\\", "").replace("\\|", "").matches('|').count())
            .collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{block}");
    }
    let html = r.to_html();
    assert!(!html.contains("<img") && html.contains("&lt;img src=x"), "{html}");
    // In attributes too (the verdict's, its P95 lines' and the chart section's
    // data-probe).
    assert_eq!(
        html.matches("data-probe=\"x](https://evil.example) ![t](https://evil.example/p.png) &lt;img")
            .count(),
        3,
        "{html}"
    );
}

#[test]
fn html_is_escaped() {
    let mut r = report();
    r.rows[0].probe = "<b>".into();
    let html = r.to_html();
    assert!(html.contains("&lt;b&gt;") && !html.contains("<td class=t><b>"));
}

#[test]
fn every_output_carries_the_verdict_budget_and_coverage() {
    let mut r = report();
    // 40 failures of the 20.16 the 99.9 % objective allows: overspent.
    let md = r.to_markdown();
    let line = "chat\\|api: SLO NOT MET in 1 of 1 location: availability 99.80% against 99.90% in eu; \
                P95 TTFT 1.00 s against 500 ms in eu. Availability 99.80% (objective 99.90%), error budget left: none (2.0× spent).";
    assert!(md.contains(&format!("## Verdict\n\n- ❌ {line}\n")), "{md}");
    assert!(!md.contains("Coverage"), "a week of data over a week: {md}");
    let j = r.to_json();
    assert_eq!(j["verdicts"][0]["verdict"], "not_met");
    assert_eq!(j["verdicts"][0]["missed"][0]["objective"], "availability");
    assert_eq!(j["verdicts"][0]["missed"][1]["objective"], "ttft_p95");
    assert!((j["verdicts"][0]["error_budget_left"].as_f64().unwrap() + 0.984_126).abs() < 1e-5);
    assert_eq!(j["probes"][0]["slo_met"], false);
    assert_eq!(j["coverage"]["partial"], false);
    assert_eq!(j["time_zone"], "UTC");
    assert_eq!(j["trends"]["bucket_seconds"], 86_400.0);
    let days = j["trends"]["probes"][0]["current"].as_array().unwrap();
    assert_eq!(days.len(), 7);
    assert_eq!(days[1]["start"], "2027-01-16T08:00:00Z");
    assert_eq!(days[3]["total_p95_seconds"], serde_json::Value::Null);

    // Fifteen minutes of runs in a week's report, none before: said at the top.
    r.data_from = Some(r.until - Duration::from_secs(900));
    let note = r.coverage_note().unwrap();
    assert_eq!(
        note,
        "The data covers only the last 15 min of this 7 d period (runs from 2027-01-22 07:45 UTC): \
         every figure is for that part. The previous period has no data: nothing is compared."
    );
    assert!(r.to_markdown().contains(&format!("> **Coverage:** {note}")));
    let j = r.to_json();
    assert_eq!(j["coverage"]["partial"], true);
    assert_eq!(j["coverage"]["covered_seconds"], 900.0);
    assert_eq!(j["coverage"]["previous_covered_seconds"], 0.0);
    // Data from the middle of the previous period: this one is whole, that one half.
    r.data_from = Some(r.since - Duration::from_secs(302_400));
    assert_eq!(
        r.coverage_note().as_deref(),
        Some("The previous period's data covers only its last 3 d 12 h.")
    );
}

/// Under each verdict, how the probe's P95s moved across its locations: TTFT here (total
/// has no previous P95, so it says nothing), the same words in every output.
#[test]
fn every_output_says_how_each_probe_p95_moved_under_its_verdict() {
    let mut r = report();
    let moved = "TTFT P95 up 18% on last week (412 ms → 486 ms)";
    let md = r.to_markdown();
    assert!(
        md.contains(&format!("error budget left: none (2.0× spent).\n  - {moved}\n\n")),
        "{md}"
    );
    let html = r.to_html();
    assert!(
        html.contains(&format!(
            "</p><ul class=moved data-probe=\"chat|api\"><li class=up data-figure=ttft>{moved}</li></ul>"
        )),
        "{html}"
    );
    let j = r.to_json();
    let changes = j["p95_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{j:#}");
    assert_eq!(changes[0]["probe"], "chat|api");
    assert_eq!(changes[0]["figure"], "ttft");
    assert_eq!(changes[0]["previous_seconds"], 0.412);
    assert_eq!(changes[0]["current_seconds"], 0.48616);
    assert!((changes[0]["change"].as_f64().unwrap() - 0.18).abs() < 1e-12);
    assert_eq!(changes[0]["line"], moved);

    // Not a week: compared with the previous period, by that name.
    r.until = r.since + Duration::from_secs(3 * 86_400);
    assert_eq!(
        r.p95_changes()[0].line(),
        "TTFT P95 up 18% on the previous period (412 ms → 486 ms)"
    );
    // Nothing to compare: no line, in any output.
    r.probe_p95s[0].ttft[1] = None;
    assert!(r.p95_changes().is_empty());
    assert!(!r.to_markdown().contains("  - "));
    assert!(!r.to_html().contains("class=moved"));
    assert_eq!(r.to_json()["p95_changes"], serde_json::json!([]));
}

#[test]
fn html_shows_verdicts_coloured_and_worded_and_both_periods_charted() {
    let r = report().with_time_zone(TimeZone::parse("Asia/Shanghai").unwrap());
    let html = r.to_html();
    assert!(
        html.contains(
            "<p class=\"verdict not_met\" data-probe=\"chat|api\"><span class=mark>✗ SLO NOT MET</span>"
        ),
        "{html}"
    );
    assert!(
        html.contains(".verdict.not_met{border-color:#cf222e"),
        "the colour is set"
    );
    // Three charts (availability, P95 TTFT, P95 total), each with both periods.
    assert_eq!(html.matches("<svg class=chart").count(), 3, "{html}");
    for chart in ["availability", "ttft_p95", "total_p95"] {
        let svg = html.split(&format!("data-chart=\"{chart}\"")).nth(1).unwrap();
        let svg = &svg[..svg.find("</svg>").unwrap()];
        assert!(svg.contains("<path class=\"current\""), "{chart}: {svg}");
        assert!(svg.contains("<path class=\"previous\""), "{chart}: {svg}");
    }
    // Every day of this period misses 99.9 %: hollow red points, worded in the tooltip.
    assert_eq!(html.matches("class=\"current miss\"").count(), 7, "{html}");
    assert!(html.contains("(misses the objective)"));
    // Times in the zone asked for, named with their offset.
    assert!(
        html.contains(
            "SLO report, 2027-01-15 16:00:00 to 2027-01-22 16:00:00 Asia/Shanghai (UTC+08:00) (7 d)"
        ),
        "{html}"
    );
    assert!(
        html.contains("<th class=t>started (Asia/Shanghai)</th>"),
        "{html}"
    );
    assert!(html.contains("<td class=t>2027-01-15 17:00:00</td>"), "{html}");
    assert!(html.contains("<td class=not_met>NO</td>"), "{html}");
    assert!(
        !html.contains("<script") && !html.contains("src=") && !html.contains("href="),
        "self-contained"
    );
}
