//! Cancelling a run (`POST /v1/runs/{id}/cancel`), decided without I/O: which runs may be
//! cancelled and what cancelling does to one.
//!
//! A run that has not finished (`scheduled`, `dispatched`, `acked` or `failed`) becomes
//! `cancelled`: final, like `succeeded` and `dead`. Its `finished_at` is when it was
//! cancelled and `cancelled_by` who did it; its `due_at` is cleared, so the reconciler
//! never publishes it again (a retry pending on a `failed` run is dropped with it), and
//! its history gets a `cancelled` entry. Replies that come later are stale: an ack
//! applies only to a `scheduled` or `dispatched` run, and a result to an unfinished one
//! (see `crate::store::reply_plan` and [`super::retry`]).
//!
//! A finished run cannot be cancelled ([`CancelRefused`]).

use chrono::{DateTime, Utc};

use chime_consumer::protocol::AttemptRecord;

use super::{Run, RunState};

/// The history event of a cancellation.
pub const CANCELLED_EVENT: &str = "cancelled";

/// Why a run cannot be cancelled: it already finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the run already finished ({state}): only a scheduled, dispatched, acked or failed run can be cancelled"
)]
pub struct CancelRefused {
    /// The run's state.
    pub state: RunState,
}

/// Cancels `run` on behalf of `by` at `now`: see the module docs. The run is unchanged
/// when it already finished.
pub fn cancel(run: &mut Run, by: &str, now: DateTime<Utc>) -> Result<(), CancelRefused> {
    if run.state.is_finished() {
        return Err(CancelRefused { state: run.state });
    }
    let now = super::schedule::truncate_ms(now);
    run.history.push(AttemptRecord {
        attempt: run.attempt,
        event: CANCELLED_EVENT.into(),
        at: now,
        consumer: run
            .consumer
            .clone()
            .filter(|_| run.state == RunState::Acked),
        error: Some(format!("cancelled by {by} while {}", run.state)),
        retry_at: None,
    });
    run.state = RunState::Cancelled;
    run.finished_at = Some(now);
    run.due_at = None;
    run.waiting_for = None;
    run.cancelled_by = Some(by.to_owned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use uuid::Uuid;

    use super::*;
    use crate::domain::RunTrigger;

    fn run_in(state: RunState) -> Run {
        let at: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
        let mut run = Run::new(Uuid::nil(), at, RunTrigger::Schedule, Value::Null, at);
        run.state = state;
        run
    }

    #[test]
    fn an_unfinished_run_becomes_cancelled_and_is_due_for_nothing() {
        let now: DateTime<Utc> = "2026-11-21T10:05:00.123456Z".parse().unwrap();
        for state in [
            RunState::Scheduled,
            RunState::Dispatched,
            RunState::Acked,
            RunState::Failed,
        ] {
            let mut run = run_in(state);
            run.consumer = Some("w1".into());
            assert_eq!(cancel(&mut run, "ops", now), Ok(()));
            assert_eq!(run.state, RunState::Cancelled);
            assert_eq!(run.due_at, None, "{state}: never published again");
            assert_eq!(run.cancelled_by.as_deref(), Some("ops"));
            assert_eq!(run.finished_at.unwrap().timestamp_subsec_micros(), 123_000);
            let entry = run.history.last().unwrap();
            assert_eq!(entry.event, CANCELLED_EVENT);
            assert_eq!(
                entry.consumer.is_some(),
                state == RunState::Acked,
                "only an acked run names the consumer that was running it"
            );
        }
    }

    #[test]
    fn a_finished_run_is_refused_and_left_alone() {
        let now = Utc::now();
        for state in [RunState::Succeeded, RunState::Dead, RunState::Cancelled] {
            let mut run = run_in(state);
            let before = run.clone();
            assert_eq!(cancel(&mut run, "ops", now), Err(CancelRefused { state }));
            assert_eq!(run, before);
        }
    }
}
