//! Fires reach consumers and their results reach the run history.

use std::time::Duration;

use chime_tests::{
    TestConsumer,
    api::{in_state, metric},
    wait,
};
use chrono::{DateTime, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, SqliteConnection};

use crate::{
    per_store,
    support::{Setup, StoreKind, every_second},
};

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("a timestamp").parse().expect("RFC 3339")
}

async fn cron_job_is_delivered_and_succeeds(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let job = s
        .chimed
        .api
        .create_job(every_second(
            "tick",
            "workers",
            json!({"n": 42, "text": "héllo"}),
        ))
        .await;
    let id = job["id"].as_str().unwrap().to_string();

    let runs = wait::until("3 succeeded runs", Duration::from_secs(20), || async {
        let runs = s.chimed.api.runs(&id).await;
        (in_state(&runs, "succeeded").len() >= 3).then_some(runs)
    })
    .await;
    let delivered = consumer.events_of("started");
    for run in in_state(&runs, "succeeded") {
        assert_eq!(run["output"]["echo"], json!({"n": 42, "text": "héllo"}));
        assert_eq!(run["consumer"], "w1");
        assert_eq!(run["attempt"], 1);
        assert_eq!(
            time(&run["fire_time"]).timestamp_subsec_millis(),
            0,
            "cron fires on the second"
        );
        for field in ["dispatched_at", "acked_at", "finished_at"] {
            assert!(run[field].is_string(), "{field} recorded: {run}");
        }
        let task = delivered
            .iter()
            .find(|e| e["task_id"] == run["id"])
            .unwrap_or_else(|| panic!("run {} was delivered", run["id"]));
        assert_eq!(task["payload"], json!({"n": 42, "text": "héllo"}));
        assert_eq!(task["job"], "tick");
        let key = chime_consumer::protocol::run_id(id.parse().unwrap(), time(&run["fire_time"]), 0);
        assert_eq!(
            run["id"],
            key.to_string(),
            "the task id is the idempotency key of the fire"
        );
    }
}

async fn one_shot_fires_exactly_once(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let at = Utc::now() + chrono::Duration::seconds(2);
    let job = s
        .chimed
        .api
        .create_job(json!({"name": "once", "schedule": {"at": at.to_rfc3339()}, "target": {"group": "workers"}}))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    let runs = wait::until(
        "the one-shot run to succeed",
        Duration::from_secs(20),
        || async {
            let runs = s.chimed.api.runs(&id).await;
            (!in_state(&runs, "succeeded").is_empty()).then_some(runs)
        },
    )
    .await;
    assert_eq!(runs.len(), 1);
    let lag = time(&runs[0]["fire_time"]) - at;
    assert!(
        lag <= chrono::Duration::zero() && lag > chrono::Duration::milliseconds(-1),
        "fires at its instant (to the ms)"
    );
    assert_eq!(
        s.chimed.api.job(&id).await["next_fire_at"],
        Value::Null,
        "nothing left to fire"
    );
}

/// The timer learns about a new job at once: it fires on time, not at the next refill of
/// the look-ahead window.
async fn new_job_fires_on_time(kind: StoreKind) {
    let s = Setup::with_env(kind, &[("CHIME_LOOKAHEAD", "60s")]).await;
    let at = Utc::now() + chrono::Duration::seconds(2);
    let job = s
        .chimed
        .api
        .create_job(
            json!({"name": "soon", "schedule": {"at": at.to_rfc3339()}, "target": {"group": "g"}}),
        )
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    let run = wait::until(
        "the run to be dispatched",
        Duration::from_secs(15),
        || async {
            let runs = s.chimed.api.runs(&id).await;
            runs.into_iter().find(|r| r["dispatched_at"].is_string())
        },
    )
    .await;
    let lateness = time(&run["dispatched_at"]) - time(&run["fire_time"]);
    assert!(
        lateness < chrono::Duration::seconds(3),
        "fired {lateness} late"
    );
    // With nobody consuming, the task waits in the group's durable queue.
    let (ready, consumers) = s.vhost.queue_state("chime.group.g").await;
    assert_eq!((ready, consumers), (1, 0));
}

per_store!(
    cron_job_is_delivered_and_succeeds,
    one_shot_fires_exactly_once,
    new_job_fires_on_time,
    pause_resume_trigger_and_delete,
);

/// Waits until `clock` (an every-second job) has `n` more runs than now: a signal that
/// time has passed in the scheduler's own terms.
async fn ticks(s: &Setup, clock: &str, n: usize) {
    let start = s.chimed.api.runs(clock).await.len();
    wait::until(
        &format!("{n} clock ticks"),
        Duration::from_secs(n as u64 * 3 + 10),
        || async { (s.chimed.api.runs(clock).await.len() >= start + n).then_some(()) },
    )
    .await;
}

