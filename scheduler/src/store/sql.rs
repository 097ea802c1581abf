//! SQL fragments both backends share, as macros so they can be `concat!`ed into
//! `&'static str` statements: the column lists in one order, and the run predicates that
//! must match the partial indexes verbatim.

/// The job columns both backends read and write, in one order.
macro_rules! job_columns {
    () => {
        "id, app, name, settings, paused, version, next_fire_at, created_at, updated_at"
    };
}

/// The job columns both backends read: [`job_columns`] and the ones only the store
/// writes after creation (`paused_reason`: a new job has none).
macro_rules! job_read_columns {
    () => {
        concat!(job_columns!(), ", paused_reason")
    };
}

/// The run columns both backends read and write, in one order.
macro_rules! run_columns {
    () => {
        "id, job_id, fire_time, shard, shard_total, attempt, state, trigger, payload, created_at, \
         dispatched_at, acked_at, finished_at, consumer, output, error, fired_by, ack_timeout_ms, \
         run_timeout_ms, due_at, history, progress, heartbeat_at, mode, zone, instances, overlap, \
         waiting_for, cancelled_by"
    };
}

/// The runs retention may delete (given a `finished_at` bound): `succeeded`,
/// `cancelled`, or `dead` with no dead letter pending. The same predicate as the
/// `runs_finished` partial index (PostgreSQL migration 0015, SQLite 0014; first 0005),
/// verbatim, so both backends read through it.
macro_rules! finished_runs {
    () => {
        "state IN ('succeeded', 'dead', 'cancelled') AND due_at IS NULL"
    };
}

/// Runs not finished yet: recorded, in flight, or waiting for a retry.
macro_rules! unfinished_runs {
    () => {
        "state IN ('scheduled', 'dispatched', 'acked', 'failed')"
    };
}

/// The runs a fire of an overlap-`forbid` or `buffer_one` job waits for: unfinished runs
/// recorded under either. The same predicate as the `runs_unfinished` partial index
/// (PostgreSQL migration 0018, SQLite 0017), verbatim, so both backends read through it.
macro_rules! forbidding_runs {
    () => {
        concat!(
            "overlap IN ('forbid', 'buffer_one') AND ",
            unfinished_runs!()
        )
    };
}

/// Whether a run read by [`forbidding_runs`] is a held `buffer_one` fire.
macro_rules! held_run {
    () => {
        "waiting_for = 'previous'"
    };
}

/// The lateness histogram bucket ([`crate::domain::run_stats::lateness_bucket`]) of a run
/// as a SQL `CASE`, given each backend's expression of its lateness in ms: NULL for runs
/// not measured (a later attempt, or never confirmed by the broker), else the first
/// bucket whose upper edge holds the lateness. Built from
/// [`crate::domain::run_stats::LATENESS_BOUNDS_MS`], so the stores and the percentiles
/// agree on the edges.
pub(super) fn lateness_bucket_case(lateness_ms: &str) -> String {
    use crate::domain::run_stats::LATENESS_BOUNDS_MS;
    let mut case = String::from("CASE WHEN attempt <> 1 OR dispatched_at IS NULL THEN NULL");
    for (bucket, edge) in LATENESS_BOUNDS_MS.iter().enumerate() {
        case.push_str(&format!(" WHEN {lateness_ms} <= {edge} THEN {bucket}"));
    }
    case.push_str(&format!(" ELSE {} END", LATENESS_BOUNDS_MS.len()));
    case
}
