//! The default, in-process idempotency store.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
};

use async_trait::async_trait;
use uuid::Uuid;

use super::{IdempotencyError, IdempotencyStore, RecordedOutcome};

/// Keeps the outcomes of the most recent `capacity` tasks in memory (default 100 000);
/// the oldest record is forgotten first. Lost on restart.
#[derive(Debug)]
pub struct MemoryStore {
    capacity: usize,
    inner: Mutex<Records>,
}

#[derive(Debug, Default)]
struct Records {
    by_key: HashMap<Uuid, RecordedOutcome>,
    order: VecDeque<Uuid>,
}

impl MemoryStore {
    /// Default number of outcomes kept.
    pub const DEFAULT_CAPACITY: usize = 100_000;

    /// A store keeping the most recent `capacity` outcomes (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::default(),
        }
    }

    /// Number of outcomes currently kept.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("memory store lock").by_key.len()
    }

    /// Whether no outcome is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn lookup(&self, key: Uuid) -> Result<Option<RecordedOutcome>, IdempotencyError> {
        Ok(self
            .inner
            .lock()
            .expect("memory store lock")
            .by_key
            .get(&key)
            .cloned())
    }

    async fn record(&self, key: Uuid, outcome: &RecordedOutcome) -> Result<(), IdempotencyError> {
        let mut records = self.inner.lock().expect("memory store lock");
        if records.by_key.contains_key(&key) {
            return Ok(());
        }
        if records.order.len() >= self.capacity
            && let Some(oldest) = records.order.pop_front()
        {
            records.by_key.remove(&oldest);
        }
        records.by_key.insert(key, outcome.clone());
        records.order.push_back(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::TaskOutcome;
    use chrono::Utc;

    fn outcome(n: i64) -> RecordedOutcome {
        RecordedOutcome {
            outcome: TaskOutcome::Succeeded {
                output: Some(n.into()),
            },
            finished_at: Utc::now(),
        }
    }

    #[tokio::test]
    async fn keeps_first_outcome_and_forgets_oldest_beyond_capacity() {
        let store = MemoryStore::with_capacity(2);
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        store.record(a, &outcome(1)).await.unwrap();
        store.record(a, &outcome(99)).await.unwrap();
        let kept = store.lookup(a).await.unwrap().expect("recorded");
        assert_eq!(kept.outcome, outcome(1).outcome);
        store.record(b, &outcome(2)).await.unwrap();
        store.record(c, &outcome(3)).await.unwrap();
        assert_eq!(store.len(), 2);
        assert!(store.lookup(a).await.unwrap().is_none());
        assert!(store.lookup(c).await.unwrap().is_some());
    }
}
