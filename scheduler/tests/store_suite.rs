//! One store test suite, run against both backends: every case gets a fresh SQLite file
//! and a fresh PostgreSQL database (PostgreSQL must be running: deploy/local/postgres.sh).

use std::{collections::HashSet, sync::Arc};

use chime_consumer::protocol::{
    AckMessage, AttemptRecord, HeartbeatMessage, OBSERVER_TTL_MS, ObserveMessage, PROTOCOL_VERSION,
    PresenceMessage, Progress, Reply, ResultMessage, TaskError, TaskOutcome,
};
use chime_scheduler::{
    cluster::{DEFAULT_SHARD_COUNT, shard_of},
    dlq,
    domain::broadcast::ReceiptState,
    domain::{
        DeliveryMode, Job, JobSettings, JobSpec, LiveZones, MisfirePolicy, OverlapPolicy, Run,
        RunState, RunTrigger, Schedule, Target, WaitingFor, duration::HumanDuration, job::limits,
        schedule::ScheduleSpec,
    },
    reconcile::broadcasts::settle_broadcast,
    retention::{PruneOutcome, Pruner, RetentionSettings},
    store::{
        DueCursor, Expect, Firing, JobPage, NextAttempt, Replay, ReplyEffect, RunPage, Store,
        StoreError, live_since, test_support::StoreTestSupport,
    },
};
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use uuid::Uuid;

const GRACE: Duration = Duration::seconds(5);

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn spec(name: &str, schedule: serde_json::Value) -> JobSpec {
    let schedule: ScheduleSpec = serde_json::from_value(schedule).unwrap();
    JobSpec {
        app: "shop".into(),
        name: name.into(),
        paused: false,
        settings: JobSettings {
            schedule: Schedule::from_spec(&schedule).unwrap(),
            target: Target::group("orders"),
            payload: json!({"note": "héllo ✓", "nested": {"n": [1, 2, 3]}}),
            ack_timeout: HumanDuration(std::time::Duration::from_secs(30)),
            max_attempts: 5,
            run_timeout: HumanDuration(limits::DEFAULT_RUN_TIMEOUT),
            backoff: Default::default(),
            misfire: MisfirePolicy::FireOnce,
            catch_up_limit: 10,
            overlap: OverlapPolicy::Allow,
        },
    }
}

/// An unfenced fire by one node (the single-node form; fencing has its own suite).
fn firing() -> Firing {
    Firing {
        node: "node-a".into(),
        fence: None,
        ahead: chrono::Duration::zero(),
    }
}

fn every_second(name: &str, now: DateTime<Utc>) -> Job {
    Job::new(spec(name, json!({"every": "1s"})), now)
}

async fn jobs_round_trip_and_names_are_unique(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = Job::new(
        spec(
            "close",
            json!({"cron": "0 */2 * * * *", "timezone": "Asia/Shanghai"}),
        ),
        now,
    );
    store.insert_job(&job).await.unwrap();
    assert_eq!(store.get_job(job.id).await.unwrap(), Some(job.clone()));
    let dup = Job::new(spec("close", json!({"every": "5s"})), now);
    assert!(matches!(
        store.insert_job(&dup).await,
        Err(StoreError::DuplicateName { ref app, ref name }) if app == "shop" && name == "close"
    ));
    let mut other_app = dup.clone();
    other_app.spec.app = "billing".into();
    store.insert_job(&other_app).await.unwrap();
    assert_eq!(store.get_job(Uuid::now_v7()).await.unwrap(), None);
}

