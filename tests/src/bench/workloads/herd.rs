//! W1, thundering herd: `n` one-shot jobs all due at the same instant. Measures the time
//! from that instant to the last confirmed publish and to the last consumed task, and
//! compares the latter with the broker's ceiling for `n` messages of the task's size.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use crate::bench::{
    Backend, Ceilings,
    probe::{Probe, ms_between},
    process::{MachineCpu, ProcessSample},
    progress::Progress,
    report::Outcome,
    stage::{GROUP, Stage},
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
    let cpu_before = ProcessSample::read(pid);
    let machine_before = (MachineCpu::read(), std::time::Instant::now());
    let timeout = Duration::from_secs(120 + n as u64 / 200);
    let all = probe.wait_for(n, timeout, &progress).await;
    let receipts = probe.receipts();
    let cpu_after = ProcessSample::read(pid);
    let machine_cpu =
        MachineCpu::read().since(&machine_before.0, machine_before.1.elapsed().as_secs_f64());
    // The dispatcher marks runs dispatched right after their confirms.
    let records = wait_dispatched(&stage, n, instant).await?;
    let body_len = probe.body_len();
    probe.stop().await;
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
    outcome.metric("chimed_cpu_s", cpu_after.cpu_s - cpu_before.cpu_s);
    outcome.metric("cpu_pct_by_program", &machine_cpu);
    outcome.metric("chimed_peak_rss_mib", cpu_after.peak_rss_mib);
    let window = (instant, instant + chrono::Duration::milliseconds(1));
    account_fires(
        &mut outcome,
        n,
        &records,
        &receipts,
        window,
        Shortfall::Error,
    );

    let ceiling = ceilings.get(n, body_len).await?;
    let ratio = consumed_s / ceiling.consume_s;
    outcome.metric("ceiling", ceiling);
    outcome.metric("time_vs_ceiling", ratio);
    outcome.metric("throughput_vs_ceiling", 1.0 / ratio);
    outcome.check(
        format!("last consumed within {TARGET_RATIO}x the ceiling"),
        format!("{ratio:.2}x ({:.0} % of ceiling throughput)", 100.0 / ratio),
        ratio <= TARGET_RATIO,
    );
    stage.db.close().await;
    Ok(outcome)
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
