//! A cluster under test: N `chimed` processes on distinct ports over one PostgreSQL
//! database and one RabbitMQ vhost, a consumer that reports every task it handles, and
//! the checks every cluster scenario ends with — each expected (job, fire time) recorded
//! exactly once, delivered to a handler exactly once, and no fire later than a bound.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, Row};
use uuid::Uuid;

use crate::{
    Chimed, JobSpec, TestConsumer, TestDatabase, TestVhost, api::Api, chimed::ChimedConfig, wait,
};

/// Lease timing the cluster tests run with: short, so failovers take seconds.
pub const LEASE_TTL_S: u64 = 3;
/// Renew (and rebalance) interval.
pub const RENEW_S: u64 = 1;
/// The group the scenario's jobs target.
pub const GROUP: &str = "work";

/// N chimed nodes, a consumer and their database and vhost.
pub struct Cluster {
    /// The nodes by slot; `None` once stopped or killed.
    pub nodes: Vec<Option<Chimed>>,
    /// The consumer of [`GROUP`].
    pub consumer: TestConsumer,
    /// More consumers of [`GROUP`] ([`Cluster::add_consumer`]), on default settings.
    pub more_consumers: Vec<TestConsumer>,
    config: ChimedConfig,
    /// The database (drops after the nodes).
    pub db: TestDatabase,
    /// The vhost.
    pub vhost: TestVhost,
}

/// One recorded run, read straight from the store.
#[derive(Debug, Clone)]
pub struct RunRow {
    /// Run id.
    pub id: Uuid,
    /// Job id.
    pub job_id: Uuid,
    /// Scheduled fire time.
    pub fire_time: DateTime<Utc>,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
    /// Its state.
    pub state: String,
    /// The node that recorded it.
    pub fired_by: Option<String>,
}

impl Cluster {
    /// Starts `n` nodes (one after another) and the consumer; `env` adds `CHIME_*`
    /// settings to every node.
    pub async fn start(n: usize, env: &[(&str, &str)]) -> Self {
        let vhost = TestVhost::new();
        let db = TestDatabase::postgres().await;
        let mut config = ChimedConfig::new(db.url(), &vhost.amqp_url())
            .env("CHIME_LEASE_TTL", &format!("{LEASE_TTL_S}s"))
            .env("CHIME_LEASE_RENEW_INTERVAL", &format!("{RENEW_S}s"))
            .env("CHIME_HEARTBEAT_INTERVAL", &format!("{RENEW_S}s"))
            .env("CHIME_SHARD_COUNT", "64")
            .env("CHIME_LOG", "info");
        for (k, v) in env {
            config = config.env(k, v);
        }
        let consumer =
            TestConsumer::start(&vhost.amqp_url(), GROUP, "c1", &["--concurrency", "32"]).await;
        let mut cluster = Self {
            nodes: Vec::new(),
            consumer,
            more_consumers: Vec::new(),
            config,
            db,
            vhost,
        };
        for _ in 0..n {
            cluster.add_node().await;
        }
        cluster
    }

    /// Starts one more consumer instance of [`GROUP`] named `instance`, on default
    /// settings (in-memory idempotency store): a task delivered to it and to another
    /// instance runs on both, and [`Cluster::handled`] counts it twice.
    pub async fn add_consumer(&mut self, instance: &str) {
        let consumer = TestConsumer::start(&self.vhost.amqp_url(), GROUP, instance, &[]).await;
        self.more_consumers.push(consumer);
    }

    /// Starts one more node; returns its slot.
    pub async fn add_node(&mut self) -> usize {
        let node = Chimed::start(self.config.clone()).await;
        self.nodes.push(Some(node));
        self.nodes.len() - 1
    }

    /// The node in `slot`.
    pub fn node(&self, slot: usize) -> &Chimed {
        self.nodes[slot]
            .as_ref()
            .expect("a running node in this slot")
    }

    /// The API of some running node.
    pub fn api(&self) -> &Api {
        &self
            .nodes
            .iter()
            .flatten()
            .next()
            .expect("a running node")
            .api
    }

    /// Stops the node in `slot` with SIGTERM; asserts a clean exit.
    pub async fn stop(&mut self, slot: usize) {
        let node = self.nodes[slot].take().expect("a running node");
        let status = node.stop().await;
        assert!(
            status.success(),
            "node {slot} exits 0 on SIGTERM: {status:?}"
        );
    }

    /// Kills the node in `slot` with SIGKILL.
    pub async fn kill(&mut self, slot: usize) {
        self.nodes[slot]
            .take()
            .expect("a running node")
            .kill()
            .await;
    }

    /// Starts a node again in a stopped slot, on the same port.
    pub async fn restart(&mut self, slot: usize, port: u16) {
        self.nodes[slot] = Some(Chimed::restart_from(self.config.clone(), port).await);
    }

    /// `GET /v1/cluster` from some node.
    pub async fn status(&self) -> Value {
        let (status, body) = self.api().call(Method::GET, "/v1/cluster", None).await;
        assert!(status.is_success(), "GET /v1/cluster: {status} {body}");
        body
    }

