//! The measured consumer: a real `chime-consumer` with a no-op handler that records, for
//! every task it runs, when the task was scheduled, published and received.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use chime_consumer::{Consumer, HandlerResult, TaskContext};
use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::progress::Progress;

/// One handler run.
#[derive(Debug, Clone, Copy)]
pub struct Receipt {
    /// The task (run) id.
    pub task_id: Uuid,
    /// Its job.
    pub job_id: Uuid,
    /// Its scheduled fire time.
    pub fire_time: DateTime<Utc>,
    /// When chimed stamped it for publishing.
    pub published_at: DateTime<Utc>,
    /// When the handler started.
    pub received_at: DateTime<Utc>,
    /// Its attempt.
    pub attempt: u32,
}

impl Receipt {
    /// publish − scheduled, ms.
    pub fn publish_lateness_ms(&self) -> f64 {
        ms_between(self.fire_time, self.published_at)
    }

    /// consume − scheduled, ms.
    pub fn consume_lateness_ms(&self) -> f64 {
        ms_between(self.fire_time, self.received_at)
    }
}

/// `to − from` in milliseconds.
pub fn ms_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

/// A running measured consumer.
pub struct Probe {
    receipts: Arc<Mutex<Vec<Receipt>>>,
    body_len: Arc<AtomicUsize>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

/// Prefetch of the measured consumer, sized as the library's docs advise for quick
/// handlers at high rates: a delivery is acknowledged only once its result is confirmed,
/// so besides the 256 running it holds a slot for every finished task whose result is
/// in flight, about the rate times the confirm latency (25 000 tasks/s × 40 ms is 1 000).
/// With 500 the window, not the broker, capped a herd (W1 in `docs/benchmarks.md`). The
/// ceiling's plain consumer, which acks on receipt, keeps 500: 2 000 made it no faster.
const PREFETCH: u16 = 2_000;
/// Handler concurrency of the measured consumer.
const CONCURRENCY: usize = 256;

impl Probe {
    /// Starts consuming `group` on `amqp_url` as instance `instance`.
    pub fn start(amqp_url: &str, group: &str, instance: &str) -> Self {
        let receipts = Arc::new(Mutex::new(Vec::new()));
        let body_len = Arc::new(AtomicUsize::new(0));
        let cancel = CancellationToken::new();
        let handler = {
            let receipts = receipts.clone();
            let body_len = body_len.clone();
            move |ctx: TaskContext| {
                let receipt = Receipt {
                    task_id: ctx.task_id(),
                    job_id: ctx.job_id(),
                    fire_time: ctx.fire_time(),
                    published_at: ctx.task().published_at,
                    received_at: Utc::now(),
                    attempt: ctx.attempt(),
                };
                if body_len.load(Ordering::Relaxed) == 0 {
                    body_len.store(ctx.task().to_vec().len(), Ordering::Relaxed);
                }
                receipts.lock().expect("receipts").push(receipt);
                async { HandlerResult::Ok(None) }
            }
        };
        let consumer = Consumer::builder(amqp_url, group)
            .instance(instance)
            .concurrency(CONCURRENCY)
            .prefetch(PREFETCH)
            // For comparisons: the consumer as it was before reply batches.
            .batch_replies(std::env::var_os("CHIME_BENCH_NO_REPLY_BATCHES").is_none())
            .fallback_handler(handler)
            .build()
            .expect("a valid consumer");
        let stop = cancel.clone();
        let task = tokio::spawn(async move {
            if let Err(error) = consumer.run_until(stop.cancelled_owned()).await {
                tracing::error!(%error, "the measured consumer stopped");
            }
        });
        Self {
            receipts,
            body_len,
            cancel,
            task,
        }
    }

    /// Handler runs so far.
    pub fn count(&self) -> usize {
        self.receipts.lock().expect("receipts").len()
    }

    /// Every receipt so far.
    pub fn receipts(&self) -> Vec<Receipt> {
        self.receipts.lock().expect("receipts").clone()
    }

