//! Alert state and the outbox of undelivered notifications, in the durable store: one
//! SQLite file in the data directory (`inferprobe.db`), which [`AlertStore::open`] creates and
//! locks. The run history lives in the same file (history.rs).
//!
//! Why SQLite (rusqlite, compiled in): transactions make "save the alert state and
//! enqueue its notifications" one atomic step, so a `kill -9` between the two cannot
//! lose a page or send one twice; WAL mode survives a process crash with
//! `synchronous=NORMAL`; SQL fits the history queries of the status page and report; and
//! an operator can open the file with the `sqlite3` shell. One agent owns a data
//! directory, so that a second one cannot send the same pages: it holds an advisory
//! lock (`flock`) on the directory itself, which no `rm` can take away (a directory
//! holding the database cannot be removed), and on the lock file `inferprobe.lock`,
//! which older versions lock and which tells an operator what holds the directory.
//!
//! The store knows nothing of alerts: states and notifications are opaque JSON text.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, params};

use crate::unix_time::{from_unix_ms_i64, unix_ms_i64};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the data directory {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("the data directory {path} is in use by another inferprobe (it holds the lock on {lock})")]
    Locked { path: PathBuf, lock: PathBuf },
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: std::io::Error },
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("cannot start the history writer: {source}")]
    Thread { source: std::io::Error },
    #[error("store: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// A notification waiting for one receiver.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub id: i64,
    pub receiver: String,
    pub payload: String,
    pub created_at: SystemTime,
    pub attempts: u32,
    pub next_attempt_at: SystemTime,
}

/// The alert state and the outbox. Opening it creates and locks the data directory's
/// database, which holds the run history too (history.rs).
pub struct AlertStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// Held (locked) for the store's life: the directory, and the lock file.
    _locks: Vec<File>,
}

impl std::fmt::Debug for AlertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertStore").field("path", &self.path).finish()
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS alert_state (
    probe      TEXT NOT NULL,
    location   TEXT NOT NULL,
    state      TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (probe, location)
);
CREATE TABLE IF NOT EXISTS outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    receiver        TEXT NOT NULL,
    payload         TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_by_receiver ON outbox (receiver, id);
";

/// An exclusive advisory lock on `path` (the data directory `dir` or a file in it),
/// opened as `file`.
fn take_lock(dir: &Path, path: &Path, file: std::io::Result<File>) -> Result<File, StoreError> {
    let lock_err = |source| StoreError::Lock {
        path: path.to_owned(),
        source,
    };
    let file = file.map_err(lock_err)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
            path: dir.to_owned(),
            lock: path.to_owned(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(lock_err(source)),
    }
}

