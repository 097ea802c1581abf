//! How the reconciler paces itself: the settings the daemon hands it.

use std::time::Duration;

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
    /// (`missed`).
    pub misfire_grace: Duration,
    /// How long a start or takeover pass waits for acks of the previous owner's past-due
    /// `scheduled` runs before publishing them again (setting `takeover_ack_wait`); zero
    /// publishes them at once.
    pub takeover_ack_wait: Duration,
}
