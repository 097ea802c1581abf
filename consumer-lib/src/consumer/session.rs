//! One connection's worth of consuming: open channels, declare topology, consume every
//! queue of this instance on one channel, announce presence, and drain on shutdown.
//!
//! The queues: the group's work queue always; the zone's work queue with a zone; the
//! instance's own broadcast queue with broadcasts (exclusive to the connection, so it is
//! declared again on every reconnect). Each gets its own `basic.consume` on the consume
//! channel, with the same per-consumer prefetch, and their deliveries are merged into one
//! stream; the semaphore bounds how many handlers run at once across all of them.

use std::{sync::Arc, time::Duration};

use futures_util::{
    StreamExt,
    stream::{self, BoxStream},
};
use lapin::{
    Channel, Connection, ConnectionProperties,
    message::Delivery,
    options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions},
    types::FieldTable,
};
use tokio_util::{sync::CancellationToken, sync::DropGuard, task::TaskTracker};
use tracing::{info, warn};

use super::{
    cancels, delivery, presence,
    replies::ReplyPublisher,
    settlement::Settler,
    shared::{Settings, Shared},
};
use crate::{
    protocol::{topology, user_id},
    reconnect::{SessionEnd, Supervised},
};

/// The consumer's sessions, as the reconnect loop runs them.
pub(super) struct ConsumerSessions {
    pub(super) shared: Arc<Shared>,
}

impl Supervised for ConsumerSessions {
    type Session = Session;
    type OpenError = lapin::Error;

    async fn open(&self) -> Result<Session, lapin::Error> {
        Session::open(&self.shared).await
    }

    async fn consume(
        &self,
        session: &Session,
        in_flight: &TaskTracker,
        cancel: &CancellationToken,
    ) -> SessionEnd {
        session.consume(&self.shared, in_flight, cancel).await
    }

    async fn drain(&self, session: Session, in_flight: &TaskTracker) {
        session.drain(in_flight, self.drain_timeout()).await;
    }

    fn drain_timeout(&self) -> Duration {
        self.shared.settings.drain_timeout
    }

    fn opened(&self, session: &Session) {
        let settings = &self.shared.settings;
        info!(group = %settings.group, instance = %settings.instance,
            zone = settings.zone.as_deref(), broadcast = settings.broadcast,
            queues = ?session.queues(), concurrency = settings.concurrency,
            prefetch = settings.prefetch, "consuming");
    }

    fn retrying(&self, error: &lapin::Error, attempt: u32, delay: Duration) {
        warn!(%error, group = %self.shared.settings.group, attempt,
            retry_in_ms = delay.as_millis() as u64, "cannot reach rabbitmq; retrying");
        metrics::counter!("chime_consumer_reconnects_total").increment(1);
    }

    fn lost(&self, error: &str) {
        warn!(%error, group = %self.shared.settings.group, "lost rabbitmq session; reconnecting");
        metrics::counter!("chime_consumer_reconnects_total").increment(1);
    }
}

/// What the merged consumer streams yield.
enum Pulled {
    Delivery(Box<Delivery>),
    Failed(lapin::Error),
    /// The consumer of this queue ended (cancelled by the broker or the channel closed).
    Ended(String),
}

pub(super) struct Session {
    connection: Connection,
    consume_channel: Channel,
    /// The channel the cancel notices are read on, if chimed publishes them.
    _cancel_channel: Option<Channel>,
    consumers: Vec<lapin::Consumer>,
    settler: Settler,
    replies: ReplyPublisher,
    presence: DropGuard,
}

