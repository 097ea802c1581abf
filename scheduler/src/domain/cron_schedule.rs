//! Cron expressions evaluated in an IANA timezone, with Chime's DST rules.
//!
//! Expressions have 6 or 7 fields, seconds first (`sec min hour day-of-month month
//! day-of-week [year]`), as the `cron` crate reads them: day-of-week is 1 = Sunday …
//! 7 = Saturday (or `SUN`-`SAT`), day-of-month and day-of-week must *both* match, and
//! Quartz extensions (`L`, `W`, `#`) are not supported.
//! A 5-field Unix line is accepted by prefixing `0 ` (fire at second 0) when its
//! day-of-week field uses no digits (`*`, `?` or names); numeric Unix day-of-week means
//! something else here (1 = Monday there), so it is refused with an explanation.
//!
//! The expression is matched against wall-clock time in the job's timezone. Fire times are
//! stored in UTC. Around DST changes:
//! - **gap** (spring forward, e.g. 02:00–03:00 does not exist): a wall-clock time in the gap
//!   fires at the same offset past the transition (RFC 5545: the time is read with the
//!   offset in force before the change), so a daily `02:30` job fires at 03:30 that day.
//!   If that instant is also a regular fire time, it fires once.
//! - **overlap** (fall back, e.g. 02:00–03:00 happens twice): a wall-clock time fires once,
//!   at its first occurrence — except when the hour field is `*` (every hour): then the
//!   repeated hour fires again, so "every 15 minutes" keeps firing every 15 minutes of
//!   real time through the change.

use std::str::FromStr;

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use cron::TimeUnitSpec;

/// The longest DST shift any zone makes (2 h historically), with margin.
const MAX_DST_SHIFT: Duration = Duration::hours(3);

/// Upper bound on expression points examined for one `next_after`, against pathological
/// expressions; no real schedule comes near it.
const MAX_STEPS: usize = 100_000;

/// A parsed cron expression in a timezone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    timezone: Tz,
    schedule: cron::Schedule,
    every_hour: bool,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression && self.timezone == other.timezone
    }
}

/// Why an expression or timezone was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CronError {
    /// The expression does not parse.
    Expression(String),
    /// The timezone is not an IANA zone name.
    Timezone(String),
}

impl CronSchedule {
    /// Parses `expression` (see the module docs) in IANA zone `timezone`.
    pub fn parse(expression: &str, timezone: &str) -> Result<Self, CronError> {
        let timezone = Tz::from_str(timezone.trim()).map_err(|_| {
            CronError::Timezone(format!(
                "unknown timezone {timezone:?}: use an IANA name such as \"UTC\" or \"Europe/Berlin\""
            ))
        })?;
        let normalised = normalise(expression)?;
        let schedule = cron::Schedule::from_str(&normalised).map_err(|e| {
            // The parser's message ends with the reason, after a caret diagram.
            let text = e.to_string();
            let reason = text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or(&text).trim();
            CronError::Expression(format!(
                "invalid cron expression {expression:?}: {reason} (expected `sec min hour day-of-month month day-of-week [year]`, e.g. \"0 */2 * * * *\")"
            ))
        })?;
        let every_hour = schedule.hours().is_all();
        Ok(Self {
            expression: expression.trim().to_string(),
            timezone,
            schedule,
            every_hour,
        })
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The timezone.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// The first fire time strictly after `after`, or `None` if the expression never fires
    /// again (a year field in the past).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Wall-clock order and instant order agree except within MAX_DST_SHIFT of a
        // transition; there, start earlier and keep looking a little past the first hit.
        let start = self.local(after) - self.offset_swing(after) - Duration::seconds(1);
        let mut best: Option<DateTime<Utc>> = None;
        let mut stop_after: Option<NaiveDateTime> = None;
        for wall in self
            .schedule
            .after(&Utc.from_utc_datetime(&start))
            .take(MAX_STEPS)
            .map(|proxy| proxy.naive_utc())
        {
            if stop_after.is_some_and(|stop| wall > stop) {
                break;
            }
            for instant in self.instants_of(wall).into_iter().flatten() {
                if instant > after && best.is_none_or(|b| instant < b) {
                    best = Some(instant);
                }
            }
            if let (Some(found), None) = (best, stop_after) {
                stop_after = Some(wall + self.offset_swing(found));
            }
        }
        best
    }

    fn local(&self, instant: DateTime<Utc>) -> NaiveDateTime {
        instant.with_timezone(&self.timezone).naive_local()
    }

    fn offset_at(&self, instant: DateTime<Utc>) -> Duration {
        let seconds = self
            .timezone
            .offset_from_utc_datetime(&instant.naive_utc())
            .fix()
            .local_minus_utc();
        Duration::seconds(seconds.into())
    }

    /// How far the UTC offset moves within MAX_DST_SHIFT of `instant` (zero far from any
    /// transition).
    fn offset_swing(&self, instant: DateTime<Utc>) -> Duration {
        let here = self.offset_at(instant);
        let before = self.offset_at(instant - MAX_DST_SHIFT);
        let after = self.offset_at(instant + MAX_DST_SHIFT);
        (here - before).abs().max((after - here).abs())
    }

