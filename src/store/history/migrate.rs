//! Columns added to `runs` after its first release: a store written by an older agent
//! gets them when a newer one opens it (`ALTER TABLE ... ADD COLUMN`, cheap in SQLite:
//! old rows read NULL, nothing is rewritten). New stores get them the same way, so the
//! list below is the one place a column is added.

use rusqlite::Connection;

/// (column, type) added to `runs`, oldest first. Append only: a released column is never
/// renamed or dropped, so an older agent can still read a newer store.
const ADDED_COLUMNS: &[(&str, &str)] = &[
    // What the probes cost: the output count's source (the `tokens` column is the
    // output count), and the input tokens with theirs.
    ("tokens_source", "TEXT"),
    ("input_tokens", "INTEGER"),
    ("input_source", "TEXT"),
    // The run's W3C trace id, 32 hex digits; NULL when the probe does not trace.
    ("trace_id", "TEXT"),
    // What the run met at its endpoint (issue 29): the idle time before it and its wait
    // for its turn, in ms; cold 1 for a cold probe's run that found the endpoint idle,
    // else 0; the warm-up it fell in (the restart's Unix ms and what showed it), NULL
    // outside one; a burst run's spread and slowdown, NULL for other runs.
    ("idle_ms", "INTEGER"),
    ("waited_ms", "INTEGER"),
    ("cold", "INTEGER"),
    ("warmup_since_ms", "INTEGER"),
    ("warmup_cause", "TEXT"),
    ("burst_spread", "REAL"),
    ("burst_slowdown", "REAL"),
];

/// Adds the columns of [`ADDED_COLUMNS`] that `runs` lacks.
pub(in crate::store) fn migrate(conn: &Connection) -> Result<(), rusqlite::Error> {
    let have = run_columns(conn)?;
    for (column, kind) in ADDED_COLUMNS {
        if !have.iter().any(|h| h == column) {
            conn.execute_batch(&format!("ALTER TABLE runs ADD COLUMN {column} {kind}"))?;
        }
    }
    Ok(())
}

/// What a reader selects for the added columns, in [`ADDED_COLUMNS`]' order: each
/// column, or NULL in a store no agent of this version has opened yet (`report` on an old
/// file opens it read-only and cannot add them).
pub(in crate::store) fn select_added(conn: &Connection) -> Result<String, rusqlite::Error> {
    let have = run_columns(conn)?;
    let selected: Vec<String> = ADDED_COLUMNS
        .iter()
        .map(|(column, _)| {
            if have.iter().any(|h| h == column) {
                format!("r.{column}")
            } else {
                "NULL".to_owned()
            }
        })
        .collect();
    Ok(selected.join(", "))
}

fn run_columns(conn: &Connection) -> Result<Vec<String>, rusqlite::Error> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('runs')")?;
    let names = stmt.query_map([], |r| r.get(0))?;
    names.collect()
}

/// The `runs` table as the first release created it.
#[cfg(test)]
pub(super) const FIRST_RUNS: &str = "
    CREATE TABLE series (id INTEGER PRIMARY KEY, probe TEXT NOT NULL, location TEXT NOT NULL,
                         UNIQUE (probe, location));
    CREATE TABLE runs (id INTEGER PRIMARY KEY, series INTEGER NOT NULL, at_ms INTEGER NOT NULL,
        reason TEXT, message TEXT, status INTEGER, ttfb_us INTEGER, ttft_us INTEGER,
        tpot_us INTEGER, total_us INTEGER, tokens INTEGER, prompt_bucket TEXT NOT NULL,
        image_bucket TEXT NOT NULL);
    INSERT INTO series VALUES (1, 'chat', 'eu');
    INSERT INTO runs (series, at_ms, tokens, prompt_bucket, image_bucket)
        VALUES (1, 1000, 7, 'short', 'none');";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_store_gains_the_added_columns_and_keeps_its_runs() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(FIRST_RUNS).unwrap();
        // Before the migration a reader selects NULL for every added column.
        assert_eq!(
            select_added(&conn).unwrap(),
            vec!["NULL"; ADDED_COLUMNS.len()].join(", ")
        );
        migrate(&conn).unwrap();
        assert_eq!(
            select_added(&conn).unwrap(),
            "r.tokens_source, r.input_tokens, r.input_source, r.trace_id, r.idle_ms, r.waited_ms, \
             r.cold, r.warmup_since_ms, r.warmup_cause, r.burst_spread, r.burst_slowdown"
        );
        // Twice is the same as once (every open runs it).
        migrate(&conn).unwrap();
        let row: (i64, Option<String>, Option<i64>, Option<String>, Option<String>) = conn
            .query_row(
                "SELECT tokens, tokens_source, input_tokens, input_source, trace_id FROM runs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .unwrap();
        assert_eq!(row, (7, None, None, None, None));
        // The run an older agent kept has no idle time, no start, no warm-up, no burst.
        let unknown: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM runs WHERE idle_ms IS NULL AND waited_ms IS NULL AND cold IS NULL
                   AND warmup_since_ms IS NULL AND warmup_cause IS NULL AND burst_spread IS NULL
                   AND burst_slowdown IS NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(unknown, 1);
    }
}
