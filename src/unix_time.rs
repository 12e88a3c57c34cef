//! Wall-clock times as milliseconds since the Unix epoch, the one conversion every
//! module uses: the store's columns, remote_write's sample timestamps, the dedup keys
//! of resolved pages. Both directions saturate instead of panicking or wrapping: a time
//! before the epoch is 0, one past what the integer holds is its largest value, and a
//! figure past what `SystemTime` holds on this platform is the latest time it does hold.
//!
//! May import: nothing of the crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch: 0 before it, `u64::MAX` past 584 million years.
pub fn unix_ms(t: SystemTime) -> u64 {
    let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// [`unix_ms`] for the signed 64-bit integers of SQLite and protobuf: `i64::MAX` past
/// 292 million years.
pub fn unix_ms_i64(t: SystemTime) -> i64 {
    i64::try_from(unix_ms(t)).unwrap_or(i64::MAX)
}

/// The time `ms` milliseconds after the epoch, or the latest time this platform's
/// `SystemTime` holds (to the second) when it holds no later one.
pub fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .unwrap_or_else(latest)
}

/// [`from_unix_ms`] for a signed figure: a negative one is the epoch.
pub fn from_unix_ms_i64(ms: i64) -> SystemTime {
    from_unix_ms(u64::try_from(ms).unwrap_or(0))
}

/// The latest whole second after the epoch that `SystemTime` holds; only reached for
/// figures beyond it, so the search costs nothing in practice.
fn latest() -> SystemTime {
    let fits = |s: u64| UNIX_EPOCH.checked_add(Duration::from_secs(s)).is_some();
    // Invariant: `low` fits, `high` does not (or is the largest u64, checked first).
    if fits(u64::MAX) {
        return UNIX_EPOCH + Duration::from_secs(u64::MAX);
    }
    let (mut low, mut high) = (0u64, u64::MAX);
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if fits(mid) {
            low = mid;
        } else {
            high = mid;
        }
    }
    UNIX_EPOCH + Duration::from_secs(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_to_the_millisecond() {
        let t = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        assert_eq!(unix_ms(t), 1_800_000_000_123);
        assert_eq!(unix_ms_i64(t), 1_800_000_000_123);
        assert_eq!(from_unix_ms(1_800_000_000_123), t);
        assert_eq!(from_unix_ms_i64(1_800_000_000_123), t);
        // Below a millisecond is cut, not rounded.
        assert_eq!(unix_ms(t + Duration::from_micros(999)), 1_800_000_000_123);
    }

    #[test]
    fn before_the_epoch_is_the_epoch() {
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(unix_ms(before), 0);
        assert_eq!(unix_ms_i64(before), 0);
        assert_eq!(from_unix_ms_i64(-1), UNIX_EPOCH);
        assert_eq!(from_unix_ms_i64(i64::MIN), UNIX_EPOCH);
        assert_eq!(from_unix_ms(0), UNIX_EPOCH);
    }

    #[test]
    fn the_far_future_saturates() {
        // Whatever this platform's `SystemTime` holds, nothing panics or wraps.
        let far = from_unix_ms(u64::MAX);
        assert!(far > UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        assert!(unix_ms(far) > 0);
        assert_eq!(from_unix_ms_i64(i64::MAX), from_unix_ms(i64::MAX as u64));
        if let Some(t) = UNIX_EPOCH.checked_add(Duration::from_millis(u64::MAX) + Duration::from_secs(1)) {
            assert_eq!(unix_ms(t), u64::MAX);
            assert_eq!(unix_ms_i64(t), i64::MAX);
        }
        let past_i64 = UNIX_EPOCH.checked_add(Duration::from_millis(i64::MAX as u64 + 1));
        if let Some(t) = past_i64 {
            assert_eq!(unix_ms_i64(t), i64::MAX);
            assert_eq!(unix_ms(t), i64::MAX as u64 + 1);
        }
    }

    #[test]
    fn the_latest_time_held_is_found() {
        let t = latest();
        assert!(
            t.checked_add(Duration::from_secs(1)).is_none()
                || t == UNIX_EPOCH + Duration::from_secs(u64::MAX)
        );
    }
}
