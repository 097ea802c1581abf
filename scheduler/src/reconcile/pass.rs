//! What a reconciler pass is: why it runs ([`PassKind`]), which `scheduled` runs it
//! takes ([`unconfirmed_cutoff`]), how long a takeover waits for acks
//! ([`takeover_deadline`]), and what it did ([`PassReport`]). Pure; the pass itself is
//! [`super::Reconciler`]'s.

use std::{collections::BTreeMap, time::Duration};

use super::settings::ReconcileSettings;

/// How far apart two nodes' clocks may be when one takes over the other's armed runs.
const CLOCK_SKEW: Duration = Duration::from_secs(1);

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

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// Overdue runs examined.
    pub examined: usize,
    /// Runs handed to the dispatcher again (same or next attempt), by why: the `reason`
    /// of `chime_republishes_total` (`unconfirmed`, `takeover`, `ack_timeout`,
    /// `run_timeout`), or `retry` for a failed attempt's next.
    pub republished_by: BTreeMap<&'static str, usize>,
    /// Overdue `scheduled` runs left alone because the broker confirmed their tasks and
    /// only their `dispatched` mark is not written yet (the store is behind).
    pub awaiting_mark: usize,
    /// Overdue `dispatched` and `acked` runs left alone because the reply that answers
    /// them may still wait in the reply queue (the collector is behind).
    pub awaiting_replies: usize,
    /// Runs given up in this pass.
    pub killed: usize,
    /// `dispatched` runs past their ack deadline whose work queue had no consumer: the
    /// deadline moved on, no attempt used.
    pub waiting_for_consumer: usize,
    /// Dead letters published and confirmed.
    pub dead_lettered: usize,
}

impl PassReport {
    pub(super) fn count_republished(&mut self, reason: &'static str) {
        *self.republished_by.entry(reason).or_default() += 1;
    }

    /// Runs handed to the dispatcher again, for any reason.
    pub fn republished(&self) -> usize {
        self.republished_by.values().sum()
    }

    /// `republished_by` for a log line, e.g. `ack_timeout=3 unconfirmed=1`.
    pub fn republish_reasons(&self) -> String {
        self.republished_by
            .iter()
            .map(|(reason, count)| format!("{reason}={count}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// When a pass's takeover wait ends: `now + wait` for its first page with runs to wait
/// for, the same instant for every later page.
pub(super) fn takeover_deadline(
    deadline: &mut Option<tokio::time::Instant>,
    now: tokio::time::Instant,
    wait: Duration,
) -> tokio::time::Instant {
    *deadline.get_or_insert(now + wait)
}

/// Where `scheduled` runs count as overdue, relative to now: `republish_after` ago for
/// a periodic pass; at start and on a takeover as far ahead as a previous owner may have
/// armed fires (its clock may run ahead of ours), as nobody else will publish the runs
/// it recorded, armed ones included.
pub(super) fn unconfirmed_cutoff(settings: &ReconcileSettings, kind: PassKind) -> chrono::Duration {
    let bounded = |d: Duration| chrono::Duration::from_std(d).expect("bounded setting");
    match kind {
        PassKind::Periodic | PassKind::FirstProbe => -bounded(settings.republish_after),
        PassKind::Start | PassKind::Takeover => bounded(settings.armed_ahead + CLOCK_SKEW),
    }
}
