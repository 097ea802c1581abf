//! W2, steady rate: `m` jobs each firing every second, their phases spread evenly over
//! the second, for `secs` seconds after a warm-up. Measures fires expected, recorded and
//! consumed, lateness, and chimed's CPU time and peak memory, then the broker's own
//! lateness at the same rate ([`paced`]) to compare with.

use std::time::Duration;

use chime_scheduler::telemetry::{REPLY_LAG, REPUBLISHES, REPUBLISHES_WITHHELD};
use chrono::Utc;
use serde_json::json;

use crate::api::{metric, metric_total};
use crate::bench::{
    Backend, bounded, cpu_cost,
    disk::DiskWatch,
    paced,
    probe::{self, Probe},
    process::{MachineCpu, ProcessSample},
    progress::Progress,
    report::Outcome,
    stage::{GROUP, Stage},
    stats::median,
};

use super::{Shortfall, account_fires, bench_job, lateness, to_ms};

/// Warm-up after start before the measured window (start-up catch-up fires excluded).
const WARM_UP: chrono::Duration = chrono::Duration::seconds(3);
/// A rate is kept up with when every fire of the window is recorded and consumed, the
/// consume lateness p99 stays under this (a backlog that grows through the window shows
/// up as lateness far above it), and the reconciler published nothing again.
const KEEP_UP_P99_MS: f64 = 1000.0;
/// Target lateness p99 at 1 000 fires/s, and at the highest rate the box sustains.
const TARGET_P99_AT_1000_MS: f64 = 10.0;
const TARGET_P99_AT_HIGHEST_MS: f64 = 50.0;

