//! Checking who published a reply ([`ReplyAuth`]), when `reply_users` is set: the
//! delivery's `user_id` property (validated by RabbitMQ against the publishing
//! connection's user) against the rule of [`crate::domain::reply_auth`]. Acks, results
//! and heartbeats are judged by the group of their run's job, read from the store (and
//! cached per job for [`GROUP_CACHE_FOR`]); a reply about a run the store does not have
//! passes, as the store ignores it anyway.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;
use tracing::warn;
use uuid::Uuid;

use chime_consumer::{backoff::Backoff, protocol::Reply};

use crate::{
    domain::reply_auth::{Refusal, ReplyUsers},
    store::{Store, StoreError},
};

/// Longest a reply is held while the store is unavailable, well below RabbitMQ's
/// 30-minute consumer timeout.
pub const MAX_STORE_WAIT: Duration = Duration::from_secs(20 * 60);

/// How long a job's group is trusted from the cache (a job moved to another group is
/// judged by its new group after this at most).
const GROUP_CACHE_FOR: Duration = Duration::from_secs(30);
/// Jobs whose group is cached, at most (the cache is emptied when full).
const GROUP_CACHE_SIZE: usize = 10_000;

/// What the check found.
pub(super) enum Verdict {
    /// The reply may be applied.
    Allowed,
    /// The reply is refused, with the reason.
    Refused(Refusal),
    /// The store could not be read within [`MAX_STORE_WAIT`], or the collector stops.
    Unverified,
}

/// The `reply_users` rule and what it needs to judge a reply.
pub(super) struct ReplyAuth {
    users: ReplyUsers,
    store: Arc<dyn Store>,
    groups: Mutex<HashMap<Uuid, (String, Instant)>>,
}

impl ReplyAuth {
    /// Judges replies by `users`, reading runs' groups from `store`.
    pub(super) fn new(users: ReplyUsers, store: Arc<dyn Store>) -> Self {
        Self {
            users,
            store,
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `reply`, published by `user` (the delivery's `user_id`), may be applied.
    /// Waits with backoff while the store is unavailable.
    pub(super) async fn judge(
        &self,
        reply: &Reply,
        user: Option<&str>,
        cancel: &CancellationToken,
    ) -> Verdict {
        let verdict = |result: Result<(), Refusal>| match result {
            Ok(()) => Verdict::Allowed,
            Err(refusal) => Verdict::Refused(refusal),
        };
        match reply {
            Reply::Presence(presence) => verdict(self.users.check_group(user, &presence.group)),
            Reply::Observe(_) => verdict(self.users.check_observer(user)),
            Reply::Ack(_) | Reply::Result(_) | Reply::Heartbeat(_) => {
                if user.is_none() {
                    return Verdict::Refused(Refusal::NoUser);
                }
                let Some(task_id) = reply.task_id() else {
                    return Verdict::Allowed;
                };
                match self.group_with_retry(task_id, cancel).await {
                    Ok(Some(group)) => verdict(self.users.check_group(user, &group)),
                    // The store ignores a reply about a run it does not have.
                    Ok(None) => Verdict::Allowed,
                    Err(()) => Verdict::Unverified,
                }
            }
        }
    }

    async fn group_with_retry(
        &self,
        run_id: Uuid,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, ()> {
        let give_up_at = Instant::now() + MAX_STORE_WAIT;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            match self.group_of_run(run_id).await {
                Ok(group) => return Ok(group),
                Err(error) => {
                    let delay = backoff.next_delay();
                    if Instant::now() + delay > give_up_at || !error.is_transient() {
                        warn!(%error, %run_id, "cannot read a run's group to check its reply's user");
                        return Err(());
                    }
                    warn!(%error, %run_id, retry_in_ms = delay.as_millis() as u64,
                        "cannot read a run's group to check its reply's user; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = cancel.cancelled() => return Err(()),
                    }
                }
            }
        }
    }

    /// The group of the job of run `run_id`; `None` if the run or its job is gone.
    async fn group_of_run(&self, run_id: Uuid) -> Result<Option<String>, StoreError> {
        let Some(run) = self.store.get_run(run_id).await? else {
            return Ok(None);
        };
        if let Some(group) = self.cached(run.job_id) {
            return Ok(Some(group));
        }
        let Some(job) = self.store.get_job(run.job_id).await? else {
            return Ok(None);
        };
        let group = job.spec.settings.target.group;
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if groups.len() >= GROUP_CACHE_SIZE {
            groups.clear();
        }
        groups.insert(run.job_id, (group.clone(), Instant::now()));
        Ok(Some(group))
    }

    fn cached(&self, job_id: Uuid) -> Option<String> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups
            .get(&job_id)
            .filter(|(_, at)| at.elapsed() < GROUP_CACHE_FOR)
            .map(|(group, _)| group.clone())
    }
}
