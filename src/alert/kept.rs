//! One probe's alert state as [`super::Alerting`] holds it between runs. Almost every
//! probe is healthy almost always: no streak, nothing firing. Such a probe keeps its last
//! good run alone (64 bytes); the two tracks and the latency window are boxed only while
//! they hold something. Held inline, the whole state was 240 bytes a probe, 4.3 MB of
//! hash table at 10,000 probes (heaptrack, issue 15).

use super::{GoodRun, ProbeAlerts, Track, Window};

#[derive(Debug, Default)]
pub(super) struct Kept {
    /// Down, then degraded; `None` while both are at rest.
    tracks: Option<Box<[Track; 2]>>,
    last_good: Option<GoodRun>,
    /// `None` while empty (always, for a probe without a latency target).
    window: Option<Box<Window>>,
}

impl Kept {
    pub fn keep(state: ProbeAlerts) -> Kept {
        let ProbeAlerts {
            down,
            degraded,
            last_good,
            window,
        } = state;
        let at_rest = Track::default();
        Kept {
            tracks: (down != at_rest || degraded != at_rest).then(|| Box::new([down, degraded])),
            last_good,
            window: (!window.is_empty()).then(|| Box::new(window)),
        }
    }

    pub fn open(self) -> ProbeAlerts {
        let [down, degraded] = self.tracks.map(|t| *t).unwrap_or_default();
        ProbeAlerts {
            down,
            degraded,
            last_good: self.last_good,
            window: self.window.map(|w| *w).unwrap_or_default(),
        }
    }

    /// The down and the degraded track, where either holds anything.
    pub fn tracks(&self) -> impl Iterator<Item = &Track> {
        self.tracks.iter().flat_map(|t| t.iter())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn a_healthy_probe_keeps_its_last_good_run_alone() {
        let good = GoodRun {
            at: UNIX_EPOCH + Duration::from_secs(7),
            ttft_seconds: Some(0.2),
            total_seconds: 0.5.into(),
        };
        let state = ProbeAlerts {
            last_good: Some(good.clone()),
            ..ProbeAlerts::default()
        };
        let kept = Kept::keep(state.clone());
        assert!(kept.tracks.is_none() && kept.window.is_none());
        assert_eq!(kept.tracks().count(), 0);
        assert_eq!(kept.open(), state);
        assert!(
            std::mem::size_of::<Kept>() <= 64,
            "{}",
            std::mem::size_of::<Kept>()
        );
    }

    #[test]
    fn a_streak_and_a_window_come_back_whole() {
        let mut state = ProbeAlerts::default();
        state.down.bad = 2;
        state.down.bad_since = Some(UNIX_EPOCH);
        state.window.push_back((Some(0.1), 0.3));
        let kept = Kept::keep(state.clone());
        assert_eq!(kept.tracks().count(), 2);
        assert_eq!(kept.open(), state);
    }
}