/// Runs W2 with `m` jobs for `secs` seconds on `backend`; `broker_rate` is the ceiling's
/// throughput (messages/s) the rate is compared with. `shortfall` says whether a fire
/// not recorded or consumed in time is an error or only the measure of the rate.
pub async fn run(
    backend: Backend,
    m: usize,
    secs: u32,
    broker_rate: f64,
    shortfall: Shortfall,
) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("W2", backend.as_str(), json!({"jobs": m, "seconds": secs}));
    let progress = Progress::new(format!("W2 {} m={m}", backend.as_str()));
    let stage = Stage::new(backend, &[]).await?;
    let base = to_ms(Utc::now());
    stage
        .seed(
            bench_job("steady", json!({"every": "1s"})),
            m,
            "steady",
            |_| {},
            |i| base + chrono::Duration::milliseconds((i as i64 * 1000) / m as i64),
        )
        .await?;
    let probe = Probe::start(&stage.vhost.amqp_url(), GROUP, "probe");
    let chimed = stage.start_chimed().await;
    let pid = chimed.pid().unwrap_or(0);
    let start = to_ms(Utc::now() + WARM_UP);
    let end = start + chrono::Duration::seconds(secs.into());
    tokio::time::sleep((start - Utc::now()).to_std().unwrap_or_default()).await;
    let before = ProcessSample::read(pid);
    let machine_before = (MachineCpu::read(), std::time::Instant::now());
    let commits_before = stage.db.commits().await?;
    let disk = DiskWatch::start();
    while Utc::now() < end {
        let left = (end - Utc::now()).num_seconds();
        progress.show(|| format!("{left} s left, {} tasks consumed", probe.count()));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let after = ProcessSample::read(pid);
    let disk_stalls = disk.finish();
    progress.say(&format!("window over; {disk_stalls}"));
    let cpu_window_s = machine_before.1.elapsed().as_secs_f64();
    let machine_cpu = MachineCpu::read().since(&machine_before.0, cpu_window_s);
    let commits_after = stage.db.commits().await?;
    let expected = m * secs as usize;
    // Let the window's last fires drain through.
    let receipts = probe.drain_window((start, end), expected).await;
    let records = stage.db.runs_between(start, end).await?;
    // A run the reconciler publishes again was not settled within `republish_after` or
    // its ack timeout: `chimed` fell behind even if every task reached the consumer.
    let metrics = chimed.api.metrics().await;
    let republished = metric_total(&metrics, REPUBLISHES) as u64;
    // Deadlines the reconciler left alone because their replies may still have been
    // queued, and how far behind the reply queue the collector was at the end.
    let withheld_for_replies = metric(
        &metrics,
        &format!(r#"{REPUBLISHES_WITHHELD}{{reason="replies_pending"}}"#),
    );
    let reply_lag_s = metric(&metrics, REPLY_LAG);
    let body_len = probe.body_len();
    probe.stop().await;
    chimed.stop().await;

    let short = account_fires(
        &mut outcome,
        expected,
        &records,
        &receipts,
        (start, end),
        shortfall,
    );
    let window: Vec<_> = receipts
        .into_iter()
        .filter(|r| r.fire_time >= start && r.fire_time < end)
        .collect();
    let (_, consume) = lateness(&mut outcome, &window);
    if let Some(dir) = std::env::var_os("CHIME_BENCH_TIMELINE_DIR") {
        let path = std::path::Path::new(&dir).join(format!(
            "w2-{}-{m}-{}.csv",
            backend.as_str(),
            start.timestamp()
        ));
        probe::write_timeline(&path, &window)?;
        progress.say(&format!("timeline written to {}", path.display()));
    }
    let cpu_s = after.cpu_s - before.cpu_s;
    outcome.metric("fires_per_s", m);
    outcome.metric("rate_vs_ceiling", m as f64 / broker_rate);
    outcome.metric("chimed_cpu_s", cpu_s);
    outcome.metric("chimed_cpu_pct", 100.0 * cpu_s / f64::from(secs));
    // The fires due in the window: its CPU is what they cost (late ones from before it
    // and the ones still draining after it roughly cancel at a steady rate).
    let fire_cost = cpu_cost::per_fire(cpu_s, &machine_cpu, cpu_window_s, expected);
    outcome.metric("cpu_us_per_fire", fire_cost);
    outcome.metric("cpu_pct_by_program", &machine_cpu);
    outcome.metric("disk_stalls", disk_stalls);
    outcome.metric("chimed_peak_rss_mib", after.peak_rss_mib);
    if let (Some(before), Some(after)) = (commits_before, commits_after) {
        outcome.metric(
            "db_commits_per_fire",
            (after - before) as f64 / expected as f64,
        );
    }
    // The broker alone at the same rate, right after: the lateness no scheduler on this
    // machine could beat.
    // It runs as long as Chime's window did, so both are as exposed to the disk's stalls.
    let ceiling = paced::measure(&stage.vhost.amqp_url(), m, secs, body_len).await?;
    outcome.metric(
        "scheduler_cpu_vs_broker_per_message",
        cpu_cost::scheduler_vs_broker(fire_cost, ceiling.broker_cpu_us_per_message),
    );
    outcome.metric("latency_ceiling", &ceiling);
    let p99 = consume.map_or(f64::INFINITY, |s| s.p99_ms);
    if let Some(broker) = ceiling.consume_lateness_ms {
        outcome.metric("consume_p99_vs_ceiling", p99 / broker.p99_ms);
    }
    outcome.metric("republished_runs", republished);
    outcome.metric("withheld_for_replies", withheld_for_replies);
    outcome.metric("reply_lag_s_at_end", reply_lag_s);
    outcome.metric(
        "kept_up",
        short == 0 && p99 <= KEEP_UP_P99_MS && republished == 0,
    );
    // Above 1 000 fires/s the target is for the highest rate sustained, which only a
    // search can tell; [`search`] checks its steps.
    if m <= 1000 && shortfall == Shortfall::Error {
        outcome.check(
            format!("consume lateness p99 <= {TARGET_P99_AT_1000_MS} ms"),
            format!("{p99:.1} ms"),
            p99 <= TARGET_P99_AT_1000_MS,
        );
    }
    stage.db.close().await;
    Ok(outcome)
}

/// The 10 ms target over `runs`, repeated runs of W2 at `m` (at most 1 000) fires/s on
/// `backend`: judged on the median of their p99s, beside the broker alone's median.
pub fn summarize(backend: Backend, m: usize, secs: u32, runs: &[Outcome]) -> Outcome {
    let mut summary = Outcome::new(
        "W2",
        backend.as_str(),
        json!({"jobs": m, "seconds": secs, "repeats": runs.len()}),
    );
    let steps: Vec<Step> = runs.iter().map(|run| Step::of(m, run)).collect();
    let p99s: Vec<f64> = steps.iter().map(|step| step.chime_p99_ms).collect();
    summary.metric("consume_p99_ms_per_run", &p99s);
    let median_run = median_step(m, &steps);
    summary.metric("consume_p99_ms_median", median_run.chime_p99_ms);
    summary.metric("broker_alone_p99_ms_median", median_run.broker_p99_ms);
    summary.check(
        format!("median consume lateness p99 <= {TARGET_P99_AT_1000_MS} ms"),
        format!(
            "{:.1} ms over {} runs (the broker alone: {:.1} ms)",
            median_run.chime_p99_ms,
            runs.len(),
            median_run.broker_p99_ms.unwrap_or(f64::NAN)
        ),
        median_run.chime_p99_ms <= TARGET_P99_AT_1000_MS,
    );
    summary
}

/// One step of the search: Chime and the broker alone at one rate.
#[derive(Debug, Clone)]
struct Step {
    rate: usize,
    kept_up: bool,
    chime_p99_ms: f64,
    broker_p99_ms: Option<f64>,
    /// The longest disk stall in Chime's windows and in the broker alone's, ms.
    longest_disk_stall_ms: (f64, f64),
}

/// Looks for the highest rate the box sustains: runs W2 `repeats` times at each of
/// `rates` (ascending) for `secs` seconds, stopping after the first rate Chime does not
/// keep up with. Returns every run's outcome, then a summary that judges the target.
///
/// The box sustains a rate within the target when the broker alone, on this machine,
/// delivers it with a p99 of at most [`TARGET_P99_AT_HIGHEST_MS`]: that is the physical
/// limit, and no client of the broker gets lower. The target is met when Chime is within
/// it too at the highest such rate of the search. The highest rate Chime merely keeps up
/// with (no fire lost, p99 under [`KEEP_UP_P99_MS`]) is reported beside it, with its p99
/// against the broker's: near saturation the broker alone is far above 50 ms as well.
/// With repeats, each rate is judged on the medians of its runs (see [`median_step`]):
/// a single 20 s step at these rates swings with the box's stalls, the broker's too.
pub async fn search(
    backend: Backend,
    rates: &[usize],
    secs: u32,
    repeats: usize,
    broker_rate: f64,
) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    let mut steps = Vec::new();
    'rates: for &m in rates {
        let mut runs = Vec::new();
        for _ in 0..repeats.max(1) {
            let outcome =
                match bounded(run(backend, m, secs, broker_rate, Shortfall::Measured)).await {
                    Ok(outcome) => outcome,
                    Err(error) => {
                        eprintln!("[bench] W2 search at {m}/s failed: {error:#}");
                        let mut failed = Outcome::new("W2", backend.as_str(), json!({"jobs": m}));
                        failed.errors.push(format!("did not complete: {error:#}"));
                        outcomes.push(failed);
                        break 'rates;
                    }
                };
            runs.push(Step::of(m, &outcome));
            outcomes.push(outcome);
        }
        let step = median_step(m, &runs);
        let kept_up = step.kept_up;
        steps.push(step);
        if !kept_up {
            break;
        }
    }
    outcomes.push(search_summary(backend, rates, secs, repeats, &steps));
    outcomes
}

