//! Cron expressions evaluated in an IANA timezone, with Chime's DST rules.
//!
//! Expressions have 6 or 7 fields, seconds first (`sec min hour day-of-month month
//! day-of-week [year]`), as the `cron` crate reads them: day-of-week is 1 = Sunday …
//! 7 = Saturday (or `SUN`-`SAT`), day-of-month and day-of-week must *both* match, and
//! Quartz extensions (`L`, `W`, `#`) are not supported.
//! A 5-field Unix line is accepted by prefixing `0 ` (fire at second 0) when its
//! day-of-week field uses no digits (`*`, `?` or names); numeric Unix day-of-week means
//! something else here (1 = Monday there), so it is refused with an explanation and the
//! line rewritten with day names, which mean the same days in both numberings.
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
    /// What runs: the expression with a 5-field line given its seconds field.
    normalised: String,
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
            normalised,
            timezone,
            schedule,
            every_hour,
        })
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The expression as it runs, seconds first: a 5-field line with `0 ` in front.
    pub fn normalised(&self) -> &str {
        &self.normalised
    }

    /// Whether the expression was written as a 5-field Unix line.
    pub fn is_five_field(&self) -> bool {
        self.expression.split_whitespace().count() == 5
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
        let explained = format!(
            "5-field cron {expression:?} has a numeric day-of-week, which Chime reads differently: its expressions put seconds first and number days 1 = Sunday … 7 = Saturday (Unix: 0 = Sunday, 1 = Monday)"
        );
        return Err(CronError::Expression(
            match unix_weekdays_as_names(fields[4]) {
                Some(days) => format!(
                    "{explained}; the same days written with names: \"0 {} {days}\"",
                    fields[..4].join(" ")
                ),
                None => format!("{explained}; write the days as names (SUN, MON, … SAT)"),
            },
        ));
    }
    Ok(format!("0 {}", fields.join(" ")))
}

/// A Unix day-of-week field (0 or 7 = Sunday, 1 = Monday … 6 = Saturday; lists, ranges,
/// steps and names) rewritten with day names, which mean the same days in Chime's
/// numbering; `*` for every day. `None` when the field is not understood: then no
/// rewrite is offered rather than one that might mean other days.
pub fn unix_weekdays_as_names(field: &str) -> Option<String> {
    const NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    let day = |text: &str| -> Option<u32> {
        match text.parse::<u32>() {
            Ok(n) if n <= 7 => Some(n),
            Ok(_) => None,
            Err(_) => NAMES
                .iter()
                .position(|name| name.eq_ignore_ascii_case(text))
                .map(|i| i as u32),
        }
    };
    let mut days = [false; 7];
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, step.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (item, 1),
        };
        let (first, last) = match range.split_once('-') {
            _ if range == "*" || range == "?" => (0, 6),
            Some((a, b)) => (day(a)?, day(b)?),
            // `n/step`: crons disagree on where it ends (6 or 7, a Sunday).
            None if item.contains('/') => return None,
            None => (day(range)?, day(range)?),
        };
        if first > last {
            return None;
        }
        for n in (first..=last).step_by(step as usize) {
            days[(n % 7) as usize] = true;
        }
    }
    if days.iter().all(|d| *d) {
        return Some("*".into());
    }
    let mut parts = Vec::new();
    let mut n = 0;
    while n < 7 {
        if !days[n] {
            n += 1;
            continue;
        }
        let start = n;
        while n + 1 < 7 && days[n + 1] {
            n += 1;
        }
        parts.push(match n - start {
            0 => NAMES[start].to_string(),
            1 => format!("{},{}", NAMES[start], NAMES[n]),
            _ => format!("{}-{}", NAMES[start], NAMES[n]),
        });
        n += 1;
    }
    Some(parts.join(","))
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
        assert!(s.is_five_field());
        assert_eq!(s.expression(), "*/5 * * * *");
        assert_eq!(s.normalised(), "0 */5 * * * *");
        let six = CronSchedule::parse("0 */5 * * * *", "UTC").unwrap();
        assert!(!six.is_five_field());
        assert_eq!(six.normalised(), six.expression());
        assert!(CronSchedule::parse("0 9 * * MON-FRI", "UTC").is_ok());
        let err = CronSchedule::parse("0 9 * * 1-5", "UTC").unwrap_err();
        let CronError::Expression(message) = err else {
            panic!("an expression error")
        };
        assert!(message.contains("1 = Sunday"), "{message}");
        assert!(
            message.ends_with("\"0 0 9 * * MON-FRI\""),
            "the hint is the renumbered line, ready to paste: {message}"
        );
    }

    #[test]
    fn unix_weekdays_become_names() {
        for (unix, names) in [
            ("1-5", "MON-FRI"),
            ("0", "SUN"),
            ("7", "SUN"),
            ("0,6", "SUN,SAT"),
            ("5-7", "SUN,FRI,SAT"),
            ("*/2", "SUN,TUE,THU,SAT"),
            ("1-5/2", "MON,WED,FRI"),
            ("0-6", "*"),
            ("mon,3", "MON,WED"),
        ] {
            assert_eq!(
                unix_weekdays_as_names(unix).as_deref(),
                Some(names),
                "{unix}"
            );
        }
        for unclear in ["8", "5-1", "1/0", "2/2", "L", "1#2", ""] {
            assert_eq!(unix_weekdays_as_names(unclear), None, "{unclear}");
        }
    }

    /// The Unix meaning of day-of-week field `field` for weekday `day` (0 = Sunday), by
    /// the classic cron rules, written independently of the conversion.
    fn unix_matches(field: &str, day: u32) -> bool {
        field.split(',').any(|item| {
            let (range, step) = item
                .split_once('/')
                .map_or((item, 1), |(r, s)| (r, s.parse::<u32>().unwrap()));
            let (lo, hi) = match range.split_once('-') {
                _ if range == "*" => (0, 7),
                Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                None => (range.parse().unwrap(), range.parse().unwrap()),
            };
            (lo..=hi).step_by(step as usize).any(|n: u32| n % 7 == day)
        })
    }

    proptest::proptest! {
        /// The rewritten line, pasted, fires on exactly the days the Unix line meant.
        #[test]
        fn renumbered_hints_fire_on_the_unix_days(
            items in proptest::collection::vec((0u32..=7, 0u32..=7, 1u32..=7, 0u8..5), 1..4)
        ) {
            let field = items
                .iter()
                .map(|&(a, b, step, kind)| match kind {
                    0 => a.to_string(),
                    1 => format!("{}-{}", a.min(b), a.max(b)),
                    2 => format!("{}-{}/{step}", a.min(b), a.max(b)),
                    3 => format!("*/{step}"),
                    _ => "*".to_string(),
                })
                .collect::<Vec<_>>()
                .join(",");
            let names = unix_weekdays_as_names(&field).expect("a plain field converts");
            let schedule = CronSchedule::parse(&format!("0 0 12 * * {names}"), "UTC").unwrap();
            // 2026-11-22 is a Sunday: one fire check per day of the following week.
            let mut fired = [false; 7];
            let mut t = at("2026-11-21T13:00:00Z");
            while let Some(next) = schedule.next_after(t) {
                if next >= at("2026-11-29T00:00:00Z") {
                    break;
                }
                fired[next.format("%w").to_string().parse::<usize>().unwrap()] = true;
                t = next;
            }
            for day in 0..7u32 {
                proptest::prop_assert_eq!(fired[day as usize], unix_matches(&field, day), "{} -> {} on day {}", field, names, day);
            }
        }
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
