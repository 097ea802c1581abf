//! Conveniences for tests: one reply at a time, one next attempt at a time. `chimed`
//! itself applies replies in batches ([`Store::record_replies`]) and moves runs to their
//! next attempt in batches ([`Store::next_attempts`]); these wrap those calls so a test
//! reads as the one step it takes, at the current time. Implemented for every store; a test imports the trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use chime_consumer::protocol::{
    AckMessage, AttemptRecord, HeartbeatMessage, ObserveMessage, PresenceMessage, Reply,
    ResultMessage,
};

use super::types::{Expect, NextAttempt, ReplyApplied, ReplyEffect};
use super::{Store, StoreError};

/// One-reply and one-run forms of [`Store`] methods, for tests.
#[async_trait]
pub trait StoreTestSupport: Store {
    /// Applies one reply (see [`Store::record_replies`]).
    async fn record_reply(&self, reply: &Reply) -> Result<ReplyApplied, StoreError> {
        let mut recorded = self
            .record_replies(&[reply], Utc::now(), &rand::random)
            .await
            .map_err(|failed| failed.error)?;
        Ok(recorded.effects.pop().expect("one outcome per reply"))
    }

    /// Applies a consumer's ack of the run's current attempt; the result (or a heartbeat)
    /// is then due within the run timeout.
    async fn record_ack(&self, ack: &AckMessage) -> Result<ReplyEffect, StoreError> {
        Ok(self.record_reply(&Reply::Ack(ack.clone())).await?.0)
    }

    /// Applies a heartbeat of the run's current attempt: moves its deadline to a run
    /// timeout from now and keeps any progress.
    async fn record_heartbeat(
        &self,
        heartbeat: &HeartbeatMessage,
    ) -> Result<ReplyEffect, StoreError> {
        Ok(self
            .record_reply(&Reply::Heartbeat(heartbeat.clone()))
            .await?
            .0)
    }

    /// Applies a consumer's result as [`crate::domain::retry::after_result`] decides: success, a retry after
    /// the job's backoff (`failed`), or `dead` with the dead letter pending. When applied,
    /// also returns the run's new state.
    async fn record_result(&self, result: &ResultMessage) -> Result<ReplyApplied, StoreError> {
        self.record_reply(&Reply::Result(result.clone())).await
    }

    /// [`Store::next_attempts`] for one run; false if it changed meanwhile.
    async fn next_attempt(
        &self,
        run_id: Uuid,
        expect: Expect,
        record: Option<&AttemptRecord>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let run = NextAttempt {
            run_id,
            expect,
            record,
        };
        Ok(self.next_attempts(&[run], now).await?.contains(&run_id))
    }

    /// Records a consumer instance's presence message.
    async fn record_presence(&self, presence: &PresenceMessage) -> Result<(), StoreError> {
        self.record_reply(&Reply::Presence(presence.clone()))
            .await
            .map(drop)
    }

    /// Records an observer's registration: each of its patterns is seen at `observe.at`
    /// (a pattern already seen later keeps its later time).
    async fn record_observer(&self, observe: &ObserveMessage) -> Result<(), StoreError> {
        self.record_reply(&Reply::Observe(observe.clone()))
            .await
            .map(drop)
    }
}

impl<S: Store + ?Sized> StoreTestSupport for S {}
