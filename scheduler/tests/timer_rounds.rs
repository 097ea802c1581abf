//! The timer's rounds against a real SQLite store: what one call of `fire_due` records.

use std::{sync::Arc, time::Duration};

use chime_scheduler::{
    cluster::{DEFAULT_SHARD_COUNT, Ownership},
    dispatch::{Dispatcher, ObserverCopies},
    domain::{
        Job, JobSettings, JobSpec, MisfirePolicy, OverlapPolicy, Schedule, Target,
        duration::HumanDuration, job::limits, schedule::ScheduleSpec,
    },
    store::{self, RunPage, Store},
    timer::{Timer, TimerSettings},
};
use chime_testkit::TestDatabase;
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
            window: Default::default(),
            pause_after_failures: None,
        },
    }
}

/// A 10 s arming lead makes the slice a second, so a round reaches a fire time with
/// plenty of margin.
const LONG_SLICES: TimerSettings = TimerSettings {
    lookahead: Duration::from_secs(30),
    misfire_grace: Duration::from_secs(60),
    fire_ahead: Duration::from_secs(10),
};

/// A single node's timer on `store`, with its dispatcher (not running: the recorded
/// tasks only queue up in it).
fn timer_on(store: &Arc<dyn Store>, settings: TimerSettings) -> (Timer, Dispatcher) {
    let ownership = Ownership::single_node("node-a", DEFAULT_SHARD_COUNT);
    let (dispatch, dispatcher) = Dispatcher::new(
        store.clone(),
        ownership.clone(),
        "amqp://unused",
        ObserverCopies::All,
    );
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
    let (mut timer, _dispatcher) = timer_on(&store, LONG_SLICES);
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
    let (mut timer, _dispatcher) = timer_on(&store, LONG_SLICES);
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

/// A herd that takes longer to record than is left before its arming time is taken up
/// early (the herd lead), so it is recorded before it would normally even be armed; a
/// small one that records within moments is not. Time is simulated: the store judges
/// what is due against the `now` the round is given.
#[tokio::test]
async fn a_herd_is_taken_up_early_enough_to_be_recorded_in_time() {
    let db = TestDatabase::sqlite();
    let store = store::open(db.url()).await.unwrap();
    // The defaults: armed 2 s ahead, in slices of 200 ms; a herd may be taken up to 10 s.
    let settings = TimerSettings {
        lookahead: Duration::from_secs(60),
        misfire_grace: Duration::from_secs(5),
        fire_ahead: Duration::from_secs(2),
    };
    let (mut timer, _dispatcher) = timer_on(&store, settings);

    let created = Utc::now();
    let herd_at = created + chrono::Duration::seconds(30);
    let trickle_at = herd_at + chrono::Duration::seconds(10);
    // Recording 3 000 at the timer's first guess (100 µs a run) takes 0.3 s; 300 take
    // 30 ms, less than the 100 ms the queue counts jobs in.
    let mut herd = Vec::new();
    for i in 0..3_000 {
        let job = Job::new(
            one_shot(&format!("herd-{i}"), herd_at, OverlapPolicy::Allow),
            created,
        );
        store.insert_job(&job).await.unwrap();
        herd.push(job.id);
    }
    for i in 0..300 {
        let job = Job::new(
            one_shot(&format!("trickle-{i}"), trickle_at, OverlapPolicy::Allow),
            created,
        );
        store.insert_job(&job).await.unwrap();
    }

    // 2.25 s before the herd: its arming time (2 s before it) is 250 ms away, past this
    // round's 200 ms slice, but recording it would run past that time.
    let now = herd_at - chrono::Duration::milliseconds(2_250);
    timer.refill(now).await.unwrap();
    assert_eq!(
        timer.fire_due(now).await,
        3_000,
        "the herd is taken up early"
    );
    let page = RunPage {
        before: None,
        limit: 10,
    };
    for job in [herd[0], herd[1_500], herd[2_999]] {
        let runs = store.list_runs(job, &page).await.unwrap();
        assert_eq!(runs.len(), 1, "one run for {job}");
        assert_eq!(
            runs[0].fire_time.timestamp_millis(),
            herd_at.timestamp_millis()
        );
    }

    // The small crowd is armed with its slice, not before.
    let now = trickle_at - chrono::Duration::milliseconds(2_250);
    timer.refill(now).await.unwrap();
    assert_eq!(
        timer.fire_due(now).await,
        0,
        "a crowd recorded in moments waits"
    );
    let now = trickle_at - chrono::Duration::milliseconds(1_900);
    assert_eq!(timer.fire_due(now).await, 300, "armed with its slice");
}
