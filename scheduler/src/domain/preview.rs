//! Previewing a schedule: the next fires it will make, each as a UTC instant and as the
//! wall-clock time of the schedule's time zone, so an operator (or a form) sees "the next
//! 10 fires" before saving or while a job runs. Pure: the caller passes the clock.

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;

use super::{
    schedule::{Schedule, truncate_ms},
    validation::FieldError,
};

/// Fires shown when the caller names no count.
pub const DEFAULT_COUNT: u32 = 10;
/// Most fires one preview shows.
pub const MAX_COUNT: u32 = 100;

/// One upcoming fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpcomingFire {
    /// When it fires.
    pub at: DateTime<Utc>,
    /// The same instant in the schedule's time zone, RFC 3339 with its offset.
    pub local: String,
}

/// A schedule's next fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The IANA time zone of `local` (`UTC` for intervals and one-shots).
    pub timezone: String,
    /// Ascending; fewer than asked when the schedule ends sooner (a one-shot).
    pub fires: Vec<UpcomingFire>,
}

/// Checks a requested count: absent means [`DEFAULT_COUNT`], else 1 to [`MAX_COUNT`].
pub fn check_count(count: Option<u32>) -> Result<usize, FieldError> {
    match count.unwrap_or(DEFAULT_COUNT) {
        n @ 1..=MAX_COUNT => Ok(n as usize),
        n => Err(FieldError::new(
            "count",
            format!("count must be 1 to {MAX_COUNT}, not {n}"),
        )),
    }
}

/// The first `count` fires of `schedule` from `first` (a point of the schedule, included;
/// `None`: it fires no more).
pub fn upcoming(schedule: &Schedule, first: Option<DateTime<Utc>>, count: usize) -> Preview {
    let timezone = match schedule {
        Schedule::Cron(cron) => cron.timezone(),
        Schedule::Every(_) | Schedule::At(_) => Tz::UTC,
    };
    let mut fires = Vec::with_capacity(count);
    let mut next = first;
    while let (Some(at), true) = (next, fires.len() < count) {
        fires.push(UpcomingFire {
            at,
            local: at
                .with_timezone(&timezone)
                .to_rfc3339_opts(SecondsFormat::Millis, false),
        });
        next = first.and_then(|anchor| schedule.next_after(anchor, at));
    }
    Preview {
        timezone: timezone.name().to_string(),
        fires,
    }
}

/// The fires a schedule not yet saved would make if saved at `now`.
pub fn for_new_schedule(schedule: &Schedule, now: DateTime<Utc>, count: usize) -> Preview {
    upcoming(schedule, schedule.first_fire(truncate_ms(now)), count)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::domain::schedule::ScheduleSpec;

    fn schedule(spec: ScheduleSpec) -> Schedule {
        Schedule::from_spec(&spec).unwrap()
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn cron_fires_are_shown_in_the_schedule_time_zone_across_a_dst_change() {
        let cron = schedule(ScheduleSpec {
            cron: Some("0 30 2 * * *".into()),
            timezone: Some("Europe/Paris".into()),
            ..ScheduleSpec::default()
        });
        // 2026-03-29: clocks go from 02:00 to 03:00 in Paris; 02:30 does not exist.
        let now = at("2026-03-27T12:00:00Z");
        let preview = for_new_schedule(&cron, now, 4);
        assert_eq!(preview.timezone, "Europe/Paris");
        let local: Vec<&str> = preview.fires.iter().map(|f| f.local.as_str()).collect();
        assert_eq!(local[0], "2026-03-28T02:30:00.000+01:00");
        assert_eq!(local[2], "2026-03-30T02:30:00.000+02:00");
        assert_eq!(preview.fires[0].at, at("2026-03-28T01:30:00Z"));
        assert!(preview.fires.windows(2).all(|w| w[0].at < w[1].at));
        assert_eq!(preview.fires.len(), 4);
    }

    #[test]
    fn intervals_count_from_the_first_fire_and_one_shots_end() {
        let every = schedule(ScheduleSpec {
            every: Some("90s".into()),
            ..ScheduleSpec::default()
        });
        let first = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let preview = upcoming(&every, Some(first), 3);
        let points: Vec<_> = preview.fires.iter().map(|f| f.at).collect();
        assert_eq!(
            points,
            [
                first,
                first + chrono::Duration::seconds(90),
                first + chrono::Duration::seconds(180)
            ]
        );
        assert_eq!(preview.fires[0].local, "2026-01-01T00:00:00.000+00:00");
        assert_eq!(preview.timezone, "UTC");

        let once = schedule(ScheduleSpec {
            at: Some("2026-06-01T08:00:00Z".into()),
            ..ScheduleSpec::default()
        });
        assert_eq!(
            upcoming(&once, Some(at("2026-06-01T08:00:00Z")), 10)
                .fires
                .len(),
            1
        );
        assert!(upcoming(&once, None, 10).fires.is_empty());
    }

    #[test]
    fn counts_default_to_ten_and_stay_within_one_to_a_hundred() {
        assert_eq!(check_count(None).unwrap(), 10);
        assert_eq!(check_count(Some(1)).unwrap(), 1);
        assert_eq!(check_count(Some(100)).unwrap(), 100);
        for bad in [0, 101] {
            let error = check_count(Some(bad)).unwrap_err();
            assert_eq!(error.field, "count");
        }
    }
}
