//! Backfill: the fires a job's schedule would have made in a past range `[from, to)`,
//! recorded as runs with trigger `backfill` and the same ids as the scheduled fires
//! (so nothing is recorded twice), and the times they are due so that they go out at
//! a bounded rate. Pure: the caller passes the clock and the job's stored state.
//!
//! Limits: at most [`MAX_RUNS`] runs (fires times items) per request; the rate is
//! [`MIN_RATE`] to [`MAX_RATE`] fires a second, [`DEFAULT_RATE`] when not given.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::{
    schedule::{Schedule, truncate_ms},
    validation::FieldError,
    window::{Window, parse_instant},
};

/// Most runs (fire times times the job's items per fire) one backfill records.
pub const MAX_RUNS: usize = 10_000;
/// Fires a second when the request names no rate.
pub const DEFAULT_RATE: f64 = 10.0;
/// Lowest rate: one fire every 100 seconds.
pub const MIN_RATE: f64 = 0.01;
/// Highest rate.
pub const MAX_RATE: f64 = 1000.0;

/// What a backfill does about the job's unfinished runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackfillOverlap {
    /// Record the range's fires whatever else of the job is running.
    #[default]
    Allow,
    /// Record nothing while the job has an unfinished run (`scheduled`, `dispatched`,
    /// `acked`, or `failed` waiting for its retry), an earlier backfill's included.
    Forbid,
}

impl BackfillOverlap {
    /// The choice's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            BackfillOverlap::Allow => "allow",
            BackfillOverlap::Forbid => "forbid",
        }
    }
}

/// A checked backfill request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackfillRequest {
    /// First instant of the range (included), ms precision.
    pub from: DateTime<Utc>,
    /// End of the range (excluded), ms precision, not after the request's `now`.
    pub to: DateTime<Utc>,
    /// Fires a second.
    pub rate: f64,
    /// See [`BackfillOverlap`].
    pub overlap: BackfillOverlap,
}

impl BackfillRequest {
    /// Checks the request's fields at `now`: `from` and `to` are RFC 3339 instants with
    /// `from < to <= now`; `rate` (default [`DEFAULT_RATE`]) is within
    /// [`MIN_RATE`]..=[`MAX_RATE`]. Errors name the field.
    pub fn check(
        from: &str,
        to: &str,
        rate: Option<f64>,
        overlap: BackfillOverlap,
        now: DateTime<Utc>,
    ) -> Result<Self, FieldError> {
        let from = parse_instant("from", from)?;
        let to = parse_instant("to", to)?;
        if from >= to {
            return Err(FieldError::new("to", "to must be after from"));
        }
        if to > now {
            return Err(FieldError::new(
                "to",
                "to must not be in the future: a backfill records past fires only",
            ));
        }
        let rate = rate.unwrap_or(DEFAULT_RATE);
        if !(MIN_RATE..=MAX_RATE).contains(&rate) {
            return Err(FieldError::new(
                "rate",
                format!("rate must be {MIN_RATE} to {MAX_RATE} fires a second, not {rate}"),
            ));
        }
        Ok(Self {
            from,
            to,
            rate,
            overlap,
        })
    }
}

/// How many fire times fit in one backfill of a job whose fires have `items` runs each.
pub fn max_fires(items: usize) -> usize {
    (MAX_RUNS / items.max(1)).max(1)
}

/// The fire times of `schedule` in `[request.from, request.to)`, ascending, for a job
/// whose stored next fire is `next_fire_at`. Fires from a running (not `paused`) job's
/// next fire on are its timer's, not the backfill's, and are left out. Refuses (field
/// `to`) a range holding more than `max` fire times.
pub fn fire_times(
    schedule: &Schedule,
    next_fire_at: Option<DateTime<Utc>>,
    paused: bool,
    request: &BackfillRequest,
    max: usize,
) -> Result<Vec<DateTime<Utc>>, FieldError> {
    let mut hi = request.to - Duration::milliseconds(1);
    if let (Some(next), false) = (next_fire_at, paused) {
        hi = hi.min(next - Duration::milliseconds(1));
    }
    if hi < request.from {
        return Ok(Vec::new());
    }
    let anchor = anchor(schedule, next_fire_at, request.from);
    let points = schedule.points_between(anchor, request.from, hi, max.saturating_add(1));
    if points.len() > max {
        return Err(FieldError::new(
            "to",
            format!(
                "the range holds more than {max} fires (a backfill records at most {MAX_RUNS} runs): narrow it and backfill the rest in another request"
            ),
        ));
    }
    Ok(points)
}

