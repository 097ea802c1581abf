//! How far the result collector has got through the reply queue, for the reconciler.
//!
//! An ack or heartbeat is judged late by the clock, but it may have arrived on time and
//! still wait in the reply queue behind thousands of others when the collector falls
//! behind (a database slower than the fire rate). Publishing the run again then makes a
//! duplicate for every run, and more work for a store that is already behind.
//!
//! So the collector drops a probe into the reply queue every `interval`, stamped with
//! this node's clock. The queue is first in, first out, and the collector applies its
//! deliveries in order, so once a probe stamped `t` is applied, every reply published
//! before `t` has been taken off the queue: applied by this node, or handed to another
//! node's collector when several share the queue (which may still hold up to its
//! prefetch, 250, unapplied). The reconciler judges ack and run deadlines up to that
//! `t`, not up to now: a deadline that passed while its reply may still be queued waits.
//!
//! The price is a deadline judged up to one probe interval (the reconcile interval) plus
//! the queue's delay late. If no newer probe is applied for [`STALE_AFTER`] (the
//! collector stuck, or probes not getting through), deadlines are judged by the clock
//! again, so a lost task is never held up for good. Nodes' clocks are taken to agree
//! within a second, as elsewhere in the cluster.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use chime_consumer::protocol::topology;
use chrono::{DateTime, Utc};
use lapin::{BasicProperties, Channel, options::BasicPublishOptions};
use serde::{Deserialize, Serialize};
use tokio::{
    sync::Notify,
    time::{Instant, MissedTickBehavior},
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{broker, telemetry};

/// The AMQP `type` of a probe; consumers never send it.
pub const PROBE_TYPE: &str = "chime.reply_probe";
/// After this long without a newer probe applied, deadlines are judged by the clock.
pub const STALE_AFTER: Duration = Duration::from_secs(5 * 60);

/// A probe's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The node that sent it.
    pub node: String,
    /// When it was published, by the sender's clock.
    pub sent_at: DateTime<Utc>,
}

impl Probe {
    /// The body and properties of a probe from `node` sent now.
    pub fn message(node: &str) -> (Vec<u8>, BasicProperties) {
        let probe = Probe {
            node: node.to_owned(),
            sent_at: Utc::now(),
        };
        let body = serde_json::to_vec(&probe).expect("a probe serialises");
        (
            body,
            BasicProperties::default().with_type(PROBE_TYPE.into()),
        )
    }

    /// `Some` if `properties` mark a probe: its parsed body, or why it does not parse.
    pub fn parse(
        properties: &BasicProperties,
        body: &[u8],
    ) -> Option<Result<Self, serde_json::Error>> {
        (properties.kind().as_ref().map(|kind| kind.as_str()) == Some(PROBE_TYPE))
            .then(|| serde_json::from_slice(body))
    }
}

/// Publishes a probe stamped by `node` into the reply queue every `interval` until
/// `cancel`, over a connection of its own, reconnecting after failures. Probes are not
/// confirmed: a lost one only delays the next judgement of deadlines.
pub async fn send_probes(
    amqp_url: &str,
    node: &str,
    interval: Duration,
    cancel: &CancellationToken,
) {
    while let Some(connection) =
        broker::connect_with_backoff(amqp_url, "reply-probes", cancel).await
    {
        let error = match open_channel(&connection).await {
            Ok(channel) => {
                let error = probe_until_error(&channel, node, interval, cancel).await;
                // Closed before the connection: a channel dropped open is closed by lapin
                // in the background, which fails against a closing connection and logs
                // an error.
                let _ = channel.close(200, "chimed stopping".into()).await;
                error
            }
            Err(error) => Some(error),
        };
        let _ = connection.close(200, "chimed stopping".into()).await;
        let Some(error) = error else { return };
        debug!(%error, "lost the reply-probe connection; reconnecting");
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = cancel.cancelled() => return,
        }
    }
}

/// A channel to publish probes on. Declares the reply exchange and queue first: the
/// collector declares them too, on a connection of its own, and on a fresh broker this
/// one may be first (a probe into a missing exchange closes the channel).
async fn open_channel(connection: &lapin::Connection) -> Result<Channel, lapin::Error> {
    let channel = connection.create_channel().await?;
    topology::declare_replies(connection, &channel).await?;
    Ok(channel)
}

/// Probes every `interval` until `cancel` (None) or a publish fails.
async fn probe_until_error(
    channel: &Channel,
    node: &str,
    interval: Duration,
    cancel: &CancellationToken,
) -> Option<lapin::Error> {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = cancel.cancelled() => return None,
        }
        let (body, properties) = Probe::message(node);
        if let Err(error) = channel
            .basic_publish(
                topology::REPLY_EXCHANGE.into(),
                topology::REPLY_ROUTING_KEY.into(),
                BasicPublishOptions::default(),
                &body,
                properties,
            )
            .await
        {
            return Some(error);
        }
    }
}

/// The collector's progress through the reply queue, shared with the reconciler.
#[derive(Debug, Clone)]
pub struct ReplyProgress {
    inner: Arc<Mutex<Applied>>,
    /// Woken when a probe is applied.
    probe_applied: Arc<Notify>,
}

