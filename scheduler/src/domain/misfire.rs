//! Deciding which fires happen when a job comes due: on time, a little late, or after the
//! scheduler missed fires (it was down, paused by an outage, or could not reach its store).
//!
//! A fire up to `grace` late is simply late and always happens. A job whose oldest due
//! fire is more than `grace` late has *misfired*, and its policy decides:
//! - `fire_once` (default): one fire, for the latest missed fire time;
//! - `skip`: only the fires still within `grace` happen, missed ones are dropped;
//! - `catch_up`: the latest `catch_up_limit` due fires happen, oldest first.
//!
//! Fires may be *armed*: recorded ahead of time, up to `until` (≥ `now`), so that a herd
//! of jobs due together is in the store before its instant and only publishing is left
//! then. On-time fires up to `until` are planned and the next fire time becomes the first
//! point after `until`; lateness and the misfire decision are always judged against the
//! real `now`, and a misfired job's next fire time is the first point after `now`.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::schedule::Schedule;

/// Upper bound on fires in one plan that is not a catch-up (a timer running late by less
/// than `grace`); it only guards against absurd configurations.
const MAX_ON_TIME_FIRES: usize = 10_000;

/// What to do with fires the scheduler missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    /// Fire once for all missed fires.
    #[default]
    FireOnce,
    /// Drop missed fires.
    Skip,
    /// Fire each missed fire, up to the job's `catch_up_limit` (the latest ones).
    CatchUp,
}

impl MisfirePolicy {
    /// Every policy, in the order the API lists them.
    pub const ALL: [MisfirePolicy; 3] = [
        MisfirePolicy::FireOnce,
        MisfirePolicy::Skip,
        MisfirePolicy::CatchUp,
    ];

    /// The policy's name in the API (the same as its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            MisfirePolicy::FireOnce => "fire_once",
            MisfirePolicy::Skip => "skip",
            MisfirePolicy::CatchUp => "catch_up",
        }
    }

    /// The policy named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

/// The fires to record now and the job's next fire time.
#[derive(Debug, Clone, PartialEq)]
pub struct FirePlan {
    /// Scheduled fire times to record, ascending.
    pub fire_times: Vec<DateTime<Utc>>,
    /// The job's next fire time after these (None: the job never fires again).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// Whether the job had misfired (fires more than `grace` late).
    pub misfired: bool,
}

/// Plans the fires of a job whose next fire time is `due` at `now`, arming on-time fires
/// due up to `until` (pass `until == now` to record only what is due).
pub fn plan_fires(
    schedule: &Schedule,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
    policy: MisfirePolicy,
    catch_up_limit: u32,
    grace: Duration,
) -> FirePlan {
    plan_fires_within(
        schedule,
        due,
        now,
        until,
        policy,
        catch_up_limit,
        grace,
        None,
    )
}

/// [`plan_fires`] for a schedule that ends at `end` (a job's `end_at`, inclusive): no
/// fire time after it is planned (a misfire's policy picks among the points up to it),
/// and a next fire time past it is `None` — the job is finished.
#[allow(clippy::too_many_arguments)]
pub fn plan_fires_within(
    schedule: &Schedule,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
    policy: MisfirePolicy,
    catch_up_limit: u32,
    grace: Duration,
    end: Option<DateTime<Utc>>,
) -> FirePlan {
    assert!(until >= now, "arming horizon {until} before now {now}");
    let before_end = |t: Option<DateTime<Utc>>| t.filter(|t| end.is_none_or(|end| *t <= end));
    if due > until || before_end(Some(due)).is_none() {
        return FirePlan {
            fire_times: Vec::new(),
            next_fire_at: before_end(Some(due)),
            misfired: false,
        };
    }
    let misfired = due < now - grace;
    let next_fire_at = before_end(schedule.next_after(due, if misfired { now } else { until }));
    // Points are only looked for up to the end.
    let last = |t: DateTime<Utc>| end.map_or(t, |end| t.min(end));
    let fire_times = if !misfired {
        schedule.points_between(due, due, last(until), MAX_ON_TIME_FIRES)
    } else {
        match policy {
            MisfirePolicy::Skip => {
                schedule.points_between(due, now - grace, last(now), MAX_ON_TIME_FIRES)
            }
            MisfirePolicy::FireOnce => schedule.latest_points(due, last(now), 1),
            MisfirePolicy::CatchUp => {
                schedule.latest_points(due, last(now), catch_up_limit.max(1) as usize)
            }
        }
    };
    FirePlan {
        fire_times,
        next_fire_at,
        misfired,
    }
}

