//! Run statistics over a recent window (`GET /v1/stats/runs`, `chimectl run stats`):
//! the window and its buckets ([`StatsWindow`]), the lateness histogram the stores count
//! ([`LATENESS_BOUNDS_MS`], [`lateness_bucket`]) and the percentiles read from it
//! ([`Histogram::percentile`]), and [`summarise`], which turns the stores' per-minute
//! counts ([`RunCount`]) into the answer ([`RunStats`]). Pure: the stores count, this
//! module adds up.
//!
//! Usage: [`StatsWindow::ending_at`] gives the window for `now`; the store counts the runs
//! whose fire time is in `[from, now]` by minute, state, retry and lateness bucket;
//! [`summarise`] lays them out.
//!
//! Definitions (docs/api.md says the same):
//! - A run counts in the bucket of its fire time (`fire_time`, the scheduled instant).
//! - `retried`: its attempt is above 1.
//! - Lateness: `dispatched_at − fire_time` (0 when negative), in ms, of runs still on
//!   their first attempt that the broker confirmed (`dispatched_at` set). A retry clears
//!   `dispatched_at` and sets it again on the next publish, so a later attempt no longer
//!   knows its first dispatch: such runs are left out. Unlike the metric
//!   `chime_fire_lateness_seconds`, which is judged against the fire time plus the job's
//!   jitter, this counts the jitter as lateness (the run does not keep its jitter).
//! - A percentile is the upper edge of the histogram bucket that holds its rank
//!   (nearest rank, `ceil(q × n)`): the true value is at most that and above the
//!   previous edge. The last bucket (over 60 s) has no upper edge: it reads as 60000.

use chrono::{DateTime, Duration, DurationRound, Utc};

use super::RunState;

/// The upper edges (inclusive) of the lateness histogram's buckets, in ms; one more
/// bucket holds everything above the last edge.
pub const LATENESS_BOUNDS_MS: [u32; 16] = [
    0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
];

/// Buckets of the lateness histogram: one per edge and the overflow bucket.
pub const LATENESS_BUCKETS: usize = LATENESS_BOUNDS_MS.len() + 1;

/// The histogram bucket of a lateness of `ms` milliseconds: the first whose upper edge
/// is at least `ms`, or the overflow bucket. The stores compute the same with a `CASE`
/// over [`LATENESS_BOUNDS_MS`].
pub fn lateness_bucket(ms: f64) -> usize {
    LATENESS_BOUNDS_MS
        .iter()
        .position(|&edge| ms <= f64::from(edge))
        .unwrap_or(LATENESS_BOUNDS_MS.len())
}

/// The value reported for a percentile in bucket `bucket`: its upper edge, the last
/// edge for the overflow bucket.
pub fn bucket_value(bucket: usize) -> u32 {
    LATENESS_BOUNDS_MS[bucket.min(LATENESS_BOUNDS_MS.len() - 1)]
}

/// Counts of lateness per histogram bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Histogram {
    /// Runs per bucket, as [`lateness_bucket`] numbers them.
    pub counts: [u64; LATENESS_BUCKETS],
}

impl Histogram {
    /// Adds `runs` runs in bucket `bucket` (ignored beyond the last bucket).
    pub fn add(&mut self, bucket: usize, runs: u64) {
        if let Some(count) = self.counts.get_mut(bucket) {
            *count += runs;
        }
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
    }

    /// Runs counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `percent`-th percentile (1 to 100) as the upper edge of the bucket holding
    /// rank `ceil(percent × n / 100)`; None when the histogram is empty.
    pub fn percentile(&self, percent: u64) -> Option<u32> {
        assert!((1..=100).contains(&percent), "a percentile is 1 to 100");
        let n = self.total();
        if n == 0 {
            return None;
        }
        let rank = (n * percent).div_ceil(100).max(1);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(bucket_value(bucket));
            }
        }
        unreachable!("the rank is at most the total")
    }

    /// p50, p95 and p99.
    pub fn percentiles(&self) -> Percentiles {
        Percentiles {
            p50: self.percentile(50),
            p95: self.percentile(95),
            p99: self.percentile(99),
        }
    }
}

