//! The herd lead: when many jobs come due close together, the timer takes them up early
//! enough for its fire transactions to record them all by the time they would usually
//! be armed. Arming `fire_ahead` before the time suits a steady trickle of fires; a herd
//! of 100 000 takes seconds to record, and whatever is not recorded by its instant is
//! recorded while it should be published, competing with publishing for the database
//! and the CPU. The lead is judged from the queue's counts per time bucket and the pace
//! at which recent fire transactions recorded runs; pure logic, no I/O.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::queue::CROWD_BUCKET;

/// Batches smaller than this say more about a transaction's fixed cost than about the
/// cost of a run, so they do not teach the pace.
const MIN_SAMPLE: usize = 100;
/// Assumed until a large batch was measured: slow on purpose, so a first herd is taken
/// up early rather than late.
const FIRST_GUESS_PER_RUN: Duration = Duration::from_micros(100);
/// Weight of the newest measurement in the pace.
const NEWEST_WEIGHT: f64 = 0.3;

/// How long fire transactions take per run recorded, learned from large batches.
#[derive(Debug, Clone, Copy)]
pub struct RecordingPace {
    secs_per_run: f64,
}

impl Default for RecordingPace {
    fn default() -> Self {
        Self {
            secs_per_run: FIRST_GUESS_PER_RUN.as_secs_f64(),
        }
    }
}

impl RecordingPace {
    /// A fire transaction recorded `runs` in `took`.
    pub fn observe(&mut self, runs: usize, took: Duration) {
        if runs >= MIN_SAMPLE {
            let measured = took.as_secs_f64() / runs as f64;
            self.secs_per_run += NEWEST_WEIGHT * (measured - self.secs_per_run);
        }
    }

    /// How long recording `runs` takes at this pace.
    pub fn time_for(&self, runs: u64) -> chrono::Duration {
        chrono::Duration::microseconds((self.secs_per_run * runs as f64 * 1e6).ceil() as i64)
    }
}

/// What the timer should take up now, and when to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lead {
    /// Take up every job whose arming time is at or before this (at least `now`).
    pub take_through: DateTime<Utc>,
    /// The next moment a crowd further on must be taken up, if any.
    pub wake_at: Option<DateTime<Utc>>,
}

