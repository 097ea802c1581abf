//! W1, thundering herd: `n` one-shot jobs all due at the same instant. Measures the time
//! from that instant to the last confirmed publish and to the last consumed task, and
//! compares the latter with the broker's ceiling for `n` messages of the task's size,
//! measured right after. The target is judged on the median of several herds
//! ([`summarize`]).

use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use crate::bench::{
    Backend, Ceilings, consumer_metrics, cpu_cost,
    probe::{Probe, ms_between},
    process::{MachineCpu, ProcessSample},
    progress::Progress,
    report::Outcome,
    stage::{GROUP, Stage},
    stats::median,
};

use super::{Shortfall, account_fires, bench_job, lateness, to_ms};

/// Largest time ratio to the ceiling that meets the target (≥ 75 % of its throughput).
const TARGET_RATIO: f64 = 1.3;

/// Runs W1 with `n` jobs on `backend`.
pub async fn run(backend: Backend, n: usize, ceilings: &mut Ceilings) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("W1", backend.as_str(), json!({"jobs": n}));
    let progress = Progress::new(format!("W1 {} n={n}", backend.as_str()));
    let stage = Stage::new(backend, &[]).await?;
    let placeholder = to_ms(Utc::now() + chrono::Duration::days(1));
    let settings = stage
        .seed(
            bench_job("herd", json!({"at": placeholder})),
            n,
            "herd",
            |_| {},
            |_| placeholder,
        )
        .await?;
    // The instant leaves chimed time to start and load the jobs into its timer.
    let instant = to_ms(Utc::now() + chrono::Duration::milliseconds(4000 + n as i64 / 10));
    let mut settings = settings;
    let shape = settings.to_string();
    *settings
        .pointer_mut("/schedule/at")
        .ok_or_else(|| anyhow::anyhow!("stored settings have no schedule.at: {shape}"))? =
        json!(instant);
    stage.db.retime_all(&settings, instant).await?;

    let probe = Probe::start(&stage.vhost.amqp_url(), GROUP, "probe");
    let chimed = stage.start_chimed().await;
    let pid = chimed.pid().unwrap_or(0);
    let ready_before_instant_ms = ms_between(Utc::now(), instant);
    outcome.metric("ready_before_instant_ms", ready_before_instant_ms);
    if ready_before_instant_ms < 0.0 {
        progress.say("chimed became ready after the instant; lateness includes start-up");
    }
    // CPU is measured from the instant: the herd's arming before it is not part of the
    // time measured against the ceiling either.
    tokio::time::sleep((instant - Utc::now()).to_std().unwrap_or_default()).await;
    // Reading the counters resets them, so the herd's figures start here.
    consumer_metrics::ack_frames_since_last();
    let cpu_before = ProcessSample::read(pid);
    let machine_before = (MachineCpu::read(), std::time::Instant::now());
    let timeout = Duration::from_secs(120 + n as u64 / 200);
    let all = probe.wait_for(n, timeout, &progress).await;
    let receipts = probe.receipts();
    let cpu_after = ProcessSample::read(pid);
    let cpu_window_s = machine_before.1.elapsed().as_secs_f64();
    let machine_cpu = MachineCpu::read().since(&machine_before.0, cpu_window_s);
    // Every run gets its `dispatched_at` within moments: from its ack, or from the
    // dispatcher's mark 400 ms after the confirm.
    let records = wait_dispatched(&stage, n, instant).await?;
    let body_len = probe.body_len();
    probe.stop().await;
    // After the stop: a task counts as consumed when its handler starts, and its delivery
    // is acked only after its result's confirm, in a batch up to 5 ms later. The
    // consumer's drain sends every waiting ack, so only now are all of the herd's counted.
    let ack_frames = consumer_metrics::ack_frames_since_last();
    chimed.stop().await;
    if !all {
        progress.say(&format!(
            "only {} of {n} tasks consumed in {timeout:?}",
            receipts.len()
        ));
    }

    let consumed_s = receipts
        .iter()
        .map(|r| ms_between(instant, r.received_at))
        .fold(0.0, f64::max)
        / 1000.0;
    let confirmed_s = records
        .iter()
        .filter_map(|r| r.dispatched_at)
        .map(|at| ms_between(instant, at))
        .fold(0.0, f64::max)
        / 1000.0;
    outcome.metric("last_publish_confirmed_s", confirmed_s);
    outcome.metric("last_task_consumed_s", consumed_s);
    outcome.metric("throughput_per_s", n as f64 / consumed_s);
    lateness(&mut outcome, &receipts);
    let chimed_cpu_s = cpu_after.cpu_s - cpu_before.cpu_s;
    let fire_cost = cpu_cost::per_fire(chimed_cpu_s, &machine_cpu, cpu_window_s, receipts.len());
    outcome.metric("chimed_cpu_s", chimed_cpu_s);
    outcome.metric("cpu_us_per_fire", fire_cost);
    outcome.metric("cpu_pct_by_program", &machine_cpu);
    outcome.metric("chimed_peak_rss_mib", cpu_after.peak_rss_mib);
    if let Some(frames) = ack_frames {
        outcome.metric("consumer_ack_frames", frames);
        outcome.metric(
            "deliveries_per_ack_frame",
            frames.deliveries_per_frame(receipts.len()),
        );
    }
    let window = (instant, instant + chrono::Duration::milliseconds(1));
    account_fires(
        &mut outcome,
        n,
        &records,
        &receipts,
        window,
        Shortfall::Error,
    );

    // Measured right after the herd, not once per run: the box's speed drifts by tens
    // of percent within minutes, and the ratio should compare like with like.
    let ceiling = ceilings.fresh(n, body_len).await?;
    let ratio = consumed_s / ceiling.consume_s;
    outcome.metric(
        "scheduler_cpu_vs_broker_per_message",
        cpu_cost::scheduler_vs_broker(fire_cost, ceiling.broker_cpu_us_per_message),
    );
    outcome.metric("ceiling", ceiling);
    outcome.metric("time_vs_ceiling", ratio);
    outcome.metric("throughput_vs_ceiling", 1.0 / ratio);
    // A reference, not the target: the broker alone with acks batched as the consumer
    // library batches them.
    let batched = Ceilings::with_multiple_acks(n, body_len).await?;
    outcome.metric(
        "time_vs_multiple_ack_ceiling",
        consumed_s / batched.consume_s,
    );
    outcome.metric("ceiling_multiple_acks", batched);
    stage.db.close().await;
    Ok(outcome)
}

