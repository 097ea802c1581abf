//! Runs: pages, manual and unconfirmed runs, notes in a run's history.

use super::*;

pub(super) async fn runs_page_newest_first(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut job = every_second("a", now);
    job.spec.settings.misfire = MisfirePolicy::CatchUp;
    store.insert_job(&job).await.unwrap();
    store
        .fire(
            &[job.id],
            now + Duration::seconds(5),
            Duration::seconds(10),
            &firing(),
        )
        .await
        .unwrap();
    let page = store
        .list_runs(
            job.id,
            &RunPage {
                before: None,
                limit: 2,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|r| r.fire_time).collect::<Vec<_>>(),
        [now + Duration::seconds(5), now + Duration::seconds(4)]
    );
    let last = page.last().unwrap();
    let rest = store
        .list_runs(
            job.id,
            &RunPage {
                before: Some((last.fire_time, last.id)),
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(rest.len(), 3);
    assert_eq!(rest[0].fire_time, now + Duration::seconds(3));
}

pub(super) async fn manual_runs_and_unconfirmed_runs(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let manual = Run::new(job.id, now, RunTrigger::Manual, json!({"m": 1}), now);
    assert!(store.insert_run(&manual).await.unwrap());
    assert!(
        !store.insert_run(&manual).await.unwrap(),
        "same fire, same id"
    );
    let batch = store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    store
        .mark_dispatched(&[batch.recorded[0].task_id], now)
        .await
        .unwrap();
    store
        .note_publish_failure(manual.id, "unroutable: NO_ROUTE")
        .await
        .unwrap();

    let still = store
        .scheduled_runs(&[manual.id, batch.recorded[0].task_id, Uuid::now_v7()])
        .await
        .unwrap();
    assert_eq!(still, [manual.id].into_iter().collect());
    let at = now + Duration::seconds(2);
    let pending = store.overdue_runs(at, at, None, 10, None).await.unwrap();
    assert_eq!(
        pending.len(),
        1,
        "the dispatched run is not due for its ack yet"
    );
    let task = pending[0].job.task_message(&pending[0].run);
    assert_eq!(task.task_id, manual.id);
    assert_eq!(task.group, "orders");
    assert_eq!(task.payload, json!({"m": 1}));
    assert!(
        store
            .overdue_runs(at, now, None, 10, None)
            .await
            .unwrap()
            .is_empty(),
        "too recent to publish again"
    );
    let run = store.get_run(manual.id).await.unwrap().unwrap();
    assert_eq!(run.error.as_deref(), Some("unroutable: NO_ROUTE"));
    assert_eq!(run.trigger, RunTrigger::Manual);
}

pub(super) async fn notes_are_appended_to_a_runs_history_up_to_a_bound(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = Job::new(spec("noted", json!({"every": "1h"})), now);
    store.insert_job(&job).await.unwrap();
    let run = job
        .new_runs(now, RunTrigger::Manual, now, &LiveZones::default())
        .remove(0);
    store.insert_run(&run).await.unwrap();
    let note = AttemptRecord {
        attempt: 1,
        event: "reply_rejected".into(),
        at: now,
        consumer: Some("c1".into()),
        error: Some("missing field `acked_at`".into()),
        retry_at: None,
    };
    assert!(store.note_on_run(run.id, &note).await.unwrap());
    let stored = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(stored.history, std::slice::from_ref(&note));
    assert_eq!(
        (stored.state, stored.attempt),
        (run.state, run.attempt),
        "a note changes nothing else"
    );
    assert!(!store.note_on_run(Uuid::now_v7(), &note).await.unwrap());
    for _ in 1..chime_scheduler::store::MAX_NOTES {
        assert!(store.note_on_run(run.id, &note).await.unwrap());
    }
    assert!(
        !store.note_on_run(run.id, &note).await.unwrap(),
        "the history is full"
    );
    let stored = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(stored.history.len(), chime_scheduler::store::MAX_NOTES);
}
