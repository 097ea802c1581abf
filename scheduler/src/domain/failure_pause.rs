//! Pause on failure: a job with `pause_after_failures: N` pauses itself once its last N
//! finished runs all ended `dead`.
//!
//! What counts: runs (one per item of a fire, scheduled or triggered) in their final
//! state, newest fire first. A run ends `dead` when it failed permanently, exhausted its
//! attempts, or was dead-lettered; a run that ends `succeeded` resets the count. A
//! failed attempt that will be retried (`failed`) is not final and counts for nothing,
//! nor does a run still in flight. Only runs recorded after the job's last change
//! (`updated_at`: an edit, a pause, a resume) count, so resuming a job, or changing it,
//! starts the count from zero.
//!
//! The check is a pure function of stored runs ([`trips`]), so it is idempotent: any
//! node may make it, any number of times, and the pause itself is a conditional job
//! update at the version read, so of two nodes deciding at once one pauses the job and
//! the other's write fails harmlessly.

use super::{RunState, limits::MAX_PAUSE_AFTER_FAILURES, validation::FieldError};

/// How many runs beyond `pause_after_failures` the stores walk, newest fire first, to
/// find that many finished runs recorded since the job's last change: the walk stays
/// bounded for a job with a long history from before its last change. A job with more
/// runs than this in flight (or recorded before its last change) newer than its
/// finished ones is judged once they finish.
pub const WALK_PAST: i64 = 1000;

/// Checks a `pause_after_failures` value: 1 to [`MAX_PAUSE_AFTER_FAILURES`].
pub fn validate(n: u32) -> Result<(), FieldError> {
    if (1..=MAX_PAUSE_AFTER_FAILURES).contains(&n) {
        Ok(())
    } else {
        Err(FieldError::new(
            "pause_after_failures",
            format!(
                "pause_after_failures {n} is out of range: use 1 to {MAX_PAUSE_AFTER_FAILURES}, or omit it to never pause"
            ),
        ))
    }
}

/// Whether a job with `pause_after_failures: limit` pauses, given the final states of
/// its newest finished runs, newest first (at least `limit` of them when there are
/// that many): the newest `limit` all ended `dead`.
pub fn trips(limit: u32, newest_first: &[RunState]) -> bool {
    let limit = limit as usize;
    limit > 0
        && newest_first.len() >= limit
        && newest_first[..limit]
            .iter()
            .all(|state| *state == RunState::Dead)
}

/// The reason a job paused for failures records (`paused_reason` in the API).
pub fn reason(limit: u32) -> String {
    format!("paused by the scheduler after {limit} consecutive failed runs (pause_after_failures)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunState::{Dead, Succeeded};

    #[test]
    fn the_newest_n_dead_runs_trip_it() {
        assert!(trips(3, &[Dead, Dead, Dead]));
        assert!(trips(3, &[Dead, Dead, Dead, Succeeded]));
        assert!(trips(1, &[Dead]));
    }

    #[test]
    fn a_success_among_the_newest_n_or_too_few_runs_do_not() {
        assert!(!trips(3, &[Dead, Succeeded, Dead, Dead]));
        assert!(!trips(3, &[Succeeded, Dead, Dead, Dead]));
        assert!(!trips(3, &[Dead, Dead]));
        assert!(!trips(3, &[]));
        assert!(!trips(0, &[Dead]));
    }

    #[test]
    fn bounds_are_one_to_the_maximum() {
        assert!(validate(1).is_ok());
        assert!(validate(MAX_PAUSE_AFTER_FAILURES).is_ok());
        let error = validate(0).unwrap_err();
        assert_eq!(error.field, "pause_after_failures");
        assert!(validate(MAX_PAUSE_AFTER_FAILURES + 1).is_err());
    }

    #[test]
    fn the_reason_names_the_count() {
        assert!(reason(5).contains("5 consecutive failed runs"));
    }
}
