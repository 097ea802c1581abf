//! The benchmark harness behind `chime-bench`: real `chimed` processes on SQLite and
//! PostgreSQL, a real `chime-consumer` with a no-op handler ([`probe`]), and in the same
//! run the broker's own ceiling ([`ceiling`]) that every number is compared to.
//!
//! Workloads ([`workloads`]): W1 thundering herd, W2 steady rate, W3 a million idle jobs,
//! W4 failover of a three-node cluster, W5 reconciling overdue runs beside a large
//! history, W7 job import (a batch of 10 000 and single creates) while W2's load fires. Sizes come from a [`Scale`]: `smoke` (CI: proves the harness works, seconds),
//! `default` (a few minutes) and `full` (the sizes in `docs/benchmarks.md`).
//!
//! Performance targets are reported as met or missed, never asserted; lost or duplicated
//! fires are correctness failures and fail the run.

pub mod ceiling;
pub mod consumer_metrics;
pub mod cpu_cost;
pub mod db;
pub mod disk;
pub mod machine;
pub mod paced;
pub mod probe;
pub mod process;
pub mod progress;
pub mod report;
pub mod stage;
pub mod stats;
pub mod workloads;

use std::{collections::HashMap, future::Future, time::Duration};

use serde::Serialize;

use ceiling::Ceiling;

/// How big the workloads are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Tiny sizes: CI runs this so the harness never rots.
    Smoke,
    /// A few minutes.
    Default,
    /// The documented sizes.
    Full,
}

impl Scale {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Smoke => "smoke",
            Scale::Default => "default",
            Scale::Full => "full",
        }
    }
}

/// A store backend chimed runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// PostgreSQL (a fresh database per workload).
    Postgres,
    /// SQLite (a fresh file per workload).
    Sqlite,
}

impl Backend {
    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }

    /// Parses `postgres`/`pg` or `sqlite`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "postgres" | "pg" => Some(Backend::Postgres),
            "sqlite" => Some(Backend::Sqlite),
            _ => None,
        }
    }
}

/// Ceilings measured so far in this run, by (messages, body size), so workloads of the
/// same size share one measurement.
#[derive(Debug, Default)]
pub struct Ceilings {
    measured: HashMap<(usize, usize), Ceiling>,
}

impl Ceilings {
    /// The ceiling for `n` messages of `body_bytes`, measured now if not yet.
    pub async fn get(&mut self, n: usize, body_bytes: usize) -> anyhow::Result<Ceiling> {
        if let Some(c) = self.measured.get(&(n, body_bytes)) {
            return Ok(c.clone());
        }
        let vhost = crate::TestVhost::new();
        let c = ceiling::measure(
            &vhost.amqp_url(),
            n,
            body_bytes,
            ceiling::Acks::EachDelivery,
        )
        .await?;
        self.measured.insert((n, body_bytes), c.clone());
        Ok(c)
    }

    /// The ceiling for `n` messages of `body_bytes`, measured now, for a workload
    /// compared with the broker as it is at that moment.
    pub async fn fresh(&mut self, n: usize, body_bytes: usize) -> anyhow::Result<Ceiling> {
        self.measured.remove(&(n, body_bytes));
        self.get(n, body_bytes).await
    }

    /// The ceiling for `n` messages of `body_bytes` with `multiple` acks, measured now (a
    /// reference, not a target).
    pub async fn with_multiple_acks(n: usize, body_bytes: usize) -> anyhow::Result<Ceiling> {
        let vhost = crate::TestVhost::new();
        ceiling::measure(&vhost.amqp_url(), n, body_bytes, ceiling::Acks::Multiple).await
    }
}

/// Longest one workload run may take before it is reported as failed instead of waited
/// for. The largest (`--full` W3 and W5) take a few minutes; a run that waits on
/// something that never comes would otherwise hold the whole harness, and CI, forever.
const WORKLOAD_LIMIT: Duration = Duration::from_secs(30 * 60);

/// `run`, or an error once it has taken [`WORKLOAD_LIMIT`].
pub(crate) async fn bounded<T>(run: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    bounded_by(WORKLOAD_LIMIT, run).await
}