impl Step {
    /// The step one W2 run's outcome at `rate` measured.
    fn of(rate: usize, outcome: &Outcome) -> Self {
        let ms = |name: &str, at: &str| outcome.metrics.get(name)?.pointer(at)?.as_f64();
        Self {
            rate,
            kept_up: outcome.metrics.get("kept_up").and_then(|v| v.as_bool()) == Some(true),
            chime_p99_ms: ms("consume_lateness_ms", "/p99_ms").unwrap_or(f64::INFINITY),
            broker_p99_ms: ms("latency_ceiling", "/consume_lateness_ms/p99_ms"),
            longest_disk_stall_ms: (
                ms("disk_stalls", "/longest_ms").unwrap_or(0.0),
                ms("latency_ceiling", "/disk_stalls/longest_ms").unwrap_or(0.0),
            ),
        }
    }
}

/// One rate's runs as one step: kept up with when most runs kept up, and the median p99
/// of Chime's runs and of the broker alone's.
fn median_step(rate: usize, runs: &[Step]) -> Step {
    Step {
        rate,
        kept_up: 2 * runs.iter().filter(|run| run.kept_up).count() > runs.len(),
        chime_p99_ms: median(runs.iter().map(|run| run.chime_p99_ms).collect())
            .unwrap_or(f64::INFINITY),
        broker_p99_ms: median(runs.iter().filter_map(|run| run.broker_p99_ms).collect()),
        longest_disk_stall_ms: runs.iter().fold((0.0, 0.0), |(chime, broker), run| {
            (
                f64::max(chime, run.longest_disk_stall_ms.0),
                f64::max(broker, run.longest_disk_stall_ms.1),
            )
        }),
    }
}

