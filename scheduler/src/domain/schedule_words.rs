//! A schedule in words, for people: "every 2 minutes at second 0, Asia/Shanghai",
//! "every 30s", "once at 2026-06-01T08:00:00.000Z". Cron fields that are `*`, `*/n`, a
//! single value or a list of values read naturally; an expression with anything else
//! (ranges, stepped ranges, `L`...) is shown as itself. Pure: previews answer it as
//! `description`.

use super::{duration::HumanDuration, schedule::Schedule, timestamp::timestamp};

/// One cron field, as far as words go.
#[derive(Debug, Clone, PartialEq)]
enum Field {
    /// `*` or `?`: any value.
    Any,
    /// `*/n`.
    Step(String),
    /// One value or a list of values.
    Values(Vec<String>),
}

fn field(text: &str) -> Option<Field> {
    if text == "*" || text == "?" {
        return Some(Field::Any);
    }
    if let Some(step) = text.strip_prefix("*/") {
        return step
            .chars()
            .all(|c| c.is_ascii_digit())
            .then(|| Field::Step(step.to_string()));
    }
    let values: Vec<String> = text.split(',').map(str::to_string).collect();
    values
        .iter()
        .all(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric()))
        .then_some(Field::Values(values))
}

/// `schedule` in words, with the cron's time zone.
pub fn describe(schedule: &Schedule) -> String {
    match schedule {
        Schedule::Every(interval) => match interval.to_std() {
            Ok(std) => format!("every {}", HumanDuration(std)),
            Err(_) => "every interval".to_string(),
        },
        Schedule::At(at) => format!("once at {}", timestamp(*at)),
        Schedule::Cron(cron) => {
            let zone = cron.timezone().name().to_string();
            match describe_cron(cron.normalised()) {
                Some(words) => format!("{words}, {zone}"),
                None => format!("cron \"{}\", {zone}", cron.expression()),
            }
        }
    }
}

/// A 6- or 7-field expression (seconds first) in words, or None when a field is not
/// plain enough.
fn describe_cron(expression: &str) -> Option<String> {
    let texts: Vec<&str> = expression.split_whitespace().collect();
    if !(6..=7).contains(&texts.len()) {
        return None;
    }
    let fields: Vec<Field> = texts.iter().map(|t| field(t)).collect::<Option<_>>()?;
    let units = ["second", "minute", "hour"];
    let mut parts = Vec::new();
    // The period: the finest of second, minute, hour that is `*` or `*/n`.
    let period = fields[..3]
        .iter()
        .position(|f| !matches!(f, Field::Values(_)));
    match period {
        Some(p) => {
            parts.push(match &fields[p] {
                Field::Step(n) => format!("every {n} {}s", units[p]),
                _ => format!("every {}", units[p]),
            });
            let finer: Vec<String> = (0..p)
                .rev()
                .map(|i| at_values(units[i], &fields[i]))
                .collect();
            if !finer.is_empty() {
                parts.push(format!("at {}", finer.join(", ")));
            }
            for (unit, coarser) in units.iter().zip(&fields[..3]).skip(p + 1) {
                match coarser {
                    Field::Any => {}
                    Field::Step(n) => parts.push(format!("in every {} {unit}", ordinal(n))),
                    values => parts.push(format!("in {}", at_values(unit, values))),
                }
            }
        }
        None => {
            let singles: Option<Vec<u32>> = fields[..3]
                .iter()
                .map(|f| match f {
                    Field::Values(v) if v.len() == 1 => v[0].parse().ok(),
                    _ => None,
                })
                .collect();
            let at = match singles {
                Some(v) => format!("at {:02}:{:02}:{:02}", v[2], v[1], v[0]),
                None => format!(
                    "at {}",
                    [2, 1, 0]
                        .map(|i| at_values(units[i], &fields[i]))
                        .join(", ")
                ),
            };
            parts.push(format!("every day {at}"));
        }
    }
    match &fields[3] {
        Field::Any => {}
        Field::Step(n) => parts.push(format!("every {n} days of the month")),
        Field::Values(v) => parts.push(format!("on day{} {} of the month", plural(v), list(v))),
    }
    match &fields[4] {
        Field::Any => {}
        Field::Step(n) => parts.push(format!("every {n} months")),
        Field::Values(v) => parts.push(format!("in {}", list(&names(v, &MONTHS, 1)?))),
    }
    match &fields[5] {
        Field::Any => {}
        Field::Step(_) => return None,
        Field::Values(v) => parts.push(format!("on {}", list(&names(v, &DAYS, 1)?))),
    }
    match fields.get(6) {
        None | Some(Field::Any) => {}
        Some(Field::Step(n)) => parts.push(format!("every {n} years")),
        Some(Field::Values(v)) => parts.push(format!("in {}", list(v))),
    }
    Some(parts.join(" "))
}