/// The part of `request`'s range inside the job's `start_at`/`end_at` window: a
/// backfill records only fires the schedule could have made, so none outside it (an
/// empty range when they do not meet).
pub fn within_window(request: &BackfillRequest, window: &Window) -> BackfillRequest {
    let mut clamped = *request;
    if let Some(start) = window.start_at {
        clamped.from = clamped.from.max(start);
    }
    if let Some(end) = window.end_at {
        // `end_at` is inclusive, `to` exclusive.
        clamped.to = clamped.to.min(end + Duration::milliseconds(1));
    }
    clamped
}

/// A point of `schedule` at or before `lo`, from which [`Schedule::points_between`]
/// counts: an interval's points lie on the grid of the job's next fire; a cron
/// expression or an instant has no grid, so any instant before `lo` does.
fn anchor(
    schedule: &Schedule,
    next_fire_at: Option<DateTime<Utc>>,
    lo: DateTime<Utc>,
) -> DateTime<Utc> {
    match (schedule, next_fire_at) {
        (Schedule::Every(interval), Some(next)) if next > lo => {
            let step = interval.num_milliseconds().max(1);
            let back = (next - lo).num_milliseconds();
            let steps = (back + step - 1) / step;
            next - Duration::milliseconds(step.saturating_mul(steps))
        }
        (Schedule::Every(_), Some(next)) => next,
        // An interval job without a next fire does not occur; count from `lo`.
        (Schedule::Every(_), None) => lo,
        _ => lo - Duration::milliseconds(1),
    }
}

/// When the `k`-th fire of a backfill (from 0, in fire-time order) is due: `now` plus
/// `k / rate` seconds.
pub fn due_at(now: DateTime<Utc>, k: usize, rate: f64) -> DateTime<Utc> {
    let offset_ms = (k as f64 * 1000.0 / rate).round() as i64;
    truncate_ms(now) + Duration::milliseconds(offset_ms)
}

