//! W3, idle scale: `n` jobs not due for months (a yearly cron) plus `due` jobs firing
//! every second. Measures start-up to ready, idle CPU and memory with only the idle jobs,
//! then the lateness of the due jobs and CPU under that load.

use std::time::{Duration, Instant};

use chrono::{Datelike, TimeZone, Utc};
use futures_util::future::join_all;
use serde_json::json;

use crate::bench::{
    Backend,
    probe::Probe,
    process::ProcessSample,
    progress::Progress,
    report::Outcome,
    stage::{GROUP, Stage},
};

use super::{Shortfall, account_fires, bench_job, lateness, to_ms};

/// Time after ready that is left out of the idle sample.
const STARTUP_SETTLE: Duration = Duration::from_secs(2);
/// How long idle CPU is sampled.
const IDLE_SAMPLE: Duration = Duration::from_secs(10);

/// Runs W3 with `n` idle jobs, `due` every-second jobs measured for `secs` seconds.
pub async fn run(backend: Backend, n: usize, due: usize, secs: u32) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(
        "W3",
        backend.as_str(),
        json!({"idle_jobs": n, "due_jobs": due, "seconds": secs}),
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
    tokio::time::sleep(IDLE_SAMPLE).await;
    let idle = ProcessSample::read(pid);
    let idle_cpu_pct = 100.0 * (idle.cpu_s - before.cpu_s) / IDLE_SAMPLE.as_secs_f64();
    outcome.metric("ready_s", ready_s);
    outcome.metric("idle_cpu_pct", idle_cpu_pct);
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