async fn bounded_by<T>(
    limit: Duration,
    run: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "no result within {limit:?}; stopped waiting"
        ))
    })
}

/// Sizes of every workload at one scale.
#[derive(Debug, Clone)]
struct Sizes {
    herd: Vec<usize>,
    /// Herds run per size; the target is judged on their median.
    herd_repeats: usize,
    steady: Vec<(usize, u32)>,
    /// Rates (fires/s) of the search for the highest one the box sustains, and the
    /// seconds each runs; empty for no search.
    steady_search: (Vec<usize>, u32),
    idle: workloads::idle::Sizes,
    failover: (usize, u32, u32),
    reconcile: (usize, usize),
    import: workloads::import::Sizes,
    /// Messages of the reference ceiling that rates are compared with.
    reference: usize,
}

impl Sizes {
    fn of(scale: Scale) -> Self {
        match scale {
            Scale::Smoke => Self {
                herd: vec![300],
                herd_repeats: 2,
                steady: vec![(50, 3)],
                steady_search: (vec![100], 3),
                idle: workloads::idle::Sizes {
                    idle_jobs: 2_000,
                    idle_secs: 3,
                    due_jobs: 10,
                    due_secs: 3,
                },
                failover: (50, 3, 8),
                reconcile: (200, 2_000),
                import: workloads::import::Sizes {
                    firing: 50,
                    import: 200,
                    create_secs: 1,
                },
                reference: 1_000,
            },
            Scale::Default => Self {
                herd: vec![10_000],
                herd_repeats: 3,
                steady: vec![(1_000, 20)],
                steady_search: (vec![], 20),
                idle: workloads::idle::Sizes {
                    idle_jobs: 100_000,
                    idle_secs: 20,
                    due_jobs: 100,
                    due_secs: 10,
                },
                failover: (1_000, 10, 15),
                reconcile: (10_000, 100_000),
                import: workloads::import::Sizes {
                    firing: 1_000,
                    import: 10_000,
                    create_secs: 5,
                },
                reference: 10_000,
            },
            Scale::Full => Self {
                herd: vec![10_000, 100_000],
                herd_repeats: 3,
                steady: vec![(1_000, 60)],
                steady_search: (vec![2_000, 3_000, 4_000, 6_000, 8_000, 10_000], 60),
                idle: workloads::idle::Sizes {
                    idle_jobs: 1_000_000,
                    idle_secs: 20,
                    due_jobs: 100,
                    due_secs: 30,
                },
                failover: (1_000, 15, 30),
                reconcile: (10_000, 1_000_000),
                import: workloads::import::Sizes {
                    firing: 1_000,
                    import: 10_000,
                    create_secs: 10,
                },
                reference: 100_000,
            },
        }
    }
}

/// How W2 runs, beyond its scale's sizes.
#[derive(Debug, Clone, Default)]
pub struct SteadyChoice {
    /// Non-empty: W2 is only a search over these rates (fires/s).
    pub rates: Vec<usize>,
    /// Runs of every W2 rate; repeated runs at 1 000 fires/s are judged on their median.
    pub repeats: usize,
    /// Seconds of every W2 window (and of its latency ceiling), instead of the scale's.
    pub seconds: Option<u32>,
}

