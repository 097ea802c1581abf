//! The fire transaction: each fire recorded once, armed fires, misfires, one-shots, and
//! the runs of sharded and zone fires.

use super::*;

pub(super) async fn fire_records_each_fire_once(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let at = now + Duration::milliseconds(1003);

    let batch = store.fire(&[job.id], at, GRACE, &firing()).await.unwrap();
    assert_eq!(batch.recorded.len(), 1);
    let task = &batch.recorded[0];
    assert_eq!(task.fire_time, now + Duration::seconds(1));
    assert_eq!(
        (task.app.as_str(), task.job.as_str(), task.group.as_str()),
        ("shop", "a", "orders")
    );
    assert_eq!(task.payload, job.spec.settings.payload);
    assert_eq!(
        batch.next_fire,
        vec![(job.id, Some(now + Duration::seconds(2)))]
    );

    let again = store.fire(&[job.id], at, GRACE, &firing()).await.unwrap();
    assert!(again.recorded.is_empty(), "not due any more");

    let run = store.get_run(task.task_id).await.unwrap().unwrap();
    assert_eq!(
        (run.state, run.attempt, run.trigger),
        (RunState::Scheduled, 1, RunTrigger::Schedule)
    );
    assert_eq!(
        run.id,
        chime_consumer::protocol::run_id(job.id, run.fire_time, 0)
    );
}

/// A fire whose run is already recorded (a node that recorded it died before its schedule
/// advanced) is not recorded again, while the rest of the batch is, and the schedule still
/// advances. The recorded run comes back column for column.
pub(super) async fn fire_skips_a_run_already_recorded_and_records_the_rest(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let recorded = every_second("recorded", now);
    let fresh = every_second("fresh", now);
    store.insert_job(&recorded).await.unwrap();
    store.insert_job(&fresh).await.unwrap();
    let at = now + Duration::milliseconds(1003);
    let mut before = recorded
        .fires_due(at, at, GRACE, &LiveZones::default())
        .runs;
    assert_eq!(before.len(), 1);
    let mut before = before.remove(0);
    before.fired_by = Some("node-gone".into());
    assert!(store.insert_run(&before).await.unwrap());

    let batch = store
        .fire(&[recorded.id, fresh.id], at, GRACE, &firing())
        .await
        .unwrap();
    let jobs: Vec<&str> = batch
        .recorded
        .iter()
        .map(|task| task.job.as_str())
        .collect();
    assert_eq!(jobs, ["fresh"]);
    let mut next = batch.next_fire.clone();
    next.sort();
    let mut expected = vec![
        (recorded.id, Some(now + Duration::seconds(2))),
        (fresh.id, Some(now + Duration::seconds(2))),
    ];
    expected.sort();
    assert_eq!(next, expected);
    assert_eq!(
        store
            .get_job(recorded.id)
            .await
            .unwrap()
            .unwrap()
            .next_fire_at,
        Some(now + Duration::seconds(2)),
        "advanced although its fire was already recorded"
    );
    assert_eq!(
        store.get_run(before.id).await.unwrap(),
        Some(before),
        "left as the first recorder wrote it"
    );
    let task = &batch.recorded[0];
    let run = store.get_run(task.task_id).await.unwrap().unwrap();
    assert_eq!(
        (
            run.job_id,
            run.fire_time,
            run.state,
            run.fired_by.as_deref()
        ),
        (
            fresh.id,
            now + Duration::seconds(1),
            RunState::Scheduled,
            Some("node-a")
        )
    );
    assert_eq!(run.payload, fresh.spec.settings.payload);
}

/// Fires armed `ahead` of their time (the default form: see `fire_ahead`).
fn arming(ahead: Duration) -> Firing {
    Firing { ahead, ..firing() }
}

