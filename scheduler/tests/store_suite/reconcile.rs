//! What the reconciler relies on: overdue runs, next attempts, runs given up, late
//! results, replays, and runs waiting for a consumer.

use super::*;

pub(super) async fn await_consumer_moves_the_deadline_without_using_an_attempt(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let runs = dispatched_runs(store, &["a", "b"], now).await;
    let later = now + Duration::minutes(1);
    // Acked meanwhile: no longer waits for anything.
    store
        .record_ack(&AckMessage {
            v: PROTOCOL_VERSION,
            task_id: runs[3],
            attempt: 1,
            consumer: "worker-1".into(),
            acked_at: later,
        })
        .await
        .unwrap();
    let asked = [
        (runs[0], 1),
        // Read as another attempt: left alone.
        (runs[1], 2),
        (runs[2], 1),
        (runs[3], 1),
        (Uuid::now_v7(), 1),
    ];
    let moved = store.await_consumer(&asked, later).await.unwrap();
    assert_eq!(moved, HashSet::from([runs[0], runs[2]]));
    for (i, id) in runs.iter().enumerate() {
        let run = store.get_run(*id).await.unwrap().unwrap();
        if i == 0 || i == 2 {
            assert_eq!(
                (run.state, run.attempt, run.waiting_for),
                (RunState::Dispatched, 1, Some(WaitingFor::Consumer)),
                "run {i}"
            );
            // Another full ack timeout (30 s) from now, history untouched.
            assert_eq!(run.due_at, Some(later + Duration::seconds(30)), "run {i}");
            assert!(run.history.is_empty());
        } else {
            assert_eq!(run.waiting_for, None, "run {i}");
        }
    }
    // Once the run moves on, it waits for nothing; dispatched again, it starts afresh.
    let next = NextAttempt {
        run_id: runs[0],
        expect: Expect::exactly(RunState::Dispatched, 1),
        record: None,
    };
    assert_eq!(
        store.next_attempts(&[next], later).await.unwrap(),
        HashSet::from([runs[0]])
    );
    assert_eq!(
        store.get_run(runs[0]).await.unwrap().unwrap().waiting_for,
        None
    );
    store
        .mark_dispatched(&[runs[0]], later + Duration::seconds(1))
        .await
        .unwrap();
    let run = store.get_run(runs[0]).await.unwrap().unwrap();
    assert_eq!(
        (run.state, run.attempt, run.waiting_for),
        (RunState::Dispatched, 2, None)
    );
    assert!(store.await_consumer(&[], later).await.unwrap().is_empty());
}

pub(super) async fn next_attempts_moves_only_runs_still_as_expected(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let runs = dispatched_runs(store, &["a", "b"], now).await;
    let timeout = AttemptRecord {
        attempt: 1,
        event: "ack_timeout".into(),
        at: now + Duration::minutes(1),
        consumer: None,
        error: Some("not acked within 30s".into()),
        retry_at: None,
    };
    let later = now + Duration::minutes(1);
    let moves = [
        // As read: moved, with the timeout in its history.
        NextAttempt {
            run_id: runs[0],
            expect: Expect::exactly(RunState::Dispatched, 1),
            record: Some(&timeout),
        },
        // Read as another attempt: left alone.
        NextAttempt {
            run_id: runs[1],
            expect: Expect::exactly(RunState::Dispatched, 2),
            record: Some(&timeout),
        },
        // Any unfinished state will do: moved, no history entry.
        NextAttempt {
            run_id: runs[2],
            expect: Expect::unfinished(),
            record: None,
        },
        // Read as acked, but it is still dispatched: left alone.
        NextAttempt {
            run_id: runs[3],
            expect: Expect::exactly(RunState::Acked, 1),
            record: None,
        },
        // No such run.
        NextAttempt {
            run_id: Uuid::now_v7(),
            expect: Expect::unfinished(),
            record: None,
        },
    ];
    let moved = store.next_attempts(&moves, later).await.unwrap();
    assert_eq!(moved, HashSet::from([runs[0], runs[2]]));
    for (i, id) in runs.iter().enumerate() {
        let run = store.get_run(*id).await.unwrap().unwrap();
        if i == 0 || i == 2 {
            assert_eq!(
                (run.state, run.attempt),
                (RunState::Scheduled, 2),
                "run {i}"
            );
            assert_eq!((run.due_at, run.dispatched_at), (Some(later), None));
        } else {
            assert_eq!(
                (run.state, run.attempt),
                (RunState::Dispatched, 1),
                "run {i}"
            );
        }
        let expected_history = if i == 0 {
            vec![timeout.clone()]
        } else {
            vec![]
        };
        assert_eq!(run.history, expected_history, "run {i}");
    }
    assert!(store.next_attempts(&[], later).await.unwrap().is_empty());
    // Once moved, the same expectation no longer holds.
    assert!(
        !store
            .next_attempt(
                runs[0],
                Expect::exactly(RunState::Dispatched, 1),
                None,
                later
            )
            .await
            .unwrap()
    );
}

