//! Which deliveries on one channel are settled, and which acknowledgements go out next.
//! No I/O: the settler's task feeds it settlements and the clock, and sends what it hands
//! back.
//!
//! Delivery tags count up from 1 on a channel, across every consumer on it. One
//! `basic.ack` with `multiple` settles every outstanding tag up to its own, so it may only
//! be sent once every lower tag is settled: acked, or rejected or requeued on its own
//! before it. A tag still running (or not yet seen) blocks the ones above it; they are
//! acked one by one once they have waited [`STRAGGLER_AFTER`], or at once when waiting
//! acks could use up the prefetch.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

/// How long the first waiting ack may wait for others to join it in one `multiple` ack.
pub(super) const ACK_WINDOW: Duration = Duration::from_millis(5);
/// How long an ack blocked by a lower, unsettled tag waits before it is sent on its own.
pub(super) const STRAGGLER_AFTER: Duration = Duration::from_millis(20);

/// A channel's delivery tag, as the broker numbers them.
pub(super) type DeliveryTag = u64;

/// What to send now: one `multiple` ack (through the acker of the highest tag it covers)
/// and single acks. The `multiple` ack goes first, but either order is safe: they cover
/// disjoint tags.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Due<A> {
    pub(super) multiple: Option<(DeliveryTag, A)>,
    pub(super) single: Vec<(DeliveryTag, A)>,
}

#[cfg(test)]
impl<A> Due<A> {
    fn is_empty(&self) -> bool {
        self.multiple.is_none() && self.single.is_empty()
    }
}

/// An ack settled by the handler and not yet sent.
#[derive(Debug)]
struct Waiting<A> {
    since: Instant,
    acker: A,
}

/// The settlements of one channel above the highest tag known settled with the broker.
#[derive(Debug)]
pub(super) struct AckBook<A> {
    /// Every tag up to and including this one is settled with the broker.
    through: DeliveryTag,
    /// Acks to send, by tag (all above `through`).
    waiting: BTreeMap<DeliveryTag, Waiting<A>>,
    /// Tags above `through` already settled with the broker on their own, as disjoint,
    /// non-adjacent ranges (first → last): behind a long-running task they pile up,
    /// and ranges keep that to a handful of entries.
    sent: BTreeMap<DeliveryTag, DeliveryTag>,
    /// Waiting acks at which they are sent without waiting further, so that they never
    /// hold back the broker's next deliveries.
    pressure_at: usize,
    /// When the waiting acks are next looked at.
    next_flush: Option<Instant>,
}

impl<A> AckBook<A> {
    /// A book for a fresh channel whose consumers each have `prefetch` deliveries in
    /// flight at most.
    pub(super) fn new(prefetch: u16) -> Self {
        Self {
            through: 0,
            waiting: BTreeMap::new(),
            sent: BTreeMap::new(),
            pressure_at: usize::from(prefetch / 2).max(1),
            next_flush: None,
        }
    }

    /// Acks that have not been sent.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The delivery `tag` is done; its ack (through `acker`) is sent by a later
    /// [`AckBook::take_due`].
    pub(super) fn ack_later(&mut self, tag: DeliveryTag, acker: A, now: Instant) {
        debug_assert!(!self.is_settled(tag), "delivery tag {tag} settled twice");
        self.waiting.insert(tag, Waiting { since: now, acker });
        self.next_flush.get_or_insert(now + ACK_WINDOW);
    }

    /// The delivery `tag` was settled with the broker on its own, e.g. rejected.
    pub(super) fn sent(&mut self, tag: DeliveryTag) {
        debug_assert!(!self.is_settled(tag), "delivery tag {tag} settled twice");
        let mut first = tag;
        let mut last = tag;
        if let Some((&before_first, &before_last)) = self.sent.range(..tag).next_back()
            && before_last + 1 == tag
        {
            first = before_first;
        }
        if let Some(after_last) = self.sent.remove(&(tag + 1)) {
            last = after_last;
        }
        self.sent.insert(first, last);
    }