pub(super) async fn armed_fires_are_recorded_ahead_and_due_at_their_time(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    let mut forbid = Job::new(spec("f", json!({"every": "1s"})), now);
    forbid.spec.settings.overlap = OverlapPolicy::Forbid;
    store.insert_job(&job).await.unwrap();
    store.insert_job(&forbid).await.unwrap();
    // 400 ms before the first fire, arming 2 s ahead: the fires at +1 s and +2 s.
    let at = now + Duration::milliseconds(600);
    let batch = store
        .fire(
            &[job.id, forbid.id],
            at,
            GRACE,
            &arming(Duration::seconds(2)),
        )
        .await
        .unwrap();
    let times: Vec<_> = batch.recorded.iter().map(|t| t.fire_time).collect();
    assert_eq!(
        times,
        [now + Duration::seconds(1), now + Duration::seconds(2)],
        "only the job that may be armed, every fire up to the horizon"
    );
    assert!(batch.misfired.is_empty());
    assert_eq!(batch.unarmed, [forbid.id]);
    let next: std::collections::HashMap<_, _> = batch.next_fire.into_iter().collect();
    assert_eq!(next[&job.id], Some(now + Duration::seconds(3)));
    assert_eq!(next[&forbid.id], Some(now + Duration::seconds(1)));
    let run = store
        .get_run(batch.recorded[0].task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.created_at, at);
    assert_eq!(run.due_at, Some(now + Duration::seconds(1)));
    // Not overdue before its time for a periodic pass, even long unconfirmed...
    let periodic = store.overdue_runs(at, at, None, 10, None).await.unwrap();
    assert!(periodic.is_empty(), "{periodic:?}");
    // ...but a takeover collects what the previous owner armed.
    let takeover = store
        .overdue_runs(at, at + Duration::seconds(1), None, 10, None)
        .await
        .unwrap();
    assert_eq!(takeover.len(), 1, "due before the horizon, not after it");
    assert_eq!(takeover[0].run.fire_time, now + Duration::seconds(1));
    let all = store
        .overdue_runs(at, at + Duration::seconds(3), None, 1, None)
        .await
        .unwrap();
    let cursor = Some((all[0].run.due_at.unwrap(), all[0].run.id));
    let rest = store
        .overdue_runs(at, at + Duration::seconds(3), cursor, 10, None)
        .await
        .unwrap();
    assert_eq!(
        rest.iter().map(|o| o.run.fire_time).collect::<Vec<_>>(),
        [now + Duration::seconds(2)],
        "the cursor pages past runs still overdue"
    );
    // The forbidden-overlap job fires when due, not before.
    let due = store
        .fire(
            &[forbid.id],
            now + Duration::milliseconds(1001),
            GRACE,
            &arming(Duration::seconds(2)),
        )
        .await
        .unwrap();
    assert_eq!(due.recorded.len(), 1);
    assert_eq!(due.recorded[0].fire_time, now + Duration::seconds(1));
}

