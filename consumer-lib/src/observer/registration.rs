//! Registration: an observer announces its name and patterns on the reply exchange when
//! its session opens and every [`OBSERVE_INTERVAL_MS`] after, because the scheduler
//! publishes a copy only for tasks some registered pattern matches. The first
//! announcement must be confirmed before the session consumes; a later one that fails is
//! only logged (the pattern stays registered for [`OBSERVER_TTL_MS`](crate::protocol::OBSERVER_TTL_MS)).
//!
//! Metrics: `chime_observer_registrations_total{observer, outcome="sent"|"failed"}`.

use std::{sync::Arc, time::Duration};

use lapin::{Connection, options::ConfirmSelectOptions};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::warn;

use super::settings::Settings;
use crate::{
    consumer::replies::{ReplyError, ReplyPublisher},
    protocol::{OBSERVE_INTERVAL_MS, topology},
};

/// How often the registration is repeated.
const INTERVAL: Duration = Duration::from_millis(OBSERVE_INTERVAL_MS);

/// Why the first registration failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum RegistrationError {
    /// The channel could not be opened or the reply queue declared.
    #[error("rabbitmq error: {0}")]
    Amqp(#[from] lapin::Error),
    /// The broker did not take the announcement.
    #[error("registration not confirmed: {0}")]
    Reply(#[from] ReplyError),
}

/// Announces `settings`' patterns once (confirmed), then again every [`INTERVAL`] until
/// the returned guard is dropped.
pub(super) async fn register(
    connection: &Connection,
    settings: &Arc<Settings>,
) -> Result<DropGuard, RegistrationError> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    topology::declare_or_find(connection, topology::Shared::Replies).await?;
    // One registration at a time: nothing to batch.
    let replies = ReplyPublisher::new(
        channel,
        settings.name.clone(),
        false,
        crate::protocol::user_id::connection_user(&settings.amqp_url),
    );
    announce(&replies, settings).await?;
    let stop = CancellationToken::new();
    let guard = stop.clone().drop_guard();
    let settings = settings.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(INTERVAL) => {}
            }
            if let Err(error) = announce(&replies, &settings).await {
                warn!(%error, observer = %settings.name, "observer registration not confirmed");
            }
        }
    });
    Ok(guard)
}

async fn announce(replies: &ReplyPublisher, settings: &Settings) -> Result<(), ReplyError> {
    let sent = replies
        .send_observe(&settings.name, &settings.patterns)
        .await;
    let outcome = if sent.is_ok() { "sent" } else { "failed" };
    metrics::counter!("chime_observer_registrations_total",
        "observer" => settings.name.clone(), "outcome" => outcome)
    .increment(1);
    sent
}