/// The newest probe applied, and when.
#[derive(Debug)]
struct Applied {
    newest: Option<DateTime<Utc>>,
    /// When the newest probe was applied (or the progress was created).
    at: Instant,
    /// Whether deadlines are judged by the clock because no probe came back.
    stale: bool,
}

impl Default for ReplyProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplyProgress {
    /// No probe applied yet: deadlines wait for the first one (or [`STALE_AFTER`]).
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Applied {
                newest: None,
                at: Instant::now(),
                stale: false,
            })),
            probe_applied: Arc::new(Notify::new()),
        }
    }

    /// Waits until the first probe is applied: until then no deadline is judged.
    pub async fn first_probe(&self) {
        loop {
            let applied = self.probe_applied.notified();
            if self.lock().newest.is_some() {
                return;
            }
            applied.await;
        }
    }

    /// Every reply published before `sent_at` has been applied.
    pub fn applied(&self, sent_at: DateTime<Utc>) {
        let now = Utc::now();
        let mut applied = self.lock();
        // An older probe (one replayed from the dead-letter queue, or a clock stepped
        // back) is no sign of progress.
        if applied.newest.is_some_and(|newest| sent_at <= newest) {
            return;
        }
        applied.newest = Some(sent_at);
        applied.at = Instant::now();
        if applied.stale {
            applied.stale = false;
            info!("reply probes come back again; ack and run deadlines wait for the collector");
        }
        drop(applied);
        self.probe_applied.notify_waiters();
        let lag = (now - sent_at).to_std().unwrap_or_default();
        metrics::gauge!(telemetry::REPLY_LAG).set(lag.as_secs_f64());
    }

    /// The instant up to which ack and run deadlines may be judged at `now`: replies
    /// published before it have been applied.
    pub fn judged_until(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        let mut applied = self.lock();
        let instant = Instant::now();
        if applied.is_stale(instant) && !applied.stale {
            applied.stale = true;
            warn!(
                stale_after_s = STALE_AFTER.as_secs(),
                "no reply probe came back; judging ack and run deadlines by the clock"
            );
        }
        applied.judged_until(now, instant)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Applied> {
        // Two plain values: a panic elsewhere cannot leave them inconsistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Applied {
    fn is_stale(&self, instant: Instant) -> bool {
        instant.duration_since(self.at) >= STALE_AFTER
    }

    fn judged_until(&self, now: DateTime<Utc>, instant: Instant) -> DateTime<Utc> {
        if self.is_stale(instant) {
            return now;
        }
        match self.newest {
            // Another node's clock may run ahead of ours.
            Some(newest) => newest.min(now),
            // Nothing known yet: judge nothing.
            None => DateTime::<Utc>::MIN_UTC,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn applied(newest: Option<DateTime<Utc>>, at: Instant) -> Applied {
        Applied {
            newest,
            at,
            stale: false,
        }
    }

    #[test]
    fn deadlines_are_judged_up_to_the_newest_probe_applied() {
        let start = Instant::now();
        let progress = applied(Some(at(10)), start);
        assert_eq!(progress.judged_until(at(40), start), at(10));
    }

    #[test]
    fn a_probe_stamped_ahead_of_this_clock_does_not_judge_the_future() {
        let start = Instant::now();
        let progress = applied(Some(at(50)), start);
        assert_eq!(progress.judged_until(at(40), start), at(40));
    }

    #[test]
    fn before_the_first_probe_nothing_is_judged() {
        let start = Instant::now();
        let progress = applied(None, start);
        assert!(progress.judged_until(at(40), start + Duration::from_secs(1)) < at(-1_000_000));
    }

    #[test]
    fn without_probes_for_long_the_clock_judges() {
        let start = Instant::now();
        assert_eq!(
            applied(Some(at(10)), start).judged_until(at(400), start + STALE_AFTER),
            at(400)
        );
        assert_eq!(
            applied(None, start).judged_until(at(400), start + STALE_AFTER),
            at(400)
        );
    }

    #[test]
    fn an_older_probe_does_not_move_progress_back() {
        let progress = ReplyProgress::new();
        progress.applied(at(20));
        progress.applied(at(15));
        assert_eq!(progress.judged_until(at(30)), at(20));
    }

    #[tokio::test]
    async fn the_first_probe_wakes_its_waiters() {
        let progress = ReplyProgress::new();
        let waiting = tokio::spawn({
            let progress = progress.clone();
            async move { progress.first_probe().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        progress.applied(at(5));
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the probe")
            .unwrap();
        // Once one is applied, it returns at once.
        tokio::time::timeout(Duration::from_secs(5), progress.first_probe())
            .await
            .expect("already applied");
    }

    #[test]
    fn probes_round_trip_and_other_messages_are_not_probes() {
        let (body, properties) = Probe::message("node-a");
        let probe = Probe::parse(&properties, &body).unwrap().unwrap();
        assert_eq!(probe.node, "node-a");
        assert!(Probe::parse(&BasicProperties::default(), &body).is_none());
        assert!(Probe::parse(&properties, b"{").unwrap().is_err());
    }
}
