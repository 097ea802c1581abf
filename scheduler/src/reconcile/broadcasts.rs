//! Settling broadcast runs: a broadcast run's ack window closed or a running instance's
//! deadline passed, and the run is decided from its instances' receipts
//! ([`crate::domain::broadcast`]) inside one store transaction on that run.

use chrono::{DateTime, Utc};
use tracing::warn;
use uuid::Uuid;

use super::report::PassReport;
use crate::domain::{JobSettings, Run, RunState, broadcast};
use crate::store::{OverdueRun, Store, StoreError};
use crate::telemetry;

/// Decides broadcast run `run_id`, whose `due_at` passed, at `now` (see
/// [`broadcast::settle`]; `unit` is the retry jitter's random draw in `[0, 1)`).
/// Returns the run when that finished its attempt (`succeeded`, `failed` or `dead`).
pub async fn settle_broadcast(
    store: &dyn Store,
    run_id: Uuid,
    now: DateTime<Utc>,
    unit: f64,
) -> Result<Option<Run>, StoreError> {
    let change = |run: &mut Run, settings: &JobSettings| {
        let due = run.due_at;
        broadcast::settle(run, settings, now, unit).is_some() || run.due_at != due
    };
    Ok(match store.update_run(run_id, &change).await? {
        Some((true, run)) if !matches!(run.state, RunState::Dispatched | RunState::Acked) => {
            Some(run)
        }
        _ => None,
    })
}

/// A reconciler pass's step for an overdue broadcast run, judged as of `now` (the
/// collector's progress): settles it ([`settle_broadcast`]), counts what that did, and
/// adds a run given up to `dead` for its dead letter.
pub(super) async fn settle_overdue(
    store: &dyn Store,
    item: OverdueRun,
    now: DateTime<Utc>,
    report: &mut PassReport,
    dead: &mut Vec<OverdueRun>,
) -> Result<(), StoreError> {
    let unit = rand::random::<f64>();
    let Some(run) = settle_broadcast(store, item.run.id, now, unit).await? else {
        return Ok(());
    };
    match run.state {
        RunState::Dead => {
            warn!(run_id = %run.id, job = %item.job.spec.name, error = ?run.error, "broadcast run given up");
            metrics::counter!(telemetry::DEAD_RUNS, "reason" => "broadcast").increment(1);
            report.killed += 1;
            dead.push(OverdueRun { run, job: item.job });
        }
        RunState::Failed => metrics::counter!(telemetry::RETRIES_SCHEDULED).increment(1),
        _ => {}
    }
    Ok(())
}
