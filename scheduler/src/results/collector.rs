//! The [`ResultCollector`] service: its connection to the broker (reconnecting with
//! backoff), the reply consumer, and the gathering of deliveries into batches (everything
//! pushed within [`GATHER_FOR`] of a batch's first message, up to [`MAX_BATCH_REPLIES`])
//! that it hands to [`super::apply`]; beside it, the progress probes ([`super::progress`]).

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use lapin::{
    Channel,
    options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions},
    types::FieldTable,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use chime_consumer::{backoff::Backoff, protocol::topology};

use super::{
    apply::Applier, auth::ReplyAuth, progress, progress::ReplyProgress, receive, reject::Rejects,
};
use crate::{broker, dispatch::DispatchHandle, domain::reply_auth::ReplyUsers, store::Store};

/// Replies RabbitMQ may push ahead of the collector.
const PREFETCH: u16 = 250;
/// Replies gathered into one store transaction, at most (a message holding a larger
/// batch is still applied whole).
pub const MAX_BATCH_REPLIES: usize = 500;
/// How long a batch that is not full waits for more replies to join it. A reply only
/// moves its run's state (the task has reached its consumer by then), and every store
/// transaction has a fixed cost, so at a few thousand fires a second fewer, larger
/// transactions leave the CPU to the fire path; a run's state lags by this much at most.
const GATHER_FOR: Duration = Duration::from_millis(25);

/// The result collector service.
pub struct ResultCollector {
    /// Where refused replies are noted on their runs.
    store: Arc<dyn Store>,
    amqp_url: String,
    probes: Probes,
    /// Where refused replies are dead-lettered with their reason.
    rejects: Rejects,
    /// Applies the gathered batches.
    applier: Applier,
    /// Who may answer for what; `None` lets any user answer.
    auth: Option<ReplyAuth>,
}

/// How the collector measures its progress through the reply queue (see [`progress`]).
#[derive(Debug, Clone)]
pub struct Probes {
    /// The node stamped on its probes.
    pub node: String,
    /// Time between probes.
    pub interval: Duration,
    /// Where the applied probes are noted.
    pub progress: ReplyProgress,
}

impl ResultCollector {
    /// A collector applying replies from the broker at `amqp_url` to `store`, telling
    /// `dispatch` which runs were answered.
    pub fn new(
        store: Arc<dyn Store>,
        amqp_url: impl Into<String>,
        probes: Probes,
        dispatch: DispatchHandle,
    ) -> Self {
        let amqp_url = amqp_url.into();
        Self {
            applier: Applier::new(store.clone(), dispatch, probes.progress.clone()),
            store,
            rejects: Rejects::new(&amqp_url),
            amqp_url,
            probes,
            auth: None,
        }
    }

    /// Refuses replies whose validated `user_id` `users` do not allow (the
    /// `reply_users` setting); `None` lets any user answer.
    pub fn with_reply_users(mut self, users: Option<ReplyUsers>) -> Self {
        self.auth = users.map(|users| ReplyAuth::new(users, self.store.clone()));
        self
    }

    /// Consumes until `cancel` fires, reconnecting with backoff after broker failures,
    /// and sends progress probes beside it.
    pub async fn run(self, cancel: CancellationToken) {
        tokio::join!(
            self.collect(&cancel),
            progress::send_probes(
                &self.amqp_url,
                &self.probes.node,
                self.probes.interval,
                &cancel
            ),
        );
    }

    async fn collect(&self, cancel: &CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        while let Some(connection) =
            broker::connect_with_backoff(&self.amqp_url, "results", cancel).await
        {
            let end = self.session(&connection, cancel, &mut backoff).await;
            let _ = connection
                .close(200, "chimed result collector stopping".into())
                .await;
            match end {
                Ok(()) => {
                    self.rejects.close().await;
                    return;
                }
                Err(error) => {
                    let delay = backoff.next_delay();
                    warn!(%error, retry_in_ms = delay.as_millis() as u64, "lost the reply consumer; reconnecting");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = cancel.cancelled() => return,
                    }
                }
            }
        }
    }

    async fn session(
        &self,
        connection: &lapin::Connection,
        cancel: &CancellationToken,
        backoff: &mut Backoff,
    ) -> Result<(), String> {
        let (channel, mut consumer) = open_consumer(connection).await.map_err(|e| e.to_string())?;
        info!(queue = topology::REPLY_QUEUE, "collecting results");
        loop {
            let next = tokio::select! {
                next = consumer.next() => next,
                () = cancel.cancelled() => {
                    let _ = channel.basic_cancel(consumer.tag(), BasicCancelOptions::default()).await;
                    let _ = channel.close(200, "chimed shutting down".into()).await;
                    return Ok(());
                }
            };
            let mut batch = Vec::new();
            let mut replies = 0;
            let mut next = Some(next);
            let gathered_by = tokio::time::Instant::now() + GATHER_FOR;
            let ended = loop {
                match next {
                    Some(Some(Ok(delivery))) => {
                        if let Some(received) = receive::receive(
                            delivery,
                            &self.rejects,
                            self.store.as_ref(),
                            self.auth.as_ref(),
                            cancel,
                        )
                        .await
                        {
                            replies += received.replies.len();
                            batch.push(received);
                        }
                    }
                    Some(Some(Err(error))) => break Some(error.to_string()),
                    Some(None) => break Some("reply consumer ended".into()),
                    None => break None,
                }
                if replies >= MAX_BATCH_REPLIES {
                    break None;
                }
                next = tokio::time::timeout_at(gathered_by, consumer.next())
                    .await
                    .ok();
            };
            self.applier.apply_batch(batch, &self.rejects, cancel).await;
            if let Some(error) = ended {
                return Err(error);
            }
            backoff.reset();
        }
    }
}

/// Declares the cancel notices stream, so consumers that connect before the first cancel
/// subscribe to it. Best effort, on a channel of its own (a refused declaration closes
/// that channel only): without it, cancelling still works for consumers that connect
/// after the first cancel declared it.
async fn declare_cancel_notices(connection: &lapin::Connection) {
    let declared = match connection.create_channel().await {
        Ok(channel) => {
            let declared = topology::declare_cancel_notices(&channel).await;
            let _ = channel.close(200, "declared".into()).await;
            declared
        }
        Err(error) => Err(error),
    };
    if let Err(error) = declared {
        warn!(%error, queue = topology::CANCEL_NOTICES,
            "cannot declare the cancel notices stream; consumers connected now will not hear of cancels");
    }
}

async fn open_consumer(
    connection: &lapin::Connection,
) -> Result<(Channel, lapin::Consumer), lapin::Error> {
    let channel = connection.create_channel().await?;
    topology::declare_replies(connection, &channel).await?;
    declare_cancel_notices(connection).await;
    channel
        .basic_qos(PREFETCH, BasicQosOptions::default())
        .await?;
    let consumer = channel
        .basic_consume(
            topology::REPLY_QUEUE.into(),
            "chimed-results".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok((channel, consumer))
}
