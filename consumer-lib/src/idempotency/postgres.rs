//! The PostgreSQL idempotency store, shared by every instance of a group, and the
//! transactional handler form that makes a handler's own database writes exactly-once.
//! Outcomes older than a retention (default 7 days) are pruned in the background; see
//! [`PgIdempotencyStore`].

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, Row};
use tracing::{debug, warn};
use uuid::Uuid;

use super::{IdempotencyError, IdempotencyStore, RecordedOutcome};
use crate::handler::{BoxFuture, HandlerResult, TaskContext, catch_panic, outcome_of};

/// Advisory lock key guarding creation of the idempotency table ("chimeidem").
const SCHEMA_LOCK: i64 = 0x6368_696d_6569_6465;

/// How long outcomes are kept after they finished unless [`PgIdempotencyStore::retention`]
/// says otherwise.
const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most outcomes one prune statement deletes.
const PRUNE_BATCH: u32 = 1000;
/// A write starts a prune at most this often per store.
const PRUNE_INTERVAL: Duration = Duration::from_secs(600);

/// Outcomes kept in table `chime_idempotency` of a PostgreSQL database the application
/// already owns. [`PgIdempotencyStore::new`] creates the table (and an index on
/// `finished_at`) if it is missing.
///
/// Retention: outcomes are kept for 7 days after they finished, then deleted; set it with
/// [`PgIdempotencyStore::retention`] (`Duration::ZERO` keeps them forever). Pruning adds
/// nothing to a write's latency: at most once every 10 minutes per store (clones share
/// the clock) a write starts a background task that deletes the outcomes past the
/// retention, 1000 rows per statement, oldest first through the index, until a batch
/// comes back short. Instances pruning at the same time skip each other's rows
/// (`FOR UPDATE SKIP LOCKED`). [`PgIdempotencyStore::prune`] runs one pass on demand.
///
/// A duplicate delivered after its key's outcome was deleted runs the handler again, so
/// keep the retention longer than duplicates can arrive: the scheduler re-publishes a run
/// for at most `max_attempts` × (its timeouts and backoff), and replays a dead letter only
/// while it still keeps the run (its `run_retention`, also 7 days by default).
#[derive(Debug, Clone)]
pub struct PgIdempotencyStore {
    pool: PgPool,
    retention: Option<Duration>,
    prune_clock: Arc<PruneClock>,
}

/// When a write last started a prune (unix milliseconds; 0: never), shared by clones.
#[derive(Debug, Default)]
struct PruneClock(AtomicI64);

impl PruneClock {
    /// Whether a prune is due at `now` (none started within `interval`); if so, notes
    /// `now` as its start so concurrent writers start one prune, not several.
    fn claim(&self, now: DateTime<Utc>, interval: Duration) -> bool {
        let now = now.timestamp_millis();
        let last = self.0.load(Ordering::Relaxed);
        now.saturating_sub(last) >= interval.as_millis() as i64
            && self
                .0
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// A handler that runs inside the transaction that records its idempotency key. Build one
/// with [`tx_handler`].
pub trait TransactionalHandler: Send + Sync + 'static {
    /// Runs the task; every write through `conn` commits with the key or not at all.
    fn handle<'c>(
        &'c self,
        ctx: TaskContext,
        conn: &'c mut PgConnection,
    ) -> BoxFuture<'c, HandlerResult>;
}

impl<F> TransactionalHandler for F
where
    F: for<'c> Fn(TaskContext, &'c mut PgConnection) -> BoxFuture<'c, HandlerResult>
        + Send
        + Sync
        + 'static,
{
    fn handle<'c>(
        &'c self,
        ctx: TaskContext,
        conn: &'c mut PgConnection,
    ) -> BoxFuture<'c, HandlerResult> {
        self(ctx, conn)
    }
}

/// Helps the compiler infer a transactional handler closure's lifetimes:
///
/// ```no_run
/// # use chime_consumer::idempotency::tx_handler;
/// let handler = tx_handler(|ctx, conn| Box::pin(async move {
///     sqlx::query("UPDATE orders SET closed = true WHERE created_at < now() - interval '30 minutes'")
///         .execute(&mut *conn)
///         .await
///         .map_err(chime_consumer::HandlerError::retryable)?;
///     Ok(None)
/// }));
/// ```
pub fn tx_handler<F>(f: F) -> F
where
    F: for<'c> Fn(TaskContext, &'c mut PgConnection) -> BoxFuture<'c, HandlerResult>
        + Send
        + Sync
        + 'static,
{
    f
}

/// What the transactional form did with a task.
#[derive(Debug)]
pub(crate) enum TxExecution {
    /// The handler ran; this is its outcome.
    Ran(RecordedOutcome),
    /// Another delivery of the key finished before; this is its recorded outcome.
    Replayed(RecordedOutcome),
}

