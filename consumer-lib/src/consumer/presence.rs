//! Presence: while a session is open the instance announces itself on the reply exchange
//! every [`PRESENCE_INTERVAL_MS`] — its group, zone and whether it takes broadcasts — so
//! the scheduler knows which zones and broadcast subscribers are live. The first message
//! goes out as soon as the session opens.
//!
//! A presence message that is not confirmed is only logged: the next one may get through,
//! and a broken connection is noticed (and the session rebuilt) by the consume loop.
//!
//! Metrics: `chime_consumer_presence_total{outcome="sent"|"failed"}`.

use std::time::Duration;

use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::debug;

use super::{replies::ReplyPublisher, shared::Settings};
use crate::protocol::PRESENCE_INTERVAL_MS;

/// How often presence is announced.
const INTERVAL: Duration = Duration::from_millis(PRESENCE_INTERVAL_MS);

/// Starts announcing `settings`' instance through `replies`; stops when the returned
/// guard is dropped.
pub(super) fn start(settings: &Settings, replies: &ReplyPublisher) -> DropGuard {
    let stop = CancellationToken::new();
    let guard = stop.clone().drop_guard();
    let replies = replies.clone();
    let group = settings.group.clone();
    let zone = settings.zone.clone();
    let broadcast = settings.broadcast;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            // Never let a slow confirm hold up the next announcement.
            let sent = tokio::select! {
                () = stop.cancelled() => return,
                sent = tokio::time::timeout(
                    INTERVAL,
                    replies.send_presence(&group, zone.as_deref(), broadcast),
                ) => sent,
            };
            let outcome = match sent {
                Ok(Ok(())) => "sent",
                Ok(Err(error)) => {
                    debug!(%error, %group, "presence not confirmed");
                    "failed"
                }
                Err(_) => {
                    debug!(%group, "presence not confirmed in time");
                    "failed"
                }
            };
            metrics::counter!("chime_consumer_presence_total", "outcome" => outcome).increment(1);
        }
    });
    guard
}
