//! What one reconciler pass did ([`PassReport`]): the counts tests assert on and the
//! pass's log line reports.

use std::collections::BTreeMap;

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
    /// Held `buffer_one` fires released because their job's previous run finished
    /// (published as overdue `scheduled` runs in the same pass).
    pub released: usize,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_report_says_why_each_run_went_out_again() {
        let mut report = PassReport::default();
        for reason in ["ack_timeout", "unconfirmed", "ack_timeout", "retry"] {
            report.count_republished(reason);
        }
        assert_eq!(report.republished(), 4);
        assert_eq!(
            report.republish_reasons(),
            "ack_timeout=2 retry=1 unconfirmed=1"
        );
    }
}