/// Lateness percentiles in ms; None where no run was dispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Percentiles {
    /// Median.
    pub p50: Option<u32>,
    /// 95th percentile.
    pub p95: Option<u32>,
    /// 99th percentile.
    pub p99: Option<u32>,
}

/// The window length in minutes: 5 to 1440 (a day), default 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatsMinutes(u32);

impl StatsMinutes {
    /// Shortest window.
    pub const MIN: u32 = 5;
    /// Longest window (a day).
    pub const MAX: u32 = 1440;
    /// The window when none is asked for.
    pub const DEFAULT: StatsMinutes = StatsMinutes(60);

    /// `minutes` if it is 5 to 1440.
    pub fn new(minutes: u32) -> Option<Self> {
        (Self::MIN..=Self::MAX)
            .contains(&minutes)
            .then_some(Self(minutes))
    }

    /// The minutes.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// The bucket size for a window of `minutes`: 60 s up to 2 hours, 5 minutes up to 10
/// hours, 15 minutes beyond (at most 120 buckets).
pub fn bucket_seconds(minutes: StatsMinutes) -> u32 {
    match minutes.get() {
        m if m <= 120 => 60,
        m if m <= 600 => 300,
        _ => 900,
    }
}

/// The buckets of one answer: `count` buckets of `bucket_s` from `from`, aligned to the
/// bucket size; the last one holds `now` (and is still filling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsWindow {
    /// Start of the oldest bucket.
    pub from: DateTime<Utc>,
    /// End of the newest bucket (after `now`).
    pub to: DateTime<Utc>,
    /// The instant the window was taken: runs fired later (armed ahead) do not count.
    pub now: DateTime<Utc>,
    /// Bucket size in seconds.
    pub bucket_s: u32,
}

impl StatsWindow {
    /// The window of `minutes` ending with the bucket that holds `now`: as many buckets
    /// as cover `minutes` (rounded up to whole buckets).
    pub fn ending_at(now: DateTime<Utc>, minutes: StatsMinutes) -> Self {
        let bucket_s = bucket_seconds(minutes);
        let size = Duration::seconds(i64::from(bucket_s));
        let start = now.duration_trunc(size).unwrap_or(now);
        let count = (minutes.get() * 60).div_ceil(bucket_s);
        let to = start + size;
        Self {
            from: to - size * count as i32,
            to,
            now,
            bucket_s,
        }
    }

    /// Buckets in the window.
    pub fn buckets(&self) -> usize {
        ((self.to - self.from).num_seconds() / i64::from(self.bucket_s)) as usize
    }

    /// The bucket of the minute starting `minute` minutes after the epoch, if in the
    /// window.
    fn bucket_of(&self, minute: i64) -> Option<usize> {
        let offset = minute * 60 - self.from.timestamp();
        (offset >= 0)
            .then(|| (offset / i64::from(self.bucket_s)) as usize)
            .filter(|&i| i < self.buckets())
    }
}

/// Runs the store counted alike: fired in one minute, in one state, retried or not, in
/// one lateness bucket (None: not counted for lateness).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCount {
    /// The minute of their fire time, in minutes since the epoch.
    pub minute: i64,
    /// Their current state.
    pub state: RunState,
    /// Whether their attempt is above 1.
    pub retried: bool,
    /// Their lateness bucket ([`lateness_bucket`]); None for runs not measured.
    pub lateness: Option<usize>,
    /// How many.
    pub runs: u64,
}

/// Runs per state, every state named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateCounts {
    /// `scheduled`.
    pub scheduled: u64,
    /// `dispatched`.
    pub dispatched: u64,
    /// `acked`.
    pub acked: u64,
    /// `succeeded`.
    pub succeeded: u64,
    /// `failed`.
    pub failed: u64,
    /// `dead`.
    pub dead: u64,
    /// `cancelled`.
    pub cancelled: u64,
}

