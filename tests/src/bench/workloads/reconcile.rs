//! W5, reconcile: `overdue` runs dispatched and never acknowledged, beside `finished`
//! finished runs. Measures how long the reconciler takes to publish them all again and
//! how much of the `runs` table chimed reads doing it (PostgreSQL's table statistics).
//! Run beside two histories, a tenth and the whole of `finished`, the reads show whether
//! the work follows the overdue runs or the history ([`summarize`]).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::bench::{
    Backend,
    probe::Probe,
    progress::Progress,
    report::Outcome,
    stage::{GROUP, Stage},
};

use super::bench_job;

const CLONE_CHUNK: i64 = 100_000;
/// How much the rows read per overdue run may grow when the finished history grows
/// tenfold, for the work to count as following the overdue runs. Work that read the
/// history would grow with it, about tenfold; the same work run twice differs by up to
/// about 1.9× (13–25 rows per overdue run across runs), with the marks it can skip.
const MAX_GROWTH_WITH_HISTORY: f64 = 2.0;

/// Runs W5 on PostgreSQL; `broker_rate` is the ceiling's throughput (messages/s).
pub async fn run(overdue: usize, finished: usize, broker_rate: f64) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new(
        "W5",
        Backend::Postgres.as_str(),
        json!({"overdue_runs": overdue, "finished_runs": finished}),
    );
    let progress = Progress::new(format!("W5 overdue={overdue}"));
    let stage = Stage::new(Backend::Postgres, &[]).await?;
    let template = finished_template(&stage).await?;
    let pool = stage.db.postgres()?.clone();
    clone_runs(&pool, template, finished, &progress, FINISHED).await?;
    clone_runs(&pool, template, overdue, &progress, OVERDUE).await?;
    sqlx::query("ANALYZE runs").execute(&pool).await?;
    let before = table_stats(&pool).await?;

    let probe = Probe::start(&stage.vhost.amqp_url(), GROUP, "probe");
    let started = Instant::now();
    let chimed = stage.start_chimed().await;
    let ready_s = started.elapsed().as_secs_f64();
    let all = probe
        .wait_for(
            overdue,
            Duration::from_secs(120 + overdue as u64 / 100),
            &progress,
        )
        .await;
    let republished_s = started.elapsed().as_secs_f64();
    // Waits on chimed's own counter: polling the table would add reads to the measure.
    let deadline = Instant::now() + Duration::from_secs(120);
    while results_recorded(&chimed).await < overdue as f64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled_s = started.elapsed().as_secs_f64();
    let receipts = probe.receipts();
    probe.stop().await;
    chimed.stop().await;
    let after = settled_stats(&pool).await?;

    let succeeded = stage.db.succeeded_runs().await?;
    outcome.require(
        "overdue_runs_not_succeeded",
        (finished + overdue + 1).saturating_sub(succeeded as usize),
    );
    let republished = receipts.iter().filter(|r| r.attempt == 2).count();
    outcome.metric("ready_s", ready_s);
    outcome.metric("all_republished_s", republished_s);
    outcome.metric("all_settled_s", settled_s);
    outcome.metric(
        "republish_rate_per_s",
        overdue as f64 / (republished_s - ready_s),
    );
    outcome.metric(
        "republish_rate_vs_ceiling",
        overdue as f64 / (republished_s - ready_s) / broker_rate,
    );
    let delta = |key: &str| after[key].as_i64().unwrap_or(0) - before[key].as_i64().unwrap_or(0);
    let rows_read = delta("seq_tup_read") + delta("idx_tup_fetch");
    outcome.metric("runs_seq_scans", delta("seq_scan"));
    outcome.metric("runs_rows_read", rows_read);
    outcome.metric(
        "runs_rows_read_per_overdue",
        rows_read as f64 / overdue as f64,
    );
    outcome.metric("transactions", delta("xact_commit"));
    outcome.require(
        "overdue_runs_not_republished",
        overdue.saturating_sub(republished),
    );
    if !all {
        progress.say("not every overdue run was published again in time");
    }
    outcome.check(
        "no sequential scan of runs",
        format!(
            "{} seq scans, {:.1} rows read per overdue run",
            delta("seq_scan"),
            rows_read as f64 / overdue as f64
        ),
        delta("seq_scan") == 0,
    );
    prune(&stage, finished, &mut outcome).await?;
    stage.db.close().await;
    Ok(outcome)
}