    /// Size of a task body as published (bytes), once one arrived.
    pub fn body_len(&self) -> usize {
        self.body_len.load(Ordering::Relaxed)
    }

    /// Waits until `n` handler runs, showing progress; false on timeout.
    pub async fn wait_for(&self, n: usize, timeout: Duration, progress: &Progress) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let count = self.count();
            progress.show(|| format!("consumed {count}/{n}"));
            if count >= n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (up to 30 s) until `expected` tasks fired in `window` were consumed, so the
    /// window's last fires drain through; returns every receipt.
    pub async fn drain_window(
        &self,
        window: (DateTime<Utc>, DateTime<Utc>),
        expected: usize,
    ) -> Vec<Receipt> {
        drain_all(std::slice::from_ref(self), window, expected).await
    }

    /// Stops consuming.
    pub async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.task).await;
    }
}

/// Waits (up to 30 s) until `expected` tasks fired in `window` were consumed by `probes`
/// together (several instances of one group), so the window's last fires drain through;
/// returns every receipt of all of them.
pub async fn drain_all(
    probes: &[Probe],
    window: (DateTime<Utc>, DateTime<Utc>),
    expected: usize,
) -> Vec<Receipt> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let receipts: Vec<Receipt> = probes.iter().flat_map(Probe::receipts).collect();
        let done = receipts
            .iter()
            .filter(|r| r.fire_time >= window.0 && r.fire_time < window.1)
            .count();
        if done >= expected || tokio::time::Instant::now() >= deadline {
            return receipts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes `receipts` as CSV, one task per line in fire order: its fire time (ms since the
/// Unix epoch), then its publish and consume lateness (ms), so stalls can be seen in time.
/// Creates the file's directory if it is missing: a measurement must not be lost to it.
pub fn write_timeline(path: &std::path::Path, receipts: &[Receipt]) -> std::io::Result<()> {
    use std::io::Write;
    let mut sorted = receipts.to_vec();
    sorted.sort_by_key(|r| r.fire_time);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "fire_time_ms,publish_lateness_ms,consume_lateness_ms")?;
    for r in &sorted {
        writeln!(
            out,
            "{},{:.3},{:.3}",
            r.fire_time.timestamp_millis(),
            r.publish_lateness_ms(),
            r.consume_lateness_ms()
        )?;
    }
    out.flush()
}

/// Handler runs per task id beyond the first (duplicates the consumer let through).
pub fn duplicate_runs(receipts: &[Receipt]) -> usize {
    let mut per_task: HashMap<Uuid, usize> = HashMap::new();
    for r in receipts {
        *per_task.entry(r.task_id).or_default() += 1;
    }
    per_task.values().map(|n| n - 1).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_lands_in_a_directory_that_did_not_exist_in_fire_order() {
        let base = chrono::TimeZone::timestamp_millis_opt(&Utc, 1_700_000_000_000).unwrap();
        let at = |ms: i64| base + chrono::Duration::milliseconds(ms);
        let receipt = |fire_ms: i64, consumed_ms: i64| Receipt {
            task_id: Uuid::from_u128(fire_ms as u128),
            job_id: Uuid::from_u128(1),
            fire_time: at(fire_ms),
            published_at: at(fire_ms + 1),
            received_at: at(consumed_ms),
            attempt: 1,
        };
        let dir = std::env::temp_dir().join(format!(
            "chime-timeline-{}-{}",
            std::process::id(),
            Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ));
        let path = dir.join("nested").join("w2.csv");

        write_timeline(&path, &[receipt(1000, 1250), receipt(0, 3)]).expect("timeline written");

        let text = std::fs::read_to_string(&path).expect("timeline readable");
        std::fs::remove_dir_all(&dir).expect("clean up");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "fire_time_ms,publish_lateness_ms,consume_lateness_ms",
                "1700000000000,1.000,3.000",
                "1700000001000,1.000,250.000",
            ]
        );
    }
}
