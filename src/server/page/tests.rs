use super::*;
use std::time::UNIX_EPOCH;

fn run(at: SystemTime, ok: bool, total_ms: u64) -> RunRecord {
    crate::store::sample("chat <b>", at, ok, total_ms)
}

/// The agent at `eu` (UTC), up `up_secs` at `now`, its history from the first of `runs`.
fn agent_in_eu(now: SystemTime, up_secs: u64, runs: &[RunRecord]) -> AgentView {
    AgentView {
        location: "eu".into(),
        started_at: now - Duration::from_secs(up_secs),
        history_since: Some(runs[0].at),
        now,
        time_zone: TimeZone::UTC,
    }
}

#[test]
fn cold_windows_are_marked_partial_and_text_is_escaped() {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let runs: Vec<RunRecord> = (0..20)
        .map(|i| run(now - Duration::from_secs(600 - i * 30), i != 7, 400 + i * 10))
        .collect();
    let view = ProbeView::new("chat <b>", &runs, None, Vec::new(), now);
    assert_eq!(view.state(), State::Up);
    assert_eq!(view.windows[0].0.runs, 20);
    assert_eq!(view.windows[0].0.availability, Some(0.95));
    let agent = agent_in_eu(now, 600, &runs);
    let html = index(&agent, std::slice::from_ref(&view));
    assert!(html.contains("Cold data"), "{html}");
    assert!(html.contains("class=partial"), "{html}");
    assert!(html.contains("95.00%"));
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains("chat &lt;b&gt;"));
    assert!(html.contains("/probes/chat%20%3Cb%3E"));
    assert!(html.contains("<svg"));
    assert!(html.contains("<path d=\"M"));
    // In HTML an unquoted value takes a following `/` into itself (`a=b/>` is
    // `a="b/"` and leaves the element open, hiding what follows): quote before `/>`.
    for (i, _) in html.match_indices("/>") {
        let before = html[..i].chars().last().unwrap();
        assert!(
            before == '"' || before == ' ',
            "unquoted value before `/>`: {}",
            &html[i.saturating_sub(40)..i + 2]
        );
    }
    assert_eq!(html.matches("<path").count(), 2, "TTFT and total lines");
    let page = probe_page(&agent, &view, &runs);
    assert_eq!(page.matches("<tr><td>").count(), 20);
    assert_eq!(
        page.matches("<td><code>4bf92f3577b34da6a3ce929d0e0e4736</code></td>")
            .count(),
        20,
        "each run's trace id"
    );
    assert_eq!(page.matches("<th scope=row>").count(), 3);
}

#[test]
fn a_young_history_claims_no_more_than_it_covers_and_fast_checks_are_not_0_ms() {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    // 13 s of fast good runs: no "No failure in 7 days", no "0 ms".
    let runs: Vec<RunRecord> = (0..4)
        .map(|i| {
            let mut r = run(now - Duration::from_secs(13 - i * 4), true, 0);
            r.total = Some(Duration::from_micros(400));
            r.ttft = None;
            r
        })
        .collect();
    let view = ProbeView::new("health", &runs, None, Vec::new(), now);
    let agent = agent_in_eu(now, 20, &runs);
    for html in [
        index(&agent, std::slice::from_ref(&view)),
        probe_page(&agent, &view, &runs),
    ] {
        assert!(!html.contains("No failure in 7 days"), "{html}");
        assert!(html.contains("No failure in the 13 s covered."), "{html}");
        assert!(!html.contains(">0 ms<"), "{html}");
        assert!(html.contains(">0.4 ms<"), "{html}");
    }
    // With a week of history, the week is claimed.
    let week = ProbeView::new("health", &runs, Some(now - WINDOWS[2].0), Vec::new(), now);
    let html = index(&agent, std::slice::from_ref(&week));
    assert!(html.contains("No failure in 7 days."), "{html}");
}

#[test]
fn times_are_shown_in_the_configured_zone_with_its_offset() {
    // 2026-12-01 20:18:05 UTC is 04:18:05 the next day in Shanghai.
    let now = UNIX_EPOCH + Duration::from_secs(1_796_156_285);
    let runs = vec![run(now - Duration::from_secs(60), false, 100)];
    let view = ProbeView::new("chat", &runs, None, Vec::new(), now);
    let agent = AgentView {
        location: "cn-east".into(),
        started_at: now - Duration::from_secs(600),
        history_since: Some(runs[0].at),
        now,
        time_zone: TimeZone::parse("Asia/Shanghai").unwrap(),
    };
    let html = index(&agent, std::slice::from_ref(&view));
    assert!(html.contains("as of 2026-12-02 04:18:05 +08:00"), "{html}");
    assert!(html.contains("title=\"2026-12-02 04:17:05 +08:00\""), "{html}");
    assert!(!html.contains("UTC"), "{html}");
    let page = probe_page(&agent, &view, &runs);
    assert!(page.contains("<th>started (Asia/Shanghai)</th>"), "{page}");
    assert!(page.contains("<tr><td>2026-12-02 04:17:05</td>"), "{page}");
}