/// The W5 runs beside a smaller and a larger history (`runs`, ascending by finished
/// runs) judged together: the work follows the overdue runs when the rows read per
/// overdue run grow by at most [`MAX_GROWTH_WITH_HISTORY`] from the smallest history
/// to the largest, and no run scanned the table.
pub fn summarize(runs: &[Outcome]) -> Outcome {
    let param = |run: &Outcome, key: &str| run.params.get(key).and_then(Value::as_u64);
    let finished: Vec<Option<u64>> = runs.iter().map(|run| param(run, "finished_runs")).collect();
    let mut summary = Outcome::new(
        "W5",
        Backend::Postgres.as_str(),
        json!({"finished_runs": finished, "overdue_runs": runs.first().and_then(|run| param(run, "overdue_runs"))}),
    );
    let metric = |run: &Outcome, key: &str| run.metrics.get(key).and_then(Value::as_f64);
    let per_overdue: Vec<Option<f64>> = runs
        .iter()
        .map(|run| metric(run, "runs_rows_read_per_overdue"))
        .collect();
    summary.metric("runs_rows_read_per_overdue", &per_overdue);
    let seq_scans: f64 = runs
        .iter()
        .map(|run| metric(run, "runs_seq_scans").unwrap_or(f64::INFINITY))
        .sum();
    let growth = last_over_first(&per_overdue);
    let history: Vec<Option<f64>> = finished.iter().map(|f| f.map(|n| n as f64)).collect();
    summary.metric("rows_read_growth_with_history", growth);
    summary.check(
        "work follows the overdue runs, not the history",
        match growth {
            Some(growth) => format!(
                "rows read per overdue run x{growth:.2} with a {:.0}x history, {seq_scans} seq scans",
                last_over_first(&history).unwrap_or(f64::NAN)
            ),
            None => "not measured (a run did not complete)".into(),
        },
        growth.is_some_and(|growth| growth <= MAX_GROWTH_WITH_HISTORY) && seq_scans == 0.0,
    );
    summary
}

/// The last of `values` over the first, when there are two or more, both were
/// measured and the first is not zero.
fn last_over_first(values: &[Option<f64>]) -> Option<f64> {
    match (values.first()?, values.last()?) {
        (Some(first), Some(last)) if values.len() > 1 && *first > 0.0 => Some(last / first),
        _ => None,
    }
}

/// Restarts chimed with a one-hour retention: the day-old finished runs are pruned in
/// batches. Records how long that took.
async fn prune(stage: &Stage, finished: usize, outcome: &mut Outcome) -> anyhow::Result<()> {
    let before = stage.db.succeeded_runs().await?;
    let started = Instant::now();
    let chimed = crate::Chimed::start(stage.config.clone().env("CHIME_RUN_RETENTION", "1h")).await;
    let deadline = Instant::now() + Duration::from_secs(60 + finished as u64 / 1000);
    let mut left = before;
    while left > before - finished as i64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        left = stage.db.succeeded_runs().await?;
    }
    let prune_s = started.elapsed().as_secs_f64();
    chimed.stop().await;
    let pruned = before - left;
    outcome.metric("retention_pruned_runs", pruned);
    outcome.metric("retention_prune_s", prune_s);
    outcome.metric("retention_prune_rate_per_s", pruned as f64 / prune_s);
    outcome.require(
        "expired_runs_not_pruned",
        (finished as i64 - pruned).max(0) as usize,
    );
    Ok(())
}