async fn job_list_pages_in_creation_order(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut job = every_second(&format!("j{i}"), now);
        if i == 4 {
            job.spec.app = "other".into();
        }
        store.insert_job(&job).await.unwrap();
        ids.push(job.id);
    }
    let first = store
        .list_jobs(&JobPage {
            app: None,
            after: None,
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), ids[..2]);
    let rest = store
        .list_jobs(&JobPage {
            app: None,
            after: Some(ids[1]),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(rest.iter().map(|j| j.id).collect::<Vec<_>>(), ids[2..]);
    let shop = store
        .list_jobs(&JobPage {
            app: Some("shop".into()),
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(shop.len(), 4);
}

async fn updates_check_the_version(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    store.insert_job(&every_second("b", now)).await.unwrap();

    let mut new_spec = job.spec.clone();
    new_spec.settings.payload = json!({"v": 2});
    let updated = job.updated(new_spec, now + Duration::seconds(1));
    let stored = store.update_job(&updated, 1, false).await.unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(stored.spec.settings.payload, json!({"v": 2}));

    assert!(matches!(
        store.update_job(&updated, 1, false).await,
        Err(StoreError::VersionConflict {
            expected: 1,
            current: 2,
            ..
        })
    ));
    let mut renamed = stored.clone();
    renamed.spec.name = "b".into();
    renamed.version = 3;
    assert!(matches!(
        store.update_job(&renamed, 2, false).await,
        Err(StoreError::DuplicateName { .. })
    ));
    let mut ghost = stored.clone();
    ghost.id = Uuid::now_v7();
    assert!(matches!(
        store.update_job(&ghost, 1, false).await,
        Err(StoreError::JobNotFound(_))
    ));
    assert_eq!(store.get_job(job.id).await.unwrap().unwrap().version, 2);
}

async fn update_keeps_next_fire_a_fire_advanced(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let fired_at = now + Duration::milliseconds(1001);
    store
        .fire(&[job.id], fired_at, GRACE, &firing())
        .await
        .unwrap();
    // An API update computed from the job as read before the fire.
    let mut new_spec = job.spec.clone();
    new_spec.settings.payload = json!(null);
    let stored = store
        .update_job(&job.updated(new_spec, fired_at), 1, false)
        .await
        .unwrap();
    assert_eq!(stored.next_fire_at, Some(now + Duration::seconds(2)));
    let mut rescheduled = stored.spec.clone();
    rescheduled.settings.schedule = Schedule::Every(Duration::seconds(60));
    let moved = store
        .update_job(&stored.updated(rescheduled, fired_at), 2, true)
        .await
        .unwrap();
    assert_eq!(moved.next_fire_at, Some(t("2026-11-21T10:01:01.001Z")));
}

async fn delete_removes_job_and_runs(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("a", now);
    store.insert_job(&job).await.unwrap();
    let batch = store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    let run_id = batch.recorded[0].task_id;
    assert!(store.delete_job(job.id).await.unwrap());
    assert!(!store.delete_job(job.id).await.unwrap());
    assert_eq!(store.get_run(run_id).await.unwrap(), None);
}

async fn due_jobs_pages_by_time_and_skips_paused(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let a = every_second("a", now);
    let b = Job::new(spec("b", json!({"every": "2s"})), now);
    let far = Job::new(spec("far", json!({"every": "1h"})), now);
    let mut paused = every_second("paused", now);
    paused.spec.paused = true;
    for job in [&a, &b, &far, &paused] {
        store.insert_job(job).await.unwrap();
    }
    let horizon = now + Duration::seconds(10);
    let due = store
        .due_jobs(DueCursor::START, horizon, 10, None)
        .await
        .unwrap();
    let expected = sorted(vec![
        (a.id, now + Duration::seconds(1)),
        (b.id, now + Duration::seconds(2)),
    ]);
    assert_eq!(sorted(due.jobs), expected);
    assert_eq!(due.next, None, "a short page is the last");
    assert_eq!(all_due(store, horizon, 1).await, expected);
}

/// Every job `due_jobs` returns before `horizon`, reading pages of `limit`; each job once.
async fn all_due(
    store: &dyn Store,
    horizon: DateTime<Utc>,
    limit: u32,
) -> Vec<(Uuid, DateTime<Utc>)> {
    let mut cursor = DueCursor::START;
    let mut all = Vec::new();
    loop {
        let page = store.due_jobs(cursor, horizon, limit, None).await.unwrap();
        assert!(page.jobs.len() <= limit as usize);
        all.extend(page.jobs);
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    let count = all.len();
    let all = sorted(all);
    let mut unique = all.clone();
    unique.dedup_by_key(|(id, _)| *id);
    assert_eq!(unique.len(), count, "a job came twice");
    all
}

fn sorted(mut jobs: Vec<(Uuid, DateTime<Utc>)>) -> Vec<(Uuid, DateTime<Utc>)> {
    jobs.sort();
    jobs
}

/// Fires move a job's next fire time; the look-ahead query follows it exactly, whatever
/// order the store's index keeps (PostgreSQL's `due_bound` lags behind fires), and pages
/// through it without losing or repeating a job.
async fn due_jobs_follow_fires(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    // First fires: `a` at +1 s, `b` at +5 s. After one fire each, `b` is next at +15 s
    // and `a` at +51 s: the order of their next fires is the reverse of the first ones.
    let a = Job::new(
        spec("a", json!({"every": "50s"})),
        now - Duration::seconds(49),
    );
    let b = Job::new(
        spec("b", json!({"every": "10s"})),
        now - Duration::seconds(5),
    );
    for job in [&a, &b] {
        store.insert_job(job).await.unwrap();
    }
    for job in [&a, &b] {
        let at = job.next_fire_at.unwrap();
        let batch = store.fire(&[job.id], at, GRACE, &firing()).await.unwrap();
        assert_eq!(batch.recorded.len(), 1, "{} fired", job.spec.name);
    }
    let a_next = (a.id, now + Duration::seconds(51));
    let b_next = (b.id, now + Duration::seconds(15));
    for limit in [1, 2, 10] {
        assert_eq!(
            all_due(store, now + Duration::seconds(60), limit).await,
            sorted(vec![a_next, b_next]),
            "pages of {limit}"
        );
    }
    // `a`'s first fire time is inside this window but its next fire is not.
    assert_eq!(
        all_due(store, now + Duration::seconds(35), 1).await,
        vec![b_next]
    );
    assert!(
        all_due(store, now + Duration::seconds(10), 1)
            .await
            .is_empty()
    );
}

async fn fire_records_each_fire_once(store: &dyn Store) {
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
async fn fire_skips_a_run_already_recorded_and_records_the_rest(store: &dyn Store) {
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

async fn armed_fires_are_recorded_ahead_and_due_at_their_time(store: &dyn Store) {
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

async fn a_change_withdraws_armed_fires(store: &dyn Store) {
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

async fn concurrent_fires_of_one_job_record_it_once(store: Arc<dyn Store>) {
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

async fn fire_applies_the_misfire_policy(store: &dyn Store) {
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

async fn fire_ignores_paused_and_deleted_jobs(store: &dyn Store) {
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

async fn one_shot_fires_once_and_finishes(store: &dyn Store) {
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

/// Records an every-second job started at `now` and fires it at `now + 2 s`: the runs of
/// its fires at +1 s and +2 s, both `scheduled`.
async fn two_runs(store: &dyn Store, now: DateTime<Utc>) -> (Uuid, Uuid) {
    two_runs_of(store, "a", now).await
}

async fn two_runs_of(store: &dyn Store, name: &str, now: DateTime<Utc>) -> (Uuid, Uuid) {
    let job = every_second(name, now);
    store.insert_job(&job).await.unwrap();
    let fired = store
        .fire(&[job.id], now + Duration::seconds(2), GRACE, &firing())
        .await
        .unwrap();
    (fired.recorded[0].task_id, fired.recorded[1].task_id)
}

/// Two runs of a job per name, all marked dispatched at `now` + 2 s.
async fn dispatched_runs(store: &dyn Store, names: &[&str], now: DateTime<Utc>) -> Vec<Uuid> {
    let mut runs = Vec::new();
    for name in names {
        let (x, y) = two_runs_of(store, name, now).await;
        runs.extend([x, y]);
    }
    store
        .mark_dispatched(&runs, now + Duration::seconds(2))
        .await
        .unwrap();
    runs
}

async fn replies_move_runs_through_their_states(store: &dyn Store) {
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

async fn a_batch_of_replies_applies_in_order_in_one_call(store: &dyn Store) {
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
        .record_replies(&batch.iter().collect::<Vec<_>>())
        .await
        .unwrap()
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
    assert_eq!(store.record_replies(&[]).await.unwrap(), vec![]);
    assert_eq!(
        store.record_reply(&result).await.unwrap(),
        (Stale, None),
        "a repeated batch changes nothing"
    );
}

async fn a_round_of_many_replies_writes_every_run(store: &dyn Store) {
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
        .record_replies(&batch.iter().collect::<Vec<_>>())
        .await
        .unwrap();
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

async fn an_ack_and_its_success_in_one_batch_write_the_run_once(store: &dyn Store) {
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
        .record_replies(&batch.iter().collect::<Vec<_>>())
        .await
        .unwrap();
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
        .record_replies(&batch.iter().collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(
        again.iter().all(|a| *a == (ReplyEffect::Stale, None)),
        "{again:?}"
    );
    let first = store.get_run(runs[0]).await.unwrap().unwrap();
    assert_eq!(first.acked_at, Some(acked_at(0)));
}

/// The dispatcher marks a confirm a moment after it arrives, so a quick task's replies
/// may be recorded first: the late mark leaves such runs as the replies wrote them.
async fn a_mark_after_the_replies_leaves_the_runs_as_they_wrote_them(store: &dyn Store) {
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
        .record_replies(&batch.iter().collect::<Vec<_>>())
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

async fn await_consumer_moves_the_deadline_without_using_an_attempt(store: &dyn Store) {
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

async fn next_attempts_moves_only_runs_still_as_expected(store: &dyn Store) {
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

async fn runs_page_newest_first(store: &dyn Store) {
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

async fn manual_runs_and_unconfirmed_runs(store: &dyn Store) {
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

/// A run recorded while its job allowed overlaps still holds back the job's fires once
/// the job changes to `forbid`; runs of other jobs never do.
async fn a_job_changed_to_forbid_waits_for_runs_recorded_before(store: &dyn Store) {
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

async fn overlap_forbid_skips_fires_while_a_run_is_unfinished(store: &dyn Store) {
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

async fn queries_filter_by_shard(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    let job = every_second("sharded", now);
    store.insert_job(&job).await.unwrap();
    let shard = shard_of(job.id, DEFAULT_SHARD_COUNT);
    let other = (shard + 1) % DEFAULT_SHARD_COUNT;
    let horizon = now + Duration::seconds(10);
    let mine = store
        .due_jobs(DueCursor::START, horizon, 10, Some(&[shard]))
        .await
        .unwrap();
    assert_eq!(mine.jobs.len(), 1);
    let theirs = store
        .due_jobs(DueCursor::START, horizon, 10, Some(&[other]))
        .await
        .unwrap();
    assert!(theirs.jobs.is_empty());
    assert!(
        store
            .due_jobs(DueCursor::START, horizon, 10, Some(&[]))
            .await
            .unwrap()
            .jobs
            .is_empty()
    );

    store
        .fire(&[job.id], now + Duration::seconds(1), GRACE, &firing())
        .await
        .unwrap();
    let later = now + Duration::seconds(60);
    assert_eq!(
        store
            .overdue_runs(later, later, None, 10, Some(&[shard]))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .overdue_runs(later, later, None, 10, Some(&[other]))
            .await
            .unwrap()
            .is_empty()
    );
}

fn failure(task_id: Uuid, attempt: u32, retryable: bool, at: DateTime<Utc>) -> ResultMessage {
    ResultMessage {
        v: PROTOCOL_VERSION,
        task_id,
        attempt,
        consumer: "w1".into(),
        finished_at: at,
        replayed: false,
        outcome: TaskOutcome::Failed {
            error: TaskError {
                message: "db down".into(),
                retryable,
                retry_after_ms: None,
            },
        },
    }
}

async fn retryable_failures_retry_after_backoff_then_die(store: &dyn Store) {
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

async fn deadlines_follow_acks_and_heartbeats(store: &dyn Store) {
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

/// What the dispatcher does with a run whose task can never be published: gives it up
/// only while it is still `scheduled` at the attempt that failed, with the reason and an
/// `unpublishable` history entry, and its dead letter pending.
async fn an_unpublishable_run_is_given_up_at_its_attempt(store: &dyn Store) {
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
async fn a_late_result_for_a_dead_run_is_noted_in_its_history(store: &dyn Store) {
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
    let effects = store.record_replies(&batch).await.unwrap();
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

async fn replay_revives_only_dead_runs(store: &dyn Store) {
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

/// The groups jobs target, each once and in order, for the dead-letter sampler; gone with
/// the last job that targets it.
async fn target_groups_lists_each_group_once(store: &dyn Store) {
    let now = t("2026-11-21T10:00:00Z");
    assert!(store.target_groups().await.unwrap().is_empty());
    let mut jobs = Vec::new();
    for (name, group) in [
        ("a", "orders"),
        ("b", "billing"),
        ("c", "orders"),
        ("d", "audit"),
    ] {
        let job = with_target(name, now, Target::group(group));
        store.insert_job(&job).await.unwrap();
        jobs.push(job);
    }
    assert_eq!(
        store.target_groups().await.unwrap(),
        ["audit", "billing", "orders"]
    );
    assert!(store.delete_job(jobs[3].id).await.unwrap());
    assert_eq!(store.target_groups().await.unwrap(), ["billing", "orders"]);
}

fn with_target(name: &str, now: DateTime<Utc>, target: Target) -> Job {
    let mut spec = spec(name, json!({"every": "1s"}));
    spec.settings.target = target;
    Job::new(spec, now)
}

async fn sharded_and_zone_fires_record_one_run_per_item(store: &dyn Store) {
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

async fn broadcast_replies_are_kept_per_instance(store: &dyn Store) {
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
    // The per-run SQL paths leave broadcast runs to the per-instance path.
    assert_eq!(
        store.record_ack(&ack("a")).await.unwrap(),
        ReplyEffect::Broadcast
    );
    assert_eq!(
        store.record_result(&done("a")).await.unwrap(),
        (ReplyEffect::Broadcast, None)
    );
    let at = sent + Duration::milliseconds(30);
    for reply in [
        Reply::Ack(ack("a")),
        Reply::Ack(ack("b")),
        Reply::Result(done("a")),
    ] {
        assert_eq!(
            store.record_broadcast_reply(&reply, at).await.unwrap(),
            (ReplyEffect::Applied, None)
        );
    }
    assert_eq!(
        store
            .record_broadcast_reply(&Reply::Ack(ack("a")), at)
            .await
            .unwrap(),
        (ReplyEffect::Stale, None)
    );
    // b finishes while the ack window (30 s) is still open: not decided yet.
    assert_eq!(
        store
            .record_broadcast_reply(&Reply::Result(done("b")), at)
            .await
            .unwrap(),
        (ReplyEffect::Applied, None)
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
        store
            .record_broadcast_reply(&Reply::Result(done("c")), at)
            .await
            .unwrap()
            .0
            == ReplyEffect::Stale,
        "a finished run takes no more receipts"
    );
}

/// A consumer instance of group `orders` in `zone`, last heard from `at`.
fn presence(instance: &str, zone: &str, at: DateTime<Utc>) -> PresenceMessage {
    PresenceMessage {
        v: PROTOCOL_VERSION,
        instance: instance.into(),
        group: "orders".into(),
        zone: Some(zone.into()),
        broadcast: false,
        at,
    }
}

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

async fn retention_prunes_old_finished_runs_and_stale_consumers(store: Arc<dyn Store>) {
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

fn observe(observer: &str, patterns: &[&str], at: DateTime<Utc>) -> ObserveMessage {
    ObserveMessage {
        v: 1,
        observer: observer.into(),
        patterns: patterns.iter().map(|p| p.to_string()).collect(),
        at,
    }
}

async fn observer_registrations_are_kept_until_they_expire(store: Arc<dyn Store>) {
    let now = Utc::now();
    let week = Duration::milliseconds(OBSERVER_TTL_MS as i64);
    let since = now - week;
    assert!(store.observed_patterns(since).await.unwrap().is_empty());

    store
        .record_observer(&observe(
            "audit",
            &["shop.*", "billing.#"],
            now - week - Duration::hours(1),
        ))
        .await
        .unwrap();
    assert!(
        store.observed_patterns(since).await.unwrap().is_empty(),
        "registered before the window"
    );
    // Registering again renews; a pattern two observers share is listed once, and a
    // pattern repeated in one message is one registration.
    store
        .record_observer(&observe("audit", &["shop.*", "shop.*"], now))
        .await
        .unwrap();
    store
        .record_observer(&observe(
            "dashboards",
            &["shop.*", "#"],
            now - Duration::hours(1),
        ))
        .await
        .unwrap();
    let mut patterns = store.observed_patterns(since).await.unwrap();
    patterns.sort();
    assert_eq!(patterns, ["#", "shop.*"]);
    // An older announcement arriving late does not roll the registration back.
    store
        .record_observer(&observe(
            "audit",
            &["shop.*"],
            now - week - Duration::days(1),
        ))
        .await
        .unwrap();
    let recent = store
        .observed_patterns(now - Duration::minutes(1))
        .await
        .unwrap();
    assert_eq!(recent, ["shop.*"]);

    // Retention forgets what was not registered again: audit's "billing.#".
    assert_eq!(store.prune_observers(since, 10).await.unwrap(), 1);
    assert_eq!(store.prune_observers(since, 10).await.unwrap(), 0);
    let mut patterns = store.observed_patterns(now - week * 2).await.unwrap();
    patterns.sort();
    assert_eq!(patterns, ["#", "shop.*"]);
    let pruner = Pruner::new(store.clone(), RetentionSettings::new(None));
    let outcome = pruner
        .run_once(now + week + Duration::days(1))
        .await
        .unwrap();
    assert_eq!(
        outcome.observers, 3,
        "every pattern expired a week after it was seen"
    );
    assert!(
        store
            .observed_patterns(now - week * 2)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn observer_names_list_every_observer_on_record_once(store: Arc<dyn Store>) {
    let now = Utc::now();
    assert!(store.observer_names().await.unwrap().is_empty());
    store
        .record_observer(&observe("dashboards", &["shop.*", "#"], now))
        .await
        .unwrap();
    store
        .record_observer(&observe("audit", &["billing.#"], now - Duration::days(30)))
        .await
        .unwrap();
    assert_eq!(
        store.observer_names().await.unwrap(),
        ["audit", "dashboards"],
        "each name once, however old its registration"
    );
    store
        .prune_observers(now - Duration::days(1), 10)
        .await
        .unwrap();
    assert_eq!(store.observer_names().await.unwrap(), ["dashboards"]);
}

async fn notes_are_appended_to_a_runs_history_up_to_a_bound(store: &dyn Store) {
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

macro_rules! store_suite {
    (shared: [$($shared:ident),* $(,)?], borrowed: [$($name:ident),* $(,)?]) => {
        mod sqlite {
            use chime_scheduler::store::{self, testing::TestDatabase};
            $(
                #[tokio::test]
                async fn $name() {
                    let db = TestDatabase::sqlite();
                    let store = store::open(db.url()).await.unwrap();
                    super::$name(store.as_ref()).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $shared() {
                    let db = TestDatabase::sqlite();
                    super::$shared(store::open(db.url()).await.unwrap()).await;
                }
            )*
        }
        mod postgres {
            use chime_scheduler::store::{self, testing::TestDatabase};
            $(
                #[tokio::test]
                async fn $name() {
                    let db = TestDatabase::postgres().await;
                    let store = store::open(db.url()).await.unwrap();
                    super::$name(store.as_ref()).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $shared() {
                    let db = TestDatabase::postgres().await;
                    super::$shared(store::open(db.url()).await.unwrap()).await;
                }
            )*
        }
    };
}

store_suite!(
    shared: [
        concurrent_fires_of_one_job_record_it_once,
        retention_prunes_old_finished_runs_and_stale_consumers,
        observer_registrations_are_kept_until_they_expire,
        observer_names_list_every_observer_on_record_once,
    ],
    borrowed: [
        jobs_round_trip_and_names_are_unique,
        job_list_pages_in_creation_order,
        updates_check_the_version,
        update_keeps_next_fire_a_fire_advanced,
        delete_removes_job_and_runs,
        due_jobs_pages_by_time_and_skips_paused,
        due_jobs_follow_fires,
        fire_records_each_fire_once,
        fire_skips_a_run_already_recorded_and_records_the_rest,
        armed_fires_are_recorded_ahead_and_due_at_their_time,
        a_change_withdraws_armed_fires,
        fire_applies_the_misfire_policy,
        fire_ignores_paused_and_deleted_jobs,
        one_shot_fires_once_and_finishes,
        replies_move_runs_through_their_states,
        a_batch_of_replies_applies_in_order_in_one_call,
        a_round_of_many_replies_writes_every_run,
        an_ack_and_its_success_in_one_batch_write_the_run_once,
        a_mark_after_the_replies_leaves_the_runs_as_they_wrote_them,
        next_attempts_moves_only_runs_still_as_expected,
        await_consumer_moves_the_deadline_without_using_an_attempt,
        runs_page_newest_first,
        manual_runs_and_unconfirmed_runs,
        retryable_failures_retry_after_backoff_then_die,
        deadlines_follow_acks_and_heartbeats,
        replay_revives_only_dead_runs,
        an_unpublishable_run_is_given_up_at_its_attempt,
        a_late_result_for_a_dead_run_is_noted_in_its_history,
        overlap_forbid_skips_fires_while_a_run_is_unfinished,
        a_job_changed_to_forbid_waits_for_runs_recorded_before,
        queries_filter_by_shard,
        sharded_and_zone_fires_record_one_run_per_item,
        broadcast_replies_are_kept_per_instance,
        target_groups_lists_each_group_once,
        notes_are_appended_to_a_runs_history_up_to_a_bound,
    ]
);

/// A run row the store cannot read (written around it: here an unknown state) is left out
/// of the reconciler's overdue runs instead of failing the whole page.
async fn overdue_runs_skip_an_unreadable_row(store: &dyn Store, corrupt: &str, url: &str) {
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

mod unreadable_rows {
    use chime_scheduler::store::{self, testing::TestDatabase};

    #[tokio::test]
    async fn sqlite() {
        let db = TestDatabase::sqlite();
        let store = store::open(db.url()).await.unwrap();
        super::overdue_runs_skip_an_unreadable_row(
            store.as_ref(),
            "UPDATE runs SET state = 'bogus' WHERE id = ?1",
            db.url(),
        )
        .await;
    }

    #[tokio::test]
    async fn postgres() {
        let db = TestDatabase::postgres().await;
        let store = store::open(db.url()).await.unwrap();
        super::overdue_runs_skip_an_unreadable_row(
            store.as_ref(),
            "UPDATE runs SET state = 'bogus' WHERE id = $1::uuid",
            db.url(),
        )
        .await;
    }
}