impl StateCounts {
    fn slot(&mut self, state: RunState) -> &mut u64 {
        match state {
            RunState::Scheduled => &mut self.scheduled,
            RunState::Dispatched => &mut self.dispatched,
            RunState::Acked => &mut self.acked,
            RunState::Succeeded => &mut self.succeeded,
            RunState::Failed => &mut self.failed,
            RunState::Dead => &mut self.dead,
            RunState::Cancelled => &mut self.cancelled,
        }
    }

    /// Runs in `state`.
    pub fn get(mut self, state: RunState) -> u64 {
        *self.slot(state)
    }
}

/// One bucket of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketStats {
    /// Its start.
    pub at: DateTime<Utc>,
    /// Runs whose fire time is in it.
    pub fired: u64,
    /// Of those, `succeeded` now.
    pub succeeded: u64,
    /// Of those, `failed` now (waiting for a retry).
    pub failed: u64,
    /// Of those, `dead` now.
    pub dead: u64,
    /// Of those, on an attempt above 1.
    pub retried: u64,
    /// Lateness of those measured.
    pub lateness: Percentiles,
}

/// The whole window.
#[derive(Debug, Clone, PartialEq)]
pub struct Totals {
    /// Runs fired in the window.
    pub fired: u64,
    /// `fired` over the seconds from `from` to the moment of the answer.
    pub fires_per_s: f64,
    /// Runs on an attempt above 1.
    pub retried: u64,
    /// Runs `dead` now.
    pub dead: u64,
    /// Runs per current state.
    pub by_state: StateCounts,
    /// Lateness of every run measured in the window.
    pub lateness: Percentiles,
}

/// The answer of `GET /v1/stats/runs`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStats {
    /// Its window.
    pub window: StatsWindow,
    /// Every bucket of the window, oldest first.
    pub buckets: Vec<BucketStats>,
    /// The window as a whole.
    pub totals: Totals,
}

/// Lays out `counts` (as the store counted runs fired in `[window.from, window.now]`)
/// in `window`'s buckets, every bucket present. Counts outside the window are ignored.
pub fn summarise(window: &StatsWindow, counts: &[RunCount]) -> RunStats {
    let size = Duration::seconds(i64::from(window.bucket_s));
    let mut buckets: Vec<(BucketStats, Histogram)> = (0..window.buckets())
        .map(|i| {
            let stats = BucketStats {
                at: window.from + size * i as i32,
                fired: 0,
                succeeded: 0,
                failed: 0,
                dead: 0,
                retried: 0,
                lateness: Percentiles::default(),
            };
            (stats, Histogram::default())
        })
        .collect();
    let mut by_state = StateCounts::default();
    let mut all = Histogram::default();
    for count in counts {
        let Some(i) = window.bucket_of(count.minute) else {
            continue;
        };
        let (bucket, histogram) = &mut buckets[i];
        bucket.fired += count.runs;
        match count.state {
            RunState::Succeeded => bucket.succeeded += count.runs,
            RunState::Failed => bucket.failed += count.runs,
            RunState::Dead => bucket.dead += count.runs,
            _ => {}
        }
        if count.retried {
            bucket.retried += count.runs;
        }
        if let Some(lateness) = count.lateness {
            histogram.add(lateness, count.runs);
        }
        *by_state.slot(count.state) += count.runs;
    }
    let buckets: Vec<BucketStats> = buckets
        .into_iter()
        .map(|(mut bucket, histogram)| {
            bucket.lateness = histogram.percentiles();
            all.merge(&histogram);
            bucket
        })
        .collect();
    let fired: u64 = buckets.iter().map(|b| b.fired).sum();
    let elapsed_ms = (window.now - window.from).num_milliseconds().max(1) as f64;
    let totals = Totals {
        fired,
        fires_per_s: (fired as f64 * 1000.0 / elapsed_ms * 1000.0).round() / 1000.0,
        retried: buckets.iter().map(|b| b.retried).sum(),
        dead: by_state.dead,
        by_state,
        lateness: all.percentiles(),
    };
    RunStats {
        window: *window,
        buckets,
        totals,
    }
}

#[cfg(test)]
mod tests;
