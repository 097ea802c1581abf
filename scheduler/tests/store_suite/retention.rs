//! Retention: old finished runs and silent consumers pruned in batches.

use super::*;

/// Records run `n` of `job` (fired `n` seconds after a fixed start), still `scheduled`.
async fn recorded_run(store: &dyn Store, job: &Job, n: i64) -> Uuid {
    let fire = t("2026-10-01T00:00:00Z") + Duration::seconds(n);
    let run = Run::new(job.id, fire, RunTrigger::Schedule, json!({}), fire);
    assert!(store.insert_run(&run).await.unwrap());
    run.id
}

/// Records run `n` of `job` and its success at `at`.
async fn succeeded_run(store: &dyn Store, job: &Job, n: i64, at: DateTime<Utc>) -> Uuid {
    let id = recorded_run(store, job, n).await;
    let result = ResultMessage {
        outcome: TaskOutcome::Succeeded { output: None },
        ..failure(id, 1, false, at)
    };
    assert_eq!(
        store.record_result(&result).await.unwrap().0,
        ReplyEffect::Applied
    );
    id
}

/// Records run `n` of `job` given up at `at`, its dead letter published or still pending.
async fn dead_run(
    store: &dyn Store,
    job: &Job,
    n: i64,
    at: DateTime<Utc>,
    published: bool,
) -> Uuid {
    let id = recorded_run(store, job, n).await;
    assert!(
        store
            .kill_run(id, Expect::unfinished(), "gave up", None, published, at)
            .await
            .unwrap()
    );
    id
}

pub(super) async fn retention_prunes_old_finished_runs_and_stale_consumers(store: Arc<dyn Store>) {
    let now = t("2026-11-21T10:00:00Z");
    let cutoff = now - Duration::days(7);
    let old = now - Duration::days(10);
    let job = every_second("retained", now - Duration::days(60));
    store.insert_job(&job).await.unwrap();
    let db = store.as_ref();
    let mut succeeded = Vec::new();
    for i in 0..5 {
        succeeded.push(succeeded_run(db, &job, i, old + Duration::minutes(i)).await);
    }
    let published = dead_run(db, &job, 10, old + Duration::days(1), true).await;
    let young = succeeded_run(db, &job, 11, now - Duration::days(1)).await;
    let pending = dead_run(db, &job, 12, old, false).await;
    let scheduled = recorded_run(db, &job, 13).await;
    let dispatched = recorded_run(db, &job, 14).await;
    let acked = recorded_run(db, &job, 15).await;
    let failed = recorded_run(db, &job, 16).await;
    store
        .mark_dispatched(&[dispatched, acked], old)
        .await
        .unwrap();
    let ack = AckMessage {
        v: PROTOCOL_VERSION,
        task_id: acked,
        attempt: 1,
        consumer: "w1".into(),
        acked_at: old,
    };
    assert_eq!(store.record_ack(&ack).await.unwrap(), ReplyEffect::Applied);
    let retry = failure(failed, 1, true, old);
    assert_eq!(
        store.record_result(&retry).await.unwrap(),
        (ReplyEffect::Applied, Some(RunState::Failed))
    );
    let exists = async |id: Uuid| store.get_run(id).await.unwrap().is_some();

    // Oldest first, in batches, until a batch comes back short.
    assert_eq!(store.prune_runs(cutoff, 4).await.unwrap(), 4);
    for &id in &succeeded[..4] {
        assert!(!exists(id).await, "the oldest go first");
    }
    assert!(exists(succeeded[4]).await && exists(published).await);
    assert_eq!(store.prune_runs(cutoff, 4).await.unwrap(), 2);
    assert_eq!(store.prune_runs(cutoff, 4).await.unwrap(), 0);
    assert!(!exists(published).await, "a dead-lettered run is finished");
    assert!(exists(young).await, "younger than the retention");
    assert!(exists(pending).await, "its dead letter is still owed");
    for id in [scheduled, dispatched, acked, failed] {
        assert!(exists(id).await, "unfinished runs are kept");
    }

    // Once its dead letter is confirmed, a dead run goes too.
    store.mark_dead_lettered(pending).await.unwrap();
    assert_eq!(store.prune_runs(cutoff, 4).await.unwrap(), 1);
    assert!(!exists(pending).await);

    // Consumer instances not heard from since the cutoff are forgotten.
    let day_ago = now - Duration::days(1);
    for p in [
        presence("gone-1", "dc-old", day_ago - Duration::hours(2)),
        presence("gone-2", "dc-old", day_ago - Duration::hours(1)),
        presence("here", "dc-new", now - Duration::minutes(1)),
    ] {
        store.record_presence(&p).await.unwrap();
    }
    assert_eq!(store.prune_consumers(day_ago, 1).await.unwrap(), 1);
    assert_eq!(store.prune_consumers(day_ago, 1).await.unwrap(), 1);
    assert_eq!(store.prune_consumers(day_ago, 1).await.unwrap(), 0);
    let seen_ever = now - Duration::days(365);
    assert_eq!(
        store.live_zones(seen_ever).await.unwrap().of("orders"),
        ["dc-new".to_string()]
    );

    // The pruner's pass drains both tables in batches and leaves the rest.
    for i in 20..23 {
        succeeded_run(db, &job, i, old + Duration::minutes(i)).await;
    }
    let gone = presence("gone-3", "dc-old", day_ago - Duration::hours(1));
    store.record_presence(&gone).await.unwrap();
    let mut settings = RetentionSettings::new(Some(std::time::Duration::from_secs(7 * 86_400)));
    settings.batch = 2;
    let pruner = Pruner::new(store.clone(), settings);
    assert_eq!(
        pruner.run_once(now).await.unwrap(),
        PruneOutcome {
            runs: 3,
            consumers: 1,
            observers: 0
        }
    );
    assert_eq!(pruner.run_once(now).await.unwrap(), PruneOutcome::default());
    assert!(exists(young).await);
    let kept = RetentionSettings::new(None);
    assert_eq!(
        Pruner::new(store.clone(), kept)
            .run_once(now + Duration::days(30))
            .await
            .unwrap(),
        PruneOutcome {
            runs: 0,
            consumers: 1,
            observers: 0
        },
        "without run retention only consumers are pruned"
    );
    assert!(exists(young).await);
}
