//! How a batch of replies is applied, decided without I/O so both stores share it.
//!
//! A batch is split into [`rounds`]: round k holds the k-th step about each task (plus,
//! in round 0, the replies about no task), ordered by task. A step is one reply, or an
//! ack together with the success that follows it (the pair a quick handler's consumer
//! sends, often in one message). Replies about different tasks commute and replies about
//! one task keep their order, so applying the rounds one after the other is applying the
//! batch in order.
//!
//! Within a round each run is written at most once, so every reply can be decided from
//! the run as it was when the round began ([`RunFacts`], read once for the whole round).
//! Acks that apply and results that succeed, the bulk of the traffic, are then written
//! with one set-based statement each per round ([`RoundPlan`]); an ack paired with its
//! success is written by the success's statement, so the run gets one new row version
//! instead of two. The rarer replies (heartbeats, failures, presence, registrations) are
//! written one by one.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use chime_consumer::protocol::{
    AckMessage, DeliveryMode, HeartbeatMessage, ObserveMessage, PresenceMessage, Reply,
    ResultMessage, TaskOutcome,
};

use crate::{
    domain::{
        JobSettings, RunState,
        retry::{ResultVerdict, after_result, after_success},
    },
    store::{Jitter, ReplyApplied, ReplyEffect, StoreError, corrupt},
};

/// What a result does to a run in `state` at `attempt` of a job with `settings`; decided
/// in [`plan_round`] for both backends.
fn result_verdict(
    state: RunState,
    attempt: u32,
    settings: &JobSettings,
    result: &ResultMessage,
    now: DateTime<Utc>,
    unit: f64,
) -> ResultVerdict {
    after_result(
        state,
        attempt,
        result,
        settings.max_attempts,
        &settings.backoff,
        now,
        unit,
    )
}

/// One round of a batch: indices into the batch, ordered by task.
pub(crate) type Round = Vec<usize>;

/// Splits `replies` into rounds (see the module docs). Every index appears once.
pub(crate) fn rounds(replies: &[&Reply]) -> Vec<Round> {
    /// Per task: its steps so far, and the round of its last reply if that was an ack.
    #[derive(Default)]
    struct Steps {
        count: usize,
        open_ack: Option<usize>,
    }
    let mut seen: HashMap<Uuid, Steps> = HashMap::new();
    let mut rounds: Vec<Round> = Vec::new();
    for (index, reply) in replies.iter().enumerate() {
        let round = match reply.task_id() {
            Some(task) => {
                let steps = seen.entry(task).or_default();
                match steps.open_ack.take() {
                    Some(round) if is_success(reply) => round,
                    _ => {
                        steps.count += 1;
                        if matches!(reply, Reply::Ack(_)) {
                            steps.open_ack = Some(steps.count - 1);
                        }
                        steps.count - 1
                    }
                }
            }
            None => 0,
        };
        if rounds.len() <= round {
            rounds.resize_with(round + 1, Vec::new);
        }
        rounds[round].push(index);
    }
    for round in &mut rounds {
        // Stable, so an ack stays before its success, and presence and registrations
        // keep their order too.
        round.sort_by_key(|&index| replies[index].task_id());
    }
    rounds
}

fn is_success(reply: &Reply) -> bool {
    matches!(reply, Reply::Result(result) if matches!(result.outcome, TaskOutcome::Succeeded { .. }))
}

/// `round` in parts of at most `max` tasks each, in order; an ack and its success stay
/// in one part.
pub(crate) fn parts<'r>(replies: &[&Reply], round: &'r [usize], max: usize) -> Vec<&'r [usize]> {
    let mut parts = Vec::new();
    let (mut start, mut tasks, mut last) = (0, 0, None);
    for (at, &index) in round.iter().enumerate() {
        let task = replies[index].task_id();
        if task.is_none() || task != last {
            if tasks == max {
                parts.push(&round[start..at]);
                (start, tasks) = (at, 0);
            }
            tasks += 1;
        }
        last = task;
    }
    if start < round.len() {
        parts.push(&round[start..]);
    }
    parts
}

/// What a round needs to know about one of its runs, read under the round's locks.
#[derive(Debug, Clone)]
pub(crate) struct RunFacts {
    /// Its state.
    pub state: RunState,
    /// Its current attempt.
    pub attempt: u32,
    /// Its job's delivery mode.
    pub mode: DeliveryMode,
    /// Its job's settings (read only for runs a failure names: a success needs no
    /// retry policy, and reading and decoding every job's settings for them was a
    /// measurable part of the collector's work).
    pub settings: Option<JobSettings>,
}

