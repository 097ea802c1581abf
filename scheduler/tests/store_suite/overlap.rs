//! Overlap policy `forbid`: fires wait for the job's unfinished runs.

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
