//! Heartbeats while a handler runs: they tell the scheduler the task is alive (each one
//! extends the run's deadline by the job's run timeout) and carry the handler's progress.

use std::{future::Future, sync::Arc, time::Duration};

use tokio::sync::watch;
use tracing::debug;

use super::replies::ReplyPublisher;
use crate::{handler::TaskContext, protocol::Progress};

/// Shortest gap between two heartbeats, however often progress is reported.
const MIN_GAP: Duration = Duration::from_millis(200);

/// How often to send heartbeats: the configured interval, but at least three per run
/// timeout so one lost heartbeat never lets the deadline pass.
pub(super) fn interval(configured: Duration, run_timeout_ms: Option<u64>) -> Duration {
    let bound = run_timeout_ms.map_or(configured, |ms| Duration::from_millis(ms / 3));
    configured.min(bound).max(MIN_GAP)
}

/// Runs `work` with a context wired to report progress, sending heartbeats for `ctx`
/// every `every` (and soon after progress is reported) until `work` finishes.
///
/// The heartbeats run in the caller's task rather than a task of their own: most
/// handlers finish long before the first heartbeat is due, and spawning a task per
/// delivery cost the consumer more than such a handler does.
pub(super) async fn beside<W, F>(
    ctx: &TaskContext,
    replies: &ReplyPublisher,
    every: Duration,
    work: W,
) -> F::Output
where
    W: FnOnce(TaskContext) -> F,
    F: Future,
{
    let (sink, progress) = watch::channel(None);
    let work = work(ctx.clone().with_progress(Arc::new(sink)));
    let beats = beat(ctx, replies, every, progress);
    tokio::pin!(work, beats);
    tokio::select! {
        // The handler is polled first on every wake, and no random pick is drawn per
        // poll on this per-delivery path.
        biased;
        output = &mut work => output,
        () = &mut beats => unreachable!("the heartbeat loop never ends"),
    }
}

/// Sends heartbeats for `ctx` for as long as it is polled.
async fn beat(
    ctx: &TaskContext,
    replies: &ReplyPublisher,
    every: Duration,
    mut progress: watch::Receiver<Option<Progress>>,
) {
    // A handler may drop its context early; heartbeats go on without progress then.
    let mut watching = true;
    let mut next = tokio::time::Instant::now() + every;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            changed = progress.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                // Coalesce a burst of reports into one heartbeat.
                tokio::time::sleep(MIN_GAP).await;
            }
        }
        let latest = progress.borrow_and_update().clone();
        if let Err(error) = replies.send_heartbeat(ctx, latest).await {
            // Not fatal: the next one may get through, and the result settles the run.
            debug!(%error, task_id = %ctx.task_id(), "heartbeat not confirmed");
        }
        metrics::counter!("chime_consumer_heartbeats_total").increment(1);
        next = tokio::time::Instant::now() + every;
    }
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
