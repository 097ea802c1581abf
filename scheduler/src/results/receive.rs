//! Turning a delivery from the reply queue into what the collector applies
//! ([`Received`]): a progress probe, or the replies of a message (one reply or a batch)
//! that parse and pass [`super::validate`]. What is refused is dead-lettered with its
//! reason ([`super::reject`]) and noted on its run's history (event [`REPLY_REJECTED`]),
//! except a reply refused for its publisher ([`super::auth`]): that one changes nothing
//! in the store.

use chrono::{DateTime, Utc};
use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions},
};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use chime_consumer::protocol::{Reply, topology};

use super::{
    auth::{ReplyAuth, Verdict},
    progress,
    reject::{RejectKind, Rejects},
    validate,
};
use crate::store::Store;

/// The history event of a reply the collector refused.
pub const REPLY_REJECTED: &str = "reply_rejected";

/// A reply message, parsed: its delivery and the replies it carries, in order, or the
/// send time of a progress probe.
pub(super) struct Received {
    pub(super) delivery: Delivery,
    pub(super) replies: Vec<Reply>,
    pub(super) probe: Option<DateTime<Utc>>,
}

/// Parses a delivery into its replies, ready for the store. A message that is not one
/// reply or a batch is dead-lettered whole; a bad item of a batch (one that does not
/// parse, speaks another version or names something invalid) alone, with its reason.
/// With `auth`, each reply must also come from a user allowed for it (a message whose
/// publisher cannot be checked because the store stays unavailable is requeued whole).
/// `None` when nothing in it is left to apply (the delivery is settled then).
pub(super) async fn receive(
    delivery: Delivery,
    rejects: &Rejects,
    store: &dyn Store,
    auth: Option<&ReplyAuth>,
    cancel: &CancellationToken,
) -> Option<Received> {
    match progress::Probe::parse(&delivery.properties, &delivery.data) {
        Some(Ok(probe)) => {
            return Some(Received {
                delivery,
                replies: Vec::new(),
                probe: Some(probe.sent_at),
            });
        }
        Some(Err(error)) => {
            warn!(%error, queue = topology::REPLY_QUEUE, "dead-lettering a malformed probe");
            rejects
                .message(&delivery, RejectKind::Malformed, &error.to_string())
                .await;
            return None;
        }
        None => {}
    }
    let items = match Reply::items_from_slice(&delivery.data) {
        Ok(items) => items,
        Err(error) => {
            warn!(%error, queue = topology::REPLY_QUEUE, "dead-lettering a malformed reply batch");
            let kind = RejectKind::of(&error);
            rejects.message(&delivery, kind, &error.to_string()).await;
            note_rejected(store, &delivery.data, &error.to_string()).await;
            return None;
        }
    };
    let now = chrono::Utc::now();
    let user = delivery.properties.user_id().as_ref().map(|u| u.as_str());
    let mut replies = Vec::new();
    let mut refused = Vec::new();
    for item in items {
        match item.reply {
            Ok(mut reply) => match validate::admit(&mut reply, now) {
                Ok(()) => match auth {
                    None => replies.push(reply),
                    Some(auth) => match auth.judge(&reply, user, cancel).await {
                        Verdict::Allowed => replies.push(reply),
                        Verdict::Refused(refusal) => {
                            warn!(task_id = ?reply.task_id(), user, reason = %refusal,
                                "dead-lettering a reply from a user not allowed to send it");
                            refused.push((item.body, RejectKind::User, refusal.to_string()));
                        }
                        Verdict::Unverified => {
                            let _ = delivery
                                .nack(BasicNackOptions {
                                    requeue: true,
                                    ..BasicNackOptions::default()
                                })
                                .await;
                            return None;
                        }
                    },
                },
                Err(reason) => refused.push((item.body, RejectKind::Invalid, reason)),
            },
            Err(error) => {
                warn!(%error, queue = topology::REPLY_QUEUE, "dead-lettering a malformed reply");
                refused.push((item.body, RejectKind::of(&error), error.to_string()));
            }
        }
    }
    if replies.is_empty() {
        // Nothing to apply: one reason stands for the message (its only item, or the
        // first refused one of a batch).
        if let [(body, kind, reason)] = refused.as_slice()
            && *body == delivery.data
        {
            rejects.message(&delivery, *kind, reason).await;
            if *kind != RejectKind::User {
                note_rejected(store, body, reason).await;
            }
            return None;
        }
    }
    let mut all_published = true;
    for (body, kind, reason) in &refused {
        all_published &= rejects
            .item(body, &delivery.properties, *kind, reason)
            .await;
        if *kind != RejectKind::User {
            note_rejected(store, body, reason).await;
        }
    }
    if replies.is_empty() {
        // Settled here; a batch whose refused items could not be published goes to
        // the broker's dead-lettering whole rather than being lost.
        let _ = if all_published {
            delivery.ack(BasicAckOptions::default()).await
        } else {
            delivery
                .reject(lapin::options::BasicRejectOptions { requeue: false })
                .await
        };
        return None;
    }
    Some(Received {
        delivery,
        replies,
        probe: None,
    })
}

/// Notes a refused reply on its run's history (event `reply_rejected`, with the
/// reason), if its `task_id` is readable and the run exists. Best effort: a store
/// failure is logged, never retried.
async fn note_rejected(store: &dyn Store, body: &[u8], reason: &str) {
    #[derive(serde::Deserialize)]
    struct About {
        task_id: Option<uuid::Uuid>,
        attempt: Option<u32>,
        consumer: Option<String>,
    }
    // Fields not named are skipped, which has no depth limit.
    let Ok(About {
        task_id: Some(task_id),
        attempt,
        consumer,
    }) = serde_json::from_slice::<About>(body)
    else {
        return;
    };
    let record = chime_consumer::protocol::AttemptRecord {
        attempt: attempt.unwrap_or(0),
        event: REPLY_REJECTED.into(),
        at: chrono::Utc::now(),
        consumer: consumer.filter(|c| topology::is_valid_instance(c)),
        error: Some(reason.chars().take(1024).collect()),
        retry_at: None,
    };
    if let Err(error) = store.note_on_run(task_id, &record).await {
        warn!(%error, %task_id, "cannot note a refused reply on its run");
    }
}