/// Runs the workloads named in `only` (all when empty) at `scale`; W1–W3 on each of
/// `backends`, W4 and W5 on PostgreSQL, W7 on each of `backends`.
pub async fn run_all(
    scale: Scale,
    backends: &[Backend],
    only: &[String],
    steady: &SteadyChoice,
) -> anyhow::Result<report::Report> {
    let wanted = |w: &str| only.is_empty() || only.iter().any(|o| o == w);
    let mut sizes = Sizes::of(scale);
    if !steady.rates.is_empty() {
        sizes.steady.clear();
        sizes.steady_search.0 = steady.rates.clone();
        sizes.steady_search.0.sort_unstable();
    }
    if let Some(seconds) = steady.seconds {
        sizes
            .steady
            .iter_mut()
            .for_each(|(_, secs)| *secs = seconds);
        sizes.steady_search.1 = seconds;
    }
    let postgres = std::env::var(chime_testkit::database::POSTGRES_URL_ENV)
        .unwrap_or_else(|_| chime_testkit::database::DEFAULT_POSTGRES_URL.into());
    let machine = machine::describe(&postgres).await;
    eprintln!("[bench] {}", machine["summary"].as_str().unwrap_or("?"));
    let mut ceilings = Ceilings::default();
    let mut outcomes = Vec::new();
    // The reference ceiling for rates, with a typical task body.
    let reference = ceilings.get(sizes.reference, 400).await?;
    let broker_rate = reference.throughput();
    eprintln!("[bench] broker ceiling: {broker_rate:.0} messages/s");
    for &backend in backends {
        if wanted("W1") {
            for &n in &sizes.herd {
                let mut herds = Vec::new();
                for _ in 0..sizes.herd_repeats {
                    let run = bounded(workloads::herd::run(backend, n, &mut ceilings)).await;
                    herds.push(settle("W1", backend, run));
                }
                let summary = workloads::herd::summarize(backend, n, &herds);
                outcomes.extend(herds);
                outcomes.push(summary);
            }
        }
        if wanted("W2") {
            for &(m, secs) in &sizes.steady {
                let mut runs = Vec::new();
                for _ in 0..steady.repeats.max(1) {
                    let run = bounded(workloads::steady::run(
                        backend,
                        m,
                        secs,
                        broker_rate,
                        workloads::Shortfall::Error,
                    ))
                    .await;
                    runs.push(settle("W2", backend, run));
                }
                let summary = (runs.len() > 1 && m <= 1000)
                    .then(|| workloads::steady::summarize(backend, m, secs, &runs));
                outcomes.extend(runs);
                outcomes.extend(summary);
            }
            let (rates, secs) = &sizes.steady_search;
            if !rates.is_empty() {
                outcomes.extend(
                    workloads::steady::search(backend, rates, *secs, steady.repeats, broker_rate)
                        .await,
                );
            }
        }
        if wanted("W3") {
            let run = bounded(workloads::idle::run(backend, sizes.idle)).await;
            outcomes.push(settle("W3", backend, run));
        }
        if wanted("W7") {
            let run = bounded(workloads::import::run(backend, sizes.import)).await;
            outcomes.push(settle("W7", backend, run));
        }
    }
    if wanted("W4") {
        let (m, before, after) = sizes.failover;
        let run = bounded(workloads::failover::run(m, before, after)).await;
        outcomes.push(settle("W4", Backend::Postgres, run));
    }
    if wanted("W5") {
        // Beside a tenth of the history and the whole of it, so the summary can tell
        // work that follows the overdue runs from work that follows the history.
        let (overdue, finished) = sizes.reconcile;
        let mut runs = Vec::new();
        for history in [finished / 10, finished] {
            let run = bounded(workloads::reconcile::run(overdue, history, broker_rate)).await;
            runs.push(settle("W5", Backend::Postgres, run));
        }
        let summary = workloads::reconcile::summarize(&runs);
        outcomes.extend(runs);
        outcomes.push(summary);
    }
    Ok(report::Report {
        scale: scale.as_str().into(),
        machine,
        outcomes,
    })
}

/// A workload's outcome, or one that records why it could not run (so the other
/// workloads still report).
fn settle(
    workload: &'static str,
    backend: Backend,
    run: anyhow::Result<report::Outcome>,
) -> report::Outcome {
    run.unwrap_or_else(|error| {
        eprintln!("[bench] {workload} {} failed: {error:#}", backend.as_str());
        let mut outcome = report::Outcome::new(workload, backend.as_str(), serde_json::json!({}));
        outcome.errors.push(format!("did not complete: {error:#}"));
        outcome
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_workload_that_never_finishes_becomes_an_error() {
        let hung = bounded_by(
            Duration::from_millis(20),
            std::future::pending::<anyhow::Result<()>>(),
        )
        .await;
        let error = hung.expect_err("stopped waiting").to_string();
        assert!(error.contains("no result within"), "{error}");
        let done = bounded_by(Duration::from_secs(5), async { Ok(7) }).await;
        assert_eq!(done.unwrap(), 7);
    }
}