/// Judges the search's steps (see [`search`]).
fn search_summary(
    backend: Backend,
    rates: &[usize],
    secs: u32,
    repeats: usize,
    steps: &[Step],
) -> Outcome {
    let mut summary = Outcome::new(
        "W2",
        backend.as_str(),
        json!({"search": rates, "seconds": secs, "repeats": repeats}),
    );
    let within = |p99: f64| p99 <= TARGET_P99_AT_HIGHEST_MS;
    let chime_ok = |step: &Step| step.kept_up && within(step.chime_p99_ms);
    let highest_kept_up = steps.iter().rfind(|step| step.kept_up);
    summary.metric(
        "highest_rate_kept_up",
        highest_kept_up.map(|step| step.rate),
    );
    if let Some(step) = highest_kept_up {
        summary.metric("consume_p99_ms_at_highest", step.chime_p99_ms);
        summary.metric("broker_alone_p99_ms_at_highest", step.broker_p99_ms);
        if let Some(broker) = step.broker_p99_ms {
            summary.metric(
                "consume_p99_vs_broker_at_highest",
                step.chime_p99_ms / broker,
            );
        }
    }
    summary.metric(
        "highest_rate_within_target",
        steps
            .iter()
            .rfind(|step| chime_ok(step))
            .map(|step| step.rate),
    );
    let box_sustains = steps
        .iter()
        .rfind(|step| step.broker_p99_ms.is_some_and(within));
    match box_sustains {
        Some(step) => {
            summary.metric("highest_rate_box_sustains", step.rate);
            summary.metric("consume_p99_ms_at_box_limit", step.chime_p99_ms);
            summary.metric("broker_alone_p99_ms_at_box_limit", step.broker_p99_ms);
            summary.metric(
                "longest_disk_stall_ms_at_box_limit",
                json!({"chime": step.longest_disk_stall_ms.0, "broker_alone": step.longest_disk_stall_ms.1}),
            );
            // Whether the box's limit lies beyond the search: the broker was within the
            // target at every rate searched.
            summary.metric(
                "box_limit_beyond_search",
                steps.len() == rates.len() && steps.iter().all(|s| s.broker_p99_ms.is_some_and(within)),
            );
            summary.check(
                format!(
                    "consume lateness p99 <= {TARGET_P99_AT_HIGHEST_MS} ms at the highest rate the box sustains within it"
                ),
                format!(
                    "{:.1} ms at {}/s (the broker alone: {:.1} ms; longest disk stall in \
                     Chime's windows {:.0} ms, in the broker alone's {:.0} ms)",
                    step.chime_p99_ms,
                    step.rate,
                    step.broker_p99_ms.unwrap_or(f64::NAN),
                    step.longest_disk_stall_ms.0,
                    step.longest_disk_stall_ms.1,
                ),
                chime_ok(step),
            );
        }
        None => summary.check(
            format!(
                "some rate of the search that the broker alone delivers within {TARGET_P99_AT_HIGHEST_MS} ms"
            ),
            "none: search lower rates",
            false,
        ),
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rate: usize, kept_up: bool, chime: f64, broker: f64) -> Step {
        Step {
            rate,
            kept_up,
            chime_p99_ms: chime,
            broker_p99_ms: Some(broker),
            longest_disk_stall_ms: (0.0, 0.0),
        }
    }

    fn judged(steps: &[Step]) -> Outcome {
        let rates: Vec<usize> = steps.iter().map(|s| s.rate).collect();
        search_summary(Backend::Postgres, &rates, 20, 1, steps)
    }

    #[test]
    fn judges_at_the_highest_rate_the_broker_alone_delivers_within_the_target() {
        let summary = judged(&[
            step(2000, true, 12.0, 4.0),
            step(4000, true, 40.0, 30.0),
            step(6000, true, 190.0, 76.0),
            step(8000, false, 2000.0, 180.0),
        ]);
        assert_eq!(summary.metrics["highest_rate_box_sustains"], 4000);
        assert_eq!(summary.metrics["highest_rate_kept_up"], 6000);
        assert_eq!(summary.metrics["highest_rate_within_target"], 4000);
        assert_eq!(summary.metrics["box_limit_beyond_search"], false);
        assert!(summary.checks[0].met, "{:?}", summary.checks);
    }

    #[test]
    fn misses_when_chime_is_slower_than_the_box_at_its_limit() {
        let summary = judged(&[step(2000, true, 12.0, 4.0), step(4000, true, 60.0, 30.0)]);
        assert_eq!(summary.metrics["highest_rate_box_sustains"], 4000);
        assert_eq!(summary.metrics["box_limit_beyond_search"], true);
        assert!(!summary.checks[0].met);
    }

    #[test]
    fn misses_when_chime_falls_behind_where_the_broker_alone_keeps_within_the_target() {
        let summary = judged(&[step(2000, true, 12.0, 4.0), step(4000, false, 30.0, 20.0)]);
        assert_eq!(summary.metrics["highest_rate_box_sustains"], 4000);
        assert_eq!(summary.metrics["highest_rate_kept_up"], 2000);
        assert!(!summary.checks[0].met);
    }

    #[test]
    fn cannot_be_met_when_the_broker_alone_misses_at_every_rate() {
        let summary = judged(&[step(4000, true, 118.0, 93.0)]);
        assert!(!summary.metrics.contains_key("highest_rate_box_sustains"));
        assert_eq!(summary.checks.len(), 1);
        assert!(!summary.checks[0].met);
    }

    #[test]
    fn a_rate_run_several_times_is_judged_on_its_medians() {
        let step = median_step(
            6000,
            &[
                step(6000, true, 44.7, 23.5),
                step(6000, true, 73.1, 22.2),
                step(6000, true, 35.0, 160.0),
            ],
        );
        assert!(step.kept_up);
        assert_eq!(step.chime_p99_ms, 44.7);
        assert_eq!(step.broker_p99_ms, Some(23.5));
        let judged = judged(&[step]);
        assert!(judged.checks[0].met, "{:?}", judged.checks);
    }

    #[test]
    fn a_step_reports_the_longest_disk_stall_of_its_runs_beside_its_verdict() {
        let with_stalls = |chime: f64, chime_stall: f64, broker: f64, broker_stall: f64| {
            let mut outcome = measured(chime, broker);
            outcome.metric("disk_stalls", json!({"longest_ms": chime_stall}));
            outcome.metric(
                "latency_ceiling",
                json!({"consume_lateness_ms": {"p99_ms": broker}, "disk_stalls": {"longest_ms": broker_stall}}),
            );
            Step::of(3000, &outcome)
        };
        let step = median_step(
            3000,
            &[
                with_stalls(88.0, 226.0, 14.0, 62.0),
                with_stalls(41.0, 210.0, 43.0, 440.0),
            ],
        );
        assert_eq!(step.longest_disk_stall_ms, (226.0, 440.0));
        let judged = judged(&[step]);
        assert_eq!(
            judged.metrics["longest_disk_stall_ms_at_box_limit"],
            json!({"chime": 226.0, "broker_alone": 440.0})
        );
        let measured = &judged.checks[0].measured;
        assert!(
            measured.contains("Chime's windows 226 ms, in the broker alone's 440 ms"),
            "{measured}"
        );
    }

    #[test]
    fn a_rate_is_kept_up_with_only_when_most_of_its_runs_kept_up() {
        let runs = [
            step(8000, true, 400.0, 30.0),
            step(8000, false, 1900.0, 52.0),
        ];
        let split = median_step(8000, &runs);
        assert!(!split.kept_up, "one of two is not most");
        assert_eq!(split.broker_p99_ms, Some(41.0));
        let most = median_step(8000, &[runs[0].clone(), runs[0].clone(), runs[1].clone()]);
        assert!(most.kept_up);
        assert_eq!(most.chime_p99_ms, 400.0);
    }

    /// A W2 run's outcome as the harness reports it, with only the p99s set.
    fn measured(chime: f64, broker: f64) -> Outcome {
        let mut outcome = Outcome::new("W2", "postgres", json!({"jobs": 1000}));
        outcome.metric("kept_up", true);
        outcome.metric("consume_lateness_ms", json!({"p99_ms": chime}));
        outcome.metric(
            "latency_ceiling",
            json!({"consume_lateness_ms": {"p99_ms": broker}}),
        );
        outcome
    }

    #[test]
    fn repeated_runs_at_1000_per_second_are_judged_on_their_median_p99() {
        let stalled = [measured(8.2, 3.1), measured(26.0, 3.8), measured(9.6, 4.4)];
        let summary = summarize(Backend::Postgres, 1000, 20, &stalled);
        assert_eq!(summary.metrics["consume_p99_ms_median"], 9.6);
        assert_eq!(summary.metrics["broker_alone_p99_ms_median"], 3.8);
        assert!(
            summary.checks[0].met,
            "one stalled run of three does not decide"
        );
        let slow = [measured(12.0, 3.1), measured(26.0, 3.8), measured(9.6, 4.4)];
        assert!(!summarize(Backend::Postgres, 1000, 20, &slow).checks[0].met);
    }
}
