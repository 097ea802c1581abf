//! Settling broadcast runs: a broadcast run's ack window closed or a running instance's
//! deadline passed, and the run is decided from its instances' receipts
//! ([`crate::domain::broadcast`]) inside one store transaction on that run.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{JobSettings, Run, RunState, broadcast};
use crate::store::{Store, StoreError};

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
