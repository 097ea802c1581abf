//! Consumers' replies: acks, heartbeats and results, in batches and rounds, and the
//! per-instance receipts of broadcast runs.

use super::*;

/// Records an every-second job started at `now` and fires it at `now + 2 s`: the runs of
/// its fires at +1 s and +2 s, both `scheduled`.
async fn two_runs(store: &dyn Store, now: DateTime<Utc>) -> (Uuid, Uuid) {
    two_runs_of(store, "a", now).await
}

pub(super) async fn replies_move_runs_through_their_states(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let (first, second) = two_runs(store, now).await;

    store
        .mark_dispatched(&[first], now + Duration::seconds(2))
        .await
        .unwrap();
    let ack = AckMessage {
        v: PROTOCOL_VERSION,
        task_id: first,
        attempt: 1,
        consumer: "worker-1".into(),
        acked_at: now + Duration::seconds(3),
    };
    assert_eq!(store.record_ack(&ack).await.unwrap(), ReplyEffect::Applied);
    assert_eq!(store.record_ack(&ack).await.unwrap(), ReplyEffect::Stale);
    let result = ResultMessage {
        v: PROTOCOL_VERSION,
        task_id: first,
        attempt: 1,
        consumer: "worker-1".into(),
        finished_at: now + Duration::seconds(4),
        replayed: false,
        outcome: TaskOutcome::Succeeded {
            output: Some(json!({"closed": 3})),
        },
    };
    assert_eq!(
        store.record_result(&result).await.unwrap().0,
        ReplyEffect::Applied
    );
    let run = store.get_run(first).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Succeeded);
    assert_eq!(run.dispatched_at, Some(now + Duration::seconds(2)));
    assert_eq!(run.acked_at, Some(now + Duration::seconds(3)));
    assert_eq!(run.finished_at, Some(now + Duration::seconds(4)));
    assert_eq!(run.consumer.as_deref(), Some("worker-1"));
    assert_eq!(run.output, Some(json!({"closed": 3})));
    let failed_late = ResultMessage {
        outcome: TaskOutcome::Failed {
            error: TaskError {
                message: "late".into(),
                retryable: false,
                retry_after_ms: None,
            },
        },
        ..result.clone()
    };
    assert_eq!(
        store.record_result(&failed_late).await.unwrap().0,
        ReplyEffect::Stale
    );

    // A result may overtake the broker's confirm: the run still records every timestamp.
    let failed = ResultMessage {
        task_id: second,
        ..failed_late
    };
    assert_eq!(
        store.record_result(&failed).await.unwrap().0,
        ReplyEffect::Applied
    );
    store
        .mark_dispatched(&[second], now + Duration::seconds(9))
        .await
        .unwrap();
    let run = store.get_run(second).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Dead, "a permanent failure is final");
    assert_eq!(run.error.as_deref(), Some("permanent failure: late"));
    assert_eq!(run.history.len(), 1);
    assert_eq!(run.dispatched_at, Some(now + Duration::seconds(4)));

    let unknown = AckMessage {
        task_id: Uuid::now_v7(),
        ..ack
    };
    assert_eq!(
        store.record_ack(&unknown).await.unwrap(),
        ReplyEffect::UnknownRun
    );
}

pub(super) async fn a_batch_of_replies_applies_in_order_in_one_call(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let (first, second) = two_runs(store, now).await;
    store
        .mark_dispatched(&[first, second], now + Duration::seconds(2))
        .await
        .unwrap();
    let ack = |task_id| {
        Reply::Ack(AckMessage {
            v: PROTOCOL_VERSION,
            task_id,
            attempt: 1,
            consumer: "worker-1".into(),
            acked_at: now + Duration::seconds(3),
        })
    };
    let result = Reply::Result(ResultMessage {
        v: PROTOCOL_VERSION,
        task_id: first,
        attempt: 1,
        consumer: "worker-1".into(),
        finished_at: now + Duration::seconds(4),
        replayed: false,
        outcome: TaskOutcome::Succeeded { output: None },
    });
    let batch = [
        ack(first),
        result.clone(),
        ack(Uuid::now_v7()),
        ack(second),
        ack(first),
        Reply::Presence(presence("web-1", "dc1", now)),
    ];
    let applied: Vec<ReplyEffect> = store
        .record_replies(&batch.iter().collect::<Vec<_>>(), Utc::now(), &rand::random)
        .await
        .unwrap()
        .effects
        .into_iter()
        .map(|(effect, _)| effect)
        .collect();
    use ReplyEffect::{Applied, Stale, UnknownRun};
    // The late ack comes after the result in the batch, so it finds the run finished.
    assert_eq!(
        applied,
        [Applied, Applied, UnknownRun, Applied, Stale, Applied]
    );
    let first_run = store.get_run(first).await.unwrap().unwrap();
    assert_eq!(first_run.state, RunState::Succeeded);
    assert_eq!(first_run.acked_at, Some(now + Duration::seconds(3)));
    assert_eq!(
        store.get_run(second).await.unwrap().unwrap().state,
        RunState::Acked
    );
    assert_eq!(
        store
            .live_zones(now - Duration::seconds(1))
            .await
            .unwrap()
            .of("orders"),
        ["dc1".to_string()]
    );
    assert_eq!(
        store
            .record_replies(&[], Utc::now(), &rand::random)
            .await
            .unwrap()
            .effects,
        vec![]
    );
    assert_eq!(
        store.record_reply(&result).await.unwrap(),
        (Stale, None),
        "a repeated batch changes nothing"
    );
}