impl RunFacts {
    /// Facts from a store's columns; `what` names the run in errors.
    pub(crate) fn from_columns(
        what: &str,
        state: &str,
        attempt: u32,
        mode: &str,
        settings: Option<JobSettings>,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            state: RunState::parse(state)
                .ok_or_else(|| corrupt(what, format!("state {state:?}")))?,
            attempt,
            mode: DeliveryMode::parse(mode)
                .ok_or_else(|| corrupt(what, format!("mode {mode:?}")))?,
            settings,
        })
    }
}

/// The runs a round names (`ids`, each once) and those a failure names
/// (`failure_ids`), whose job settings must be read too.
pub(crate) fn round_ids(replies: &[&Reply], round: &[usize]) -> (Vec<Uuid>, Vec<Uuid>) {
    let mut ids: Vec<Uuid> = round.iter().filter_map(|&i| replies[i].task_id()).collect();
    // The round is ordered by task, so an ack and its success are neighbours.
    ids.dedup();
    let failure_ids = round
        .iter()
        .filter_map(|&i| match replies[i] {
            Reply::Result(result) if !is_success(replies[i]) => Some(result.task_id),
            _ => None,
        })
        .collect();
    (ids, failure_ids)
}

/// A reply written on its own.
#[derive(Debug)]
pub(crate) enum SingleWrite<'a> {
    /// A heartbeat: the store's statement decides whether it applies.
    Heartbeat(&'a HeartbeatMessage),
    /// A failed attempt: retried later or given up.
    Failure(&'a ResultMessage, ResultVerdict),
    /// A consumer instance announcing itself.
    Presence(&'a PresenceMessage),
    /// An observer registering its patterns.
    Observe(&'a ObserveMessage),
    /// A result for a run already `dead` or `cancelled`: noted in its history
    /// ([`crate::domain::run::late_record`]); the run stays as it is.
    Late(&'a ResultMessage),
}

impl SingleWrite<'_> {
    /// What the reply did once written (a heartbeat: once its statement applied it).
    pub(crate) fn written(&self) -> ReplyApplied {
        match self {
            SingleWrite::Failure(_, verdict) => (ReplyEffect::Applied, verdict.state()),
            SingleWrite::Heartbeat(_) | SingleWrite::Presence(_) | SingleWrite::Observe(_) => {
                (ReplyEffect::Applied, None)
            }
            SingleWrite::Late(_) => (ReplyEffect::Stale, None),
        }
    }
}

/// How one round is written, and what each of its replies did.
#[derive(Debug, Default)]
pub(crate) struct RoundPlan<'a> {
    /// Acks that apply: each run becomes `acked`.
    pub acks: Vec<&'a AckMessage>,
    /// Results that succeed: each run becomes `succeeded`.
    pub successes: Vec<Success<'a>>,
    /// Replies written one by one, by batch index.
    pub singles: Vec<(usize, SingleWrite<'a>)>,
    /// The effect of every other reply, by batch index.
    pub decided: Vec<(usize, ReplyApplied)>,
}

/// A result that succeeds, with the ack applied just before it in the same round, if any
/// (written by the same statement).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Success<'a> {
    pub result: &'a ResultMessage,
    pub ack: Option<&'a AckMessage>,
}

impl Success<'_> {
    /// When the run was acked: by the paired ack, else no later than it finished.
    pub(crate) fn acked_at(&self) -> DateTime<Utc> {
        self.ack.map_or(self.result.finished_at, |ack| ack.acked_at)
    }
}

/// Decides `round` of `replies` from `facts` (the runs that exist) at `now`.
pub(crate) fn plan_round<'a>(
    replies: &[&'a Reply],
    round: &[usize],
    facts: &HashMap<Uuid, RunFacts>,
    now: DateTime<Utc>,
    jitter: &Jitter<'_>,
) -> RoundPlan<'a> {
    let mut plan = RoundPlan::default();
    // An applied ack whose success follows in this round, waiting to be written with it.
    let mut paired: Option<&AckMessage> = None;
    for (at, &index) in round.iter().enumerate() {
        match replies[index] {
            Reply::Ack(ack) => match facts.get(&ack.task_id) {
                Some(run) if ack_applies(run, ack) => {
                    let success_follows = round.get(at + 1).is_some_and(|&next| {
                        is_success(replies[next]) && replies[next].task_id() == Some(ack.task_id)
                    });
                    if success_follows {
                        paired = Some(ack);
                    } else {
                        plan.acks.push(ack);
                    }
                    plan.decided.push((index, (ReplyEffect::Applied, None)));
                }
                run => plan.decided.push((index, (not_applied(run), None))),
            },
            Reply::Result(result) => match facts.get(&result.task_id) {
                Some(run)
                    if run.mode != DeliveryMode::Broadcast
                        && matches!(run.state, RunState::Dead | RunState::Cancelled) =>
                {
                    plan.singles.push((index, SingleWrite::Late(result)));
                }
                Some(run) if run.mode != DeliveryMode::Broadcast => {
                    // After its paired ack the run is acked.
                    let state = if paired.is_some() {
                        RunState::Acked
                    } else {
                        run.state
                    };
                    let verdict = if is_success(replies[index]) {
                        after_success(state)
                    } else {
                        let settings = run
                            .settings
                            .as_ref()
                            .expect("settings are read for every run a failure names");
                        result_verdict(state, run.attempt, settings, result, now, jitter())
                    };
                    match verdict {
                        ResultVerdict::Stale => {
                            plan.decided.push((index, (ReplyEffect::Stale, None)));
                        }
                        ResultVerdict::Succeeded => {
                            plan.successes.push(Success {
                                result,
                                ack: paired.take(),
                            });
                            plan.decided
                                .push((index, (ReplyEffect::Applied, Some(RunState::Succeeded))));
                        }
                        failure => plan
                            .singles
                            .push((index, SingleWrite::Failure(result, failure))),
                    }
                }
                run => plan.decided.push((index, (not_applied(run), None))),
            },
            Reply::Heartbeat(heartbeat) => plan
                .singles
                .push((index, SingleWrite::Heartbeat(heartbeat))),
            Reply::Presence(presence) => {
                plan.singles.push((index, SingleWrite::Presence(presence)))
            }
            Reply::Observe(observe) => plan.singles.push((index, SingleWrite::Observe(observe))),
        }
        // A paired ack not written with its result is written on its own.
        if matches!(replies[index], Reply::Result(_)) {
            plan.acks.extend(paired.take());
        }
    }
    plan.acks.extend(paired);
    plan
}

