//! The reconciler: finds runs that were recorded but never confirmed by the broker — the
//! publish failed, was unroutable or nacked, or the node stopped between commit and
//! confirm — and hands them to the dispatcher again, with the same idempotency key. It runs
//! at start-up (picking up what a previous process left) and then periodically; its query
//! reads only `scheduled` runs through a partial index, so its cost follows the backlog.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
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
    republish_after: Duration,
}

impl Reconciler {
    /// Re-publishes runs unconfirmed for longer than `republish_after`.
    pub fn new(store: Arc<dyn Store>, dispatch: DispatchHandle, republish_after: Duration) -> Self {
        Self {
            store,
            dispatch,
            republish_after,
        }
    }

    /// One pass over runs unconfirmed for longer than `republish_after`; returns how many
    /// runs were handed to the dispatcher.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        self.pass(self.republish_after).await
    }

    /// Hands over runs recorded more than `age` ago and still unconfirmed.
    async fn pass(&self, age: Duration) -> Result<usize, StoreError> {
        let cutoff = Utc::now() - chrono::Duration::from_std(age).expect("bounded");
        let runs = self.store.unconfirmed_runs(cutoff, PASS_LIMIT).await?;
        let count = runs.len();
        if count > 0 {
            info!(runs = count, "publishing unconfirmed runs again");
            metrics::counter!(telemetry::REPUBLISHES).increment(count as u64);
            self.dispatch.resubmit(runs);
        }
        Ok(count)
    }

    /// Runs a pass now and then every half `republish_after` until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let period = (self.republish_after / 2).max(Duration::from_millis(500));
        // The first pass takes everything a previous process left unconfirmed.
        let mut age = Duration::ZERO;
        loop {
            let result = self.pass(age).await;
            age = self.republish_after;
            if let Err(error) = result {
                warn!(%error, "reconciler pass failed");
                metrics::counter!(telemetry::STORE_ERRORS, "operation" => "unconfirmed_runs")
                    .increment(1);
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    }
}
