//! Cancelled runs (`POST /v1/runs/{id}/cancel`): the change is written through
//! `Store::update_run` as `domain::cancel` decides it, and then the run is final — no
//! reply, reconciler step or dispatch mark moves it again, and retention prunes it.

use chime_scheduler::domain::cancel::{CANCELLED_EVENT, cancel};

use super::*;

/// Cancels `id` through the store as the application does; the run as stored, and
/// whether it changed.
async fn cancel_run(store: &dyn Store, id: Uuid, at: DateTime<Utc>) -> (bool, Run) {
    store
        .update_run(id, &|run, _| cancel(run, "ops", at).is_ok())
        .await
        .unwrap()
        .expect("the run exists")
}

pub(super) async fn a_cancelled_run_is_final(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    // Four dispatched runs: [0] stays dispatched, [1] is acked, [2] failed awaiting its
    // retry, [3] succeeded.
    let runs = dispatched_runs(store, &["a", "b"], now).await;
    let at = now + Duration::seconds(5);
    let ack = |task_id| AckMessage {
        v: PROTOCOL_VERSION,
        task_id,
        attempt: 1,
        consumer: "w1".into(),
        acked_at: at,
    };
    for id in &runs[1..] {
        assert_eq!(
            store.record_ack(&ack(*id)).await.unwrap(),
            ReplyEffect::Applied
        );
    }
    store
        .record_result(&failure(runs[2], 1, true, at))
        .await
        .unwrap();
    let success = |task_id| ResultMessage {
        v: PROTOCOL_VERSION,
        task_id,
        attempt: 1,
        consumer: "w1".into(),
        finished_at: at,
        replayed: false,
        outcome: TaskOutcome::Succeeded {
            output: Some(json!({"late": true})),
        },
    };
    store.record_result(&success(runs[3])).await.unwrap();
    let states: Vec<RunState> = {
        let mut states = Vec::new();
        for id in &runs {
            states.push(store.get_run(*id).await.unwrap().unwrap().state);
        }
        states
    };
    assert_eq!(
        states,
        [
            RunState::Dispatched,
            RunState::Acked,
            RunState::Failed,
            RunState::Succeeded
        ]
    );

    let cancelled_at = now + Duration::seconds(10);
    for (i, id) in runs[..3].iter().enumerate() {
        let (changed, run) = cancel_run(store, *id, cancelled_at).await;
        assert!(changed, "run {i}");
        let stored = store.get_run(*id).await.unwrap().unwrap();
        assert_eq!(
            stored, run,
            "run {i}: what update_run answers is what is stored"
        );
        assert_eq!(stored.state, RunState::Cancelled);
        assert_eq!(stored.cancelled_by.as_deref(), Some("ops"));
        assert_eq!(stored.finished_at, Some(cancelled_at));
        assert_eq!(stored.due_at, None, "run {i}: nothing is due");
        assert_eq!(stored.history.last().unwrap().event, CANCELLED_EVENT);
    }
    // A finished run is not changed.
    let (changed, run) = cancel_run(store, runs[3], cancelled_at).await;
    assert!(!changed);
    assert_eq!((run.state, run.cancelled_by), (RunState::Succeeded, None));
    // Twice is refused too.
    assert!(!cancel_run(store, runs[0], cancelled_at).await.0);

    // The reconciler finds nothing to do, and cannot move them.
    let far = now + Duration::days(1);
    let overdue = store.overdue_runs(far, far, None, 10, None).await.unwrap();
    assert!(
        overdue.iter().all(|o| !runs.contains(&o.run.id)),
        "{overdue:?}"
    );
    for id in &runs[..3] {
        assert!(
            !store
                .next_attempt(*id, Expect::unfinished(), None, far)
                .await
                .unwrap()
        );
        assert!(
            !store
                .kill_run(*id, Expect::unfinished(), "gone", None, false, far)
                .await
                .unwrap()
        );
    }
    store.mark_dispatched(&runs[..1], far).await.unwrap();
    assert!(store.scheduled_runs(&runs).await.unwrap().is_empty());

    // Late replies do not revive them: an ack, a heartbeat and a failure are stale; a
    // success is noted in the history (as for a dead run) and the run stays cancelled.
    assert_eq!(
        store.record_ack(&ack(runs[0])).await.unwrap(),
        ReplyEffect::Stale
    );
    let beat = HeartbeatMessage {
        v: PROTOCOL_VERSION,
        task_id: runs[1],
        attempt: 1,
        consumer: "w1".into(),
        at: far,
        progress: None,
    };
    store.record_heartbeat(&beat).await.unwrap();
    assert_eq!(
        store
            .record_result(&failure(runs[2], 1, true, far))
            .await
            .unwrap(),
        (ReplyEffect::Stale, None)
    );
    assert_eq!(
        store.record_result(&success(runs[1])).await.unwrap(),
        (ReplyEffect::Stale, None)
    );
    for id in &runs[..3] {
        let run = store.get_run(*id).await.unwrap().unwrap();
        assert_eq!(run.state, RunState::Cancelled);
        assert_eq!(run.due_at, None);
        assert_eq!(run.finished_at, Some(cancelled_at));
    }
    let acked = store.get_run(runs[1]).await.unwrap().unwrap();
    assert_eq!(acked.heartbeat_at, None, "the heartbeat was not applied");
    assert_eq!(acked.history.last().unwrap().event, "late_success");
    assert_eq!(acked.output, Some(json!({"late": true})));

    // Retention deletes cancelled runs like succeeded ones.
    assert_eq!(store.prune_runs(far, 10).await.unwrap(), 4);
    for id in &runs {
        assert!(store.get_run(*id).await.unwrap().is_none());
    }
}

pub(super) async fn a_cancelled_scheduled_run_is_never_published(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let (x, y) = two_runs_of(store, "unconfirmed", now).await;
    assert_eq!(
        store.scheduled_runs(&[x, y]).await.unwrap(),
        HashSet::from([x, y])
    );
    let (changed, run) = cancel_run(store, x, now + Duration::seconds(3)).await;
    assert!(changed);
    assert_eq!(run.state, RunState::Cancelled);
    // The dispatcher publishes only scheduled runs, and marks only those.
    assert_eq!(
        store.scheduled_runs(&[x, y]).await.unwrap(),
        HashSet::from([y])
    );
    store
        .mark_dispatched(&[x, y], now + Duration::seconds(4))
        .await
        .unwrap();
    assert_eq!(
        store.get_run(x).await.unwrap().unwrap().state,
        RunState::Cancelled
    );
    // Unconfirmed runs are republished by the reconciler; a cancelled one is not among them.
    let far = now + Duration::days(1);
    let overdue = store.overdue_runs(far, far, None, 10, None).await.unwrap();
    assert!(overdue.iter().all(|o| o.run.id != x), "{overdue:?}");
}