/// An ack applies to the current attempt of a run not yet acked, unless it is a
/// broadcast run (whose replies are recorded per consumer instead).
fn ack_applies(run: &RunFacts, ack: &AckMessage) -> bool {
    matches!(run.state, RunState::Scheduled | RunState::Dispatched)
        && run.attempt == ack.attempt
        && run.mode != DeliveryMode::Broadcast
}

fn not_applied(run: Option<&RunFacts>) -> ReplyEffect {
    match run {
        None => ReplyEffect::UnknownRun,
        Some(run) if run.mode == DeliveryMode::Broadcast => ReplyEffect::Broadcast,
        Some(_) => ReplyEffect::Stale,
    }
}

/// Puts the effects of a batch's replies, decided round by round, back in batch order.
pub(crate) fn in_batch_order(len: usize, effects: Vec<(usize, ReplyApplied)>) -> Vec<ReplyApplied> {
    let mut ordered: Vec<Option<ReplyApplied>> = vec![None; len];
    for (index, effect) in effects {
        ordered[index] = Some(effect);
    }
    ordered
        .into_iter()
        .map(|effect| effect.expect("every reply of a batch is decided"))
        .collect()
}

#[cfg(test)]
mod tests {
    use chime_consumer::protocol::{TaskError, TaskOutcome};

    use super::*;

    fn ack(task_id: Uuid, attempt: u32) -> AckMessage {
        AckMessage {
            v: 1,
            task_id,
            attempt,
            consumer: "c".into(),
            acked_at: Utc::now(),
        }
    }

    fn result(task_id: Uuid, attempt: u32, outcome: TaskOutcome) -> ResultMessage {
        ResultMessage {
            v: 1,
            task_id,
            attempt,
            consumer: "c".into(),
            finished_at: Utc::now(),
            replayed: false,
            outcome,
        }
    }

    fn success(task_id: Uuid, attempt: u32) -> ResultMessage {
        result(task_id, attempt, TaskOutcome::Succeeded { output: None })
    }

