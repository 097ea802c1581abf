//! The reconciler: finds runs that were recorded but never confirmed by the broker — the
//! publish failed, was unroutable or nacked, or the node stopped between commit and
//! confirm — and hands them to the dispatcher again, with the same idempotency key. It runs
//! at start-up (picking up what a previous process left) and then periodically; its query
//! reads only `scheduled` runs through a partial index, so its cost follows the backlog.
//!
//! In a cluster it works only on the shards this node holds, so nodes never act on the
//! same run. When this node gains shards (a takeover or a rebalance) it at once picks up
//! the runs their previous owner recorded but did not get confirmed.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    cluster::Ownership,
    dispatch::DispatchHandle,
    store::{Store, StoreError},
    telemetry,
};

/// Most runs handed over per pass.
const PASS_LIMIT: u32 = 1000;

/// The reconciler service.
pub struct Reconciler {
    store: Arc<dyn Store>,
    dispatch: DispatchHandle,
    ownership: Ownership,
    republish_after: Duration,
}

impl Reconciler {
    /// Re-publishes runs of `ownership`'s shards unconfirmed for longer than
    /// `republish_after`.
    pub fn new(
        store: Arc<dyn Store>,
        dispatch: DispatchHandle,
        ownership: Ownership,
        republish_after: Duration,
    ) -> Self {
        Self {
            store,
            dispatch,
            ownership,
            republish_after,
        }
    }

    /// One pass over runs unconfirmed for longer than `republish_after`; returns how many
    /// runs were handed to the dispatcher.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        let shards = self.ownership.shard_filter();
        self.pass(self.republish_after, shards.as_deref(), "unconfirmed")
            .await
    }

    /// Hands over runs of `shards` recorded more than `age` ago and still unconfirmed.
    async fn pass(
        &self,
        age: Duration,
        shards: Option<&[u32]>,
        reason: &'static str,
    ) -> Result<usize, StoreError> {
        if shards.is_some_and(<[u32]>::is_empty) {
            return Ok(0);
        }
        let cutoff = Utc::now() - chrono::Duration::from_std(age).expect("bounded");
        let mut total = 0;
        loop {
            let runs = self
                .store
                .unconfirmed_runs(cutoff, PASS_LIMIT, shards)
                .await?;
            let count = runs.len();
            if count > 0 {
                info!(runs = count, reason, "publishing unconfirmed runs again");
                metrics::counter!(telemetry::REPUBLISHES, "reason" => reason)
                    .increment(count as u64);
                self.dispatch.resubmit(runs);
            }
            total += count;
            // A takeover may find more than one page; a periodic pass leaves the rest to
            // the next pass, after the dispatcher confirmed these.
            if count < PASS_LIMIT as usize || reason != "takeover" {
                return Ok(total);
            }
        }
    }

    /// Runs a pass now and then every half `republish_after` until `cancel` fires; on
    /// gaining shards, picks up their unconfirmed runs at once.
    pub async fn run(self, cancel: CancellationToken) {
        let period = (self.republish_after / 2).max(Duration::from_millis(500));
        let mut leases = self.ownership.subscribe();
        let mut known: BTreeSet<u32> = BTreeSet::new();
        // The first pass takes everything a previous process left unconfirmed.
        let mut age = Duration::ZERO;
        let mut next_pass = tokio::time::Instant::now();
        loop {
            let held: BTreeSet<u32> = self.ownership.current().shards().collect();
            let gained: Vec<u32> = held.difference(&known).copied().collect();
            known = held;
            if !gained.is_empty() && age > Duration::ZERO {
                // The previous owner may have recorded runs it never got confirmed.
                let shards = self.ownership.shard_filter().map(|_| gained);
                self.report(
                    self.pass(Duration::ZERO, shards.as_deref(), "takeover")
                        .await,
                );
            }
            if tokio::time::Instant::now() >= next_pass {
                let shards = self.ownership.shard_filter();
                self.report(self.pass(age, shards.as_deref(), "unconfirmed").await);
                age = self.republish_after;
                next_pass = tokio::time::Instant::now() + period;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep_until(next_pass) => {}
                Ok(()) = leases.changed() => {}
            }
        }
    }

    fn report(&self, result: Result<usize, StoreError>) {
        if let Err(error) = result {
            warn!(%error, "reconciler pass failed");
            metrics::counter!(telemetry::STORE_ERRORS, "operation" => "unconfirmed_runs")
                .increment(1);
        }
    }
}