    /// Waits until `live` nodes hold every shard between them, evenly (max − min ≤ 1).
    pub async fn wait_balanced(&self, live: usize, timeout: Duration) -> Value {
        let api = self.api().clone();
        wait::until(
            &format!("{live} live nodes sharing every shard evenly"),
            timeout,
            || {
                let api = api.clone();
                async move {
                    let (_, body) = api.call(Method::GET, "/v1/cluster", None).await;
                    balanced(&body, live).then_some(body)
                }
            },
        )
        .await
    }

    /// Creates `count` jobs firing every second with misfire policy `catch_up`, through
    /// the API of some node, 16 at a time; returns their ids.
    pub async fn create_jobs(&self, count: usize, extra: Value) -> Vec<Uuid> {
        let api = self.api().clone();
        let mut ids = Vec::with_capacity(count);
        let names: Vec<usize> = (0..count).collect();
        for chunk in names.chunks(16) {
            let creations = chunk.iter().map(|i| {
                let body = JobSpec::new("cluster", &format!("job-{i}"))
                    .every("1s")
                    .group(GROUP)
                    .set("misfire", json!("catch_up"))
                    .set("catch_up_limit", json!(100))
                    .merge(&extra)
                    .build();
                let api = api.clone();
                async move { api.create_job(body).await }
            });
            for job in futures_util::future::join_all(creations).await {
                ids.push(job["id"].as_str().unwrap().parse().unwrap());
            }
        }
        ids
    }

    /// Every run in the store.
    pub async fn runs(&self) -> Vec<RunRow> {
        let mut conn = PgConnection::connect(self.db.url()).await.expect("connect");
        let rows = sqlx::query(
            "SELECT id, job_id, fire_time, created_at, state, fired_by FROM runs ORDER BY fire_time",
        )
        .fetch_all(&mut conn)
        .await
        .expect("read runs");
        rows.iter()
            .map(|r| RunRow {
                id: r.get("id"),
                job_id: r.get("job_id"),
                fire_time: r.get("fire_time"),
                created_at: r.get("created_at"),
                state: r.get("state"),
                fired_by: r.get("fired_by"),
            })
            .collect()
    }

    /// Ends a scenario: waits until every run due by `until` was handled, then checks
    /// that each job fired every second from its first fire to `until` — once per fire
    /// time, each run handled exactly once — and that no fire was recorded later than
    /// `max_late` after its time. Returns the worst lateness seen (the failover gap).
    pub async fn verify(
        &self,
        jobs: &[Uuid],
        until: DateTime<Utc>,
        max_late: Duration,
    ) -> Duration {
        // Every run due by `until` reaches the handler.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let (runs, handled) = loop {
            let runs: Vec<RunRow> = self
                .runs()
                .await
                .into_iter()
                .filter(|r| r.fire_time <= until)
                .collect();
            let handled = self.handled();
            let missing = runs.iter().filter(|r| !handled.contains_key(&r.id)).count();
            if missing == 0 {
                break (runs, handled);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{missing} of {} runs due by {until} were never handled",
                runs.len()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let twice: Vec<_> = handled.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "handled more than once: {twice:?}");

        // Each job fired every second, with no gap, up to `until`.
        let mut by_job: BTreeMap<Uuid, Vec<DateTime<Utc>>> = BTreeMap::new();
        for run in &runs {
            by_job.entry(run.job_id).or_default().push(run.fire_time);
        }
        assert_eq!(by_job.len(), jobs.len(), "every job fired");
        for (job, times) in &by_job {
            for pair in times.windows(2) {
                let step = pair[1] - pair[0];
                assert_eq!(
                    step,
                    chrono::Duration::seconds(1),
                    "job {job}: fires at {} and {} (a fire lost or doubled)",
                    pair[0],
                    pair[1]
                );
            }
            let last = *times.last().unwrap();
            assert!(
                until - last < chrono::Duration::seconds(1),
                "job {job} stopped firing at {last}, before {until}"
            );
        }

        let worst = runs
            .iter()
            .map(|r| (r.created_at - r.fire_time).to_std().unwrap_or_default())
            .max()
            .unwrap_or_default();
        eprintln!(
            "cluster verify: {} jobs, {} runs, worst recording lateness {worst:?}",
            by_job.len(),
            runs.len()
        );
        assert!(
            worst <= max_late,
            "a fire was recorded {worst:?} late, over the bound {max_late:?}"
        );
        worst
    }

    /// How many times the handler started for each task, on every consumer instance.
    pub fn handled(&self) -> HashMap<Uuid, usize> {
        let mut counts = HashMap::new();
        let consumers = std::iter::once(&self.consumer).chain(&self.more_consumers);
        for event in consumers.flat_map(|c| c.events_of("started")) {
            let id: Uuid = event["task_id"].as_str().unwrap().parse().unwrap();
            *counts.entry(id).or_insert(0) += 1;
        }
        counts
    }
}

/// Whether `/v1/cluster` shows `live` live nodes holding every shard, max − min ≤ 1.
pub fn balanced(status: &Value, live: usize) -> bool {
    let Some(nodes) = status["nodes"].as_array() else {
        return false;
    };
    let counts: Vec<usize> = nodes
        .iter()
        .filter(|n| n["live"] == true)
        .map(|n| n["shards"].as_array().map_or(0, Vec::len))
        .collect();
    let total = status["shard_count"].as_u64().unwrap_or(0) as usize;
    counts.len() == live
        && counts.iter().sum::<usize>() == total
        && counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1
}
