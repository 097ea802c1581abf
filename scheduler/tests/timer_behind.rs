//! Falling behind, told apart from an outage: one round of the timer against a real
//! SQLite store, with time simulated through the `now` each step is given.

use std::{sync::Arc, time::Duration};

use chime_scheduler::{
    cluster::{DEFAULT_SHARD_COUNT, Ownership},
    dispatch::{Dispatcher, ObserverCopies},
    domain::{
        Job, JobSettings, JobSpec, MisfirePolicy, OverlapPolicy, Schedule, Target,
        duration::HumanDuration, job::limits, schedule::ScheduleSpec,
    },
    store::{self, Store},
    timer::{MisfireTally, Timer, TimerSettings},
};
use chime_testkit::TestDatabase;
use chrono::{DateTime, Utc};
use serde_json::json;

const GRACE: Duration = Duration::from_secs(5);

const SETTINGS: TimerSettings = TimerSettings {
    lookahead: Duration::from_secs(30),
    misfire_grace: GRACE,
    fire_ahead: Duration::from_secs(2),
};

fn every_second(name: &str, misfire: MisfirePolicy) -> JobSpec {
    let schedule: ScheduleSpec = serde_json::from_value(json!({ "every": "1s" })).unwrap();
    JobSpec {
        app: "behind".into(),
        name: name.into(),
        paused: false,
        settings: JobSettings {
            schedule: Schedule::from_spec(&schedule).unwrap(),
            target: Target::group("behind"),
            payload: json!(null),
            ack_timeout: HumanDuration(Duration::from_secs(30)),
            max_attempts: 5,
            run_timeout: HumanDuration(limits::DEFAULT_RUN_TIMEOUT),
            backoff: Default::default(),
            misfire,
            catch_up_limit: 10,
            overlap: OverlapPolicy::Allow,
            window: Default::default(),
            pause_after_failures: None,
        },
    }
}

/// A single node's timer on `store`, with its dispatcher (not running: the recorded
/// tasks only queue up in it).
fn timer_on(store: &Arc<dyn Store>) -> (Timer, Dispatcher) {
    let ownership = Ownership::single_node("node-a", DEFAULT_SHARD_COUNT);
    let (dispatch, dispatcher) = Dispatcher::new(
        store.clone(),
        ownership.clone(),
        "amqp://unused",
        ObserverCopies::All,
    );
    let (_handle, timer) = Timer::new(store.clone(), dispatch, ownership, SETTINGS);
    (timer, dispatcher)
}

async fn stored_job(store: &Arc<dyn Store>, spec: JobSpec, created: DateTime<Utc>) -> Job {
    let job = Job::new(spec, created);
    store.insert_job(&job).await.unwrap();
    job
}

/// The timer loaded the job before its due time and then recorded it grace + 2 s late:
/// this node was responsible and too slow, so the misfire is its own.
#[tokio::test]
async fn a_job_missed_while_the_timer_held_it_counts_as_behind() {
    let db = TestDatabase::sqlite();
    let store = store::open(db.url()).await.unwrap();
    let (mut timer, _dispatcher) = timer_on(&store);
    let now = Utc::now();
    let job = stored_job(&store, every_second("slow", MisfirePolicy::FireOnce), now).await;
    let due = job.next_fire_at.expect("an interval job is due");
    assert!(due > now);

    timer.refill(now).await.unwrap();
    let late = GRACE + Duration::from_secs(2);
    let round = timer
        .fire_round(due + chrono::Duration::from_std(late).unwrap())
        .await;

    // The one fire of `fire_once`, then (in the same round) the next fires, armed.
    assert!(round.recorded >= 1, "recorded {}", round.recorded);
    assert_eq!(
        round.misfires,
        MisfireTally {
            behind_jobs: 1,
            // Due at `due` and each second up to 7 s later: 8 fire times, one recorded.
            behind_collapsed: 7,
            worst_behind_ms: 7_000,
            outage_jobs: 0,
            outage_collapsed: 0,
        }
    );
    assert_eq!(round.lag, chrono::Duration::seconds(7));
}

/// The job was due before the timer ever loaded it (chimed was down, and this is its
/// first round after a start): an outage, not this node falling behind.
#[tokio::test]
async fn a_job_missed_before_the_timer_started_counts_as_an_outage() {
    let db = TestDatabase::sqlite();
    let store = store::open(db.url()).await.unwrap();
    let now = Utc::now();
    let created = now - chrono::Duration::seconds(60);
    let job = stored_job(&store, every_second("down", MisfirePolicy::Skip), created).await;
    let due = job.next_fire_at.expect("due");
    assert!(due < now - chrono::Duration::from_std(GRACE).unwrap());

    let (mut timer, _dispatcher) = timer_on(&store);
    timer.refill(now).await.unwrap();
    let round = timer.fire_round(now).await;

    assert_eq!(round.misfires.behind_jobs, 0, "{:?}", round.misfires);
    assert_eq!(round.misfires.outage_jobs, 1);
    // `skip` drops every fire time more than grace late.
    let dropped = round.misfires.outage_collapsed;
    assert!(
        (50..=60).contains(&dropped),
        "about 55 of 60 missed fire times dropped, got {dropped}"
    );
    assert_eq!(
        round.lag,
        chrono::Duration::zero(),
        "lag counts only own fires"
    );

    // From now on the timer is responsible: on time, nothing misfires.
    let next = now + chrono::Duration::seconds(1);
    let round = timer.fire_round(next).await;
    assert!(round.misfires.is_empty(), "{:?}", round.misfires);
}
