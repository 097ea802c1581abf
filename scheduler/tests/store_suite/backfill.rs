//! Backfilled runs: recorded in one transaction, nothing twice (a scheduled fire of the
//! same time has the same id), due when the backfill spaced them, and refused while the
//! job is busy when the backfill asks for an idle job.

use super::*;

/// Backfilled runs of `job` at `times`, due one second apart from `now`.
fn backfilled(job: &Job, times: &[DateTime<Utc>], now: DateTime<Utc>) -> Vec<Run> {
    times
        .iter()
        .enumerate()
        .flat_map(|(k, at)| {
            job.new_runs(*at, RunTrigger::Backfill, now, &LiveZones::default())
                .into_iter()
                .map(move |mut run| {
                    run.due_at = Some(now + Duration::seconds(k as i64));
                    run
                })
        })
        .collect()
}

pub(super) async fn backfilled_runs_are_recorded_once_beside_scheduled_fires(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    // The timer records the fires at +1 s and +2 s.
    let fired = store
        .fire(&[job.id], now + Duration::seconds(2), GRACE, &firing())
        .await
        .unwrap();
    assert_eq!(fired.recorded.len(), 2);
    let times: Vec<_> = (1..=4).map(|s| now + Duration::seconds(s)).collect();
    let later = now + Duration::seconds(10);
    let runs = backfilled(&job, &times, later);
    let inserted = store
        .insert_backfill(job.id, &runs, false)
        .await
        .unwrap()
        .expect("not asked to be idle");
    let expected: HashSet<Uuid> = [runs[2].id, runs[3].id].into_iter().collect();
    assert_eq!(inserted, expected, "the scheduled fires are the same runs");
    assert_eq!(runs[0].id, fired.recorded[0].task_id);

    // Again: nothing new.
    let again = store.insert_backfill(job.id, &runs, false).await.unwrap();
    assert_eq!(again, Some(HashSet::new()));

    let stored = store.get_run(runs[3].id).await.unwrap().unwrap();
    assert_eq!(stored.trigger, RunTrigger::Backfill);
    assert_eq!(stored.state, RunState::Scheduled);
    assert_eq!(stored.due_at, Some(later + Duration::seconds(3)));
    let scheduled = store.get_run(runs[0].id).await.unwrap().unwrap();
    assert_eq!(scheduled.trigger, RunTrigger::Schedule, "left as it was");
    let page = store
        .list_runs(
            job.id,
            &RunPage {
                before: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.len(), 4);

    // Each backfilled run comes due for the reconciler at its own time: `scheduled` runs
    // due before `later` + 2.5 s are the one due at +2 s (with the scheduled ones, due
    // since `now`), not the one due at +3 s.
    let at = later + Duration::milliseconds(2500);
    let overdue: HashSet<Uuid> = store
        .overdue_runs(at, at, None, 100, None)
        .await
        .unwrap()
        .into_iter()
        .map(|item| item.run.id)
        .collect();
    assert!(overdue.contains(&runs[2].id));
    assert!(!overdue.contains(&runs[3].id), "due a second later");
}

pub(super) async fn a_backfill_asking_for_an_idle_job_records_nothing_while_it_is_busy(
    store: &dyn Store,
) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let times: Vec<_> = (1..=3).map(|s| now - Duration::seconds(s)).collect();
    let runs = backfilled(&job, &times, now);
    let first = store
        .insert_backfill(job.id, &runs[..1], true)
        .await
        .unwrap();
    assert_eq!(
        first.map(|ids| ids.len()),
        Some(1),
        "an idle job is backfilled"
    );
    // Its backfilled run is unfinished: the next idle-only backfill gets nothing.
    assert_eq!(
        store.insert_backfill(job.id, &runs, true).await.unwrap(),
        None
    );
    assert!(store.get_run(runs[1].id).await.unwrap().is_none());
    // Without the condition the rest is recorded.
    let rest = store.insert_backfill(job.id, &runs, false).await.unwrap();
    assert_eq!(rest.map(|ids| ids.len()), Some(2));

    // A job that is gone.
    assert!(store.delete_job(job.id).await.unwrap());
    match store.insert_backfill(job.id, &runs, false).await {
        Err(StoreError::JobNotFound(id)) => assert_eq!(id, job.id),
        other => panic!("expected JobNotFound, got {other:?}"),
    }
}
