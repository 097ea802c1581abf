//! Replies to broadcast runs, recorded as their instances' receipts inside the reply
//! round that meets them. The decision is [`crate::domain::broadcast`]'s; this file
//! picks the replies out of a round and applies them to a run read under the round's
//! lock, without I/O, so both backends share it: each only reads the run and writes it
//! back.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use chime_consumer::protocol::Reply;

use super::{Store, StoreError, types::Jitter, types::ReplyApplied, types::ReplyEffect};
use crate::domain::{DeliveryMode, JobSettings, Run, RunState, broadcast};

/// Takes out of a round's `effects` the replies the round left to broadcast runs
/// (effect [`ReplyEffect::Broadcast`]), grouped by run in run order and, per run, in
/// batch order — the order they apply in.
pub(crate) fn take_receipts(
    batch: &[&Reply],
    effects: &mut Vec<(usize, ReplyApplied)>,
) -> Vec<(Uuid, Vec<usize>)> {
    let mut receipts: Vec<(Uuid, usize)> = Vec::new();
    effects.retain(|&(index, (effect, _))| {
        let task = batch[index].task_id();
        match task {
            Some(task) if effect == ReplyEffect::Broadcast => {
                receipts.push((task, index));
                false
            }
            _ => true,
        }
    });
    receipts.sort_unstable();
    let mut groups: Vec<(Uuid, Vec<usize>)> = Vec::new();
    for (task, index) in receipts {
        match groups.last_mut() {
            Some((last, indices)) if *last == task => indices.push(index),
            _ => groups.push((task, vec![index])),
        }
    }
    groups
}

/// Applies replies `indices` of `batch`, all about one run, as its instances' receipts
/// at `now`, to the run and its job's settings as `found` in the round (`None`: no such
/// run or job). `jitter` draws a retry's jitter if a result decides one. Returns what
/// each reply did, and the run to write back if they changed it.
pub(crate) fn decide_receipts(
    found: Option<(Run, JobSettings)>,
    batch: &[&Reply],
    indices: &[usize],
    now: DateTime<Utc>,
    jitter: &Jitter<'_>,
) -> (Vec<(usize, ReplyApplied)>, Option<Run>) {
    let Some((mut run, settings)) = found else {
        let unknown = indices
            .iter()
            .map(|&index| (index, (ReplyEffect::UnknownRun, None)))
            .collect();
        return (unknown, None);
    };
    let mut changed = false;
    let effects = indices
        .iter()
        .map(|&index| {
            let applied = if receipt(&mut run, &settings, batch[index], now, jitter) {
                changed = true;
                (ReplyEffect::Applied, decided(&run))
            } else {
                (ReplyEffect::Stale, None)
            };
            (index, applied)
        })
        .collect();
    (effects, changed.then_some(run))
}

/// Applies one ack, heartbeat or result to broadcast `run`; false if it changes nothing.
fn receipt(
    run: &mut Run,
    settings: &JobSettings,
    reply: &Reply,
    now: DateTime<Utc>,
    jitter: &Jitter<'_>,
) -> bool {
    if run.mode != DeliveryMode::Broadcast {
        return false;
    }
    match reply {
        Reply::Ack(ack) => broadcast::apply_ack(run, settings, ack, now),
        Reply::Heartbeat(beat) => broadcast::apply_heartbeat(run, settings, beat, now),
        Reply::Result(result) => broadcast::apply_result(run, settings, result, now, jitter()),
        Reply::Presence(_) | Reply::Observe(_) => false,
    }
}

/// The run's new state when a receipt decided the run.
fn decided(run: &Run) -> Option<RunState> {
    matches!(
        run.state,
        RunState::Succeeded | RunState::Failed | RunState::Dead
    )
    .then_some(run.state)
}

/// Applies an ack, heartbeat or result to a broadcast run as the instance's receipt, at
/// `now` (`unit`: the retry jitter's random draw in `[0, 1)`, used if a result decides a
/// retry), in a transaction of its own. Also returns the run's new state when the reply
/// decided the run.
pub async fn record_broadcast_reply(
    store: &dyn Store,
    reply: &Reply,
    now: DateTime<Utc>,
    unit: f64,
) -> Result<(ReplyEffect, Option<RunState>), StoreError> {
    let Some(run_id) = reply.task_id() else {
        return Ok((ReplyEffect::UnknownRun, None));
    };
    let jitter = move || unit;
    let change =
        |run: &mut Run, settings: &JobSettings| receipt(run, settings, reply, now, &jitter);
    Ok(match store.update_run(run_id, &change).await? {
        None => (ReplyEffect::UnknownRun, None),
        Some((false, _)) => (ReplyEffect::Stale, None),
        Some((true, run)) => (ReplyEffect::Applied, decided(&run)),
    })
}
