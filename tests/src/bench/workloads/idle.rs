//! W3, idle scale: `idle_jobs` jobs not due for months (a yearly cron) plus `due_jobs`
//! jobs firing every second. Measures start-up to ready, idle CPU and memory with only
//! the idle jobs (`chimed`'s, and each program's on the machine, the database's among
//! them), then the lateness of the due jobs and CPU under that load.

use std::time::{Duration, Instant};

use chrono::{Datelike, TimeZone, Utc};
use futures_util::future::join_all;
use serde_json::json;

use crate::bench::{
    Backend,
    probe::Probe,
    process::{MachineCpu, ProcessSample},
    progress::Progress,
    report::Outcome,
    stage::{GROUP, Stage},
};

use super::{Shortfall, account_fires, bench_job, lateness, to_ms};

/// Time after ready that is left out of the idle sample.
const STARTUP_SETTLE: Duration = Duration::from_secs(2);

/// W3's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Jobs registered and not due for months.
    pub idle_jobs: usize,
    /// How long idle CPU is sampled: 20 s covers every periodic task of an idle
    /// `chimed` at least once (the look-ahead reload every `lookahead / 3`, the
    /// dead-letter sampler every 15 s, the reconciler, lease and heartbeat upkeep).
    pub idle_secs: u64,
    /// Every-second jobs added after the idle sample.
    pub due_jobs: usize,
    /// Seconds the due jobs are measured for.
    pub due_secs: u32,
}

/// Runs W3 with `sizes` on `backend`.
pub async fn run(backend: Backend, sizes: Sizes) -> anyhow::Result<Outcome> {
    let Sizes {
        idle_jobs: n,
        idle_secs,
        due_jobs: due,
        due_secs: secs,
    } = sizes;
    let mut outcome = Outcome::new(
        "W3",
        backend.as_str(),
        json!({"idle_jobs": n, "due_jobs": due, "seconds": secs, "idle_seconds": idle_secs}),
    );
    let progress = Progress::new(format!("W3 {} n={n}", backend.as_str()));
    let stage = Stage::new(backend, &[]).await?;
    let next_year = Utc
        .with_ymd_and_hms(Utc::now().year() + 1, 1, 1, 0, 0, 0)
        .single()
        .expect("new year exists");
    stage
        .seed(
            bench_job("idle", json!({"cron": "0 0 0 1 1 *"})),
            n,
            "idle",
            |_| {},
            |_| next_year,
        )
        .await?;

    let started = Instant::now();
    let chimed = stage.start_chimed().await;
    let ready_s = started.elapsed().as_secs_f64();
    let pid = chimed.pid().unwrap_or(0);
    progress.say(&format!("ready in {ready_s:.2} s; sampling idle CPU"));
    // A measurement window, not a wait for a condition: the first seconds after ready
    // (first look-ahead load, broker declarations) are start-up, not idle.
    tokio::time::sleep(STARTUP_SETTLE).await;
    let before = ProcessSample::read(pid);
    let machine_before = (MachineCpu::read(), Instant::now());
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let idle = ProcessSample::read(pid);
    // Every program's share too: an idle scheduler that keeps its database busy is not
    // idle.
    let idle_by_program =
        MachineCpu::read().since(&machine_before.0, machine_before.1.elapsed().as_secs_f64());
    let idle_cpu_pct = 100.0 * (idle.cpu_s - before.cpu_s) / idle_secs as f64;
    outcome.metric("ready_s", ready_s);
    outcome.metric("idle_cpu_pct", idle_cpu_pct);
    outcome.metric("idle_cpu_pct_by_program", &idle_by_program);
    outcome.metric("idle_rss_mib", idle.rss_mib);

    let probe = Probe::start(&stage.vhost.amqp_url(), GROUP, "probe");
    join_all((0..due).map(|i| {
        chimed
            .api
            .create_job(bench_job(&format!("due-{i}"), json!({"every": "1s"})))
    }))
    .await;
    let start = to_ms(Utc::now() + chrono::Duration::seconds(2));
    let end = start + chrono::Duration::seconds(secs.into());
    tokio::time::sleep((start - Utc::now()).to_std().unwrap_or_default()).await;
    let loaded_before = ProcessSample::read(pid);
    tokio::time::sleep((end - Utc::now()).to_std().unwrap_or_default()).await;
    let loaded = ProcessSample::read(pid);
    let expected = due * secs as usize;
    let receipts = probe.drain_window((start, end), expected).await;
    let records = stage.db.runs_between(start, end).await?;
    probe.stop().await;
    chimed.stop().await;

    account_fires(
        &mut outcome,
        expected,
        &records,
        &receipts,
        (start, end),
        Shortfall::Error,
    );
    let window: Vec<_> = receipts
        .into_iter()
        .filter(|r| r.fire_time >= start && r.fire_time < end)
        .collect();
    lateness(&mut outcome, &window);
    outcome.metric(
        "loaded_cpu_pct",
        100.0 * (loaded.cpu_s - loaded_before.cpu_s) / f64::from(secs),
    );
    outcome.metric("peak_rss_mib", loaded.peak_rss_mib);
    outcome.check("ready <= 5 s", format!("{ready_s:.2} s"), ready_s <= 5.0);
    outcome.check(
        "idle CPU < 1 %",
        format!("{idle_cpu_pct:.2} %"),
        idle_cpu_pct < 1.0,
    );
    outcome.check(
        "RSS <= 150 MB",
        format!("{:.0} MiB", loaded.peak_rss_mib),
        loaded.peak_rss_mib <= 150.0,
    );
    stage.db.close().await;
    Ok(outcome)
}
