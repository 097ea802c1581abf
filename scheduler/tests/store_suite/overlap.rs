//! Overlap policies `forbid` and `buffer_one`: fires wait for the job's unfinished runs.

use super::*;

/// A run recorded while its job allowed overlaps still holds back the job's fires once
/// the job changes to `forbid`; runs of other jobs never do.
pub(super) async fn a_job_changed_to_forbid_waits_for_runs_recorded_before(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = Job::new(spec("switching", json!({"every": "1s"})), now);
    let other = Job::new(spec("neighbour", json!({"every": "1s"})), now);
    store.insert_job(&job).await.unwrap();
    store.insert_job(&other).await.unwrap();
    let first = store
        .fire(
            &[job.id, other.id],
            now + Duration::seconds(1),
            GRACE,
            &firing(),
        )
        .await
        .unwrap();
    assert_eq!(first.recorded.len(), 2);
    let recorded = store
        .get_run(first.recorded[0].task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recorded.overlap, OverlapPolicy::Allow);

    let mut forbid = job.spec.clone();
    forbid.settings.overlap = OverlapPolicy::Forbid;
    let changed = job.updated(forbid, now + Duration::milliseconds(1100));
    store.update_job(&changed, 1, false).await.unwrap();
    let run_id = first
        .recorded
        .iter()
        .find(|task| task.job_id == job.id)
        .unwrap()
        .task_id;
    let marked = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(
        marked.overlap,
        OverlapPolicy::Forbid,
        "its unfinished run is marked"
    );

    let second = store
        .fire(&[job.id], now + Duration::seconds(2), GRACE, &firing())
        .await
        .unwrap();
    assert!(
        second.recorded.is_empty(),
        "the run from before the change is unfinished"
    );
    assert_eq!(second.skipped_overlap, vec![job.id]);

    // Changing a `forbid` job again leaves its runs as they are, and a job that allows
    // overlaps still fires beside its own unfinished run.
    let mut renamed = changed.spec.clone();
    renamed.name = "switching-renamed".into();
    let again = changed.updated(renamed, now + Duration::milliseconds(2100));
    store.update_job(&again, 2, false).await.unwrap();
    let beside = store
        .fire(&[other.id], now + Duration::seconds(2), GRACE, &firing())
        .await
        .unwrap();
    assert_eq!(beside.recorded.len(), 1);
    assert!(beside.skipped_overlap.is_empty());
}

pub(super) async fn overlap_forbid_skips_fires_while_a_run_is_unfinished(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut spec = spec("exclusive", json!({"every": "1s"}));
    spec.settings.overlap = OverlapPolicy::Forbid;
    let job = Job::new(spec, now);
    store.insert_job(&job).await.unwrap();
    let first = store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    assert_eq!(first.recorded.len(), 1);
    assert!(first.skipped_overlap.is_empty());
    let run_id = first.recorded[0].task_id;
    assert_eq!(
        store
            .get_run(run_id)
            .await
            .unwrap()
            .unwrap()
            .fired_by
            .as_deref(),
        Some("node-a")
    );

    let second = store
        .fire(&[job.id], now + Duration::seconds(2), GRACE, &firing())
        .await
        .unwrap();
    assert!(second.recorded.is_empty(), "the first run is unfinished");
    assert_eq!(second.skipped_overlap, vec![job.id]);
    assert_eq!(
        second.next_fire,
        vec![(job.id, Some(now + Duration::seconds(3)))],
        "the schedule still advances"
    );

    let result = ResultMessage {
        v: PROTOCOL_VERSION,
        task_id: run_id,
        attempt: 1,
        consumer: "w1".into(),
        finished_at: now + Duration::seconds(2),
        replayed: false,
        outcome: TaskOutcome::Succeeded { output: None },
    };
    store.record_result(&result).await.unwrap();
    let third = store
        .fire(&[job.id], now + Duration::seconds(3), GRACE, &firing())
        .await
        .unwrap();
    assert_eq!(third.recorded.len(), 1, "fires again once the run finished");
}

/// The runs of `job`, newest first.
async fn runs_of(store: &dyn Store, job: Uuid) -> Vec<Run> {
    store
        .list_runs(
            job,
            &RunPage {
                before: None,
                limit: 100,
            },
        )
        .await
        .unwrap()
}