    /// When the waiting acks are next due, if any wait. Under pressure they are due at
    /// once, whatever this says.
    pub(super) fn next_flush(&self) -> Option<Instant> {
        self.next_flush
    }

    /// Whether the waiting acks should go out now rather than at [`AckBook::next_flush`].
    fn under_pressure(&self) -> bool {
        self.waiting.len() >= self.pressure_at
    }

    /// What to send at `now`: nothing before the flush time (unless under pressure);
    /// then the settled prefix as one `multiple` ack, and on their own the acks blocked
    /// behind an unsettled tag that waited [`STRAGGLER_AFTER`] (all of them under pressure).
    pub(super) fn take_due(&mut self, now: Instant) -> Due<A> {
        let pressure = self.under_pressure();
        if !pressure && self.next_flush.is_none_or(|at| at > now) {
            return Due {
                multiple: None,
                single: Vec::new(),
            };
        }
        let due = Due {
            multiple: self.take_prefix(),
            single: self.take_blocked(now, pressure),
        };
        self.next_flush = (!self.waiting.is_empty()).then_some(now + ACK_WINDOW);
        due
    }

    /// Everything waiting, as at a drain: the prefix as one `multiple` ack, the rest on
    /// their own.
    pub(super) fn take_all(&mut self) -> Due<A> {
        let due = Due {
            multiple: self.take_prefix(),
            single: self.take_blocked(Instant::now(), true),
        };
        self.next_flush = None;
        due
    }

    fn is_settled(&self, tag: DeliveryTag) -> bool {
        tag <= self.through
            || self.waiting.contains_key(&tag)
            || self
                .sent
                .range(..=tag)
                .next_back()
                .is_some_and(|(_, &last)| tag <= last)
    }

    /// Moves `through` over the contiguous settled tags above it and returns the highest
    /// waiting ack among them, whose `multiple` ack settles all of them.
    fn take_prefix(&mut self) -> Option<(DeliveryTag, A)> {
        let mut highest_waiting = None;
        loop {
            let next = self.through + 1;
            if let Some(waiting) = self.waiting.remove(&next) {
                self.through = next;
                highest_waiting = Some((next, waiting.acker));
            } else if let Some(last) = self.sent.remove(&next) {
                self.through = last;
            } else {
                return highest_waiting;
            }
        }
    }

