//! Shard leases and fencing in PostgreSQL (the clustered store only): tokens grow on every
//! change of owner, expiry follows the database's clock, and a fire under a lost or stale
//! lease writes nothing.

use std::time::Duration as StdDuration;

use chime_scheduler::{
    api::dto::JobRequest,
    cluster::shard_of,
    domain::Job,
    store::{Firing, PostgresStore, ShardToken, Store},
};
use chime_testkit::TestDatabase;
use chrono::{Duration, Utc};
use serde_json::json;
use sqlx::{Connection, PgConnection};

const TTL: StdDuration = StdDuration::from_secs(30);

async fn open(db: &TestDatabase, shards: u32) -> PostgresStore {
    PostgresStore::open(db.url(), shards).await.unwrap()
}

fn job(name: &str) -> Job {
    let request: JobRequest = serde_json::from_value(
        json!({"name": name, "schedule": {"every": "1s"}, "target": {"group": "g"}}),
    )
    .unwrap();
    Job::new(
        request.into_spec(256 * 1024).unwrap(),
        Utc::now() - Duration::seconds(5),
    )
}

/// Stores `name`'s job in `store` and leases its shard to node `a`.
async fn a_job_leased_to_a(store: &PostgresStore, name: &str) -> (Job, u32, ShardToken) {
    let job = job(name);
    store.insert_job(&job).await.unwrap();
    let shard = shard_of(job.id, store.shard_count());
    let lease = store.acquire_leases("a", &[shard], 1, TTL).await.unwrap()[0].lease;
    (job, shard, lease)
}

/// `node`'s fire guarded by `lease`, not armed ahead.
fn fenced(node: &str, lease: ShardToken) -> Firing {
    Firing {
        node: node.into(),
        fence: Some(vec![lease]),
        ahead: chrono::Duration::zero(),
    }
}

#[tokio::test]
async fn the_first_node_fixes_the_shard_count() {
    let db = TestDatabase::postgres().await;
    let first = open(&db, 8).await;
    let second = open(&db, 64).await;
    assert_eq!((first.shard_count(), second.shard_count()), (8, 8));
    assert_eq!(first.lease_table().await.unwrap().len(), 8);
}

