//! A reply to a broadcast run, recorded as its instance's receipt. The decision is
//! [`crate::domain::broadcast`]'s; this applies it through [`Store::update_run`], which
//! locks the one run, so it is a function over the store rather than a store method.

use chrono::{DateTime, Utc};

use chime_consumer::protocol::Reply;

use super::{Store, StoreError, types::ReplyEffect};
use crate::domain::{DeliveryMode, JobSettings, Run, RunState, broadcast};

/// Applies an ack, heartbeat or result to a broadcast run as the instance's receipt, at
/// `now` (`unit`: the retry jitter's random draw in `[0, 1)`, used if a result decides a
/// retry). Also returns the run's new state when the reply decided the run.
pub async fn record_broadcast_reply(
    store: &dyn Store,
    reply: &Reply,
    now: DateTime<Utc>,
    unit: f64,
) -> Result<(ReplyEffect, Option<RunState>), StoreError> {
    let Some(run_id) = reply.task_id() else {
        return Ok((ReplyEffect::UnknownRun, None));
    };
    let change = |run: &mut Run, settings: &JobSettings| {
        if run.mode != DeliveryMode::Broadcast {
            return false;
        }
        match reply {
            Reply::Ack(ack) => broadcast::apply_ack(run, settings, ack, now),
            Reply::Heartbeat(beat) => broadcast::apply_heartbeat(run, settings, beat, now),
            Reply::Result(result) => broadcast::apply_result(run, settings, result, now, unit),
            Reply::Presence(_) | Reply::Observe(_) => false,
        }
    };
    Ok(match store.update_run(run_id, &change).await? {
        None => (ReplyEffect::UnknownRun, None),
        Some((false, _)) => (ReplyEffect::Stale, None),
        Some((true, run)) => (
            ReplyEffect::Applied,
            matches!(
                run.state,
                RunState::Succeeded | RunState::Failed | RunState::Dead
            )
            .then_some(run.state),
        ),
    })
}