    /// Takes the waiting acks older than [`STRAGGLER_AFTER`] (or all with `everything`)
    /// out as single acks.
    fn take_blocked(&mut self, now: Instant, everything: bool) -> Vec<(DeliveryTag, A)> {
        let due: Vec<DeliveryTag> = self
            .waiting
            .iter()
            .filter(|(_, waiting)| {
                everything || now.duration_since(waiting.since) >= STRAGGLER_AFTER
            })
            .map(|(&tag, _)| tag)
            .collect();
        due.into_iter()
            .map(|tag| {
                let waiting = self.waiting.remove(&tag).expect("listed above");
                self.sent(tag);
                (tag, waiting.acker)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn tags<A>(due: &Due<A>) -> (Option<DeliveryTag>, Vec<DeliveryTag>) {
        (
            due.multiple.as_ref().map(|(tag, _)| *tag),
            due.single.iter().map(|(tag, _)| *tag).collect(),
        )
    }

    #[test]
    fn acks_wait_for_the_window_then_go_as_one_multiple_ack() {
        let start = Instant::now();
        let mut book = AckBook::new(500);
        for tag in 1..=3 {
            book.ack_later(tag, tag, start);
        }
        assert_eq!(book.next_flush(), Some(start + ACK_WINDOW));
        assert!(book.take_due(start + ACK_WINDOW / 2).is_empty());

        let due = book.take_due(start + ACK_WINDOW);
        assert_eq!(
            due.multiple,
            Some((3, 3)),
            "the highest tag's acker settles all"
        );
        assert!(due.single.is_empty());
        assert_eq!(book.waiting(), 0);
        assert_eq!(book.next_flush(), None, "nothing waits, so no timer");
    }

    #[test]
    fn an_unsettled_tag_blocks_the_tags_above_it_until_they_straggle() {
        let start = Instant::now();
        let mut book = AckBook::new(500);
        // Tag 2 is still running.
        for tag in [1, 3, 4] {
            book.ack_later(tag, tag, start);
        }
        let due = book.take_due(start + ACK_WINDOW);
        assert_eq!(tags(&due), (Some(1), vec![]));
        assert_eq!(book.waiting(), 2);
        assert_eq!(
            book.next_flush(),
            Some(start + 2 * ACK_WINDOW),
            "blocked acks keep a timer running"
        );
        assert!(tags(&book.take_due(start + 2 * ACK_WINDOW)) == (None, vec![]));

        let due = book.take_due(start + STRAGGLER_AFTER);
        assert_eq!(tags(&due), (None, vec![3, 4]), "stragglers go on their own");
        assert_eq!(book.waiting(), 0);

        // When tag 2 settles, it is the only one left to ack, and the prefix passes the
        // stragglers without acking them again.
        let later = start + STRAGGLER_AFTER * 2;
        book.ack_later(2, 2, later);
        book.ack_later(5, 5, later);
        let due = book.take_due(later + ACK_WINDOW);
        assert_eq!(tags(&due), (Some(5), vec![]));
    }

    #[test]
    fn rejected_tags_join_the_prefix_but_are_never_the_multiple_acks_own_tag() {
        let start = Instant::now();
        let mut book = AckBook::new(500);
        book.ack_later(1, 1, start);
        book.sent(2);
        book.ack_later(3, 3, start);
        book.sent(4);
        let due = book.take_due(start + ACK_WINDOW);
        assert_eq!(tags(&due), (Some(3), vec![]));
        // Tag 4 is settled too: the next multiple ack starts above it.
        book.ack_later(5, 5, start + ACK_WINDOW);
        let due = book.take_due(start + 2 * ACK_WINDOW);
        assert_eq!(tags(&due), (Some(5), vec![]));
    }

    #[test]
    fn a_prefix_of_rejects_alone_sends_nothing() {
        let start = Instant::now();
        let mut book: AckBook<u64> = AckBook::new(500);
        book.sent(1);
        book.sent(2);
        book.ack_later(4, 4, start);
        let due = book.take_due(start + ACK_WINDOW);
        assert_eq!(tags(&due), (None, vec![]));
        book.ack_later(3, 3, start + ACK_WINDOW);
        let due = book.take_due(start + 2 * ACK_WINDOW);
        assert_eq!(tags(&due), (Some(4), vec![]));
    }

    #[test]
    fn acks_that_could_fill_the_prefetch_go_at_once_even_when_blocked() {
        let start = Instant::now();
        let mut book = AckBook::new(10);
        // Tag 1 runs long; tags 2..=5 finish: half the prefetch is waiting.
        for tag in 2..=5 {
            book.ack_later(tag, tag, start);
            assert!(!book.under_pressure());
        }
        book.ack_later(6, 6, start);
        assert!(book.under_pressure());
        let due = book.take_due(start);
        assert_eq!(tags(&due), (None, vec![2, 3, 4, 5, 6]));
    }

    #[test]
    fn with_a_prefetch_of_one_every_ack_goes_at_once() {
        let start = Instant::now();
        let mut book = AckBook::new(1);
        book.ack_later(1, 1, start);
        assert_eq!(tags(&book.take_due(start)), (Some(1), vec![]));
    }

    #[test]
    fn a_drain_takes_everything() {
        let start = Instant::now();
        let mut book = AckBook::new(500);
        for tag in [1, 2, 4, 6] {
            book.ack_later(tag, tag, start);
        }
        let due = book.take_all();
        assert_eq!(tags(&due), (Some(2), vec![4, 6]));
        assert_eq!(book.waiting(), 0);
        assert_eq!(book.next_flush(), None);
    }

    #[test]
    fn tags_sent_behind_a_long_task_collapse_into_one_range() {
        let start = Instant::now();
        let mut book = AckBook::new(500);
        for tag in 2..=1000 {
            book.ack_later(tag, tag, start);
        }
        let due = book.take_due(start + STRAGGLER_AFTER);
        assert_eq!(due.single.len(), 999);
        assert_eq!(
            book.sent.len(),
            1,
            "one range, not 999 entries: {:?}",
            book.sent
        );
        // Tag 1 is rejected at last: the next ack covers everything up to itself.
        book.sent(1);
        book.ack_later(1001, 1001, start + STRAGGLER_AFTER);
        let due = book.take_due(start + STRAGGLER_AFTER + ACK_WINDOW);
        assert_eq!(tags(&due), (Some(1001), vec![]));
        assert_eq!(book.through, 1001);
        assert!(book.sent.is_empty());
    }

    /// Settles `1..=order.len()` in `order`, rejecting the tags in `rejected`, with
    /// `gaps_ms` between settlements, flushing after each; returns every tag acked, and
    /// fails if a `multiple` ack covers an unsettled tag or a tag is acked twice.
    fn settle_all(
        order: &[u64],
        rejected: &BTreeSet<u64>,
        gaps_ms: &[u64],
        prefetch: u16,
    ) -> BTreeSet<u64> {
        let start = Instant::now();
        let mut book = AckBook::new(prefetch);
        let mut settled = BTreeSet::new();
        let mut acked = BTreeSet::new();
        let mut covered_through = 0;
        let mut apply = |due: Due<u64>, settled: &BTreeSet<u64>, acked: &mut BTreeSet<u64>| {
            if let Some((top, acker)) = due.multiple {
                assert_eq!(top, acker, "the ack goes through the top tag's acker");
                assert!(!rejected.contains(&top), "a multiple ack on a rejected tag");
                for tag in covered_through + 1..=top {
                    assert!(
                        settled.contains(&tag),
                        "multiple ack of {top} covers unsettled {tag}"
                    );
                    if !rejected.contains(&tag) {
                        acked.insert(tag);
                    }
                }
                covered_through = top;
            }
            for (tag, acker) in due.single {
                assert_eq!(tag, acker);
                assert!(
                    tag > covered_through && acked.insert(tag),
                    "tag {tag} acked twice"
                );
            }
        };
        let mut now = start;
        for (tag, gap) in order.iter().copied().zip(gaps_ms.iter().cycle()) {
            now += Duration::from_millis(*gap);
            if rejected.contains(&tag) {
                book.sent(tag);
            } else {
                book.ack_later(tag, tag, now);
            }
            settled.insert(tag);
            apply(book.take_due(now), &settled, &mut acked);
            assert!(
                book.waiting() < usize::from(prefetch / 2).max(1),
                "pressure left acks waiting"
            );
        }
        apply(book.take_all(), &settled, &mut acked);
        acked
    }

    proptest! {
        #[test]
        fn every_settled_ack_goes_out_exactly_once_and_never_early(
            order in Just((1..=300u64).collect::<Vec<_>>()).prop_shuffle(),
            rejected in proptest::collection::btree_set(1..=300u64, 0..30),
            gaps_ms in proptest::collection::vec(0..8u64, 1..50),
            prefetch in 1..200u16,
        ) {
            let acked = settle_all(&order, &rejected, &gaps_ms, prefetch);
            let expected: BTreeSet<u64> = (1..=300).filter(|t| !rejected.contains(t)).collect();
            prop_assert_eq!(acked, expected);
        }
    }
}
