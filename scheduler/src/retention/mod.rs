//! Retention: keeps the store bounded. The pruner deletes finished runs older than
//! `run_retention` and consumer instances not heard from for `consumer_retention` (a
//! day by default), in small batches, so
//! the `runs` and `consumers` tables stop growing with time and no statement holds locks
//! for long.
//!
//! What it deletes and what it keeps:
//!
//! - runs that are `succeeded`, or `dead` with their dead letter published (or put in a
//!   dead-letter queue by RabbitMQ), whose `finished_at` is older than `run_retention`;
//! - never a run that is unfinished (`scheduled`, `dispatched`, `acked`, `failed` waiting
//!   for its retry) nor a `dead` run whose dead letter is still pending: the reconciler
//!   still owes it work;
//! - consumer instances (presence rows) whose last presence message is older than
//!   `consumer_retention` (default [`CONSUMER_RETENTION`]); an instance that comes back
//!   is recorded again, with a new first-seen time;
//! - observer patterns not registered again for [`OBSERVER_TTL_MS`] (7 days): no copy
//!   is published for them any more, and an observer that comes back registers again.
//!
//! Usage: the daemon starts [`Pruner::run`], which prunes at once and then every
//! [`PRUNE_INTERVAL`]; tests drive one pass with [`Pruner::run_once`]. Each pass deletes at
//! most [`PRUNE_BATCH`] rows per statement, oldest first, each statement its own short
//! transaction reading through an index (`runs_finished`, `consumers_seen`), and loops
//! until a batch comes back short, yielding between batches and stopping early on
//! shutdown. In a PostgreSQL cluster every node runs it: the batches lock their rows
//! `SKIP LOCKED`, so nodes pruning together split the work instead of waiting, and a pass
//! with nothing to delete is one index probe per table.
//!
//! Options: `run_retention` (default 7 days; `0s` keeps runs forever) and
//! `consumer_retention` (default 1 day, at least 1 minute), see [`crate::config`]; the
//! batch size and interval are constants.
//!
//! Metrics: `chime_runs_pruned_total`, `chime_consumers_pruned_total`,
//! `chime_observers_pruned_total`; a failed pass counts
//! in `chime_store_errors_total{operation="prune"}` and is retried on the next one.

use std::{future::Future, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use chime_consumer::protocol::OBSERVER_TTL_MS;

use crate::{
    store::{Store, StoreError},
    telemetry,
};

/// Most rows one `DELETE` removes: small enough that each statement is a short
/// transaction, large enough that a backlog drains in few round trips.
pub const PRUNE_BATCH: u32 = 1000;
/// Time between pruning passes.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// How long a consumer instance's presence row is kept after its last presence message,
/// by default (setting `consumer_retention`). Far longer than an instance counts as live
/// (15 s), so `GET /v1/consumers?stale=include` shows recent departures while the table
/// stays bounded by the instances of about a day.
pub const CONSUMER_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// What the pruner deletes and how it paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Finished runs older than this are deleted; `None` keeps them forever. Default
    /// 7 days (setting `run_retention`).
    pub run_retention: Option<Duration>,
    /// Consumer instances not heard from for this long are deleted. Default
    /// [`CONSUMER_RETENTION`] (setting `consumer_retention`).
    pub consumer_retention: Duration,
    /// Most rows per statement; at least 1. Default [`PRUNE_BATCH`].
    pub batch: u32,
    /// Time between passes. Default [`PRUNE_INTERVAL`].
    pub interval: Duration,
}

impl RetentionSettings {
    /// The defaults, with runs kept for `run_retention` (`None`: forever).
    pub fn new(run_retention: Option<Duration>) -> Self {
        Self {
            run_retention,
            consumer_retention: CONSUMER_RETENTION,
            batch: PRUNE_BATCH,
            interval: PRUNE_INTERVAL,
        }
    }
}

/// What one pass deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PruneOutcome {
    /// Finished runs deleted.
    pub runs: u64,
    /// Consumer instances deleted.
    pub consumers: u64,
    /// Observer patterns deleted.
    pub observers: u64,
}

/// The pruner service.
pub struct Pruner {
    store: Arc<dyn Store>,
    settings: RetentionSettings,
}

impl Pruner {
    /// A pruner of `store` with `settings`.
    pub fn new(store: Arc<dyn Store>, settings: RetentionSettings) -> Self {
        assert!(settings.batch > 0, "a prune batch deletes at least one row");
        Self { store, settings }
    }

