//! The history's own tests: round trips, paging, retention and the disk bound.

use super::*;
use crate::store::AlertStore;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("inferprobe-history-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn all(q: &RunQuery, reader: &HistoryReader) -> Vec<RunRecord> {
    let mut out = Vec::new();
    reader.for_each_series(q, |runs| out.extend(runs)).unwrap();
    out
}

#[test]
fn runs_round_trip_and_page_in_start_order() {
    let dir = temp_dir("pages");
    let store = AlertStore::open(&dir).unwrap();
    let writer = HistoryWriter::start(store.path(), HistoryConfig::default()).unwrap();
    let now = SystemTime::now();
    let t0 = now - Duration::from_secs(3600);
    let mut written = Vec::new();
    for i in 0..250u64 {
        let probe = if i % 2 == 0 { "a" } else { "b" };
        let r = sample(probe, t0 + Duration::from_secs(i * 10), i % 7 != 0, 100 + i);
        assert!(writer.record(r.clone()));
        written.push(r);
    }
    writer.flush();
    let reader = HistoryReader::open(store.path()).unwrap();
    let q = RunQuery {
        probe: None,
        location: None,
        since: t0,
        until: now,
    };
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = reader.results(&q, cursor, 100).unwrap();
        assert!(page.runs.len() <= 100);
        seen.extend(page.runs);
        match page.next {
            Some(c) => cursor = Some(Cursor::decode(&c.encode()).unwrap()),
            None => break,
        }
    }
    // Stored at millisecond resolution.
    let ms = |r: &RunRecord| unix_ms_i64(r.at);
    assert_eq!(seen.len(), 250);
    for (got, want) in seen.iter().zip(&written) {
        assert_eq!(ms(got), ms(want));
        assert_eq!(
            (&got.probe, &got.reason, got.total, got.ttfb),
            (&want.probe, &want.reason, want.total, want.ttfb)
        );
    }
    let only_a = RunQuery {
        probe: Some("a".into()),
        ..q.clone()
    };
    assert_eq!(reader.results(&only_a, None, 1000).unwrap().runs.len(), 125);
    let window = RunQuery {
        since: t0 + Duration::from_secs(100),
        until: t0 + Duration::from_secs(200),
        ..q.clone()
    };
    assert_eq!(reader.results(&window, None, 1000).unwrap().runs.len(), 10);
    let series = std::cell::RefCell::new(Vec::new());
    reader
        .for_each_series(&q, |runs| {
            series.borrow_mut().push((runs[0].probe.to_string(), runs.len()))
        })
        .unwrap();
    assert_eq!(
        series.into_inner(),
        [("a".to_owned(), 125), ("b".to_owned(), 125)]
    );
    let recent = reader.recent("b", "eu", 3).unwrap();
    assert_eq!(recent.len(), 3);
    assert!(recent[0].at > recent[1].at);
    writer.close();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn old_runs_expire() {
    let dir = temp_dir("retention");
    let store = AlertStore::open(&dir).unwrap();
    let limits = HistoryConfig {
        retention: Duration::from_secs(3600),
        ..HistoryConfig::default()
    };
    let writer = HistoryWriter::start_with(store.path(), limits, Duration::from_millis(20)).unwrap();
    let now = SystemTime::now();
    for i in 0..100u64 {
        // Half older than an hour, half newer.
        writer.record(sample(
            "a",
            now - Duration::from_secs(7200) + Duration::from_secs(i * 72),
            true,
            100,
        ));
    }
    writer.flush();
    std::thread::sleep(Duration::from_millis(200));
    let reader = HistoryReader::open(store.path()).unwrap();
    let q = RunQuery {
        probe: None,
        location: None,
        since: SystemTime::UNIX_EPOCH,
        until: now + Duration::from_secs(60),
    };
    let left = all(&q, &reader);
    assert!((49..=51).contains(&left.len()), "{} left", left.len());
    assert!(
        left.iter()
            .all(|r| r.at >= now - Duration::from_secs(3600) - Duration::from_secs(72))
    );
    assert!(writer.stats().expired.load(Ordering::Relaxed) >= 49);
    writer.close();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn disk_use_stays_bounded_under_a_flood() {
    let dir = temp_dir("flood");
    let store = AlertStore::open(&dir).unwrap();
    let limits = HistoryConfig {
        retention: Duration::from_secs(30 * 86_400),
        max_disk_bytes: 16 << 20,
    };
    let writer = HistoryWriter::start_with(store.path(), limits, Duration::from_millis(50)).unwrap();
    let now = SystemTime::now();
    let mut peak = 0;
    // ~400,000 runs is about three times what fits in 16 MiB.
    for i in 0..400_000u64 {
        let probe = format!("probe-{}", i % 500);
        let r = sample(
            &probe,
            now - Duration::from_secs(400_000 - i),
            i % 10 != 0,
            100 + i % 900,
        );
        while !writer.record(r.clone()) {
            // The queue is full: let the writer catch up (a real agent drops instead).
            std::thread::sleep(Duration::from_millis(1));
        }
        if i % 50_000 == 0 {
            peak = peak.max(disk_bytes(store.path()));
        }
    }
    writer.flush();
    std::thread::sleep(Duration::from_millis(300));
    writer.flush();
    peak = peak.max(disk_bytes(store.path()));
    let db_file = std::fs::metadata(store.path()).unwrap().len();
    eprintln!("flood: peak {peak} bytes on disk (db+wal), db file {db_file}");
    // The database itself stays near its bound (a check's worth of rows over at most);
    // the WAL is capped by journal_size_limit after each checkpoint.
    assert!(db_file < (16 << 20) * 5 / 4, "db file {db_file}");
    assert!(peak < (16 << 20) * 5 / 4 + (32 << 20) + (8 << 20), "peak {peak}");
    let reader = HistoryReader::open(store.path()).unwrap();
    let q = RunQuery {
        probe: None,
        location: None,
        since: SystemTime::UNIX_EPOCH,
        until: now + Duration::from_secs(60),
    };
    let page = reader.results(&q, None, 1).unwrap();
    // The oldest runs went first: what is left is the newest.
    let oldest = page.runs[0].at;
    assert!(
        oldest > now - Duration::from_secs(300_000),
        "oldest kept run is too old"
    );
    let newest = reader.recent("probe-499", "eu", 1).unwrap();
    assert_eq!(
        unix_ms_i64(newest[0].at),
        unix_ms_i64(now - Duration::from_secs(1))
    );
    writer.close();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_queue_refuses_runs_and_counts_them_without_blocking() {
    let dir = temp_dir("full");
    let store = AlertStore::open(&dir).unwrap();
    // Another connection holds the write lock: the writer's first commit waits for it
    // (up to its busy timeout), so runs pile up in the queue meanwhile.
    let blocker = Connection::open(store.path()).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let writer = HistoryWriter::start(store.path(), HistoryConfig::default()).unwrap();
    let t0 = SystemTime::now() - Duration::from_secs(60);
    // The writer takes at most one batch off the queue before it is stuck.
    let sent = QUEUE + BATCH + 500;
    let refused = (0..sent)
        .filter(|i| !writer.record(sample("a", t0 + Duration::from_millis(*i as u64), true, 100)))
        .count();
    assert!(refused >= 500, "refused {refused} of {sent}");
    assert!(
        refused <= sent - QUEUE,
        "refused {refused}: the queue holds {QUEUE}"
    );
    assert!(writer.stats().dropped.load(Ordering::Relaxed) >= refused as u64);
    blocker.execute_batch("ROLLBACK").unwrap();
    writer.flush();
    // Once the lock is gone, new runs are taken again.
    assert!(writer.record(sample("a", SystemTime::now(), true, 100)));
    writer.flush();
    assert!(writer.stats().written.load(Ordering::Relaxed) >= 1);
}

/// What a run met at its endpoint comes back as it was written (idle and wait at ms
/// resolution) and reaches the API's JSON; a plain run has no warm-up and no burst.
#[test]
fn what_a_run_met_round_trips_to_the_api() {
    use crate::outcome::Warmup;
    let dir = temp_dir("conditions");
    let store = AlertStore::open(&dir).unwrap();
    let writer = HistoryWriter::start(store.path(), HistoryConfig::default()).unwrap();
    let t0 = SystemTime::now() - Duration::from_secs(600);
    let restart = t0 - Duration::from_secs(90);
    let mut cold = sample("chat", t0, true, 40_000);
    cold.idle = Some(Duration::from_micros(372_500_900));
    cold.waited = Some(Duration::from_millis(1_250));
    cold.cold = true;
    cold.warmup = Some(Warmup {
        since: restart,
        cause: "the served model changed to <b>x</b>".into(),
    });
    cold.burst_spread = Some(0.6389);
    cold.burst_slowdown = Some(7.0);
    let warm = sample("chat", t0 + Duration::from_secs(60), true, 400);
    writer.record(cold.clone());
    writer.record(warm.clone());
    writer.flush();
    let reader = HistoryReader::open(store.path()).unwrap();
    let q = RunQuery {
        probe: None,
        location: None,
        since: t0 - Duration::from_secs(1),
        until: SystemTime::now(),
    };
    let got = reader.results(&q, None, 10).unwrap().runs;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].idle, Some(Duration::from_millis(372_500)));
    assert_eq!(got[0].waited, Some(Duration::from_millis(1_250)));
    assert!(got[0].cold);
    let w = got[0].warmup.as_ref().unwrap();
    assert_eq!(unix_ms_i64(w.since), unix_ms_i64(restart));
    assert_eq!(w.cause, "the served model changed to <b>x</b>");
    assert_eq!(
        (got[0].burst_spread, got[0].burst_slowdown),
        (Some(0.6389), Some(7.0))
    );
    let json = got[0].to_json();
    assert_eq!(json["idle_seconds"], 372.5);
    assert_eq!(json["waited_seconds"], 1.25);
    assert_eq!(json["start"], "cold");
    assert_eq!(
        json["warmup_since"],
        humantime::format_rfc3339_millis(restart).to_string()
    );
    assert_eq!(json["warmup_cause"], "the served model changed to <b>x</b>");
    assert_eq!(json["burst_spread"], 0.6389);
    assert_eq!(json["burst_slowdown"], 7.0);
    let plain = got[1].to_json();
    assert_eq!(plain["start"], "warm");
    assert_eq!(plain["idle_seconds"], 30.0);
    for key in ["warmup_since", "warmup_cause", "burst_spread", "burst_slowdown"] {
        assert!(plain[key].is_null(), "{key}: {plain}");
    }
    writer.close();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `report` reads an old agent's store as it is (read-only: no column added): its runs
/// say nothing of idle time or start, rather than "warm after 0 s".
#[test]
fn an_old_store_read_as_it_is_says_nothing_of_what_its_runs_met() {
    let dir = temp_dir("old-store");
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("old.db");
    Connection::open(&db)
        .unwrap()
        .execute_batch(migrate::FIRST_RUNS)
        .unwrap();
    let reader = HistoryReader::open(&db).unwrap();
    let q = RunQuery {
        probe: None,
        location: None,
        since: SystemTime::UNIX_EPOCH,
        until: SystemTime::now(),
    };
    let runs = reader.results(&q, None, 10).unwrap().runs;
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!((r.idle, r.waited, r.cold, &r.warmup), (None, None, false, &None));
    assert_eq!(r.start(), None);
    let json = r.to_json();
    assert!(
        json["start"].is_null() && json["idle_seconds"].is_null(),
        "{json}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
