//! Which shard a job belongs to: a fixed hash of its id, so every node computes the same
//! answer without asking the store.

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

#[cfg(test)]
mod tests {
    use super::*;

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
