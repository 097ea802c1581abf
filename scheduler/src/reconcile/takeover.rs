//! The takeover wait: a start or takeover pass finds the previous owner's `scheduled`
//! runs whose fire time has passed, which it may have published and died before marking
//! `dispatched`. Before publishing them again the pass waits up to `takeover_ack_wait`
//! (the `takeover_ack_wait` setting) for their acks, once per pass however many
//! pages it reads.

use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use crate::{
    store::{OverdueRun, Store, StoreError},
    telemetry,
};

/// How often the takeover wait looks whether its runs were answered.
const TAKEOVER_ACK_POLL: Duration = Duration::from_millis(100);

/// Of `items` (the previous owner's `scheduled` runs whose fire time has passed), those
/// still `scheduled` after waiting up to `wait` for their acks: a task the dead node
/// published reaches a live consumer within milliseconds, and its ack makes the run
/// `acked`; publishing it again would hand a second copy to another instance, whose
/// idempotency store (in memory by default) may not know it. Those answered meanwhile
/// are counted in `chime_republishes_withheld_total{reason="takeover_answered"}`.
///
/// The wait ends at `deadline`, which the pass's first page to wait sets; later pages
/// wait only for what is left of it, so a takeover of many pages waits `wait` once, not
/// once per page. A zero `wait` returns `items` at once.
pub(super) async fn unanswered(
    store: &dyn Store,
    wait: Duration,
    items: Vec<OverdueRun>,
    deadline: &mut Option<Instant>,
) -> Result<Vec<OverdueRun>, StoreError> {
    if items.is_empty() || wait.is_zero() {
        return Ok(items);
    }
    let ids: Vec<uuid::Uuid> = items.iter().map(|i| i.run.id).collect();
    let deadline = takeover_deadline(deadline, Instant::now(), wait);
    let mut still = store.scheduled_runs(&ids).await?;
    while !still.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(
            TAKEOVER_ACK_POLL.min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
        let left: Vec<uuid::Uuid> = still.iter().copied().collect();
        still = store.scheduled_runs(&left).await?;
    }
    let answered = items.len() - still.len();
    if answered > 0 {
        metrics::counter!(telemetry::REPUBLISHES_WITHHELD, "reason" => "takeover_answered")
            .increment(answered as u64);
        info!(
            answered,
            left = still.len(),
            "runs taken over were answered while waiting; not publishing them again"
        );
    }
    Ok(items
        .into_iter()
        .filter(|i| still.contains(&i.run.id))
        .collect())
}

/// When a pass's takeover wait ends: `now + wait` for its first page with runs to wait
/// for, the same instant for every later page.
fn takeover_deadline(deadline: &mut Option<Instant>, now: Instant, wait: Duration) -> Instant {
    *deadline.get_or_insert(now + wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_takeover_of_many_pages_waits_for_acks_once() {
        let start = Instant::now();
        // The default `takeover_ack_wait`.
        let wait = Duration::from_millis(500);
        let mut deadline = None;
        let first = takeover_deadline(&mut deadline, start, wait);
        assert_eq!(first, start + wait);
        // A later page, read after the first page's wait ran out, does not wait again.
        let later = takeover_deadline(&mut deadline, start + wait * 3, wait);
        assert_eq!(later, first);
        // A new pass waits afresh.
        let mut next_pass = None;
        assert_eq!(
            takeover_deadline(&mut next_pass, start + wait * 3, wait),
            start + wait * 4
        );
    }
}
