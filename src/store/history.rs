//! Run history: one row per finished run, in the same SQLite file as the alert state.
//!
//! Writing never delays a run: the fan-out hands each record to a bounded channel
//! ([`HistoryWriter::record`] never blocks; a full channel drops and counts) and one
//! writer thread commits what arrives within half a second in one transaction (group
//! commit), so a finished run reaches the disk within about half a second and a `kill -9`
//! loses at most the runs of that window. The same thread enforces the bounds every second: rows older
//! than the retention go, then the oldest rows until the live pages fit `max_disk_bytes`
//! (freed pages are reused, so the file stops growing there).
//!
//! Readers ([`HistoryReader`]) open their own read-only connection: WAL lets them read
//! while the agent writes, and `inferprobe report` reads a running agent's store.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, params, params_from_iter};

use super::StoreError;
use crate::config::HistoryConfig;
use crate::outcome::{TokenSource, Warmup};
use crate::unix_time::{from_unix_ms_i64, unix_ms_i64};

/// Runs queued for the writer at most (about 400 bytes each, what a run met included).
const QUEUE: usize = 16_384;
/// The writer's page cache, as SQLite's `cache_size` takes it: negative is KiB.
const WRITER_CACHE_KIB: i64 = -512;
/// How long the writer gathers runs before committing them together.
/// A `kill -9` loses at most this much of finished runs. Each transaction costs ~200 us
/// of CPU whatever it holds (`cargo bench --bench history`): at 100 runs/s a 50 ms
/// window spread it over 5 runs (the writer was 15 % of the agent's CPU), half a second
/// over 50. Readers (status page, report, API) look at minutes to weeks.
const COMMIT_WINDOW: Duration = Duration::from_millis(500);
/// Rows written per transaction at most.
const BATCH: usize = 2_048;
/// Rows deleted per statement, so a clean-up never holds the write lock for long.
const DELETE_CHUNK: i64 = 5_000;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS series (
    id       INTEGER PRIMARY KEY,
    probe    TEXT NOT NULL,
    location TEXT NOT NULL,
    UNIQUE (probe, location)
);
CREATE TABLE IF NOT EXISTS runs (
    id            INTEGER PRIMARY KEY,
    series        INTEGER NOT NULL,
    at_ms         INTEGER NOT NULL,
    reason        TEXT,
    message       TEXT,
    status        INTEGER,
    ttfb_us       INTEGER,
    ttft_us       INTEGER,
    tpot_us       INTEGER,
    total_us      INTEGER,
    tokens        INTEGER,
    prompt_bucket TEXT NOT NULL,
    image_bucket  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_series ON runs (series, at_ms);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (at_ms);
";

enum Message {
    /// Boxed: the writer gathers up to a batch (2,048) of messages before it commits,
    /// in a list kept for reuse; inline, a flood would leave that list at 0.5 MB.
    Run(Box<RunRecord>),
    /// Acknowledged once everything queued before it is committed.
    Flush(SyncSender<()>),
}

/// Counters the writer keeps, for metrics and the status page.
#[derive(Debug, Default)]
pub struct HistoryStats {
    pub written: AtomicU64,
    /// Runs not kept: the queue was full or a write failed.
    pub dropped: AtomicU64,
    /// Rows removed by retention or the disk bound.
    pub expired: AtomicU64,
    /// The database file and its WAL, as of the last check.
    pub disk_bytes: AtomicU64,
}

/// The history's writing end: a bounded queue and the thread that drains it.
///
/// The bound is counted here, not by the channel: std's bounded channel allocates and
/// touches all its slots up front (16,384 even boxed were 0.4 MB resident for one idle
/// probe), where the unbounded one takes blocks of 31 as messages come.
pub struct HistoryWriter {
    tx: Option<Sender<Message>>,
    /// Runs sent and not yet taken by the writer.
    queued: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
    stats: Arc<HistoryStats>,
    limits: Arc<Mutex<HistoryConfig>>,
}

impl std::fmt::Debug for HistoryWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryWriter").finish_non_exhaustive()
    }
}

impl HistoryWriter {
    /// Starts the writer on the store at `db` (created by `AlertStore::open`).
    pub fn start(db: &Path, limits: HistoryConfig) -> Result<HistoryWriter, StoreError> {
        Self::start_with(db, limits, Duration::from_secs(1))
    }

