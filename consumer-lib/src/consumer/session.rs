//! One connection's worth of consuming: open channels, declare topology, pull deliveries,
//! and drain on shutdown.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use lapin::{
    Channel, Connection, ConnectionProperties,
    options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions},
    types::FieldTable,
};
use tokio::sync::Semaphore;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{info, warn};

use super::{Settings, Shared, delivery, replies::ReplyPublisher};
use crate::protocol::topology;

/// Why consuming stopped.
pub(super) enum SessionEnd {
    /// Shutdown was requested.
    Cancelled,
    /// The connection or channel failed.
    Lost(String),
}

pub(super) struct Session {
    connection: Connection,
    consume_channel: Channel,
    consumer: lapin::Consumer,
    replies: ReplyPublisher,
}

impl Session {
    pub(super) async fn open(settings: &Settings) -> Result<Self, lapin::Error> {
        let properties = ConnectionProperties::default().with_connection_name(
            format!("chime-consumer/{}/{}", settings.group, settings.instance).into(),
        );
        let connection = Connection::connect(&settings.amqp_url, properties).await?;
        let publish_channel = connection.create_channel().await?;
        publish_channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        topology::declare_replies(&publish_channel).await?;
        let consume_channel = connection.create_channel().await?;
        topology::declare_group(&consume_channel, &settings.group).await?;
        consume_channel
            .basic_qos(settings.prefetch, BasicQosOptions::default())
            .await?;
        let queue = topology::group_queue(&settings.group);
        let consumer = consume_channel
            .basic_consume(
                queue.as_str().into(),
                format!("{}:{}", settings.instance, uuid::Uuid::now_v7().simple()).into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Self {
            connection,
            consume_channel,
            consumer,
            replies: ReplyPublisher::new(publish_channel, settings.instance.clone()),
        })
    }

    /// Pulls deliveries and spawns one task each, never more than the concurrency at once.
    pub(super) async fn consume(
        &self,
        shared: &Arc<Shared>,
        permits: &Arc<Semaphore>,
        in_flight: &TaskTracker,
        cancel: &CancellationToken,
    ) -> SessionEnd {
        let mut deliveries = self.consumer.clone();
        loop {
            let permit = tokio::select! {
                permit = permits.clone().acquire_owned() => permit.expect("semaphore never closes"),
                () = cancel.cancelled() => return SessionEnd::Cancelled,
            };
            let next = tokio::select! {
                next = deliveries.next() => next,
                () = cancel.cancelled() => return SessionEnd::Cancelled,
            };
            match next {
                Some(Ok(received)) => {
                    let shared = shared.clone();
                    let replies = self.replies.clone();
                    in_flight.spawn(async move {
                        delivery::process(received, &shared, &replies).await;
                        drop(permit);
                    });
                }
                Some(Err(error)) => return SessionEnd::Lost(error.to_string()),
                None => return SessionEnd::Lost("consumer stream ended".into()),
            }
        }
    }

    /// Stops new deliveries, waits for running handlers to report and acknowledge, then
    /// closes. Deliveries prefetched but not started are returned to the queue by the close.
    pub(super) async fn drain(self, in_flight: &TaskTracker, timeout: Duration) {
        if let Err(error) = self
            .consume_channel
            .basic_cancel(self.consumer.tag(), BasicCancelOptions::default())
            .await
        {
            warn!(%error, "could not cancel the consumer; closing anyway");
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
