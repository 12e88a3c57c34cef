//! Columns added to the run history after stores were first written: added to an
//! existing store when the agent opens it (SQLite's `ALTER TABLE ... ADD COLUMN` only
//! edits the schema, so even a large history migrates at once), and read as NULL by a
//! reader of a store no agent of this version has opened yet (`report` on an old file).

use std::collections::HashSet;

use rusqlite::Connection;

/// `runs` columns newer than the table, each with its type; all are nullable.
const ADDED_RUN_COLUMNS: &[(&str, &str)] = &[
    // The run's W3C trace id, 32 hex digits; NULL when the probe does not trace.
    ("trace_id", "TEXT"),
];

/// Adds what `runs` lacks; run by the writer after the schema is in place.
pub(super) fn add_run_columns(conn: &Connection) -> rusqlite::Result<()> {
    let have = run_columns(conn)?;
    for (name, decl) in ADDED_RUN_COLUMNS {
        if !have.contains(*name) {
            conn.execute_batch(&format!("ALTER TABLE runs ADD COLUMN {name} {decl}"))?;
        }
    }
    Ok(())
}

/// What a reader selects for an added column: the column, or NULL in a store without it.
pub(super) fn select_added(conn: &Connection, name: &str) -> rusqlite::Result<String> {
    Ok(if run_columns(conn)?.contains(name) {
        format!("r.{name}")
    } else {
        "NULL".to_owned()
    })
}

fn run_columns(conn: &Connection) -> rusqlite::Result<HashSet<String>> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('runs')")?;
    let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
    names.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store written before the column existed gets it, keeps its rows (NULL in the
    /// new column), and a second opening changes nothing.
    #[test]
    fn an_old_runs_table_gains_the_trace_id_column() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(super::super::history::SCHEMA).unwrap();
        conn.execute_batch(
            "INSERT INTO runs (series, at_ms, prompt_bucket, image_bucket) VALUES (1, 5, 'none', 'none')",
        )
        .unwrap();
        assert_eq!(select_added(&conn, "trace_id").unwrap(), "NULL");
        add_run_columns(&conn).unwrap();
        add_run_columns(&conn).unwrap();
        assert_eq!(select_added(&conn, "trace_id").unwrap(), "r.trace_id");
        let old: Option<String> = conn
            .query_row("SELECT trace_id FROM runs WHERE at_ms = 5", [], |r| r.get(0))
            .unwrap();
        assert_eq!(old, None);
    }
}