    /// As [`start`](Self::start), checking the bounds every `maintain_every`.
    pub fn start_with(
        db: &Path,
        limits: HistoryConfig,
        maintain_every: Duration,
    ) -> Result<HistoryWriter, StoreError> {
        let conn = open(db, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        // The writer appends at the right edge of each b-tree and deletes at the left: a
        // few dozen pages are hot. SQLite's default page cache (2 MiB) filled with pages
        // written once, 1.5-2 MB of the agent's resident memory at 10,000 probes
        // (heaptrack, issue 15); evicted pages are re-read from the OS's cache.
        conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)
            .map_err(|source| StoreError::Open {
                path: db.to_owned(),
                source,
            })?;
        let (tx, rx) = channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let stats = Arc::new(HistoryStats::default());
        let limits = Arc::new(Mutex::new(limits));
        let mut writer = Writer {
            conn,
            db: db.to_owned(),
            limits: limits.clone(),
            stats: stats.clone(),
            queued: queued.clone(),
            series: HashMap::new(),
            last_error_log: None,
        };
        writer.maintain();
        let thread = std::thread::Builder::new()
            .name("inferprobe-history".into())
            .spawn(move || writer.run(rx, maintain_every))
            .map_err(|source| StoreError::Thread { source })?;
        Ok(HistoryWriter {
            tx: Some(tx),
            queued,
            thread: Some(thread),
            stats,
            limits,
        })
    }

