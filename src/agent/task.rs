//! The one handle on a task started from a piece of config: the remote_write pusher,
//! the delivery loop of each receiver, the OTLP exporter. A reload compares the config a task was started
//! from with the new one; a task whose config changed or went is cancelled, and its
//! handle is given to its successor, which waits for it, so old and new never overlap.
//! (The OTLP exporter's successor does not wait: spans need no order, so the old one
//! sends what its queue holds while the new one starts.)
//! (Probes are not tasks: they are entries on the scheduler's one timer.)
//!
//! May import: nothing of the crate (tokio only).

use std::collections::HashMap;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running task, with the config it was started from.
pub(super) struct Running<C, S = ()> {
    config: C,
    /// What the agent and the task share (a receiver's wake-up).
    pub(super) shared: S,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl<C, S> Running<C, S> {
    /// Spawns `start(cancel)`; the task ends when `cancel` fires.
    pub(super) fn spawn<F>(config: C, shared: S, start: impl FnOnce(CancellationToken) -> F) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(start(cancel.clone()));
        Running {
            config,
            shared,
            cancel,
            task,
        }
    }

    /// Whether it was started from `config`, so a reload leaves it alone.
    pub(super) fn runs(&self, config: &C) -> bool
    where
        C: PartialEq,
    {
        self.config == *config
    }

    pub(super) fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Cancels it, handing over the task, which may still be finishing what it was
    /// doing (a send, a push): its successor waits for it.
    pub(super) fn stop(self) -> JoinHandle<()> {
        self.cancel.cancel();
        self.task
    }
}

/// Whether `slot` runs exactly `wanted`: the same config, or nothing when nothing is
/// wanted. For a task that exists at most once (remote_write).
pub(super) fn runs_as<C: PartialEq, S>(slot: Option<&Running<C, S>>, wanted: Option<&C>) -> bool {
    match (slot, wanted) {
        (Some(running), Some(config)) => running.runs(config),
        (None, None) => true,
        _ => false,
    }
}

/// Tasks by name: one per receiver.
pub(super) struct Tasks<C, S> {
    by_name: HashMap<String, Running<C, S>>,
}

impl<C, S> Default for Tasks<C, S> {
    fn default() -> Self {
        Tasks {
            by_name: HashMap::new(),
        }
    }
}

impl<C, S> Tasks<C, S> {
    /// Stops every task `keep` refuses (its config changed, or it is no longer
    /// configured) and returns, by name, the stopped tasks for their successors.
    pub(super) fn stop_unless(
        &mut self,
        mut keep: impl FnMut(&str, &Running<C, S>) -> bool,
    ) -> HashMap<String, JoinHandle<()>> {
        self.by_name
            .extract_if(|name, running| !keep(name, running))
            .map(|(name, running)| (name, running.stop()))
            .collect()
    }

    pub(super) fn insert(&mut self, name: String, running: Running<C, S>) {
        self.by_name.insert(name, running);
    }

    pub(super) fn get(&self, name: &str) -> Option<&Running<C, S>> {
        self.by_name.get(name)
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &String> {
        self.by_name.keys()
    }

    /// Cancels every task (at shutdown); none is waited for.
    pub(super) fn cancel_all(&self) {
        for running in self.by_name.values() {
            running.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that runs until cancelled.
    fn start(config: u32, shared: &'static str) -> Running<u32, &'static str> {
        Running::spawn(config, shared, |cancel| async move { cancel.cancelled().await })
    }

    #[tokio::test]
    async fn a_reload_stops_changed_and_removed_tasks_and_hands_them_over() {
        let mut tasks = Tasks::default();
        tasks.insert("same".into(), start(1, "same's"));
        tasks.insert("changed".into(), start(1, "changed's"));
        tasks.insert("removed".into(), start(1, "removed's"));
        let wanted = HashMap::from([("same", 1), ("changed", 2)]);
        let mut stopped = tasks.stop_unless(|name, r| wanted.get(name).is_some_and(|c| r.runs(c)));
        assert_eq!(tasks.names().collect::<Vec<_>>(), ["same"]);
        assert!(!tasks.get("same").unwrap().task.is_finished());
        assert_eq!(tasks.get("same").unwrap().shared, "same's");
        // Cancelled: the task ends by itself, so a successor waiting for it goes on.
        stopped.remove("changed").unwrap().await.unwrap();
        stopped.remove("removed").unwrap().await.unwrap();
        assert!(stopped.is_empty());
    }

    #[tokio::test]
    async fn an_optional_task_runs_as_wanted_only_with_the_same_config() {
        let running = start(1, "");
        assert!(runs_as(Some(&running), Some(&1)));
        assert!(!runs_as(Some(&running), Some(&2)));
        assert!(!runs_as(Some(&running), None));
        assert!(!runs_as::<u32, ()>(None, Some(&1)));
        assert!(runs_as::<u32, ()>(None, None));
    }
}