pub(super) async fn a_round_of_many_replies_writes_every_run(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let runs = dispatched_runs(store, &["a", "b", "c"], now).await;
    let acked_at = |i: usize| now + Duration::milliseconds(3000 + i as i64);
    let finished_at = |i: usize| now + Duration::milliseconds(5000 + i as i64);
    let result = |i: usize, outcome| {
        Reply::Result(ResultMessage {
            v: PROTOCOL_VERSION,
            task_id: runs[i],
            attempt: 1,
            consumer: format!("worker-{i}"),
            finished_at: finished_at(i),
            replayed: false,
            outcome,
        })
    };
    // One round of six acks, then one of five results: each is written in one go.
    let mut batch: Vec<Reply> = (0..6)
        .map(|i| {
            Reply::Ack(AckMessage {
                v: PROTOCOL_VERSION,
                task_id: runs[i],
                attempt: 1,
                consumer: format!("worker-{i}"),
                acked_at: acked_at(i),
            })
        })
        .collect();
    for i in 0..4 {
        let output = (i != 3).then(|| json!({"n": i, "text": "fin ✓"}));
        batch.push(result(i, TaskOutcome::Succeeded { output }));
    }
    batch.push(result(
        4,
        TaskOutcome::Failed {
            error: TaskError {
                message: "db down".into(),
                retryable: true,
                retry_after_ms: None,
            },
        },
    ));
    let applied = store
        .record_replies(&batch.iter().collect::<Vec<_>>(), Utc::now(), &rand::random)
        .await
        .unwrap()
        .effects;
    let mut expected = vec![(ReplyEffect::Applied, None); 6];
    expected.extend([(ReplyEffect::Applied, Some(RunState::Succeeded)); 4]);
    expected.push((ReplyEffect::Applied, Some(RunState::Failed)));
    assert_eq!(applied, expected);
    for (i, id) in runs.iter().enumerate() {
        let run = store.get_run(*id).await.unwrap().unwrap();
        assert_eq!(run.acked_at, Some(acked_at(i)), "run {i}");
        assert_eq!(
            run.consumer.as_deref(),
            Some(format!("worker-{i}").as_str())
        );
        assert_eq!(run.dispatched_at, Some(now + Duration::seconds(2)));
        match i {
            0..=3 => {
                assert_eq!(run.state, RunState::Succeeded, "run {i}");
                assert_eq!(run.finished_at, Some(finished_at(i)));
                let output = (i != 3).then(|| json!({"n": i, "text": "fin ✓"}));
                assert_eq!(run.output, output, "run {i}");
                assert_eq!(run.error, None);
            }
            4 => {
                assert_eq!(run.state, RunState::Failed);
                assert_eq!(run.error.as_deref(), Some("db down"));
            }
            _ => assert_eq!(run.state, RunState::Acked),
        }
    }
    // Acked runs are due within their run timeout; succeeded ones are due no more.
    let overdue = store
        .overdue_runs(
            now + Duration::days(30),
            now + Duration::days(30),
            None,
            100,
            None,
        )
        .await
        .unwrap();
    let overdue: Vec<Uuid> = overdue.iter().map(|o| o.run.id).collect();
    assert!(overdue.contains(&runs[5]) && overdue.contains(&runs[4]));
    assert!(
        runs[..4].iter().all(|id| !overdue.contains(id)),
        "{overdue:?}"
    );
}

