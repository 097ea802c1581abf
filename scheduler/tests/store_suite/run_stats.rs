//! Run statistics (`GET /v1/stats/runs`): runs with known fire times, states, attempts
//! and dispatch times, counted by minute, state, retry and lateness bucket exactly, with
//! the window's edges and the app filter.

use super::*;
use chime_scheduler::domain::run_stats::{RunCount, lateness_bucket};

/// A run of `job` fired at `at`, in `state` on `attempt`, dispatched `lateness_ms` after
/// its fire time (never when None).
fn run(
    job: &Job,
    at: &str,
    state: RunState,
    attempt: u32,
    lateness_ms: Option<i64>,
    now: DateTime<Utc>,
) -> Run {
    let fire_time = t(at);
    let mut run = Run::new(job.id, fire_time, RunTrigger::Manual, json!(null), now);
    run.state = state;
    run.attempt = attempt;
    run.dispatched_at = lateness_ms.map(|ms| fire_time + Duration::milliseconds(ms));
    if state.is_finished() {
        run.finished_at = Some(now);
        run.due_at = None;
    }
    run
}

fn minute(at: &str) -> i64 {
    t(at).timestamp() / 60
}

fn count(
    at: &str,
    state: RunState,
    retried: bool,
    lateness_ms: Option<f64>,
    runs: u64,
) -> RunCount {
    RunCount {
        minute: minute(at),
        state,
        retried,
        lateness: lateness_ms.map(lateness_bucket),
        runs,
    }
}

fn sorted(mut counts: Vec<RunCount>) -> Vec<RunCount> {
    counts.sort_by_key(|c| (c.minute, c.state.as_str(), c.retried, c.lateness, c.runs));
    counts
}

pub(super) async fn run_stats_count_runs_by_minute_state_retry_and_lateness(store: &dyn Store) {
    use RunState::*;
    let now = t("2026-11-28T10:00:00Z");
    let shop = every_second("a", now);
    let mut mail = with_target("b", now, Target::group("mailers"));
    mail.spec.app = "mail".into();
    for job in [&shop, &mail] {
        store.insert_job(job).await.unwrap();
    }
    let runs = [
        // Minute 09:00: three succeeded on time-ish (<= 5 ms), one dead after retries
        // (not measured: a retry forgets its first dispatch), one failed 35 ms late.
        run(&shop, "2026-11-28T09:00:10Z", Succeeded, 1, Some(4), now),
        run(&shop, "2026-11-28T09:00:11Z", Succeeded, 1, Some(5), now),
        run(&shop, "2026-11-28T09:00:12Z", Succeeded, 1, Some(3), now),
        run(&shop, "2026-11-28T09:00:20Z", Dead, 3, Some(1), now),
        run(&shop, "2026-11-28T09:00:59.999Z", Failed, 1, Some(35), now),
        // Minute 09:01: one never confirmed, one dispatched before its fire time (0).
        run(&shop, "2026-11-28T09:01:00Z", Scheduled, 1, None, now),
        run(&mail, "2026-11-28T09:01:30Z", Succeeded, 1, Some(-2), now),
        // 09:05: cancelled on its second attempt; 09:07: 90 s late (beyond 60 s).
        run(&mail, "2026-11-28T09:05:00Z", Cancelled, 2, None, now),
        run(&shop, "2026-11-28T09:07:00Z", Acked, 1, Some(90_000), now),
        // Just outside [09:00, 09:10].
        run(
            &shop,
            "2026-11-28T08:59:59.999Z",
            Succeeded,
            1,
            Some(1),
            now,
        ),
        run(&shop, "2026-11-28T09:10:00.001Z", Scheduled, 1, None, now),
    ];
    // Recorded as a fire records them, then moved to their state as the replies and
    // the reconciler would (an insert records a new run: no dispatch time yet).
    for r in &runs {
        let recorded = Run::new(r.job_id, r.fire_time, RunTrigger::Manual, json!(null), now);
        assert!(store.insert_run(&recorded).await.unwrap());
        let wanted = r.clone();
        let changed = store
            .update_run(r.id, &move |stored: &mut Run, _: &JobSettings| {
                stored.state = wanted.state;
                stored.attempt = wanted.attempt;
                stored.dispatched_at = wanted.dispatched_at;
                stored.finished_at = wanted.finished_at;
                stored.due_at = wanted.due_at;
                true
            })
            .await
            .unwrap();
        assert!(changed.is_some_and(|(changed, _)| changed));
    }
    let from = t("2026-11-28T09:00:00Z");
    let until = t("2026-11-28T09:10:00Z");

    let all = store.run_stats(from, until, None).await.unwrap();
    assert_eq!(
        sorted(all),
        sorted(vec![
            count("2026-11-28T09:00:00Z", Succeeded, false, Some(5.0), 3),
            count("2026-11-28T09:00:00Z", Dead, true, None, 1),
            count("2026-11-28T09:00:00Z", Failed, false, Some(35.0), 1),
            count("2026-11-28T09:01:00Z", Scheduled, false, None, 1),
            count("2026-11-28T09:01:00Z", Succeeded, false, Some(0.0), 1),
            count("2026-11-28T09:05:00Z", Cancelled, true, None, 1),
            count("2026-11-28T09:07:00Z", Acked, false, Some(90_000.0), 1),
        ])
    );
    // The buckets are the ones the domain's edges name: <= 5, <= 50, 0, overflow.
    assert_eq!(lateness_bucket(5.0), 3);
    assert_eq!(lateness_bucket(35.0), 6);
    assert_eq!(lateness_bucket(90_000.0), 16);

    let mail_only = store
        .run_stats(from, until, Some(&["mail".to_string()]))
        .await
        .unwrap();
    assert_eq!(
        sorted(mail_only),
        sorted(vec![
            count("2026-11-28T09:01:00Z", Succeeded, false, Some(0.0), 1),
            count("2026-11-28T09:05:00Z", Cancelled, true, None, 1),
        ])
    );
    let both = store
        .run_stats(from, until, Some(&["mail".to_string(), "shop".to_string()]))
        .await
        .unwrap();
    assert_eq!(both.iter().map(|c| c.runs).sum::<u64>(), 9);
    assert!(
        store
            .run_stats(from, until, Some(&[]))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .run_stats(from, until, Some(&["nope".to_string()]))
            .await
            .unwrap()
            .is_empty()
    );
    // The edges are inclusive: a window of one instant holds the run fired at it.
    let edge = store
        .run_stats(
            t("2026-11-28T09:00:59.999Z"),
            t("2026-11-28T09:00:59.999Z"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        edge,
        vec![count("2026-11-28T09:00:00Z", Failed, false, Some(35.0), 1)]
    );
}