async fn pause_resume_trigger_and_delete(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let api = &s.chimed.api;
    let clock = api
        .create_job(every_second("clock", "workers", json!(null)))
        .await;
    let clock = clock["id"].as_str().unwrap().to_string();
    let job = api
        .create_job(every_second("work", "workers", json!({"k": 1})))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    wait::until("the job to fire", Duration::from_secs(15), || async {
        (!api.runs(&id).await.is_empty()).then_some(())
    })
    .await;

    let (status, paused) = api
        .call(Method::POST, &format!("/v1/jobs/{id}/pause"), None)
        .await;
    assert_eq!((status, &paused["paused"]), (StatusCode::OK, &json!(true)));
    let before = api.runs(&id).await.len();
    ticks(&s, &clock, 3).await;
    assert_eq!(
        api.runs(&id).await.len(),
        before,
        "a paused job does not fire"
    );

    let run = api.trigger(&id).await;
    assert_eq!(run["trigger"], "manual");
    api.wait_run(
        run["id"].as_str().unwrap(),
        "the manual run to succeed",
        |r| r["state"] == "succeeded",
    )
    .await;

    let (status, resumed) = api
        .call(Method::POST, &format!("/v1/jobs/{id}/resume"), None)
        .await;
    assert_eq!(
        (status, &resumed["paused"]),
        (StatusCode::OK, &json!(false))
    );
    let after_pause = api.runs(&id).await.len();
    wait::until(
        "the resumed job to fire",
        Duration::from_secs(15),
        || async { (api.runs(&id).await.len() >= after_pause + 2).then_some(()) },
    )
    .await;
    let runs = api.runs(&id).await;
    let resumed_at = time(&resumed["updated_at"]);
    let paused_at = time(&paused["updated_at"]);
    assert!(
        runs.iter().filter(|r| r["trigger"] == "schedule").all(|r| {
            let t = time(&r["fire_time"]);
            // Fires armed after the pause's instant were withdrawn by it, even one
            // recorded while the pause waited for the store.
            t <= paused_at || t > resumed_at
        }),
        "no scheduled fire falls in the paused interval, and none is replayed after resume"
    );

    let (status, _) = api
        .call(Method::DELETE, &format!("/v1/jobs/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let deleted_at = Utc::now();
    ticks(&s, &clock, 3).await;
    let late = consumer
        .events_of("started")
        .into_iter()
        .filter(|e| e["job"] == "work" && time(&e["fire_time"]) > deleted_at)
        .count();
    assert_eq!(late, 0, "a deleted job stops firing");
    let (status, _) = api.call(Method::GET, &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// An every-second job in `group` that has fired once (so its next fires are armed),
/// and a connection holding the SQLite store's write lock (`COMMIT` releases it).
async fn armed_job_with_the_store_locked(
    s: &Setup,
    name: &str,
    group: &str,
) -> (String, SqliteConnection) {
    let api = &s.chimed.api;
    let job = api.create_job(every_second(name, group, json!(null))).await;
    let id = job["id"].as_str().unwrap().to_string();
    wait::until("a dispatched run", Duration::from_secs(15), || async {
        let runs = api.runs(&id).await;
        (!in_state(&runs, "dispatched").is_empty()).then_some(())
    })
    .await;
    let mut writer = SqliteConnection::connect(s.db.url()).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut writer)
        .await
        .unwrap();
    (id, writer)
}

/// Empties `queue`, checking that every task in it has its run; returns how many.
async fn every_queued_task_has_its_run(s: &Setup, queue: &str) -> usize {
    let mut published = 0;
    while let Some(body) = s.vhost.get(queue).await {
        let task: Value = serde_json::from_slice(&body).expect("a task");
        let run = task["task_id"].as_str().expect("a task id");
        let (status, found) = s
            .chimed
            .api
            .call(Method::GET, &format!("/v1/runs/{run}"), None)
            .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a published task has its run: {task} {found}"
        );
        published += 1;
    }
    published
}

/// A pause that waits for the database (here a test holds SQLite's write lock) while its
/// job's armed fires come due: those fires are held back until the pause is through and
/// then withdrawn by it. Nothing reaches the queue without its run, so no consumer's
/// answer can name a run the change deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_due_while_a_change_waits_for_the_store_wait_for_it() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    // Once a fire has gone out, the next ones are armed ahead of their time.
    let (id, mut writer) = armed_job_with_the_store_locked(&s, "held", "held-back").await;
    let armed_before_the_lock: Vec<Value> = api
        .runs(&id)
        .await
        .into_iter()
        .filter(|r| r["state"] == "scheduled")
        .collect();
    let pause = format!("/v1/jobs/{id}/pause");
    let ((status, paused), ()) = tokio::join!(api.call(Method::POST, &pause, None), async {
        // Long enough for every fire armed before the lock to come due.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
    });
    assert_eq!(status, StatusCode::OK, "{paused}");
    let paused_at = time(&paused["updated_at"]);
    assert!(
        armed_before_the_lock
            .iter()
            .any(|r| time(&r["fire_time"]) > paused_at),
        "a fire was armed to come due while the pause waited: {armed_before_the_lock:?}"
    );
    let runs = api.runs(&id).await;
    assert!(
        runs.iter().all(|r| time(&r["fire_time"]) <= paused_at),
        "the pause withdrew the fires after it: {runs:?}"
    );
    wait::until(
        "the held-back tasks to be withdrawn",
        Duration::from_secs(10),
        || async {
            let m = api.metrics().await;
            (metric(&m, "chime_dispatch_withdrawn_total") >= 1.0).then_some(())
        },
    )
    .await;
    let published = every_queued_task_has_its_run(&s, "chime.group.held-back").await;
    assert!(published >= 1, "the fires before the pause went out");
}

/// A change whose client gives up while it waits for the database is still carried
/// through as a whole: the job ends up paused, and its fires that came due meanwhile
/// are withdrawn rather than published without their runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_client_gave_up_is_carried_through() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    let queue = "chime.group.abandoned";
    // Once a fire has gone out, the next ones are armed ahead of their time.
    let (id, mut writer) = armed_job_with_the_store_locked(&s, "abandoned", "abandoned").await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let gave_up = impatient
        .post(format!("{}/v1/jobs/{id}/pause", api.base()))
        .bearer_auth(api.token().expect("the harness's token"))
        .send()
        .await;
    assert!(gave_up.is_err(), "the pause could not answer within 0.5 s");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
    let paused = wait::until("the pause to land", Duration::from_secs(10), || async {
        let job = api.job(&id).await;
        (job["paused"] == json!(true)).then_some(job)
    })
    .await;
    let paused_at = time(&paused["updated_at"]);
    let runs = api.runs(&id).await;
    assert!(
        runs.iter().all(|r| time(&r["fire_time"]) <= paused_at),
        "the pause withdrew the fires after it: {runs:?}"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    every_queued_task_has_its_run(&s, queue).await;
}

/// A job with overlap `forbid` is not armed ahead of its time, and the timer does not
/// take it up early either: beside armed jobs due at every phase of the second, which
/// wake the timer just before the forbid job's fire time, each of its fires costs one
/// fire transaction, not one per wake-up until the time comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unarmed_job_is_fired_at_its_time_without_polling_up_to_it() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let _worker = TestConsumer::start(&s.vhost.amqp_url(), "paced", "w1", &[]).await;
    let api = &s.chimed.api;
    let mut forbid = every_second("one-at-a-time", "paced", json!(null));
    forbid["overlap"] = json!("forbid");
    let forbid = api.create_job(forbid).await;
    let forbid = forbid["id"].as_str().unwrap().to_string();
    // Armed jobs whose phases, 100 ms apart, cover the whole second.
    let mut armed = Vec::new();
    for phase in 0..10 {
        let job = json!({
            "app": "e2e", "name": format!("phase-{phase}"),
            "schedule": {"every": "1s"}, "target": {"group": "paced"},
        });
        armed.push(
            api.create_job(job).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fires_before = api.runs(&forbid).await.len();
    let transactions_before = metric(&api.metrics().await, "chime_fire_transactions_total");
    let started = std::time::Instant::now();
    wait::until(
        "the forbid job to fire 4 more times",
        Duration::from_secs(20),
        || async {
            let runs = api.runs(&forbid).await;
            (in_state(&runs, "succeeded").len() >= fires_before + 4).then_some(())
        },
    )
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let transactions =
        metric(&api.metrics().await, "chime_fire_transactions_total") - transactions_before;
    // Eleven jobs at different phases: about eleven fire transactions a second.
    assert!(
        transactions > 0.0 && transactions < 40.0 * (seconds + 1.0),
        "{transactions} fire transactions in {seconds:.1} s"
    );
    assert!(!api.runs(&armed[0]).await.is_empty(), "the armed jobs fire");
}

/// A task the broker cannot route (someone deleted the group's queue) is recorded on the
/// run, not lost: the run stays `scheduled` with the reason, the queue is declared again
/// and the task is published again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_task_is_recorded_and_published_again() {
    let s = Setup::with_env(StoreKind::Sqlite, &[("CHIME_REPUBLISH_AFTER", "2s")]).await;
    let api = &s.chimed.api;
    let job = api
        .create_job(every_second("tick", "lonely", json!(null)))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    wait::until("a dispatched run", Duration::from_secs(15), || async {
        in_state(&api.runs(&id).await, "dispatched")
            .first()
            .map(|_| ())
    })
    .await;

    let connection = s.vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_delete(
            "chime.group.lonely".into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await
        .expect("delete the group's queue");
    let lost = wait::until(
        "a run noted as unroutable",
        Duration::from_secs(15),
        || async {
            api.runs(&id).await.into_iter().find(|r| {
                r["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("unroutable"))
            })
        },
    )
    .await;
    assert_eq!(
        lost["state"], "scheduled",
        "an unroutable task is not dispatched"
    );
    let run_id = lost["id"].as_str().unwrap().to_string();
    let republished = api
        .wait_run(&run_id, "the run to be published again", |r| {
            r["state"] == "dispatched"
        })
        .await;
    assert_eq!(republished["error"], Value::Null);
    let (ready, _) = s.vhost.queue_state("chime.group.lonely").await;
    assert!(ready >= 1, "the queue exists again and holds tasks");
    let text = api.metrics().await;
    assert!(
        text.contains("chime_publishes_total{outcome=\"unroutable\"}"),
        "counted"
    );
}
