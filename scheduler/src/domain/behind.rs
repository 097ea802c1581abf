//! Telling a node that falls behind from one that was away: why a job misfired.
//!
//! A job misfires when its oldest due fire is recorded more than `misfire_grace` late
//! (see [`super::misfire`]). That happens when no node was running the job at its due
//! time (the node was down or restarting, took the job's shard over from a dead node,
//! or could not reach its store) — an *outage* — or when this node held the job's shard
//! and had the job in its timer and was simply too slow to record it in time: it is
//! *behind*, and only that means "this node cannot keep up". The timer knows since when
//! it has been responsible for each shard (held it and loaded its jobs); a missed due
//! time at or after that instant is its own lateness.

use chrono::{DateTime, Duration, Utc};

/// Why a job misfired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MisfireCause {
    /// This node held the job's shard, and had it in its timer, at the missed due time:
    /// it could not keep up.
    Behind,
    /// Nobody was running the job at its due time (a restart, a takeover, a store
    /// outage).
    Outage,
}

impl MisfireCause {
    /// The cause's name in metrics (`cause` label) and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            MisfireCause::Behind => "behind",
            MisfireCause::Outage => "outage",
        }
    }
}

/// Why a job whose oldest missed due time is `missed_due` misfired, given since when
/// this node has continuously held the job's shard with its jobs loaded in the timer
/// (`None`: it does not, or the timer was interrupted and has not reloaded it since).
pub fn misfire_cause(
    missed_due: DateTime<Utc>,
    responsible_since: Option<DateTime<Utc>>,
) -> MisfireCause {
    match responsible_since {
        Some(since) if missed_due >= since => MisfireCause::Behind,
        _ => MisfireCause::Outage,
    }
}

/// How late a fire due at `due` is when recorded at `at` (zero when early: armed).
pub fn lateness(due: DateTime<Utc>, at: DateTime<Utc>) -> Duration {
    (at - due).max(Duration::zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_due_time_while_responsible_is_behind() {
        let since = at("2026-11-21T10:00:00Z");
        assert_eq!(
            misfire_cause(at("2026-11-21T10:00:05Z"), Some(since)),
            MisfireCause::Behind
        );
        assert_eq!(misfire_cause(since, Some(since)), MisfireCause::Behind);
    }

    #[test]
    fn a_due_time_before_the_timer_took_the_shard_is_an_outage() {
        let since = at("2026-11-21T10:00:00Z");
        // Due before a restart (or a takeover): nobody ran it then.
        assert_eq!(
            misfire_cause(at("2026-11-21T09:59:59.999Z"), Some(since)),
            MisfireCause::Outage
        );
        // Not held (or interrupted) now.
        assert_eq!(
            misfire_cause(at("2026-11-21T10:00:05Z"), None),
            MisfireCause::Outage
        );
        assert_eq!(MisfireCause::Behind.as_str(), "behind");
        assert_eq!(MisfireCause::Outage.as_str(), "outage");
    }

    #[test]
    fn lateness_is_never_negative() {
        let due = at("2026-11-21T10:00:00Z");
        assert_eq!(lateness(due, due - Duration::seconds(2)), Duration::zero());
        assert_eq!(
            lateness(due, due + Duration::milliseconds(7_250)),
            Duration::milliseconds(7_250)
        );
    }

    proptest! {
        /// Behind exactly when the due time is not before the responsibility began;
        /// the later the responsibility began, the fewer misfires are the node's own.
        #[test]
        fn behind_iff_due_within_responsibility(due_s in 0i64..1_000, since_s in 0i64..1_000, later_s in 0i64..100) {
            let base = at("2026-11-21T10:00:00Z");
            let due = base + Duration::seconds(due_s);
            let since = base + Duration::seconds(since_s);
            let cause = misfire_cause(due, Some(since));
            prop_assert_eq!(cause == MisfireCause::Behind, due >= since);
            if misfire_cause(due, Some(since + Duration::seconds(later_s))) == MisfireCause::Behind {
                prop_assert_eq!(cause, MisfireCause::Behind);
            }
        }
    }
}