pub(super) async fn a_change_withdraws_armed_fires(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let at = now + Duration::milliseconds(1500);
    let armed = store
        .fire(&[job.id], at, GRACE, &arming(Duration::seconds(2)))
        .await
        .unwrap();
    let ids: Vec<Uuid> = armed.recorded.iter().map(|t| t.task_id).collect();
    assert_eq!(ids.len(), 3, "+1 s is due, +2 s and +3 s are armed");

    // A payload change at +1.7 s: the fires not yet due are withdrawn, and the job's
    // next fire moves back so they are armed again with the new payload.
    let mut changed = job.spec.clone();
    changed.settings.payload = json!({"v": 2});
    let updated = job.updated(changed, now + Duration::milliseconds(1700));
    let stored = store.update_job(&updated, 1, false).await.unwrap();
    assert_eq!(stored.next_fire_at, Some(now + Duration::seconds(2)));
    assert_eq!(
        all_due(store, now + Duration::seconds(3), 10).await,
        vec![(job.id, now + Duration::seconds(2))],
        "the look-ahead query finds the moved-back fire"
    );
    assert!(
        store.get_run(ids[0]).await.unwrap().is_some(),
        "already due: kept"
    );
    assert!(store.get_run(ids[1]).await.unwrap().is_none());
    assert!(store.get_run(ids[2]).await.unwrap().is_none());
    let scheduled = store.scheduled_runs(&ids).await.unwrap();
    assert_eq!(scheduled, [ids[0]].into_iter().collect());
    let rearmed = store
        .fire(
            &[job.id],
            now + Duration::milliseconds(1800),
            GRACE,
            &arming(Duration::seconds(2)),
        )
        .await
        .unwrap();
    assert_eq!(rearmed.recorded[0].task_id, ids[1], "same fire, same id");
    assert_eq!(rearmed.recorded[0].payload, json!({"v": 2}));

    // Pausing withdraws them too, and nothing is armed while paused.
    let mut paused = stored.spec.clone();
    paused.paused = true;
    let pause = stored.updated(paused, now + Duration::milliseconds(1900));
    store
        .update_job(&pause, stored.version, false)
        .await
        .unwrap();
    assert!(store.get_run(ids[1]).await.unwrap().is_none());
    let nothing = store
        .fire(
            &[job.id],
            now + Duration::milliseconds(1950),
            GRACE,
            &arming(Duration::seconds(2)),
        )
        .await
        .unwrap();
    assert!(nothing.recorded.is_empty());
    assert!(
        all_due(store, now + Duration::seconds(10), 10)
            .await
            .is_empty()
    );
}