/// Most missed fire times [`collapsed_fires`] counts one by one (cron schedules); an
/// interval schedule's are counted exactly by arithmetic, a one-shot has one.
pub const MAX_COUNTED_MISSES: usize = 100;

/// How many of a misfired job's due fire times its policy did not record: the points of
/// its schedule in `[due, now]` (`due`: the stored next fire time the plan started from)
/// minus the `fired` it recorded. `fire_once` collapses all but one, `skip` drops those
/// more than `grace` late, `catch_up` those beyond its limit. Interval schedules are
/// counted exactly, whatever the outage; cron schedules count at most
/// [`MAX_COUNTED_MISSES`] points (so the answer is then a lower bound), which keeps the
/// fire transaction's cost bounded after a long outage.
pub fn collapsed_fires(
    schedule: &Schedule,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    fired: usize,
) -> u64 {
    if now < due {
        return 0;
    }
    let missed = match schedule {
        Schedule::Every(interval) => {
            let step = interval.num_milliseconds().max(1);
            ((now - due).num_milliseconds() / step).saturating_add(1) as u64
        }
        Schedule::At(_) => 1,
        Schedule::Cron(_) => schedule
            .points_between(due, due, now, MAX_COUNTED_MISSES)
            .len() as u64,
    };
    missed.saturating_sub(fired as u64)
}

