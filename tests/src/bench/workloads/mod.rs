//! The workloads. Each builds its own stage, measures, and returns an
//! [`Outcome`](super::report::Outcome); shared accounting of expected, recorded and
//! consumed fires lives here.

pub mod failover;
pub mod herd;
pub mod idle;
pub mod import;
pub mod reconcile;
pub mod steady;

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    db::RunRecord,
    probe::{Receipt, duplicate_runs},
    report::Outcome,
    stats::Summary,
};

/// A job as the API takes it, in the bench group, with `schedule`.
pub fn bench_job(name: &str, schedule: Value) -> Value {
    json!({"app": "bench", "name": name, "schedule": schedule,
           "target": {"group": super::stage::GROUP}})
}

/// `at` rounded down to the millisecond (chimed stores milliseconds).
pub fn to_ms(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.timestamp_millis()).expect("a representable instant")
}

/// How a fire that was not recorded or not consumed by the end of a run counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    /// As an error that fails the run: the workload is sized for what the box sustains.
    Error,
    /// As the run's result: a rate search runs on past what the box sustains, and a fire
    /// still late at the end means the rate was not kept up with. Duplicates stay errors.
    Measured,
}

/// Compares what should have fired in a window with what was recorded and consumed:
/// records `expected`, `recorded`, `consumed`, and the invariants `missed_fires`,
/// `duplicate_records`, `duplicate_handler_runs` and `unconsumed_fires` (the first and
/// last as `shortfall` says). Returns how many fires were missed or not consumed.
pub fn account_fires(
    outcome: &mut Outcome,
    expected: usize,
    records: &[RunRecord],
    receipts: &[Receipt],
    window: (DateTime<Utc>, DateTime<Utc>),
    shortfall: Shortfall,
) -> usize {
    let inside = |t: DateTime<Utc>| t >= window.0 && t < window.1;
    let mut per_fire: HashMap<(Uuid, DateTime<Utc>), usize> = HashMap::new();
    for r in records.iter().filter(|r| inside(r.fire_time)) {
        *per_fire.entry((r.job_id, r.fire_time)).or_default() += 1;
    }
    let recorded = per_fire.len();
    let duplicate_records: usize = per_fire.values().map(|n| n - 1).sum();
    let window_receipts: Vec<Receipt> = receipts
        .iter()
        .copied()
        .filter(|r| inside(r.fire_time))
        .collect();
    let consumed: HashSet<(Uuid, DateTime<Utc>)> = window_receipts
        .iter()
        .map(|r| (r.job_id, r.fire_time))
        .collect();
    outcome.metric("expected_fires", expected);
    outcome.metric("recorded_fires", recorded);
    outcome.metric("consumed_fires", consumed.len());
    let missed = expected.saturating_sub(recorded);
    let unconsumed = per_fire.keys().filter(|k| !consumed.contains(k)).count();
    outcome.require("duplicate_records", duplicate_records);
    outcome.require("duplicate_handler_runs", duplicate_runs(&window_receipts));
    for (what, count) in [("missed_fires", missed), ("unconsumed_fires", unconsumed)] {
        match shortfall {
            Shortfall::Error => outcome.require(what, count),
            Shortfall::Measured => outcome.metric(what, count),
        }
    }
    missed + unconsumed
}

/// Records publish and consume lateness of `receipts` (first attempts).
pub fn lateness(outcome: &mut Outcome, receipts: &[Receipt]) -> (Option<Summary>, Option<Summary>) {
    let first: Vec<&Receipt> = receipts.iter().filter(|r| r.attempt == 1).collect();
    let publish = Summary::of(
        &first
            .iter()
            .map(|r| r.publish_lateness_ms())
            .collect::<Vec<_>>(),
    );
    let consume = Summary::of(
        &first
            .iter()
            .map(|r| r.consume_lateness_ms())
            .collect::<Vec<_>>(),
    );
    outcome.metric("publish_lateness_ms", publish);
    outcome.metric("consume_lateness_ms", consume);
    (publish, consume)
}
