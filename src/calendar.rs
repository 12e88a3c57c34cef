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
                // Crontab fires when either day field matches; the cron crate when both
                // do. Rather than fire on fewer days than the line says, refuse it.
                if day != "*" && weekday != "*" {
                    return Err(format!(
                        "`{expr}` restricts both the day of the month and the weekday; crontab fires on either, this schedule would fire only on both: set one of them to `*`"
                    ));
                }
                let weekdays = crontab_weekdays(weekday).map_err(|why| format!("`{expr}`: {why}"))?;
                format!("0 {minute} {hour} {day} {month} {weekdays}")
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
        // Five years: 29 February comes round within four.
        let horizon = SystemTime::now() + std::time::Duration::from_secs(5 * 366 * 86_400);
        match calendar.next_after(SystemTime::now()) {
            Some(t) if t <= horizon => Ok(calendar),
            _ => Err(format!("`{expr}` does not fire within five years")),
        }
    }

    /// The first time it fires after `t`. Strictly after: in the hour a daylight-saving
    /// change repeats, the cron crate may give the earlier of a wall time's two
    /// instants, which has passed; a loop that waited for it would fire without pause.
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        let local = DateTime::<Utc>::from(t).with_timezone(&self.zone.chrono());
        self.schedule
            .after(&local)
            .take(4)
            .map(|next| SystemTime::from(next.with_timezone(&Utc)))
            .find(|next| *next > t)
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn zone(&self) -> TimeZone {
        self.zone
    }
}

/// Crontab's weekday field (0 or 7 Sunday, 1 Monday ... 6 Saturday; lists, ranges,
/// steps, names) as the list of names the cron crate reads: it counts 1 as Sunday, so
/// `0 9 * * 1` would otherwise fire on Sundays, and `5-7` (Friday to Sunday) would be a
/// range that runs backwards.
fn crontab_weekdays(field: &str) -> Result<String, String> {
    const NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    if field == "*" || field == "?" {
        return Ok(field.to_owned());
    }
    let day = |s: &str| -> Result<usize, String> {
        if let Ok(n) = s.parse::<usize>() {
            return match n {
                0..=6 => Ok(n),
                7 => Ok(7),
                _ => Err(format!("weekday {n} is not 0-7")),
            };
        }
        NAMES
            .iter()
            .position(|name| name.eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("`{s}` is not a weekday (0-7 or SUN-SAT)"))
    };
    let mut days = [false; 7];
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step = step
                    .parse::<usize>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("`{part}` has no step a weekday list can take"))?;
                (range, step)
            }
            None => (part, 1),
        };
        let (first, last) = match range {
            "*" => (0, 6),
            _ => match range.split_once('-') {
                Some((a, b)) => (day(a)?, day(b)?),
                None if step > 1 => (day(range)?, 6),
                None => {
                    let d = day(range)?;
                    (d, d)
                }
            },
        };
        if first > last {
            return Err(format!("`{range}` runs backwards"));
        }
        for d in (first..=last).step_by(step) {
            days[d % 7] = true;
        }
    }
    let names: Vec<&str> = (0..7).filter(|d| days[*d]).map(|d| NAMES[d]).collect();
    Ok(names.join(","))
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
        let ok = |f: &str| crontab_weekdays(f).unwrap();
        assert_eq!(ok("1"), "MON");
        assert_eq!(ok("1-5"), "MON,TUE,WED,THU,FRI");
        assert_eq!(ok("0,6"), "SUN,SAT");
        assert_eq!(ok("7"), "SUN");
        assert_eq!(ok("5-7"), "SUN,FRI,SAT");
        assert_eq!(ok("0-7"), "SUN,MON,TUE,WED,THU,FRI,SAT");
        assert_eq!(ok("*/2"), "SUN,TUE,THU,SAT");
        assert_eq!(ok("1-5/2"), "MON,WED,FRI");
        assert_eq!(ok("mon,Fri"), "MON,FRI");
        assert_eq!(ok("*"), "*");
        for bad in ["8", "5-2", "x", "1/0"] {
            assert!(crontab_weekdays(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_wall_time_the_clock_repeats_fires_once_then_not_again() {
        // Europe/Berlin falls back at 03:00 CEST on 2026-10-25: 02:30 comes twice.
        let berlin = TimeZone::parse("Europe/Berlin").unwrap();
        let half_two = Calendar::parse("30 2 * * *", berlin).unwrap();
        let after_first = at("2026-10-25T01:10:00Z"); // 02:10 CET, after 02:30 CEST
        let next = half_two.next_after(after_first).unwrap();
        assert!(next > after_first, "{next:?}");
        let again = half_two.next_after(next).unwrap();
        assert!(again > next);
    }

    #[test]
    fn both_day_fields_restricted_is_refused() {
        assert!(Calendar::parse("0 9 1 * 1", TimeZone::UTC).is_err());
        assert!(
            Calendar::parse("0 9 29 2 *", TimeZone::UTC).is_ok(),
            "a leap day comes within five years"
        );
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
