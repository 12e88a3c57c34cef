//! A probe's daily token budget (`budget: {tokens_per_day: N}`): the scheduler's pace.
//!
//! After each run the loop hands the run's tokens (input plus output, as the outcome
//! counted them) to [`Pace::record`]. The current rate is the mean of the last
//! [`RECENT_RUNS`] runs; a day at the configured interval is that rate times the runs a
//! day holds. When that would exceed the budget, the interval is stretched so the day's
//! use fits (`86,400 s x tokens per run / tokens_per_day`), never past
//! [`MAX_INTERVAL`]: the probe keeps running, slower, and never stops silently. When the
//! rate falls back under the budget the configured interval returns. Each crossing, one
//! way or the other, is reported once ([`PaceChange`], published as a run event and
//! logged by the fan-out).
//!
//! Steady state rather than the last 24 hours' sum: a day at the stretched interval is
//! what the rolling 24 hours will hold once the window has moved on, and it reacts at
//! once when a prompt or an answer gets longer.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use crate::config::TokenBudget;
use crate::outcome::Outcome;

/// Runs whose tokens make the current rate.
pub const RECENT_RUNS: usize = 10;
/// The longest a budget stretches an interval: one run a day, so a probe whose single
/// run exceeds its budget still runs (and keeps saying so).
pub const MAX_INTERVAL: Duration = Duration::from_secs(86_400);
const DAY: f64 = 86_400.0;

/// What a crossing of the budget changed, for the log and the run events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaceChange {
    pub tokens_per_day: u64,
    /// Tokens a day at the configured interval and the current rate.
    pub projected_per_day: u64,
    pub configured: Duration,
    /// The interval now used: `Some` while over the budget, `None` once back at the
    /// configured one.
    pub stretched: Option<Duration>,
}

/// The pace of one probe's loop: shared by the loop (which asks for the interval) and
/// its runs (which record their tokens).
#[derive(Debug)]
pub struct Pace {
    budget: TokenBudget,
    configured: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    recent: VecDeque<u64>,
    stretched: Option<Duration>,
}

impl Pace {
    pub fn new(budget: TokenBudget, configured: Duration) -> Pace {
        Pace {
            budget,
            configured,
            state: Mutex::new(State::default()),
        }
    }

    /// The interval to wait now: the configured one, or longer while over the budget.
    pub fn interval(&self) -> Duration {
        self.lock().stretched.unwrap_or(self.configured)
    }

    /// Takes a finished run's tokens. A run that counted none (it failed before the
    /// server took the prompt) costs nothing and counts as such. Returns the change when
    /// the probe crossed its budget, either way.
    pub fn record(&self, outcome: &Outcome) -> Option<PaceChange> {
        let o = &outcome.observation;
        let tokens = o.input_tokens.unwrap_or(0) + o.output_tokens.unwrap_or(0);
        self.record_tokens(tokens)
    }

    pub fn record_tokens(&self, tokens: u64) -> Option<PaceChange> {
        let mut state = self.lock();
        if state.recent.len() == RECENT_RUNS {
            state.recent.pop_front();
        }
        state.recent.push_back(tokens);
        let per_run = state.recent.iter().sum::<u64>() as f64 / state.recent.len() as f64;
        let configured = self.configured.as_secs_f64().max(1e-3);
        let projected = per_run * DAY / configured;
        let budget = self.budget.tokens_per_day as f64;
        let was_over = state.stretched.is_some();
        state.stretched = (projected > budget).then(|| {
            let fits = Duration::try_from_secs_f64(per_run * DAY / budget).unwrap_or(MAX_INTERVAL);
            fits.clamp(self.configured, MAX_INTERVAL)
        });
        (state.stretched.is_some() != was_over).then_some(PaceChange {
            tokens_per_day: self.budget.tokens_per_day,
            projected_per_day: projected.round() as u64,
            configured: self.configured,
            stretched: state.stretched,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(tokens_per_day: u64, secs: u64) -> Pace {
        Pace::new(TokenBudget { tokens_per_day }, Duration::from_secs(secs))
    }

    #[test]
    fn under_budget_the_interval_is_the_configured_one() {
        // 100 tokens every 30 s: 288,000 a day, within 300,000.
        let p = pace(300_000, 30);
        for _ in 0..20 {
            assert_eq!(p.record_tokens(100), None);
        }
        assert_eq!(p.interval(), Duration::from_secs(30));
    }

    #[test]
    fn over_budget_it_warns_once_and_stretches_until_the_day_fits() {
        // 32 tokens every second is 2,764,800 a day; 691,200 fit at one run per 4 s.
        let p = pace(691_200, 1);
        let change = p.record_tokens(32).unwrap();
        assert_eq!(
            change,
            PaceChange {
                tokens_per_day: 691_200,
                projected_per_day: 2_764_800,
                configured: Duration::from_secs(1),
                stretched: Some(Duration::from_secs(4)),
            }
        );
        assert_eq!(p.interval(), Duration::from_secs(4));
        // Still over: no new crossing to report, the stretch follows the rate.
        assert_eq!(p.record_tokens(32), None);
        // A longer answer: the mean of 32, 32 and 80 is 48 tokens a run, one per 6 s.
        assert_eq!(p.record_tokens(80), None);
        assert_eq!(p.interval(), Duration::from_secs(6));
    }

    #[test]
    fn when_use_falls_the_configured_interval_returns() {
        let p = pace(691_200, 1);
        assert!(p.record_tokens(32).is_some());
        // Runs that fail before the prompt is taken cost nothing: the mean falls under
        // 8 tokens a run (691,200 a day at 1 s) after enough of them.
        let changes: Vec<PaceChange> = (0..RECENT_RUNS).filter_map(|_| p.record_tokens(0)).collect();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].stretched, None);
        assert_eq!(p.interval(), Duration::from_secs(1));
    }

    #[test]
    fn a_run_larger_than_the_whole_budget_still_runs_once_a_day() {
        let p = pace(1_000, 60);
        let change = p.record_tokens(5_000).unwrap();
        assert_eq!(change.stretched, Some(MAX_INTERVAL));
        assert_eq!(p.interval(), MAX_INTERVAL);
    }
}
