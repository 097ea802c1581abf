//! The ceiling: what the broker alone moves on this machine. A plain lapin publisher with
//! publisher confirms (a window of [`IN_FLIGHT`] unconfirmed messages) and a plain lapin
//! consumer (manual acks, prefetch [`PREFETCH`]) move `n` persistent messages of the
//! task's size through a queue declared exactly like a Chime work queue, concurrently.
//!
//! The plain consumer acks each delivery ([`Acks::EachDelivery`]): that is the ceiling the
//! targets are judged against. [`Acks::Multiple`] acks every [`MULTIPLE_ACK_EVERY`]th
//! delivery with `multiple`, as the consumer library batches its acks, for a reference
//! that shows how much of Chime's ratio that trick alone buys.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures_util::{StreamExt, stream::FuturesUnordered};
use lapin::{
    BasicProperties, Channel, Connection, ConnectionProperties, PublisherConfirm,
    options::{
        BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions,
        BasicQosOptions, ConfirmSelectOptions,
    },
    types::FieldTable,
};
use serde::Serialize;

use chime_consumer::protocol::topology;

use super::{cpu_cost, process::MachineCpu, progress::Progress};

/// Prefetch of the ceiling's plain consumers (the method's "about 500"). They ack on
/// receipt, so a deeper window does not speed them up (2 000 measured the same); the
/// measured Chime consumer sizes its own (`probe.rs`).
const PREFETCH: u16 = 500;

/// Longest a lane waits for a connection to close.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Unconfirmed publishes the ceiling's publisher keeps in flight.
pub const IN_FLIGHT: usize = 1000;
/// How many deliveries one `multiple` ack settles with [`Acks::Multiple`].
pub const MULTIPLE_ACK_EVERY: usize = 50;

/// How the ceiling's consumer acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Acks {
    /// One `basic.ack` per delivery: the plain consumer.
    EachDelivery,
    /// One `basic.ack` with `multiple` per [`MULTIPLE_ACK_EVERY`] deliveries (and the rest
    /// at the end).
    Multiple,
}

impl Acks {
    /// Whether the consumer acks (through) its `seen`th delivery of `n`.
    fn acks_at(self, seen: usize, n: usize) -> bool {
        match self {
            Acks::EachDelivery => true,
            Acks::Multiple => seen.is_multiple_of(MULTIPLE_ACK_EVERY) || seen == n,
        }
    }
}

/// What the broker alone achieved.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    /// Messages moved.
    pub n: usize,
    /// Body size, bytes.
    pub body_bytes: usize,
    /// How its consumer acknowledged.
    pub acks: Acks,
    /// From the first publish to the last confirm, s.
    pub publish_s: f64,
    /// From the first publish to the last delivery, s.
    pub consume_s: f64,
    /// Where the machine's CPU went meanwhile, percent of one core by program (the
    /// broker's share here is what it needs at full speed).
    pub cpu_pct_by_program: BTreeMap<&'static str, f64>,
    /// The broker's CPU per message, µs (from its share above over `consume_s`).
    pub broker_cpu_us_per_message: Option<f64>,
}

impl Ceiling {
    /// Messages per second, end to end.
    pub fn throughput(&self) -> f64 {
        self.n as f64 / self.consume_s
    }
}

/// Moves `n` messages of `body_bytes` through a fresh work queue in the vhost at
/// `amqp_url`, its consumer acknowledging as `acks` says.
pub async fn measure(
    amqp_url: &str,
    n: usize,
    body_bytes: usize,
    acks: Acks,
) -> anyhow::Result<Ceiling> {
    let progress = Progress::new(match acks {
        Acks::EachDelivery => format!("ceiling n={n}"),
        Acks::Multiple => format!("ceiling n={n} (multiple acks)"),
    });
    let lane = Lane::open(amqp_url, "ceiling").await?;
    let mut deliveries = lane.deliveries();
    let machine_before = MachineCpu::read();
    let started = Instant::now();
    let consuming = tokio::spawn(async move {
        let mut seen = 0;
        while seen < n {
            let Some(delivery) = deliveries.next().await else {
                anyhow::bail!("the ceiling consumer stopped after {seen} messages");
            };
            let delivery = delivery?;
            seen += 1;
            if acks.acks_at(seen, n) {
                let multiple = acks == Acks::Multiple;
                delivery.ack(BasicAckOptions { multiple }).await?;
            }
        }
        Ok(started.elapsed())
    });

    let body = vec![b'x'; body_bytes];
    let mut confirms = FuturesUnordered::new();
    for i in 0..n {
        if confirms.len() >= IN_FLIGHT {
            confirm(confirms.next().await)?;
        }
        confirms.push(lane.publish(&body).await?);
        progress.show(|| format!("published {i}/{n}"));
    }
    while let Some(outcome) = confirms.next().await {
        confirm(Some(outcome))?;
    }
    let publish_s = started.elapsed().as_secs_f64();
    let consume_s = tokio::time::timeout(Duration::from_secs(600), consuming)
        .await
        .map_err(|_| anyhow::anyhow!("the ceiling consumer took over 10 minutes"))???
        .as_secs_f64();
    let cpu_pct_by_program = MachineCpu::read().since(&machine_before, consume_s);
    lane.close().await?;
    progress.say(&format!(
        "published in {publish_s:.2} s, consumed in {consume_s:.2} s"
    ));
    Ok(Ceiling {
        n,
        body_bytes,
        acks,
        publish_s,
        consume_s,
        broker_cpu_us_per_message: cpu_cost::broker_per_message(&cpu_pct_by_program, consume_s, n),
        cpu_pct_by_program,
    })
}

