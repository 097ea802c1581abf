//! What happens to a run after a failure or a missed deadline: retry after an exponential
//! backoff with jitter, publish again, or give up (`dead`). Pure functions over plain
//! values; the stores and the reconciler apply their verdicts.
//!
//! Backoff uses "equal jitter": attempt `n` waits a uniformly random time in `[d/2, d]`,
//! where `d = initial · 2^(n−1)`, capped at `max`. Half of each delay is random, so a
//! burst of failures spreads out, and each delay is at least as long as the previous
//! one's lower bound, so delays grow.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use chime_consumer::protocol::{AttemptRecord, ResultMessage, TaskOutcome};

use super::{RunState, duration::HumanDuration, validation::FieldError};

/// Longest wait a handler's `retry_after` hint may ask for.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// A job's retry backoff.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Backoff {
    /// Delay before the first retry (before jitter). Default `1s`.
    #[schema(value_type = String, example = "1s")]
    pub initial: HumanDuration,
    /// Longest delay. Default `5m`.
    #[schema(value_type = String, example = "5m")]
    pub max: HumanDuration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: HumanDuration(Duration::from_secs(1)),
            max: HumanDuration(Duration::from_secs(300)),
        }
    }
}

impl Backoff {
    /// Checks the bounds: `initial` from 10 ms, `max` at least `initial` and at most 24 h.
    pub fn validate(&self) -> Result<(), FieldError> {
        let (initial, max) = (self.initial.get(), self.max.get());
        if initial < Duration::from_millis(10) || initial > MAX_RETRY_AFTER {
            return Err(FieldError::new(
                "backoff.initial",
                format!(
                    "backoff.initial {} is out of range: use 10ms to 24h",
                    self.initial
                ),
            ));
        }
        if max < initial || max > MAX_RETRY_AFTER {
            return Err(FieldError::new(
                "backoff.max",
                format!(
                    "backoff.max {} is out of range: use backoff.initial ({}) to 24h",
                    self.max, self.initial
                ),
            ));
        }
        Ok(())
    }

    /// The delay after failed attempt `attempt` (from 1); `unit` is a random number in
    /// `[0, 1)` choosing the jitter.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let doublings = attempt.saturating_sub(1).min(40);
        let full = self
            .initial
            .get()
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max.get());
        let half = full / 2;
        half + half.mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// What to do with a run after a consumer's result.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultVerdict {
    /// The result is for an attempt that no longer matters (the run finished, or a newer
    /// attempt is under way): leave the run alone.
    Stale,
    /// The handler succeeded.
    Succeeded,
    /// The attempt failed and will be retried at `at`.
    Retry {
        /// When the next attempt is published.
        at: DateTime<Utc>,
        /// The failed attempt, for the history.
        record: AttemptRecord,
    },
    /// The run is given up.
    Dead {
        /// Why.
        reason: String,
        /// The failed attempt, for the history.
        record: AttemptRecord,
    },
}

impl ResultVerdict {
    /// The state the verdict leaves the run in (None: unchanged).
    pub fn state(&self) -> Option<RunState> {
        match self {
            ResultVerdict::Stale => None,
            ResultVerdict::Succeeded => Some(RunState::Succeeded),
            ResultVerdict::Retry { .. } => Some(RunState::Failed),
            ResultVerdict::Dead { .. } => Some(RunState::Dead),
        }
    }
}

/// What a success does to a run in `state`: whichever attempt it was, the work is done,
/// unless the run already finished (or was cancelled). Needs no retry policy.
pub fn after_success(state: RunState) -> ResultVerdict {
    if state.is_finished() {
        ResultVerdict::Stale
    } else {
        ResultVerdict::Succeeded
    }
}

