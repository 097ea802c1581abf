//! Cancelled runs, as this instance learns of them from chimed's cancel notices (the
//! [`CANCEL_NOTICES`](crate::protocol::topology::CANCEL_NOTICES) stream): the
//! [`CancelBook`] remembers which runs were cancelled and tells the
//! handler running one, and [`read`] follows the stream for a session.
//!
//! A delivery of a cancelled run is acknowledged without running the handler and without
//! an ack or result (see `delivery`); a handler already running sees
//! [`crate::TaskContext::cancelled`] complete. Each session reads the stream from its
//! first retained entry, and takes no task before it has read what is there (see
//! [`catch_up`]), so a task that waited in its queue for a consumer is skipped too.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use futures_util::StreamExt;
use lapin::{
    Channel, Connection,
    message::Delivery,
    options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions},
    types::{AMQPValue, FieldTable, LongString},
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::protocol::{CancelMessage, topology};

/// Cancelled runs remembered at most: past it, the oldest are forgotten.
const MAX_REMEMBERED: usize = 100_000;
/// How many notices the broker sends ahead of their acks.
const PREFETCH: u16 = 200;
/// A session's catch-up on the stream ends after this long without a notice...
const CATCH_UP_QUIET: Duration = Duration::from_millis(300);
/// ...or after this long in all.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(10);

/// The runs cancelled so far, and the handlers running now.
#[derive(Default)]
pub(crate) struct CancelBook {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Cancelled run ids, with when this instance learnt of each.
    cancelled: HashMap<Uuid, Instant>,
    /// The cancellation of each run a handler is running now.
    running: HashMap<Uuid, CancellationToken>,
}

impl CancelBook {
    /// Notes that run `task_id` was cancelled and tells its handler if one is running.
    /// Returns whether one was.
    pub(crate) fn cancel(&self, task_id: Uuid) -> bool {
        let mut inner = self.inner.lock().expect("cancel book lock");
        if inner.cancelled.len() >= MAX_REMEMBERED
            && let Some(oldest) = inner
                .cancelled
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(id, _)| *id)
        {
            inner.cancelled.remove(&oldest);
        }
        inner.cancelled.insert(task_id, Instant::now());
        match inner.running.get(&task_id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether run `task_id` was cancelled.
    pub(crate) fn is_cancelled(&self, task_id: Uuid) -> bool {
        let inner = self.inner.lock().expect("cancel book lock");
        inner.cancelled.contains_key(&task_id)
    }

    /// Registers a handler starting on run `task_id`: the returned guard's token fires
    /// when the run is cancelled (at once if it already was). Deliveries of one run are
    /// handled one at a time (the key lock), so one token per run is enough.
    pub(crate) fn start(&self, task_id: Uuid) -> Running<'_> {
        let token = CancellationToken::new();
        let mut inner = self.inner.lock().expect("cancel book lock");
        if inner.cancelled.contains_key(&task_id) {
            token.cancel();
        }
        inner.running.insert(task_id, token.clone());
        Running {
            book: self,
            task_id,
            token,
        }
    }
}

/// A handler running on a run; deregistered when dropped.
pub(crate) struct Running<'a> {
    book: &'a CancelBook,
    task_id: Uuid,
    token: CancellationToken,
}

impl Running<'_> {
    /// Fires when the run is cancelled.
    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.book.inner.lock() {
            inner.running.remove(&self.task_id);
        }
    }
}

/// Where notices go, and who may publish them.
pub(crate) struct Reader<'a> {
    pub(crate) book: &'a CancelBook,
    /// Only notices whose validated `user_id` is this user count.
    pub(crate) scheduler_user: Option<&'a str>,
}

impl Reader<'_> {
    fn take(&self, delivery: &Delivery) {
        if let Some(expected) = self.scheduler_user {
            let user = delivery.properties.user_id().as_ref().map(|u| u.as_str());
            if user != Some(expected) {
                warn!(
                    user,
                    expected, "ignoring a cancel notice not published by the scheduler's user"
                );
                return;
            }
        }
        match CancelMessage::from_slice(&delivery.data) {
            // Every notice counts, whatever its group: a job's target may have changed
            // while its task waited in the old group's queue. Run ids are unique.
            Ok(notice) => {
                let running = self.book.cancel(notice.task_id);
                metrics::counter!("chime_consumer_cancel_notices_total").increment(1);
                debug!(task_id = %notice.task_id, by = notice.by.as_deref(), running,
                    "run cancelled");
            }
            // A newer chimed may publish what this version does not know: ignored.
            Err(error) => debug!(%error, "ignoring an unreadable cancel notice"),
        }
    }
}

/// Starts reading the cancel notices on a channel of its own, if chimed declared the
/// stream (an older chimed does not: then there is nothing to read, and the consumer
/// works as before). None when there is no stream.
pub(crate) async fn subscribe(
    connection: &Connection,
    instance: &str,
) -> Result<Option<(Channel, lapin::Consumer)>, lapin::Error> {
    if !topology::has_cancel_notices(connection).await? {
        info!("no cancel notices stream on the broker (chimed predates run cancelling)");
        return Ok(None);
    }
    let channel = connection.create_channel().await?;
    channel
        .basic_qos(PREFETCH, BasicQosOptions::default())
        .await?;
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-stream-offset".into(),
        AMQPValue::LongString(LongString::from("first")),
    );
    let consumer = channel
        .basic_consume(
            topology::CANCEL_NOTICES.into(),
            format!("{instance}:cancels:{}", Uuid::now_v7().simple()).into(),
            BasicConsumeOptions::default(),
            arguments,
        )
        .await?;
    Ok(Some((channel, consumer)))
}

/// Reads what the stream holds now: until no notice came for a moment (or for at most
/// [`CATCH_UP_LIMIT`]). Returns false if the stream's consumer ended.
pub(crate) async fn catch_up(consumer: &mut lapin::Consumer, reader: &Reader<'_>) -> bool {
    let limit = tokio::time::Instant::now() + CATCH_UP_LIMIT;
    loop {
        let quiet = tokio::time::Instant::now() + CATCH_UP_QUIET;
        match tokio::time::timeout_at(quiet.min(limit), consumer.next()).await {
            Ok(Some(Ok(delivery))) => settle(reader, delivery).await,
            Ok(Some(Err(_)) | None) => return false,
            Err(_) => return true,
        }
    }
}

/// Follows the stream until its consumer ends (the session's connection closed).
pub(crate) async fn read(mut consumer: lapin::Consumer, reader: Reader<'_>) {
    while let Some(next) = consumer.next().await {
        match next {
            Ok(delivery) => settle(&reader, delivery).await,
            Err(error) => {
                debug!(%error, "cancel notices ended");
                return;
            }
        }
    }
}

async fn settle(reader: &Reader<'_>, delivery: Delivery) {
    reader.take(&delivery);
    // A stream's acks only give the broker credit to send more.
    if let Err(error) = delivery.ack(BasicAckOptions::default()).await {
        debug!(%error, "could not ack a cancel notice");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_handler_is_told_and_a_later_start_is_cancelled_at_once() {
        let book = CancelBook::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let running = book.start(a);
        let token = running.token();
        assert!(!token.is_cancelled());
        assert!(!book.cancel(b), "nothing runs b");
        assert!(book.cancel(a), "a's handler is told");
        assert!(token.is_cancelled());
        drop(running);
        assert!(book.is_cancelled(a) && book.is_cancelled(b));
        assert!(book.start(b).token().is_cancelled());
        assert!(!book.is_cancelled(Uuid::from_u128(3)));
        assert!(!book.start(Uuid::from_u128(3)).token().is_cancelled());
    }
}
