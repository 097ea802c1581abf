//! The timer's in-memory structure: jobs due within the look-ahead window, ordered by next
//! fire time. A binary heap with lazy deletion: changing or removing a job leaves its old
//! heap entry behind, and popping skips entries that no longer match the job's time.
//! Beside it, how many jobs fall due in each [`CROWD_BUCKET`], so the timer can see a
//! herd coming (see `herd.rs`) without walking the heap.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, HashMap},
};

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The width of the time buckets in which the queue counts its jobs.
pub const CROWD_BUCKET: chrono::Duration = chrono::Duration::milliseconds(100);

/// Jobs by next fire time; each job at most once.
#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: BinaryHeap<Reverse<(DateTime<Utc>, Uuid)>>,
    due_at: HashMap<Uuid, DateTime<Utc>>,
    /// Jobs held per bucket of due time (the bucket's index since the epoch).
    crowds: BTreeMap<i64, u32>,
}

fn bucket_of(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
        .div_euclid(CROWD_BUCKET.num_milliseconds())
}

fn count_in(crowds: &mut BTreeMap<i64, u32>, at: DateTime<Utc>, delta: i32) {
    let bucket = crowds.entry(bucket_of(at)).or_default();
    *bucket = bucket.saturating_add_signed(delta);
    if *bucket == 0 {
        crowds.remove(&bucket_of(at));
    }
}

