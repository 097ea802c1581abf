//! Nodes joining and leaving on purpose under load: a rolling restart, scaling 1 → 3 → 1,
//! and the database's connections cut.

use std::time::Duration;

use chime_tests::{binaries, cluster::Cluster};
use chrono::Utc;
use serde_json::json;
use sqlx::{Connection, PgConnection};

use crate::{exclusive, failover_bound, handover_bound};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_of_every_node_loses_no_fire() {
    let _one = exclusive().await;
    let mut cluster = Cluster::start(3, &[]).await;
    cluster.wait_balanced(3, Duration::from_secs(20)).await;
    let jobs = cluster.create_jobs(300, json!({})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for slot in 0..3 {
        let port = cluster.node(slot).port();
        cluster.stop(slot).await;
        cluster.wait_balanced(2, Duration::from_secs(20)).await;
        cluster.restart(slot, port).await;
        cluster.wait_balanced(3, Duration::from_secs(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let until = Utc::now() - chrono::Duration::seconds(2);
    cluster.verify(&jobs, until, handover_bound()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_one_to_three_to_one_rebalances_and_loses_nothing() {
    let _one = exclusive().await;
    let mut cluster = Cluster::start(1, &[]).await;
    cluster.wait_balanced(1, Duration::from_secs(20)).await;
    let jobs = cluster.create_jobs(300, json!({})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.add_node().await;
    cluster.add_node().await;
    let status = cluster.wait_balanced(3, Duration::from_secs(20)).await;
    eprintln!("three nodes: {status}");
    // chimectl shows the same picture.
    let server = cluster.api().clone();
    let table = tokio::task::spawn_blocking(move || {
        binaries::chimectl(&server)
            .arg("cluster")
            .output()
            .expect("run chimectl")
    })
    .await
    .unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("postgres store, 64 shards"), "{table}");
    let live = table
        .lines()
        .filter(|line| line.split_whitespace().any(|word| word == "yes"))
        .count();
    assert_eq!(live, 3, "three live nodes: {table}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.stop(2).await;
    cluster.stop(1).await;
    cluster.wait_balanced(1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let until = Utc::now() - chrono::Duration::seconds(2);
    cluster.verify(&jobs, until, handover_bound()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_connections_cut_under_load_pause_then_resume_firing() {
    let _one = exclusive().await;
    let mut cluster = Cluster::start(2, &[]).await;
    cluster.wait_balanced(2, Duration::from_secs(20)).await;
    let jobs = cluster.create_jobs(200, json!({})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let database = cluster.db.url().rsplit('/').next().unwrap();
    let database = database.split('?').next().unwrap().to_string();
    let admin_url = cluster
        .db
        .url()
        .replace(&format!("/{database}"), "/postgres");
    let mut admin = PgConnection::connect(&admin_url).await.unwrap();
    // Cut every connection of every node, repeatedly, for a few seconds.
    let mut cut = 0;
    for _ in 0..6 {
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(&database)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        cut += killed.len();
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(cut > 0, "the nodes' connections were cut");
    for slot in 0..2 {
        assert!(
            cluster.nodes[slot].is_some(),
            "node {slot} is still running"
        );
    }
    cluster.wait_balanced(2, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let until = Utc::now() - chrono::Duration::seconds(2);
    cluster.verify(&jobs, until, failover_bound()).await;
    cluster.stop(0).await;
    cluster.stop(1).await;
}
