//! Direct access to a chimed's database for what the API has no bulk form of: cloning a
//! template job a million times (with the same shard hashing chimed uses), back-dating
//! runs, and reading recorded runs for the checks. Both backends keep their own SQL.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Row, SqlitePool};
use uuid::Uuid;

use chime_scheduler::cluster::{DEFAULT_SHARD_COUNT, shard_of};

use super::progress::Progress;

/// A connection pool to the bench's database.
#[derive(Debug, Clone)]
pub enum BenchDb {
    /// PostgreSQL.
    Postgres(PgPool),
    /// SQLite.
    Sqlite(SqlitePool),
}

/// One recorded run, as the checks need it.
#[derive(Debug, Clone, Copy)]
pub struct RunRecord {
    /// Its job.
    pub job_id: Uuid,
    /// Its scheduled fire time.
    pub fire_time: DateTime<Utc>,
    /// When it was marked dispatched (after its confirm).
    pub dispatched_at: Option<DateTime<Utc>>,
}

const CLONE_BATCH: usize = 10_000;

impl BenchDb {
    /// Connects to `url` (a database chimed already migrated).
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        Ok(if url.starts_with("sqlite:") {
            Self::Sqlite(SqlitePool::connect(url).await?)
        } else {
            Self::Postgres(PgPool::connect(url).await?)
        })
    }

    /// The stored settings of job `id`.
    pub async fn settings(&self, id: Uuid) -> anyhow::Result<Value> {
        let text: String = match self {
            Self::Postgres(pool) => {
                sqlx::query_scalar("SELECT settings::text FROM jobs WHERE id = $1")
                    .bind(id)
                    .fetch_one(pool)
                    .await?
            }
            Self::Sqlite(pool) => {
                sqlx::query_scalar("SELECT settings FROM jobs WHERE id = ?1")
                    .bind(id.to_string())
                    .fetch_one(pool)
                    .await?
            }
        };
        Ok(serde_json::from_str(&text)?)
    }

    /// Inserts `count` copies of job `template` named `<prefix>-<i>`, with `settings` and
    /// next fire time `next_fire(i)`. Each copy gets a random id and the shard chimed
    /// would give it. Call while no chimed runs, so each starts with them all.
    pub async fn clone_jobs(
        &self,
        template: Uuid,
        count: usize,
        prefix: &str,
        settings: &Value,
        next_fire: impl Fn(usize) -> DateTime<Utc>,
    ) -> anyhow::Result<()> {
        let progress = Progress::new(format!("seeding {count} jobs"));
        let settings = settings.to_string();
        for start in (0..count).step_by(CLONE_BATCH) {
            let end = (start + CLONE_BATCH).min(count);
            let ids: Vec<Uuid> = (start..end).map(|_| Uuid::now_v7()).collect();
            let names: Vec<String> = (start..end).map(|i| format!("{prefix}-{i}")).collect();
            let nexts: Vec<DateTime<Utc>> = (start..end).map(&next_fire).collect();
            let shards: Vec<i32> = ids
                .iter()
                .map(|id| shard_of(*id, DEFAULT_SHARD_COUNT) as i32)
                .collect();
            match self {
                Self::Postgres(pool) => {
                    sqlx::query(
                        "INSERT INTO jobs (id, app, name, settings, paused, version, next_fire_at,
                                           created_at, updated_at, shard, due_bound)
                         SELECT u.id, t.app, u.name, $5::jsonb, false, 1, u.next, t.created_at,
                                t.updated_at, u.shard, u.next
                         FROM jobs t, UNNEST($1::uuid[], $2::text[], $3::timestamptz[], $4::int4[])
                              AS u(id, name, next, shard)
                         WHERE t.id = $6",
                    )
                    .bind(&ids)
                    .bind(&names)
                    .bind(&nexts)
                    .bind(&shards)
                    .bind(&settings)
                    .bind(template)
                    .execute(pool)
                    .await?;
                }
                Self::Sqlite(pool) => {
                    let mut tx = pool.begin().await?;
                    for (((id, name), next), shard) in
                        ids.iter().zip(&names).zip(&nexts).zip(&shards)
                    {
                        sqlx::query(
                            "INSERT INTO jobs (id, app, name, settings, paused, version, next_fire_at,
                                               created_at, updated_at, shard)
                             SELECT ?1, app, ?2, ?3, 0, 1, ?4, created_at, updated_at, ?5
                             FROM jobs WHERE id = ?6",
                        )
                        .bind(id.to_string())
                        .bind(name)
                        .bind(&settings)
                        .bind(next.timestamp_millis())
                        .bind(shard)
                        .bind(template.to_string())
                        .execute(&mut *tx)
                        .await?;
                    }
                    tx.commit().await?;
                }
            }
            progress.show(|| format!("{end}/{count}"));
        }
        Ok(())
    }

    /// Gives every job `settings` and next fire time `at`.
    pub async fn retime_all(&self, settings: &Value, at: DateTime<Utc>) -> anyhow::Result<()> {
        let settings = settings.to_string();
        match self {
            Self::Postgres(pool) => {
                sqlx::query(
                    "UPDATE jobs SET settings = $1::jsonb, next_fire_at = $2, due_bound = $2",
                )
                .bind(settings)
                .bind(at)
                .execute(pool)
                .await?;
            }
            Self::Sqlite(pool) => {
                sqlx::query("UPDATE jobs SET settings = ?1, next_fire_at = ?2")
                    .bind(settings)
                    .bind(at.timestamp_millis())
                    .execute(pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// Deletes job `id` (and its runs).
    pub async fn delete_job(&self, id: Uuid) -> anyhow::Result<()> {
        match self {
            Self::Postgres(pool) => {
                sqlx::query("DELETE FROM jobs WHERE id = $1")
                    .bind(id)
                    .execute(pool)
                    .await?;
            }
            Self::Sqlite(pool) => {
                sqlx::query("DELETE FROM jobs WHERE id = ?1")
                    .bind(id.to_string())
                    .execute(pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// Every run with a fire time in `[from, to)`.
    pub async fn runs_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> anyhow::Result<Vec<RunRecord>> {
        Ok(match self {
            Self::Postgres(pool) => sqlx::query(
                "SELECT job_id, fire_time, dispatched_at FROM runs
                 WHERE fire_time >= $1 AND fire_time < $2",
            )
            .bind(from)
            .bind(to)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| {
                Ok(RunRecord {
                    job_id: row.try_get("job_id")?,
                    fire_time: row.try_get("fire_time")?,
                    dispatched_at: row.try_get("dispatched_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?,
            Self::Sqlite(pool) => sqlx::query(
                "SELECT job_id, fire_time, dispatched_at FROM runs
                 WHERE fire_time >= ?1 AND fire_time < ?2",
            )
            .bind(from.timestamp_millis())
            .bind(to.timestamp_millis())
            .fetch_all(pool)
            .await?
            .iter()
            .map(|row| {
                let job: String = row.try_get("job_id")?;
                let fire: i64 = row.try_get("fire_time")?;
                let dispatched: Option<i64> = row.try_get("dispatched_at")?;
                Ok(RunRecord {
                    job_id: job.parse()?,
                    fire_time: DateTime::from_timestamp_millis(fire).unwrap_or_default(),
                    dispatched_at: dispatched.and_then(DateTime::from_timestamp_millis),
                })
            })
            .collect::<anyhow::Result<_>>()?,
        })
    }

    /// How many runs are in a finished state (`succeeded`).
    pub async fn succeeded_runs(&self) -> anyhow::Result<i64> {
        let sql = "SELECT count(*) FROM runs WHERE state = 'succeeded'";
        Ok(match self {
            Self::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await?,
            Self::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await?,
        })
    }

    /// Transactions committed in this database so far (PostgreSQL only; its statistics
    /// lag by up to a second).
    pub async fn commits(&self) -> anyhow::Result<Option<i64>> {
        Ok(match self {
            Self::Postgres(pool) => Some(
                sqlx::query_scalar(
                    "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                )
                .fetch_one(pool)
                .await?,
            ),
            Self::Sqlite(_) => None,
        })
    }

    /// The PostgreSQL pool (workloads that only run on PostgreSQL).
    pub fn postgres(&self) -> anyhow::Result<&PgPool> {
        match self {
            Self::Postgres(pool) => Ok(pool),
            Self::Sqlite(_) => anyhow::bail!("this workload needs PostgreSQL"),
        }
    }

    /// Closes the pool.
    pub async fn close(&self) {
        match self {
            Self::Postgres(pool) => pool.close().await,
            Self::Sqlite(pool) => pool.close().await,
        }
    }
}