impl AlertStore {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<AlertStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
        let mut locks = Vec::new();
        // The directory first: deleting the lock file (or the whole directory's files)
        // cannot release it. Unix only: elsewhere a directory cannot be opened as a file.
        if cfg!(unix) {
            locks.push(take_lock(dir, dir, File::open(dir))?);
        }
        let lock_path = dir.join("inferprobe.lock");
        locks.push(take_lock(dir, &lock_path, File::create(&lock_path))?);
        let path = dir.join(super::DB_FILE);
        let open_err = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(open_err)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(open_err)?;
        // WAL + NORMAL: a commit survives a crash of the process (kill -9); only a power
        // loss may take the last transactions, and it costs no fsync per commit.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
        conn.execute_batch(SCHEMA).map_err(open_err)?;
        conn.execute_batch(super::history::SCHEMA).map_err(open_err)?;
        super::history::migrate(&conn).map_err(open_err)?;
        conn.execute_batch(super::model_changes::SCHEMA)
            .map_err(open_err)?;
        Ok(AlertStore {
            path,
            conn: Mutex::new(conn),
            _locks: locks,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (the transaction
        // rolls back on drop), so a poisoned lock is safe to take over.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The saved alert states of this location's probes.
    pub fn alert_states(&self, location: &str) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT probe, state FROM alert_state WHERE location = ?1 ORDER BY probe")?;
        let rows = stmt.query_map([location], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Locations other than `location` that have saved alert state (the agent's
    /// location changed, or two agents shared this directory in turn).
    pub fn other_locations(&self, location: &str) -> Result<Vec<String>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT DISTINCT location FROM alert_state WHERE location != ?1 ORDER BY location")?;
        let rows = stmt.query_map([location], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// In one transaction: saves (or, for `None`, deletes) alert states and enqueues
    /// notifications as `(receiver, payload)`.
    pub fn commit(
        &self,
        location: &str,
        states: &[(String, Option<String>)],
        notifications: &[(String, String)],
        now: SystemTime,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let now = unix_ms_i64(now);
        {
            // Prepared once per commit: under load one commit carries thousands of rows.
            let mut upsert = tx.prepare_cached(
                "INSERT INTO alert_state (probe, location, state, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (probe, location) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
            )?;
            let mut delete =
                tx.prepare_cached("DELETE FROM alert_state WHERE probe = ?1 AND location = ?2")?;
            let mut enqueue = tx.prepare_cached(
                "INSERT INTO outbox (receiver, payload, created_at, next_attempt_at) VALUES (?1, ?2, ?3, ?3)",
            )?;
            for (probe, state) in states {
                match state {
                    Some(state) => upsert.execute(params![probe, location, state, now])?,
                    None => delete.execute(params![probe, location])?,
                };
            }
            for (receiver, payload) in notifications {
                enqueue.execute(params![receiver, payload, now])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The oldest notification waiting for `receiver`: receivers get them in order, so
    /// a resolve never overtakes its trigger.
    pub fn next_pending(&self, receiver: &str) -> Result<Option<Pending>, StoreError> {
        Ok(self.pending_batch(receiver, 1)?.into_iter().next())
    }

    /// The oldest `max` notifications waiting for `receiver`, in order: what a chat
    /// robot's next message may merge.
    pub fn pending_batch(&self, receiver: &str, max: usize) -> Result<Vec<Pending>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT id, receiver, payload, created_at, attempts, next_attempt_at FROM outbox
             WHERE receiver = ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![receiver, i64::try_from(max).unwrap_or(i64::MAX)], |r| {
            Ok(Pending {
                id: r.get(0)?,
                receiver: r.get(1)?,
                payload: r.get(2)?,
                created_at: from_unix_ms_i64(r.get(3)?),
                attempts: r.get(4)?,
                next_attempt_at: from_unix_ms_i64(r.get(5)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes a notification that was delivered (or given up).
    pub fn remove(&self, id: i64) -> Result<(), StoreError> {
        self.conn().execute("DELETE FROM outbox WHERE id = ?1", [id])?;
        Ok(())
    }

    /// Records a failed attempt and when to try again.
    pub fn retry_at(&self, id: i64, attempts: u32, next: SystemTime) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE outbox SET attempts = ?2, next_attempt_at = ?3 WHERE id = ?1",
            params![id, attempts, unix_ms_i64(next)],
        )?;
        Ok(())
    }

    /// Drops every notification queued for `receiver`; returns how many.
    pub fn remove_receiver(&self, receiver: &str) -> Result<usize, StoreError> {
        Ok(self
            .conn()
            .execute("DELETE FROM outbox WHERE receiver = ?1", [receiver])?)
    }

    /// Notifications waiting for one receiver.
    pub fn pending_count(&self, receiver: &str) -> Result<u64, StoreError> {
        let n: i64 = self.conn().query_row(
            "SELECT COUNT(*) FROM outbox WHERE receiver = ?1",
            [receiver],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Notifications waiting, by receiver.
    pub fn pending_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT receiver, COUNT(*) FROM outbox GROUP BY receiver ORDER BY receiver")?;
        let rows = stmt.query_map([], |r| {
            let n: i64 = r.get(1)?;
            Ok((r.get(0)?, u64::try_from(n).unwrap_or(0)))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("inferprobe-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn states_and_the_outbox_survive_reopening() {
        let dir = temp_dir("reopen");
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        {
            let store = AlertStore::open(&dir).unwrap();
            store
                .commit(
                    "eu",
                    &[
                        ("a".into(), Some("{\"x\":1}".into())),
                        ("b".into(), Some("{}".into())),
                    ],
                    &[
                        ("pager".into(), "one".into()),
                        ("pager".into(), "two".into()),
                        ("hook".into(), "one".into()),
                    ],
                    now,
                )
                .unwrap();
            store.commit("eu", &[("b".into(), None)], &[], now).unwrap();
        }
        let store = AlertStore::open(&dir).unwrap();
        assert_eq!(
            store.alert_states("eu").unwrap(),
            [("a".to_owned(), "{\"x\":1}".to_owned())]
        );
        assert!(store.alert_states("us").unwrap().is_empty());
        assert_eq!(
            store.pending_counts().unwrap(),
            [("hook".to_owned(), 1), ("pager".to_owned(), 2)]
        );
        let first = store.next_pending("pager").unwrap().unwrap();
        assert_eq!(
            (first.payload.as_str(), first.attempts, first.created_at),
            ("one", 0, now)
        );
        store.retry_at(first.id, 1, now + Duration::from_secs(5)).unwrap();
        let again = store.next_pending("pager").unwrap().unwrap();
        assert_eq!((again.id, again.attempts), (first.id, 1));
        assert_eq!(again.next_attempt_at, now + Duration::from_secs(5));
        store.remove(first.id).unwrap();
        assert_eq!(store.next_pending("pager").unwrap().unwrap().payload, "two");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_second_agent_cannot_open_the_same_data_directory() {
        let dir = temp_dir("lock");
        let _first = AlertStore::open(&dir).unwrap();
        match AlertStore::open(&dir) {
            Err(StoreError::Locked { .. }) => {}
            other => panic!("expected Locked, got {other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn deleting_the_lock_file_does_not_free_the_data_directory() {
        let dir = temp_dir("lock-deleted");
        let _first = AlertStore::open(&dir).unwrap();
        std::fs::remove_file(dir.join("inferprobe.lock")).unwrap();
        match AlertStore::open(&dir) {
            Err(e @ StoreError::Locked { .. }) => {
                assert!(e.to_string().contains("in use by another inferprobe"), "{e}");
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
