//! Microbenchmarks of next-fire computation: one call of [`Schedule::next_after`] (the
//! function the timer and the fire transaction use to advance a job) for typical
//! schedules — a per-second cron in UTC, an every-2-minutes cron in `Asia/Shanghai`, a
//! daily 02:30 cron in `America/New_York` on an ordinary day and across both DST changes,
//! a yearly cron, and a fixed `every: 30s` interval counted from an anchor a year back.
//! Schedules are built from [`ScheduleSpec`] exactly as the API does; each case checks its
//! answer once before it is measured.
//!
//! Run: `cargo bench -p chime-scheduler --bench next_fire`
//! (quick run: append `-- --warm-up-time 1 --measurement-time 3`; filter: `-- cron_ny`).

use std::hint::black_box;

use chime_scheduler::domain::{Schedule, schedule::ScheduleSpec};
use chrono::{DateTime, Utc};
use criterion::{Criterion, criterion_group, criterion_main};

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("valid RFC 3339 instant")
}

fn cron(expression: &str, timezone: &str) -> Schedule {
    Schedule::from_spec(&ScheduleSpec {
        cron: Some(expression.to_string()),
        timezone: Some(timezone.to_string()),
        ..ScheduleSpec::default()
    })
    .expect("valid cron schedule")
}

fn every(interval: &str) -> Schedule {
    Schedule::from_spec(&ScheduleSpec {
        every: Some(interval.to_string()),
        ..ScheduleSpec::default()
    })
    .expect("valid interval schedule")
}

/// One measured case: `schedule.next_after(anchor, after)` must give `expected`.
struct Case {
    name: &'static str,
    schedule: Schedule,
    anchor: DateTime<Utc>,
    after: DateTime<Utc>,
    expected: DateTime<Utc>,
}

fn cases() -> Vec<Case> {
    let cron_case = |name, expression, timezone, after: &str, expected: &str| {
        let after = at(after);
        Case {
            name,
            schedule: cron(expression, timezone),
            anchor: after,
            after,
            expected: at(expected),
        }
    };
    vec![
        cron_case(
            "cron_utc_every_second",
            "* * * * * *",
            "UTC",
            "2026-11-21T10:00:00.500Z",
            "2026-11-21T10:00:01Z",
        ),
        cron_case(
            "cron_shanghai_every_2_min",
            "0 */2 * * * *",
            "Asia/Shanghai",
            "2026-11-21T10:00:01Z",
            "2026-11-21T10:02:00Z",
        ),
        // Far from any DST change: the fast path.
        cron_case(
            "cron_ny_daily_0230/ordinary_day",
            "0 30 2 * * *",
            "America/New_York",
            "2026-06-15T12:00:00Z",
            "2026-06-16T06:30:00Z",
        ),
        // 02:30 does not exist on 2026-03-08: fires at 03:30 EDT.
        cron_case(
            "cron_ny_daily_0230/spring_forward",
            "0 30 2 * * *",
            "America/New_York",
            "2026-03-08T06:00:00Z",
            "2026-03-08T07:30:00Z",
        ),
        // Clocks go back at 02:00 EDT on 2026-11-01: 02:30 EST.
        cron_case(
            "cron_ny_daily_0230/fall_back",
            "0 30 2 * * *",
            "America/New_York",
            "2026-11-01T04:00:00Z",
            "2026-11-01T07:30:00Z",
        ),
        cron_case(
            "cron_utc_yearly",
            "0 0 0 1 1 *",
            "UTC",
            "2026-06-15T12:00:00Z",
            "2027-01-01T00:00:00Z",
        ),
        Case {
            name: "every_30s",
            schedule: every("30s"),
            anchor: at("2025-11-21T10:00:00Z"),
            after: at("2026-11-21T10:00:05Z"),
            expected: at("2026-11-21T10:00:30Z"),
        },
    ]
}

fn next_fire(c: &mut Criterion) {
    let mut group = c.benchmark_group("next_fire");
    for case in cases() {
        assert_eq!(
            case.schedule.next_after(case.anchor, case.after),
            Some(case.expected),
            "{}",
            case.name
        );
        group.bench_function(case.name, |b| {
            b.iter(|| {
                black_box(&case.schedule).next_after(black_box(case.anchor), black_box(case.after))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, next_fire);
criterion_main!(benches);
