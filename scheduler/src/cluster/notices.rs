//! Notices between PostgreSQL nodes (`LISTEN`/`NOTIFY`): a job changed through any node's
//! API reaches the timer of the node that holds its shard at once, and a node joining,
//! leaving or releasing shards wakes the others' membership services. Notices are a
//! speed-up, not the source of truth: when the listening connection drops, notices may
//! have been missed, so the timer reloads its whole window and membership runs a round.
//!
//! Job notices go out through a sink the daemon gives [`listen`] (it hands them to the
//! timer), so this module does not depend on the timer, which depends on `cluster`.

use std::{sync::Arc, time::Duration};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use uuid::Uuid;

use chime_consumer::backoff::Backoff;

use crate::store::{
    PostgresStore,
    postgres::cluster::{CLUSTER_CHANNEL, JOBS_CHANNEL},
};

/// What a notice asks of whoever holds the jobs' fire times (the timer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobNotice {
    /// This job was created, changed or deleted through some node's API.
    Changed(Uuid),
    /// Notices may have been missed: reload every job.
    Everything,
}

/// Forwards job notices to `jobs` and cluster notices to `wake` (membership) until
/// `stop` fires.
pub async fn listen(
    store: PostgresStore,
    jobs: impl Fn(JobNotice) + Send,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let listener = tokio::select! {
            () = stop.cancelled() => return,
            listener = store.listener() => listener,
        };
        let mut listener = match listener {
            Ok(listener) => listener,
            Err(error) => {
                let delay = backoff.next_delay();
                warn!(%error, retry_in_ms = delay.as_millis() as u64, "cannot listen for cluster notices");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(delay) => continue,
                }
            }
        };
        // Anything may have changed while we were not listening.
        jobs(JobNotice::Everything);
        wake.notify_one();
        loop {
            let notice = tokio::select! {
                () = stop.cancelled() => return,
                notice = listener.try_recv() => notice,
            };
            match notice {
                Ok(Some(notice)) => {
                    backoff.reset();
                    match notice.channel() {
                        JOBS_CHANNEL => match Uuid::parse_str(notice.payload()) {
                            Ok(job) => jobs(JobNotice::Changed(job)),
                            Err(_) => {
                                debug!(payload = notice.payload(), "ignoring a bad job notice")
                            }
                        },
                        CLUSTER_CHANNEL => wake.notify_one(),
                        _ => {}
                    }
                }
                Ok(None) => {
                    warn!("lost the notice connection; reconnecting");
                    break;
                }
                Err(error) => {
                    warn!(%error, "notice connection failed; reconnecting");
                    break;
                }
            }
        }
        let delay = backoff.next_delay();
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}