    /// One pass at `now`: deletes everything past retention, batch by batch.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<PruneOutcome, StoreError> {
        self.pass(now, &CancellationToken::new()).await
    }

    /// Prunes at once, then every interval, until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            let started = std::time::Instant::now();
            match self.pass(Utc::now(), &stop).await {
                Ok(outcome) if outcome != PruneOutcome::default() => info!(
                    runs = outcome.runs,
                    consumers = outcome.consumers,
                    observers = outcome.observers,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "pruned old runs, consumers and observers"
                ),
                Ok(_) => debug!("nothing to prune"),
                Err(error) => {
                    warn!(%error, "pruning failed; retrying on the next pass");
                    metrics::counter!(telemetry::STORE_ERRORS, "operation" => "prune").increment(1);
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.settings.interval) => {}
            }
        }
    }

    /// A pass at `now` that stops between batches once `stop` is cancelled.
    async fn pass(
        &self,
        now: DateTime<Utc>,
        stop: &CancellationToken,
    ) -> Result<PruneOutcome, StoreError> {
        let limit = self.settings.batch;
        let mut outcome = PruneOutcome::default();
        if let Some(cutoff) = self.settings.run_retention.and_then(|age| cutoff(now, age)) {
            outcome.runs = drain(limit, stop, telemetry::RUNS_PRUNED, || {
                self.store.prune_runs(cutoff, limit)
            })
            .await?;
            // The audit trail is kept as long as run history.
            drain(limit, stop, telemetry::AUDIT_PRUNED, || {
                self.store.prune_audit(cutoff, limit)
            })
            .await?;
        }
        if let Some(cutoff) = cutoff(now, self.settings.consumer_retention) {
            outcome.consumers = drain(limit, stop, telemetry::CONSUMERS_PRUNED, || {
                self.store.prune_consumers(cutoff, limit)
            })
            .await?;
        }
        let observer_ttl = Duration::from_millis(OBSERVER_TTL_MS);
        if let Some(cutoff) = cutoff(now, observer_ttl) {
            outcome.observers = drain(limit, stop, telemetry::OBSERVERS_PRUNED, || {
                self.store.prune_observers(cutoff, limit)
            })
            .await?;
        }
        Ok(outcome)
    }
}

/// The instant before which data `age` old at `now` is deleted; `None` when that is before
/// any representable instant (nothing is that old).
pub fn cutoff(now: DateTime<Utc>, age: Duration) -> Option<DateTime<Utc>> {
    now.checked_sub_signed(chrono::Duration::from_std(age).ok()?)
}

/// Runs `batch` (one `DELETE` of at most `limit` rows) until it deletes fewer than `limit`
/// or `stop` is cancelled, yielding in between; counts each batch in `counter` and
/// returns the total.
async fn drain<F, Fut>(
    limit: u32,
    stop: &CancellationToken,
    counter: &'static str,
    mut batch: F,
) -> Result<u64, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, StoreError>>,
{
    let mut total = 0;
    loop {
        let deleted = batch().await?;
        total += deleted;
        metrics::counter!(counter).increment(deleted);
        if deleted < u64::from(limit) || stop.is_cancelled() {
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn cutoff_is_now_minus_the_age() {
        let now = t("2026-11-21T10:00:00Z");
        assert_eq!(
            cutoff(now, Duration::from_secs(7 * 24 * 3600)),
            Some(t("2026-11-14T10:00:00Z"))
        );
        assert_eq!(cutoff(now, Duration::MAX), None, "nothing is that old");
    }

    #[test]
    fn defaults() {
        let settings = RetentionSettings::new(None);
        assert_eq!(settings.batch, 1000);
        assert_eq!(settings.interval, Duration::from_secs(60));
        assert_eq!(settings.consumer_retention, Duration::from_secs(86_400));
    }

    #[tokio::test]
    async fn drain_stops_at_a_short_batch_or_when_asked() {
        let mut left = 25_u64;
        let total = drain(10, &CancellationToken::new(), "test_pruned", || {
            let deleted = left.min(10);
            left -= deleted;
            async move { Ok(deleted) }
        })
        .await
        .unwrap();
        assert_eq!((total, left), (25, 0));

        let stop = CancellationToken::new();
        stop.cancel();
        let total = drain(10, &stop, "test_pruned", || async { Ok(10) })
            .await
            .unwrap();
        assert_eq!(total, 10, "one batch, then stop");
    }
}