/// Results chimed recorded since it started (`chime_results_total`, every state).
async fn results_recorded(chimed: &crate::Chimed) -> f64 {
    chimed
        .api
        .metrics()
        .await
        .lines()
        .filter(|l| l.starts_with("chime_results_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One succeeded run to copy: a job fired once by hand and run by a probe.
async fn finished_template(stage: &Stage) -> anyhow::Result<Uuid> {
    let probe = Probe::start(&stage.vhost.amqp_url(), GROUP, "template");
    let chimed = stage.start_chimed().await;
    let mut job = bench_job("reconcile", json!({"every": "24h"}));
    // A JSON null payload would not survive the row copy (it becomes SQL NULL).
    job["payload"] = json!({"batch": "nightly"});
    let job = chimed.api.create_job(job).await;
    let job_id = job["id"].as_str().unwrap_or_default().to_string();
    let run = chimed.api.trigger(&job_id).await;
    let run_id = run["id"].as_str().unwrap_or_default().to_string();
    chimed
        .api
        .wait_run(&run_id, "the template run to succeed", |r| {
            r["state"] == "succeeded"
        })
        .await;
    probe.stop().await;
    chimed.stop().await;
    Ok(run_id.parse()?)
}

/// Finished copies: succeeded a day ago.
const FINISHED: &str = "jsonb_build_object('id', gen_random_uuid(),
    'fire_time', r.fire_time - make_interval(secs => g),
    'finished_at', now() - interval '1 day')";
/// Overdue copies: dispatched an hour ago, never acknowledged.
const OVERDUE: &str = "jsonb_build_object('id', gen_random_uuid(),
    'fire_time', r.fire_time + make_interval(secs => g),
    'state', 'dispatched', 'attempt', 1,
    'dispatched_at', now() - interval '1 hour',
    'due_at', now() - interval '1 hour' + make_interval(secs => r.ack_timeout_ms / 1000.0),
    'acked_at', null, 'finished_at', null, 'consumer', null, 'output', null,
    'error', null, 'history', '[]'::jsonb)";

/// Inserts `count` copies of run `template` with the columns `changes` sets.
async fn clone_runs(
    pool: &PgPool,
    template: Uuid,
    count: usize,
    progress: &Progress,
    changes: &str,
) -> anyhow::Result<()> {
    let sql = format!(
        "INSERT INTO runs SELECT (jsonb_populate_record(NULL::runs, to_jsonb(r) || {changes})).*
         FROM runs r, generate_series($2::bigint, $3::bigint) g WHERE r.id = $1"
    );
    let count = count as i64;
    for from in (1..=count).step_by(CLONE_CHUNK as usize) {
        let to = (from + CLONE_CHUNK - 1).min(count);
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(template)
            .bind(from)
            .bind(to)
            .execute(pool)
            .await?;
        progress.show(|| format!("inserted {to}/{count} runs"));
    }
    Ok(())
}

/// Reads of the `runs` table and commits of the database so far.
async fn table_stats(pool: &PgPool) -> anyhow::Result<Value> {
    let row = sqlx::query(
        "SELECT coalesce(t.seq_scan, 0) AS seq_scan, coalesce(t.seq_tup_read, 0) AS seq_tup_read,
                coalesce(t.idx_tup_fetch, 0) AS idx_tup_fetch, d.xact_commit
         FROM pg_stat_user_tables t, pg_stat_database d
         WHERE t.relname = 'runs' AND d.datname = current_database()",
    )
    .fetch_one(pool)
    .await?;
    Ok(json!({
        "seq_scan": row.try_get::<i64, _>("seq_scan")?,
        "seq_tup_read": row.try_get::<i64, _>("seq_tup_read")?,
        "idx_tup_fetch": row.try_get::<i64, _>("idx_tup_fetch")?,
        "xact_commit": row.try_get::<i64, _>("xact_commit")?,
    }))
}

/// How often the statistics are read while they settle (PostgreSQL 15 flushes a
/// session's counters about once a second).
const STATS_POLL: Duration = Duration::from_secs(1);

/// [`table_stats`] once the statistics stopped moving (closed sessions flush theirs
/// within a second or so).
async fn settled_stats(pool: &PgPool) -> anyhow::Result<Value> {
    let mut last = table_stats(pool).await?;
    for _ in 0..10 {
        tokio::time::sleep(STATS_POLL).await;
        let now = table_stats(pool).await?;
        if now["idx_tup_fetch"] == last["idx_tup_fetch"]
            && now["seq_tup_read"] == last["seq_tup_read"]
        {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(finished: usize, rows_per_overdue: f64, seq_scans: i64) -> Outcome {
        let mut run = Outcome::new(
            "W5",
            "postgres",
            json!({"overdue_runs": 10_000, "finished_runs": finished}),
        );
        run.metric("runs_rows_read_per_overdue", rows_per_overdue);
        run.metric("runs_seq_scans", seq_scans);
        run
    }

    fn verdict(runs: &[Outcome]) -> bool {
        let summary = summarize(runs);
        assert_eq!(summary.checks.len(), 1, "{:?}", summary.checks);
        summary.checks[0].met
    }

    #[test]
    fn reads_that_stay_flat_as_the_history_grows_follow_the_overdue_runs() {
        let summary = summarize(&[run(10_000, 13.6, 0), run(100_000, 13.7, 0)]);
        let growth = summary.metrics["rows_read_growth_with_history"].as_f64();
        assert!(growth.is_some_and(|g| (g - 13.7 / 13.6).abs() < 1e-9));
        assert!(summary.checks[0].met);
        assert!(summary.checks[0].measured.contains("10x history"));
    }

    #[test]
    fn reads_that_grow_with_the_history_or_a_table_scan_miss() {
        assert!(!verdict(&[run(10_000, 13.6, 0), run(100_000, 120.0, 0)]));
        assert!(!verdict(&[run(10_000, 13.6, 0), run(100_000, 13.6, 1)]));
    }

    #[test]
    fn a_run_that_did_not_complete_is_not_a_pass() {
        let failed = Outcome::new("W5", "postgres", json!({}));
        assert!(!verdict(&[run(10_000, 13.6, 0), failed]));
        assert!(!verdict(&[run(100_000, 13.6, 0)]));
    }
}
