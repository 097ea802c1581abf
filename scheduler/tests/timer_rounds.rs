//! The timer's rounds against a real SQLite store: what one call of `fire_due` records.

use std::{sync::Arc, time::Duration};

use chime_scheduler::{
    cluster::{DEFAULT_SHARD_COUNT, Ownership},
    dispatch::{Dispatcher, ObserverCopies},
    domain::{
        Job, JobSettings, JobSpec, MisfirePolicy, OverlapPolicy, Schedule, Target,
        duration::HumanDuration, job::limits, schedule::ScheduleSpec,
    },
    store::{self, RunPage, Store, testing::TestDatabase},
    timer::{Timer, TimerSettings},
};
use chrono::Utc;
use serde_json::json;

fn one_shot(name: &str, at: chrono::DateTime<Utc>, overlap: OverlapPolicy) -> JobSpec {
    let schedule: ScheduleSpec = serde_json::from_value(json!({ "at": at })).unwrap();
    JobSpec {
        app: "timer".into(),
        name: name.into(),
        paused: false,
        settings: JobSettings {
            schedule: Schedule::from_spec(&schedule).unwrap(),
            target: Target::group("rounds"),
            payload: json!(null),
            ack_timeout: HumanDuration(Duration::from_secs(30)),
            max_attempts: 5,
            run_timeout: HumanDuration(limits::DEFAULT_RUN_TIMEOUT),
            backoff: Default::default(),
            misfire: MisfirePolicy::FireOnce,
            catch_up_limit: 10,
            overlap,
        },
    }
}

/// A single node's timer on `store`, with its dispatcher (not running: the recorded
/// tasks only queue up in it). A 10 s arming lead makes the slice a second, so a round
/// reaches a fire time with plenty of margin.
fn timer_on(store: &Arc<dyn Store>) -> (Timer, Dispatcher) {
    let ownership = Ownership::single_node("node-a", DEFAULT_SHARD_COUNT);
    let (dispatch, dispatcher) = Dispatcher::new(
        store.clone(),
        ownership.clone(),
        "amqp://unused",
        ObserverCopies::All,
    );
    let settings = TimerSettings {
        lookahead: Duration::from_secs(30),
        misfire_grace: Duration::from_secs(60),
        fire_ahead: Duration::from_secs(10),
    };
    let (_handle, timer) = Timer::new(store.clone(), dispatch, ownership, settings);
    (timer, dispatcher)
}

/// A job with overlap `forbid` is never armed. Taken up with the round's slice before its
/// fire time, it must wait for that time: the round ends without it, rather than firing
/// it over and over until the time comes (and so recording it early, at the end).
#[tokio::test]
async fn an_unarmed_job_waits_for_its_time_within_a_round() {
    let db = TestDatabase::sqlite();
    let store = store::open(db.url()).await.unwrap();
    let (mut timer, _dispatcher) = timer_on(&store);
    let now = Utc::now();
    let due = now + chrono::Duration::milliseconds(800);
    let job = Job::new(one_shot("forbid", due, OverlapPolicy::Forbid), now);
    store.insert_job(&job).await.unwrap();

    timer.refill(now).await.unwrap();
    // Loaded as armable (the store has not said otherwise yet): taken 10 s early, the
    // store reports it unarmed and it goes back for its fire time, which falls within
    // this round's slice.
    let recorded = timer.fire_due(now).await;
    let ended = Utc::now();
    assert!(
        recorded == 0 && ended < due,
        "the round kept taking the job up until its time: it ended {} ms after it \
         began and recorded {recorded}",
        (ended - now).num_milliseconds()
    );
    let page = RunPage {
        before: None,
        limit: 10,
    };
    assert!(store.list_runs(job.id, &page).await.unwrap().is_empty());

    tokio::time::sleep((due - Utc::now()).to_std().unwrap_or_default()).await;
    assert_eq!(timer.fire_due(Utc::now()).await, 1, "fired at its time");
}

/// A change the timer did not hear of (a lost notice in a cluster) is healed by the next
/// refill, for an unarmed job too: moved to an earlier time, it fires at that time, not
/// at the one the store last reported it unarmed for.
#[tokio::test]
async fn a_refill_takes_an_unarmed_jobs_new_time_over_the_one_it_remembers() {
    let db = TestDatabase::sqlite();
    let store = store::open(db.url()).await.unwrap();
    let (mut timer, _dispatcher) = timer_on(&store);
    let now = Utc::now();
    let later = now + chrono::Duration::seconds(5);
    let job = Job::new(one_shot("moved", later, OverlapPolicy::Forbid), now);
    store.insert_job(&job).await.unwrap();
    timer.refill(now).await.unwrap();
    assert_eq!(timer.fire_due(now).await, 0, "reported unarmed, waits");

    // Moved earlier behind the timer's back.
    let sooner = Utc::now() + chrono::Duration::milliseconds(800);
    let moved = job.updated(one_shot("moved", sooner, OverlapPolicy::Forbid), Utc::now());
    store.update_job(&moved, job.version, true).await.unwrap();
    timer.refill(Utc::now()).await.unwrap();
    assert_eq!(
        timer.fire_due(Utc::now()).await,
        0,
        "not before its new time"
    );

    tokio::time::sleep((sooner - Utc::now()).to_std().unwrap_or_default()).await;
    assert_eq!(
        timer.fire_due(Utc::now()).await,
        1,
        "fired at its new time, not held for the old one"
    );
}