impl PgIdempotencyStore {
    /// Uses `pool` and creates table `chime_idempotency` if it does not exist.
    pub async fn new(pool: PgPool) -> Result<Self, IdempotencyError> {
        // Instances starting together would race on CREATE TABLE IF NOT EXISTS (it is not
        // atomic in PostgreSQL); a transaction-scoped advisory lock serialises them.
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SCHEMA_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS chime_idempotency (
                 key uuid PRIMARY KEY,
                 outcome jsonb,
                 finished_at timestamptz
             )",
        )
        .execute(&mut *tx)
        .await?;
        // Pruning reads oldest first through this index. On a large table created by an
        // earlier version, building it blocks writes once; create it beforehand with
        // CREATE INDEX CONCURRENTLY to avoid that.
        sqlx::query(
            "CREATE INDEX IF NOT EXISTS chime_idempotency_finished
                 ON chime_idempotency (finished_at)",
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Self {
            pool,
            retention: Some(DEFAULT_RETENTION),
            prune_clock: Arc::default(),
        })
    }

    /// Keeps outcomes for `retention` after they finished (default 7 days);
    /// `Duration::ZERO` keeps them forever.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention).filter(|age| !age.is_zero());
        self
    }

    /// The pool this store writes to.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Deletes the outcomes that finished more than the retention before `now`, at most
    /// 1000 per statement, oldest first, until none is left (or another instance is
    /// deleting the rest); returns how many it deleted. Writes start it in the background
    /// at most every 10 minutes.
    pub async fn prune(&self, now: DateTime<Utc>) -> Result<u64, IdempotencyError> {
        let Some(cutoff) = self
            .retention
            .and_then(|age| chrono::Duration::from_std(age).ok())
            .and_then(|age| now.checked_sub_signed(age))
        else {
            return Ok(0);
        };
        let mut total = 0;
        loop {
            let deleted = sqlx::query(
                "DELETE FROM chime_idempotency WHERE key IN (
                     SELECT key FROM chime_idempotency WHERE finished_at < $1
                     ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
            )
            .bind(cutoff)
            .bind(i64::from(PRUNE_BATCH))
            .execute(&self.pool)
            .await?
            .rows_affected();
            total += deleted;
            if deleted < u64::from(PRUNE_BATCH) {
                return Ok(total);
            }
            tokio::task::yield_now().await;
        }
    }

    /// After a write: starts a background prune if one is due.
    fn prune_if_due(&self) {
        let now = Utc::now();
        if self.retention.is_none() || !self.prune_clock.claim(now, PRUNE_INTERVAL) {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            match store.prune(now).await {
                Ok(0) => {}
                Ok(pruned) => debug!(pruned, "pruned old idempotency outcomes"),
                Err(error) => warn!(%error, "pruning idempotency outcomes failed; retrying later"),
            }
        });
    }

    /// Runs `handler` for `ctx` exactly once per idempotency key across every instance:
    /// the key's row is inserted first in a transaction (a concurrent delivery of the same
    /// key waits on that row lock), the handler runs with the transaction, and the outcome
    /// commits with the handler's writes. A failure rolls the handler's writes back and
    /// leaves no record, so a later attempt runs the handler again.
    pub(crate) async fn execute(
        &self,
        handler: &dyn TransactionalHandler,
        ctx: TaskContext,
    ) -> Result<TxExecution, IdempotencyError> {
        let key = ctx.idempotency_key();
        let mut tx = self.pool.begin().await?;
        let claimed = sqlx::query(
            "INSERT INTO chime_idempotency (key) VALUES ($1) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !claimed {
            tx.rollback().await?;
            return match self.lookup(key).await? {
                Some(recorded) => Ok(TxExecution::Replayed(recorded)),
                None => Err(IdempotencyError::Corrupt {
                    key,
                    reason: "key present without an outcome".into(),
                }),
            };
        }
        let result = catch_panic(|| handler.handle(ctx, &mut tx)).await;
        let recorded = RecordedOutcome {
            outcome: outcome_of(&result),
            finished_at: Utc::now(),
        };
        if result.is_ok() {
            sqlx::query(
                "UPDATE chime_idempotency SET outcome = $2, finished_at = $3 WHERE key = $1",
            )
            .bind(key)
            .bind(sqlx::types::Json(&recorded.outcome))
            .bind(recorded.finished_at)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            self.prune_if_due();
        } else {
            tx.rollback().await?;
        }
        Ok(TxExecution::Ran(recorded))
    }
}

#[async_trait]
impl IdempotencyStore for PgIdempotencyStore {
    async fn lookup(&self, key: Uuid) -> Result<Option<RecordedOutcome>, IdempotencyError> {
        let row = sqlx::query(
            "SELECT outcome, finished_at FROM chime_idempotency
             WHERE key = $1 AND outcome IS NOT NULL",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let outcome: serde_json::Value = row.try_get("outcome")?;
        let finished_at: DateTime<Utc> = row.try_get("finished_at")?;
        let outcome = serde_json::from_value(outcome).map_err(|e| IdempotencyError::Corrupt {
            key,
            reason: e.to_string(),
        })?;
        Ok(Some(RecordedOutcome {
            outcome,
            finished_at,
        }))
    }

    async fn record(&self, key: Uuid, outcome: &RecordedOutcome) -> Result<(), IdempotencyError> {
        sqlx::query(
            "INSERT INTO chime_idempotency (key, outcome, finished_at) VALUES ($1, $2, $3)
             ON CONFLICT (key) DO UPDATE SET outcome = EXCLUDED.outcome,
                 finished_at = EXCLUDED.finished_at
             WHERE chime_idempotency.outcome IS NULL",
        )
        .bind(key)
        .bind(sqlx::types::Json(&outcome.outcome))
        .bind(outcome.finished_at)
        .execute(&self.pool)
        .await?;
        self.prune_if_due();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_prune_per_interval() {
        let clock = PruneClock::default();
        let start: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
        let interval = Duration::from_secs(600);
        assert!(clock.claim(start, interval), "the first write prunes");
        assert!(!clock.claim(start, interval));
        assert!(!clock.claim(start + chrono::Duration::seconds(599), interval));
        assert!(clock.claim(start + chrono::Duration::seconds(600), interval));
    }
}
