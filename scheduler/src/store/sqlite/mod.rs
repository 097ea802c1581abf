//! The SQLite store: the embedded default for a single node. WAL journal, one writer
//! connection that every write goes through (writers queue for it instead of failing with
//! "database is locked"), a few reader connections for reads outside a write, and
//! `BEGIN IMMEDIATE` for every write transaction. Instants are stored as unix
//! milliseconds. Each concern's SQL lives in its own file, named as in the PostgreSQL store
//! (`rows`, `jobs`, `fire`, `runs`, `replies`, `reconcile`, `presence`, `retention`);
//! this file opens the database and has the trait's methods routed to them by name
//! (`store/delegate.rs`).

mod audit;
mod failures;
mod fire;
mod job_search;
mod jobs;
mod presence;
mod reconcile;
mod replies;
mod retention;
mod rows;
mod run_search;
mod run_stats;
mod runs;
mod tokens;

use std::{path::PathBuf, str::FromStr, time::Duration as StdDuration};

use chrono::{DateTime, Duration, Utc};
use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};
use uuid::Uuid;

use super::{FireBatch, Firing, StoreError};
use crate::domain::Job;
use crate::domain::shard::{DEFAULT_SHARD_COUNT, shard_of};
use rows::uuid;

/// Reader connections, for reads that are not part of a write (API reads, the timer's
/// refill, the reconciler's scan).
const READERS: u32 = 3;

/// The writer's page cache, in KiB (SQLite's default is 2 000): a fire touches a leaf of
/// each `runs` index at a random place, and leaves read back from the OS cost a system
/// call each. Pages are only held once touched, so an idle node stays small.
const WRITER_CACHE_KIB: u32 = 32 * 1024;

/// Jobs and runs in a SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The one connection that writes. SQLite runs one write transaction at a time; when
    /// several connections compete, the losers poll in SQLite's busy handler, sleeping
    /// 1–100 ms between tries, and every commit throws away the other connections' page
    /// caches. Queued here instead, the next writer starts the moment the last one
    /// commits, and the writer's cache stays warm.
    writer: SqlitePool,
    /// Connections for reads outside a write transaction; WAL lets them run beside it.
    readers: SqlitePool,
    file: Option<PathBuf>,
}

/// Held while a `chimed` runs on a SQLite file: an exclusive OS lock on `FILE.lock`,
/// released by the kernel when the process exits, however it exits.
#[derive(Debug)]
pub struct SingleNodeLock {
    _file: std::fs::File,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` and applies migrations.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?;
        let file = Some(options.get_filename().to_path_buf())
            .filter(|path| !path.as_os_str().is_empty() && path.as_os_str() != ":memory:");
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(StdDuration::from_secs(10))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                options
                    .clone()
                    .pragma("cache_size", format!("-{WRITER_CACHE_KIB}")),
            )
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&writer).await?;
        let readers = SqlitePoolOptions::new()
            .max_connections(READERS)
            .connect_with(options)
            .await?;
        let store = Self {
            writer,
            readers,
            file,
        };
        store.backfill_shards().await?;
        Ok(store)
    }

    /// Takes the file's single-node lock: SQLite cannot coordinate nodes, so a second
    /// `chimed` on the same file is refused instead of firing everything twice.
    pub fn lock_single_node(&self) -> Result<SingleNodeLock, StoreError> {
        let Some(db) = &self.file else {
            return Err(StoreError::SingleNode(
                "an in-memory SQLite store cannot be shared; nothing to lock".into(),
            ));
        };
        let mut lock_path = db.clone().into_os_string();
        lock_path.push(".lock");
        let lock_path = PathBuf::from(lock_path);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| {
                StoreError::SingleNode(format!("cannot open {}: {e}", lock_path.display()))
            })?;
        match file.try_lock() {
            Ok(()) => Ok(SingleNodeLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::SingleNode(format!(
                "another chimed is already running on {} (it holds {}); SQLite is single-node: \
                 stop it, or use PostgreSQL (CHIME_DATABASE_URL=postgres://...) to run a cluster",
                db.display(),
                lock_path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(StoreError::SingleNode(format!(
                "cannot lock {}: {e}",
                lock_path.display()
            ))),
        }
    }

    /// Gives jobs created before shards existed their shard.
    async fn backfill_shards(&self) -> Result<(), StoreError> {
        let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM jobs WHERE shard IS NULL")
            .fetch_all(&self.readers)
            .await?;
        if ids.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        for id in ids {
            let shard = shard_of(uuid("job", &id)?, DEFAULT_SHARD_COUNT);
            sqlx::query("UPDATE jobs SET shard = ? WHERE id = ?")
                .bind(shard)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

// The trait's other methods are routed by name (see `store/delegate.rs`).
route_store!(SqliteStore, reads: readers, writes: writer, {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn insert_job(&self, job: &Job) -> Result<(), StoreError> {
        jobs::insert_job(&self.writer, job).await
    }

    async fn insert_jobs(&self, jobs: &[Job]) -> Result<Vec<usize>, StoreError> {
        jobs::insert_jobs(&self.writer, jobs).await
    }

    async fn fire(
        &self,
        job_ids: &[Uuid],
        now: DateTime<Utc>,
        grace: Duration,
        firing: &Firing,
    ) -> Result<FireBatch, StoreError> {
        fire::fire(&self.writer, job_ids, now, grace, firing).await
    }
});

impl SqliteStore {
    /// The query plan of the reconciler's overdue-runs query, one line per step, as
    /// `EXPLAIN QUERY PLAN` prints it (for tests that its cost follows the overdue runs).
    pub async fn explain_overdue(&self, shards: Option<&[u32]>) -> Result<Vec<String>, StoreError> {
        reconcile::explain_overdue(&self.readers, shards).await
    }

    /// The query plan of the search across jobs for `filter`, one line per step, as
    /// `EXPLAIN QUERY PLAN` prints it (for tests that each main filter uses its index).
    pub async fn explain_search_runs(
        &self,
        filter: &crate::domain::RunFilter,
    ) -> Result<Vec<String>, StoreError> {
        run_search::explain_search_runs(&self.readers, filter).await
    }

    /// The plan of the query of a page of the job list for `filter`, one line per step
    /// (for tests that each order and filter uses an index).
    pub async fn explain_search_jobs(
        &self,
        filter: &crate::domain::JobFilter,
    ) -> Result<Vec<String>, StoreError> {
        job_search::explain_search_jobs(&self.readers, filter).await
    }

    /// The plan of the run statistics' count (`GET /v1/stats/runs`) for fire times in
    /// `[from, until]` of `apps`, for tests that it reads a range of fire times through
    /// an index.
    pub async fn explain_run_stats(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        apps: Option<&[String]>,
    ) -> Result<Vec<String>, StoreError> {
        run_stats::explain_run_stats(&self.readers, from, until, apps).await
    }
}
