//! Which model serves each probe, watched: the identity each successful run carries
//! (probe/identity.rs) against the last one seen, and a change stored as an event in
//! the history (`model_changes`), logged, set on the probe's info series and told to the
//! receivers as a notice. Never a failure: a user who wants a swap to fail a run says
//! `expect: {model: true}`.
//!
//! The first identity after a start is compared with the last one the store holds, so a
//! restart is not a change and a swap while the agent was down is one.
//!
//! May import: metrics, outcome, store. Paging holds it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::metrics::Metrics;
use crate::outcome::Outcome;
use crate::store::{AlertStore, ModelChange, Seen};

pub(super) struct ModelWatch {
    store: Arc<AlertStore>,
    location: String,
    /// The last identity of each probe; `None` until the store has been read.
    known: Option<HashMap<String, Seen>>,
}

impl ModelWatch {
    pub(super) fn new(store: Arc<AlertStore>, location: &str) -> Self {
        ModelWatch {
            store,
            location: location.to_owned(),
            known: None,
        }
    }

    /// Folds one run in: the identity is set on the metrics; a change of it (or a first
    /// sighting) is logged and returned, for paging to store and tell.
    pub(super) fn observe(&mut self, outcome: &Outcome, metrics: &Metrics) -> Option<ModelChange> {
        let identity = outcome.observation.served.identity.as_ref()?;
        let known = self.known.get_or_insert_with(|| {
            self.store.model_identities(&self.location).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "Cannot read the models served before; the first one seen of each probe is not compared.");
                HashMap::new()
            })
        });
        metrics.model_identity(&outcome.probe, identity);
        let name = &*outcome.probe.name;
        let before = known.get(name);
        if before.is_some_and(|b| b.digest == identity.digest) {
            return None;
        }
        let after = Seen {
            digest: identity.digest.clone(),
            summary: identity.summary.clone(),
        };
        let change = ModelChange {
            probe: name.to_owned(),
            location: self.location.clone(),
            at: outcome.started_at,
            before: before.cloned(),
            after: after.clone(),
        };
        known.insert(name.to_owned(), after);
        match &change.before {
            None => tracing::info!(probe = %name, model = %change.after.summary, "Serving model first seen."),
            Some(b) => tracing::info!(
                probe = %name,
                before = %b.summary,
                after = %change.after.summary,
                "The served model changed."
            ),
        }
        Some(change)
    }
}
