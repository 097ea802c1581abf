//! Broadcast runs: one run per fire, run by every live instance of the group. Each
//! instance's ack, heartbeats and result are kept on the run as an [`InstanceReceipt`];
//! the run itself is decided by [`settle`]:
//!
//! - the *ack window* (the job's `ack_timeout` from the publish confirm) is when instances
//!   may still ack; an instance that joins later never received the task;
//! - once the window has closed and every instance that acked has finished, the run is
//!   `succeeded` if all of them succeeded (none acking is success too: there was no live
//!   instance to run it);
//! - an instance that acked and then went silent for the run timeout is `lost`;
//! - failures and lost instances fail the attempt like a group run's failed result: a
//!   retry with backoff while attempts remain (the task is broadcast again; instances that
//!   succeeded already replay their recorded outcome from their idempotency store), or
//!   `dead` for a permanent failure or once attempts run out.
//!
//! Pure functions over [`Run`]; the stores apply them inside a transaction.

use chrono::{DateTime, Utc};
use serde_json::json;

use chime_consumer::protocol::{
    AckMessage, HeartbeatMessage, ResultMessage, TaskError, TaskOutcome,
};

pub use super::receipt::{InstanceReceipt, ReceiptState};
use super::{
    JobSettings, Run, RunState,
    retry::{ResultVerdict, after_result},
};

impl InstanceReceipt {
    fn deadline(&self, run: &Run) -> DateTime<Utc> {
        self.heartbeat_at.unwrap_or(self.acked_at) + chrono_duration(run.run_timeout)
    }
}

/// Whether the run still waits for instances to ack or report.
fn open(run: &Run) -> bool {
    matches!(
        run.state,
        RunState::Scheduled | RunState::Dispatched | RunState::Acked
    )
}

/// Applies instance `ack.consumer`'s ack of the current attempt. False if stale.
pub fn apply_ack(
    run: &mut Run,
    settings: &JobSettings,
    ack: &AckMessage,
    now: DateTime<Utc>,
) -> bool {
    if !open(run) || ack.attempt != run.attempt {
        return false;
    }
    if run
        .instances
        .iter()
        .any(|r| r.instance == ack.consumer && r.attempt == ack.attempt)
    {
        return false;
    }
    upsert(
        run,
        InstanceReceipt {
            instance: ack.consumer.clone(),
            attempt: ack.attempt,
            state: ReceiptState::Running,
            acked_at: ack.acked_at,
            heartbeat_at: None,
            finished_at: None,
            output: None,
            error: None,
        },
    );
    run.dispatched_at.get_or_insert(ack.acked_at);
    run.acked_at.get_or_insert(ack.acked_at);
    run.consumer = Some(ack.consumer.clone());
    run.state = RunState::Acked;
    settle(run, settings, now, 0.5);
    true
}

/// Applies a heartbeat from a running instance. False if stale.
pub fn apply_heartbeat(
    run: &mut Run,
    settings: &JobSettings,
    beat: &HeartbeatMessage,
    now: DateTime<Utc>,
) -> bool {
    if !open(run) || beat.attempt != run.attempt {
        return false;
    }
    let Some(receipt) = run.instances.iter_mut().find(|r| {
        r.instance == beat.consumer && r.attempt == beat.attempt && r.state == ReceiptState::Running
    }) else {
        return false;
    };
    receipt.heartbeat_at = Some(beat.at);
    settle(run, settings, now, 0.5);
    true
}

