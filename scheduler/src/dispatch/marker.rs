//! Writes publish outcomes to the store off the publishing path: runs confirmed by the
//! broker become `dispatched` (everything confirmed meanwhile in one statement), and
//! failed publishes are noted on their runs. The publishing loop never waits for the
//! database, so a slow commit does not make the next fires late. A mark that fails is
//! logged and counted; the run stays `scheduled` and the reconciler publishes it again
//! (at least once).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::{sync::mpsc, task::JoinHandle};
use tracing::error;
use uuid::Uuid;

use crate::{store::Store, telemetry};

/// An outcome to write.
#[derive(Debug)]
pub(super) enum Mark {
    /// The broker confirmed these runs' tasks at this time.
    Dispatched(Vec<Uuid>, DateTime<Utc>),
    /// The run's task was not accepted (unroutable, nacked, destination refused).
    Failed(Uuid, String),
}

/// Sends outcomes to the writer task. Dropping every sender ends it once it has
/// written what it was sent.
#[derive(Debug, Clone)]
pub(super) struct Marker {
    tx: mpsc::UnboundedSender<Mark>,
}

impl Marker {
    /// Starts the writer task.
    pub(super) fn start(store: Arc<dyn Store>) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, tokio::spawn(write(store, rx)))
    }

    pub(super) fn dispatched(&self, runs: Vec<Uuid>, at: DateTime<Utc>) {
        if !runs.is_empty() {
            let _ = self.tx.send(Mark::Dispatched(runs, at));
        }
    }

    pub(super) fn failed(&self, run: Uuid, reason: impl Into<String>) {
        let _ = self.tx.send(Mark::Failed(run, reason.into()));
    }
}

async fn write(store: Arc<dyn Store>, mut rx: mpsc::UnboundedReceiver<Mark>) {
    while let Some(first) = rx.recv().await {
        let mut dispatched: Vec<Uuid> = Vec::new();
        let mut latest = None;
        let mut failed = Vec::new();
        let mut take = |mark| match mark {
            Mark::Dispatched(runs, at) => {
                dispatched.extend(runs);
                latest = latest.max(Some(at));
            }
            Mark::Failed(run, reason) => failed.push((run, reason)),
        };
        take(first);
        while let Ok(mark) = rx.try_recv() {
            take(mark);
        }
        if let Some(at) = latest
            && let Err(error) = store.mark_dispatched(&dispatched, at).await
        {
            error!(%error, runs = dispatched.len(), "could not mark runs dispatched");
            metrics::counter!(telemetry::STORE_ERRORS, "operation" => "mark_dispatched")
                .increment(1);
        }
        for (run_id, reason) in failed {
            if let Err(error) = store.note_publish_failure(run_id, &reason).await {
                error!(%error, %run_id, "could not note a publish failure");
                metrics::counter!(telemetry::STORE_ERRORS, "operation" => "note_publish_failure")
                    .increment(1);
            }
        }
    }
}