pub(super) async fn retryable_failures_retry_after_backoff_then_die(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut spec = spec("flaky", json!({"every": "1h"}));
    spec.settings.max_attempts = 2;
    let job = Job::new(spec, now);
    store.insert_job(&job).await.unwrap();
    let run = job
        .new_runs(now, RunTrigger::Manual, now, &LiveZones::default())
        .remove(0);
    store.insert_run(&run).await.unwrap();
    store.mark_dispatched(&[run.id], now).await.unwrap();

    let before = Utc::now();
    let (effect, state) = store
        .record_result(&failure(run.id, 1, true, now))
        .await
        .unwrap();
    assert_eq!(
        (effect, state),
        (ReplyEffect::Applied, Some(RunState::Failed))
    );
    let failed = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(failed.state, RunState::Failed);
    let due = failed.due_at.expect("a retry is scheduled");
    assert!(
        due >= before + Duration::milliseconds(499) && due <= Utc::now() + Duration::seconds(1),
        "first retry within the jittered first backoff (0.5-1 s): {due}"
    );
    assert_eq!(failed.history.len(), 1);
    assert_eq!(failed.history[0].retry_at, Some(due));
    // A second report of the same failure changes nothing.
    assert_eq!(
        store
            .record_result(&failure(run.id, 1, true, now))
            .await
            .unwrap()
            .0,
        ReplyEffect::Stale
    );
    // Not overdue before its time; overdue after.
    let just_before = due - Duration::milliseconds(1);
    assert!(
        store
            .overdue_runs(just_before, just_before, None, 10, None)
            .await
            .unwrap()
            .is_empty()
    );
    let after = due + Duration::milliseconds(1);
    let overdue = store
        .overdue_runs(after, after, None, 10, None)
        .await
        .unwrap();
    assert_eq!(overdue.len(), 1);
    assert_eq!(overdue[0].run.state, RunState::Failed);
    assert!(
        !store
            .next_attempt(run.id, Expect::exactly(RunState::Failed, 2), None, after)
            .await
            .unwrap(),
        "a stale expectation changes nothing"
    );
    assert!(
        store
            .next_attempt(run.id, Expect::exactly(RunState::Failed, 1), None, after)
            .await
            .unwrap()
    );
    let second = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!((second.state, second.attempt), (RunState::Scheduled, 2));
    assert_eq!(second.finished_at, None);
    // A late failure report of attempt 1 no longer matters.
    assert_eq!(
        store
            .record_result(&failure(run.id, 1, true, now))
            .await
            .unwrap()
            .0,
        ReplyEffect::Stale
    );
    store.mark_dispatched(&[run.id], after).await.unwrap();
    let (_, state) = store
        .record_result(&failure(run.id, 2, true, after))
        .await
        .unwrap();
    assert_eq!(state, Some(RunState::Dead), "attempts exhausted");
    let dead = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(dead.history.len(), 2);
    assert!(dead.error.unwrap().contains("2 of 2"));
    // The dead letter is pending until noted.
    let far = Utc::now() + Duration::seconds(1);
    let pending = store.overdue_runs(far, far, None, 10, None).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].run.state, RunState::Dead);
    store.mark_dead_lettered(run.id).await.unwrap();
    assert!(
        store
            .overdue_runs(far, far, None, 10, None)
            .await
            .unwrap()
            .is_empty()
    );
}

/// What the dispatcher does with a run whose task can never be published: gives it up
/// only while it is still `scheduled` at the attempt that failed, with the reason and an
/// `unpublishable` history entry, and its dead letter pending.
pub(super) async fn an_unpublishable_run_is_given_up_at_its_attempt(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = Job::new(spec("poisoned", json!({"every": "1h"})), now);
    store.insert_job(&job).await.unwrap();
    let run = job
        .new_runs(now, RunTrigger::Manual, now, &LiveZones::default())
        .remove(0);
    store.insert_run(&run).await.unwrap();
    let reason = "cannot publish: zone[0] makes the zone queue name 274 bytes long";
    let record = AttemptRecord {
        attempt: 1,
        event: "unpublishable".into(),
        at: now,
        consumer: None,
        error: Some(reason.into()),
        retry_at: None,
    };
    let give_up = |attempt| {
        store.kill_run(
            run.id,
            Expect::exactly(RunState::Scheduled, attempt),
            reason,
            Some(&record),
            false,
            now,
        )
    };
    assert!(!give_up(2).await.unwrap(), "another attempt is left alone");
    assert!(give_up(1).await.unwrap());
    let dead = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(dead.state, RunState::Dead);
    assert_eq!(dead.error.as_deref(), Some(reason));
    assert_eq!(dead.history.last(), Some(&record));
    assert_eq!(dead.due_at, Some(now), "its dead letter is pending");
    assert!(!give_up(1).await.unwrap(), "dead is final");
}