/// "a", "a and b", "a, b and c".
fn list(values: &[String]) -> String {
    match values {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// "2nd", "3rd", "11th".
fn ordinal(n: &str) -> String {
    let suffix = match (n.parse::<u64>().unwrap_or(0) % 100, n.chars().last()) {
        (11..=13, _) => "th",
        (_, Some('1')) => "st",
        (_, Some('2')) => "nd",
        (_, Some('3')) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn plural(values: &[String]) -> &'static str {
    if values.len() > 1 { "s" } else { "" }
}

fn at_values(unit: &str, field: &Field) -> String {
    match field {
        Field::Values(v) => format!("{unit}{} {}", plural(v), list(v)),
        Field::Step(n) => format!("every {} {unit}", ordinal(n)),
        Field::Any => format!("every {unit}"),
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
/// Day-of-week as the cron crate numbers it: 1 = Sunday.
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Month or day numbers (from `first`) or three-letter names as full names.
fn names(values: &[String], table: &[&str], first: usize) -> Option<Vec<String>> {
    values
        .iter()
        .map(|v| {
            let index = match v.parse::<usize>() {
                Ok(n) => n.checked_sub(first)?,
                Err(_) => table
                    .iter()
                    .position(|name| name[..3].eq_ignore_ascii_case(v))?,
            };
            table.get(index).map(|name| name.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::ScheduleSpec;

    fn cron(expression: &str, timezone: &str) -> String {
        describe(
            &Schedule::from_spec(&ScheduleSpec {
                cron: Some(expression.into()),
                timezone: Some(timezone.into()),
                ..ScheduleSpec::default()
            })
            .unwrap(),
        )
    }

    #[test]
    fn plain_cron_fields_read_naturally_in_their_zone() {
        assert_eq!(
            cron("0 */2 * * * *", "Asia/Shanghai"),
            "every 2 minutes at second 0, Asia/Shanghai"
        );
        assert_eq!(cron("* * * * * *", "UTC"), "every second, UTC");
        assert_eq!(
            cron("0 0 * * * *", "UTC"),
            "every hour at minute 0, second 0, UTC"
        );
        assert_eq!(
            cron("0 30 9 * * *", "Europe/Paris"),
            "every day at 09:30:00, Europe/Paris"
        );
        assert_eq!(
            cron("0 0 9,17 * * MON,FRI", "UTC"),
            "every day at hours 9 and 17, minute 0, second 0 on Monday and Friday, UTC"
        );
        assert_eq!(
            cron("0 0 6 1 1 *", "UTC"),
            "every day at 06:00:00 on day 1 of the month in January, UTC"
        );
        assert_eq!(
            cron("0 */5 */2 * * *", "UTC"),
            "every 5 minutes at second 0 in every 2nd hour, UTC"
        );
        assert_eq!(
            cron("0 */15 9 * * *", "UTC"),
            "every 15 minutes at second 0 in hour 9, UTC"
        );
        // A 5-field Unix line reads as its 6-field form.
        assert_eq!(
            cron("*/5 * * * *", "UTC"),
            "every 5 minutes at second 0, UTC"
        );
    }

    #[test]
    fn other_cron_fields_fall_back_to_the_expression() {
        assert_eq!(
            cron("0 0 9-17 * * MON-FRI", "UTC"),
            "cron \"0 0 9-17 * * MON-FRI\", UTC"
        );
        assert_eq!(
            cron("0 0 0 1/2 * *", "Asia/Tokyo"),
            "cron \"0 0 0 1/2 * *\", Asia/Tokyo"
        );
    }

    #[test]
    fn intervals_and_one_shots() {
        let every = Schedule::from_spec(&ScheduleSpec {
            every: Some("30s".into()),
            ..ScheduleSpec::default()
        })
        .unwrap();
        assert_eq!(describe(&every), "every 30s");
        let every = Schedule::from_spec(&ScheduleSpec {
            every: Some("90m".into()),
            ..ScheduleSpec::default()
        })
        .unwrap();
        assert_eq!(describe(&every), "every 1h 30m");
        let once = Schedule::from_spec(&ScheduleSpec {
            at: Some("2026-06-01T08:00:00Z".into()),
            ..ScheduleSpec::default()
        })
        .unwrap();
        assert_eq!(describe(&once), "once at 2026-06-01T08:00:00.000Z");
    }
}