pub(super) async fn concurrent_fires_of_one_job_record_it_once(store: Arc<dyn Store>) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let at = now + Duration::milliseconds(1500);
    let fires: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.fire(&[job.id], at, GRACE, &firing()).await.unwrap() })
        })
        .collect();
    let mut recorded = 0;
    for fire in fires {
        recorded += fire.await.unwrap().recorded.len();
    }
    assert_eq!(recorded, 1);
    let runs = store
        .list_runs(
            job.id,
            &RunPage {
                before: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
}

pub(super) async fn fire_applies_the_misfire_policy(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut catch_up = every_second("catch-up", now);
    catch_up.spec.settings.misfire = MisfirePolicy::CatchUp;
    catch_up.spec.settings.catch_up_limit = 3;
    let skip = {
        let mut j = every_second("skip", now);
        j.spec.settings.misfire = MisfirePolicy::Skip;
        j
    };
    let once = every_second("once", now);
    for job in [&catch_up, &skip, &once] {
        store.insert_job(job).await.unwrap();
    }
    let later = now + Duration::seconds(60) + Duration::milliseconds(500);
    let batch = store
        .fire(&[catch_up.id, skip.id, once.id], later, GRACE, &firing())
        .await
        .unwrap();
    let count = |id: Uuid| batch.recorded.iter().filter(|t| t.job_id == id).count();
    assert_eq!(count(catch_up.id), 3);
    assert_eq!(count(once.id), 1);
    assert_eq!(count(skip.id), 5, "only fires within the grace period");
    assert_eq!(batch.misfired.len(), 3);
    for (_, next) in &batch.next_fire {
        assert_eq!(*next, Some(now + Duration::seconds(61)));
    }
}

pub(super) async fn fire_ignores_paused_and_deleted_jobs(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut paused = every_second("p", now);
    paused.spec.paused = true;
    store.insert_job(&paused).await.unwrap();
    let gone = Uuid::now_v7();
    let batch = store
        .fire(
            &[paused.id, gone],
            now + Duration::seconds(3),
            GRACE,
            &firing(),
        )
        .await
        .unwrap();
    assert!(batch.recorded.is_empty());
    assert!(batch.next_fire.contains(&(paused.id, None)));
    assert!(batch.next_fire.contains(&(gone, None)));
}

pub(super) async fn one_shot_fires_once_and_finishes(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = Job::new(spec("once", json!({"at": "2026-11-21T10:00:05Z"})), now);
    store.insert_job(&job).await.unwrap();
    let batch = store
        .fire(&[job.id], now + Duration::seconds(5), GRACE, &firing())
        .await
        .unwrap();
    assert_eq!(batch.recorded.len(), 1);
    assert_eq!(batch.next_fire, vec![(job.id, None)]);
    assert_eq!(
        store.get_job(job.id).await.unwrap().unwrap().next_fire_at,
        None
    );
    assert!(
        store
            .fire(&[job.id], now + Duration::seconds(6), GRACE, &firing())
            .await
            .unwrap()
            .recorded
            .is_empty()
    );
}

pub(super) async fn sharded_and_zone_fires_record_one_run_per_item(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let sharded = with_target(
        "batch",
        now,
        Target {
            mode: DeliveryMode::Sharded,
            shards: Some(4),
            ..Target::group("orders")
        },
    );
    let listed = with_target(
        "listed",
        now,
        Target {
            mode: DeliveryMode::Zone,
            zones: Some(vec!["dc2".into(), "dc1".into()]),
            ..Target::group("orders")
        },
    );
    let live = with_target(
        "live",
        now,
        Target {
            mode: DeliveryMode::Zone,
            ..Target::group("orders")
        },
    );
    for job in [&sharded, &listed, &live] {
        store.insert_job(job).await.unwrap();
    }
    let ids = [sharded.id, listed.id, live.id];
    let at = now + Duration::milliseconds(1003);
    let batch = store.fire(&ids, at, GRACE, &firing()).await.unwrap();
    let of = |job: &Job| {
        batch
            .recorded
            .iter()
            .filter(|t| t.job_id == job.id)
            .map(|t| (t.shard, t.shard_total, t.zone.clone(), t.mode))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of(&sharded),
        (0..4)
            .map(|s| (s, 4, None, DeliveryMode::Sharded))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        of(&listed),
        vec![
            (0, 2, Some("dc2".into()), DeliveryMode::Zone),
            (1, 2, Some("dc1".into()), DeliveryMode::Zone)
        ]
    );
    assert!(of(&live).is_empty(), "no zone has live consumers yet");
    assert_eq!(batch.skipped_no_zone, vec![live.id]);
    let items = store
        .fire_items(sharded.id, now + Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(items.len(), 4);
    let unique: std::collections::HashSet<Uuid> = items.iter().map(|r| r.id).collect();
    assert_eq!(unique.len(), 4, "each item has its own idempotency key");
    assert!(items.iter().all(|r| r.mode == DeliveryMode::Sharded));

    // Presence makes zones live; stale presence does not.
    let seen = |instance: &str, zone: Option<&str>, at: DateTime<Utc>| PresenceMessage {
        v: PROTOCOL_VERSION,
        instance: instance.into(),
        group: "orders".into(),
        zone: zone.map(str::to_string),
        broadcast: false,
        version: None,
        at,
    };
    let at = now + Duration::milliseconds(2003);
    for presence in [
        seen("i1", Some("dc1"), at),
        seen("i2", Some("dc2"), at),
        seen("i3", None, at),
        seen("i4", Some("dc3"), at - Duration::minutes(1)),
    ] {
        store.record_presence(&presence).await.unwrap();
    }
    assert_eq!(
        store.live_zones(live_since(at)).await.unwrap().of("orders"),
        ["dc1".to_string(), "dc2".to_string()]
    );
    let batch = store.fire(&[live.id], at, GRACE, &firing()).await.unwrap();
    let zones: Vec<Option<String>> = batch.recorded.iter().map(|t| t.zone.clone()).collect();
    assert_eq!(zones, vec![Some("dc1".into()), Some("dc2".into())]);
    let run = store
        .get_run(batch.recorded[1].task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (run.mode, run.zone.as_deref()),
        (DeliveryMode::Zone, Some("dc2"))
    );
}