pub(super) async fn an_ack_and_its_success_in_one_batch_write_the_run_once(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    // 2 × 60 dispatched runs: more than one PostgreSQL part, so pairs meet a part's edge.
    let names: Vec<String> = (0..60).map(|i| format!("job-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut runs = dispatched_runs(store, &names, now).await;
    // And one never confirmed: the pair gives it its dispatch time too.
    let (unconfirmed, _) = two_runs_of(store, "unconfirmed", now).await;
    runs.push(unconfirmed);
    let acked_at = |i: usize| now + Duration::milliseconds(3000 + i as i64);
    let finished_at = |i: usize| now + Duration::milliseconds(9000 + i as i64);
    let mut batch = Vec::new();
    for (i, id) in runs.iter().enumerate() {
        batch.push(Reply::Ack(AckMessage {
            v: PROTOCOL_VERSION,
            task_id: *id,
            attempt: 1,
            consumer: "acking-worker".into(),
            acked_at: acked_at(i),
        }));
        batch.push(Reply::Result(ResultMessage {
            v: PROTOCOL_VERSION,
            task_id: *id,
            attempt: 1,
            consumer: format!("worker-{i}"),
            finished_at: finished_at(i),
            replayed: false,
            outcome: TaskOutcome::Succeeded {
                output: Some(json!({"n": i})),
            },
        }));
    }
    let applied = store
        .record_replies(&batch.iter().collect::<Vec<_>>(), Utc::now(), &rand::random)
        .await
        .unwrap()
        .effects;
    let expected: Vec<_> = runs
        .iter()
        .flat_map(|_| {
            [
                (ReplyEffect::Applied, None),
                (ReplyEffect::Applied, Some(RunState::Succeeded)),
            ]
        })
        .collect();
    assert_eq!(applied, expected);
    for (i, id) in runs.iter().enumerate() {
        let run = store.get_run(*id).await.unwrap().unwrap();
        assert_eq!(run.state, RunState::Succeeded, "run {i}");
        assert_eq!(run.acked_at, Some(acked_at(i)), "run {i}: the ack's time");
        assert_eq!(run.finished_at, Some(finished_at(i)), "run {i}");
        assert_eq!(
            run.consumer.as_deref(),
            Some(format!("worker-{i}").as_str())
        );
        assert_eq!(run.output, Some(json!({"n": i})), "run {i}");
        let dispatched = if *id == unconfirmed {
            acked_at(i)
        } else {
            now + Duration::seconds(2)
        };
        assert_eq!(run.dispatched_at, Some(dispatched), "run {i}");
    }
    // Sent again (a redelivered batch), every reply is stale and nothing changes.
    let again = store
        .record_replies(&batch.iter().collect::<Vec<_>>(), Utc::now(), &rand::random)
        .await
        .unwrap()
        .effects;
    assert!(
        again.iter().all(|a| *a == (ReplyEffect::Stale, None)),
        "{again:?}"
    );
    let first = store.get_run(runs[0]).await.unwrap().unwrap();
    assert_eq!(first.acked_at, Some(acked_at(0)));
}

/// The dispatcher marks a confirm a moment after it arrives, so a quick task's replies
/// may be recorded first: the late mark leaves such runs as the replies wrote them.
pub(super) async fn a_mark_after_the_replies_leaves_the_runs_as_they_wrote_them(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let (succeeded, acked) = two_runs_of(store, "quick", now).await;
    let (waiting, _) = two_runs_of(store, "waiting", now).await;
    let acked_at = now + Duration::milliseconds(2100);
    let ack = |task_id| {
        Reply::Ack(AckMessage {
            v: PROTOCOL_VERSION,
            task_id,
            attempt: 1,
            consumer: "w".into(),
            acked_at,
        })
    };
    let batch = [
        ack(succeeded),
        Reply::Result(ResultMessage {
            v: PROTOCOL_VERSION,
            task_id: succeeded,
            attempt: 1,
            consumer: "w".into(),
            finished_at: acked_at,
            replayed: false,
            outcome: TaskOutcome::Succeeded { output: None },
        }),
        ack(acked),
    ];
    store
        .record_replies(&batch.iter().collect::<Vec<_>>(), Utc::now(), &rand::random)
        .await
        .unwrap();
    let before = [
        store.get_run(succeeded).await.unwrap().unwrap(),
        store.get_run(acked).await.unwrap().unwrap(),
    ];
    assert_eq!(before[0].state, RunState::Succeeded);
    assert_eq!(before[1].state, RunState::Acked);
    for run in &before {
        assert_eq!(run.dispatched_at, Some(acked_at), "the ack stands in");
    }

    let confirmed = now + Duration::milliseconds(2050);
    store
        .mark_dispatched(&[acked, waiting, succeeded], confirmed)
        .await
        .unwrap();
    for run in before {
        let after = store.get_run(run.id).await.unwrap().unwrap();
        assert_eq!(after.state, run.state);
        assert_eq!(after.dispatched_at, run.dispatched_at);
        assert_eq!(after.due_at, run.due_at, "the mark set no ack deadline");
    }
    let waiting = store.get_run(waiting).await.unwrap().unwrap();
    assert_eq!(waiting.state, RunState::Dispatched);
    assert_eq!(waiting.dispatched_at, Some(confirmed));
}

pub(super) async fn deadlines_follow_acks_and_heartbeats(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut spec = spec("slow", json!({"every": "1h"}));
    spec.settings.ack_timeout = HumanDuration(std::time::Duration::from_secs(7));
    spec.settings.run_timeout = HumanDuration(std::time::Duration::from_secs(60));
    let job = Job::new(spec, now);
    store.insert_job(&job).await.unwrap();
    let run = job
        .new_runs(now, RunTrigger::Manual, now, &LiveZones::default())
        .remove(0);
    store.insert_run(&run).await.unwrap();
    store.mark_dispatched(&[run.id], now).await.unwrap();
    let dispatched = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(dispatched.due_at, Some(now + Duration::seconds(7)));
    assert_eq!(dispatched.ack_timeout, std::time::Duration::from_secs(7));

    let ack = AckMessage {
        v: PROTOCOL_VERSION,
        task_id: run.id,
        attempt: 2,
        consumer: "w1".into(),
        acked_at: now,
    };
    assert_eq!(
        store.record_ack(&ack).await.unwrap(),
        ReplyEffect::Stale,
        "an ack of another attempt"
    );
    let before = Utc::now();
    store
        .record_ack(&AckMessage { attempt: 1, ..ack })
        .await
        .unwrap();
    let acked = store.get_run(run.id).await.unwrap().unwrap();
    let due = acked.due_at.unwrap();
    assert!(due >= before + Duration::seconds(59) && due <= Utc::now() + Duration::seconds(60));

    let heartbeat = HeartbeatMessage {
        v: PROTOCOL_VERSION,
        task_id: run.id,
        attempt: 1,
        consumer: "w1".into(),
        at: now + Duration::seconds(5),
        progress: Some(Progress {
            percent: Some(40.0),
            note: Some("page 4".into()),
        }),
    };
    assert_eq!(
        store.record_heartbeat(&heartbeat).await.unwrap(),
        ReplyEffect::Applied
    );
    let beating = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(beating.heartbeat_at, Some(now + Duration::seconds(5)));
    assert_eq!(beating.progress.as_ref().unwrap().percent, Some(40.0));
    assert!(beating.due_at.unwrap() >= due);
    // A heartbeat without progress keeps the last report.
    store
        .record_heartbeat(&HeartbeatMessage {
            progress: None,
            ..heartbeat.clone()
        })
        .await
        .unwrap();
    let kept = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(kept.progress.unwrap().note.as_deref(), Some("page 4"));

    // A run given up by the broker has no dead letter pending.
    assert!(
        store
            .kill_run(
                run.id,
                Expect::unfinished(),
                "delivery limit",
                None,
                true,
                now
            )
            .await
            .unwrap()
    );
    let dead = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!((dead.state, dead.due_at), (RunState::Dead, None));
    assert!(
        !store
            .kill_run(run.id, Expect::unfinished(), "again", None, true, now)
            .await
            .unwrap(),
        "dead is final"
    );
}

/// Applies `replies` as one batch at `at`; what each did.
async fn record_at(store: &dyn Store, replies: &[Reply], at: DateTime<Utc>) -> Vec<ReplyApplied> {
    let batch: Vec<&Reply> = replies.iter().collect();
    store
        .record_replies(&batch, at, &rand::random)
        .await
        .unwrap()
        .effects
}

pub(super) async fn broadcast_replies_are_kept_per_instance(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = with_target(
        "refresh",
        now,
        Target {
            mode: DeliveryMode::Broadcast,
            ..Target::group("web")
        },
    );
    store.insert_job(&job).await.unwrap();
    let batch = store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    let id = batch.recorded[0].task_id;
    let sent = now + Duration::seconds(1);
    store.mark_dispatched(&[id], sent).await.unwrap();
    let ack = |instance: &str| AckMessage {
        v: PROTOCOL_VERSION,
        task_id: id,
        attempt: 1,
        consumer: instance.into(),
        acked_at: sent + Duration::milliseconds(10),
    };
    let done = |instance: &str| ResultMessage {
        v: PROTOCOL_VERSION,
        task_id: id,
        attempt: 1,
        consumer: instance.into(),
        finished_at: sent + Duration::milliseconds(20),
        replayed: false,
        outcome: TaskOutcome::Succeeded { output: None },
    };
    // A reply to a broadcast run is recorded as its instance's receipt, in the reply
    // round that meets it (here: b's ack and a's result share the second round).
    let at = sent + Duration::milliseconds(30);
    assert_eq!(
        record_at(
            store,
            &[
                Reply::Ack(ack("a")),
                Reply::Ack(ack("b")),
                Reply::Result(done("a")),
            ],
            at
        )
        .await,
        vec![(ReplyEffect::Applied, None); 3]
    );
    assert_eq!(
        record_at(store, &[Reply::Ack(ack("a"))], at).await,
        vec![(ReplyEffect::Stale, None)]
    );
    // b finishes while the ack window (30 s) is still open: not decided yet.
    assert_eq!(
        record_at(store, &[Reply::Result(done("b"))], at).await,
        vec![(ReplyEffect::Applied, None)]
    );
    assert!(
        settle_broadcast(store, id, at, rand::random())
            .await
            .unwrap()
            .is_none()
    );
    let run = store.get_run(id).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Acked);
    assert_eq!(run.due_at, Some(sent + Duration::seconds(30)));
    let settled = settle_broadcast(store, id, sent + Duration::seconds(30), rand::random())
        .await
        .unwrap()
        .expect("decided once the window closed");
    assert_eq!(settled.state, RunState::Succeeded);
    let run = store.get_run(id).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Succeeded);
    assert_eq!(run.due_at, None);
    assert_eq!(run.output, Some(json!({"instances": ["a", "b"]})));
    let states: Vec<(String, ReceiptState)> = run
        .instances
        .iter()
        .map(|r| (r.instance.clone(), r.state))
        .collect();
    assert_eq!(
        states,
        vec![
            ("a".to_string(), ReceiptState::Succeeded),
            ("b".to_string(), ReceiptState::Succeeded)
        ]
    );
    assert!(
        record_at(store, &[Reply::Result(done("c"))], at).await[0].0 == ReplyEffect::Stale,
        "a finished run takes no more receipts"
    );
}

