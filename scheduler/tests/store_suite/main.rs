//! One store test suite, run against both backends: every case gets a fresh SQLite file
//! and a fresh PostgreSQL database (PostgreSQL must be running: deploy/local/postgres.sh).
//! The test bodies are generic over the store and live in one file per concern
//! (jobs, job search, import, due, fire, overlap, runs, backfill, cancel, replies, reconcile, presence, retention); this file
//! holds the shared fixtures and the macro that runs every body on both backends.

mod audit;
mod backfill;
mod cancel;
mod due;
mod failures;
mod fire;
mod import;
mod job_search;
mod jobs;
mod overlap;
mod presence;
mod reconcile;
mod replies;
mod retention;
mod run_search;
mod run_stats;
mod runs;
mod tokens;

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
        DeliveryMode, Job, JobFilter, JobPosition, JobSettings, JobSort, JobSpec, LiveZones,
        MisfirePolicy, OverlapPolicy, Run, RunState, RunTrigger, Schedule, Target, WaitingFor,
        duration::HumanDuration, job::limits, schedule::ScheduleSpec,
    },
    reconcile::broadcasts::settle_broadcast,
    retention::{PruneOutcome, Pruner, RetentionSettings},
    store::{
        DueCursor, Expect, Firing, NextAttempt, Replay, ReplyApplied, ReplyEffect, RunPage, Store,
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
            window: Default::default(),
            pause_after_failures: None,
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

fn with_target(name: &str, now: DateTime<Utc>, target: Target) -> Job {
    let mut spec = spec(name, json!({"every": "1s"}));
    spec.settings.target = target;
    Job::new(spec, now)
}

/// A consumer instance of group `orders` in `zone`, last heard from `at`.
fn presence(instance: &str, zone: &str, at: DateTime<Utc>) -> PresenceMessage {
    PresenceMessage {
        v: PROTOCOL_VERSION,
        instance: instance.into(),
        group: "orders".into(),
        zone: Some(zone.into()),
        broadcast: false,
        version: None,
        at,
    }
}

macro_rules! store_suite {
    (shared: [$($smodule:ident :: $shared:ident),* $(,)?], borrowed: [$($module:ident :: $name:ident),* $(,)?]) => {
        mod sqlite {
            use chime_scheduler::store;
            use chime_testkit::TestDatabase;
            $(
                #[tokio::test]
                async fn $name() {
                    let db = TestDatabase::sqlite();
                    let store = store::open(db.url()).await.unwrap();
                    super::$module::$name(store.as_ref()).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $shared() {
                    let db = TestDatabase::sqlite();
                    super::$smodule::$shared(store::open(db.url()).await.unwrap()).await;
                }
            )*
        }
        mod postgres {
            use chime_scheduler::store;
            use chime_testkit::TestDatabase;
            $(
                #[tokio::test]
                async fn $name() {
                    let db = TestDatabase::postgres().await;
                    let store = store::open(db.url()).await.unwrap();
                    super::$module::$name(store.as_ref()).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $shared() {
                    let db = TestDatabase::postgres().await;
                    super::$smodule::$shared(store::open(db.url()).await.unwrap()).await;
                }
            )*
        }
    };
}

store_suite!(
    shared: [
        fire::concurrent_fires_of_one_job_record_it_once,
        retention::retention_prunes_old_finished_runs_and_stale_consumers,
        presence::observer_registrations_are_kept_until_they_expire,
        presence::observer_names_list_every_observer_on_record_once,
        presence::the_pruner_keeps_consumers_for_consumer_retention,
    ],
    borrowed: [
        jobs::jobs_round_trip_and_names_are_unique,
        import::insert_jobs_stores_every_job_of_a_batch,
        import::insert_jobs_with_a_taken_name_stores_nothing,
        jobs::job_list_pages_in_creation_order,
        job_search::jobs_are_filtered_sorted_and_paged,
        job_search::a_cursor_serves_only_its_own_order,
        tokens::tokens_round_trip_and_revoke,
        audit::audit_entries_filter_page_and_prune,
        jobs::app_usage_counts_jobs_and_groups,
        jobs::updates_check_the_version,
        jobs::update_keeps_next_fire_a_fire_advanced,
        jobs::delete_removes_job_and_runs,
        due::due_jobs_pages_by_time_and_skips_paused,
        due::due_jobs_follow_fires,
        fire::fire_records_each_fire_once,
        fire::fire_skips_a_run_already_recorded_and_records_the_rest,
        fire::armed_fires_are_recorded_ahead_and_due_at_their_time,
        fire::a_change_withdraws_armed_fires,
        fire::fire_applies_the_misfire_policy,
        fire::fire_ignores_paused_and_deleted_jobs,
        fire::one_shot_fires_once_and_finishes,
        presence::consumers_list_instances_with_their_running_runs,
        replies::replies_move_runs_through_their_states,
        replies::a_batch_of_replies_applies_in_order_in_one_call,
        replies::a_round_of_many_replies_writes_every_run,
        replies::an_ack_and_its_success_in_one_batch_write_the_run_once,
        replies::a_mark_after_the_replies_leaves_the_runs_as_they_wrote_them,
        reconcile::next_attempts_moves_only_runs_still_as_expected,
        reconcile::await_consumer_moves_the_deadline_without_using_an_attempt,
        runs::runs_page_newest_first,
        run_search::runs_are_searched_across_jobs,
        run_stats::run_stats_count_runs_by_minute_state_retry_and_lateness,
        runs::manual_runs_and_unconfirmed_runs,
        reconcile::retryable_failures_retry_after_backoff_then_die,
        replies::deadlines_follow_acks_and_heartbeats,
        reconcile::replay_revives_only_dead_runs,
        reconcile::an_unpublishable_run_is_given_up_at_its_attempt,
        reconcile::a_late_result_for_a_dead_run_is_noted_in_its_history,
        overlap::overlap_forbid_skips_fires_while_a_run_is_unfinished,
        overlap::a_job_changed_to_forbid_waits_for_runs_recorded_before,
        overlap::overlap_buffer_one_holds_one_fire_until_the_run_finishes,
        overlap::a_job_changed_to_buffer_one_holds_behind_runs_recorded_before,
        due::queries_filter_by_shard,
        fire::sharded_and_zone_fires_record_one_run_per_item,
        replies::broadcast_replies_are_kept_per_instance,
        jobs::target_groups_lists_each_group_once,
        runs::notes_are_appended_to_a_runs_history_up_to_a_bound,
        backfill::backfilled_runs_are_recorded_once_beside_scheduled_fires,
        backfill::a_backfill_asking_for_an_idle_job_records_nothing_while_it_is_busy,
        cancel::a_cancelled_run_is_final,
        cancel::a_cancelled_scheduled_run_is_never_published,
        failures::failing_jobs_are_those_whose_newest_finished_runs_all_died,
    ]
);

mod unreadable_rows {
    use chime_scheduler::store;
    use chime_testkit::TestDatabase;

    #[tokio::test]
    async fn a_failing_round_keeps_the_rounds_before_it_sqlite() {
        let db = TestDatabase::sqlite();
        let store = store::open(db.url()).await.unwrap();
        super::replies::a_failing_round_keeps_the_rounds_before_it(
            store.as_ref(),
            "UPDATE jobs SET settings = '\"bogus\"' WHERE id = ?1",
            db.url(),
        )
        .await;
    }

    #[tokio::test]
    async fn a_failing_round_keeps_the_rounds_before_it_postgres() {
        let db = TestDatabase::postgres().await;
        let store = store::open(db.url()).await.unwrap();
        super::replies::a_failing_round_keeps_the_rounds_before_it(
            store.as_ref(),
            "UPDATE jobs SET settings = '\"bogus\"' WHERE id = $1::uuid",
            db.url(),
        )
        .await;
    }

    #[tokio::test]
    async fn sqlite() {
        let db = TestDatabase::sqlite();
        let store = store::open(db.url()).await.unwrap();
        super::reconcile::overdue_runs_skip_an_unreadable_row(
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
        super::reconcile::overdue_runs_skip_an_unreadable_row(
            store.as_ref(),
            "UPDATE runs SET state = 'bogus' WHERE id = $1::uuid",
            db.url(),
        )
        .await;
    }
}
