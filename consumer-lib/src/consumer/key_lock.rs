//! Per-key mutual exclusion inside one consumer instance, so a duplicate delivery that
//! arrives while the same task is still running waits for it and then replays its outcome.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};
use uuid::Uuid;

/// A map of per-key async locks that forgets a key once nobody holds or awaits it.
#[derive(Debug, Default, Clone)]
pub(crate) struct KeyLocks {
    locks: Arc<Mutex<HashMap<Uuid, Arc<AsyncMutex<()>>>>>,
}

/// Holds the lock of one key until dropped.
#[derive(Debug)]
pub(crate) struct KeyGuard {
    key: Uuid,
    locks: KeyLocks,
    guard: Option<OwnedMutexGuard<()>>,
}

impl KeyLocks {
    /// Waits until no other holder has `key`, then holds it.
    pub(crate) async fn lock(&self, key: Uuid) -> KeyGuard {
        let lock = {
            let mut locks = self.locks.lock().expect("key locks");
            locks.entry(key).or_default().clone()
        };
        let guard = lock.lock_owned().await;
        KeyGuard {
            key,
            locks: self.clone(),
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.lock().unwrap().len()
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = self.locks.locks.lock().expect("key locks");
        // Only the map holds the lock now: nobody holds or awaits this key.
        if locks
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            locks.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn second_holder_waits_and_map_is_cleaned() {
        let locks = KeyLocks::default();
        let key = Uuid::from_u128(1);
        let first = locks.lock(key).await;
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.lock(key).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "second holder must wait");
        drop(first);
        let second = waiter.await.unwrap();
        assert_eq!(locks.len(), 1);
        drop(second);
        assert_eq!(locks.len(), 0);
    }
}
