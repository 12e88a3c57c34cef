//! Equal sections of different probes held once. Most probes take `expect:`, `tls:`,
//! `alert:`, `slo:` and `cost:` from the defaults or leave them out, and a copy of each
//! per probe was ~400 bytes a probe (4 MB at 10,000 probes).

use std::collections::VecDeque;
use std::sync::Arc;

use super::alerting::{AlertConfig, Slo};
use super::cost::Cost;
use super::expect::Expect;
use super::tls::TlsConfig;

/// How many distinct values each section remembers: a file whose probes all differ
/// costs a few comparisons a probe, never a search through all of them.
const RECENT: usize = 8;

/// One section's recent distinct values.
#[derive(Debug)]
pub(super) struct Shared<T> {
    recent: VecDeque<Arc<T>>,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            recent: VecDeque::new(),
        }
    }
}

impl<T: PartialEq> Shared<T> {
    /// `value`, as the copy already held if an equal one is.
    pub(super) fn share(&mut self, value: T) -> Arc<T> {
        if let Some(held) = self.recent.iter().find(|held| ***held == value) {
            return held.clone();
        }
        let held = Arc::new(value);
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(held.clone());
        held
    }
}

/// The sections shared while a file is checked.
#[derive(Debug, Default)]
pub(super) struct Sections {
    pub expect: Shared<Expect>,
    pub tls: Shared<TlsConfig>,
    pub alert: Shared<AlertConfig>,
    pub slo: Shared<Slo>,
    pub cost: Shared<Cost>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_copy_and_different_ones_do_not() {
        let mut shared = Shared::default();
        let a = shared.share(String::from("a"));
        let b = shared.share(String::from("b"));
        assert!(Arc::ptr_eq(&a, &shared.share(String::from("a"))));
        assert!(!Arc::ptr_eq(&a, &b));
        // Past the recent ones, an equal value is a copy again: still equal.
        for i in 0..RECENT {
            shared.share(i.to_string());
        }
        let again = shared.share(String::from("a"));
        assert!(!Arc::ptr_eq(&a, &again));
        assert_eq!(a, again);
    }

    #[test]
    fn a_file_of_probes_with_default_sections_holds_each_once() {
        let mut text = String::from("probes:\n");
        for i in 0..20 {
            text.push_str(&format!(
                "  - {{name: p{i}, kind: http, url: \"http://h/{i}\"}}\n"
            ));
        }
        let config = crate::config::parse(&text, std::path::Path::new("t.yaml"), &|_| None).unwrap();
        let first = &config.probes[0];
        for p in &config.probes[1..] {
            assert!(Arc::ptr_eq(&p.expect, &first.expect));
            assert!(Arc::ptr_eq(&p.tls, &first.tls));
            assert!(Arc::ptr_eq(&p.alert, &first.alert));
            assert!(Arc::ptr_eq(&p.slo, &first.slo));
        }
    }
}