/// Overlap `buffer_one`: while a run is unfinished one fire is recorded and held (not
/// handed on to publish, no `due_at`), further fires are skipped, and the held fire is
/// released, once, when the job has no other unfinished run.
pub(super) async fn overlap_buffer_one_holds_one_fire_until_the_run_finishes(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut spec = spec("buffered", json!({"every": "1s"}));
    spec.settings.overlap = OverlapPolicy::BufferOne;
    let job = Job::new(spec, now);
    store.insert_job(&job).await.unwrap();
    let first = store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    assert_eq!(first.recorded.len(), 1);
    assert_eq!(first.unarmed, vec![job.id], "never armed ahead");
    let running = first.recorded[0].task_id;

    let second = store
        .fire(&[job.id], now + Duration::seconds(2), GRACE, &firing())
        .await
        .unwrap();
    assert!(second.recorded.is_empty(), "the held fire is not published");
    assert!(
        second.skipped_overlap.is_empty(),
        "one fire is held, not skipped"
    );
    let runs = runs_of(store, job.id).await;
    assert_eq!(runs.len(), 2);
    let held = runs.iter().find(|run| run.id != running).unwrap().clone();
    assert_eq!(held.state, RunState::Scheduled);
    assert_eq!(held.waiting_for, Some(WaitingFor::Previous));
    assert_eq!(held.due_at, None);
    assert_eq!(held.fire_time, now + Duration::seconds(2));
    assert_eq!(held.overlap, OverlapPolicy::BufferOne);
    let far = now + Duration::hours(1);
    assert!(
        store
            .overdue_runs(far, far, None, 10, None)
            .await
            .unwrap()
            .iter()
            .all(|item| item.run.id != held.id),
        "the reconciler does not publish a held run"
    );

    let third = store
        .fire(&[job.id], now + Duration::seconds(3), GRACE, &firing())
        .await
        .unwrap();
    assert!(third.recorded.is_empty());
    assert_eq!(third.skipped_overlap, vec![job.id], "one is held already");
    assert_eq!(runs_of(store, job.id).await.len(), 2);
    assert_eq!(
        store.release_held(now).await.unwrap(),
        0,
        "the first run is unfinished"
    );

    let result = ResultMessage {
        v: PROTOCOL_VERSION,
        task_id: running,
        attempt: 1,
        consumer: "w1".into(),
        finished_at: now + Duration::seconds(3),
        replayed: false,
        outcome: TaskOutcome::Succeeded { output: None },
    };
    store.record_result(&result).await.unwrap();
    let released_at = now + Duration::milliseconds(3500);
    assert_eq!(store.release_held(released_at).await.unwrap(), 1);
    assert_eq!(
        store.release_held(released_at).await.unwrap(),
        0,
        "released once"
    );
    let released = store.get_run(held.id).await.unwrap().unwrap();
    assert_eq!(released.state, RunState::Scheduled);
    assert_eq!(released.waiting_for, None);
    assert_eq!(released.due_at, Some(released_at));
    let at = released_at + Duration::milliseconds(1);
    assert!(
        store
            .overdue_runs(at, at, None, 10, None)
            .await
            .unwrap()
            .iter()
            .any(|item| item.run.id == held.id),
        "a released run is overdue, so the reconciler publishes it"
    );

    // The released run is unfinished in its turn: the next fire is held behind it.
    let fourth = store
        .fire(&[job.id], now + Duration::seconds(4), GRACE, &firing())
        .await
        .unwrap();
    assert!(fourth.recorded.is_empty() && fourth.skipped_overlap.is_empty());
    let runs = runs_of(store, job.id).await;
    assert_eq!(runs.len(), 3);
    assert_eq!(
        runs.iter()
            .filter(|run| run.waiting_for == Some(WaitingFor::Previous))
            .count(),
        1
    );
}

/// A job changed from `allow` to `buffer_one` holds its next fire behind a run recorded
/// before the change.
pub(super) async fn a_job_changed_to_buffer_one_holds_behind_runs_recorded_before(
    store: &dyn Store,
) {
    let now = t("2026-11-21T10:00:00Z");
    let job = Job::new(spec("switching", json!({"every": "1s"})), now);
    store.insert_job(&job).await.unwrap();
    let first = store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    assert_eq!(first.recorded.len(), 1);
    let mut buffered = job.spec.clone();
    buffered.settings.overlap = OverlapPolicy::BufferOne;
    let changed = job.updated(buffered, now + Duration::milliseconds(1100));
    store.update_job(&changed, 1, false).await.unwrap();
    let second = store
        .fire(&[job.id], now + Duration::seconds(2), GRACE, &firing())
        .await
        .unwrap();
    assert!(second.recorded.is_empty(), "held behind the earlier run");
    let third = store
        .fire(&[job.id], now + Duration::seconds(3), GRACE, &firing())
        .await
        .unwrap();
    assert_eq!(third.skipped_overlap, vec![job.id]);
}