/// Applies an instance's result of the current attempt, then [`settle`]s the run with
/// `unit` as the backoff jitter. False if stale.
pub fn apply_result(
    run: &mut Run,
    settings: &JobSettings,
    result: &ResultMessage,
    now: DateTime<Utc>,
    unit: f64,
) -> bool {
    if !open(run) || result.attempt != run.attempt {
        return false;
    }
    let acked_at = run
        .instances
        .iter()
        .find(|r| r.instance == result.consumer && r.attempt == result.attempt)
        .map(|r| {
            if r.state == ReceiptState::Running {
                Ok(r.acked_at)
            } else {
                Err(())
            }
        });
    let acked_at = match acked_at {
        Some(Err(())) => return false,
        Some(Ok(at)) => at,
        None => result.finished_at,
    };
    let (state, output, error) = match &result.outcome {
        TaskOutcome::Succeeded { output } => (ReceiptState::Succeeded, output.clone(), None),
        TaskOutcome::Failed { error } => (ReceiptState::Failed, None, Some(error.clone())),
    };
    upsert(
        run,
        InstanceReceipt {
            instance: result.consumer.clone(),
            attempt: result.attempt,
            state,
            acked_at,
            heartbeat_at: None,
            finished_at: Some(result.finished_at),
            output,
            error,
        },
    );
    run.dispatched_at.get_or_insert(acked_at);
    run.acked_at.get_or_insert(acked_at);
    run.consumer = Some(result.consumer.clone());
    if run.state != RunState::Acked {
        run.state = RunState::Acked;
    }
    settle(run, settings, now, unit);
    true
}

