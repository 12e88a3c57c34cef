//! A cron schedule read in a time zone: when a digest or the weekly report goes out
//! ("09:00 every Monday in Asia/Shanghai"). Probes' cron schedules run in UTC on the
//! scheduler's clock; these are wall-clock times people expect at their desks, so a
//! daylight-saving change moves them with the zone.
//!
//! The expression is cron's five fields (`0 9 * * 1`, as crontab, systemd users and
//! Kubernetes CronJobs write it) or six or seven with seconds first (as probes'
//! `schedule`), which the tests use to fire every few seconds.

use std::str::FromStr;
use std::time::SystemTime;

use chrono::{DateTime, Utc};

use crate::time_zone::TimeZone;

/// A cron schedule and the zone its fields are read in.
#[derive(Debug, Clone)]
pub struct Calendar {
    expr: String,
    schedule: cron::Schedule,
    zone: TimeZone,
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        self.expr == other.expr && self.zone == other.zone
    }
}

impl Calendar {
    /// `expr` in `zone`; the error says what a valid one looks like.
    pub fn parse(expr: &str, zone: TimeZone) -> Result<Calendar, String> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let full = match fields[..] {
            [minute, hour, day, month, weekday] => {
                format!("0 {minute} {hour} {day} {month} {}", crontab_weekdays(weekday))
            }
            _ => expr.to_owned(),
        };
        let schedule = cron::Schedule::from_str(&full).map_err(|_| {
            format!("`{expr}` is not a cron schedule: 5 fields (minute hour day month weekday, e.g. `0 9 * * 1`), or 6 with seconds first")
        })?;
        let calendar = Calendar {
            expr: expr.to_owned(),
            schedule,
            zone,
        };
        let horizon = SystemTime::now() + std::time::Duration::from_secs(400 * 86_400);
        match calendar.next_after(SystemTime::now()) {
            Some(t) if t <= horizon => Ok(calendar),
            _ => Err(format!("`{expr}` does not fire within a year")),
        }
    }

    /// The first time it fires after `t`.
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        let local = DateTime::<Utc>::from(t).with_timezone(&self.zone.chrono());
        let next = self.schedule.after(&local).next()?;
        Some(SystemTime::from(next.with_timezone(&Utc)))
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn zone(&self) -> TimeZone {
        self.zone
    }
}

/// Crontab's weekday numbers (0 or 7 Sunday, 1 Monday ... 6 Saturday) as names: the
/// cron crate counts 1 as Sunday, so `0 9 * * 1` would otherwise fire on Sundays.
fn crontab_weekdays(field: &str) -> String {
    const NAMES: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
    let mut out = String::new();
    let mut digits = String::new();
    // Digits after a `/` are a step, not a day.
    let mut in_step = false;
    for c in field.chars().chain(std::iter::once(',')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if !digits.is_empty() {
            match digits.parse::<usize>().ok().and_then(|d| NAMES.get(d)) {
                Some(name) if !in_step => out.push_str(name),
                _ => out.push_str(&digits),
            }
            digits.clear();
        }
        in_step = c == '/';
        out.push(c);
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> SystemTime {
        humantime::parse_rfc3339(rfc3339).unwrap()
    }

    #[test]
    fn nine_on_monday_in_shanghai_is_one_on_monday_in_utc() {
        let shanghai = TimeZone::parse("Asia/Shanghai").unwrap();
        let monday_nine = Calendar::parse("0 9 * * 1", shanghai).unwrap();
        // Friday 2026-12-04 12:00 UTC: the next Monday 09:00 in Shanghai is 01:00 UTC.
        let next = monday_nine.next_after(at("2026-12-04T12:00:00Z")).unwrap();
        assert_eq!(next, at("2026-12-07T01:00:00Z"));
        let utc = Calendar::parse("0 9 * * 1", TimeZone::UTC).unwrap();
        assert_eq!(
            utc.next_after(at("2026-12-04T12:00:00Z")),
            Some(at("2026-12-07T09:00:00Z"))
        );
    }

    #[test]
    fn a_daily_time_follows_daylight_saving() {
        let berlin = TimeZone::parse("Europe/Berlin").unwrap();
        let eight = Calendar::parse("0 8 * * *", berlin).unwrap();
        // CET (+01:00) in winter, CEST (+02:00) in summer.
        assert_eq!(
            eight.next_after(at("2026-01-10T12:00:00Z")),
            Some(at("2026-01-11T07:00:00Z"))
        );
        assert_eq!(
            eight.next_after(at("2026-07-10T12:00:00Z")),
            Some(at("2026-07-11T06:00:00Z"))
        );
    }

    #[test]
    fn crontab_weekdays_count_from_sunday_zero() {
        assert_eq!(crontab_weekdays("1"), "MON");
        assert_eq!(crontab_weekdays("1-5"), "MON-FRI");
        assert_eq!(crontab_weekdays("0,6"), "SUN,SAT");
        assert_eq!(crontab_weekdays("7"), "SUN");
        assert_eq!(crontab_weekdays("*/2"), "*/2");
        assert_eq!(crontab_weekdays("mon"), "mon");
    }

    #[test]
    fn seconds_first_and_bad_schedules() {
        let fast = Calendar::parse("*/5 * * * * *", TimeZone::UTC).unwrap();
        let t = at("2026-12-04T12:00:01Z");
        assert_eq!(fast.next_after(t), Some(at("2026-12-04T12:00:05Z")));
        for bad in ["every monday", "0 9 * *", "0 0 30 2 *"] {
            assert!(Calendar::parse(bad, TimeZone::UTC).is_err(), "{bad}");
        }
    }
}
