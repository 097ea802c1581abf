//! Since when the timer has been responsible for each shard: it held the shard's lease
//! (with the same fencing token) and had loaded the shard's jobs into its queue, without
//! interruption. A job that misfires with its due time inside that span was missed by
//! this node's own slowness (see [`crate::domain::behind`]); before it, nobody was
//! running the job. Pure bookkeeping, no I/O.
//!
//! - A refill that loaded the window for a set of leases starts the span of every shard
//!   newly held (single node: every shard, at the timer's first refill).
//! - A shard lost, or held again under another token (lost and re-acquired), has no span
//!   until the next refill loads it.
//! - A store error (the timer could not load or fire) or a lease the node stopped
//!   trusting interrupts the span: fires were not being recorded, whatever the speed.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::cluster::Leases;

/// Per shard, the token held and since when the timer has been responsible for it.
#[derive(Debug, Default)]
pub struct Responsibility {
    since: HashMap<u32, (i64, DateTime<Utc>)>,
}

impl Responsibility {
    /// The timer loaded its window at `at` for `leases`: shards held but not tracked
    /// (or tracked under another token) start their span at `at`; shards no longer held
    /// are forgotten.
    pub fn loaded(&mut self, leases: &Leases, at: DateTime<Utc>) {
        self.since
            .retain(|shard, (token, _)| leases.get(*shard).is_some_and(|l| l.token == *token));
        for shard in leases.shards() {
            if let Some(lease) = leases.get(shard) {
                self.since.entry(shard).or_insert((lease.token, at));
            }
        }
    }

    /// The timer stopped acting for `shard` (its lease is not trusted now).
    pub fn interrupt(&mut self, shard: u32) {
        self.since.remove(&shard);
    }

    /// The timer could not reach its store: every span ends.
    pub fn interrupt_all(&mut self) {
        self.since.clear();
    }

    /// Since when the timer has been responsible for `shard` under `leases` (`None`: it
    /// is not, or has not reloaded it since an interruption).
    pub fn since(&self, shard: u32, leases: &Leases) -> Option<DateTime<Utc>> {
        let (token, at) = self.since.get(&shard)?;
        leases
            .get(shard)
            .filter(|lease| lease.token == *token)
            .map(|_| *at)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::Held;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn fenced(shards: &[(u32, i64)]) -> Leases {
        Leases::fenced(
            shards
                .iter()
                .map(|(shard, token)| {
                    let held = Held {
                        token: *token,
                        trusted_until: None,
                    };
                    (*shard, held)
                })
                .collect::<BTreeMap<_, _>>(),
        )
    }

    #[test]
    fn a_single_node_is_responsible_from_its_first_refill() {
        let leases = Leases::everything(4);
        let mut r = Responsibility::default();
        assert_eq!(r.since(2, &leases), None, "nothing loaded yet");
        r.loaded(&leases, at("2026-11-21T10:00:00Z"));
        r.loaded(&leases, at("2026-11-21T10:00:10Z"));
        assert_eq!(r.since(2, &leases), Some(at("2026-11-21T10:00:00Z")));
    }

    #[test]
    fn a_shard_taken_over_counts_from_the_refill_that_loaded_it() {
        let mut r = Responsibility::default();
        r.loaded(&fenced(&[(1, 5)]), at("2026-11-21T10:00:00Z"));
        let both = fenced(&[(1, 5), (2, 9)]);
        r.loaded(&both, at("2026-11-21T10:01:00Z"));
        assert_eq!(r.since(1, &both), Some(at("2026-11-21T10:00:00Z")));
        assert_eq!(r.since(2, &both), Some(at("2026-11-21T10:01:00Z")));
        assert_eq!(r.since(3, &both), None, "never held");
    }

    #[test]
    fn losing_or_reacquiring_a_shard_ends_its_span() {
        let mut r = Responsibility::default();
        r.loaded(&fenced(&[(1, 5)]), at("2026-11-21T10:00:00Z"));
        // Lost and taken again under a new token, before any refill saw it.
        let again = fenced(&[(1, 6)]);
        assert_eq!(r.since(1, &again), None);
        r.loaded(&again, at("2026-11-21T10:02:00Z"));
        assert_eq!(r.since(1, &again), Some(at("2026-11-21T10:02:00Z")));
        r.loaded(&fenced(&[]), at("2026-11-21T10:03:00Z"));
        assert_eq!(r.since(1, &again), None, "forgotten once not held");
    }

    #[test]
    fn interruptions_last_until_the_next_refill() {
        let leases = fenced(&[(1, 5), (2, 5)]);
        let mut r = Responsibility::default();
        r.loaded(&leases, at("2026-11-21T10:00:00Z"));
        r.interrupt(1);
        assert_eq!(r.since(1, &leases), None);
        assert!(r.since(2, &leases).is_some());
        r.interrupt_all();
        assert_eq!(r.since(2, &leases), None);
        r.loaded(&leases, at("2026-11-21T10:00:30Z"));
        assert_eq!(r.since(2, &leases), Some(at("2026-11-21T10:00:30Z")));
    }
}