/// Decides what `result` does to a run in `state` at `attempt`, given the job's
/// `max_attempts` and `backoff`. `unit` is a random number in `[0, 1)` for the jitter.
pub fn after_result(
    state: RunState,
    attempt: u32,
    result: &ResultMessage,
    max_attempts: u32,
    backoff: &Backoff,
    now: DateTime<Utc>,
    unit: f64,
) -> ResultVerdict {
    let error = match &result.outcome {
        TaskOutcome::Succeeded { .. } => return after_success(state),
        TaskOutcome::Failed { error } => error,
    };
    if state.is_finished() {
        return ResultVerdict::Stale;
    }
    // A failure of an older attempt, or a second report of this one, changes nothing.
    if result.attempt != attempt || state == RunState::Failed {
        return ResultVerdict::Stale;
    }
    let record = AttemptRecord {
        attempt,
        event: "failed".into(),
        at: now,
        consumer: Some(result.consumer.clone()),
        error: Some(error.message.clone()),
        retry_at: None,
    };
    if !error.retryable {
        return ResultVerdict::Dead {
            reason: format!("permanent failure: {}", error.message),
            record,
        };
    }
    if attempt >= max_attempts {
        return ResultVerdict::Dead {
            reason: format!(
                "failed {attempt} of {max_attempts} attempts; last error: {}",
                error.message
            ),
            record,
        };
    }
    let delay = match error.retry_after_ms {
        Some(ms) => Duration::from_millis(ms).min(MAX_RETRY_AFTER),
        None => backoff.delay(attempt, unit),
    };
    // Stores keep milliseconds; the history must name the same instant as `due_at`.
    let at = super::schedule::truncate_ms(
        now + chrono::Duration::from_std(delay).expect("bounded by MAX_RETRY_AFTER"),
    );
    ResultVerdict::Retry {
        at,
        record: AttemptRecord {
            retry_at: Some(at),
            ..record
        },
    }
}

/// A deadline a run missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    /// Dispatched, but no consumer acked within the ack timeout.
    Ack,
    /// Acked, but neither a result nor a heartbeat came within the run timeout.
    Run,
}

impl Missed {
    /// The history event name.
    pub fn event(self) -> &'static str {
        match self {
            Missed::Ack => "ack_timeout",
            Missed::Run => "run_timeout",
        }
    }
}

/// What to do with a run that missed a deadline.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeoutVerdict {
    /// Publish it again as attempt + 1.
    Republish {
        /// The timed-out attempt, for the history.
        record: AttemptRecord,
    },
    /// Give up.
    Dead {
        /// Why.
        reason: String,
        /// The timed-out attempt, for the history.
        record: AttemptRecord,
    },
}