#[test]
fn probes_that_differ_only_in_their_query_look_different() {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let agent = AgentView {
        location: "eu".into(),
        started_at: now,
        history_since: None,
        now,
        time_zone: TimeZone::UTC,
    };
    let views: Vec<ProbeView> = ["?model=a", "?model=b&key=<redacted>"]
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let mut v = ProbeView::new(&format!("p{i}"), &[], None, Vec::new(), now);
            v.endpoint = Some("https://h.example/v1/health".into());
            v.query = q.into();
            v
        })
        .collect();
    let html = index(&agent, &views);
    assert!(
        html.contains("https://h.example/v1/health?model=a</div>"),
        "{html}"
    );
    assert!(
        html.contains("https://h.example/v1/health?model=b&amp;key=&lt;redacted&gt;</div>"),
        "{html}"
    );
}

/// A model change within the chart's span is a dashed line with its words as the
/// tooltip, the server's summaries escaped; one before the span is not drawn.
#[test]
fn a_model_change_is_a_marker_on_the_chart_with_escaped_words() {
    use crate::store::Seen;
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let runs: Vec<RunRecord> = (0..40)
        .map(|i| run(now - Duration::from_secs(1200 - i * 30), true, 400))
        .collect();
    let mut view = ProbeView::new("chat", &runs, None, Vec::new(), now);
    let change = |ago: u64, before: &str, after: &str| ModelChange {
        probe: "chat".into(),
        location: "eu".into(),
        at: now - Duration::from_secs(ago),
        before: Some(Seen {
            digest: "a".into(),
            summary: before.into(),
        }),
        after: Seen {
            digest: "b".into(),
            summary: after.into(),
        },
    };
    view.model_changes = vec![
        change(86_400, "old", "older"),
        change(300, "tiny-llama", "<script>alert(1)</script> & \"v2\""),
    ];
    let agent = agent_in_eu(now, 1200, &runs);
    for html in [
        index(&agent, std::slice::from_ref(&view)),
        probe_page(&agent, &view, &runs),
    ] {
        assert_eq!(html.matches("<g class=model-change>").count(), 1, "{html}");
        assert!(
            html.contains(
                "<title>model changed: tiny-llama → &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;v2&quot; (2027-01-15 07:55:00 UTC)</title>"
            ),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("older"), "before the chart's span: {html}");
        assert!(
            html.contains("┆ model changed</span>"),
            "the legend says what the line is"
        );
    }
    // 5 minutes before now on a 20-minute chart: three quarters of the way across.
    let card = index(&agent, std::slice::from_ref(&view));
    assert!(card.contains("x1=\"270.0\""), "{card}");
    view.model_changes.clear();
    let quiet = index(&agent, std::slice::from_ref(&view));
    assert!(
        !quiet.contains("model-change") && !quiet.contains("model changed"),
        "{quiet}"
    );
}

