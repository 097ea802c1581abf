//! Previewing a schedule: the next fires it will make, each as a UTC instant and as the
//! wall-clock time of the schedule's time zone, so an operator (or a form) sees "the next
//! 10 fires" before saving or while a job runs. Fires outside the job's window
//! (`start_at`, `end_at`) are not shown; a stored job's jittered fires also show when
//! they are published. Pure: the caller passes the clock.

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use uuid::Uuid;

use super::{
    schedule::{Schedule, truncate_ms},
    schedule_words,
    validation::FieldError,
    window::Window,
};

/// Fires shown when the caller names no count.
pub const DEFAULT_COUNT: u32 = 10;
/// Most fires one preview shows.
pub const MAX_COUNT: u32 = 100;

/// One upcoming fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpcomingFire {
    /// When it fires: the nominal fire time, the run's `fire_time`.
    pub at: DateTime<Utc>,
    /// The same instant in the schedule's time zone, RFC 3339 with its offset.
    pub local: String,
    /// When its task is published, `at` plus the fire's jitter: a stored job with a
    /// jitter only (a schedule not yet saved has no job id to derive it from).
    pub due: Option<DateTime<Utc>>,
}

/// A schedule's next fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The IANA time zone of `local` (`UTC` for intervals and one-shots).
    pub timezone: String,
    /// Ascending; fewer than asked when the schedule ends sooner (a one-shot).
    pub fires: Vec<UpcomingFire>,
    /// The schedule in words, with its time zone (see [`schedule_words::describe`]).
    pub description: String,
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
/// `None`: it fires no more), none past the window's `end_at`; `job` (a stored job's id)
/// gives each fire its jittered publish time.
pub fn upcoming(
    schedule: &Schedule,
    window: &Window,
    job: Option<Uuid>,
    first: Option<DateTime<Utc>>,
    count: usize,
) -> Preview {
    let timezone = match schedule {
        Schedule::Cron(cron) => cron.timezone(),
        Schedule::Every(_) | Schedule::At(_) => Tz::UTC,
    };
    let mut fires = Vec::with_capacity(count);
    let jittered = window.jitter.is_some_and(|j| !j.get().is_zero());
    let mut next = window.before_end(first);
    while let (Some(at), true) = (next, fires.len() < count) {
        fires.push(UpcomingFire {
            at,
            local: at
                .with_timezone(&timezone)
                .to_rfc3339_opts(SecondsFormat::Millis, false),
            due: job.filter(|_| jittered).map(|job| window.due_time(job, at)),
        });
        next = window.before_end(first.and_then(|anchor| schedule.next_after(anchor, at)));
    }
    Preview {
        timezone: timezone.name().to_string(),
        fires,
        description: schedule_words::describe(schedule),
    }
}

/// The fires a schedule not yet saved would make if saved at `now` with `window`.
pub fn for_new_schedule(
    schedule: &Schedule,
    window: &Window,
    now: DateTime<Utc>,
    count: usize,
) -> Preview {
    let first = window.first_fire(schedule, truncate_ms(now));
    upcoming(schedule, window, None, first, count)
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
        let preview = for_new_schedule(&cron, &Window::default(), now, 4);
        assert_eq!(preview.timezone, "Europe/Paris");
        assert_eq!(preview.description, "every day at 02:30:00, Europe/Paris");
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
        let preview = upcoming(&every, &Window::default(), None, Some(first), 3);
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
            upcoming(
                &once,
                &Window::default(),
                None,
                Some(at("2026-06-01T08:00:00Z")),
                10
            )
            .fires
            .len(),
            1
        );
        assert!(
            upcoming(&once, &Window::default(), None, None, 10)
                .fires
                .is_empty()
        );
    }

    #[test]
    fn the_window_bounds_the_fires_and_jitter_shows_when_each_goes_out() {
        let every = schedule(ScheduleSpec {
            every: Some("1m".into()),
            ..ScheduleSpec::default()
        });
        let now = at("2026-11-27T09:00:00Z");
        let window = Window {
            start_at: Some(at("2026-11-27T10:00:00Z")),
            end_at: Some(at("2026-11-27T10:03:00Z")),
            jitter: Some(crate::domain::duration::HumanDuration(
                std::time::Duration::from_secs(30),
            )),
        };
        let preview = for_new_schedule(&every, &window, now, 10);
        let points: Vec<_> = preview.fires.iter().map(|f| f.at).collect();
        assert_eq!(
            points,
            ["10:00:00", "10:01:00", "10:02:00", "10:03:00"]
                .map(|t| at(&format!("2026-11-27T{t}Z")))
        );
        assert!(preview.fires.iter().all(|f| f.due.is_none()), "no job id");
        let job = Uuid::from_u128(9);
        let stored = upcoming(&every, &window, Some(job), Some(points[0]), 10);
        assert_eq!(stored.fires.len(), 4);
        for fire in &stored.fires {
            let due = fire.due.expect("jittered");
            assert!(due >= fire.at && due - fire.at <= chrono::Duration::seconds(30));
            assert_eq!(due, window.due_time(job, fire.at));
        }
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