/// A result for a run already given up leaves it `dead` and shows in its history, once
/// per attempt; a late success's output is kept.
pub(super) async fn a_late_result_for_a_dead_run_is_noted_in_its_history(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let runs = dispatched_runs(store, &["late"], now).await;
    for id in &runs {
        store
            .kill_run(
                *id,
                Expect::unfinished(),
                "not acked within 30s",
                None,
                false,
                now,
            )
            .await
            .unwrap();
    }
    let late = |task_id, attempt, outcome| {
        Reply::Result(ResultMessage {
            v: PROTOCOL_VERSION,
            task_id,
            attempt,
            consumer: "w2".into(),
            finished_at: now + Duration::minutes(5),
            replayed: false,
            outcome,
        })
    };
    let success = late(
        runs[0],
        1,
        TaskOutcome::Succeeded {
            output: Some(json!({"done": 3})),
        },
    );
    let failure = late(
        runs[1],
        1,
        TaskOutcome::Failed {
            error: TaskError {
                message: "boom".into(),
                retryable: true,
                retry_after_ms: None,
            },
        },
    );
    // The same late success twice (a redelivery) is noted once.
    let batch = [&success, &failure, &success];
    let effects = store
        .record_replies(&batch, Utc::now(), &rand::random)
        .await
        .unwrap()
        .effects;
    assert!(
        effects
            .iter()
            .all(|(effect, state)| *effect == ReplyEffect::Stale && state.is_none())
    );
    let done = store.get_run(runs[0]).await.unwrap().unwrap();
    assert_eq!(done.state, RunState::Dead);
    assert_eq!(done.output, Some(json!({"done": 3})));
    let late_records: Vec<_> = done
        .history
        .iter()
        .filter(|r| r.event.starts_with("late_"))
        .collect();
    assert_eq!(late_records.len(), 1, "{:?}", done.history);
    assert_eq!(
        (
            late_records[0].event.as_str(),
            late_records[0].attempt,
            late_records[0].consumer.as_deref()
        ),
        ("late_success", 1, Some("w2"))
    );
    assert_eq!(
        chime_scheduler::domain::run::late_outcome(&done.history).map(|r| r.event.as_str()),
        Some("late_success")
    );
    let failed = store.get_run(runs[1]).await.unwrap().unwrap();
    assert_eq!((failed.state, failed.output), (RunState::Dead, None));
    let record = chime_scheduler::domain::run::late_outcome(&failed.history).unwrap();
    assert_eq!(
        (record.event.as_str(), record.error.as_deref()),
        ("late_failure", Some("boom"))
    );
}

pub(super) async fn replay_revives_only_dead_runs(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = Job::new(spec("replayed", json!({"every": "1h"})), now);
    store.insert_job(&job).await.unwrap();
    let run = job
        .new_runs(now, RunTrigger::Manual, now, &LiveZones::default())
        .remove(0);
    store.insert_run(&run).await.unwrap();
    assert!(matches!(
        dlq::replay_run(store, run.id, now).await.unwrap(),
        Replay::NotDead(RunState::Scheduled)
    ));
    store
        .kill_run(run.id, Expect::unfinished(), "gave up", None, false, now)
        .await
        .unwrap();
    let Replay::Revived(revived) = dlq::replay_run(store, run.id, now).await.unwrap() else {
        panic!("a dead run is revived")
    };
    assert_eq!((revived.run.attempt, revived.job.id), (2, job.id));
    let stored = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.attempt), (RunState::Scheduled, 2));
    assert_eq!(stored.history.last().unwrap().event, "replayed");
    assert!(matches!(
        dlq::replay_run(store, Uuid::now_v7(), now).await.unwrap(),
        Replay::Unknown
    ));
    assert_eq!(
        store.target_groups().await.unwrap(),
        vec!["orders".to_string()]
    );
}

/// A run row the store cannot read (written around it: here an unknown state) is left out
/// of the reconciler's overdue runs instead of failing the whole page.
pub(super) async fn overdue_runs_skip_an_unreadable_row(
    store: &dyn Store,
    corrupt: &str,
    url: &str,
) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("unreadable", now);
    store.insert_job(&job).await.unwrap();
    let good = Run::new(job.id, now, RunTrigger::Manual, json!(1), now);
    let bad = Run::new(
        job.id,
        now - Duration::seconds(1),
        RunTrigger::Manual,
        json!(2),
        now,
    );
    assert!(store.insert_run(&good).await.unwrap());
    assert!(store.insert_run(&bad).await.unwrap());
    use sqlx::Connection as _;
    let id = bad.id.to_string();
    if url.starts_with("sqlite") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(corrupt))
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(corrupt))
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let at = now + Duration::seconds(2);
    let overdue = store.overdue_runs(at, at, None, 10, None).await.unwrap();
    let ids: Vec<Uuid> = overdue.iter().map(|o| o.run.id).collect();
    assert_eq!(ids, [good.id], "the readable run is still handed over");
}
