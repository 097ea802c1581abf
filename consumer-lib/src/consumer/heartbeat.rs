//! Heartbeats while a handler runs: they tell the scheduler the task is alive (each one
//! extends the run's deadline by the job's run timeout) and carry the handler's progress.

use std::{sync::Arc, time::Duration};

use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::debug;

use super::replies::ReplyPublisher;
use crate::handler::TaskContext;

/// Shortest gap between two heartbeats, however often progress is reported.
const MIN_GAP: Duration = Duration::from_millis(200);

/// How often to send heartbeats: the configured interval, but at least three per run
/// timeout so one lost heartbeat never lets the deadline pass.
pub(super) fn interval(configured: Duration, run_timeout_ms: Option<u64>) -> Duration {
    let bound = run_timeout_ms.map_or(configured, |ms| Duration::from_millis(ms / 3));
    configured.min(bound).max(MIN_GAP)
}

/// Starts the heartbeat loop for `ctx`; it stops when the returned guard is dropped.
/// Returns the context wired to report progress through the loop.
pub(super) fn start(
    ctx: &TaskContext,
    replies: &ReplyPublisher,
    every: Duration,
) -> (TaskContext, DropGuard) {
    let (sink, mut progress) = watch::channel(None);
    let ctx = ctx.clone().with_progress(Arc::new(sink));
    let stop = CancellationToken::new();
    let guard = stop.clone().drop_guard();
    let replies = replies.clone();
    let beat_ctx = ctx.clone();
    tokio::spawn(async move {
        let mut next = tokio::time::Instant::now() + every;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(next) => {}
                changed = progress.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // Coalesce a burst of reports into one heartbeat.
                    tokio::time::sleep(MIN_GAP).await;
                }
            }
            let latest = progress.borrow_and_update().clone();
            if let Err(error) = replies.send_heartbeat(&beat_ctx, latest).await {
                // Not fatal: the next one may get through, and the result settles the run.
                debug!(%error, task_id = %beat_ctx.task_id(), "heartbeat not confirmed");
            }
            metrics::counter!("chime_consumer_heartbeats_total").increment(1);
            next = tokio::time::Instant::now() + every;
        }
    });
    (ctx, guard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_fits_the_run_timeout() {
        let ten = Duration::from_secs(10);
        assert_eq!(interval(ten, None), ten);
        assert_eq!(interval(ten, Some(300_000)), ten);
        assert_eq!(interval(ten, Some(6_000)), Duration::from_secs(2));
        assert_eq!(interval(ten, Some(30)), MIN_GAP);
    }
}