    /// Queues a finished run. Never blocks: when the writer is behind by a full queue
    /// the run is dropped and counted, so the probes keep their schedule.
    pub fn record(&self, run: RunRecord) -> bool {
        let Some(tx) = &self.tx else { return false };
        let full = self.queued.fetch_add(1, Ordering::AcqRel) >= QUEUE;
        if full || tx.send(Message::Run(Box::new(run))).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// New bounds (a reload); applied at the next check.
    pub fn set_limits(&self, limits: HistoryConfig) {
        *self.limits.lock().unwrap_or_else(|p| p.into_inner()) = limits;
    }

    /// Waits until every run queued so far is on disk.
    pub fn flush(&self) {
        let Some(tx) = &self.tx else { return };
        let (ack, done) = sync_channel(1);
        if tx.send(Message::Flush(ack)).is_ok() {
            // The writer sleeps through its commit window: wake it so the flush is prompt.
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
            let _ = done.recv();
        }
    }

    pub fn stats(&self) -> &Arc<HistoryStats> {
        &self.stats
    }

    /// Writes what is queued and stops the thread.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for HistoryWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Writer {
    conn: Connection,
    db: PathBuf,
    limits: Arc<Mutex<HistoryConfig>>,
    stats: Arc<HistoryStats>,
    queued: Arc<AtomicUsize>,
    /// location -> probe -> series id: two levels, so a lookup needs no key built.
    series: HashMap<Arc<str>, HashMap<Arc<str>, i64>>,
    last_error_log: Option<Instant>,
}

impl Writer {
    fn run(mut self, rx: Receiver<Message>, maintain_every: Duration) {
        let mut last_check = Instant::now();
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let wait = maintain_every.saturating_sub(last_check.elapsed());
            match rx.recv_timeout(wait) {
                Ok(first) => {
                    // Gather what arrives within the commit window: one transaction per
                    // run costs ~200 us of CPU (WAL frames, locks), one per window a
                    // fraction of that per run. The thread sleeps through the window and
                    // takes what is queued when it wakes, rather than waiting on the
                    // channel: waiting there, every run would wake it (a futex call in
                    // the fan-out and a context switch here, ~10 % of the agent's CPU at
                    // 300 runs/s). A flush request unparks it and ends the window at once.
                    let opened = Instant::now();
                    let mut flush = matches!(first, Message::Flush(_));
                    batch.push(first);
                    while batch.len() < BATCH && !flush {
                        match rx.try_recv() {
                            Ok(m) => {
                                flush = matches!(m, Message::Flush(_));
                                batch.push(m);
                            }
                            Err(TryRecvError::Empty) => {
                                let left = COMMIT_WINDOW.saturating_sub(opened.elapsed());
                                if left.is_zero() {
                                    break;
                                }
                                std::thread::park_timeout(left);
                            }
                            Err(TryRecvError::Disconnected) => break,
                        }
                    }
                    self.write(&mut batch);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if last_check.elapsed() >= maintain_every {
                self.maintain();
                last_check = Instant::now();
            }
        }
    }

    fn write(&mut self, batch: &mut Vec<Message>) {
        let mut runs = Vec::new();
        let mut acks = Vec::new();
        for m in batch.drain(..) {
            match m {
                Message::Run(r) => runs.push(*r),
                Message::Flush(ack) => acks.push(ack),
            }
        }
        self.queued.fetch_sub(runs.len(), Ordering::AcqRel);
        if !runs.is_empty() {
            match self.insert(&runs) {
                Ok(()) => {
                    self.stats.written.fetch_add(runs.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    self.stats.dropped.fetch_add(runs.len() as u64, Ordering::Relaxed);
                    self.complain(&e, "Cannot write run history; these runs are not kept.");
                    // A failed transaction may have left ids of series that rolled back.
                    self.series.clear();
                }
            }
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }

    fn insert(&mut self, runs: &[RunRecord]) -> Result<(), rusqlite::Error> {
        let tx = self.conn.transaction()?;
        {
            let mut find = tx.prepare_cached(
                "INSERT INTO series (probe, location) VALUES (?1, ?2)
                 ON CONFLICT (probe, location) DO UPDATE SET probe = probe RETURNING id",
            )?;
            let mut add = tx.prepare_cached(
                "INSERT INTO runs (series, at_ms, reason, message, status, ttfb_us, ttft_us, tpot_us,
                                   total_us, tokens, prompt_bucket, image_bucket,
                                   tokens_source, input_tokens, input_source, trace_id,
                                   idle_ms, waited_ms, cold, warmup_since_ms, warmup_cause,
                                   burst_spread, burst_slowdown)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                         ?17, ?18, ?19, ?20, ?21, ?22, ?23)",
            )?;
            for r in runs {
                let known = self
                    .series
                    .get(&r.location)
                    .and_then(|probes| probes.get(&r.probe));
                let series = match known {
                    Some(id) => *id,
                    None => {
                        let id: i64 = find.query_row(params![&*r.probe, r.location], |row| row.get(0))?;
                        self.series
                            .entry(r.location.clone())
                            .or_default()
                            .insert(r.probe.clone(), id);
                        id
                    }
                };
                add.execute(params![
                    series,
                    unix_ms_i64(r.at),
                    r.reason,
                    r.message,
                    r.status,
                    r.ttfb.map(micros),
                    r.ttft.map(micros),
                    r.tpot.map(micros),
                    r.total.map(micros),
                    r.output_tokens.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
                    r.prompt_bucket,
                    r.image_bucket,
                    r.output_token_source,
                    r.input_tokens.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
                    r.input_token_source,
                    r.trace_id,
                    r.idle.map(millis),
                    r.waited.map(millis),
                    r.cold,
                    r.warmup.as_ref().map(|w| unix_ms_i64(w.since)),
                    r.warmup.as_ref().map(|w| w.cause.as_str()),
                    r.burst_spread,
                    r.burst_slowdown,
                ])?;
            }
        }
        tx.commit()
    }

    /// Enforces retention and the disk bound, and refreshes the disk figure.
    fn maintain(&mut self) {
        if let Err(e) = self.expire() {
            self.complain(&e, "Cannot trim run history.");
        }
        self.stats
            .disk_bytes
            .store(disk_bytes(&self.db), Ordering::Relaxed);
    }

    fn expire(&mut self) -> Result<(), rusqlite::Error> {
        let limits = *self.limits.lock().unwrap_or_else(|p| p.into_inner());
        // The WAL is truncated to this after each checkpoint: a quarter of the bound, at
        // most 32 MiB (what a busy minute writes), so the bound holds for the whole store
        // give or take that quarter.
        let wal_limit = (limits.max_disk_bytes / 4).min(32 << 20);
        self.conn.pragma_update(
            None,
            "journal_size_limit",
            i64::try_from(wal_limit).unwrap_or(32 << 20),
        )?;
        let cutoff = unix_ms_i64(
            SystemTime::now()
                .checked_sub(limits.retention)
                .unwrap_or(UNIX_EPOCH),
        );
        // Bounded work per check: at most 20 chunks, the rest at the next check.
        for _ in 0..20 {
            let n = self.conn.execute(
                "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE at_ms < ?1 ORDER BY at_ms LIMIT ?2)",
                params![cutoff, DELETE_CHUNK],
            )?;
            self.stats.expired.fetch_add(n as u64, Ordering::Relaxed);
            if (n as i64) < DELETE_CHUNK {
                break;
            }
        }
        for _ in 0..20 {
            let used = self.used_bytes()?;
            if used <= limits.max_disk_bytes {
                break;
            }
            // Down to 90 % of the bound, so the next few seconds of runs do not trigger
            // another round at once: a share of the rows proportional to the excess (at
            // least 10 %), in statements of at most 20,000 rows.
            let rows: i64 =
                self.conn
                    .query_row("SELECT COALESCE(MAX(id) - MIN(id) + 1, 0) FROM runs", [], |r| {
                        r.get(0)
                    })?;
            if rows == 0 {
                break;
            }
            let excess = (used - limits.max_disk_bytes * 9 / 10) as f64 / used as f64;
            let take = ((rows as f64 * excess).ceil() as i64).clamp(100, DELETE_CHUNK * 4);
            let n = self.conn.execute(
                "DELETE FROM runs WHERE id IN (SELECT id FROM runs ORDER BY id LIMIT ?1)",
                [take],
            )?;
            self.stats.expired.fetch_add(n as u64, Ordering::Relaxed);
            if n == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Pages holding data (the file minus its free list), in bytes.
    fn used_bytes(&self) -> Result<u64, rusqlite::Error> {
        let pragma = |name: &str| -> Result<u64, rusqlite::Error> {
            let v: i64 = self.conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))?;
            Ok(u64::try_from(v).unwrap_or(0))
        };
        let pages = pragma("page_count")?.saturating_sub(pragma("freelist_count")?);
        Ok(pages * pragma("page_size")?)
    }

    /// Logs at most once a minute: a full disk must not flood the log too.
    fn complain(&mut self, e: &rusqlite::Error, what: &str) {
        if self
            .last_error_log
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
        {
            self.last_error_log = Some(Instant::now());
            tracing::error!(error = %e, dropped = self.stats.dropped.load(Ordering::Relaxed), "{what}");
        }
    }
}

/// The database file and its WAL, in bytes.
pub fn disk_bytes(db: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    size(db) + size(Path::new(&wal))
}

/// Which runs to read.
#[derive(Debug, Clone)]
pub struct RunQuery {
    pub probe: Option<String>,
    pub location: Option<String>,
    /// Runs that started in `[since, until)`.
    pub since: SystemTime,
    pub until: SystemTime,
}

/// A page of `/api/v1/results`: runs in start order, and the cursor of the next page.
#[derive(Debug)]
pub struct ResultsPage {
    pub runs: Vec<RunRecord>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// A position in start order: (start in ms, row id). Opaque to API users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub at_ms: i64,
    pub id: i64,
}

impl Cursor {
    pub fn encode(self) -> String {
        format!("{}.{}", self.at_ms, self.id)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let (at, id) = s.split_once('.')?;
        Some(Cursor {
            at_ms: at.parse().ok()?,
            id: id.parse().ok()?,
        })
    }
}

/// The history's reading end: its own read-only connection.
pub struct HistoryReader {
    conn: Mutex<Connection>,
    /// [`COLUMNS`] and the columns added since (migrate.rs), NULL where this store lacks them.
    columns: String,
}

impl std::fmt::Debug for HistoryReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryReader").finish_non_exhaustive()
    }
}