#[tokio::test]
async fn tokens_grow_with_each_owner_and_renewal_needs_the_current_token() {
    let db = TestDatabase::postgres().await;
    let store = open(&db, 4).await;
    let got = store
        .acquire_leases("a", &[0, 1, 2, 3], 2, TTL)
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    assert!(
        got.iter()
            .all(|g| g.previous_owner.is_none() && g.lease.token == 1)
    );
    let held: Vec<ShardToken> = got.iter().map(|g| g.lease).collect();

    // b cannot take a's unexpired leases, only the free ones.
    let b = store
        .acquire_leases("b", &[0, 1, 2, 3], 4, TTL)
        .await
        .unwrap();
    let b_shards: Vec<u32> = b.iter().map(|g| g.lease.shard).collect();
    assert_eq!(b_shards.len(), 2);
    assert!(held.iter().all(|h| !b_shards.contains(&h.shard)));

    // a releases one; b takes it with a new token; a's renewal no longer covers it.
    store.release_leases("a", &[held[0].shard]).await.unwrap();
    let taken = store
        .acquire_leases("b", &[held[0].shard], 1, TTL)
        .await
        .unwrap();
    assert_eq!(taken[0].lease.token, 2);
    let renewed = store.renew_leases("a", &held, TTL).await.unwrap();
    assert_eq!(renewed, vec![held[1]]);
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_reported() {
    let db = TestDatabase::postgres().await;
    let store = open(&db, 2).await;
    let short = StdDuration::from_millis(300);
    store.acquire_leases("dead", &[0], 1, short).await.unwrap();
    assert!(
        store
            .acquire_leases("b", &[0], 1, TTL)
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(StdDuration::from_millis(400)).await;
    let taken = store.acquire_leases("b", &[0], 1, TTL).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].previous_owner.as_deref(), Some("dead"));
    assert!(taken[0].expired_for_s.unwrap() >= 0.0);
    assert!(
        store
            .renew_leases("dead", &[ShardToken::new(0, 1)], TTL)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_fire_under_a_stale_token_writes_nothing() {
    let db = TestDatabase::postgres().await;
    let store = open(&db, 4).await;
    let (job, shard, lease) = a_job_leased_to_a(&store, "fenced").await;
    let now = Utc::now();

    // The lease moved to b (a was away): a's fire with its old token is refused.
    store.release_leases("a", &[shard]).await.unwrap();
    store.acquire_leases("b", &[shard], 1, TTL).await.unwrap();
    let stale = fenced("a", lease);
    let batch = store
        .fire(&[job.id], now, Duration::seconds(5), &stale)
        .await
        .unwrap();
    assert_eq!(batch.fenced, vec![job.id]);
    assert!(batch.recorded.is_empty());
    let stored = store.get_job(job.id).await.unwrap().unwrap();
    assert_eq!(stored.next_fire_at, job.next_fire_at, "nothing advanced");

    // b's fire with the current token goes through.
    let current = store.lease_table().await.unwrap();
    assert_eq!(current[shard as usize].owner.as_deref(), Some("b"));
    let fresh = fenced("b", ShardToken::new(shard, lease.token + 1));
    let batch = store
        .fire(&[job.id], now, Duration::seconds(5), &fresh)
        .await
        .unwrap();
    assert!(batch.fenced.is_empty());
    assert!(
        !batch.recorded.is_empty(),
        "the owner with the current token fires"
    );
}

/// While a fire transaction holds its lease rows, the owner still renews at once (the
/// fence must not starve renewals under a steady stream of fires), yet no other node can
/// take the shard over until the fire commits.
#[tokio::test]
async fn a_fire_in_flight_blocks_a_takeover_but_not_the_owners_renewal() {
    let db = TestDatabase::postgres().await;
    let store = open(&db, 4).await;
    let (job, shard, lease) = a_job_leased_to_a(&store, "in-flight").await;

    // Hold the job row, so a's fire proves its lease and then waits, its transaction open.
    let mut holder = PgConnection::connect(db.url()).await.unwrap();
    let mut held = holder.begin().await.unwrap();
    sqlx::query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(job.id)
        .execute(&mut *held)
        .await
        .unwrap();
    let firing = fenced("a", lease);
    let fire = tokio::spawn({
        let store = store.clone();
        let job_id = job.id;
        async move {
            store
                .fire(&[job_id], Utc::now(), Duration::seconds(5), &firing)
                .await
        }
    });
    let mut watcher = PgConnection::connect(db.url()).await.unwrap();
    let deadline = tokio::time::Instant::now() + StdDuration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fire never waited on the held job row"
        );
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }

    let renewed = tokio::time::timeout(
        StdDuration::from_secs(5),
        store.renew_leases("a", &[lease], TTL),
    )
    .await
    .expect("the renewal waited for the fire in flight")
    .unwrap();
    assert_eq!(renewed, vec![lease]);

    // a gives the shard up, but b cannot have it while a's fire is in flight.
    store.release_leases("a", &[shard]).await.unwrap();
    let taken = store.acquire_leases("b", &[shard], 1, TTL).await.unwrap();
    assert!(
        taken.is_empty(),
        "taken over under a fire in flight: {taken:?}"
    );

    held.rollback().await.unwrap();
    let batch = fire.await.unwrap().unwrap();
    assert!(batch.fenced.is_empty());
    assert!(
        !batch.recorded.is_empty(),
        "the fire commits under the lease it proved"
    );
    let taken = store.acquire_leases("b", &[shard], 1, TTL).await.unwrap();
    assert_eq!(taken.len(), 1, "free once the fire committed");
    assert_eq!(taken[0].lease.token, lease.token + 1);
}

#[tokio::test]
async fn an_expired_lease_fences_even_its_owner() {
    let db = TestDatabase::postgres().await;
    let store = open(&db, 1).await;
    let job = job("expired");
    store.insert_job(&job).await.unwrap();
    let lease = store
        .acquire_leases("a", &[0], 1, StdDuration::from_millis(200))
        .await
        .unwrap()[0]
        .lease;
    tokio::time::sleep(StdDuration::from_millis(300)).await;
    let firing = fenced("a", lease);
    let batch = store
        .fire(&[job.id], Utc::now(), Duration::seconds(5), &firing)
        .await
        .unwrap();
    assert_eq!(
        batch.fenced,
        vec![job.id],
        "expired by the database's clock"
    );
}

#[tokio::test]
async fn nodes_register_heartbeat_and_leave() {
    let db = TestDatabase::postgres().await;
    let store = open(&db, 4).await;
    store.heartbeat("a", "127.0.0.1:1").await.unwrap();
    store.heartbeat("b", "127.0.0.1:2").await.unwrap();
    store.acquire_leases("a", &[0, 1], 2, TTL).await.unwrap();
    let live = store.live_nodes(TTL).await.unwrap();
    assert_eq!(live.into_iter().collect::<Vec<_>>(), vec!["a", "b"]);
    let nodes = store.nodes(TTL).await.unwrap();
    assert_eq!(nodes[0].shards, vec![0, 1]);
    store.leave("a").await.unwrap();
    let live = store.live_nodes(TTL).await.unwrap();
    assert_eq!(live.into_iter().collect::<Vec<_>>(), vec!["b"]);
    assert!(
        store
            .lease_table()
            .await
            .unwrap()
            .iter()
            .all(|l| l.owner.is_none())
    );
}
