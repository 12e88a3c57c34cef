//! Which model served each probe, and when that changed: the `model_changes` table. A row
//! per identity seen: the first one of a (probe, location) has no `before` (a baseline,
//! not an event), every later one is a change. Rows are few (a change is a release), so
//! they are kept as long as the store, beyond the runs' retention: a report over a
//! period shows the changes in it.
//!
//! The agent writes through [`AlertStore`] (its connection, in the transaction that
//! queues the change's notifications); readers through [`HistoryReader`], which finds
//! no table in a store no agent of this version has opened, and then no changes.

use std::collections::HashMap;
use std::time::SystemTime;

use rusqlite::params;

use super::history::RunQuery;
use super::{AlertStore, HistoryReader, StoreError};
use crate::unix_time::{from_unix_ms_i64, unix_ms_i64};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS model_changes (
    id             INTEGER PRIMARY KEY,
    probe          TEXT NOT NULL,
    location       TEXT NOT NULL,
    at_ms          INTEGER NOT NULL,
    before_digest  TEXT,
    before_summary TEXT,
    after_digest   TEXT NOT NULL,
    after_summary  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS model_changes_by_probe ON model_changes (probe, location, at_ms);
";

/// One identity as stored: its digest and its summary for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub digest: String,
    pub summary: String,
}

/// A probe's served model changed (or, with no `before`, was first seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChange {
    pub probe: String,
    pub location: String,
    /// The start of the first run that showed `after`.
    pub at: SystemTime,
    pub before: Option<Seen>,
    pub after: Seen,
}

impl ModelChange {
    /// As `/api/v1/model_changes` shows it.
    pub fn to_json(&self) -> serde_json::Value {
        let seen = |s: &Seen| serde_json::json!({"digest": s.digest, "summary": s.summary});
        serde_json::json!({
            "probe": self.probe,
            "location": self.location,
            "at": humantime::format_rfc3339_millis(self.at).to_string(),
            "before": self.before.as_ref().map(seen),
            "after": seen(&self.after),
        })
    }
}

impl AlertStore {
    /// The last identity stored for each probe of `location`.
    pub fn model_identities(&self, location: &str) -> Result<HashMap<String, Seen>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT probe, after_digest, after_summary FROM model_changes m
             WHERE location = ?1 AND id = (SELECT MAX(id) FROM model_changes
                                           WHERE probe = m.probe AND location = m.location)",
        )?;
        let rows = stmt.query_map([location], |r| {
            Ok((
                r.get::<_, String>(0)?,
                Seen {
                    digest: r.get(1)?,
                    summary: r.get(2)?,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// In one transaction: stores the change and enqueues its notifications as
    /// `(receiver, payload)`.
    pub fn record_model_change(
        &self,
        change: &ModelChange,
        notifications: &[(String, String)],
        now: SystemTime,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO model_changes (probe, location, at_ms, before_digest, before_summary,
                                        after_digest, after_summary)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                change.probe,
                change.location,
                unix_ms_i64(change.at),
                change.before.as_ref().map(|s| &s.digest),
                change.before.as_ref().map(|s| &s.summary),
                change.after.digest,
                change.after.summary,
            ],
        )?;
        for (receiver, payload) in notifications {
            tx.execute(
                "INSERT INTO outbox (receiver, payload, created_at, next_attempt_at) VALUES (?1, ?2, ?3, ?3)",
                params![receiver, payload, unix_ms_i64(now)],
            )?;
        }
        tx.commit()?;
        Ok(())
    }
}

impl HistoryReader {
    /// The changes (first sightings left out) matching `q`, oldest first, at most `limit`.
    pub fn model_changes(&self, q: &RunQuery, limit: usize) -> Result<Vec<ModelChange>, StoreError> {
        let conn = self.conn();
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'model_changes')",
            [],
            |r| r.get(0),
        )?;
        if !exists {
            return Ok(Vec::new());
        }
        let mut stmt = conn.prepare_cached(
            "SELECT probe, location, at_ms, before_digest, before_summary, after_digest, after_summary
             FROM model_changes
             WHERE before_digest IS NOT NULL AND at_ms >= ?1 AND at_ms < ?2
               AND (?3 IS NULL OR probe = ?3) AND (?4 IS NULL OR location = ?4)
             ORDER BY at_ms, id LIMIT ?5",
        )?;
        let rows = stmt.query_map(
            params![
                unix_ms_i64(q.since),
                unix_ms_i64(q.until),
                q.probe,
                q.location,
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |r| {
                Ok(ModelChange {
                    probe: r.get(0)?,
                    location: r.get(1)?,
                    at: from_unix_ms_i64(r.get(2)?),
                    before: Some(Seen {
                        digest: r.get(3)?,
                        summary: r.get(4)?,
                    }),
                    after: Seen {
                        digest: r.get(5)?,
                        summary: r.get(6)?,
                    },
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_baseline_is_not_a_change_and_the_last_identity_survives_a_reopen() {
        let dir = std::env::temp_dir().join(format!("inferprobe-model-changes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let seen = |d: &str| Seen {
            digest: d.into(),
            summary: format!("model {d}"),
        };
        let change = |at: u64, before: Option<Seen>, after: Seen| ModelChange {
            probe: "chat".into(),
            location: "eu".into(),
            at: t0 + Duration::from_secs(at),
            before,
            after,
        };
        {
            let store = AlertStore::open(&dir).unwrap();
            store
                .record_model_change(&change(0, None, seen("a")), &[], t0)
                .unwrap();
            store
                .record_model_change(&change(60, Some(seen("a")), seen("b")), &[], t0)
                .unwrap();
        }
        let store = AlertStore::open(&dir).unwrap();
        assert_eq!(store.model_identities("eu").unwrap()["chat"], seen("b"));
        assert!(store.model_identities("us").unwrap().is_empty());
        let reader = HistoryReader::open(store.path()).unwrap();
        let q = RunQuery {
            probe: None,
            location: None,
            since: t0,
            until: t0 + Duration::from_secs(3600),
        };
        let changes = reader.model_changes(&q, 100).unwrap();
        assert_eq!(changes, [change(60, Some(seen("a")), seen("b"))]);
        assert_eq!(changes[0].to_json()["before"]["summary"], "model a");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
