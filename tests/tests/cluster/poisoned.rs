//! Poisoned rows (issue 34): jobs and runs written straight into the store, around the
//! API's checks, that can never be published — derived names over RabbitMQ's 255 bytes,
//! a target queue the broker refuses to declare. Each poisoned run ends `dead` with the
//! reason; every node stays up (before, all three died within 0.1 s, each taking over
//! the poisoned run in turn); every other job keeps firing every second.

use std::time::Duration;

use chime_tests::{
    cluster::{Cluster, GROUP},
    wait,
};
use chrono::{DateTime, Utc};
use lapin::{Connection, ConnectionProperties, options::QueueDeclareOptions, types::FieldTable};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection as _, PgConnection};
use uuid::Uuid;

use crate::exclusive;

fn long(c: char, len: usize) -> String {
    std::iter::repeat_n(c, len).collect()
}

fn fire_time(run: &Value) -> Option<DateTime<Utc>> {
    run["fire_time"].as_str()?.parse().ok()
}

/// Declares `queue` as a plain classic queue, so Chime's quorum declaration of it is
/// refused with PRECONDITION_FAILED.
async fn squat(amqp_url: &str, queue: &str) {
    let connection = Connection::connect(amqp_url, ConnectionProperties::default())
        .await
        .expect("connect to the test vhost");
    let channel = connection.create_channel().await.expect("a channel");
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare the squatting queue");
    let _ = connection.close(200, "done".into()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poisoned_rows_never_stop_a_node_and_the_other_jobs_keep_firing() {
    let _one = exclusive().await;
    let cluster = Cluster::start(3, &[("CHIME_OBSERVER_COPIES", "all")]).await;
    cluster.wait_balanced(3, Duration::from_secs(30)).await;
    let api = cluster.api().clone();
    let healthy = cluster.create_jobs(4, json!({})).await;
    squat(&cluster.vhost.amqp_url(), "chime.group.clash").await;

    // Created valid, then rewritten with SQL.
    let zoned = api
        .create_job(
            json!({"app": "poison", "name": "zoned", "schedule": {"every": "1s"},
            "target": {"group": "p", "mode": "zone", "zones": ["dc1"]}}),
        )
        .await;
    let copied = api
        .create_job(
            json!({"app": "poison", "name": "copied", "schedule": {"every": "1s"},
            "target": {"group": GROUP}}),
        )
        .await;
    let clash = api
        .create_job(
            json!({"app": "poison", "name": "clash", "schedule": {"every": "1s"},
            "target": {"group": "clash"}}),
        )
        .await;
    // Never fires on its own: it only carries the poisoned run inserted below. Its group
    // leaves 109 bytes for a zone.
    let carrier = api
        .create_job(
            json!({"app": "poison", "name": "carrier", "schedule": {"every": "1h"},
            "target": {"group": long('h', 128), "mode": "zone", "zones": ["dc1"]}}),
        )
        .await;
    let id = |job: &Value| -> Uuid { job["id"].as_str().unwrap().parse().unwrap() };

    for job in &healthy {
        wait::until(
            "a healthy job's first fire",
            Duration::from_secs(20),
            || async { (!api.runs(&job.to_string()).await.is_empty()).then_some(()) },
        )
        .await;
    }

    let mut db = PgConnection::connect(cluster.db.url())
        .await
        .expect("connect");
    let poisoned_at = Utc::now();
    sqlx::query(
        "UPDATE jobs SET settings = jsonb_set(jsonb_set(settings, '{target,group}',
             to_jsonb($1::text)), '{target,zones}', jsonb_build_array($2::text))
         WHERE id = $3",
    )
    .bind(long('g', 128))
    .bind(long('z', 128))
    .bind(id(&zoned))
    .execute(&mut db)
    .await
    .expect("poison the zone job");
    sqlx::query("UPDATE jobs SET app = $1, name = $2 WHERE id = $3")
        .bind(long('a', 128))
        .bind(long('n', 128))
        .bind(id(&copied))
        .execute(&mut db)
        .await
        .expect("poison the names");
    // A run whose zone makes a 257-byte routing key and a 274-byte zone queue.
    let poisoned_run = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                           payload, created_at, due_at, mode, zone)
         VALUES ($1, $2, now() - interval '1 minute', 0, 1, 1, 'scheduled', 'manual',
                 'null', now() - interval '1 minute', now() - interval '1 minute', 'zone', $3)",
    )
    .bind(poisoned_run)
    .bind(id(&carrier))
    .bind(long('z', 128))
    .execute(&mut db)
    .await
    .expect("insert the poisoned run");
    let _ = db.close().await;

    let after = |run: &Value| {
        fire_time(run).is_some_and(|t| t > poisoned_at + chrono::Duration::seconds(1))
    };
    for (what, job, says) in [
        ("zone job", &zoned, "274 bytes"),
        ("clash job", &clash, "PRECONDITION_FAILED"),
    ] {
        let dead = wait::until(
            &format!("a dead run of the poisoned {what}"),
            Duration::from_secs(30),
            || async {
                api.runs(job["id"].as_str().unwrap())
                    .await
                    .into_iter()
                    .find(|r| after(r) && r["state"] == "dead")
            },
        )
        .await;
        let error = dead["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "the {what}'s run says why: {dead}");
    }
    let run = api
        .wait_run(&poisoned_run.to_string(), "the poisoned run dead", |r| {
            r["state"] == "dead"
        })
        .await;
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.contains("274 bytes") && e.contains("zone")),
        "the run says why: {run}"
    );
    wait::until(
        "a run of the job whose copy key is too long succeeding",
        Duration::from_secs(30),
        || async {
            api.runs(copied["id"].as_str().unwrap())
                .await
                .into_iter()
                .find(|r| after(r) && r["state"] == "succeeded")
        },
    )
    .await;

    // Let the poisoned jobs go on firing for a while: every fire of theirs is another
    // poisoned run, on whichever node owns them.
    let until = Utc::now() + chrono::Duration::seconds(5);
    tokio::time::sleep(Duration::from_secs(6)).await;
    for (slot, node) in cluster.nodes.iter().enumerate() {
        let node = node.as_ref().expect("every node still in its slot");
        let (status, body) = node.api.call(Method::GET, "/healthz", None).await;
        assert_eq!(status, StatusCode::OK, "node {slot} is up: {body}");
        assert!(
            !node.log().contains("panicked"),
            "node {slot} logged no panic"
        );
    }

    // Every healthy job fired every second, once per fire, and each fire ran.
    for job in &healthy {
        let runs = wait::until(
            "every healthy fire up to the end succeeded",
            Duration::from_secs(60),
            || async {
                let runs: Vec<Value> = api
                    .runs(&job.to_string())
                    .await
                    .into_iter()
                    .filter(|r| fire_time(r).is_some_and(|t| t <= until))
                    .collect();
                runs.iter()
                    .all(|r| r["state"] == "succeeded")
                    .then_some(runs)
            },
        )
        .await;
        let mut times: Vec<DateTime<Utc>> = runs.iter().filter_map(fire_time).collect();
        times.sort();
        assert!(
            // The first fire was recorded before the poison (up to `fire_ahead`, 2 s,
            // ahead of its time).
            times
                .first()
                .is_some_and(|t| *t <= poisoned_at + chrono::Duration::seconds(2))
                && times
                    .last()
                    .is_some_and(|t| until - *t < chrono::Duration::seconds(1)),
            "job {job} fired from before the poison ({poisoned_at}) to the end ({until}): {times:?}"
        );
        for pair in times.windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                chrono::Duration::seconds(1),
                "job {job}: a fire lost or doubled"
            );
        }
    }
}
