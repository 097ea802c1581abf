//! Cluster scenarios: several real `chimed` processes over one PostgreSQL and one
//! RabbitMQ, with nodes killed, frozen, restarted, added and removed under load, and the
//! database's connections cut. Every scenario ends with [`Cluster::verify`]: each
//! expected (job, fire time) recorded once and handled once, within the failover bound.
//!
//! The scenarios run one at a time (each starts three nodes; in parallel they would only
//! measure the machine).

mod failover;
mod membership;
mod poisoned;
mod policies;

use std::time::Duration;

use chime_tests::cluster::{LEASE_TTL_S, RENEW_S};
use tokio::sync::{Mutex, MutexGuard};

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// Serialises the scenarios of this binary.
pub async fn exclusive() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

/// The documented failover bound for the test's lease timing: a dead node's leases
/// expire after the TTL, a survivor notices within one renew interval, and slack covers
/// a node frozen inside a fire transaction (its locks last until PostgreSQL's 2 s idle
/// limit ends it) and firing the backlog on a loaded 2-core machine.
pub fn failover_bound() -> Duration {
    Duration::from_secs(LEASE_TTL_S + RENEW_S) + Duration::from_secs(3)
}

/// Lateness allowed where no node dies: hand-overs are immediate, and the slack covers
/// firing the handed-over backlog on a loaded 2-core machine (CI, running the other test
/// binaries alongside, once measured 3.55 s in a rolling restart).
pub fn handover_bound() -> Duration {
    Duration::from_secs(5)
}
