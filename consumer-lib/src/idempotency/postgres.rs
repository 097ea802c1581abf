//! The PostgreSQL idempotency store, shared by every instance of a group, and the
//! transactional handler form that makes a handler's own database writes exactly-once.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

use super::{IdempotencyError, IdempotencyStore, RecordedOutcome};
use crate::handler::{BoxFuture, HandlerResult, TaskContext, catch_panic, outcome_of};

/// Advisory lock key guarding creation of the idempotency table ("chimeidem").
const SCHEMA_LOCK: i64 = 0x6368_696d_6569_6465;

/// Outcomes kept in table `chime_idempotency` of a PostgreSQL database the application
/// already owns. [`PgIdempotencyStore::new`] creates the table if it is missing.
#[derive(Debug, Clone)]
pub struct PgIdempotencyStore {
    pool: PgPool,
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
        tx.commit().await?;
        Ok(Self { pool })
    }

    /// The pool this store writes to.
    pub fn pool(&self) -> &PgPool {
        &self.pool
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
        Ok(())
    }
}