/// The target over `herds` runs of W1 with `n` jobs on `backend`: their median ratio to
/// the ceiling. One herd lasts about a second, and on a shared 2-core machine single
/// runs of the same code spread from 1.0x to 1.7x.
pub fn summarize(backend: Backend, n: usize, herds: &[Outcome]) -> Outcome {
    let mut summary = Outcome::new(
        "W1",
        backend.as_str(),
        json!({"jobs": n, "herds": herds.len()}),
    );
    let of = |name: &str| -> Vec<f64> {
        herds
            .iter()
            .filter_map(|h| h.metrics.get(name)?.as_f64())
            .collect()
    };
    let ratios = of("time_vs_ceiling");
    summary.metric("time_vs_ceiling_each", &ratios);
    summary.metric("last_task_consumed_s_each", of("last_task_consumed_s"));
    let batched = of("time_vs_multiple_ack_ceiling");
    summary.metric("time_vs_multiple_ack_ceiling_each", &batched);
    summary.metric("time_vs_multiple_ack_ceiling_median", median(batched));
    match median(ratios.clone()) {
        Some(ratio) if ratios.len() == herds.len() => {
            summary.metric("time_vs_ceiling_median", ratio);
            summary.metric("throughput_vs_ceiling_median", 1.0 / ratio);
            summary.check(
                format!("median last consumed within {TARGET_RATIO}x the ceiling"),
                format!(
                    "{ratio:.2}x ({:.0} % of ceiling throughput) over {} herds",
                    100.0 / ratio,
                    herds.len()
                ),
                ratio <= TARGET_RATIO,
            );
        }
        _ => summary.check(
            format!("median last consumed within {TARGET_RATIO}x the ceiling"),
            format!("{} of {} herds completed", ratios.len(), herds.len()),
            false,
        ),
    }
    summary
}

/// Waits (up to 30 s) until every run fired at `instant` is marked dispatched.
async fn wait_dispatched(
    stage: &Stage,
    n: usize,
    instant: chrono::DateTime<Utc>,
) -> anyhow::Result<Vec<crate::bench::db::RunRecord>> {
    let window_end = instant + chrono::Duration::milliseconds(1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let records = stage.db.runs_between(instant, window_end).await?;
        let dispatched = records.iter().filter(|r| r.dispatched_at.is_some()).count();
        if dispatched >= n || tokio::time::Instant::now() >= deadline {
            return Ok(records);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![1.7]), Some(1.7));
        assert_eq!(median(vec![1.6, 1.1, 1.3]), Some(1.3));
        assert_eq!(median(vec![1.5, 1.0, 1.25, 1.75]), Some(1.375));
    }

    #[test]
    fn the_target_is_judged_on_the_median_herd() {
        let herd = |ratio: f64| {
            let mut o = Outcome::new("W1", "sqlite", json!({"jobs": 10}));
            o.metric("time_vs_ceiling", ratio);
            o.metric("last_task_consumed_s", ratio / 2.0);
            o
        };
        let met = summarize(Backend::Sqlite, 10, &[herd(1.9), herd(1.2), herd(1.25)]);
        assert_eq!(met.metrics["time_vs_ceiling_median"], json!(1.25));
        assert!(met.checks[0].met, "{met:?}");
        let missed = summarize(Backend::Sqlite, 10, &[herd(1.9), herd(1.2), herd(1.5)]);
        assert!(!missed.checks[0].met, "{missed:?}");
        // A herd that did not complete (no ratio) fails the target.
        let broken = Outcome::new("W1", "sqlite", json!({}));
        let incomplete = summarize(Backend::Sqlite, 10, &[herd(1.0), broken]);
        assert!(!incomplete.checks[0].met, "{incomplete:?}");
    }
}