/// Plans the lead from the queue's `crowds` (jobs per [`CROWD_BUCKET`] of arming time,
/// earliest first): a bucket is taken up once recording it and everything before it, at
/// `pace`, would run past the bucket's start. Only buckets within `max_lead` of `now`
/// count, and only while they hold at most `max_jobs` in all (the dispatcher must be able
/// to hold what is armed). A backlog recorded within one bucket's width needs no lead.
pub fn lead(
    now: DateTime<Utc>,
    crowds: impl IntoIterator<Item = (DateTime<Utc>, u32)>,
    pace: &RecordingPace,
    max_lead: chrono::Duration,
    max_jobs: u64,
) -> Lead {
    let limit = now + max_lead;
    let mut take_through = now;
    let mut wake_at: Option<DateTime<Utc>> = None;
    let mut jobs = 0u64;
    for (start, count) in crowds {
        jobs += u64::from(count);
        if start > limit || jobs > max_jobs {
            break;
        }
        let recording = pace.time_for(jobs);
        if recording < CROWD_BUCKET {
            continue;
        }
        let must_start = start - recording;
        if must_start <= now {
            take_through = (start + CROWD_BUCKET).min(limit);
            // Everything before this bucket goes with it.
            wake_at = None;
        } else {
            wake_at = Some(wake_at.map_or(must_start, |w| w.min(must_start)));
        }
    }
    Lead {
        take_through,
        wake_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration as Span;

    fn t0() -> DateTime<Utc> {
        "2026-11-21T10:00:00Z".parse().unwrap()
    }

    /// 40 000 runs per second.
    fn learned_pace() -> RecordingPace {
        let mut pace = RecordingPace::default();
        for _ in 0..50 {
            pace.observe(1000, Duration::from_millis(25));
        }
        pace
    }

    fn plan(now: DateTime<Utc>, crowds: &[(DateTime<Utc>, u32)]) -> Lead {
        lead(
            now,
            crowds.iter().copied(),
            &learned_pace(),
            Span::seconds(8),
            100_000,
        )
    }

    #[test]
    fn the_pace_follows_large_batches_only() {
        let mut pace = RecordingPace::default();
        assert_eq!(pace.time_for(10_000), Span::seconds(1));
        pace.observe(10, Duration::from_secs(1));
        assert_eq!(
            pace.time_for(10_000),
            Span::seconds(1),
            "a small batch teaches nothing"
        );
        let learned = learned_pace();
        let for_40k = learned.time_for(40_000);
        assert!(
            (Span::milliseconds(990)..=Span::milliseconds(1010)).contains(&for_40k),
            "{for_40k}"
        );
    }

    #[test]
    fn a_herd_is_taken_up_when_recording_it_would_run_past_its_arming_time() {
        let arm = t0() + Span::seconds(6);
        // 100 000 at 40 000/s take 2.5 s: start by arm - 2.5 s.
        let early = plan(t0(), &[(arm, 100_000)]);
        assert_eq!(early.take_through, t0(), "not yet");
        let wake = early.wake_at.expect("a wake for the herd");
        assert!(
            (wake - (arm - Span::milliseconds(2500))).abs() < Span::milliseconds(5),
            "{wake}"
        );
        let due = plan(arm - Span::milliseconds(2500), &[(arm, 100_000)]);
        assert_eq!(due.take_through, arm + CROWD_BUCKET);
        assert_eq!(due.wake_at, None);
    }

    #[test]
    fn a_steady_trickle_needs_no_lead() {
        // 1 000 jobs every 100 ms is 10 000 fires/s, a quarter of the recording pace.
        let crowds: Vec<_> = (0..80)
            .map(|i| (t0() + Span::milliseconds(100 * i), 1000))
            .collect();
        let lead = plan(t0() + Span::milliseconds(1), &crowds);
        assert!(
            lead.take_through <= t0() + Span::milliseconds(100),
            "only what is due now: {lead:?}"
        );
        let wake = lead.wake_at.expect("a later bucket to look at");
        assert!(wake > t0(), "{wake}");
        // A handful of jobs is recorded within a bucket: no lead, no early wake.
        let sparse = plan(t0(), &[(t0() + Span::seconds(3), 50)]);
        assert_eq!(
            sparse,
            Lead {
                take_through: t0(),
                wake_at: None
            }
        );
    }

    #[test]
    fn the_lead_is_bounded_in_time_and_in_jobs() {
        let far = t0() + Span::seconds(9);
        let beyond = plan(t0(), &[(far, 100_000)]);
        assert_eq!(
            beyond,
            Lead {
                take_through: t0(),
                wake_at: None
            },
            "past max_lead"
        );
        let too_many = plan(t0(), &[(t0() + Span::seconds(1), 150_000)]);
        assert_eq!(
            too_many.take_through,
            t0(),
            "more than the dispatcher holds"
        );
        // At the first guess's pace a herd right at the limit must start now: it is
        // taken up to the limit, not past it.
        let at_limit = lead(
            t0(),
            [(t0() + Span::seconds(8), 100_000)],
            &RecordingPace::default(),
            Span::seconds(8),
            100_000,
        );
        assert_eq!(at_limit.take_through, t0() + Span::seconds(8));
    }

    #[test]
    fn earlier_buckets_go_with_a_crowd_behind_them() {
        let crowds = [
            (t0() + Span::seconds(1), 2_000),
            (t0() + Span::seconds(2), 80_000),
        ];
        // 82 000 take 2.05 s: the crowd at +2 s must start now, and the one before it too.
        let lead = plan(t0(), &crowds);
        assert_eq!(lead.take_through, t0() + Span::seconds(2) + CROWD_BUCKET);
        assert_eq!(lead.wake_at, None);
    }
}
