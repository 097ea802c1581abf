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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_connections_killed_under_load() {
    let s = Setup::new(StoreKind::Postgres).await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let ids = steady_load(&s, 5).await;
    let admin_url = std::env::var("CHIME_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| chime_scheduler::store::testing::DEFAULT_POSTGRES_URL.into());
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    let database = s.db.url().rsplit('/').next().unwrap().to_string();
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
