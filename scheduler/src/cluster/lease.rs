//! The leases this node holds and how long it may trust them.
//!
//! A lease's expiry lives in the database and is computed from the database's clock. The
//! node keeps a *local deadline* per lease: the monotonic instant at which it sent the
//! renewal, plus a fraction of the TTL. The database set the expiry at or after that send,
//! so the local deadline always falls before the real expiry, whatever the clocks say. A
//! stalled process (SIGSTOP, a long pause, a cut to the database) wakes up past its local
//! deadlines and stops firing and publishing before it learns whether it lost anything.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::domain::shard::ShardToken;

/// The share of the TTL a node trusts a lease for after sending its renewal. The rest
/// absorbs clock-rate differences and the time between a check and the write it guards.
const TRUSTED_SHARE: f64 = 0.8;

/// The local deadline of a lease renewed (or acquired) by a request sent at `sent`.
pub fn local_deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.mul_f64(TRUSTED_SHARE)
}

/// One held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The fencing token the lease was granted with.
    pub token: i64,
    /// Until when this node may act on it; `None` for a single-node store, whose file
    /// lock cannot be taken away.
    pub trusted_until: Option<Instant>,
}

/// The shards this node holds, as one immutable snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leases {
    held: BTreeMap<u32, Held>,
    fenced: bool,
}

impl Leases {
    /// Every shard, for good: the single-node store (SQLite), guarded by its file lock.
    pub fn everything(shard_count: u32) -> Self {
        let held = (0..shard_count)
            .map(|shard| {
                let lease = Held {
                    token: 0,
                    trusted_until: None,
                };
                (shard, lease)
            })
            .collect();
        Self {
            held,
            fenced: false,
        }
    }

    /// Fenced leases granted by the store.
    pub fn fenced(held: BTreeMap<u32, Held>) -> Self {
        Self { held, fenced: true }
    }

    /// Whether these are fenced leases (a cluster) rather than a single node's shards.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The leases as (shard, token) pairs.
    pub fn tokens(&self) -> Vec<ShardToken> {
        self.held
            .iter()
            .map(|(shard, lease)| ShardToken::new(*shard, lease.token))
            .collect()
    }

    /// Whether this node may fire and publish for `shard` at `now`.
    pub fn trusts(&self, shard: u32, now: Instant) -> bool {
        self.held
            .get(&shard)
            .is_some_and(|lease| lease.trusted_until.is_none_or(|until| now < until))
    }

    /// The shards held, trusted or not (what the node shows and renews).
    pub fn shards(&self) -> impl Iterator<Item = u32> + '_ {
        self.held.keys().copied()
    }

    /// How many shards are held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no shard is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The lease on `shard`, if held.
    pub fn get(&self, shard: u32) -> Option<Held> {
        self.held.get(&shard).copied()
    }

    /// The tokens that must still be current for a write touching `shards` to commit;
    /// `None` when the store needs no fencing (single node).
    pub fn fence(&self, shards: impl IntoIterator<Item = u32>) -> Option<Vec<ShardToken>> {
        if !self.fenced {
            return None;
        }
        let mut fence: Vec<ShardToken> = shards
            .into_iter()
            .filter_map(|shard| {
                self.held
                    .get(&shard)
                    .map(|lease| ShardToken::new(shard, lease.token))
            })
            .collect();
        fence.sort_by_key(|t| t.shard);
        fence.dedup();
        Some(fence)
    }

    /// Whether the same shards are held (tokens and deadlines aside).
    pub fn same_shards(&self, other: &Leases) -> bool {
        self.held.keys().eq(other.held.keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_deadline_falls_before_the_database_expiry() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(10);
        // However late the database ran the update after our send, its expiry is later.
        for server_delay_ms in [0u64, 5, 500, 3_000] {
            let db_expiry = sent + Duration::from_millis(server_delay_ms) + ttl;
            assert!(local_deadline(sent, ttl) < db_expiry);
        }
        assert_eq!(local_deadline(sent, ttl), sent + Duration::from_secs(8));
    }

    #[test]
    fn a_stalled_node_stops_trusting_its_leases() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(10);
        let leases = Leases::fenced(BTreeMap::from([(
            3,
            Held {
                token: 7,
                trusted_until: Some(local_deadline(sent, ttl)),
            },
        )]));
        assert!(leases.trusts(3, sent + Duration::from_secs(1)));
        assert!(
            !leases.trusts(3, sent + Duration::from_secs(9)),
            "woke past its deadline"
        );
        assert!(!leases.trusts(4, sent), "never held");
    }

    #[test]
    fn fences_name_each_shard_once_with_its_token() {
        let until = Some(Instant::now() + Duration::from_secs(5));
        let leases = Leases::fenced(BTreeMap::from([
            (
                1,
                Held {
                    token: 4,
                    trusted_until: until,
                },
            ),
            (
                2,
                Held {
                    token: 9,
                    trusted_until: until,
                },
            ),
        ]));
        assert_eq!(
            leases.fence([2, 1, 2, 5]),
            Some(vec![ShardToken::new(1, 4), ShardToken::new(2, 9)]),
            "unheld shard 5 is left out, so the store refuses its jobs"
        );
        assert_eq!(Leases::everything(4).fence([1]), None);
        assert!(Leases::everything(4).trusts(3, Instant::now() + Duration::from_secs(1 << 30)));
    }
}
