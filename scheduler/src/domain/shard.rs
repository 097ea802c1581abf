//! Shards, free of I/O: which shard a job belongs to (a fixed hash of its id, so every
//! node computes the same answer without asking the store), the shard and fencing token a
//! lease is granted with, a lease as the store reports it, and shard lists written as
//! ranges, for people. The store and the cluster both read these names, so they live
//! here, below both.

use uuid::Uuid;

/// The default number of shards of a new cluster.
pub const DEFAULT_SHARD_COUNT: u32 = 256;

/// The shard of `job` among `count` shards. Mixes all 128 bits of the id (ids are UUIDv7,
/// whose leading bits are a timestamp) so jobs spread evenly whatever their creation time.
pub fn shard_of(job: Uuid, count: u32) -> u32 {
    debug_assert!(count > 0, "a cluster has at least one shard");
    let bits = job.as_u128();
    let folded = (bits as u64) ^ ((bits >> 64) as u64);
    // Fibonacci hashing: the high half of the product is well mixed.
    let mixed = folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (mixed % u64::from(count)) as u32
}

/// A shard and the fencing token its lease was granted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardToken {
    /// The shard.
    pub shard: u32,
    /// The lease's fencing token.
    pub token: i64,
}

impl ShardToken {
    /// A shard with its token.
    pub fn new(shard: u32, token: i64) -> Self {
        Self { shard, token }
    }
}

/// One shard's lease as the store reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// The shard.
    pub shard: u32,
    /// Its holder, if any.
    pub owner: Option<String>,
    /// Whether it has expired by the database's clock.
    pub expired: bool,
}

/// `0-3,7,9-10` for [0, 1, 2, 3, 7, 9, 10] (sorted shards); `-` for none.
pub fn shard_ranges(shards: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = shards.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().expect("peeked");
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_ranges_are_compact() {
        assert_eq!(shard_ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3,7,9-10");
        assert_eq!(shard_ranges(&[]), "-");
        assert_eq!(shard_ranges(&[5]), "5");
    }

    #[test]
    fn stable_and_in_range() {
        let id = Uuid::parse_str("0190f5a4-7b1e-7c3a-9d2e-5f6a7b8c9d0e").unwrap();
        assert_eq!(shard_of(id, 256), shard_of(id, 256));
        assert!(shard_of(id, 7) < 7);
        assert_eq!(shard_of(id, 1), 0);
    }

    #[test]
    fn v7_ids_created_together_spread_evenly() {
        let count = 16;
        let mut per_shard = vec![0u32; count as usize];
        for _ in 0..16_000 {
            per_shard[shard_of(Uuid::now_v7(), count) as usize] += 1;
        }
        let (min, max) = (
            per_shard.iter().min().unwrap(),
            per_shard.iter().max().unwrap(),
        );
        assert!(*min > 800 && *max < 1200, "uneven spread: {per_shard:?}");
    }
}