impl TimerQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops every job for which `keep` is false (e.g. jobs of shards no longer held).
    pub fn retain(&mut self, mut keep: impl FnMut(Uuid) -> bool) {
        let crowds = &mut self.crowds;
        self.due_at.retain(|job, at| {
            let kept = keep(*job);
            if !kept {
                count_in(crowds, *at, -1);
            }
            kept
        });
        self.compact_if_sparse();
    }

    /// Sets when `job` is due; None removes it.
    pub fn set(&mut self, job: Uuid, at: Option<DateTime<Utc>>) {
        match at {
            Some(at) => {
                let before = self.due_at.insert(job, at);
                if before != Some(at) {
                    if let Some(before) = before {
                        count_in(&mut self.crowds, before, -1);
                    }
                    count_in(&mut self.crowds, at, 1);
                    self.heap.push(Reverse((at, job)));
                }
            }
            None => {
                if let Some(before) = self.due_at.remove(&job) {
                    count_in(&mut self.crowds, before, -1);
                }
            }
        }
        self.compact_if_sparse();
    }

    /// When `job` is due, if held.
    pub fn get(&self, job: Uuid) -> Option<DateTime<Utc>> {
        self.due_at.get(&job).copied()
    }

    /// The earliest due time held.
    pub fn next_due(&mut self) -> Option<DateTime<Utc>> {
        while let Some(Reverse((at, job))) = self.heap.peek() {
            if self.due_at.get(job) == Some(at) {
                return Some(*at);
            }
            self.heap.pop();
        }
        None
    }

    /// Removes and returns up to `max` jobs due at or before `now`, earliest first.
    pub fn pop_due(&mut self, now: DateTime<Utc>, max: usize) -> Vec<Uuid> {
        let mut due = Vec::new();
        while due.len() < max {
            match self.next_due() {
                Some(at) if at <= now => {
                    let Reverse((_, job)) = self.heap.pop().expect("next_due saw an entry");
                    self.due_at.remove(&job);
                    count_in(&mut self.crowds, at, -1);
                    due.push(job);
                }
                _ => break,
            }
        }
        due
    }

    /// How many jobs are due in each [`CROWD_BUCKET`], earliest first: each bucket's
    /// start and its count (empty buckets left out).
    pub fn crowds(&self) -> impl Iterator<Item = (DateTime<Utc>, u32)> + '_ {
        self.crowds.iter().map(|(bucket, count)| {
            let start = DateTime::from_timestamp_millis(bucket * CROWD_BUCKET.num_milliseconds())
                .expect("a bucket of a valid time");
            (start, *count)
        })
    }

    /// Number of jobs held.
    pub fn len(&self) -> usize {
        self.due_at.len()
    }

    /// Whether no job is held.
    pub fn is_empty(&self) -> bool {
        self.due_at.is_empty()
    }

    /// Rebuilds the heap when stale entries outnumber live ones, bounding memory under
    /// frequent updates.
    fn compact_if_sparse(&mut self) {
        if self.heap.len() > 1024 && self.heap.len() > 2 * self.due_at.len() {
            self.heap = self
                .due_at
                .iter()
                .map(|(job, at)| Reverse((*at, *job)))
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        "2026-11-21T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn pops_in_time_order_up_to_now() {
        let mut q = TimerQueue::new();
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        q.set(a, Some(t0() + Duration::seconds(2)));
        q.set(b, Some(t0() + Duration::seconds(1)));
        q.set(c, Some(t0() + Duration::seconds(5)));
        assert_eq!(q.next_due(), Some(t0() + Duration::seconds(1)));
        assert_eq!(q.pop_due(t0() + Duration::seconds(3), 10), [b, a]);
        assert_eq!(q.len(), 1);
        assert_eq!(
            q.pop_due(t0() + Duration::seconds(3), 10),
            Vec::<Uuid>::new()
        );
    }

    #[test]
    fn moving_or_removing_a_job_takes_effect() {
        let mut q = TimerQueue::new();
        let a = Uuid::from_u128(1);
        q.set(a, Some(t0() + Duration::seconds(1)));
        q.set(a, Some(t0() + Duration::seconds(10)));
        assert_eq!(
            q.pop_due(t0() + Duration::seconds(5), 10),
            Vec::<Uuid>::new()
        );
        assert_eq!(q.next_due(), Some(t0() + Duration::seconds(10)));
        q.set(a, None);
        assert_eq!(q.next_due(), None);
        assert!(q.is_empty());
    }

    #[test]
    fn respects_the_batch_limit() {
        let mut q = TimerQueue::new();
        for i in 0..10 {
            q.set(Uuid::from_u128(i), Some(t0()));
        }
        assert_eq!(q.pop_due(t0(), 4).len(), 4);
        assert_eq!(q.len(), 6);
    }

    #[test]
    fn counts_jobs_per_bucket_through_moves_pops_and_drops() {
        let mut q = TimerQueue::new();
        for i in 0..5 {
            q.set(
                Uuid::from_u128(i),
                Some(t0() + Duration::milliseconds(i as i64 * 10)),
            );
        }
        q.set(Uuid::from_u128(9), Some(t0() + Duration::seconds(3)));
        assert_eq!(
            q.crowds().collect::<Vec<_>>(),
            [(t0(), 5), (t0() + Duration::seconds(3), 1)]
        );
        q.set(Uuid::from_u128(0), Some(t0() + Duration::seconds(3)));
        q.retain(|job| job != Uuid::from_u128(1));
        assert_eq!(
            q.pop_due(t0() + Duration::milliseconds(20), 10),
            [Uuid::from_u128(2)]
        );
        assert_eq!(
            q.crowds().collect::<Vec<_>>(),
            [(t0(), 2), (t0() + Duration::seconds(3), 2)]
        );
    }

    proptest! {
        #[test]
        fn behaves_like_a_map_sorted_on_demand(ops in prop::collection::vec((0u128..20, prop::option::of(0i64..100)), 1..300), now in 0i64..100) {
            let mut q = TimerQueue::new();
            let mut model: HashMap<Uuid, DateTime<Utc>> = HashMap::new();
            for (job, at) in ops {
                let (job, at) = (Uuid::from_u128(job), at.map(|s| t0() + Duration::seconds(s)));
                q.set(job, at);
                match at { Some(at) => { model.insert(job, at); } None => { model.remove(&job); } }
            }
            let mut counted: Vec<(DateTime<Utc>, u32)> = Vec::new();
            let mut times: Vec<_> = model.values().copied().collect();
            times.sort();
            for at in times {
                match counted.last_mut() {
                    Some((start, n)) if *start == at => *n += 1,
                    _ => counted.push((at, 1)),
                }
            }
            // Whole seconds apart, so each time is its own bucket.
            prop_assert_eq!(q.crowds().collect::<Vec<_>>(), counted);
            let now = t0() + Duration::seconds(now);
            let mut expected: Vec<_> = model.iter().filter(|(_, at)| **at <= now).map(|(j, at)| (*at, *j)).collect();
            expected.sort();
            let popped = q.pop_due(now, usize::MAX);
            prop_assert_eq!(popped, expected.into_iter().map(|(_, j)| j).collect::<Vec<_>>());
            prop_assert_eq!(q.len(), model.values().filter(|at| **at > now).count());
            prop_assert_eq!(q.crowds().map(|(_, n)| n as usize).sum::<usize>(), q.len());
        }
    }
}
