//! How the reconciler paces itself ([`ReconcileSettings`]), why a pass runs
//! ([`PassKind`]), and what each kind of pass counts as overdue: where `scheduled` runs
//! start to count ([`unconfirmed_cutoff`]).

use std::time::Duration;

use crate::domain::window::MAX_JITTER;

/// How far apart two nodes' clocks may be when one takes over the other's armed runs.
const CLOCK_SKEW: Duration = Duration::from_secs(1);

/// How the reconciler paces itself.
#[derive(Debug, Clone, Copy)]
pub struct ReconcileSettings {
    /// Age at which an unconfirmed `scheduled` run is published again.
    pub republish_after: Duration,
    /// Time between passes.
    pub interval: Duration,
    /// How far ahead of now the timer may record fires
    /// ([`crate::timer::TimerSettings::arming_horizon`]): a pass taking over shards collects
    /// `scheduled` runs due up to this long (plus `CLOCK_SKEW`) from now.
    pub armed_ahead: Duration,
    /// How late a fire may be before it is a misfire
    /// ([`crate::timer::TimerSettings::misfire_grace`]): a start or takeover pass judges
    /// first-attempt `scheduled` fires later than this by their job's misfire policy
    /// ([`super::missed`]).
    pub misfire_grace: Duration,
    /// How long a start or takeover pass waits for acks of the previous owner's past-due
    /// `scheduled` runs before publishing them again (setting `takeover_ack_wait`); zero
    /// publishes them at once.
    pub takeover_ack_wait: Duration,
}

/// Why a pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PassKind {
    /// Every `interval`.
    Periodic,
    /// The first pass of this process.
    Start,
    /// This node just gained shards.
    Takeover,
    /// The first pass after the collector's first progress probe came back: the start
    /// pass judged no ack or run deadline, so this one walks them all.
    FirstProbe,
}

impl PassKind {
    /// The `reason` label of the re-publishes of `scheduled` runs.
    pub(super) fn reason(self) -> &'static str {
        match self {
            PassKind::Periodic | PassKind::Start | PassKind::FirstProbe => "unconfirmed",
            PassKind::Takeover => "takeover",
        }
    }
}

/// Where `scheduled` runs count as overdue, relative to now: `republish_after` ago for
/// a periodic pass; at start and on a takeover as far ahead as a previous owner may have
/// armed fires (its clock may run ahead of ours) plus the longest jitter (a jittered
/// fire is recorded at its fire time and due up to [`MAX_JITTER`] later), as nobody else
/// will publish the runs it recorded, armed and jittered ones included: those not yet
/// due are held here until they are.
pub(super) fn unconfirmed_cutoff(settings: &ReconcileSettings, kind: PassKind) -> chrono::Duration {
    let bounded = |d: Duration| chrono::Duration::from_std(d).expect("bounded setting");
    match kind {
        PassKind::Periodic | PassKind::FirstProbe => -bounded(settings.republish_after),
        PassKind::Start | PassKind::Takeover => {
            bounded(settings.armed_ahead + CLOCK_SKEW + MAX_JITTER)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timer::TimerSettings;

    fn arming_horizon(fire_ahead: Duration) -> Duration {
        TimerSettings {
            lookahead: Duration::from_secs(60),
            misfire_grace: Duration::from_secs(5),
            fire_ahead,
        }
        .arming_horizon()
    }

    #[test]
    fn a_takeover_collects_everything_the_previous_owner_may_have_armed() {
        for fire_ahead in [0, 500, 2_000, 10_000].map(Duration::from_millis) {
            let settings = ReconcileSettings {
                republish_after: Duration::from_secs(10),
                interval: Duration::from_secs(1),
                armed_ahead: arming_horizon(fire_ahead),
                misfire_grace: Duration::from_secs(5),
                takeover_ack_wait: Duration::from_millis(500),
            };
            // One fire transaction records up to the horizon, past `fire_ahead` itself.
            let armed = chrono::Duration::from_std(arming_horizon(fire_ahead)).unwrap();
            assert!(armed >= chrono::Duration::from_std(fire_ahead).unwrap());
            for kind in [PassKind::Start, PassKind::Takeover] {
                assert!(
                    unconfirmed_cutoff(&settings, kind) > armed,
                    "{fire_ahead:?}"
                );
                // A jittered fire waits up to an hour after its fire time.
                assert!(
                    unconfirmed_cutoff(&settings, kind)
                        > armed + chrono::Duration::from_std(MAX_JITTER).unwrap(),
                    "{fire_ahead:?}"
                );
            }
            assert_eq!(
                unconfirmed_cutoff(&settings, PassKind::Periodic),
                -chrono::Duration::seconds(10)
            );
        }
        // A herd may be armed up to 10 s ahead with the default 2 s `fire_ahead`.
        assert_eq!(
            arming_horizon(Duration::from_secs(2)),
            Duration::from_millis(10_200)
        );
        assert_eq!(arming_horizon(Duration::ZERO), Duration::ZERO);
    }
}