/// The columns of the first release; those added since come after them (migrate.rs).
const COLUMNS: &str = "s.probe, s.location, r.at_ms, r.reason, r.message, r.status, r.ttfb_us, r.ttft_us,
                       r.tpot_us, r.total_us, r.tokens, r.prompt_bucket, r.image_bucket, r.id";

fn record(row: &rusqlite::Row<'_>) -> Result<RunRecord, rusqlite::Error> {
    let us = |i: usize| -> Result<Option<Duration>, rusqlite::Error> {
        Ok(row
            .get::<_, Option<i64>>(i)?
            .map(|v| Duration::from_micros(u64::try_from(v).unwrap_or(0))))
    };
    let ms = |i: usize| -> Result<Option<Duration>, rusqlite::Error> {
        Ok(row
            .get::<_, Option<i64>>(i)?
            .map(|v| Duration::from_millis(u64::try_from(v).unwrap_or(0))))
    };
    Ok(RunRecord {
        probe: row.get::<_, String>(0)?.into(),
        location: row.get::<_, String>(1)?.into(),
        at: from_unix_ms_i64(row.get(2)?),
        reason: row.get(3)?,
        message: row.get(4)?,
        status: row.get(5)?,
        ttfb: us(6)?,
        ttft: us(7)?,
        tpot: us(8)?,
        total: us(9)?,
        output_tokens: row
            .get::<_, Option<i64>>(10)?
            .map(|t| u64::try_from(t).unwrap_or(0)),
        prompt_bucket: row.get(11)?,
        image_bucket: row.get(12)?,
        output_token_source: token_source(row.get(14)?),
        input_tokens: row
            .get::<_, Option<i64>>(15)?
            .map(|t| u64::try_from(t).unwrap_or(0)),
        input_token_source: token_source(row.get(16)?),
        trace_id: row.get(17)?,
        idle: ms(18)?,
        waited: ms(19)?,
        cold: row.get::<_, Option<bool>>(20)?.unwrap_or(false),
        warmup: match row.get::<_, Option<i64>>(21)? {
            Some(since) => Some(Warmup {
                since: from_unix_ms_i64(since),
                cause: row.get::<_, Option<String>>(22)?.unwrap_or_default(),
            }),
            None => None,
        },
        burst_spread: row.get(23)?,
        burst_slowdown: row.get(24)?,
    })
}

