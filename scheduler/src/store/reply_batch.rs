//! A batch of replies applied round by round, one transaction per round (the rounds are
//! `reply_plan`'s): what both backends keep account of around their SQL, so a failing
//! round reports what the rounds before it committed.

use chime_consumer::protocol::Reply;

use super::{
    RepliesFailed, StoreError,
    reply_plan::{Round, in_batch_order, rounds},
    types::{RecordedReplies, ReplyApplied},
};

/// Applies `batch` round by round with `record_round`, which applies one round in one
/// transaction and returns what each of its replies (by batch index) did; stops at the
/// first round that fails.
pub(crate) async fn record_rounds<F, Fut>(
    batch: &[&Reply],
    mut record_round: F,
) -> Result<RecordedReplies, RepliesFailed>
where
    F: FnMut(Round) -> Fut,
    Fut: Future<Output = Result<Vec<(usize, ReplyApplied)>, StoreError>>,
{
    let mut progress = BatchProgress::new(batch.len());
    for round in rounds(batch) {
        match record_round(round).await {
            Ok(effects) => progress.committed(effects),
            Err(error) => return Err(progress.failed(error)),
        }
    }
    Ok(progress.done())
}

/// The rounds of a batch committed so far.
#[derive(Debug)]
pub(crate) struct BatchProgress {
    len: usize,
    applied: Vec<(usize, ReplyApplied)>,
    transactions: u32,
}

impl BatchProgress {
    /// Nothing applied yet of a batch of `len` replies.
    pub(crate) fn new(len: usize) -> Self {
        Self {
            len,
            applied: Vec::with_capacity(len),
            transactions: 0,
        }
    }

    /// A round committed, with what each of its replies (by batch index) did.
    pub(crate) fn committed(&mut self, effects: Vec<(usize, ReplyApplied)>) {
        self.applied.extend(effects);
        self.transactions += 1;
    }

    /// The batch stopped at a round that failed with `error`.
    pub(crate) fn failed(self, error: impl Into<StoreError>) -> RepliesFailed {
        RepliesFailed {
            applied: self.applied,
            transactions: self.transactions,
            error: error.into(),
        }
    }

    /// Every round committed.
    pub(crate) fn done(self) -> RecordedReplies {
        RecordedReplies {
            effects: in_batch_order(self.len, self.applied),
            transactions: self.transactions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ReplyEffect;

    #[test]
    fn a_failure_reports_the_committed_rounds() {
        let mut progress = BatchProgress::new(3);
        progress.committed(vec![(2, (ReplyEffect::Applied, None))]);
        let failed = progress.failed(sqlx::Error::PoolTimedOut);
        assert_eq!(failed.applied, vec![(2, (ReplyEffect::Applied, None))]);
        assert_eq!(failed.transactions, 1);

        let mut progress = BatchProgress::new(2);
        progress.committed(vec![(1, (ReplyEffect::Stale, None))]);
        progress.committed(vec![(0, (ReplyEffect::Applied, None))]);
        assert_eq!(
            progress.done(),
            RecordedReplies {
                effects: vec![(ReplyEffect::Applied, None), (ReplyEffect::Stale, None)],
                transactions: 2,
            }
        );
    }
}