/// Whether the `k`-th fire is handed to the dispatcher at once: those due within the
/// first second (at least the first fire). The rest wait for the reconciler, which
/// publishes `scheduled` runs once they are overdue.
pub fn dispatch_at_once(k: usize, rate: f64) -> bool {
    (k as f64) < rate.max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backfill_keeps_inside_the_jobs_window() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let request = BackfillRequest {
            from: at("2026-01-01T00:00:00Z"),
            to: at("2026-01-01T01:00:00Z"),
            rate: DEFAULT_RATE,
            overlap: BackfillOverlap::Allow,
        };
        let window = Window {
            start_at: Some(at("2026-01-01T00:10:00Z")),
            end_at: Some(at("2026-01-01T00:20:00Z")),
            jitter: None,
        };
        let clamped = within_window(&request, &window);
        assert_eq!(clamped.from, at("2026-01-01T00:10:00Z"));
        assert_eq!(clamped.to, at("2026-01-01T00:20:00.001Z"));
        let every = Schedule::from_spec(&ScheduleSpec {
            every: Some("5m".into()),
            ..Default::default()
        })
        .unwrap();
        let times = fire_times(&every, None, false, &clamped, 100).unwrap();
        assert!(!times.is_empty());
        assert!(times.iter().all(|t| window.contains(*t)), "{times:?}");
        assert_eq!(within_window(&request, &Window::default()), request);
    }
    use crate::domain::schedule::ScheduleSpec;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn schedule(spec: ScheduleSpec) -> Schedule {
        Schedule::from_spec(&spec).unwrap()
    }

    fn request(from: &str, to: &str) -> BackfillRequest {
        BackfillRequest::check(
            from,
            to,
            None,
            BackfillOverlap::Allow,
            at("2026-12-01T00:00:00Z"),
        )
        .unwrap()
    }

    #[test]
    fn a_cron_range_is_half_open_and_in_the_schedule_time_zone() {
        let cron = schedule(ScheduleSpec {
            cron: Some("0 0 9 * * *".into()),
            timezone: Some("Europe/Paris".into()),
            ..ScheduleSpec::default()
        });
        // 09:00 Paris is 08:00Z in November; `to` at a fire time excludes it.
        let times = fire_times(
            &cron,
            Some(at("2026-11-30T08:00:00Z")),
            false,
            &request("2026-11-20T08:00:00Z", "2026-11-23T08:00:00Z"),
            100,
        )
        .unwrap();
        assert_eq!(
            times,
            [
                at("2026-11-20T08:00:00Z"),
                at("2026-11-21T08:00:00Z"),
                at("2026-11-22T08:00:00Z")
            ]
        );
    }

    #[test]
    fn interval_fires_lie_on_the_jobs_grid_and_stop_before_its_next_fire() {
        let every = schedule(ScheduleSpec {
            every: Some("90s".into()),
            ..ScheduleSpec::default()
        });
        let next = at("2026-11-21T10:00:30Z");
        let times = fire_times(
            &every,
            Some(next),
            false,
            &request("2026-11-21T09:55:00Z", "2026-11-21T10:30:00Z"),
            100,
        )
        .unwrap();
        assert_eq!(times.first(), Some(&at("2026-11-21T09:56:00Z")));
        assert_eq!(times.len(), 3);
        assert_eq!(times.last(), Some(&at("2026-11-21T09:59:00Z")));
        assert!(
            times
                .iter()
                .all(|t| (next - *t).num_milliseconds() % 90_000 == 0)
        );
        assert!(
            times.iter().all(|t| *t < next),
            "the timer's fires are left"
        );

        // A paused job's past next fire does not cut the range.
        let paused = fire_times(
            &every,
            Some(next),
            true,
            &request("2026-11-21T09:55:00Z", "2026-11-21T10:03:00Z"),
            100,
        )
        .unwrap();
        assert_eq!(paused.last(), Some(&at("2026-11-21T10:02:00Z")));
    }

    #[test]
    fn one_shots_are_in_the_range_or_not() {
        let once = schedule(ScheduleSpec {
            at: Some("2026-11-21T10:00:00Z".into()),
            ..ScheduleSpec::default()
        });
        let inside = request("2026-11-21T10:00:00Z", "2026-11-21T10:00:01Z");
        assert_eq!(
            fire_times(&once, None, false, &inside, 10).unwrap(),
            [at("2026-11-21T10:00:00Z")]
        );
        let after = request("2026-11-21T10:00:01Z", "2026-11-22T00:00:00Z");
        assert!(
            fire_times(&once, None, false, &after, 10)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_range_over_the_limit_is_refused_on_to() {
        let every = schedule(ScheduleSpec {
            every: Some("1s".into()),
            ..ScheduleSpec::default()
        });
        let next = Some(at("2026-11-30T00:00:00Z"));
        let ten = request("2026-11-21T10:00:00Z", "2026-11-21T10:00:10Z");
        assert_eq!(fire_times(&every, next, false, &ten, 10).unwrap().len(), 10);
        let eleven = request("2026-11-21T10:00:00Z", "2026-11-21T10:00:11Z");
        let error = fire_times(&every, next, false, &eleven, 10).unwrap_err();
        assert_eq!(error.field, "to");
        assert_eq!(max_fires(1), MAX_RUNS);
        assert_eq!(max_fires(4), MAX_RUNS / 4);
        assert_eq!(max_fires(MAX_RUNS * 2), 1);
    }

    #[test]
    fn requests_are_checked_field_by_field() {
        let now = at("2026-12-01T00:00:00Z");
        let check = |from: &str, to: &str, rate| {
            BackfillRequest::check(from, to, rate, BackfillOverlap::Forbid, now)
        };
        let ok = check("2026-11-01T00:00:00Z", "2026-11-02T00:00:00+01:00", None).unwrap();
        assert_eq!(ok.rate, DEFAULT_RATE);
        assert_eq!(ok.to, at("2026-11-01T23:00:00Z"));
        assert_eq!(ok.overlap, BackfillOverlap::Forbid);
        for (from, to, rate, field) in [
            ("yesterday", "2026-11-02T00:00:00Z", None, "from"),
            ("2026-11-01T00:00:00Z", "", None, "to"),
            ("2026-11-02T00:00:00Z", "2026-11-01T00:00:00Z", None, "to"),
            ("2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z", None, "to"),
            ("2026-11-01T00:00:00Z", "2026-12-02T00:00:00Z", None, "to"),
            (
                "2026-11-01T00:00:00Z",
                "2026-11-02T00:00:00Z",
                Some(0.0),
                "rate",
            ),
            (
                "2026-11-01T00:00:00Z",
                "2026-11-02T00:00:00Z",
                Some(1e6),
                "rate",
            ),
            (
                "2026-11-01T00:00:00Z",
                "2026-11-02T00:00:00Z",
                Some(f64::NAN),
                "rate",
            ),
        ] {
            assert_eq!(
                check(from, to, rate).unwrap_err().field,
                field,
                "{from} {to}"
            );
        }
    }

    #[test]
    fn fires_are_spaced_by_the_rate_and_the_first_second_goes_at_once() {
        let now = at("2026-12-01T00:00:00Z");
        assert_eq!(due_at(now, 0, 10.0), now);
        assert_eq!(due_at(now, 25, 10.0), now + Duration::milliseconds(2500));
        assert_eq!(due_at(now, 3, 0.5), now + Duration::seconds(6));
        assert!(dispatch_at_once(0, 0.5));
        assert!(!dispatch_at_once(1, 0.5));
        assert!(dispatch_at_once(9, 10.0));
        assert!(!dispatch_at_once(10, 10.0));
    }
}