impl HistoryReader {
    /// Opens the history of the store at `db` for reading. Takes no lock: a running
    /// agent may be writing.
    pub fn open(db: &Path) -> Result<HistoryReader, StoreError> {
        let conn = open(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let added = migrate::select_added(&conn).map_err(|source| StoreError::Open {
            path: db.to_owned(),
            source,
        })?;
        Ok(HistoryReader {
            conn: Mutex::new(conn),
            columns: format!("{COLUMNS}, {added}"),
        })
    }

    pub(super) fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Up to `limit` runs matching `q` after `after`, in start order.
    pub fn results(
        &self,
        q: &RunQuery,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<ResultsPage, StoreError> {
        let conn = self.conn();
        let after = after.unwrap_or(Cursor {
            at_ms: i64::MIN,
            id: i64::MIN,
        });
        let fetch = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        let mut args = Args::new(q);
        let since_after = args.push(after.at_ms);
        let id_after = args.push(after.id);
        let n = args.push(fetch);
        let sql = format!(
            "SELECT {} FROM runs r JOIN series s ON s.id = r.series
             WHERE {}
               AND (r.at_ms > {since_after} OR (r.at_ms = {since_after} AND r.id > {id_after}))
             ORDER BY r.at_ms, r.id LIMIT {n}",
            self.columns, args.filter
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(params_from_iter(args.values))?;
        let mut runs = Vec::new();
        let mut last = None;
        let mut more = false;
        while let Some(row) = rows.next()? {
            if runs.len() == limit {
                more = true;
                break;
            }
            last = Some(Cursor {
                at_ms: row.get(2)?,
                id: row.get(13)?,
            });
            runs.push(record(row)?);
        }
        Ok(ResultsPage {
            runs,
            next: if more { last } else { None },
        })
    }

    /// Calls `each` once per (probe, location) with its runs matching `q` in start
    /// order. Series are read one at a time, each in its own short read (the
    /// `runs_by_series` index gives them in order without sorting the whole window), so
    /// neither memory nor the reader lock is held for more than one series: a week of
    /// 10,000 probes does not fit in memory, and other readers interleave.
    pub fn for_each_series(
        &self,
        q: &RunQuery,
        mut each: impl FnMut(Vec<RunRecord>),
    ) -> Result<(), StoreError> {
        let series: Vec<i64> = {
            let conn = self.conn();
            let mut filter = Vec::new();
            let mut values: Vec<Value> = Vec::new();
            if let Some(p) = &q.probe {
                values.push(p.clone().into());
                filter.push(format!("probe = ?{}", values.len()));
            }
            if let Some(l) = &q.location {
                values.push(l.clone().into());
                filter.push(format!("location = ?{}", values.len()));
            }
            let sql = format!(
                "SELECT id FROM series {} ORDER BY probe, location",
                if filter.is_empty() {
                    String::new()
                } else {
                    format!("WHERE {}", filter.join(" AND "))
                }
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let ids = stmt.query_map(params_from_iter(values), |r| r.get(0))?;
            ids.collect::<Result<_, _>>()?
        };
        let sql = format!(
            "SELECT {} FROM runs r JOIN series s ON s.id = r.series
             WHERE r.series = ?1 AND r.at_ms >= ?2 AND r.at_ms < ?3 ORDER BY r.at_ms, r.id",
            self.columns
        );
        for id in series {
            let runs: Vec<RunRecord> = {
                let conn = self.conn();
                let mut stmt = conn.prepare_cached(&sql)?;
                let rows = stmt.query_map(params![id, unix_ms_i64(q.since), unix_ms_i64(q.until)], record)?;
                rows.collect::<Result<_, _>>()?
            };
            if !runs.is_empty() {
                each(runs);
            }
        }
        Ok(())
    }

    /// When each probe of `location` first ran, as far as the history remembers: what a
    /// window's figures can cover.
    pub fn first_runs(&self, location: &str) -> Result<HashMap<String, SystemTime>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT s.probe, (SELECT MIN(r.at_ms) FROM runs r WHERE r.series = s.id) AS first
             FROM series s WHERE s.location = ?1",
        )?;
        let rows = stmt.query_map([location], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<i64>>(1)?))
        })?;
        let mut out = HashMap::new();
        for row in rows {
            if let (probe, Some(at)) = row? {
                out.insert(probe, from_unix_ms_i64(at));
            }
        }
        Ok(out)
    }

    /// The latest `limit` runs of one probe in one location, newest first.
    pub fn recent(&self, probe: &str, location: &str, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let conn = self.conn();
        let sql = format!(
            "SELECT {} FROM runs r JOIN series s ON s.id = r.series
             WHERE s.probe = ?1 AND s.location = ?2 ORDER BY r.at_ms DESC, r.id DESC LIMIT ?3",
            self.columns
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            params![probe, location, i64::try_from(limit).unwrap_or(i64::MAX)],
            record,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// A `WHERE` clause for a [`RunQuery`] and its parameters, numbered as they are added.
struct Args {
    filter: String,
    values: Vec<Value>,
}

impl Args {
    fn new(q: &RunQuery) -> Args {
        let mut a = Args {
            filter: String::new(),
            values: Vec::new(),
        };
        let since = a.push(unix_ms_i64(q.since));
        let until = a.push(unix_ms_i64(q.until));
        a.filter = format!("r.at_ms >= {since} AND r.at_ms < {until}");
        if let Some(p) = &q.probe {
            let n = a.push(p.clone());
            a.filter += &format!(" AND s.probe = {n}");
        }
        if let Some(l) = &q.location {
            let n = a.push(l.clone());
            a.filter += &format!(" AND s.location = {n}");
        }
        a
    }

    /// Adds a parameter; returns its placeholder.
    fn push(&mut self, v: impl Into<Value>) -> String {
        self.values.push(v.into());
        format!("?{}", self.values.len())
    }
}

fn open(db: &Path, flags: OpenFlags) -> Result<Connection, StoreError> {
    let open_err = |source| StoreError::Open {
        path: db.to_owned(),
        source,
    };
    let conn = Connection::open_with_flags(db, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX).map_err(open_err)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(open_err)?;
    Ok(conn)
}

/// A token source as stored, back to its one static name (an unknown word is none).
fn token_source(stored: Option<String>) -> Option<&'static str> {
    let stored = stored?;
    [TokenSource::Usage, TokenSource::Events, TokenSource::Estimated]
        .into_iter()
        .map(TokenSource::as_str)
        .find(|s| *s == stored)
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;

mod migrate;
pub(super) use migrate::migrate;
mod record;
pub use record::RunRecord;
#[cfg(test)]
pub(crate) use record::sample;
