//! Rebalancing decisions, as pure functions of what the store says: who is alive and who
//! holds which lease. Every node runs the same arithmetic, so they agree on each node's
//! fair share without talking to each other; a node only ever releases its own leases or
//! takes free or expired ones, never an unexpired lease of another node.

use std::collections::BTreeSet;

use crate::domain::shard::LeaseView;

/// What a node should do with its leases now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebalance {
    /// Its own shards to hand back (it holds more than its share).
    pub release: Vec<u32>,
    /// Free or expired shards to try to take, in order of preference.
    pub candidates: Vec<u32>,
    /// How many of `candidates` to take.
    pub take: usize,
}

/// How many shards `me` should hold: `shard_count` split over the live nodes, the first
/// `shard_count % n` of them (by id) taking one extra, so max − min ≤ 1.
pub fn fair_share(shard_count: u32, live: &BTreeSet<String>, me: &str) -> usize {
    let n = live.len().max(1);
    let base = shard_count as usize / n;
    let extra = shard_count as usize % n;
    let rank = live.iter().position(|id| id == me).unwrap_or(n - 1);
    base + usize::from(rank < extra)
}

/// The moves `me` should make given the live nodes and the current leases.
pub fn plan(
    me: &str,
    shard_count: u32,
    live: &BTreeSet<String>,
    leases: &[LeaseView],
) -> Rebalance {
    let mut live = live.clone();
    live.insert(me.to_string());
    let share = fair_share(shard_count, &live, me);
    let mine: Vec<u32> = leases
        .iter()
        .filter(|l| l.owner.as_deref() == Some(me) && !l.expired)
        .map(|l| l.shard)
        .collect();
    if mine.len() > share {
        // Hand back the highest shards; which ones does not matter, only that it is few.
        let mut release = mine;
        release.sort_unstable();
        return Rebalance {
            release: release.split_off(share),
            ..Rebalance::default()
        };
    }
    let mut free: Vec<u32> = leases
        .iter()
        .filter(|l| l.owner.is_none() || l.expired)
        .map(|l| l.shard)
        .collect();
    free.sort_unstable();
    // Nodes that are short at the same moment start at different points of the free list,
    // so they contend for fewer rows.
    let rank = live.iter().position(|id| id == me).unwrap_or(0);
    if !free.is_empty() {
        let offset = free.len() * rank / live.len();
        free.rotate_left(offset);
    }
    let take = (share - mine.len()).min(free.len());
    Rebalance {
        release: Vec::new(),
        candidates: free,
        take,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn leases(owners: &[(u32, Option<&str>, bool)]) -> Vec<LeaseView> {
        owners
            .iter()
            .map(|(shard, owner, expired)| LeaseView {
                shard: *shard,
                owner: owner.map(str::to_string),
                expired: *expired,
            })
            .collect()
    }

    /// Lets every node act in turn, as the real loop would, until nothing changes.
    fn settle(shard_count: u32, live: &[&str], table: &mut [LeaseView]) -> usize {
        let live_set = nodes(live);
        for round in 0..10 {
            let mut changed = false;
            for me in live {
                let plan = plan(me, shard_count, &live_set, table);
                for shard in &plan.release {
                    table[*shard as usize].owner = None;
                    changed = true;
                }
                for shard in plan.candidates.iter().take(plan.take) {
                    let lease = &mut table[*shard as usize];
                    lease.owner = Some(me.to_string());
                    lease.expired = false;
                    changed = true;
                }
            }
            if !changed {
                return round;
            }
        }
        panic!("did not settle");
    }

    fn counts(table: &[LeaseView], live: &[&str]) -> Vec<usize> {
        live.iter()
            .map(|me| {
                table
                    .iter()
                    .filter(|l| l.owner.as_deref() == Some(*me))
                    .count()
            })
            .collect()
    }

    #[test]
    fn shares_differ_by_at_most_one_and_sum_to_the_shard_count() {
        for n in 1..=7 {
            let ids: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
            let live: BTreeSet<String> = ids.iter().cloned().collect();
            let shares: Vec<usize> = ids.iter().map(|id| fair_share(256, &live, id)).collect();
            assert_eq!(shares.iter().sum::<usize>(), 256);
            assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn a_joining_node_gets_its_share_from_the_others() {
        let mut table: Vec<LeaseView> = (0..256)
            .map(|shard| LeaseView {
                shard,
                owner: Some(if shard < 128 { "a" } else { "b" }.to_string()),
                expired: false,
            })
            .collect();
        settle(256, &["a", "b", "c"], &mut table);
        let counts = counts(&table, &["a", "b", "c"]);
        assert_eq!(counts.iter().sum::<usize>(), 256, "{counts:?}");
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
    }

    #[test]
    fn a_dead_nodes_shards_are_taken_only_once_expired() {
        let table = leases(&[
            (0, Some("a"), false),
            (1, Some("dead"), false),
            (2, None, false),
        ]);
        let plan = plan("a", 3, &nodes(&["a"]), &table);
        assert_eq!(
            plan.candidates,
            vec![2],
            "the unexpired lease of 'dead' is not free"
        );
        assert_eq!(plan.take, 1);
        let expired = leases(&[
            (0, Some("a"), false),
            (1, Some("dead"), true),
            (2, Some("a"), false),
        ]);
        let plan = super::plan("a", 3, &nodes(&["a"]), &expired);
        assert_eq!((plan.candidates, plan.take), (vec![1], 1));
    }

    #[test]
    fn a_node_over_its_share_releases_only_the_excess() {
        let table = leases(&[
            (0, Some("a"), false),
            (1, Some("a"), false),
            (2, Some("a"), false),
            (3, Some("a"), false),
        ]);
        let plan = plan("a", 4, &nodes(&["a", "b"]), &table);
        assert_eq!(plan.release, vec![2, 3]);
        assert_eq!(plan.take, 0);
    }

    #[test]
    fn scale_up_then_down_settles_evenly_each_time() {
        let mut table = leases(&(0..64).map(|s| (s, None, false)).collect::<Vec<_>>());
        settle(64, &["a"], &mut table);
        assert_eq!(counts(&table, &["a"]), vec![64]);
        settle(64, &["a", "b", "c"], &mut table);
        assert_eq!(counts(&table, &["a", "b", "c"]), vec![22, 21, 21]);
        // b and c stop: their leases expire.
        for lease in table.iter_mut().filter(|l| l.owner.as_deref() != Some("a")) {
            lease.expired = true;
        }
        settle(64, &["a"], &mut table);
        assert_eq!(counts(&table, &["a"]), vec![64]);
    }

    #[test]
    fn nodes_short_at_once_start_at_different_free_shards() {
        let table = leases(&(0..9).map(|s| (s, None, false)).collect::<Vec<_>>());
        let live = nodes(&["a", "b", "c"]);
        let first: Vec<u32> = ["a", "b", "c"]
            .iter()
            .map(|me| plan(me, 9, &live, &table).candidates[0])
            .collect();
        assert_eq!(first, vec![0, 3, 6]);
    }
}
