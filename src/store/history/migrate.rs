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
];

/// Adds the columns of [`ADDED_COLUMNS`] that `runs` lacks.
pub(in crate::store) fn migrate(conn: &Connection) -> Result<(), rusqlite::Error> {
    let have: Vec<String> = {
        let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('runs')")?;
        let names = stmt.query_map([], |r| r.get(0))?;
        names.collect::<Result<_, _>>()?
    };
    for (column, kind) in ADDED_COLUMNS {
        if !have.iter().any(|h| h == column) {
            conn.execute_batch(&format!("ALTER TABLE runs ADD COLUMN {column} {kind}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `runs` table as the first release created it.
    const FIRST_RUNS: &str = "
        CREATE TABLE series (id INTEGER PRIMARY KEY, probe TEXT NOT NULL, location TEXT NOT NULL,
                             UNIQUE (probe, location));
        CREATE TABLE runs (id INTEGER PRIMARY KEY, series INTEGER NOT NULL, at_ms INTEGER NOT NULL,
            reason TEXT, message TEXT, status INTEGER, ttfb_us INTEGER, ttft_us INTEGER,
            tpot_us INTEGER, total_us INTEGER, tokens INTEGER, prompt_bucket TEXT NOT NULL,
            image_bucket TEXT NOT NULL);
        INSERT INTO series VALUES (1, 'chat', 'eu');
        INSERT INTO runs (series, at_ms, tokens, prompt_bucket, image_bucket)
            VALUES (1, 1000, 7, 'short', 'none');";

    #[test]
    fn an_old_store_gains_the_token_columns_and_keeps_its_runs() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(FIRST_RUNS).unwrap();
        migrate(&conn).unwrap();
        // Twice is the same as once (every open runs it).
        migrate(&conn).unwrap();
        let row: (i64, Option<String>, Option<i64>, Option<String>) = conn
            .query_row(
                "SELECT tokens, tokens_source, input_tokens, input_source FROM runs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(row, (7, None, None, None));
    }
}