    #[test]
    fn each_round_touches_a_task_once_in_task_order() {
        let task = Uuid::from_u128;
        let presence = |instance: &str| {
            Reply::Presence(PresenceMessage {
                v: 1,
                instance: instance.into(),
                group: "g".into(),
                zone: None,
                broadcast: false,
                version: None,
                at: Utc::now(),
            })
        };
        let replies = [
            Reply::Ack(ack(task(3), 1)), // 0
            Reply::Ack(ack(task(1), 1)), // 1
            Reply::Ack(ack(task(3), 1)), // 2
            presence("p"),               // 3
            Reply::Ack(ack(task(3), 1)), // 4
            Reply::Ack(ack(task(2), 1)), // 5
            presence("q"),               // 6
        ];
        let refs: Vec<&Reply> = replies.iter().collect();
        assert_eq!(rounds(&refs), vec![vec![3, 6, 1, 5, 0], vec![2], vec![4]]);
        assert!(rounds(&[]).is_empty());
    }

    #[test]
    fn a_round_sets_aside_what_applies_and_decides_the_rest() {
        let settings = JobSettings::every_second(DeliveryMode::Group, 3);
        let run = |state, attempt, mode| RunFacts {
            state,
            attempt,
            mode,
            settings: Some(settings.clone()),
        };
        let ids: Vec<Uuid> = (1..=6).map(Uuid::from_u128).collect();
        let facts = HashMap::from([
            (ids[0], run(RunState::Dispatched, 1, DeliveryMode::Group)),
            (ids[1], run(RunState::Acked, 1, DeliveryMode::Group)),
            (
                ids[2],
                run(RunState::Dispatched, 1, DeliveryMode::Broadcast),
            ),
            (ids[3], run(RunState::Succeeded, 2, DeliveryMode::Group)),
            (ids[4], run(RunState::Acked, 1, DeliveryMode::Group)),
        ]);
        let failed = retryable_failure(ids[4]);
        let replies = [
            Reply::Ack(ack(ids[0], 1)),        // applies
            Reply::Ack(ack(ids[1], 1)),        // already acked: stale
            Reply::Ack(ack(ids[2], 1)),        // broadcast
            Reply::Result(success(ids[3], 1)), // already succeeded: stale
            Reply::Result(failed),             // written alone
            Reply::Ack(ack(ids[5], 1)),        // no such run
        ];
        let refs: Vec<&Reply> = replies.iter().collect();
        let round: Round = (0..replies.len()).collect();
        let plan = plan_round(&refs, &round, &facts, Utc::now(), &rand::random);
        assert_eq!(plan.acks.len(), 1);
        assert_eq!(plan.acks[0].task_id, ids[0]);
        assert!(plan.successes.is_empty());
        assert!(matches!(
            plan.singles.as_slice(),
            [(4, SingleWrite::Failure(_, ResultVerdict::Retry { .. }))]
        ));
        let effects: HashMap<usize, ReplyEffect> =
            plan.decided.iter().map(|(i, (e, _))| (*i, *e)).collect();
        assert_eq!(effects[&0], ReplyEffect::Applied);
        assert_eq!(effects[&1], ReplyEffect::Stale);
        assert_eq!(effects[&2], ReplyEffect::Broadcast);
        assert_eq!(effects[&3], ReplyEffect::Stale);
        assert_eq!(effects[&5], ReplyEffect::UnknownRun);

        let success = [Reply::Result(success(ids[1], 1))];
        let refs: Vec<&Reply> = success.iter().collect();
        let plan = plan_round(&refs, &[0], &facts, Utc::now(), &rand::random);
        assert_eq!(plan.successes.len(), 1);
        assert_eq!(
            plan.decided,
            vec![(0, (ReplyEffect::Applied, Some(RunState::Succeeded)))]
        );
    }

    fn retryable_failure(task_id: Uuid) -> ResultMessage {
        result(
            task_id,
            1,
            TaskOutcome::Failed {
                error: TaskError {
                    message: "boom".into(),
                    retryable: true,
                    retry_after_ms: None,
                },
            },
        )
    }

    #[test]
    fn an_ack_and_the_success_right_after_it_share_a_round() {
        let task = Uuid::from_u128;
        let replies = [
            Reply::Ack(ack(task(1), 1)),               // 0: paired with 1
            Reply::Result(success(task(1), 1)),        // 1
            Reply::Ack(ack(task(2), 1)),               // 2: a failure is not paired
            Reply::Result(retryable_failure(task(2))), // 3
            Reply::Result(success(task(3), 1)),        // 4: a success alone
            Reply::Ack(ack(task(1), 1)),               // 5: a redelivery's pair
            Reply::Result(success(task(1), 1)),        // 6
            Reply::Result(success(task(3), 1)),        // 7: after a success, no pair
        ];
        let refs: Vec<&Reply> = replies.iter().collect();
        assert_eq!(
            rounds(&refs),
            vec![vec![0, 1, 2, 4], vec![5, 6, 3, 7]],
            "round k holds each task's k-th step, in task order"
        );
        let (ids, failure_ids) = round_ids(&refs, &[0, 1, 2, 4]);
        assert_eq!(ids, vec![task(1), task(2), task(3)]);
        assert!(failure_ids.is_empty(), "successes need no settings");
        let (_, failure_ids) = round_ids(&refs, &[5, 6, 3, 7]);
        assert_eq!(failure_ids, vec![task(2)]);
    }

