//! The broker or the database going away under load loses no fire: connections are
//! re-established with backoff and every recorded fire is published and finished.

use std::time::Duration;

use chime_tests::{TestConsumer, api::metric, wait};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::Connection;

use crate::support::{Setup, StoreKind, every_second};

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("a timestamp").parse().expect("RFC 3339")
}

/// Creates `n` every-second jobs and waits until each has succeeded twice.
async fn steady_load(s: &Setup, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let job = s
            .chimed
            .api
            .create_job(every_second(
                &format!("load{i}"),
                "workers",
                json!({"i": i}),
            ))
            .await;
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        wait::until("steady state", Duration::from_secs(20), || async {
            let runs = s.chimed.api.runs(id).await;
            (runs.iter().filter(|r| r["state"] == "succeeded").count() >= 2).then_some(())
        })
        .await;
    }
    ids
}

/// Waits until every job has finished every fire up to `until`, then checks that its
/// fires form an unbroken one-second sequence: nothing was lost, nothing doubled.
async fn every_fire_finished(s: &Setup, ids: &[String], until: DateTime<Utc>) {
    for id in ids {
        let runs = wait::until(
            "every fire up to the deadline to succeed",
            Duration::from_secs(60),
            || async {
                let runs = s.chimed.api.runs(id).await;
                let newest = runs.iter().map(|r| time(&r["fire_time"])).max()?;
                let done = newest > until
                    && runs
                        .iter()
                        .filter(|r| time(&r["fire_time"]) <= until)
                        .all(|r| r["state"] == "succeeded");
                done.then_some(runs)
            },
        )
        .await;
        let mut fires: Vec<_> = runs.iter().map(|r| time(&r["fire_time"])).collect();
        fires.sort();
        for pair in fires.windows(2) {
            assert_eq!(
                pair[1] - pair[0],
                chrono::Duration::seconds(1),
                "job {id}: fires lost or doubled around {}",
                pair[0]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_connections_cut_under_load() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let ids = steady_load(&s, 5).await;
    let closed = s.vhost.close_connections();
    assert!(
        closed >= 3,
        "chimed's and the consumer's connections were cut ({closed})"
    );
    let cut_at = Utc::now();
    // Recovery: the first fire after the cut that went all the way to a result.
    let recovered = wait::until(
        "a fire after the cut to succeed",
        Duration::from_secs(60),
        || async {
            let runs = s.chimed.api.runs(&ids[0]).await;
            runs.iter()
                .filter(|r| r["state"] == "succeeded" && time(&r["fire_time"]) > cut_at)
                .map(|r| time(&r["finished_at"]))
                .min()
        },
    )
    .await;
    println!(
        "recovery after the broker cut: {} ms to the first finished fire",
        (recovered - cut_at).num_milliseconds()
    );
    every_fire_finished(&s, &ids, cut_at + chrono::Duration::seconds(4)).await;
    let metrics = s.chimed.api.metrics().await;
    assert!(
        metric(
            &metrics,
            "chime_broker_connects_total{component=\"dispatch\"}"
        ) >= 2.0,
        "the dispatcher reconnected:\n{metrics}"
    );
}

/// An administrator's connection to the test's PostgreSQL server, and the name of the
/// scenario's database on it.
async fn admin_of(s: &Setup) -> (sqlx::PgConnection, String) {
    let admin_url = std::env::var("CHIME_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| chime_testkit::database::DEFAULT_POSTGRES_URL.into());
    let admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    let database = s.db.url().rsplit('/').next().unwrap();
    let database = database.split('?').next().unwrap().to_string();
    (admin, database)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_connections_killed_under_load() {
    let s = Setup::new(StoreKind::Postgres).await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let ids = steady_load(&s, 5).await;
    let (mut admin, database) = admin_of(&s).await;
    let mut killed = 0;
    for _ in 0..3 {
        killed += sqlx::query_scalar::<_, bool>(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(&database)
        .fetch_all(&mut admin)
        .await
        .unwrap()
        .len();
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(killed > 0, "chimed's connections were killed");
    every_fire_finished(&s, &ids, Utc::now() + chrono::Duration::seconds(3)).await;
}

/// While the broker is unreachable fires are still recorded and held; a job deleted in
/// the meantime has its held tasks withdrawn, and everything else is published once the
/// broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_outage_holds_fires_and_withdraws_deleted_jobs() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let api = &s.chimed.api;
    let keep = api
        .create_job(every_second("keep", "kept", json!(null)))
        .await;
    let gone = api
        .create_job(every_second("gone", "dropped", json!(null)))
        .await;
    let (keep, gone) = (
        keep["id"].as_str().unwrap().to_string(),
        gone["id"].as_str().unwrap().to_string(),
    );
    let dispatched = |runs: &[Value]| runs.iter().filter(|r| r["state"] == "dispatched").count();
    wait::until("both jobs publishing", Duration::from_secs(20), || async {
        (dispatched(&api.runs(&keep).await) >= 2 && dispatched(&api.runs(&gone).await) >= 2)
            .then_some(())
    })
    .await;

    s.vhost.cut_access();
    let before = dispatched(&api.runs(&gone).await);
    wait::until(
        "fires recorded while the broker is gone",
        Duration::from_secs(20),
        || async {
            let held = api
                .runs(&gone)
                .await
                .iter()
                .filter(|r| r["state"] == "scheduled")
                .count();
            (held >= 3).then_some(())
        },
    )
    .await;
    let (_, ready) = api.call(reqwest::Method::GET, "/readyz", None).await;
    assert_eq!(ready["checks"]["broker"], "unavailable", "{ready}");
    let (status, _) = api
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{gone}"), None)
        .await;
    assert_eq!(status, reqwest::StatusCode::NO_CONTENT);
    let deleted_at = Utc::now();
    s.vhost.restore_access();

    wait::until(
        "the held fires of the kept job published",
        Duration::from_secs(60),
        || async {
            let runs = api.runs(&keep).await;
            let fired_before_delete = runs.iter().filter(|r| time(&r["fire_time"]) <= deleted_at);
            fired_before_delete
                .into_iter()
                .all(|r| r["state"] == "dispatched")
                .then_some(())
        },
    )
    .await;
    let (queued, _) = s.vhost.queue_state("chime.group.dropped").await;
    assert!(
        queued as usize <= before + 1,
        "tasks of the deleted job were withdrawn: {queued} queued, {before} published before the outage"
    );
    let metrics = api.metrics().await;
    assert!(
        metrics.contains("chime_dispatch_withdrawn_total"),
        "withdrawals are counted:\n{metrics}"
    );
}

/// The listening connection of `database` (PostgreSQL), if one is up, other than `not`.
async fn listener_pid(admin: &mut sqlx::PgConnection, database: &str, not: i32) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%' AND pid <> $2",
    )
    .bind(database)
    .bind(not)
    .fetch_optional(admin)
    .await
    .unwrap()
}

/// Fires wait out a broker outage while their job is deleted by another node, and the
/// deletion's notice is lost with the connection that listened for it. Listening again,
/// the node assumes it missed changes and checks every waiting task against the store,
/// so the deleted job's fires are withdrawn, not published without their runs (long
/// before the last-resort check of tasks that waited very long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_waiting_when_notices_were_lost_are_checked() {
    let s = Setup::new(StoreKind::Postgres).await;
    let api = &s.chimed.api;
    let gone = api
        .create_job(every_second("gone", "dropped", json!(null)))
        .await;
    let gone = gone["id"].as_str().unwrap().to_string();
    let in_state =
        |runs: &[Value], state: &str| runs.iter().filter(|r| r["state"] == state).count();
    wait::until("the job publishing", Duration::from_secs(20), || async {
        (in_state(&api.runs(&gone).await, "dispatched") >= 2).then_some(())
    })
    .await;

    s.vhost.cut_access();
    let outage = std::time::Instant::now();
    let before = in_state(&api.runs(&gone).await, "dispatched");
    wait::until(
        "fires recorded while the broker is gone",
        Duration::from_secs(20),
        || async { (in_state(&api.runs(&gone).await, "scheduled") >= 3).then_some(()) },
    )
    .await;

    // Deleted as another node would, but without the notice; then the listening
    // connection drops, as if the notice had been lost with it.
    let (mut admin, database) = admin_of(&s).await;
    let mut db = sqlx::PgConnection::connect(s.db.url()).await.unwrap();
    let deleted = sqlx::query("DELETE FROM jobs WHERE id = $1::uuid")
        .bind(&gone)
        .execute(&mut db)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(deleted, 1, "the job was deleted behind chimed's back");
    let listening = listener_pid(&mut admin, &database, 0)
        .await
        .expect("chimed listens for notices");
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(listening)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(killed, "the listening connection was dropped");
    wait::until(
        "chimed listening again",
        Duration::from_secs(20),
        || async {
            // A connection per look: the wait's closure cannot borrow one.
            listener_pid(&mut admin_of(&s).await.0, &database, listening).await
        },
    )
    .await;
    // The node tells its dispatcher right after it listens again; give it a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.vhost.restore_access();

    wait::until(
        "the deleted job's waiting fires withdrawn",
        Duration::from_secs(30),
        || async {
            let m = api.metrics().await;
            (metric(&m, "chime_dispatch_withdrawn_total") >= 3.0).then_some(())
        },
    )
    .await;
    assert!(
        outage.elapsed() < Duration::from_secs(25),
        "checked on word of missed notices, well before the 30 s last resort"
    );
    let (queued, _) = s.vhost.queue_state("chime.group.dropped").await;
    assert!(
        queued as usize <= before + 1,
        "no fire of the deleted job went out after the outage: {queued} queued, {before} published before it"
    );
}
