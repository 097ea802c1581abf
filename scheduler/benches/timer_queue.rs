//! Microbenchmarks of the timer's in-memory [`TimerQueue`]:
//! - `insert/{10000,100000}`: `set` of that many new jobs into an empty queue (time per
//!   whole batch; the throughput line gives jobs per second);
//! - `pop_due_1000_of_100000`: one `pop_due(now, 1000)` from a queue of 100k jobs, as the
//!   timer takes a fire batch; the popped jobs are put back later in the window, untimed,
//!   so every pop sees 100k jobs;
//! - `update_1000_of_100000`: `set` of 1000 existing jobs of a 100k queue to new times
//!   (each leaves a stale heap entry behind; the heap compactions this triggers are
//!   included, amortised).
//!
//! Job ids and due times (millisecond instants within a one-hour window) come from a
//! fixed-seed RNG, so runs are comparable.
//!
//! Run: `cargo bench -p chime-scheduler --bench timer_queue`
//! (quick run: append `-- --warm-up-time 1 --measurement-time 3`; filter: `-- pop_due`).

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use chime_scheduler::timer::TimerQueue;
use chrono::{DateTime, Utc};
use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use rand::{Rng, SeedableRng, rngs::StdRng};
use uuid::Uuid;

const BATCH: usize = 1000;
const QUEUE: usize = 100_000;
/// Due times fall within this many milliseconds after `t0`.
const WINDOW_MS: i64 = 3_600_000;

fn t0() -> DateTime<Utc> {
    "2026-11-21T10:00:00Z".parse().expect("valid instant")
}

fn rng() -> StdRng {
    StdRng::seed_from_u64(0x0c41_4e5e)
}

fn random_due(rng: &mut StdRng, from: DateTime<Utc>) -> DateTime<Utc> {
    from + chrono::Duration::milliseconds(rng.random_range(0..WINDOW_MS))
}

/// `n` distinct random job ids, each with a random due time.
fn random_jobs(rng: &mut StdRng, n: usize) -> Vec<(Uuid, DateTime<Utc>)> {
    (0..n)
        .map(|_| (Uuid::from_u128(rng.random()), random_due(rng, t0())))
        .collect()
}

fn filled(jobs: &[(Uuid, DateTime<Utc>)]) -> TimerQueue {
    let mut queue = TimerQueue::new();
    for (job, at) in jobs {
        queue.set(*job, Some(*at));
    }
    assert_eq!(queue.len(), jobs.len(), "job ids are distinct");
    queue
}

fn insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("timer_queue/insert");
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    for n in [10_000, QUEUE] {
        let jobs = random_jobs(&mut rng(), n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(n.to_string(), |b| {
            b.iter_batched(
                TimerQueue::new,
                |mut queue| {
                    for (job, at) in &jobs {
                        queue.set(black_box(*job), black_box(Some(*at)));
                    }
                    queue
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

fn pop_due(c: &mut Criterion) {
    let mut rng = rng();
    let mut queue = filled(&random_jobs(&mut rng, QUEUE));
    // Popped jobs come back after everything still held, as if rescheduled.
    let mut refill_from = t0() + chrono::Duration::milliseconds(WINDOW_MS);
    let mut group = c.benchmark_group("timer_queue");
    group.sampling_mode(SamplingMode::Flat).sample_size(50);
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("pop_due_1000_of_100000", |b| {
        b.iter_custom(|iters| {
            let mut measured = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let due = queue.pop_due(black_box(DateTime::<Utc>::MAX_UTC), BATCH);
                measured += start.elapsed();
                assert_eq!(due.len(), BATCH);
                for job in due {
                    queue.set(job, Some(random_due(&mut rng, refill_from)));
                }
                refill_from += chrono::Duration::milliseconds(WINDOW_MS);
            }
            measured
        })
    });
    group.finish();
    assert_eq!(queue.len(), QUEUE);
}

fn update(c: &mut Criterion) {
    let mut rng = rng();
    let jobs = random_jobs(&mut rng, QUEUE);
    let mut queue = filled(&jobs);
    // Pre-drawn updates of random held jobs, cycled through: (job, new due time).
    let updates: Vec<(Uuid, DateTime<Utc>)> = (0..QUEUE)
        .map(|_| {
            let (job, _) = jobs[rng.random_range(0..QUEUE)];
            (job, random_due(&mut rng, t0()))
        })
        .collect();
    let mut next = 0;
    // Shifted by 1 ms each pass over `updates`, so a repeated update is still a change.
    let mut shift = chrono::Duration::zero();
    let mut group = c.benchmark_group("timer_queue");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("update_1000_of_100000", |b| {
        b.iter(|| {
            for (job, at) in &updates[next..next + BATCH] {
                queue.set(black_box(*job), black_box(Some(*at + shift)));
            }
            next = (next + BATCH) % QUEUE;
            if next == 0 {
                shift += chrono::Duration::milliseconds(1);
            }
        })
    });
    group.finish();
    assert_eq!(queue.len(), QUEUE);
}

criterion_group!(benches, insert, pop_due, update);
criterion_main!(benches);