/// A cold probe's cold starts are marks of their own (hollow circles with their figures
/// as the tooltip), out of the P95 lines and their scale; a warm-up is a shaded band
/// whose tooltip gives the server's words escaped; a burst's last figures and each run's
/// idle time and tags are shown.
#[test]
fn cold_starts_warmups_and_bursts_are_drawn_apart_and_escaped() {
    use crate::outcome::Warmup;
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let restart = now - Duration::from_secs(300);
    let runs: Vec<RunRecord> = (0..40u64)
        .map(|i| {
            let mut r = run(now - Duration::from_secs(1200 - i * 30), i != 33, 400);
            if i % 10 == 5 {
                r.cold = true;
                r.idle = Some(Duration::from_secs(400));
                r.ttft = r.ttft.map(|_| Duration::from_secs(40));
                r.total = Some(Duration::from_secs(45));
            }
            // Three runs after the restart fell in its warm-up, the failed one among them.
            if (31..34).contains(&i) {
                r.warmup = Some(Warmup {
                    since: restart,
                    cause: "the served model changed to <script>x</script> & \"v2\"".into(),
                });
            }
            if i == 38 {
                r.burst_spread = Some(0.6389);
                r.burst_slowdown = Some(7.0);
            }
            r
        })
        .collect();
    let view = ProbeView::new("chat", &runs, None, Vec::new(), now);
    let agent = agent_in_eu(now, 1200, &runs);
    let card = index(&agent, std::slice::from_ref(&view));
    let page = probe_page(&agent, &view, &runs);
    for html in [&card, &page] {
        assert_eq!(html.matches("<g class=cold-run>").count(), 4, "{html}");
        assert!(
            html.contains("<title>cold start at 2027-01-15 07:42:30 UTC: TTFT 40.00 s, total 45.00 s, after 6 min idle</title>"),
            "{html}"
        );
        assert!(
            html.contains("○ cold start</span> (▲ over the scale)"),
            "the legend: {html}"
        );
        // The lines' scale is the warm runs' (TTFT 200 ms, total 400 ms): the marks of
        // 40 s are triangles on its top edge.
        assert_eq!(html.matches("<path d=\"M").count(), 2 + 4, "{html}");
        assert!(html.contains(">400 ms</text>"), "{html}");
        assert!(!html.contains(">45.00 s</text>"), "{html}");
        assert_eq!(html.matches("<g class=warmup>").count(), 1, "{html}");
        assert!(
            html.contains(
                "<title>warm-up after a restart at 2027-01-15 07:55:00 UTC: the served model changed to \
                 &lt;script&gt;x&lt;/script&gt; &amp; &quot;v2&quot; (3 runs, 1 failed)</title>"
            ),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(
            html.contains(
                "<th scope=row>P95 cold start</th><td class=partial title=\"4 cold runs\">40.00 s</td>"
            ),
            "{html}"
        );
        assert!(
            html.contains("Last burst 1 min ago: spread 0.64 (standard deviation over mean), 7.0× the time of one request alone"),
            "{html}"
        );
        for (i, _) in html.match_indices("/>") {
            let before = html[..i].chars().last().unwrap();
            assert!(
                before == '"' || before == ' ',
                "{}",
                &html[i.saturating_sub(40)..i + 2]
            );
        }
    }
    // The band runs from the restart (5 of 20 minutes before now: x 600 of 800) to the
    // end of its last run.
    assert!(page.contains("<rect x=\"600.0\" y=0 width=\""), "{page}");
    // The run table: idle time, and the tags.
    assert!(page.contains("<th>idle before</th>"), "{page}");
    assert!(
        page.contains("<td>6 min <span class=\"tag cold\">cold</span></td>"),
        "{page}"
    );
    assert_eq!(
        page.matches("<span class=\"tag warmup\" title=").count(),
        3,
        "{page}"
    );
    assert!(
        page.contains("<td>30.00 s</td>"),
        "a warm run's idle time: {page}"
    );
    // A probe without any: none of it.
    let plain: Vec<RunRecord> = runs
        .iter()
        .map(|r| RunRecord {
            cold: false,
            warmup: None,
            burst_spread: None,
            burst_slowdown: None,
            ..r.clone()
        })
        .collect();
    let quiet = index(&agent, &[ProbeView::new("chat", &plain, None, Vec::new(), now)]);
    for absent in ["cold-run", "class=warmup", "cold start", "Last burst"] {
        assert!(!quiet.contains(absent), "{absent}: {quiet}");
    }
}

/// A probe whose every run is a cold start still has a chart: scaled to its marks.
#[test]
fn a_chart_of_cold_starts_only_is_scaled_to_them() {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let runs: Vec<RunRecord> = (0..3u64)
        .map(|i| {
            let mut r = run(now - Duration::from_secs(1800 - i * 600), true, 30_000);
            r.cold = true;
            r
        })
        .collect();
    let view = ProbeView::new("cold", &runs, None, Vec::new(), now);
    assert!(view.chart.iter().all(|b| b.ttft_p95.is_none()));
    let agent = agent_in_eu(now, 1800, &runs);
    let html = index(&agent, &[view]);
    assert_eq!(html.matches("<g class=cold-run>").count(), 3, "{html}");
    assert!(html.contains(">15.00 s</text>"), "the scale: {html}");
    assert!(!html.contains("no successful runs"), "{html}");
    // The TTFT of 15 s is the top of the plot (y 4 of a 52-high plot).
    assert!(html.contains("cy=\"4.0\""), "{html}");
}
