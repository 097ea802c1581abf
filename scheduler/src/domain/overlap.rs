//! Whether a job may fire while its previous run is unfinished.

use serde::{Deserialize, Serialize};

/// Whether a job may fire while its previous run is unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OverlapPolicy {
    /// Fire on schedule regardless of earlier runs.
    #[default]
    Allow,
    /// Skip a fire while the job has a run that is not finished (`scheduled`,
    /// `dispatched`, `acked`, or `failed` waiting for its retry), whichever node
    /// recorded it.
    Forbid,
    /// Like `forbid`, except that one fire waits: the first fire while the job has an
    /// unfinished run is recorded and held (`waiting_for: previous`) until the job has no
    /// other unfinished run, then dispatched; further fires while one is held are
    /// skipped.
    BufferOne,
}

impl OverlapPolicy {
    /// Every policy, in the order the API lists them.
    pub const ALL: [OverlapPolicy; 3] = [
        OverlapPolicy::Allow,
        OverlapPolicy::Forbid,
        OverlapPolicy::BufferOne,
    ];

    /// The policy's name in the API and in the store (the same as its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            OverlapPolicy::Allow => "allow",
            OverlapPolicy::Forbid => "forbid",
            OverlapPolicy::BufferOne => "buffer_one",
        }
    }

    /// Whether a fire waits for the job's unfinished runs (`forbid`, `buffer_one`): such
    /// jobs are not armed ahead, and their unfinished runs are the indexed ones.
    pub fn waits(self) -> bool {
        self != OverlapPolicy::Allow
    }

    /// How many of the fires due at once for a job become runs given whether it has an
    /// unfinished run (`busy`) and whether one of those is a held fire (`held`):
    /// `(dispatched, held)` — the first `dispatched` fire times are recorded as usual,
    /// the next `held` ones are recorded and held, and the rest are skipped.
    pub fn admits(self, busy: bool, held: bool) -> (usize, usize) {
        match (self, busy, held) {
            (OverlapPolicy::Allow, ..) => (usize::MAX, 0),
            (OverlapPolicy::Forbid, false, _) => (usize::MAX, 0),
            (OverlapPolicy::Forbid, true, _) => (0, 0),
            (OverlapPolicy::BufferOne, false, _) => (1, 1),
            (OverlapPolicy::BufferOne, true, false) => (0, 1),
            (OverlapPolicy::BufferOne, true, true) => (0, 0),
        }
    }

    /// The policy named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::OverlapPolicy;

    #[test]
    fn names_round_trip() {
        for policy in OverlapPolicy::ALL {
            assert_eq!(OverlapPolicy::parse(policy.as_str()), Some(policy));
        }
        assert_eq!(
            OverlapPolicy::parse("buffer_one"),
            Some(OverlapPolicy::BufferOne)
        );
        assert_eq!(OverlapPolicy::parse("buffer"), None);
    }

    #[test]
    fn buffer_one_holds_one_fire_while_busy_and_skips_the_rest() {
        let b = OverlapPolicy::BufferOne;
        assert_eq!(b.admits(false, false), (1, 1));
        assert_eq!(b.admits(true, false), (0, 1));
        assert_eq!(b.admits(true, true), (0, 0));
        assert_eq!(OverlapPolicy::Forbid.admits(true, false), (0, 0));
        assert_eq!(OverlapPolicy::Forbid.admits(false, false), (usize::MAX, 0));
        assert!(b.waits() && OverlapPolicy::Forbid.waits() && !OverlapPolicy::Allow.waits());
    }
}
