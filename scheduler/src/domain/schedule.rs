//! A job's schedule — cron in a timezone, a fixed interval, or one instant — and the fire
//! times it produces. All instants are UTC with millisecond precision.

use chrono::{DateTime, Datelike, Duration, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    cron_schedule::{CronError, CronSchedule},
    duration::HumanDuration,
    validation::FieldError,
};

/// Shortest accepted interval.
pub const MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// Longest accepted interval (ten years).
pub const MAX_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10 * 366 * 86_400);

/// When a job fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// Cron expression matched in a timezone (boxed: a parsed expression is large).
    Cron(Box<CronSchedule>),
    /// Every fixed interval, counted from the first fire (no drift).
    Every(Duration),
    /// Once, at this instant.
    At(DateTime<Utc>),
}

/// The JSON shape of a schedule: exactly one of `cron` (with optional `timezone`),
/// `every` or `at`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Cron expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// IANA timezone of `cron`, default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Interval, e.g. `"30s"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// RFC 3339 instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

impl Schedule {
    /// Validates a schedule spec; errors name the field under `schedule.`.
    pub fn from_spec(spec: &ScheduleSpec) -> Result<Self, FieldError> {
        match (&spec.cron, &spec.every, &spec.at) {
            (Some(cron), None, None) => {
                let timezone = spec.timezone.as_deref().unwrap_or("UTC");
                CronSchedule::parse(cron, timezone)
                    .map(|cron| Schedule::Cron(Box::new(cron)))
                    .map_err(|e| match e {
                        CronError::Expression(m) => FieldError::new("schedule.cron", m),
                        CronError::Timezone(m) => FieldError::new("schedule.timezone", m),
                    })
            }
            (None, Some(every), None) => {
                no_timezone(spec, "every")?;
                let interval = HumanDuration::parse(every)
                    .map_err(|m| FieldError::new("schedule.every", m))?
                    .get();
                if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
                    return Err(FieldError::new(
                        "schedule.every",
                        format!("interval {every:?} is out of range: use 1s to 3660 days"),
                    ));
                }
                Ok(Schedule::Every(
                    Duration::from_std(interval).expect("bounded interval fits"),
                ))
            }
            (None, None, Some(at)) => {
                no_timezone(spec, "at")?;
                let instant = DateTime::parse_from_rfc3339(at.trim()).map_err(|e| {
                    FieldError::new(
                        "schedule.at",
                        format!("invalid instant {at:?}: {e} (use RFC 3339, e.g. \"2026-11-21T10:00:00Z\")"),
                    )
                })?;
                let instant = instant.with_timezone(&Utc);
                if !(1970..=9999).contains(&instant.year()) {
                    return Err(FieldError::new(
                        "schedule.at",
                        format!("instant {at:?} is out of range: use a time between 1970 and 9999"),
                    ));
                }
                Ok(Schedule::At(truncate_ms(instant)))
            }
            (None, None, None) => Err(FieldError::new(
                "schedule",
                "missing: give one of \"cron\", \"every\" or \"at\"",
            )),
            _ => Err(FieldError::new(
                "schedule",
                "give only one of \"cron\", \"every\" or \"at\"",
            )),
        }
    }

    /// The JSON shape of this schedule.
    pub fn to_spec(&self) -> ScheduleSpec {
        match self {
            Schedule::Cron(cron) => ScheduleSpec {
                cron: Some(cron.expression().to_string()),
                timezone: Some(cron.timezone().name().to_string()),
                ..ScheduleSpec::default()
            },
            Schedule::Every(interval) => ScheduleSpec {
                every: Some(
                    HumanDuration(interval.to_std().expect("positive interval")).to_string(),
                ),
                ..ScheduleSpec::default()
            },
            Schedule::At(at) => ScheduleSpec {
                at: Some(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
                ..ScheduleSpec::default()
            },
        }
    }

    /// The first fire of a job created, rescheduled or resumed at `now`: the first point
    /// strictly after `now`; for a one-shot, its instant even when past (it then fires
    /// according to the misfire policy).
    pub fn first_fire(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let now = truncate_ms(now);
        match self {
            Schedule::Cron(cron) => cron.next_after(now),
            Schedule::Every(interval) => Some(now + *interval),
            Schedule::At(at) => Some(*at),
        }
    }

    /// Refuses a schedule that can never fire after `now`: a cron expression matching no
    /// date (`0 0 0 30 2 *`) or whose year field lies wholly in the past. Intervals always
    /// fire, and a one-shot is kept even when past (it fires by its misfire policy).
    pub fn check_fires(&self, now: DateTime<Utc>) -> Result<(), FieldError> {
        match self {
            Schedule::Cron(cron) if cron.next_after(truncate_ms(now)).is_none() => {
                Err(FieldError::new(
                    "schedule.cron",
                    format!(
                        "cron expression {:?} never fires after now (no such date, or every year it names is past)",
                        cron.expression()
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The first point strictly after `t`, where `anchor` (≤ `t`) is a point of this
    /// schedule; intervals count from `anchor`.
    pub fn next_after(&self, anchor: DateTime<Utc>, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Cron(cron) => cron.next_after(t),
            Schedule::Every(interval) => {
                let steps = if t < anchor {
                    0
                } else {
                    (t - anchor).num_milliseconds() / interval.num_milliseconds() + 1
                };
                Some(anchor + Duration::milliseconds(interval.num_milliseconds() * steps))
            }
            Schedule::At(at) => (*at > t).then_some(*at),
        }
    }

    /// Points `p` with `lo <= p <= hi`, ascending, at most `limit` of them (the earliest);
    /// `anchor` (≤ `lo`) is a point of this schedule.
    pub fn points_between(
        &self,
        anchor: DateTime<Utc>,
        lo: DateTime<Utc>,
        hi: DateTime<Utc>,
        limit: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut points = Vec::new();
        let mut next = if lo <= anchor {
            Some(anchor)
        } else {
            self.next_after(anchor, lo - Duration::milliseconds(1))
        };
        while let Some(p) = next {
            if p > hi || points.len() >= limit {
                break;
            }
            points.push(p);
            next = self.next_after(anchor, p);
        }
        points
    }

    /// The latest `k` points in `[anchor, hi]`, ascending; `anchor` is a point of this
    /// schedule. Looks back in doubling windows so a long outage costs O(k log outage), not
    /// O(missed fires).
    pub fn latest_points(
        &self,
        anchor: DateTime<Utc>,
        hi: DateTime<Utc>,
        k: usize,
    ) -> Vec<DateTime<Utc>> {
        if k == 0 || hi < anchor {
            return Vec::new();
        }
        let mut window = match self {
            Schedule::Every(interval) => {
                Duration::milliseconds(interval.num_milliseconds().saturating_mul(k as i64))
            }
            _ => Duration::minutes(1),
        };
        loop {
            let lo = (hi - window).max(anchor);
            let mut points = self.points_between(anchor, lo, hi, usize::MAX);
            if points.len() >= k || lo == anchor {
                let drop = points.len().saturating_sub(k);
                points.drain(..drop);
                return points;
            }
            window = window * 2;
        }
    }
}

impl Serialize for Schedule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_spec().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Schedule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spec = ScheduleSpec::deserialize(deserializer)?;
        Schedule::from_spec(&spec).map_err(serde::de::Error::custom)
    }
}

fn no_timezone(spec: &ScheduleSpec, kind: &str) -> Result<(), FieldError> {
    match spec.timezone {
        Some(_) => Err(FieldError::new(
            "schedule.timezone",
            format!("a timezone only applies to \"cron\" schedules, not \"{kind}\""),
        )),
        None => Ok(()),
    }
}

/// Drops sub-millisecond precision: fire times, run ids and both stores agree on ms.
pub fn truncate_ms(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn spec(json: serde_json::Value) -> ScheduleSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn schedules_that_can_never_fire_are_refused() {
        let now = at("2026-11-27T07:00:00Z");
        let check = |j| Schedule::from_spec(&spec(j)).unwrap().check_fires(now);
        for never in [
            "0 0 0 30 2 *",
            "0 0 0 31 4 *",
            "0 0 0 * * * 2020-2025",
            "0 0 0 1 1 * 2026",
        ] {
            let err = check(serde_json::json!({"cron": never})).unwrap_err();
            assert_eq!(err.field, "schedule.cron", "{never}");
            assert!(err.message.contains("never fires"), "{}", err.message);
        }
        for fires in [
            serde_json::json!({"cron": "0 0 0 29 2 *"}),
            serde_json::json!({"cron": "0 0 0 * * * 2026-2030"}),
            serde_json::json!({"cron": "0 0 0 31 12 * 2026", "timezone": "Asia/Tokyo"}),
            serde_json::json!({"every": "10d"}),
            serde_json::json!({"at": "2020-01-01T00:00:00Z"}),
        ] {
            assert_eq!(check(fires.clone()), Ok(()), "{fires}");
        }
    }

    #[test]
    fn validation_names_the_field() {
        let err = |j| Schedule::from_spec(&spec(j)).unwrap_err();
        assert_eq!(
            err(serde_json::json!({"cron": "nope"})).field,
            "schedule.cron"
        );
        assert_eq!(
            err(serde_json::json!({"cron": "0 * * * * *", "timezone": "Nowhere/City"})).field,
            "schedule.timezone"
        );
        assert_eq!(
            err(serde_json::json!({"every": "fast"})).field,
            "schedule.every"
        );
        assert_eq!(
            err(serde_json::json!({"every": "10ms"})).field,
            "schedule.every"
        );
        assert_eq!(
            err(serde_json::json!({"at": "tomorrow"})).field,
            "schedule.at"
        );
        assert_eq!(err(serde_json::json!({})).field, "schedule");
        assert_eq!(
            err(serde_json::json!({"every": "1s", "at": "2026-01-01T00:00:00Z"})).field,
            "schedule"
        );
        assert_eq!(
            err(serde_json::json!({"every": "1s", "timezone": "UTC"})).field,
            "schedule.timezone"
        );
    }

    #[test]
    fn spec_round_trip_defaults_timezone() {
        let s = Schedule::from_spec(&spec(serde_json::json!({"cron": "0 * * * * *"}))).unwrap();
        assert_eq!(s.to_spec().timezone.as_deref(), Some("UTC"));
        let e = Schedule::from_spec(&spec(serde_json::json!({"every": "90s"}))).unwrap();
        assert_eq!(Schedule::from_spec(&e.to_spec()).unwrap(), e);
    }

    #[test]
    fn interval_points_stay_on_the_grid() {
        let s = Schedule::Every(Duration::seconds(10));
        let anchor = at("2026-11-21T10:00:00Z");
        assert_eq!(
            s.next_after(anchor, at("2026-11-21T10:00:25Z")),
            Some(at("2026-11-21T10:00:30Z"))
        );
        assert_eq!(
            s.next_after(anchor, anchor),
            Some(at("2026-11-21T10:00:10Z"))
        );
        assert_eq!(
            s.points_between(
                anchor,
                at("2026-11-21T10:00:05Z"),
                at("2026-11-21T10:00:30Z"),
                10
            ),
            [
                at("2026-11-21T10:00:10Z"),
                at("2026-11-21T10:00:20Z"),
                at("2026-11-21T10:00:30Z")
            ]
        );
        assert_eq!(
            s.latest_points(anchor, at("2026-11-21T12:00:05Z"), 2),
            [at("2026-11-21T11:59:50Z"), at("2026-11-21T12:00:00Z")]
        );
    }

    #[test]
    fn one_shot_points() {
        let t = at("2026-11-21T10:00:00Z");
        let s = Schedule::At(t);
        assert_eq!(
            s.first_fire(at("2026-11-22T00:00:00Z")),
            Some(t),
            "past one-shot stays due"
        );
        assert_eq!(s.next_after(t, t), None);
        assert_eq!(s.latest_points(t, at("2026-11-22T00:00:00Z"), 5), [t]);
    }

    #[test]
    fn cron_latest_points_after_a_long_outage() {
        let s = Schedule::from_spec(&spec(serde_json::json!({"cron": "*/10 * * * * *"}))).unwrap();
        let anchor = at("2026-11-01T00:00:00Z");
        let latest = s.latest_points(anchor, at("2026-11-21T10:00:05Z"), 3);
        assert_eq!(
            latest,
            [
                at("2026-11-21T09:59:40Z"),
                at("2026-11-21T09:59:50Z"),
                at("2026-11-21T10:00:00Z")
            ]
        );
        let yearly =
            Schedule::from_spec(&spec(serde_json::json!({"cron": "0 0 0 1 1 *"}))).unwrap();
        assert_eq!(
            yearly.latest_points(at("2020-01-01T00:00:00Z"), at("2026-11-21T00:00:00Z"), 2),
            [at("2025-01-01T00:00:00Z"), at("2026-01-01T00:00:00Z")]
        );
    }
}
