//! A job's fire window and jitter (issue 38): `start_at` and `end_at` bound the nominal
//! fire times its schedule makes, and `jitter` delays each scheduled fire's publish by a
//! deterministic amount up to its bound. Pure: the caller passes the clock.
//!
//! - **Window.** A schedule point `p` fires only if `start_at <= p <= end_at` (both
//!   inclusive, either may be absent). The first fire of a job whose `start_at` is ahead
//!   is the schedule's first point at or after `start_at` (an interval schedule counts
//!   from `start_at` itself). Past `end_at` the job has no next fire: it is *finished*.
//! - **Jitter.** A scheduled fire at nominal time `t` is published at `t + offset`, where
//!   `offset` in `[0, jitter]` (millisecond steps) is derived from the fire's identity —
//!   the run id of its first item, itself derived from (job id, `t`) — so every node, a
//!   takeover and a re-publish agree. The run keeps `t` as its `fire_time` (run ids stay
//!   deterministic); lateness and misfire grace are judged against `t + offset`. Manual
//!   triggers are not jittered.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use chime_consumer::protocol::{TaskMessage, run_id};

use super::{duration::HumanDuration, schedule::Schedule, validation::FieldError};

/// Longest accepted jitter.
pub const MAX_JITTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// When a job's schedule may fire, and how far each fire is spread out. Stored inside the
/// job's settings document (absent fields: no bound, no jitter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// No scheduled fire before this instant (inclusive bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    /// No scheduled fire after this instant (inclusive bound); past it the job is finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    /// Most delay added to each scheduled fire's publish, 0 to [`MAX_JITTER`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<HumanDuration>,
}

impl Window {
    /// A window from the API's text fields (`start_at`, `end_at`: RFC 3339; `jitter`: a
    /// duration such as `"30s"`), validated; errors name the field.
    pub fn parse(
        start_at: Option<&str>,
        end_at: Option<&str>,
        jitter: Option<&str>,
    ) -> Result<Self, FieldError> {
        let window = Self {
            start_at: start_at.map(|t| parse_instant("start_at", t)).transpose()?,
            end_at: end_at.map(|t| parse_instant("end_at", t)).transpose()?,
            jitter: jitter
                .map(|j| HumanDuration::parse(j).map_err(|m| FieldError::new("jitter", m)))
                .transpose()?,
        };
        window.validate()?;
        Ok(window)
    }

    /// The window's fields as the API writes them: instants in RFC 3339 with
    /// milliseconds, the jitter as a duration.
    pub fn to_text(&self) -> (Option<String>, Option<String>, Option<String>) {
        (
            self.start_at.map(super::timestamp::timestamp),
            self.end_at.map(super::timestamp::timestamp),
            self.jitter.map(|j| j.to_string()),
        )
    }

    /// Checks `end_at` after `start_at` and the jitter's bound.
    pub fn validate(&self) -> Result<(), FieldError> {
        if let (Some(start), Some(end)) = (self.start_at, self.end_at)
            && end <= start
        {
            return Err(FieldError::new(
                "end_at",
                format!(
                    "end_at {} must be after start_at {}",
                    super::timestamp::timestamp(end),
                    super::timestamp::timestamp(start)
                ),
            ));
        }
        if let Some(jitter) = self.jitter
            && jitter.get() > MAX_JITTER
        {
            return Err(FieldError::new(
                "jitter",
                format!("jitter {jitter} is out of range: use 0s to 1h"),
            ));
        }
        Ok(())
    }