    #[test]
    fn parts_hold_whole_tasks() {
        let task = Uuid::from_u128;
        let replies = [
            Reply::Ack(ack(task(1), 1)),
            Reply::Result(success(task(1), 1)),
            Reply::Ack(ack(task(2), 1)),
            Reply::Ack(ack(task(3), 1)),
            Reply::Result(success(task(3), 1)),
        ];
        let refs: Vec<&Reply> = replies.iter().collect();
        let round: Round = (0..replies.len()).collect();
        let parts = parts(&refs, &round, 2);
        assert_eq!(parts, vec![&[0, 1, 2][..], &[3, 4][..]]);
        assert_eq!(super::parts(&refs, &round, 100), vec![&round[..]]);
        assert!(super::parts(&refs, &[], 2).is_empty());
    }

    #[test]
    fn a_paired_ack_is_written_by_its_success() {
        let settings = JobSettings::every_second(DeliveryMode::Group, 3);
        let run = |state| RunFacts {
            state,
            attempt: 1,
            mode: DeliveryMode::Group,
            settings: Some(settings.clone()),
        };
        let ids: Vec<Uuid> = (1..=3).map(Uuid::from_u128).collect();
        let facts = HashMap::from([
            (ids[0], run(RunState::Dispatched)),
            (ids[1], run(RunState::Acked)),
            (ids[2], run(RunState::Succeeded)),
        ]);
        let first_ack = ack(ids[0], 1);
        let replies = [
            Reply::Ack(first_ack.clone()),     // applies: written with 1
            Reply::Result(success(ids[0], 1)), // succeeds
            Reply::Ack(ack(ids[1], 1)),        // already acked: stale
            Reply::Result(success(ids[1], 1)), // succeeds, no ack to carry
            Reply::Ack(ack(ids[2], 1)),        // finished: stale
            Reply::Result(success(ids[2], 1)), // finished: stale
        ];
        let refs: Vec<&Reply> = replies.iter().collect();
        let round: Round = (0..replies.len()).collect();
        let plan = plan_round(&refs, &round, &facts, Utc::now(), &rand::random);
        assert!(plan.acks.is_empty(), "{:?}", plan.acks);
        assert_eq!(plan.successes.len(), 2);
        assert_eq!(plan.successes[0].result.task_id, ids[0]);
        assert_eq!(plan.successes[0].acked_at(), first_ack.acked_at);
        assert_eq!(plan.successes[1].result.task_id, ids[1]);
        assert!(plan.successes[1].ack.is_none());
        assert_eq!(
            plan.successes[1].acked_at(),
            plan.successes[1].result.finished_at
        );
        let effects: HashMap<usize, ReplyApplied> = plan.decided.into_iter().collect();
        assert_eq!(effects[&0], (ReplyEffect::Applied, None));
        assert_eq!(
            effects[&1],
            (ReplyEffect::Applied, Some(RunState::Succeeded))
        );
        assert_eq!(effects[&2], (ReplyEffect::Stale, None));
        assert_eq!(
            effects[&3],
            (ReplyEffect::Applied, Some(RunState::Succeeded))
        );
        assert_eq!(effects[&4], (ReplyEffect::Stale, None));
        assert_eq!(effects[&5], (ReplyEffect::Stale, None));

        // An ack whose success is in a later round (not adjacent) is written on its own.
        let plan = plan_round(&refs, &[0], &facts, Utc::now(), &rand::random);
        assert_eq!(plan.acks.len(), 1);
        assert!(plan.successes.is_empty());
    }

    #[test]
    fn effects_return_to_batch_order() {
        let effects = vec![
            (1, (ReplyEffect::Stale, None)),
            (0, (ReplyEffect::Applied, None)),
        ];
        assert_eq!(
            in_batch_order(2, effects),
            vec![(ReplyEffect::Applied, None), (ReplyEffect::Stale, None)]
        );
    }
}
