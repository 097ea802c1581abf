//! The result collector: consumes consumers' acks and results from the reply queue and
//! applies them to runs.
//!
//! - Replies are applied in batches: everything the broker pushes within
//!   `collector::GATHER_FOR` of a batch's first message (up to
//!   [`MAX_BATCH_REPLIES`]) goes to the store, which applies it in a few transactions (see
//!   [`Store::record_replies`](crate::store::Store::record_replies)). A message may itself be
//!   a batch (`"type": "batch"`); it is applied or dead-lettered item by item.
//! - A reply that does not parse or is invalid is dead-lettered to `chime.replies.dlq`
//!   with its reason in the `x-chime-reject-reason` header, and counted by reason
//!   ([`reject`]); in a batch, only the bad item is, and the other items are applied. It
//!   never stops the collector.
//! - With `reply_users` set, a reply, presence message or observer registration whose
//!   validated `user_id` may not send it is dead-lettered with reason `user` and changes
//!   nothing in the store ([`auth`], rule in [`crate::domain::reply_auth`]).
//! - When the store is unavailable the collector holds the replies and retries with
//!   backoff (up to [`MAX_STORE_WAIT`]) instead of requeueing them: every return to a
//!   quorum queue counts towards its delivery limit, and a requeue loop would
//!   dead-letter good replies during a database failover.
//! - A reply the store refuses as data is dead-lettered with its message and counted
//!   like a malformed one; the rest of the batch is applied message by message.
//! - Every probe interval it drops a probe into the reply queue (from a connection of
//!   its own: RabbitMQ blocks publishing connections under a resource alarm, and the
//!   consumer's must keep draining), and notes in [`ReplyProgress`] how far through the
//!   queue it has got when the probe is applied ([`progress`]), so the reconciler does
//!   not judge an ack late while it waits here.
//!
//! Files: the service and its batching in `collector.rs`, parsing and refusing a
//! delivery in `receive.rs` (checks in `validate.rs`, dead-lettering in `reject.rs`),
//! applying a batch to the store in `apply.rs`, the progress probes in `progress.rs`.

mod apply;
mod auth;
mod collector;
mod progress;
mod receive;
mod reject;
mod validate;

pub use auth::MAX_STORE_WAIT;
pub use collector::{MAX_BATCH_REPLIES, Probes, ResultCollector};
pub use progress::ReplyProgress;
pub use receive::REPLY_REJECTED;