/// Decides the run at `now` (see the module docs): marks silent instances lost, and
/// either sets when to look again or finishes the attempt. `unit` is a random number in
/// `[0, 1)` for the retry jitter. Returns the run's state when it changed.
pub fn settle(
    run: &mut Run,
    settings: &JobSettings,
    now: DateTime<Utc>,
    unit: f64,
) -> Option<RunState> {
    if !matches!(run.state, RunState::Dispatched | RunState::Acked) {
        return None;
    }
    let attempt = run.attempt;
    let run_view = run.clone();
    for receipt in run.instances.iter_mut() {
        if receipt.attempt == attempt
            && receipt.state == ReceiptState::Running
            && receipt.deadline(&run_view) <= now
        {
            receipt.state = ReceiptState::Lost;
            receipt.finished_at = Some(now);
            receipt.error = Some(TaskError {
                message: format!(
                    "no result or heartbeat within the run timeout ({}s)",
                    run_view.run_timeout.as_secs()
                ),
                retryable: true,
                retry_after_ms: None,
            });
        }
    }
    let window_end = run.dispatched_at.unwrap_or(run.created_at) + chrono_duration(run.ack_timeout);
    let running_deadline = run
        .instances
        .iter()
        .filter(|r| r.attempt == attempt && r.state == ReceiptState::Running)
        .map(|r| r.deadline(&run_view))
        .min();
    if now < window_end || running_deadline.is_some() {
        let window = (now < window_end).then_some(window_end);
        run.due_at = [window, running_deadline].into_iter().flatten().min();
        return None;
    }
    let current: Vec<&InstanceReceipt> = run
        .instances
        .iter()
        .filter(|r| r.attempt == attempt)
        .collect();
    let failed: Vec<&InstanceReceipt> = current
        .iter()
        .copied()
        .filter(|r| matches!(r.state, ReceiptState::Failed | ReceiptState::Lost))
        .collect();
    if failed.is_empty() {
        // Sorted, so the output does not depend on the order receipts arrived in.
        let mut names: Vec<&str> = current.iter().map(|r| r.instance.as_str()).collect();
        names.sort_unstable();
        run.state = RunState::Succeeded;
        run.finished_at = Some(now);
        run.due_at = None;
        run.error = None;
        run.output = Some(json!({"instances": names}));
        return Some(RunState::Succeeded);
    }
    // The attempt failed as a whole: decide it like one failed result.
    let message = format!(
        "{} of {} instances failed: {}",
        failed.len(),
        current.len(),
        failed
            .iter()
            .map(|r| format!(
                "{} ({})",
                r.instance,
                r.error.as_ref().map_or("lost", |e| e.message.as_str())
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let error = TaskError {
        message,
        retryable: failed
            .iter()
            .all(|r| r.error.as_ref().is_none_or(|e| e.retryable)),
        retry_after_ms: failed
            .iter()
            .filter_map(|r| r.error.as_ref().and_then(|e| e.retry_after_ms))
            .max(),
    };
    let aggregate = ResultMessage {
        v: chime_consumer::protocol::PROTOCOL_VERSION,
        task_id: run.id,
        attempt,
        consumer: failed
            .iter()
            .map(|r| r.instance.as_str())
            .collect::<Vec<_>>()
            .join(","),
        finished_at: now,
        replayed: false,
        outcome: TaskOutcome::Failed { error },
    };
    match after_result(
        RunState::Acked,
        attempt,
        &aggregate,
        settings.max_attempts,
        &settings.backoff,
        now,
        unit,
    ) {
        ResultVerdict::Retry { at, record } => {
            run.state = RunState::Failed;
            run.finished_at = Some(now);
            run.error = record.error.clone();
            run.due_at = Some(at);
            run.history.push(record);
            Some(RunState::Failed)
        }
        ResultVerdict::Dead { reason, record } => {
            run.state = RunState::Dead;
            run.finished_at = Some(now);
            run.error = Some(reason);
            // Due now: its dead letter is pending.
            run.due_at = Some(now);
            run.history.push(record);
            Some(RunState::Dead)
        }
        ResultVerdict::Succeeded | ResultVerdict::Stale => None,
    }
}

fn upsert(run: &mut Run, receipt: InstanceReceipt) {
    match run
        .instances
        .iter_mut()
        .find(|r| r.instance == receipt.instance)
    {
        Some(existing) => *existing = receipt,
        None => run.instances.push(receipt),
    }
}

fn chrono_duration(d: std::time::Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{DeliveryMode, RunTrigger};
    use chrono::Duration;
    use std::time::Duration as Std;
    use uuid::Uuid;

    fn settings(max_attempts: u32) -> JobSettings {
        JobSettings::every_second(DeliveryMode::Broadcast, max_attempts)
    }

    fn t0() -> DateTime<Utc> {
        "2026-11-21T10:00:00Z".parse().unwrap()
    }

    fn dispatched() -> Run {
        let mut run = Run::new(
            Uuid::from_u128(1),
            t0(),
            RunTrigger::Schedule,
            serde_json::Value::Null,
            t0(),
        )
        .item(DeliveryMode::Broadcast, 0, 1, None);
        run.ack_timeout = Std::from_secs(2);
        run.run_timeout = Std::from_secs(10);
        run.state = RunState::Dispatched;
        run.dispatched_at = Some(t0());
        run.due_at = Some(t0() + Duration::seconds(2));
        run
    }

    fn ack(instance: &str, at: DateTime<Utc>) -> AckMessage {
        AckMessage {
            v: 1,
            task_id: Uuid::from_u128(9),
            attempt: 1,
            consumer: instance.into(),
            acked_at: at,
        }
    }

    fn result(instance: &str, ok: bool, retryable: bool, at: DateTime<Utc>) -> ResultMessage {
        ResultMessage {
            v: 1,
            task_id: Uuid::from_u128(9),
            attempt: 1,
            consumer: instance.into(),
            finished_at: at,
            replayed: false,
            outcome: if ok {
                TaskOutcome::Succeeded { output: None }
            } else {
                TaskOutcome::Failed {
                    error: TaskError {
                        message: "cache down".into(),
                        retryable,
                        retry_after_ms: None,
                    },
                }
            },
        }
    }

    #[test]
    fn succeeds_once_the_window_closed_and_every_acked_instance_finished() {
        let s = settings(3);
        let mut run = dispatched();
        let at = t0() + Duration::milliseconds(100);
        // Acked "b" first: the output lists instances sorted by id all the same.
        assert!(apply_ack(&mut run, &s, &ack("b", at), at));
        assert!(apply_ack(&mut run, &s, &ack("a", at), at));
        assert!(
            !apply_ack(&mut run, &s, &ack("a", at), at),
            "a second ack is stale"
        );
        assert!(apply_result(
            &mut run,
            &s,
            &result("a", true, false, at),
            at,
            0.5
        ));
        assert!(apply_result(
            &mut run,
            &s,
            &result("b", true, false, at),
            at,
            0.5
        ));
        // Both finished, but others may still ack within the window.
        assert_eq!(run.state, RunState::Acked);
        assert_eq!(run.due_at, Some(t0() + Duration::seconds(2)));
        let later = t0() + Duration::seconds(2);
        assert_eq!(settle(&mut run, &s, later, 0.5), Some(RunState::Succeeded));
        assert_eq!(run.output, Some(json!({"instances": ["a", "b"]})));
        assert_eq!(run.due_at, None);
    }

    #[test]
    fn a_running_instance_holds_the_run_until_it_finishes_or_is_lost() {
        let s = settings(3);
        let mut run = dispatched();
        let at = t0() + Duration::milliseconds(100);
        apply_ack(&mut run, &s, &ack("a", at), at);
        apply_ack(&mut run, &s, &ack("b", at), at);
        apply_result(&mut run, &s, &result("a", true, false, at), at, 0.5);
        let after_window = t0() + Duration::seconds(3);
        assert_eq!(settle(&mut run, &s, after_window, 0.5), None);
        assert_eq!(run.due_at, Some(at + Duration::seconds(10)), "b's deadline");
        // A heartbeat moves b's deadline.
        let beat = HeartbeatMessage {
            v: 1,
            task_id: run.id,
            attempt: 1,
            consumer: "b".into(),
            at: after_window,
            progress: None,
        };
        assert!(apply_heartbeat(&mut run, &s, &beat, after_window));
        assert_eq!(run.due_at, Some(after_window + Duration::seconds(10)));
        // b goes silent: lost, and the attempt is retried.
        let silent = after_window + Duration::seconds(10);
        assert_eq!(settle(&mut run, &s, silent, 0.0), Some(RunState::Failed));
        let b = run.instances.iter().find(|r| r.instance == "b").unwrap();
        assert_eq!(b.state, ReceiptState::Lost);
        assert!(
            run.error
                .as_deref()
                .unwrap()
                .contains("1 of 2 instances failed: b")
        );
        assert!(run.due_at.unwrap() > silent);
        assert_eq!(run.history.len(), 1);
    }

    #[test]
    fn no_instance_is_success_after_the_window() {
        let s = settings(3);
        let mut run = dispatched();
        assert_eq!(settle(&mut run, &s, t0() + Duration::seconds(1), 0.5), None);
        assert_eq!(
            settle(&mut run, &s, t0() + Duration::seconds(2), 0.5),
            Some(RunState::Succeeded)
        );
        assert_eq!(run.output, Some(json!({"instances": []})));
    }

    #[test]
    fn a_permanent_failure_or_the_last_attempt_is_dead() {
        let s = settings(3);
        let mut run = dispatched();
        let at = t0() + Duration::milliseconds(100);
        apply_result(&mut run, &s, &result("a", false, false, at), at, 0.5);
        apply_result(&mut run, &s, &result("b", true, false, at), at, 0.5);
        assert_eq!(
            settle(&mut run, &s, t0() + Duration::seconds(2), 0.5),
            Some(RunState::Dead)
        );
        assert!(
            run.error
                .as_deref()
                .unwrap()
                .starts_with("permanent failure")
        );
        assert!(run.due_at.is_some(), "its dead letter is pending");

        let s = settings(1);
        let mut run = dispatched();
        apply_result(&mut run, &s, &result("a", false, true, at), at, 0.5);
        assert_eq!(
            settle(&mut run, &s, t0() + Duration::seconds(2), 0.5),
            Some(RunState::Dead)
        );
    }

    #[test]
    fn replies_for_other_attempts_or_finished_runs_are_stale() {
        let s = settings(3);
        let mut run = dispatched();
        let at = t0() + Duration::milliseconds(100);
        let mut old = ack("a", at);
        old.attempt = 2;
        assert!(!apply_ack(&mut run, &s, &old, at));
        run.state = RunState::Succeeded;
        assert!(!apply_result(
            &mut run,
            &s,
            &result("a", true, false, at),
            at,
            0.5
        ));
        assert!(run.instances.is_empty());
    }
}
