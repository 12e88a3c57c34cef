//! Wall-clock times as people in one place read them: an IANA time zone (`agent.timezone`,
//! `report --timezone`) and the local time of a `SystemTime` in it, with its offset. The
//! report, the status page and (later) pages share it, so a time reads the same
//! everywhere. A leaf: it imports no other module of the crate.
//!
//! The zone rules are chrono-tz's compiled copy of the IANA database, so a zone's
//! daylight-saving changes are applied by date, and no system zoneinfo is needed (the
//! container image has none).

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Offset, Utc};

/// A named IANA time zone; UTC by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeZone(chrono_tz::Tz);

/// A name that is not a zone of the IANA database.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not an IANA time zone name{}; use one like Asia/Shanghai, Europe/Berlin or UTC", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
pub struct UnknownTimeZone {
    pub name: String,
    /// The zone the name was most likely meant to be, when one differs only in case.
    pub suggestion: Option<String>,
}

impl TimeZone {
    pub const UTC: TimeZone = TimeZone(chrono_tz::Tz::UTC);

    /// `Asia/Shanghai`, `UTC`, `Etc/GMT-8`: exactly as the database spells it. A name
    /// that differs only in case is refused with the right spelling suggested, so a
    /// config says what the report prints.
    pub fn parse(name: &str) -> Result<TimeZone, UnknownTimeZone> {
        if let Ok(tz) = name.parse::<chrono_tz::Tz>() {
            return Ok(TimeZone(tz));
        }
        let suggestion = chrono_tz::TZ_VARIANTS
            .iter()
            .find(|tz| tz.name().eq_ignore_ascii_case(name.trim()))
            .map(|tz| tz.name().to_owned());
        Err(UnknownTimeZone {
            name: name.to_owned(),
            suggestion,
        })
    }

    /// The IANA name: `Asia/Shanghai`, `UTC`.
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// The zone as chrono reads it, for schedules computed in it (calendar.rs).
    pub fn chrono(&self) -> chrono_tz::Tz {
        self.0
    }

    pub fn is_utc(&self) -> bool {
        self.0 == chrono_tz::Tz::UTC
    }

    fn local(&self, t: SystemTime) -> DateTime<chrono_tz::Tz> {
        DateTime::<Utc>::from(t).with_timezone(&self.0)
    }

    /// `2026-12-02 04:18:05`, local time without the zone: for tables whose header
    /// names it ([`TimeZone::label`]).
    pub fn clock(&self, t: SystemTime) -> String {
        self.local(t).format("%Y-%m-%d %H:%M:%S").to_string()
    }

    /// `2026-12-02 04:18`, for chart axes and notes where seconds are noise.
    pub fn minutes(&self, t: SystemTime) -> String {
        self.local(t).format("%Y-%m-%d %H:%M").to_string()
    }

    /// `12-02`, or `12-02 04:00` when `with_time`: a chart's axis labels.
    pub fn short(&self, t: SystemTime, with_time: bool) -> String {
        let format = if with_time { "%m-%d %H:%M" } else { "%m-%d" };
        self.local(t).format(format).to_string()
    }

    /// The offset from UTC at `t`: `+08:00`, `+00:00`.
    pub fn offset(&self, t: SystemTime) -> String {
        let seconds = self.local(t).offset().fix().local_minus_utc();
        let sign = if seconds < 0 { '-' } else { '+' };
        let minutes = seconds.unsigned_abs() / 60;
        format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60)
    }

    /// How a time's zone is named beside it: `UTC`, or `Asia/Shanghai (UTC+08:00)` with
    /// the offset in force at `t`.
    pub fn label(&self, t: SystemTime) -> String {
        if self.is_utc() {
            "UTC".to_owned()
        } else {
            format!("{} (UTC{})", self.name(), self.offset(t))
        }
    }

    /// `2026-12-02 04:18:05 +08:00`: one time that stands alone.
    pub fn clock_with_offset(&self, t: SystemTime) -> String {
        if self.is_utc() {
            format!("{} UTC", self.clock(t))
        } else {
            format!("{} {}", self.clock(t), self.offset(t))
        }
    }
}

/// The local midnight at or before `t` in `zone`, for a day's label; `t` itself where a
/// day has no midnight (a zone that skips it on a daylight-saving change).
pub fn local_midnight(zone: TimeZone, t: SystemTime) -> SystemTime {
    let local = zone.local(t);
    let since_midnight = local.time().signed_duration_since(chrono::NaiveTime::MIN);
    let back = since_midnight.to_std().unwrap_or(Duration::ZERO);
    t.checked_sub(back)
        .filter(|m| zone.local(*m).date_naive() == local.date_naive())
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn shanghai_is_eight_hours_ahead_and_says_so() {
        let tz = TimeZone::parse("Asia/Shanghai").unwrap();
        // 2026-12-01 20:18:05 UTC
        let t = UNIX_EPOCH + Duration::from_secs(1_796_156_285);
        assert_eq!(TimeZone::UTC.clock(t), "2026-12-01 20:18:05");
        assert_eq!(tz.clock(t), "2026-12-02 04:18:05");
        assert_eq!(tz.offset(t), "+08:00");
        assert_eq!(tz.label(t), "Asia/Shanghai (UTC+08:00)");
        assert_eq!(tz.clock_with_offset(t), "2026-12-02 04:18:05 +08:00");
        assert_eq!(TimeZone::UTC.label(t), "UTC");
        assert_eq!(TimeZone::UTC.clock_with_offset(t), "2026-12-01 20:18:05 UTC");
        assert_eq!(tz.short(t, false), "12-02");
        assert_eq!(tz.short(t, true), "12-02 04:18");
        assert_eq!(tz.clock(local_midnight(tz, t)), "2026-12-02 00:00:00");
        assert_eq!(TimeZone::default(), TimeZone::UTC);
    }

    #[test]
    fn daylight_saving_changes_the_offset_by_date() {
        let tz = TimeZone::parse("America/New_York").unwrap();
        let winter = UNIX_EPOCH + Duration::from_secs(1_796_156_285); // December
        let summer = UNIX_EPOCH + Duration::from_secs(1_783_000_000); // July
        assert_eq!(tz.offset(winter), "-05:00");
        assert_eq!(tz.offset(summer), "-04:00");
        let india = TimeZone::parse("Asia/Kolkata").unwrap();
        assert_eq!(india.offset(winter), "+05:30");
    }

    #[test]
    fn unknown_names_are_refused_with_the_spelling_suggested() {
        let e = TimeZone::parse("asia/shanghai").unwrap_err();
        assert_eq!(e.suggestion.as_deref(), Some("Asia/Shanghai"));
        assert!(e.to_string().contains("did you mean `Asia/Shanghai`?"), "{e}");
        let e = TimeZone::parse("Mars/Olympus").unwrap_err();
        assert_eq!(e.suggestion, None);
        assert_eq!(
            e.to_string(),
            "`Mars/Olympus` is not an IANA time zone name; use one like Asia/Shanghai, Europe/Berlin or UTC"
        );
        for bad in ["", " ", "+08:00", "CST-8x"] {
            assert!(TimeZone::parse(bad).is_err(), "{bad:?}");
        }
    }
}