/// A round that fails stops the batch: the rounds before it stay applied, and the
/// failure says which replies they applied. `corrupt` makes a job's settings
/// unreadable (bound to the job id); only a failure's round reads them.
pub(super) async fn a_failing_round_keeps_the_rounds_before_it(
    store: &dyn Store,
    corrupt: &str,
    url: &str,
) {
    let now = t("2026-11-21T10:00:00Z");
    let runs = dispatched_runs(store, &["kept"], now).await;
    let job_id = store.get_run(runs[0]).await.unwrap().unwrap().job_id;
    use sqlx::Connection as _;
    if url.starts_with("sqlite") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(corrupt))
            .bind(job_id.to_string())
            .execute(&mut conn)
            .await
            .unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(corrupt))
            .bind(job_id.to_string())
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let ack = Reply::Ack(AckMessage {
        v: PROTOCOL_VERSION,
        task_id: runs[0],
        attempt: 1,
        consumer: "w1".into(),
        acked_at: now + Duration::seconds(3),
    });
    let failed = Reply::Result(failure(runs[0], 1, true, now + Duration::seconds(4)));
    let failed = store
        .record_replies(&[&ack, &failed], now + Duration::seconds(5), &rand::random)
        .await
        .expect_err("the second round reads the job's settings");
    assert_eq!(failed.applied, vec![(0, (ReplyEffect::Applied, None))]);
    assert_eq!(failed.transactions, 1);
    assert!(!failed.error.is_transient(), "{}", failed.error);
    let run = store.get_run(runs[0]).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Acked, "the first round is committed");
}