/// A fresh work queue with a plain publisher (confirms on) and a plain consumer (manual
/// acks, prefetch [`PREFETCH`]) on their own connections.
pub(super) struct Lane {
    publisher: Connection,
    consumer: Connection,
    channel: Channel,
    consume_channel: Channel,
    group: String,
    /// Kept until [`Lane::close`]: dropping a consumer's last handle makes lapin send a
    /// `basic.cancel` on its own, and one racing the connection's close has left
    /// `Connection::close` waiting forever.
    deliveries: lapin::Consumer,
}

impl Lane {
    /// Declares a queue named after `tag` in the vhost at `amqp_url` and starts consuming it.
    pub(super) async fn open(amqp_url: &str, tag: &str) -> anyhow::Result<Self> {
        let group = format!("{tag}-{}", uuid::Uuid::now_v7().simple());
        let publisher = Connection::connect(amqp_url, ConnectionProperties::default()).await?;
        let consumer = Connection::connect(amqp_url, ConnectionProperties::default()).await?;
        let channel = publisher.create_channel().await?;
        topology::declare_exchanges(&channel).await?;
        topology::declare_group(&publisher, &channel, &group).await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let consume_channel = consumer.create_channel().await?;
        consume_channel
            .basic_qos(PREFETCH, BasicQosOptions::default())
            .await?;
        let deliveries = consume_channel
            .basic_consume(
                topology::group_queue(&group).as_str().into(),
                tag.into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Self {
            publisher,
            consumer,
            channel,
            consume_channel,
            group,
            deliveries,
        })
    }

    /// The consumer's deliveries.
    pub(super) fn deliveries(&self) -> lapin::Consumer {
        self.deliveries.clone()
    }

    /// Publishes `body` as a persistent, mandatory task-like message; returns its confirm.
    pub(super) async fn publish(&self, body: &[u8]) -> lapin::Result<PublisherConfirm> {
        self.channel
            .basic_publish(
                topology::TASK_EXCHANGE.into(),
                self.group.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                body,
                BasicProperties::default()
                    .with_content_type("application/json".into())
                    .with_delivery_mode(2),
            )
            .await
    }

    /// Cancels the consumer, closes both connections and deletes the queue. Each close is
    /// bounded by [`CLOSE_TIMEOUT`]: it is cleanup, and the vhost goes with the stage.
    pub(super) async fn close(self) -> anyhow::Result<()> {
        let _ = tokio::time::timeout(
            CLOSE_TIMEOUT,
            self.consume_channel
                .basic_cancel(self.deliveries.tag(), BasicCancelOptions::default()),
        )
        .await;
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.consumer.close(200, "done".into())).await;
        self.channel
            .queue_delete(
                topology::group_queue(&self.group).as_str().into(),
                Default::default(),
            )
            .await?;
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.publisher.close(200, "done".into())).await;
        Ok(())
    }
}

pub(super) fn confirm(
    outcome: Option<Result<lapin::Confirmation, lapin::Error>>,
) -> anyhow::Result<()> {
    match outcome {
        Some(Ok(lapin::Confirmation::Ack(None))) => Ok(()),
        other => anyhow::bail!("the ceiling publish was not confirmed cleanly: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiple_acks_cover_every_delivery_once_and_end_at_the_last() {
        let n = 2 * MULTIPLE_ACK_EVERY + 7;
        let at: Vec<usize> = (1..=n)
            .filter(|&seen| Acks::Multiple.acks_at(seen, n))
            .collect();
        assert_eq!(at, vec![MULTIPLE_ACK_EVERY, 2 * MULTIPLE_ACK_EVERY, n]);
        assert!((1..=n).all(|seen| Acks::EachDelivery.acks_at(seen, n)));
    }
}