    /// Whether the nominal fire time `t` lies inside the window.
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.start_at.is_none_or(|start| t >= start) && self.end_at.is_none_or(|end| t <= end)
    }

    /// `t` if it is not past `end_at`.
    pub fn before_end(&self, t: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
        t.filter(|t| self.end_at.is_none_or(|end| *t <= end))
    }

    /// The first fire of `schedule` for a job created, rescheduled or resumed at `now`,
    /// inside the window (None: it never fires again).
    pub fn first_fire(&self, schedule: &Schedule, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let first = match (schedule, self.start_at) {
            // Intervals count from the start when it is ahead.
            (Schedule::Every(_), Some(start)) if start > now => Some(start),
            // The first point at or after the start.
            (Schedule::Cron(_), Some(start)) if start > now => {
                schedule.first_fire(start - Duration::milliseconds(1))
            }
            // A one-shot before the start never fires.
            (Schedule::At(at), Some(start)) if *at < start => None,
            _ => schedule.first_fire(now),
        };
        self.before_end(first)
    }

    /// The publish delay of the scheduled fire of job `job_id` at nominal time
    /// `fire_time`: 0 without jitter, else in `[0, jitter]`, the same on every node.
    pub fn jitter_offset(&self, job_id: Uuid, fire_time: DateTime<Utc>) -> Duration {
        let bound = self.jitter.map_or(0, |j| j.get().as_millis() as u64);
        if bound == 0 {
            return Duration::zero();
        }
        // The fire's identity: the run id of its first item (UUIDv5, so its bits are a
        // hash). The low 62 bits skip the version and variant bits.
        let id = run_id(job_id, super::schedule::truncate_ms(fire_time), 0);
        let bits = (id.as_u128() as u64) & ((1u64 << 62) - 1);
        Duration::milliseconds((bits % (bound + 1)) as i64)
    }

    /// When the scheduled fire at nominal `fire_time` of job `job_id` is published.
    pub fn due_time(&self, job_id: Uuid, fire_time: DateTime<Utc>) -> DateTime<Utc> {
        fire_time + self.jitter_offset(job_id, fire_time)
    }
}

/// An RFC 3339 instant between 1970 and 9999, to the millisecond.
pub(super) fn parse_instant(field: &str, text: &str) -> Result<DateTime<Utc>, FieldError> {
    let instant = DateTime::parse_from_rfc3339(text.trim())
        .map_err(|e| {
            FieldError::new(
                field,
                format!(
                    "invalid instant {text:?}: {e} (use RFC 3339, e.g. \"2026-11-21T10:00:00Z\")"
                ),
            )
        })?
        .with_timezone(&Utc);
    if !(1970..=9999).contains(&chrono::Datelike::year(&instant)) {
        return Err(FieldError::new(
            field,
            format!("instant {text:?} is out of range: use a time between 1970 and 9999"),
        ));
    }
    Ok(super::schedule::truncate_ms(instant))
}

/// A task ready for the dispatcher with the time it may be published (its fire time, or
/// later with jitter). Dereferences to the task.
#[derive(Debug, Clone, PartialEq)]
pub struct DueTask {
    /// The task message.
    pub task: TaskMessage,
    /// Not published before this instant (a first attempt only).
    pub due: DateTime<Utc>,
}

impl DueTask {
    /// A task due at its fire time.
    pub fn at_fire_time(task: TaskMessage) -> Self {
        Self {
            due: task.fire_time,
            task,
        }
    }
}

impl std::ops::Deref for DueTask {
    type Target = TaskMessage;

