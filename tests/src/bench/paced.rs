//! The latency ceiling: how late the broker alone delivers messages sent at a steady
//! rate. A plain lapin publisher (publisher confirms, persistent mandatory messages of the
//! task's size) sends message `i` at `start + i / rate` into a queue declared exactly like
//! a Chime work queue, and a plain lapin consumer (manual acks, the probe's prefetch)
//! notes when each one arrives. Lateness is arrival − scheduled send time, the same
//! reference W2 measures a fire against (its fire time), so the two compare directly.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures_util::{FutureExt, StreamExt, stream::FuturesUnordered};
use lapin::options::BasicAckOptions;
use serde::Serialize;

use super::{
    ceiling::{Lane, confirm},
    cpu_cost,
    disk::{DiskStalls, DiskWatch},
    process::MachineCpu,
    progress::Progress,
    stats::Summary,
};

/// What the broker alone achieved at a steady rate.
#[derive(Debug, Clone, Serialize)]
pub struct PacedCeiling {
    /// Messages per second sent.
    pub rate: usize,
    /// Messages sent.
    pub n: usize,
    /// Body size, bytes.
    pub body_bytes: usize,
    /// When each message was handed to lapin − its scheduled send time, ms.
    pub publish_lateness_ms: Option<Summary>,
    /// When each message reached the consumer − its scheduled send time, ms.
    pub consume_lateness_ms: Option<Summary>,
    /// The disk's stalls while it ran.
    pub disk_stalls: DiskStalls,
    /// Where the machine's CPU went from the first send to the last delivery, percent of
    /// one core by program.
    pub cpu_pct_by_program: BTreeMap<&'static str, f64>,
    /// The broker's CPU per message at this rate, µs.
    pub broker_cpu_us_per_message: Option<f64>,
}

/// Sends `rate` messages per second of `body_bytes` (at least 8) for `secs` seconds
/// through a fresh work queue in the vhost at `amqp_url`.
pub async fn measure(
    amqp_url: &str,
    rate: usize,
    secs: u32,
    body_bytes: usize,
) -> anyhow::Result<PacedCeiling> {
    let n = rate * secs as usize;
    let progress = Progress::new(format!("latency ceiling {rate}/s"));
    let lane = Lane::open(amqp_url, "paced").await?;
    let mut deliveries = lane.deliveries();
    let start = Instant::now() + Duration::from_millis(100);
    let disk = DiskWatch::start();
    let machine_before = (MachineCpu::read(), std::time::Instant::now());
    let scheduled = move |i: u64| start + Duration::from_secs_f64(i as f64 / rate as f64);
    let consuming = tokio::spawn(async move {
        let mut lateness = Vec::with_capacity(n);
        while lateness.len() < n {
            let Some(delivery) = deliveries.next().await else {
                anyhow::bail!(
                    "the paced consumer stopped after {} messages",
                    lateness.len()
                );
            };
            let delivery = delivery?;
            let arrived = Instant::now();
            lateness.push(ms_since(scheduled(message_index(&delivery.data)?), arrived));
            delivery.ack(BasicAckOptions::default()).await?;
        }
        Ok(lateness)
    });

    let mut body = vec![b'x'; body_bytes.max(8)];
    let mut publish_lateness = Vec::with_capacity(n);
    let mut confirms = FuturesUnordered::new();
    let mut next: u64 = 0;
    while (next as usize) < n {
        // Tokio's timer wakes on whole milliseconds: above 1 000/s each wake sends
        // several messages, as chimed's timer releases several fires.
        tokio::time::sleep_until(scheduled(next).into()).await;
        while (next as usize) < n && scheduled(next) <= Instant::now() {
            body[..8].copy_from_slice(&next.to_le_bytes());
            publish_lateness.push(ms_since(scheduled(next), Instant::now()));
            confirms.push(lane.publish(&body).await?);
            next += 1;
        }
        // Settle the confirms already back without waiting for the rest.
        while let Some(Some(outcome)) = confirms.next().now_or_never() {
            confirm(Some(outcome))?;
        }
        progress.show(|| format!("sent {next}/{n}"));
    }
    while let Some(outcome) = confirms.next().await {
        confirm(Some(outcome))?;
    }
    let consume_lateness = tokio::time::timeout(Duration::from_secs(120), consuming)
        .await
        .map_err(|_| anyhow::anyhow!("the paced consumer took over 2 minutes to drain"))???;
    let disk_stalls = disk.finish();
    let elapsed_s = machine_before.1.elapsed().as_secs_f64();
    let cpu_pct_by_program = MachineCpu::read().since(&machine_before.0, elapsed_s);
    lane.close().await?;
    let result = PacedCeiling {
        broker_cpu_us_per_message: cpu_cost::broker_per_message(&cpu_pct_by_program, elapsed_s, n),
        cpu_pct_by_program,
        rate,
        n,
        body_bytes: body.len(),
        publish_lateness_ms: Summary::of(&publish_lateness),
        consume_lateness_ms: Summary::of(&consume_lateness),
        disk_stalls,
    };
    progress.say(&format!(
        "consume lateness p50 / p99 / max {} ms; {}",
        Summary::cell(result.consume_lateness_ms.as_ref()),
        result.disk_stalls
    ));
    Ok(result)
}

fn message_index(body: &[u8]) -> anyhow::Result<u64> {
    let head: [u8; 8] = body
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| anyhow::anyhow!("a paced message shorter than 8 bytes"))?;
    Ok(u64::from_le_bytes(head))
}

/// `to − from` in milliseconds (negative if `to` is earlier).
fn ms_since(from: Instant, to: Instant) -> f64 {
    if to >= from {
        (to - from).as_secs_f64() * 1000.0
    } else {
        -((from - to).as_secs_f64() * 1000.0)
    }
}
