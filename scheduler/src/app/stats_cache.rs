//! The cache of run statistics ([`super::Runs::stats`]): many open consoles poll the
//! same numbers, so an answer is kept for [`STATS_TTL`] per (apps read, minutes) and
//! shared, and concurrent callers of the same key wait for one query.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::sync::OnceCell;

use crate::domain::run_stats::{RunStats, StatsMinutes};

/// How long an answer is served again to callers reading the same apps and minutes.
pub const STATS_TTL: Duration = Duration::from_secs(5);

/// Most answers kept at once; beyond it, the oldest go first.
const MAX_ENTRIES: usize = 256;

/// What an answer depends on: the apps read (None: every app) and the window.
pub(super) type StatsKey = (Option<Vec<String>>, StatsMinutes);

/// A shared answer, computed once.
type StatsCell = Arc<OnceCell<Arc<RunStats>>>;

/// Recent answers of [`Runs::stats`], each for [`STATS_TTL`] from when it was asked first.
#[derive(Default)]
pub struct StatsCache {
    entries: Mutex<HashMap<StatsKey, (Instant, StatsCell)>>,
}

impl StatsCache {
    /// The cell of `key` younger than [`STATS_TTL`] at `now`, or a new empty one.
    pub(super) fn cell(&self, key: StatsKey, now: Instant) -> StatsCell {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, (since, _)| now.duration_since(*since) < STATS_TTL);
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            let oldest = entries
                .iter()
                .min_by_key(|(_, (since, _))| *since)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                entries.remove(&oldest);
            }
        }
        entries
            .entry(key)
            .or_insert_with(|| (now, StatsCell::default()))
            .1
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(minutes: u32) -> StatsKey {
        (None, StatsMinutes::new(minutes).unwrap())
    }

    #[test]
    fn a_cell_is_shared_until_it_is_five_seconds_old() {
        let cache = StatsCache::default();
        let start = Instant::now();
        let first = cache.cell(key(60), start);
        let again = cache.cell(key(60), start + Duration::from_secs(4));
        assert!(Arc::ptr_eq(&first, &again));
        let other = cache.cell(key(30), start + Duration::from_secs(4));
        assert!(!Arc::ptr_eq(&first, &other));
        let later = cache.cell(key(60), start + STATS_TTL);
        assert!(!Arc::ptr_eq(&first, &later));
    }

    #[test]
    fn the_cache_keeps_at_most_its_limit() {
        let cache = StatsCache::default();
        let start = Instant::now();
        for i in 0..(MAX_ENTRIES + 10) {
            let apps = Some(vec![format!("app{i}")]);
            cache.cell(
                (apps, StatsMinutes::DEFAULT),
                start + Duration::from_millis(i as u64),
            );
        }
        let entries = cache.entries.lock().unwrap();
        assert_eq!(entries.len(), MAX_ENTRIES);
        assert!(!entries.contains_key(&(Some(vec!["app0".to_string()]), StatsMinutes::DEFAULT)));
    }
}
