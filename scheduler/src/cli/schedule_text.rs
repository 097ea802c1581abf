//! How `chimectl` shows a schedule: what the user wrote and what Chime runs. A 5-field
//! Unix cron line (`*/5 * * * *`) runs with a seconds field in front (`0 */5 * * * *`):
//! shown as written, it reads like every 5 seconds to anyone who knows Chime's
//! seconds-first expressions, so both are shown, and `job get` adds the fields by name and
//! the next fire times.

use chrono::{DateTime, SecondsFormat, Utc};

use crate::domain::{cron_schedule::CronSchedule, schedule::ScheduleSpec};

/// Names of a normalised expression's fields, in order.
const CRON_FIELDS: [&str; 7] = [
    "sec",
    "min",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
    "year",
];

/// Fire times `job get` lists for a cron schedule.
const NEXT_FIRES: usize = 3;

/// One line: `cron 0 */2 * * * * (Asia/Shanghai)`; a 5-field line as it runs, with what
/// was written: `cron 0 */5 * * * * (UTC; written */5 * * * *)`; `every 30s`; `at ...`.
pub fn summary(schedule: &ScheduleSpec) -> String {
    match (&schedule.cron, &schedule.every, &schedule.at) {
        (Some(cron), _, _) => {
            let timezone = schedule.timezone.as_deref().unwrap_or("UTC");
            match CronSchedule::parse(cron, timezone) {
                Ok(parsed) if parsed.is_five_field() => format!(
                    "cron {} ({timezone}; written {})",
                    parsed.normalised(),
                    parsed.expression()
                ),
                _ => format!("cron {cron} ({timezone})"),
            }
        }
        (_, Some(every), _) => format!("every {every}"),
        (_, _, Some(at)) => format!("at {at}"),
        _ => "-".into(),
    }
}

/// Rows for `job get` after `schedule`: for a cron schedule the expression's fields by
/// name and the next fire times after `now` (none while `paused`).
pub fn detail_rows(
    schedule: &ScheduleSpec,
    paused: bool,
    now: DateTime<Utc>,
) -> Vec<(&'static str, String)> {
    let Some(cron) = &schedule.cron else {
        return Vec::new();
    };
    let timezone = schedule.timezone.as_deref().unwrap_or("UTC");
    let Ok(parsed) = CronSchedule::parse(cron, timezone) else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    if parsed.is_five_field() {
        rows.push((
            "written as",
            format!(
                "{} (a 5-field Unix line: Chime adds second 0)",
                parsed.expression()
            ),
        ));
    }
    rows.push(("cron fields", named_fields(parsed.normalised())));
    if !paused {
        let mut fires = Vec::new();
        let mut after = now;
        while fires.len() < NEXT_FIRES {
            let Some(next) = parsed.next_after(after) else {
                break;
            };
            fires.push(
                next.with_timezone(&parsed.timezone())
                    .to_rfc3339_opts(SecondsFormat::Secs, true),
            );
            after = next;
        }
        if !fires.is_empty() {
            rows.push(("next fires", fires.join(", ")));
        }
    }
    rows
}

/// `sec 0, min */5, hour *, ...` for a seconds-first expression; a shorthand such as
/// `@daily` as it is.
fn named_fields(expression: &str) -> String {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    if fields.len() < 6 {
        return expression.to_string();
    }
    CRON_FIELDS
        .iter()
        .zip(fields)
        .map(|(name, value)| format!("{name} {value}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(expression: &str, timezone: Option<&str>) -> ScheduleSpec {
        ScheduleSpec {
            cron: Some(expression.into()),
            timezone: timezone.map(str::to_string),
            ..ScheduleSpec::default()
        }
    }

    #[test]
    fn a_five_field_line_shows_what_runs_beside_what_was_written() {
        assert_eq!(
            summary(&cron("*/5 * * * *", None)),
            "cron 0 */5 * * * * (UTC; written */5 * * * *)"
        );
        assert_eq!(
            summary(&cron("0 */2 * * * *", Some("Asia/Shanghai"))),
            "cron 0 */2 * * * * (Asia/Shanghai)"
        );
        let every = ScheduleSpec {
            every: Some("30s".into()),
            ..ScheduleSpec::default()
        };
        assert_eq!(summary(&every), "every 30s");
    }

    #[test]
    fn job_get_names_the_fields_and_lists_the_next_fires() {
        let now: DateTime<Utc> = "2026-11-21T10:01:07Z".parse().unwrap();
        let rows = detail_rows(&cron("*/5 * * * *", None), false, now);
        assert_eq!(
            rows,
            [
                (
                    "written as",
                    "*/5 * * * * (a 5-field Unix line: Chime adds second 0)".to_string()
                ),
                (
                    "cron fields",
                    "sec 0, min */5, hour *, day-of-month *, month *, day-of-week *".to_string()
                ),
                (
                    "next fires",
                    "2026-11-21T10:05:00Z, 2026-11-21T10:10:00Z, 2026-11-21T10:15:00Z".to_string()
                ),
            ]
        );
        let berlin = detail_rows(&cron("0 30 2 * * *", Some("Europe/Berlin")), true, now);
        assert_eq!(berlin.len(), 1, "no written-as row, no fires while paused");
        assert_eq!(berlin[0].0, "cron fields");
        let every = ScheduleSpec {
            every: Some("30s".into()),
            ..ScheduleSpec::default()
        };
        assert!(detail_rows(&every, false, now).is_empty());
    }
}