/// Which of a job's recorded-but-unpublished scheduled fires still go out when a node
/// starts or takes over the job's shard at `now` (fires are recorded up to the arming
/// horizon before their time, so a node that stops after recording them leaves runs
/// behind that no timer will plan again). `recorded` are their fire times, ascending;
/// the answer says, for each, whether to publish it (`true`) or to drop it as skipped.
///
/// A fire up to `grace` late, or still ahead, always goes out. The late ones are judged
/// by `policy` as the timer judges missed fires ([`plan_fires`]), counting the missed
/// fires the timer itself will record for the job (its `next_fire_at` may be late too),
/// so that one outage gives the policy's fires once, not once from the store and once
/// from the timer:
/// - `skip`: none of the late ones;
/// - `fire_once`: the latest late one, unless a later fire up to `now` goes out anyway
///   (one recorded within grace, or the one the timer records for its own misfire);
/// - `catch_up`: the latest late ones, as many as `catch_up_limit` leaves after the
///   timer's own catch-up fires.
#[allow(clippy::too_many_arguments)]
pub fn judge_recorded(
    recorded: &[DateTime<Utc>],
    schedule: &Schedule,
    next_fire_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    policy: MisfirePolicy,
    catch_up_limit: u32,
    grace: Duration,
) -> Vec<bool> {
    let cutoff = now - grace;
    let late = recorded.iter().filter(|t| **t < cutoff).count();
    // What the timer records for the job's own next fire time, if that misfired too.
    let timer_missed = next_fire_at
        .map(|due| {
            let plan = plan_fires(schedule, due, now, now, policy, catch_up_limit, grace);
            if plan.misfired {
                plan.fire_times.len()
            } else {
                0
            }
        })
        .unwrap_or(0);
    let later_goes_out = recorded.iter().any(|t| *t >= cutoff && *t <= now) || timer_missed > 0;
    let keep_late = match policy {
        MisfirePolicy::Skip => 0,
        MisfirePolicy::FireOnce => usize::from(!later_goes_out),
        MisfirePolicy::CatchUp => (catch_up_limit.max(1) as usize).saturating_sub(timer_missed),
    };
    recorded
        .iter()
        .enumerate()
        // Late fires are the first `late` (ascending); keep the last `keep_late` of them.
        .map(|(i, t)| *t >= cutoff || i + keep_late.min(late) >= late)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::ScheduleSpec;
    use proptest::prelude::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn every(seconds: i64) -> Schedule {
        Schedule::Every(Duration::seconds(seconds))
    }

    fn cron(expr: &str) -> Schedule {
        Schedule::from_spec(&ScheduleSpec {
            cron: Some(expr.into()),
            ..ScheduleSpec::default()
        })
        .unwrap()
    }

    const GRACE: Duration = Duration::seconds(5);

    #[test]
    fn on_time_fire() {
        let due = at("2026-11-21T10:00:00Z");
        let plan = plan_fires(
            &every(60),
            due,
            due + Duration::milliseconds(3),
            due + Duration::milliseconds(3),
            MisfirePolicy::Skip,
            10,
            GRACE,
        );
        assert_eq!(plan.fire_times, [due]);
        assert_eq!(plan.next_fire_at, Some(at("2026-11-21T10:01:00Z")));
        assert!(!plan.misfired);
    }

    #[test]
    fn late_within_grace_fires_everything_due() {
        let due = at("2026-11-21T10:00:00Z");
        let plan = plan_fires(
            &every(1),
            due,
            due + Duration::milliseconds(2500),
            due + Duration::milliseconds(2500),
            MisfirePolicy::Skip,
            10,
            GRACE,
        );
        assert_eq!(plan.fire_times.len(), 3);
        assert_eq!(plan.next_fire_at, Some(at("2026-11-21T10:00:03Z")));
    }

    #[test]
    fn not_yet_due_is_left_alone() {
        let due = at("2026-11-21T10:00:00Z");
        let plan = plan_fires(
            &every(1),
            due,
            due - Duration::seconds(1),
            due - Duration::seconds(1),
            MisfirePolicy::FireOnce,
            10,
            GRACE,
        );
        assert!(plan.fire_times.is_empty());
        assert_eq!(plan.next_fire_at, Some(due));
    }

    #[test]
    fn armed_fires_are_planned_up_to_until() {
        let due = at("2026-11-21T10:00:00Z");
        let now = due - Duration::milliseconds(1500);
        let plan = plan_fires(
            &every(1),
            due,
            now,
            now + Duration::seconds(2),
            MisfirePolicy::FireOnce,
            10,
            GRACE,
        );
        assert_eq!(plan.fire_times, [due]);
        assert_eq!(plan.next_fire_at, Some(due + Duration::seconds(1)));
        assert!(!plan.misfired);
        let beyond = plan_fires(
            &every(1),
            due,
            now,
            now + Duration::milliseconds(1000),
            MisfirePolicy::FireOnce,
            10,
            GRACE,
        );
        assert!(beyond.fire_times.is_empty());
        assert_eq!(beyond.next_fire_at, Some(due));
    }

    #[test]
    fn misfire_is_judged_against_now_not_the_arming_horizon() {
        let due = at("2026-11-21T10:00:00Z");
        let now = due + Duration::seconds(30);
        let plan = plan_fires(
            &every(1),
            due,
            now,
            now + Duration::seconds(2),
            MisfirePolicy::FireOnce,
            10,
            GRACE,
        );
        assert!(plan.misfired);
        assert_eq!(plan.fire_times, [now]);
        assert_eq!(plan.next_fire_at, Some(now + Duration::seconds(1)));
    }

    #[test]
    fn policies_after_an_outage() {
        let due = at("2026-11-21T10:00:00Z");
        let now = at("2026-11-21T10:00:30.500Z");
        let s = every(1);
        let fire_once = plan_fires(&s, due, now, now, MisfirePolicy::FireOnce, 10, GRACE);
        assert!(fire_once.misfired);
        assert_eq!(fire_once.fire_times, [at("2026-11-21T10:00:30Z")]);
        assert_eq!(fire_once.next_fire_at, Some(at("2026-11-21T10:00:31Z")));

        let skip = plan_fires(&s, due, now, now, MisfirePolicy::Skip, 10, GRACE);
        assert_eq!(skip.fire_times.first(), Some(&at("2026-11-21T10:00:26Z")));
        assert_eq!(skip.fire_times.len(), 5, "only fires within grace");

        let catch_up = plan_fires(&s, due, now, now, MisfirePolicy::CatchUp, 3, GRACE);
        assert_eq!(
            catch_up.fire_times,
            [
                at("2026-11-21T10:00:28Z"),
                at("2026-11-21T10:00:29Z"),
                at("2026-11-21T10:00:30Z")
            ]
        );
        let catch_all = plan_fires(&s, due, now, now, MisfirePolicy::CatchUp, 1000, GRACE);
        assert_eq!(catch_all.fire_times.len(), 31);
    }

    #[test]
    fn past_one_shot_follows_policy() {
        let t = at("2026-11-20T10:00:00Z");
        let now = at("2026-11-21T10:00:00Z");
        let once = plan_fires(
            &Schedule::At(t),
            t,
            now,
            now,
            MisfirePolicy::FireOnce,
            10,
            GRACE,
        );
        assert_eq!(once.fire_times, [t]);
        assert_eq!(once.next_fire_at, None);
        let skip = plan_fires(
            &Schedule::At(t),
            t,
            now,
            now,
            MisfirePolicy::Skip,
            10,
            GRACE,
        );
        assert!(skip.fire_times.is_empty());
        assert_eq!(skip.next_fire_at, None);
    }

    #[test]
    fn cron_outage_of_a_month_is_cheap() {
        let s = cron("* * * * * *");
        let due = at("2026-10-21T10:00:00Z");
        let now = at("2026-11-21T10:00:00.200Z");
        let plan = plan_fires(&s, due, now, now, MisfirePolicy::CatchUp, 5, GRACE);
        assert_eq!(plan.fire_times.len(), 5);
        assert_eq!(plan.fire_times.last(), Some(&at("2026-11-21T10:00:00Z")));
        assert_eq!(plan.next_fire_at, Some(at("2026-11-21T10:00:01Z")));
    }

    #[test]
    fn collapsed_fires_follow_the_policy() {
        let due = at("2026-11-21T10:00:00Z");
        let now = at("2026-11-21T10:00:30.500Z");
        let s = every(1);
        // 31 due points (10:00:00 ..= 10:00:30).
        let count = |policy| {
            let plan = plan_fires(&s, due, now, now, policy, 3, GRACE);
            collapsed_fires(&s, due, now, plan.fire_times.len())
        };
        assert_eq!(count(MisfirePolicy::FireOnce), 30);
        assert_eq!(
            count(MisfirePolicy::Skip),
            26,
            "five within grace still fire"
        );
        assert_eq!(count(MisfirePolicy::CatchUp), 28);
        // A month-long outage of a per-second cron job is counted up to the bound.
        let c = cron("* * * * * *");
        let long = collapsed_fires(&c, at("2026-10-21T10:00:00Z"), now, 1);
        assert_eq!(long, MAX_COUNTED_MISSES as u64 - 1);
        assert_eq!(collapsed_fires(&Schedule::At(due), due, now, 1), 0);
        assert_eq!(collapsed_fires(&Schedule::At(due), due, now, 0), 1);
        assert_eq!(collapsed_fires(&s, now, due, 0), 0, "not due yet");
    }

    fn policy() -> impl Strategy<Value = MisfirePolicy> {
        prop_oneof![
            Just(MisfirePolicy::FireOnce),
            Just(MisfirePolicy::Skip),
            Just(MisfirePolicy::CatchUp)
        ]
    }

    proptest! {
        #[test]
        fn plans_respect_their_contract(
            interval_s in 1i64..600,
            late_ms in 0i64..3_600_000,
            limit in 1u32..50,
            policy in policy(),
        ) {
            let s = every(interval_s);
            let due = at("2026-11-21T10:00:00Z");
            let now = due + Duration::milliseconds(late_ms);
            let plan = plan_fires(&s, due, now, now, policy, limit, GRACE);
            prop_assert!(plan.fire_times.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(plan.fire_times.iter().all(|t| *t >= due && *t <= now));
            let next = plan.next_fire_at.unwrap();
            prop_assert!(next > now && next - now <= Duration::seconds(interval_s));
            prop_assert_eq!(plan.misfired, now - due > GRACE);
            if plan.misfired {
                match policy {
                    MisfirePolicy::FireOnce => prop_assert_eq!(plan.fire_times.len(), 1),
                    MisfirePolicy::Skip => prop_assert!(plan.fire_times.iter().all(|t| now - *t <= GRACE)),
                    MisfirePolicy::CatchUp => prop_assert!(plan.fire_times.len() <= limit as usize),
                }
            } else {
                prop_assert!(!plan.fire_times.is_empty());
            }
        }

        #[test]
        fn collapsed_and_fired_add_up_to_the_missed_points(
            interval_s in 1i64..120,
            late_ms in 0i64..600_000,
            limit in 1u32..50,
            policy in policy(),
        ) {
            let s = every(interval_s);
            let due = at("2026-11-21T10:00:00Z");
            let now = due + Duration::milliseconds(late_ms);
            let plan = plan_fires(&s, due, now, now, policy, limit, GRACE);
            let collapsed = collapsed_fires(&s, due, now, plan.fire_times.len());
            let points = s.points_between(due, due, now, usize::MAX).len() as u64;
            prop_assert_eq!(collapsed + plan.fire_times.len() as u64, points);
            if plan.misfired && policy == MisfirePolicy::FireOnce {
                prop_assert_eq!(collapsed, points - 1);
            }
        }

        #[test]
        fn armed_plans_stay_on_schedule(
            interval_s in 1i64..600,
            offset_ms in -3_000i64..3_000,
            ahead_ms in 0i64..5_000,
            policy in policy(),
        ) {
            let s = every(interval_s);
            let due = at("2026-11-21T10:00:00Z");
            let now = due + Duration::milliseconds(offset_ms);
            let until = now + Duration::milliseconds(ahead_ms);
            let plan = plan_fires(&s, due, now, until, policy, 10, GRACE);
            // Never a fire beyond the horizon, never one skipped: the next fire time is
            // the first point after everything planned.
            prop_assert!(plan.fire_times.iter().all(|t| *t >= due && *t <= until));
            prop_assert_eq!(plan.fire_times.is_empty(), due > until);
            let next = plan.next_fire_at.unwrap();
            prop_assert!(next > until || due > until);
            if let Some(last) = plan.fire_times.last() {
                prop_assert_eq!(s.next_after(due, *last), Some(next));
            }
            prop_assert!(!plan.misfired);
        }

        #[test]
        fn cron_fire_times_strictly_increase_through_dst(
            start_h in 0i64..(24 * 366),
            minute_step in prop::sample::select(vec![1u32, 5, 15, 30]),
            tz in prop::sample::select(vec!["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]),
        ) {
            let s = Schedule::from_spec(&ScheduleSpec {
                cron: Some(format!("0 */{minute_step} * * * *")),
                timezone: Some(tz.to_string()),
                ..ScheduleSpec::default()
            }).unwrap();
            let mut t = at("2026-01-01T00:00:00Z") + Duration::hours(start_h);
            for _ in 0..200 {
                let next = s.next_after(t, t).unwrap();
                prop_assert!(next > t);
                prop_assert!(next - t <= Duration::minutes(minute_step as i64));
                t = next;
            }
        }
    }

    mod recorded {
        use super::*;

        const NOW: &str = "2026-11-21T10:00:30Z";

        /// Five fires recorded a second apart from 10:00:10 (20 s late at `NOW`), and
        /// one within grace.
        fn recorded() -> Vec<DateTime<Utc>> {
            let mut fires: Vec<_> = (10..15)
                .map(|s| at(&format!("2026-11-21T10:00:{s}Z")))
                .collect();
            fires.push(at("2026-11-21T10:00:27Z"));
            fires
        }

        fn judge(fires: &[DateTime<Utc>], next: &str, policy: MisfirePolicy) -> Vec<bool> {
            judge_recorded(fires, &every(1), Some(at(next)), at(NOW), policy, 3, GRACE)
        }

        #[test]
        fn skip_drops_every_late_fire() {
            let kept = judge(&recorded(), "2026-11-21T10:00:31Z", MisfirePolicy::Skip);
            assert_eq!(kept, [false, false, false, false, false, true]);
        }

        #[test]
        fn fire_once_keeps_one_fire_for_the_outage() {
            // A fire within grace goes out: it is the one fire.
            let kept = judge(&recorded(), "2026-11-21T10:00:31Z", MisfirePolicy::FireOnce);
            assert_eq!(kept, [false, false, false, false, false, true]);
            // Only late fires, and the timer's next fire is ahead: the latest goes out.
            let late = &recorded()[..5];
            let kept = judge(late, "2026-11-21T10:00:31Z", MisfirePolicy::FireOnce);
            assert_eq!(kept, [false, false, false, false, true]);
            // The timer misfires too and fires once itself: none of these.
            let kept = judge(late, "2026-11-21T10:00:15Z", MisfirePolicy::FireOnce);
            assert_eq!(kept, [false; 5]);
        }

        #[test]
        fn catch_up_is_bounded_with_the_timer_catch_up_counted() {
            let late = &recorded()[..5];
            let kept = judge(late, "2026-11-21T10:00:31Z", MisfirePolicy::CatchUp);
            assert_eq!(kept, [false, false, true, true, true]);
            // The timer catches up 3 itself (limit 3): nothing left for these.
            let kept = judge(late, "2026-11-21T10:00:15Z", MisfirePolicy::CatchUp);
            assert_eq!(kept, [false; 5]);
        }

        #[test]
        fn fires_on_time_or_ahead_always_go_out() {
            let fires = [at("2026-11-21T10:00:26Z"), at("2026-11-21T10:00:32Z")];
            for policy in [
                MisfirePolicy::Skip,
                MisfirePolicy::FireOnce,
                MisfirePolicy::CatchUp,
            ] {
                assert_eq!(judge(&fires, "2026-11-21T10:00:33Z", policy), [true, true]);
            }
        }

        proptest! {
            #[test]
            fn never_more_than_the_policy_allows(
                late in 0usize..20,
                on_time in 0usize..3,
                next_late in any::<bool>(),
                limit in 1u32..6,
                policy in prop_oneof![
                    Just(MisfirePolicy::Skip),
                    Just(MisfirePolicy::FireOnce),
                    Just(MisfirePolicy::CatchUp),
                ],
            ) {
                let now = at(NOW);
                let mut fires: Vec<_> = (0..late)
                    .map(|i| now - Duration::seconds(60 - i as i64))
                    .collect();
                fires.extend((0..on_time).map(|i| now - Duration::seconds(i as i64)));
                fires.sort();
                let next = if next_late { now - Duration::seconds(10) } else { now + Duration::seconds(1) };
                let kept = judge_recorded(&fires, &every(1), Some(next), now, policy, limit, GRACE);
                prop_assert_eq!(kept.len(), fires.len());
                let cutoff = now - GRACE;
                let late_kept: Vec<_> = fires.iter().zip(&kept).filter(|(t, k)| **k && **t < cutoff).map(|(t, _)| *t).collect();
                // Every fire within grace goes out.
                prop_assert!(fires.iter().zip(&kept).all(|(t, k)| *t < cutoff || *k));
                let bound = match policy {
                    MisfirePolicy::Skip => 0,
                    MisfirePolicy::FireOnce => 1,
                    MisfirePolicy::CatchUp => limit as usize,
                };
                prop_assert!(late_kept.len() <= bound);
                // The ones kept are the latest late ones.
                let late_fires: Vec<_> = fires.iter().filter(|t| **t < cutoff).copied().collect();
                prop_assert_eq!(&late_fires[late_fires.len() - late_kept.len()..], &late_kept[..]);
                if policy == MisfirePolicy::FireOnce && late > 0 && on_time == 0 && !next_late {
                    prop_assert_eq!(late_kept.len(), 1);
                }
            }
        }
    }
}