    fn deref(&self) -> &TaskMessage {
        &self.task
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::ScheduleSpec;
    use proptest::prelude::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn schedule(json: serde_json::Value) -> Schedule {
        Schedule::from_spec(&serde_json::from_value::<ScheduleSpec>(json).unwrap()).unwrap()
    }

    fn jitter(s: &str) -> Window {
        Window {
            jitter: Some(HumanDuration::parse(s).unwrap()),
            ..Window::default()
        }
    }

    #[test]
    fn validation_names_the_field() {
        let start = at("2026-12-01T00:00:00Z");
        let bad = Window {
            start_at: Some(start),
            end_at: Some(start),
            ..Window::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "end_at");
        let earlier = Window {
            end_at: Some(start - Duration::seconds(1)),
            ..bad
        };
        assert_eq!(earlier.validate().unwrap_err().field, "end_at");
        assert_eq!(jitter("1h 1s").validate().unwrap_err().field, "jitter");
        assert_eq!(jitter("1h").validate(), Ok(()));
        assert_eq!(Window::default().validate(), Ok(()));
    }

    #[test]
    fn first_fire_waits_for_the_start_and_ends_at_the_end() {
        let now = at("2026-11-27T10:00:00Z");
        let start = at("2026-12-01T08:00:00Z");
        let window = Window {
            start_at: Some(start),
            ..Window::default()
        };
        let every = schedule(serde_json::json!({"every": "30s"}));
        assert_eq!(window.first_fire(&every, now), Some(start));
        let cron = schedule(serde_json::json!({"cron": "0 0 8 * * *"}));
        assert_eq!(
            window.first_fire(&cron, now),
            Some(start),
            "start is a point"
        );
        let cron9 = schedule(serde_json::json!({"cron": "0 0 9 * * *"}));
        assert_eq!(
            window.first_fire(&cron9, now),
            Some(at("2026-12-01T09:00:00Z"))
        );
        let once = schedule(serde_json::json!({"at": "2026-11-30T00:00:00Z"}));
        assert_eq!(window.first_fire(&once, now), None);
        // A start already past changes nothing.
        let past = Window {
            start_at: Some(now - Duration::days(1)),
            ..Window::default()
        };
        assert_eq!(
            past.first_fire(&every, now),
            Some(now + Duration::seconds(30))
        );
        // Past the end: finished.
        let ended = Window {
            end_at: Some(now),
            ..Window::default()
        };
        assert_eq!(ended.first_fire(&every, now), None);
        assert_eq!(ended.first_fire(&cron, now), None);
    }

    #[test]
    fn no_jitter_means_no_delay_and_manual_bounds_are_inclusive() {
        let job = Uuid::from_u128(7);
        let t = at("2026-11-27T10:00:00Z");
        assert_eq!(Window::default().due_time(job, t), t);
        assert_eq!(jitter("0s").due_time(job, t), t);
        let w = Window {
            start_at: Some(t),
            end_at: Some(t + Duration::minutes(1)),
            ..Window::default()
        };
        assert!(w.contains(t) && w.contains(t + Duration::minutes(1)));
        assert!(!w.contains(t - Duration::milliseconds(1)));
        assert!(!w.contains(t + Duration::milliseconds(60_001)));
    }

    #[test]
    fn jitter_spreads_fires_over_the_bound() {
        let w = jitter("30s");
        let job = Uuid::from_u128(42);
        let t0 = at("2026-11-27T10:00:00Z");
        let offsets: Vec<i64> = (0..200)
            .map(|i| {
                w.jitter_offset(job, t0 + Duration::seconds(i))
                    .num_milliseconds()
            })
            .collect();
        let distinct: std::collections::BTreeSet<_> = offsets.iter().collect();
        assert!(distinct.len() > 150, "offsets vary per fire: {distinct:?}");
        let mean = offsets.iter().sum::<i64>() as f64 / offsets.len() as f64;
        assert!((10_000.0..20_000.0).contains(&mean), "mean {mean}");
    }

    proptest! {
        #[test]
        fn jitter_is_within_bound_and_deterministic(
            job in any::<u128>(),
            ms in 0i64..4_000_000_000_000,
            bound_ms in 0u64..=3_600_000,
        ) {
            let w = Window {
                jitter: Some(HumanDuration(std::time::Duration::from_millis(bound_ms))),
                ..Window::default()
            };
            let t = DateTime::from_timestamp_millis(ms).unwrap();
            let job = Uuid::from_u128(job);
            let offset = w.jitter_offset(job, t);
            prop_assert!(offset >= Duration::zero());
            prop_assert!(offset <= Duration::milliseconds(bound_ms as i64));
            prop_assert_eq!(offset, w.jitter_offset(job, t));
            prop_assert_eq!(w.due_time(job, t), t + offset);
        }

        #[test]
        fn first_fire_is_inside_the_window(
            interval_s in 1i64..3600,
            now_s in 0i64..1_000_000,
            start_s in proptest::option::of(0i64..1_000_000),
            len_s in proptest::option::of(1i64..1_000_000),
        ) {
            let t0 = at("2026-01-01T00:00:00Z");
            let now = t0 + Duration::seconds(now_s);
            let start_at = start_s.map(|s| t0 + Duration::seconds(s));
            let end_at = len_s.map(|l| start_at.unwrap_or(t0) + Duration::seconds(l));
            let w = Window { start_at, end_at, jitter: None };
            let s = Schedule::Every(Duration::seconds(interval_s));
            match w.first_fire(&s, now) {
                Some(first) => {
                    prop_assert!(w.contains(first));
                    prop_assert!(first > now);
                }
                None => prop_assert!(end_at.is_some_and(|end| end < now + Duration::seconds(interval_s)
                    || start_at.is_some_and(|s| s > end))),
            }
        }
    }
}
