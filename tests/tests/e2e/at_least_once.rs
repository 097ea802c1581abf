//! The delivery promise end to end: tasks nobody acknowledges are published again after
//! the ack timeout, retryable failures are retried with growing backoff, exhausted runs
//! are dead-lettered with their history and can be replayed, poison and malformed
//! messages end in a dead-letter queue while other work flows, heartbeats keep a long
//! handler's run alive, a chimed killed between commit and publish loses nothing, a
//! store that falls behind the broker does not make the reconciler publish confirmed
//! tasks again, and neither does a result collector behind the reply queue.

use std::time::Duration;

use chime_consumer::protocol::{
    AckMessage, BatchKind, PROTOCOL_VERSION, Reply, ReplyBatch, ResultMessage, TaskMessage,
    TaskOutcome, topology,
};
use chime_tests::{
    JobSpec, TestConsumer,
    api::{metric, metric_total},
    wait,
};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use lapin::{
    options::{BasicConsumeOptions, BasicQosOptions},
    types::FieldTable,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, SqliteConnection};

use crate::support::{Setup, StoreKind, every_second};

fn hourly(name: &str, group: &str, extra: Value) -> Value {
    JobSpec::new("e2e", name)
        .every("1h")
        .group(group)
        .merge(&extra)
        .build()
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("a timestamp").parse().expect("RFC 3339")
}

fn id(v: &Value) -> String {
    v["id"].as_str().expect("an id").to_string()
}

/// Handler starts of `task_id` seen by `consumer`.
fn starts(consumer: &TestConsumer, task_id: &str) -> usize {
    consumer
        .events_of("started")
        .iter()
        .filter(|e| e["task_id"] == task_id)
        .count()
}

/// A bare AMQP consumer of `queue` (prefetch 1) that acknowledges nothing and answers
/// nothing, unlike a `chime-consumer`; closing its connection returns what it holds.
async fn raw_consumer(s: &Setup, queue: &str) -> (lapin::Connection, lapin::Consumer) {
    let (connection, channel) = s.vhost.channel().await;
    channel
        .basic_qos(1, BasicQosOptions::default())
        .await
        .unwrap();
    let consumer = channel
        .basic_consume(
            queue.into(),
            "raw".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    (connection, consumer)
}

/// A consumer that takes a task and never acknowledges or answers it; then the same
/// delivery, returned to the queue when that consumer goes away, is absorbed by the
/// idempotency key on the healthy instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_task_is_published_again_and_runs_once() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    let job = api
        .create_job(hourly("hang", "hang", json!({"ack_timeout": "2s"})))
        .await;
    let (silent, mut held) = raw_consumer(&s, "chime.group.hang").await;
    let run = api.trigger(&id(&job)).await;
    let run_id = id(&run);
    let first = tokio::time::timeout(Duration::from_secs(20), held.next())
        .await
        .expect("the silent consumer receives the task")
        .expect("a delivery")
        .expect("no channel error");
    let task: Value = serde_json::from_slice(&first.data).unwrap();
    assert_eq!(
        (task["task_id"].as_str(), task["attempt"].as_u64()),
        (Some(run_id.as_str()), Some(1))
    );

    let good = TestConsumer::start(&s.vhost.amqp_url(), "hang", "good", &[]).await;
    let done = api
        .wait_run(&run_id, "the run to succeed on the healthy consumer", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["attempt"], 2, "{done}");
    assert_eq!(done["consumer"], "good");
    assert_eq!(done["history"][0]["event"], "ack_timeout", "{done}");
    let republished = metric(
        &api.metrics().await,
        "chime_republishes_total{reason=\"ack_timeout\"}",
    );
    assert!(republished >= 1.0, "ack timeouts are counted");

    // The silent consumer goes away: RabbitMQ hands its delivery (attempt 1) to the
    // healthy instance, which replays the recorded outcome instead of running again.
    let _ = silent.close(200, "gone".into()).await;
    wait::until(
        "the returned delivery to be consumed",
        Duration::from_secs(20),
        || async {
            let (ready, _) = s.vhost.queue_state("chime.group.hang").await;
            (ready == 0 && starts(&good, &run_id) >= 1).then_some(())
        },
    )
    .await;
    wait::until(
        "the duplicate to be answered",
        Duration::from_secs(20),
        || async {
            let m = api.metrics().await;
            (metric(&m, "chime_replies_total{kind=\"result\",effect=\"stale\"}") >= 1.0)
                .then_some(())
        },
    )
    .await;
    assert_eq!(starts(&good, &run_id), 1, "the handler ran once");
    assert_eq!(api.run(&run_id).await["state"], "succeeded");
}

