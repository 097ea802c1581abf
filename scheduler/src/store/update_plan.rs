//! The decisions of a job update, without I/O, shared by both backends' `update_job`
//! transactions: whether the job's unfinished runs become `forbid` runs, where its next
//! fire time moves back to once fires armed ahead are withdrawn, and what a failed
//! conditional update means.

use uuid::Uuid;

use super::StoreError;
use crate::domain::{Job, OverlapPolicy};

/// Whether `job` turns a waiting overlap policy (`forbid`, `buffer_one`) on, given the
/// stored job's overlap policy (`None`: no stored job, or no policy recorded). Its
/// unfinished runs were then recorded under `allow`, and from now on its fires must
/// wait for them too (the store marks them `forbid`, which fires of either policy wait
/// for).
pub(crate) fn becomes_forbid(job: &Job, stored_overlap: Option<&str>) -> bool {
    job.spec.settings.overlap.waits()
        && !stored_overlap
            .and_then(OverlapPolicy::parse)
            .is_some_and(OverlapPolicy::waits)
}

/// Where the job's next fire time moves back to after the fires armed ahead at
/// `withdrawn` (their fire times) were deleted: the earliest of them, so they are armed
/// again from the new definition when due, unless the update sets the next fire time
/// anew (`set_next_fire`). `None`: leave it. The store keeps the earlier of this and the
/// stored next fire time.
pub(crate) fn rewind_to<T: Ord>(
    withdrawn: impl IntoIterator<Item = T>,
    set_next_fire: bool,
) -> Option<T> {
    withdrawn.into_iter().min().filter(|_| !set_next_fire)
}

/// The error of an update of job `id` at `expected` version that matched no row, given
/// the job's stored version (`None`: no such job).
pub(crate) fn update_missed(id: Uuid, expected: i64, current: Option<i64>) -> StoreError {
    match current {
        None => StoreError::JobNotFound(id),
        Some(current) => StoreError::VersionConflict {
            id,
            expected,
            current,
        },
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};

    use super::*;

    fn at(second: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, second).unwrap()
    }

    #[test]
    fn turning_forbid_on_is_seen_once() {
        use crate::domain::{DeliveryMode, JobSettings, JobSpec};
        let mut settings = JobSettings::every_second(DeliveryMode::Group, 3);
        settings.overlap = OverlapPolicy::Forbid;
        let job = Job::new(
            JobSpec {
                app: "shop".into(),
                name: "tick".into(),
                paused: false,
                settings,
            },
            at(0),
        );
        assert!(becomes_forbid(&job, Some("allow")));
        assert!(becomes_forbid(&job, None));
        assert!(!becomes_forbid(&job, Some("forbid")));
        assert!(!becomes_forbid(&job, Some("buffer_one")));
    }

    #[test]
    fn withdrawn_fires_rewind_to_the_earliest() {
        assert_eq!(rewind_to([at(30), at(10), at(20)], false), Some(at(10)));
    }

    #[test]
    fn a_new_next_fire_time_or_nothing_withdrawn_keeps_it() {
        assert_eq!(rewind_to([at(30), at(10)], true), None);
        assert_eq!(rewind_to(Vec::<DateTime<Utc>>::new(), false), None);
    }

    #[test]
    fn a_missed_update_is_a_conflict_or_a_missing_job() {
        let id = Uuid::nil();
        assert!(matches!(
            update_missed(id, 3, None),
            StoreError::JobNotFound(i) if i == id
        ));
        assert!(matches!(
            update_missed(id, 3, Some(4)),
            StoreError::VersionConflict {
                expected: 3,
                current: 4,
                ..
            }
        ));
    }
}