impl Session {
    pub(super) async fn open(shared: &Arc<Shared>) -> Result<Self, lapin::Error> {
        let settings: &Settings = &shared.settings;
        let properties = ConnectionProperties::default().with_connection_name(
            format!("chime-consumer/{}/{}", settings.group, settings.instance).into(),
        );
        let connection = crate::connect::connect(&settings.amqp_url, properties).await?;
        let publish_channel = connection.create_channel().await?;
        publish_channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        topology::declare_or_find(&connection, topology::Shared::Replies).await?;
        // Cancel notices first: what the stream holds is read before any task is taken.
        let cancel_channel = follow_cancels(&connection, shared).await?;
        let consume_channel = connection.create_channel().await?;
        let queues = declare_queues(&connection, &consume_channel, settings).await?;
        // Per consumer (not global: quorum queues refuse global QoS).
        consume_channel
            .basic_qos(settings.prefetch, BasicQosOptions::default())
            .await?;
        let mut consumers = Vec::with_capacity(queues.len());
        for queue in &queues {
            let consumer = consume_channel
                .basic_consume(
                    queue.as_str().into(),
                    format!("{}:{}", settings.instance, uuid::Uuid::now_v7().simple()).into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            consumers.push(consumer);
        }
        let replies = ReplyPublisher::new(
            publish_channel,
            settings.instance.clone(),
            settings.batch_replies,
            user_id::connection_user(&settings.amqp_url),
        );
        let presence = presence::start(settings, &replies);
        Ok(Self {
            connection,
            consume_channel,
            _cancel_channel: cancel_channel,
            consumers,
            settler: Settler::start(settings.prefetch),
            replies,
            presence,
        })
    }

    /// The queues this session consumes.
    pub(super) fn queues(&self) -> Vec<String> {
        self.consumers
            .iter()
            .map(|consumer| consumer.queue().to_string())
            .collect()
    }

    /// Pulls deliveries from every queue and spawns one task each. The broker's prefetch
    /// bounds how many are open at once; the handler slots in [`Shared`] bound how many
    /// handlers run.
    pub(super) async fn consume(
        &self,
        shared: &Arc<Shared>,
        in_flight: &TaskTracker,
        cancel: &CancellationToken,
    ) -> SessionEnd {
        let mut deliveries = stream::select_all(self.consumers.iter().map(pulled));
        loop {
            let next = tokio::select! {
                next = deliveries.next() => next,
                () = cancel.cancelled() => return SessionEnd::Cancelled,
            };
            match next {
                Some(Pulled::Delivery(received)) => {
                    let shared = shared.clone();
                    let replies = self.replies.clone();
                    let settler = self.settler.clone();
                    in_flight.spawn(async move {
                        delivery::process(*received, &shared, &replies, &settler).await;
                    });
                }
                Some(Pulled::Failed(error)) => return SessionEnd::Lost(error.to_string()),
                Some(Pulled::Ended(queue)) => {
                    return SessionEnd::Lost(format!("consumer of {queue} ended"));
                }
                None => return SessionEnd::Lost("no queue to consume".into()),
            }
        }
    }

    /// Stops presence and new deliveries, waits for running handlers to report and
    /// acknowledge, sends every waiting ack, then closes. Deliveries prefetched but not
    /// started are returned to their queues by the close.
    pub(super) async fn drain(self, in_flight: &TaskTracker, timeout: Duration) {
        drop(self.presence);
        for consumer in &self.consumers {
            if let Err(error) = self
                .consume_channel
                .basic_cancel(consumer.tag(), BasicCancelOptions::default())
                .await
            {
                warn!(%error, queue = %consumer.queue(), "could not cancel the consumer; closing anyway");
            }
        }
        in_flight.close();
        if tokio::time::timeout(timeout, in_flight.wait())
            .await
            .is_err()
        {
            warn!(
                timeout_ms = timeout.as_millis() as u64,
                "handlers still running at the drain timeout; their tasks will be redelivered"
            );
        }
        self.settler.flush().await;
        let _ = self
            .consume_channel
            .close(200, "consumer shutting down".into())
            .await;
        self.replies.close().await;
        let _ = self
            .connection
            .close(200, "consumer shutting down".into())
            .await;
        info!("consumer stopped");
    }
}

/// Subscribes to the cancel notices, reads what the stream holds, and follows it for the
/// rest of the session in a task of its own. Returns the notices' channel (None when
/// chimed declared no stream or the broker refused this user the stream).
async fn follow_cancels(
    connection: &Connection,
    shared: &Arc<Shared>,
) -> Result<Option<Channel>, lapin::Error> {
    let (channel, mut consumer) =
        match cancels::subscribe(connection, &shared.settings.instance).await {
            Ok(Some(subscribed)) => subscribed,
            Ok(None) => return Ok(None),
            // Refused (no read permission on the stream): only its own channel closed, and
            // the consumer works as before, without notices. A broken connection fails the
            // next step of opening the session anyway.
            Err(error) => {
                warn!(%error, queue = crate::protocol::topology::CANCEL_NOTICES,
                "cannot read the cancel notices; cancelled runs' tasks will run here");
                return Ok(None);
            }
        };
    if !cancels::catch_up(&mut consumer, &cancel_reader(shared)).await {
        warn!("the cancel notices' consumer ended while catching up");
        return Ok(Some(channel));
    }
    let shared = shared.clone();
    tokio::spawn(async move { cancels::read(consumer, cancel_reader(&shared)).await });
    Ok(Some(channel))
}

/// Where `shared`'s cancel notices go, and whose notices count.
fn cancel_reader(shared: &Shared) -> cancels::Reader<'_> {
    cancels::Reader {
        book: &shared.cancels,
        scheduler_user: shared.settings.scheduler_user.as_deref(),
    }
}

/// Declares every queue this instance consumes and returns their names: the group's work
/// queue, the zone's, and the instance's broadcast queue.
async fn declare_queues(
    connection: &Connection,
    channel: &Channel,
    settings: &Settings,
) -> Result<Vec<String>, lapin::Error> {
    topology::declare_or_find(connection, topology::Shared::Group(&settings.group)).await?;
    let mut queues = vec![topology::group_queue(&settings.group)];
    if let Some(zone) = &settings.zone {
        topology::declare_or_find(
            connection,
            topology::Shared::Zone {
                group: &settings.group,
                zone,
            },
        )
        .await?;
        queues.push(topology::zone_queue(&settings.group, zone));
    }
    if settings.broadcast {
        queues.push(
            topology::declare_instance_queue(
                connection,
                channel,
                &settings.group,
                &settings.instance,
            )
            .await?,
        );
    }
    Ok(queues)
}

/// `consumer`'s deliveries, followed by [`Pulled::Ended`] when its stream ends, so the
/// merged stream reports the end of any one queue's consumer instead of carrying on
/// without it.
fn pulled(consumer: &lapin::Consumer) -> BoxStream<'static, Pulled> {
    let queue = consumer.queue().to_string();
    consumer
        .clone()
        .map(|next| match next {
            Ok(delivery) => Pulled::Delivery(Box::new(delivery)),
            Err(error) => Pulled::Failed(error),
        })
        .chain(stream::once(async move { Pulled::Ended(queue) }))
        .boxed()
}