/// A consumer that exits before acknowledging: the task is delivered to another instance
/// and runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_exiting_before_ack_loses_nothing() {
    let s = Setup::new(StoreKind::Postgres).await;
    let api = &s.chimed.api;
    let job = api
        .create_job(hourly("exit", "exit", json!({"ack_timeout": "3s"})))
        .await;
    let (quitter, mut deliveries) = raw_consumer(&s, "chime.group.exit").await;
    let run_id = id(&api.trigger(&id(&job)).await);
    tokio::time::timeout(Duration::from_secs(20), deliveries.next())
        .await
        .expect("the quitter receives the task");
    let _ = quitter.close(200, "exiting before ack".into()).await;

    let good = TestConsumer::start(&s.vhost.amqp_url(), "exit", "good", &[]).await;
    let done = api
        .wait_run(&run_id, "the run to succeed elsewhere", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["consumer"], "good");
    // Whether the broker's redelivery or the reconciler's attempt 2 came first, the
    // handler's effect happened once.
    wait::until("every copy consumed", Duration::from_secs(20), || async {
        (s.vhost.queue_state("chime.group.exit").await.0 == 0).then_some(())
    })
    .await;
    assert_eq!(starts(&good, &run_id), 1);
}

/// Fails retryably twice, then succeeds: three attempts, each retry scheduled after a
/// longer backoff than the one before, and no attempt published before its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_failures_are_retried_with_growing_backoff() {
    let s = Setup::new(StoreKind::Postgres).await;
    let api = &s.chimed.api;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "flaky", "w1", &[]).await;
    let job = api
        .create_job(hourly(
            "flaky",
            "flaky",
            json!({"payload": {"fail_until_attempt": 3}, "backoff": {"initial": "1s", "max": "10s"}}),
        ))
        .await;
    let run_id = id(&api.trigger(&id(&job)).await);
    let done = api
        .wait_run(&run_id, "the third attempt to succeed", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["attempt"], 3, "{done}");
    let history = done["history"].as_array().expect("a history");
    assert_eq!(history.len(), 2, "{done}");
    let delays: Vec<i64> = history
        .iter()
        .map(|h| {
            assert_eq!(h["event"], "failed");
            (time(&h["retry_at"]) - time(&h["at"])).num_milliseconds()
        })
        .collect();
    println!("retry delays: {delays:?} ms");
    assert!(
        (500..=1000).contains(&delays[0]),
        "first backoff 0.5-1 s: {delays:?}"
    );
    assert!(
        (1000..=2000).contains(&delays[1]),
        "second backoff 1-2 s: {delays:?}"
    );
    assert!(delays[1] > delays[0], "delays grow: {delays:?}");
    // No attempt started before its retry time.
    let started: Vec<(u64, i64)> = consumer
        .events_of("started")
        .iter()
        .filter(|e| e["task_id"] == run_id.as_str())
        .map(|e| (e["attempt"].as_u64().unwrap(), e["at_ms"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        started.iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    for (n, h) in history.iter().enumerate() {
        let retry_at = time(&h["retry_at"]).timestamp_millis();
        assert!(
            started[n + 1].1 >= retry_at,
            "attempt {} started at {} before its retry time {retry_at}",
            n + 2,
            started[n + 1].1
        );
    }
}

async fn dlq_depth(s: &Setup, queue: &str) -> (u64, Value) {
    let (status, body) = s.chimed.api.call(Method::GET, "/v1/dlq", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let item = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["queue"] == queue)
        .cloned()
        .unwrap_or(json!({"depth": 0}));
    (item["depth"].as_u64().unwrap_or(0), item)
}

/// Always fails: `dead` after `max_attempts`, its dead letter in the group's DLQ with the
/// reason and history; once the handler is fixed, a replay makes it succeed; purge empties
/// the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_runs_are_dead_lettered_replayed_and_purged() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    let queue = "chime.group.doomed.dlq";
    let broken = TestConsumer::start(&s.vhost.amqp_url(), "doomed", "broken", &[]).await;
    let job = api
        .create_job(hourly(
            "doomed",
            "doomed",
            json!({"payload": {"fail": "retryable"}, "max_attempts": 3,
                   "backoff": {"initial": "100ms", "max": "200ms"}}),
        ))
        .await;
    let run_id = id(&api.trigger(&id(&job)).await);
    let dead = api
        .wait_run(&run_id, "the run to be given up", |r| r["state"] == "dead")
        .await;
    assert_eq!(dead["attempt"], 3);
    assert!(dead["error"].as_str().unwrap().contains("3 of 3"), "{dead}");
    assert_eq!(dead["history"].as_array().unwrap().len(), 3);
    wait::until(
        "the dead letter in the DLQ",
        Duration::from_secs(20),
        || async { (dlq_depth(&s, queue).await.0 == 1).then_some(()) },
    )
    .await;
    let (_, summary) = dlq_depth(&s, queue).await;
    assert!(summary["oldest_age_s"].as_f64().is_some(), "{summary}");

    let (status, peeked) = api
        .call(
            Method::GET,
            &format!("/v1/dlq/{queue}/messages?limit=5"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{peeked}");
    let letter = &peeked["items"][0];
    assert_eq!(letter["kind"], "dead_letter", "{peeked}");
    assert_eq!(letter["run_id"], run_id.as_str());
    assert_eq!(letter["job"], "e2e/doomed");
    assert!(
        letter["reason"].as_str().unwrap().contains("asked to fail"),
        "{letter}"
    );
    assert_eq!(letter["history"].as_array().unwrap().len(), 3, "{letter}");
    assert_eq!(dlq_depth(&s, queue).await.0, 1, "peeking loses nothing");
    let m = api.metrics().await;
    assert!(
        metric(&m, "chime_dead_runs_total{reason=\"failed\"}") >= 1.0,
        "{m}"
    );

    // Fix the handler, then replay.
    broken.stop().await;
    let fixed = TestConsumer::start(&s.vhost.amqp_url(), "doomed", "fixed", &["--heal"]).await;
    let (status, report) = api
        .call(
            Method::POST,
            &format!("/v1/dlq/{queue}/replay"),
            Some(&json!({"job": "e2e/doomed"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["replayed"], 1, "{report}");
    assert_eq!(report["remaining"], 0, "{report}");
    let revived = api
        .wait_run(&run_id, "the replayed run to succeed", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(revived["attempt"], 4);
    assert_eq!(revived["consumer"], "fixed");
    assert_eq!(revived["history"][3]["event"], "replayed", "{revived}");

    // Another dead run, then purge.
    fixed.stop().await;
    let _broken = TestConsumer::start(&s.vhost.amqp_url(), "doomed", "broken2", &[]).await;
    let second = id(&api.trigger(&id(&job)).await);
    api.wait_run(&second, "the second run to die", |r| r["state"] == "dead")
        .await;
    wait::until("its dead letter", Duration::from_secs(20), || async {
        (dlq_depth(&s, queue).await.0 == 1).then_some(())
    })
    .await;
    let (status, purged) = api
        .call(Method::POST, &format!("/v1/dlq/{queue}/purge"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{purged}");
    assert_eq!(purged["purged"], 1);
    assert_eq!(dlq_depth(&s, queue).await.0, 0);
}

/// A malformed task and a task that crashes every consumer process that takes it: both
/// end in the group's DLQ and are counted, the crashing task's run is `dead` with the
/// broker's reason, and another job's tasks keep succeeding meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_and_malformed_tasks_end_in_the_dlq_while_work_flows() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    let steady = api
        .create_job(every_second("steady", "poison", json!(null)))
        .await;
    let poison = api
        .create_job(hourly(
            "poison",
            "poison",
            json!({"payload": {"crash": true}}),
        ))
        .await;
    // Restart the consumer whenever the poison kills it, as an orchestrator would.
    let url = s.vhost.amqp_url();
    let supervisor = tokio::spawn(async move {
        let mut restarts = 0u32;
        loop {
            let mut consumer =
                TestConsumer::start(&url, "poison", &format!("w{restarts}"), &[]).await;
            consumer.wait_exit().await;
            restarts += 1;
        }
    });
    s.vhost
        .publish("chime.tasks", "poison", b"{not a task")
        .await;
    let run_id = id(&api.trigger(&id(&poison)).await);
    let dead = wait::until(
        "the poison run to be dead-lettered by the broker",
        Duration::from_secs(90),
        || async {
            let run = api.run(&run_id).await;
            (run["state"] == "dead").then_some(run)
        },
    )
    .await;
    let poisoned_at = Utc::now();
    assert!(
        dead["error"]
            .as_str()
            .unwrap()
            .contains("dead-lettered by RabbitMQ"),
        "{dead}"
    );
    assert_eq!(dead["history"][0]["event"], "delivery_limit", "{dead}");

    let queue = "chime.group.poison.dlq";
    let (_, summary) = wait::until(
        "both messages in the DLQ",
        Duration::from_secs(30),
        || async {
            let (depth, summary) = dlq_depth(&s, queue).await;
            (depth >= 2).then_some((depth, summary))
        },
    )
    .await;
    assert!(
        summary["reasons"]["delivery_limit"].as_u64() >= Some(1),
        "{summary}"
    );
    assert!(
        summary["reasons"]["rejected"].as_u64() >= Some(1),
        "{summary}"
    );
    let m = api.metrics().await;
    assert!(
        metric(
            &m,
            &format!("chime_dead_lettered_total{{queue=\"{queue}\",reason=\"delivery_limit\"}}")
        ) >= 1.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            &format!("chime_dead_lettered_total{{queue=\"{queue}\",reason=\"rejected\"}}")
        ) >= 1.0,
        "{m}"
    );

    // Work flowed: the steady job kept succeeding through the crashes, and still does.
    let steady_id = id(&steady);
    wait::until(
        "the steady job to succeed after the poison",
        Duration::from_secs(30),
        || async {
            let runs = api.runs(&steady_id).await;
            runs.iter()
                .any(|r| r["state"] == "succeeded" && time(&r["fire_time"]) > poisoned_at)
                .then_some(())
        },
    )
    .await;
    let runs = api.runs(&steady_id).await;
    assert!(
        runs.iter().all(|r| r["state"] != "dead"),
        "no steady run was poisoned"
    );
    supervisor.abort();
}

/// Heartbeats keep a handler that outlives its run timeout from being published again,
/// and carry its progress to the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_extend_the_deadline_and_show_progress() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "long", "w1", &[]).await;
    let job = api
        .create_job(hourly(
            "long",
            "long",
            json!({"run_timeout": "2s", "payload": {"progress": true, "sleep_ms": 4000}}),
        ))
        .await;
    let run_id = id(&api.trigger(&id(&job)).await);
    let running = api
        .wait_run(&run_id, "progress on the running run", |r| {
            r["state"] == "acked" && r["progress"]["percent"] == 50.0
        })
        .await;
    assert_eq!(running["progress"]["note"], "half way");
    assert!(running["deadline_at"].is_string(), "{running}");
    let done = api
        .wait_run(&run_id, "the long run to succeed", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["attempt"], 1, "never published again: {done}");
    assert!(done["heartbeat_at"].is_string(), "{done}");
    assert!(done["history"].as_array().unwrap().is_empty());
    assert_eq!(starts(&consumer, &run_id), 1);
}

/// chimed is killed (SIGKILL) while fires are recorded but cannot be published: after a
/// restart every one of them is published and finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chimed_killed_between_commit_and_publish_loses_nothing() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "kill", "w1", &[]).await;
    // Fires found unpublished more than `misfire_grace` late at start-up follow the
    // misfire policy (see restart.rs); `catch_up` with room for all keeps every one.
    let mut body = every_second("killed", "kill", json!(null));
    body["misfire"] = json!("catch_up");
    body["catch_up_limit"] = json!(1000);
    let job = s.chimed.api.create_job(body).await;
    let job_id = id(&job);
    wait::until("steady state", Duration::from_secs(20), || async {
        let runs = s.chimed.api.runs(&job_id).await;
        (runs.iter().filter(|r| r["state"] == "succeeded").count() >= 2).then_some(())
    })
    .await;
    s.vhost.cut_access();
    wait::until(
        "fires recorded but not published",
        Duration::from_secs(20),
        || async {
            let runs = s.chimed.api.runs(&job_id).await;
            (runs.iter().filter(|r| r["state"] == "scheduled").count() >= 3).then_some(())
        },
    )
    .await;
    let (config, port) = (s.chimed.config().clone(), s.chimed.port());
    let Setup { chimed, db, vhost } = s;
    chimed.kill().await;
    let killed_at = Utc::now();
    vhost.restore_access();
    let s = Setup {
        chimed: chime_tests::Chimed::restart_from(config, port).await,
        db,
        vhost,
    };
    let api = &s.chimed.api;
    wait::until(
        "every fire before the kill to succeed",
        Duration::from_secs(60),
        || async {
            let runs = api.runs(&job_id).await;
            let before: Vec<&Value> = runs
                .iter()
                .filter(|r| time(&r["fire_time"]) < killed_at)
                .collect();
            (!before.is_empty() && before.iter().all(|r| r["state"] == "succeeded")).then_some(())
        },
    )
    .await;
    let m = api.metrics().await;
    assert!(
        metric(&m, "chime_republishes_total{reason=\"unconfirmed\"}") >= 3.0,
        "the restarted node published what the killed one recorded:\n{m}"
    );
}

/// Another writer holds the SQLite file, so the store falls behind: the broker confirms a
/// task but its run cannot be marked `dispatched` for longer than `republish_after`. The
/// run reads `scheduled` all that time, yet the reconciler does not publish it again: its
/// task is in the queue once, and nothing counts as re-published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_run_waiting_for_its_mark_is_not_published_again() {
    let s = Setup::with_env(
        StoreKind::Sqlite,
        &[
            ("CHIME_REPUBLISH_AFTER", "1s"),
            ("CHIME_RECONCILE_INTERVAL", "100ms"),
        ],
    )
    .await;
    let api = &s.chimed.api;
    let queue = "chime.group.behind";
    let job = api.create_job(hourly("behind", "behind", json!({}))).await;
    let run_id = id(&api.trigger(&id(&job)).await);
    // Taken at once: the mark is written 400 ms after the confirm.
    let mut writer = SqliteConnection::connect(s.db.url()).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut writer)
        .await
        .unwrap();
    wait::until(
        "the task to be confirmed into its queue",
        Duration::from_secs(10),
        || async { (s.vhost.queue_state(queue).await.0 >= 1).then_some(()) },
    )
    .await;
    wait::until(
        "several reconciler passes to find the run overdue and leave it alone",
        Duration::from_secs(20),
        || async {
            let m = api.metrics().await;
            (metric(&m, r#"chime_republishes_withheld_total{reason="unmarked"}"#) >= 5.0)
                .then_some(())
        },
    )
    .await;
    let waiting = api.run(&run_id).await;
    assert_eq!(waiting["state"], "scheduled", "the mark waited: {waiting}");
    sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
    api.wait_run(&run_id, "the run to be marked dispatched", |r| {
        r["state"] == "dispatched"
    })
    .await;
    // A pass or two after the mark, in case one had read the run before it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        s.vhost.queue_state(queue).await.0,
        1,
        "the task went out once"
    );
    let m = api.metrics().await;
    assert_eq!(
        metric_total(&m, "chime_republishes_total"),
        0.0,
        "nothing was published again:\n{m}"
    );
    assert_eq!(metric(&m, "chime_dispatch_unmarked"), 0.0, "{m}");
}

/// A consumer answered in time, but the result collector cannot write the answer yet
/// (here the store is locked; under overload it is a queue of replies ahead of it) when
/// the ack timeout passes: the reconciler waits for the collector instead of publishing
/// the task again, and the run succeeds on its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_collector_has_not_applied_is_not_taken_for_a_lost_task() {
    let s = Setup::with_env(StoreKind::Sqlite, &[("CHIME_RECONCILE_INTERVAL", "100ms")]).await;
    let api = &s.chimed.api;
    let queue = "chime.group.answered";
    let job = api
        .create_job(hourly("answered", "answered", json!({"ack_timeout": "1s"})))
        .await;
    let run_id = id(&api.trigger(&id(&job)).await);
    api.wait_run(&run_id, "the run to be dispatched", |r| {
        r["state"] == "dispatched"
    })
    .await;
    let task = s.vhost.get(queue).await.expect("the task in its queue");
    let task = TaskMessage::from_slice(&task).expect("a task message");
    let mut writer = SqliteConnection::connect(s.db.url()).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut writer)
        .await
        .unwrap();
    let now = Utc::now();
    let answer = ReplyBatch {
        v: PROTOCOL_VERSION,
        kind: BatchKind::Batch,
        replies: vec![
            Reply::Ack(AckMessage {
                v: PROTOCOL_VERSION,
                task_id: task.task_id,
                attempt: task.attempt,
                consumer: "in-time".into(),
                acked_at: now,
            }),
            Reply::Result(ResultMessage {
                v: PROTOCOL_VERSION,
                task_id: task.task_id,
                attempt: task.attempt,
                consumer: "in-time".into(),
                finished_at: now,
                replayed: false,
                outcome: TaskOutcome::Succeeded { output: None },
            }),
        ],
    };
    s.vhost
        .publish(
            topology::REPLY_EXCHANGE,
            topology::REPLY_ROUTING_KEY,
            &serde_json::to_vec(&answer).unwrap(),
        )
        .await;
    let ran = api.run(&run_id).await;
    assert!(
        time(&ran["dispatched_at"]) + Duration::from_secs(1) > Utc::now(),
        "the answer went out before the ack timeout: {ran}"
    );
    wait::until(
        "several reconciler passes to find the run overdue and leave it alone",
        Duration::from_secs(20),
        || async {
            let m = api.metrics().await;
            (metric(
                &m,
                r#"chime_republishes_withheld_total{reason="replies_pending"}"#,
            ) >= 5.0)
                .then_some(())
        },
    )
    .await;
    assert_eq!(api.run(&run_id).await["state"], "dispatched");
    sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
    let done = api
        .wait_run(&run_id, "the answer to be applied", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["attempt"], 1, "answered on its first attempt: {done}");
    let m = api.metrics().await;
    assert_eq!(
        metric_total(&m, "chime_republishes_total"),
        0.0,
        "nothing was published again:\n{m}"
    );
    assert_eq!(s.vhost.queue_state(queue).await.0, 0, "no second copy");
}
