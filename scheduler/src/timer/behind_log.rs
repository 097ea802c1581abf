//! What the timer says when jobs misfire: the misfires of a round counted by cause
//! ([`MisfireTally`]), and a limiter that lets the timer speak at most once every
//! [`LOG_EVERY`] ([`BehindLog`]), summing up what happened since it last did. A node
//! that cannot keep up misfires round after round; one line every few seconds says so
//! without flooding the log. Pure bookkeeping, no I/O.

use std::time::{Duration, Instant};

use crate::domain::behind::MisfireCause;

/// At most one misfire log line per this long.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Misfires counted by cause.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MisfireTally {
    /// Jobs that misfired while this node was responsible for them (it fell behind).
    pub behind_jobs: u64,
    /// Fires those jobs' misfire policies collapsed or dropped.
    pub behind_collapsed: u64,
    /// The latest any of those jobs was recorded after its missed due time, in ms.
    pub worst_behind_ms: i64,
    /// Jobs that misfired because nobody ran them at their due time (a restart, a
    /// takeover, a store outage).
    pub outage_jobs: u64,
    /// Fires those jobs' misfire policies collapsed or dropped.
    pub outage_collapsed: u64,
}

impl MisfireTally {
    /// Counts one misfired job: its cause, the fires its policy did not record, and how
    /// late (ms) it was recorded.
    pub fn count(&mut self, cause: MisfireCause, collapsed: u64, late_ms: i64) {
        match cause {
            MisfireCause::Behind => {
                self.behind_jobs += 1;
                self.behind_collapsed = self.behind_collapsed.saturating_add(collapsed);
                self.worst_behind_ms = self.worst_behind_ms.max(late_ms);
            }
            MisfireCause::Outage => {
                self.outage_jobs += 1;
                self.outage_collapsed = self.outage_collapsed.saturating_add(collapsed);
            }
        }
    }

    /// Adds `other` to this tally.
    pub fn add(&mut self, other: &MisfireTally) {
        self.behind_jobs += other.behind_jobs;
        self.behind_collapsed = self.behind_collapsed.saturating_add(other.behind_collapsed);
        self.worst_behind_ms = self.worst_behind_ms.max(other.worst_behind_ms);
        self.outage_jobs += other.outage_jobs;
        self.outage_collapsed = self.outage_collapsed.saturating_add(other.outage_collapsed);
    }

    /// Whether no job misfired.
    pub fn is_empty(&self) -> bool {
        self.behind_jobs == 0 && self.outage_jobs == 0
    }
}

/// Collects misfires and hands them out for logging at most once per [`LOG_EVERY`].
#[derive(Debug, Default)]
pub struct BehindLog {
    pending: MisfireTally,
    last: Option<Instant>,
}

impl BehindLog {
    /// Notes a round's misfires.
    pub fn note(&mut self, tally: &MisfireTally) {
        self.pending.add(tally);
    }

    /// What to log at `now`, if anything: everything noted since the last line, once
    /// [`LOG_EVERY`] has passed since it (the first misfire is logged at once).
    pub fn due(&mut self, now: Instant) -> Option<MisfireTally> {
        if self.pending.is_empty() || self.last.is_some_and(|last| now < last + LOG_EVERY) {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn behind(jobs: u64, collapsed: u64, late_ms: i64) -> MisfireTally {
        let mut tally = MisfireTally::default();
        for _ in 0..jobs {
            tally.count(MisfireCause::Behind, collapsed, late_ms);
        }
        tally
    }

    #[test]
    fn causes_are_counted_apart() {
        let mut tally = MisfireTally::default();
        tally.count(MisfireCause::Behind, 3, 6_500);
        tally.count(MisfireCause::Behind, 0, 7_000);
        tally.count(MisfireCause::Outage, 40, 3_600_000);
        assert_eq!(
            tally,
            MisfireTally {
                behind_jobs: 2,
                behind_collapsed: 3,
                worst_behind_ms: 7_000,
                outage_jobs: 1,
                outage_collapsed: 40,
            }
        );
        assert!(!tally.is_empty());
        assert!(MisfireTally::default().is_empty());
    }

    #[test]
    fn one_line_per_interval_summing_up_the_rest() {
        let mut log = BehindLog::default();
        let start = Instant::now();
        assert_eq!(log.due(start), None, "nothing to say");
        log.note(&behind(1, 2, 6_000));
        assert_eq!(
            log.due(start),
            Some(behind(1, 2, 6_000)),
            "the first at once"
        );
        log.note(&behind(1, 1, 8_000));
        log.note(&behind(2, 0, 5_500));
        assert_eq!(
            log.due(start + Duration::from_secs(9)),
            None,
            "rate-limited"
        );
        let summed = log
            .due(start + LOG_EVERY)
            .expect("a line after the interval");
        assert_eq!(
            (
                summed.behind_jobs,
                summed.behind_collapsed,
                summed.worst_behind_ms
            ),
            (3, 1, 8_000)
        );
        assert_eq!(log.due(start + LOG_EVERY * 3), None, "all said");
    }
}