/// Decides what happens to a run at `attempt` that missed `missed` (whose limit was
/// `limit`), given the job's `max_attempts`.
pub fn after_timeout(
    missed: Missed,
    attempt: u32,
    limit: Duration,
    consumer: Option<&str>,
    max_attempts: u32,
    now: DateTime<Utc>,
) -> TimeoutVerdict {
    let limit = HumanDuration(limit);
    let what = match missed {
        Missed::Ack => format!("no ack within {limit}"),
        Missed::Run => format!("no result or heartbeat within {limit}"),
    };
    let record = AttemptRecord {
        attempt,
        event: missed.event().into(),
        at: now,
        consumer: consumer.map(str::to_string),
        error: Some(what.clone()),
        retry_at: None,
    };
    if attempt >= max_attempts {
        TimeoutVerdict::Dead {
            reason: format!("{what} on attempt {attempt} of {max_attempts}"),
            record,
        }
    } else {
        TimeoutVerdict::Republish { record }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_consumer::protocol::TaskError;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn secs(s: u64) -> HumanDuration {
        HumanDuration(Duration::from_secs(s))
    }

    fn failed(attempt: u32, retryable: bool, retry_after_ms: Option<u64>) -> ResultMessage {
        ResultMessage {
            v: 1,
            task_id: Uuid::nil(),
            attempt,
            consumer: "w1".into(),
            finished_at: Utc::now(),
            replayed: false,
            outcome: TaskOutcome::Failed {
                error: TaskError {
                    message: "db down".into(),
                    retryable,
                    retry_after_ms,
                },
            },
        }
    }

    #[test]
    fn delays_double_up_to_the_cap_with_half_jitter() {
        let b = Backoff {
            initial: secs(1),
            max: secs(10),
        };
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(500));
        assert_eq!(b.delay(1, 1.0), Duration::from_secs(1));
        assert_eq!(b.delay(2, 0.0), Duration::from_secs(1));
        assert_eq!(b.delay(3, 1.0), Duration::from_secs(4));
        assert_eq!(b.delay(9, 1.0), Duration::from_secs(10));
        assert_eq!(b.delay(u32::MAX, 1.0), Duration::from_secs(10));
    }

    proptest! {
        #[test]
        fn delays_never_shrink_from_one_attempt_to_the_next(
            attempt in 1u32..60, a in 0.0f64..1.0, b in 0.0f64..1.0,
            initial_ms in 10u64..60_000, extra_ms in 0u64..600_000,
        ) {
            let backoff = Backoff {
                initial: HumanDuration(Duration::from_millis(initial_ms)),
                max: HumanDuration(Duration::from_millis(initial_ms + extra_ms)),
            };
            let this = backoff.delay(attempt, a);
            let next = backoff.delay(attempt + 1, b);
            prop_assert!(next >= this || next >= backoff.max.get() / 2);
            prop_assert!(this <= backoff.max.get());
        }
    }

    #[test]
    fn retryable_failure_retries_until_attempts_run_out() {
        let now = Utc::now();
        let b = Backoff::default();
        match after_result(RunState::Acked, 1, &failed(1, true, None), 3, &b, now, 0.5) {
            ResultVerdict::Retry { at, record } => {
                assert!(at > now && at <= now + chrono::Duration::seconds(1));
                assert_eq!((record.attempt, record.event.as_str()), (1, "failed"));
            }
            other => panic!("expected a retry, got {other:?}"),
        }
        match after_result(RunState::Acked, 3, &failed(3, true, None), 3, &b, now, 0.5) {
            ResultVerdict::Dead { reason, .. } => {
                assert!(reason.contains("3 of 3"), "{reason}")
            }
            other => panic!("expected dead, got {other:?}"),
        }
    }

    #[test]
    fn permanent_failure_is_dead_at_once() {
        let v = after_result(
            RunState::Acked,
            1,
            &failed(1, false, None),
            5,
            &Backoff::default(),
            Utc::now(),
            0.0,
        );
        assert!(matches!(v, ResultVerdict::Dead { reason, .. } if reason.starts_with("permanent")));
    }

    #[test]
    fn retry_after_hint_wins_over_backoff() {
        let now = crate::domain::schedule::truncate_ms(Utc::now());
        let v = after_result(
            RunState::Acked,
            1,
            &failed(1, true, Some(42_000)),
            5,
            &Backoff::default(),
            now,
            0.0,
        );
        assert_eq!(
            v,
            ResultVerdict::Retry {
                at: now + chrono::Duration::seconds(42),
                record: AttemptRecord {
                    attempt: 1,
                    event: "failed".into(),
                    at: now,
                    consumer: Some("w1".into()),
                    error: Some("db down".into()),
                    retry_at: Some(now + chrono::Duration::seconds(42)),
                }
            }
        );
    }

    #[test]
    fn stale_results_change_nothing() {
        let b = Backoff::default();
        let now = Utc::now();
        // An old attempt's failure while attempt 2 runs.
        assert_eq!(
            after_result(
                RunState::Dispatched,
                2,
                &failed(1, true, None),
                5,
                &b,
                now,
                0.0
            ),
            ResultVerdict::Stale
        );
        // A duplicate failure report of the same attempt.
        assert_eq!(
            after_result(RunState::Failed, 1, &failed(1, true, None), 5, &b, now, 0.0),
            ResultVerdict::Stale
        );
        assert_eq!(
            after_result(RunState::Dead, 1, &failed(1, true, None), 5, &b, now, 0.0),
            ResultVerdict::Stale
        );
        assert_eq!(
            after_result(
                RunState::Cancelled,
                1,
                &failed(1, true, None),
                5,
                &b,
                now,
                0.0
            ),
            ResultVerdict::Stale,
            "a cancelled run is not retried"
        );
        assert_eq!(after_success(RunState::Cancelled), ResultVerdict::Stale);
        // A late success of an older attempt still settles the run.
        let mut ok = failed(1, true, None);
        ok.outcome = TaskOutcome::Succeeded { output: None };
        assert_eq!(
            after_result(RunState::Dispatched, 2, &ok, 5, &b, now, 0.0),
            ResultVerdict::Succeeded
        );
    }

    #[test]
    fn timeouts_republish_until_attempts_run_out() {
        let now = Utc::now();
        let v = after_timeout(Missed::Ack, 1, Duration::from_secs(30), None, 2, now);
        assert!(matches!(v, TimeoutVerdict::Republish { record } if record.event == "ack_timeout"));
        let v = after_timeout(Missed::Run, 2, Duration::from_secs(60), Some("w1"), 2, now);
        match v {
            TimeoutVerdict::Dead { reason, record } => {
                assert_eq!(reason, "no result or heartbeat within 1m on attempt 2 of 2");
                assert_eq!(record.consumer.as_deref(), Some("w1"));
            }
            other => panic!("expected dead, got {other:?}"),
        }
    }

    #[test]
    fn backoff_bounds() {
        let mut b = Backoff::default();
        assert!(b.validate().is_ok());
        b.initial = HumanDuration(Duration::from_millis(1));
        assert_eq!(b.validate().unwrap_err().field, "backoff.initial");
        b.initial = secs(10);
        b.max = secs(5);
        assert_eq!(b.validate().unwrap_err().field, "backoff.max");
    }
}
