//! A workload's stage: a fresh vhost and database, seeded with many copies of one
//! template job (created through the API, so its stored form is exactly chimed's), then
//! chimed processes started on it.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{Chimed, TestDatabase, TestVhost, chimed::ChimedConfig};

use super::{Backend, db::BenchDb, progress::Progress};

/// The group every bench job targets.
pub const GROUP: &str = "bench";

/// A vhost, a database and the config to start chimed on them.
pub struct Stage {
    /// The vhost (deleted on drop).
    pub vhost: TestVhost,
    /// The chimed config.
    pub config: ChimedConfig,
    /// Direct access to the database.
    pub db: BenchDb,
    /// The database (dropped last).
    pub database: TestDatabase,
}

impl Stage {
    /// A fresh stage on `backend`; `env` adds `CHIME_*` settings for every chimed.
    pub async fn new(backend: Backend, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let vhost = TestVhost::new();
        let database = match backend {
            Backend::Postgres => TestDatabase::postgres().await,
            Backend::Sqlite => TestDatabase::sqlite(),
        };
        // CHIME_BENCH_CHIMED_LOG raises chimed's log level when profiling a workload.
        let log = std::env::var("CHIME_BENCH_CHIMED_LOG").unwrap_or_else(|_| "info".into());
        let mut config =
            ChimedConfig::new(database.url(), &vhost.amqp_url()).env("CHIME_LOG", &log);
        for (k, v) in env {
            config = config.env(k, v);
        }
        // One start creates the schema, so the stage can be seeded directly.
        Chimed::start(config.clone()).await.stop().await;
        let db = BenchDb::connect(database.url()).await?;
        Ok(Self {
            vhost,
            config,
            db,
            database,
        })
    }

    /// Seeds `count` jobs named `<prefix>-<i>` like `template` (a job as the API takes
    /// it), each next due at `next_fire(i)`; `edit` may change the stored settings first.
    /// Runs while no chimed does. Returns the settings the copies got.
    pub async fn seed(
        &self,
        template: Value,
        count: usize,
        prefix: &str,
        edit: impl FnOnce(&mut Value),
        next_fire: impl Fn(usize) -> DateTime<Utc>,
    ) -> anyhow::Result<Value> {
        let chimed = Chimed::start(self.config.clone()).await;
        let created = chimed.api.create_job(template).await;
        chimed.stop().await;
        let id: Uuid = created["id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("the API returned no job id: {created}"))?;
        let mut settings = self.db.settings(id).await?;
        edit(&mut settings);
        let started = std::time::Instant::now();
        self.db
            .clone_jobs(id, count, prefix, &settings, next_fire)
            .await?;
        self.db.delete_job(id).await?;
        Progress::new("seed").say(&format!(
            "{count} jobs in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        Ok(settings)
    }

    /// Where chimed logs go: printed so a slow workload can be looked into.
    fn note_log(chimed: &Chimed) {
        Progress::new("chimed").say(&format!("log: {}", chimed.log_path().display()));
    }

    /// Starts a chimed on the stage.
    pub async fn start_chimed(&self) -> Chimed {
        let chimed = Chimed::start(self.config.clone()).await;
        Self::note_log(&chimed);
        chimed
    }
}