    /// The instants at which wall-clock time `wall` fires (see the module's DST rules).
    fn instants_of(&self, wall: NaiveDateTime) -> [Option<DateTime<Utc>>; 2] {
        match self.timezone.from_local_datetime(&wall) {
            LocalResult::Single(t) => [Some(t.with_timezone(&Utc)), None],
            LocalResult::Ambiguous(first, second) => [
                Some(first.with_timezone(&Utc)),
                self.every_hour.then(|| second.with_timezone(&Utc)),
            ],
            LocalResult::None => {
                let offset_before = match self.timezone.from_local_datetime(&(wall - MAX_DST_SHIFT))
                {
                    LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => {
                        Duration::seconds(t.offset().fix().local_minus_utc().into())
                    }
                    LocalResult::None => return [None, None],
                };
                [Some(Utc.from_utc_datetime(&(wall - offset_before))), None]
            }
        }
    }
}

/// Accepts 6/7-field expressions and `@daily`-style shorthands as they are; turns a 5-field
/// Unix line into 6 fields when that cannot change its meaning.
fn normalise(expression: &str) -> Result<String, CronError> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    if fields.len() != 5 {
        return Ok(fields.join(" "));
    }
    if fields[4].bytes().any(|b| b.is_ascii_digit()) {
        return Err(CronError::Expression(format!(
            "5-field cron {expression:?} with a numeric day-of-week is ambiguous here: Chime expressions put seconds first and number days 1 = Sunday … 7 = Saturday; write day names (MON-FRI) or use 6 fields, e.g. \"0 {expression}\" after renumbering"
        )));
    }
    Ok(format!("0 {}", fields.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn fires(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
        let schedule = CronSchedule::parse(expr, tz).unwrap();
        let mut t = at(from);
        (0..n)
            .map(|_| {
                t = schedule.next_after(t).unwrap();
                t.with_timezone(&schedule.timezone()).to_rfc3339()
            })
            .collect()
    }

    #[test]
    fn month_ends_and_leap_years() {
        assert_eq!(
            fires("0 0 12 31 * *", "UTC", "2026-01-31T12:00:00Z", 3),
            [
                "2026-03-31T12:00:00+00:00",
                "2026-05-31T12:00:00+00:00",
                "2026-07-31T12:00:00+00:00"
            ]
        );
        assert_eq!(
            fires("0 0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", 2),
            ["2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"]
        );
        assert!(
            CronSchedule::parse("0 0 0 L * *", "UTC").is_err(),
            "L (last day of month) is not supported by the cron crate; documented"
        );
    }

    #[test]
    fn timezone_offsets_apply() {
        assert_eq!(
            fires("0 30 9 * * *", "Asia/Shanghai", "2026-11-21T00:00:00Z", 1),
            ["2026-11-21T09:30:00+08:00"]
        );
    }

    #[test]
    fn dst_gap_daily_job_fires_after_the_change() {
        // Europe/Berlin springs forward on 2026-03-29: 02:00 CET -> 03:00 CEST.
        assert_eq!(
            fires("0 30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", 3),
            [
                "2026-03-28T02:30:00+01:00",
                "2026-03-29T03:30:00+02:00",
                "2026-03-30T02:30:00+02:00"
            ]
        );
    }

    #[test]
    fn dst_gap_frequent_job_keeps_real_time_spacing() {
        assert_eq!(
            fires("0 */30 * * * *", "Europe/Berlin", "2026-03-29T00:15:00Z", 4),
            [
                "2026-03-29T01:30:00+01:00",
                "2026-03-29T03:00:00+02:00",
                "2026-03-29T03:30:00+02:00",
                "2026-03-29T04:00:00+02:00"
            ]
        );
    }

    #[test]
    fn dst_overlap_daily_job_fires_once() {
        // Europe/Berlin falls back on 2026-10-25: 03:00 CEST -> 02:00 CET.
        assert_eq!(
            fires("0 30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
            ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
        );
    }

    #[test]
    fn dst_overlap_hourly_wildcard_fires_in_both_passes() {
        assert_eq!(
            fires("0 0,30 * * * *", "Europe/Berlin", "2026-10-24T23:45:00Z", 5),
            [
                "2026-10-25T02:00:00+02:00",
                "2026-10-25T02:30:00+02:00",
                "2026-10-25T02:00:00+01:00",
                "2026-10-25T02:30:00+01:00",
                "2026-10-25T03:00:00+01:00"
            ]
        );
    }

    #[test]
    fn dst_in_new_york() {
        // America/New_York springs forward 2026-03-08 02:00 -> 03:00.
        assert_eq!(
            fires(
                "0 15 2 * * *",
                "America/New_York",
                "2026-03-07T12:00:00Z",
                2
            ),
            ["2026-03-08T03:15:00-04:00", "2026-03-09T02:15:00-04:00"]
        );
    }

    #[test]
    fn five_field_lines() {
        let s = CronSchedule::parse("*/5 * * * *", "UTC").unwrap();
        assert_eq!(
            s.next_after(at("2026-11-21T10:01:07Z")),
            Some(at("2026-11-21T10:05:00Z"))
        );
        assert!(CronSchedule::parse("0 9 * * MON-FRI", "UTC").is_ok());
        let err = CronSchedule::parse("0 9 * * 1-5", "UTC").unwrap_err();
        assert!(matches!(err, CronError::Expression(m) if m.contains("1 = Sunday")));
    }

    #[test]
    fn bad_input() {
        assert!(matches!(
            CronSchedule::parse("0 61 * * * *", "UTC"),
            Err(CronError::Expression(_))
        ));
        assert!(matches!(
            CronSchedule::parse("0 * * * * *", "Mars/Olympus"),
            Err(CronError::Timezone(_))
        ));
    }

    #[test]
    fn expression_that_never_fires_again() {
        let s = CronSchedule::parse("0 0 0 1 1 * 2020", "UTC").unwrap();
        assert_eq!(s.next_after(at("2026-01-01T00:00:00Z")), None);
    }
}
