//! The reconciler: makes the delivery promise hold. Every pass reads the runs past their
//! `due_at` (through the `runs_due` index, so the cost follows the overdue runs, not the
//! table) of the shards this node holds, and for each:
//!
//! - `scheduled` longer than `republish_after` (publish failed, or the node stopped
//!   between commit and confirm): publish again, same attempt. On start and on gaining
//!   shards every `scheduled` run is taken at once, including fires the previous owner
//!   armed ahead of their time ([`crate::timer::TimerSettings::arming_horizon`]; the dispatcher holds
//!   those until then);
//! - `dispatched` past the ack timeout, or `acked` past the run timeout (heartbeats move
//!   it): publish again as attempt + 1, or give it up (`dead`) when attempts ran out —
//!   except a `dispatched` run whose work queue has no consumer ([`consumers`]): its
//!   task still waits in the queue, so its ack deadline moves on by another
//!   `ack_timeout` on the same attempt and it shows `waiting_for: consumer`;
//! - `failed` whose backoff elapsed: publish the next attempt;
//! - `dead` with its dead letter pending: publish the dead letter (run, job, reason,
//!   history) to the group's dead-letter queue, confirmed, then note it;
//! - a broadcast run past its ack window or an instance's deadline: decided from every
//!   instance's receipt ([`crate::domain::broadcast::settle`]).
//!
//! Ack and run deadlines are judged only up to where the result collector has got
//! through the reply queue ([`crate::results::ReplyProgress`]): a deadline that passed while its
//! answer may still be queued waits, so a collector that falls behind does not turn
//! into a duplicate of every task.
//!
//! Every transition is a conditional update on the run's state and attempt, so a reply
//! arriving meanwhile wins and nothing is acted on twice. In a cluster it works only on
//! the shards this node holds; when this node gains shards it passes over them at once.
//!
//! Metrics: `chime_republishes_total{reason}`, `chime_retries_total`,
//! `chime_dead_runs_total{reason}`, `chime_dead_letters_published_total`,
//! `chime_republishes_withheld_total{reason}`, `chime_group_without_consumer{group,queue}`.
//!
//! Files: [`Reconciler`] and its pass in `reconciler.rs`; [`ReconcileSettings`] and what
//! each kind of pass counts as overdue in `settings.rs`; [`PassReport`] in `report.rs`;
//! the steps a pass takes in `attempts.rs` (next attempt or give up), [`broadcasts`],
//! `takeover.rs` (the wait for the previous owner's acks), `missed.rs` (misfires found
//! on takeover), `dead_letters.rs` and [`consumers`] (queues without a consumer).

mod attempts;
pub mod broadcasts;
pub mod consumers;
mod dead_letters;
mod missed;
mod reconciler;
mod report;
mod settings;
mod takeover;

pub use reconciler::Reconciler;
pub use report::PassReport;
pub use settings::ReconcileSettings;
