//! Settling one consume channel's deliveries with the broker. Rejects and requeues go out
//! at once; acks are collected for a few milliseconds and sent as one `multiple` ack
//! where the tags allow it (see [`book`]). A quorum queue then applies one settle command
//! for many deliveries instead of one each: with the broker as the limit of a herd, that
//! is the broker's time given back to moving messages.
//!
//! One task per channel owns the channel's acknowledgements, so a reject is always sent
//! before any `multiple` ack that could cover its tag.

mod book;

use std::time::Instant;

use futures_util::future::join_all;
use lapin::{
    Acker,
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions},
};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use book::{AckBook, DeliveryTag, Due};

/// Hands settlements to the channel's settling task; cheap to clone.
#[derive(Clone)]
pub(super) struct Settler {
    commands: mpsc::UnboundedSender<Command>,
}

enum Command {
    Ack(DeliveryTag, Acker),
    Requeue(DeliveryTag, Acker),
    DeadLetter(DeliveryTag, Acker),
    /// Send every waiting ack now and report back.
    Flush(oneshot::Sender<()>),
}

impl Settler {
    /// Starts the settling task of a fresh channel whose consumers have `prefetch` each.
    pub(super) fn start(prefetch: u16) -> Self {
        let (commands, received) = mpsc::unbounded_channel();
        tokio::spawn(settle(received, AckBook::new(prefetch)));
        Self { commands }
    }

    /// The task is done: ack the delivery (soon, possibly together with others).
    pub(super) fn ack(&self, delivery: &Delivery) {
        self.send(Command::Ack(delivery.delivery_tag, delivery.acker.clone()));
    }

    /// Hand the delivery back to its queue, to be delivered again.
    pub(super) fn requeue(&self, delivery: &Delivery) {
        self.send(Command::Requeue(
            delivery.delivery_tag,
            delivery.acker.clone(),
        ));
    }

    /// Reject the delivery without requeueing: the queue dead-letters it.
    pub(super) fn dead_letter(&self, delivery: &Delivery) {
        self.send(Command::DeadLetter(
            delivery.delivery_tag,
            delivery.acker.clone(),
        ));
    }

    /// Sends every ack waiting so far and returns once they are handed to the channel,
    /// as before closing it.
    pub(super) async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        self.send(Command::Flush(done));
        let _ = flushed.await;
    }

    fn send(&self, command: Command) {
        // The task only stops when every handle is gone, so this cannot fail.
        let _ = self.commands.send(command);
    }
}

/// The settling task: applies commands as they come and sends the acks the book says
/// are due, until every [`Settler`] is dropped.
async fn settle(mut commands: mpsc::UnboundedReceiver<Command>, mut book: AckBook<Acker>) {
    let mut received = Vec::new();
    loop {
        let flush_at = book.next_flush();
        let flush_timer = async {
            match flush_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            count = commands.recv_many(&mut received, 1024) => {
                if count == 0 {
                    send(book.take_all()).await;
                    return;
                }
                for command in received.drain(..) {
                    apply(command, &mut book).await;
                }
            }
            () = flush_timer => {}
        }
        send(book.take_due(Instant::now())).await;
    }
}

async fn apply(command: Command, book: &mut AckBook<Acker>) {
    match command {
        Command::Ack(tag, acker) => book.ack_later(tag, acker, Instant::now()),
        Command::Requeue(tag, acker) => {
            let options = BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            };
            // Sent before the book learns of it, so no later `multiple` ack covers it.
            if !matches!(acker.nack(options).await, Ok(true)) {
                warn!(
                    delivery_tag = tag,
                    "requeue not sent; the channel is gone and the task will be redelivered"
                );
            }
            book.sent(tag);
        }
        Command::DeadLetter(tag, acker) => {
            if !matches!(
                acker.reject(BasicRejectOptions { requeue: false }).await,
                Ok(true)
            ) {
                warn!(
                    delivery_tag = tag,
                    "reject not sent; the channel is gone and the task will be redelivered"
                );
            }
            book.sent(tag);
        }
        Command::Flush(done) => {
            send(book.take_all()).await;
            let _ = done.send(());
        }
    }
}

/// Sends `due`'s acks. A channel that is gone just loses them: the broker delivers the
/// tasks again and the consumer replays their recorded outcomes.
async fn send(due: Due<Acker>) {
    if let Some((tag, acker)) = due.multiple {
        let sent = acker
            .ack(BasicAckOptions { multiple: true })
            .await
            .unwrap_or(false);
        count_ack(true, sent, tag);
    }
    let singles = due.single.into_iter().map(|(tag, acker)| async move {
        let sent = acker.ack(BasicAckOptions::default()).await.unwrap_or(false);
        count_ack(false, sent, tag);
    });
    join_all(singles).await;
}

fn count_ack(multiple: bool, sent: bool, tag: DeliveryTag) {
    if sent {
        metrics::counter!("chime_consumer_delivery_acks_total", "multiple" => multiple.to_string())
            .increment(1);
    } else {
        warn!(
            delivery_tag = tag,
            multiple,
            "delivery ack not sent; the channel is gone and its tasks will be redelivered"
        );
    }
}
