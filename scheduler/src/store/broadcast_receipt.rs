//! Replies to broadcast runs, recorded as their instances' receipts inside the reply
//! round that meets them. The decision is [`crate::domain::broadcast`]'s; this file
//! picks the replies out of a round and applies them to a run read under the round's
//! lock, without I/O, so both backends share it: each only reads the run and writes it
//! back.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use chime_consumer::protocol::Reply;

use super::types::{Jitter, ReplyApplied, ReplyEffect};
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

#[cfg(test)]
mod tests {
    use chime_consumer::protocol::AckMessage;

    use super::*;
    use crate::domain::RunTrigger;

    fn ack(task: u128, instance: &str) -> Reply {
        Reply::Ack(AckMessage {
            v: 1,
            task_id: Uuid::from_u128(task),
            attempt: 1,
            consumer: instance.into(),
            acked_at: Utc::now(),
        })
    }

    #[test]
    fn receipts_are_taken_by_run_in_batch_order() {
        let replies = [ack(2, "a"), ack(1, "a"), ack(2, "b"), ack(3, "a")];
        let batch: Vec<&Reply> = replies.iter().collect();
        let mut effects = vec![
            (3, (ReplyEffect::Applied, None)),
            (2, (ReplyEffect::Broadcast, None)),
            (1, (ReplyEffect::Broadcast, None)),
            (0, (ReplyEffect::Broadcast, None)),
        ];
        let receipts = take_receipts(&batch, &mut effects);
        assert_eq!(
            receipts,
            vec![
                (Uuid::from_u128(1), vec![1]),
                (Uuid::from_u128(2), vec![0, 2])
            ]
        );
        assert_eq!(effects, vec![(3, (ReplyEffect::Applied, None))]);
    }

    #[test]
    fn receipts_apply_in_order_and_the_run_is_written_once() {
        let settings = JobSettings::every_second(DeliveryMode::Broadcast, 3);
        let now = Utc::now();
        let mut run = Run::new(
            Uuid::from_u128(7),
            now,
            RunTrigger::Schedule,
            serde_json::Value::Null,
            now,
        )
        .item(DeliveryMode::Broadcast, 0, 1, None);
        run.state = RunState::Dispatched;
        let task = run.id.as_u128();
        let replies = [ack(task, "a"), ack(task, "a"), ack(task, "b")];
        let batch: Vec<&Reply> = replies.iter().collect();
        let jitter = || 0.5;
        let (effects, write) =
            decide_receipts(Some((run, settings)), &batch, &[0, 1, 2], now, &jitter);
        assert_eq!(
            effects,
            vec![
                (0, (ReplyEffect::Applied, None)),
                (1, (ReplyEffect::Stale, None)),
                (2, (ReplyEffect::Applied, None)),
            ]
        );
        assert_eq!(write.expect("changed").instances.len(), 2);

        let (effects, write) = decide_receipts(None, &batch, &[0], now, &jitter);
        assert_eq!(effects, vec![(0, (ReplyEffect::UnknownRun, None))]);
        assert!(write.is_none());
    }
}
