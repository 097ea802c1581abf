//! The application layer: the operations on jobs ([`Jobs`]), runs ([`Runs`],
//! [`Cancellations`]), the
//! consumers' view ([`Consumers`]) and this node's view ([`Node`]) that the edges call — the HTTP API today, and through it
//! `chimectl` and the console. Each service owns its operation from end to end (the
//! store writes, telling the timer and dispatcher, declaring queues), so a rule about it
//! (a permission, an audit entry, a quota) is written once, here. Dead-letter operations
//! follow the same shape in [`crate::dlq::DeadLetters`].
//!
//! Services speak domain types and return typed errors; they know nothing of HTTP. The
//! API maps each error to its error code once, in `api/error.rs`.

pub mod audit;
pub mod backfill;
pub mod cancel;
pub mod consumers;
pub mod failure_watch;
pub mod jobs;
pub mod node;
pub mod run_search;
pub mod run_stats;
pub mod runs;
mod stats_cache;
pub mod tokens;

pub use audit::{Audit, AuditError};
pub use backfill::Backfill;
pub use cancel::{CancelError, Cancellations, Cancelled};
pub use consumers::{Consumers, ConsumersError, ConsumersQuery};
pub use failure_watch::FailureWatch;
pub use jobs::{Jobs, JobsError};
pub use node::{ClusterStatus, Node, NodeError, NodeStatus, Readiness};
pub use runs::{Fire, Runs, RunsError};
pub use tokens::{AuthError, NewToken, Tokens, TokensError};
