//! W4, failover: three chimed nodes on PostgreSQL with their default lease settings and
//! `m` jobs firing every second, consumed by three consumer instances with the library's
//! default in-memory idempotency store; one node gets SIGKILL. Measures the gap (the
//! longest interval without a published fire for the dead node's jobs), lost fires,
//! duplicate handler runs (one task run by two instances: an error) and duplicate
//! publishes (`duplicate_publishes`: every task delivered again, whether another instance
//! ran it or the same instance answered it from its idempotency store).

use std::{collections::HashSet, time::Duration};

use chrono::Utc;
use reqwest::Method;
use serde_json::{Value, json};

use chime_scheduler::cluster::shard_of;

use crate::{
    Chimed,
    bench::{
        Backend, consumer_metrics,
        probe::{Probe, drain_all, duplicate_runs, ms_between},
        progress::Progress,
        report::Outcome,
        stage::{GROUP, Stage},
        stats::longest_gap,
    },
    cluster::balanced,
    wait,
};

use super::{Shortfall, account_fires, bench_job, lateness, to_ms};

const NODES: usize = 3;
/// Consumer instances, each with its own in-memory idempotency store.
const CONSUMERS: usize = 3;
/// Largest gap that meets the target.
const TARGET_GAP_S: f64 = 3.0;

/// Overrides the scale's job count (fires per second), e.g. `200` for issue 34's rate.
const JOBS_ENV: &str = "CHIME_BENCH_W4_JOBS";

/// Runs W4 with `m` jobs (or [`JOBS_ENV`]'s): `before` seconds of steady firing, then a
/// SIGKILL, then `after` seconds.
pub async fn run(m: usize, before: u32, after: u32) -> anyhow::Result<Outcome> {
    let m = match std::env::var(JOBS_ENV) {
        Ok(value) => value
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| anyhow::anyhow!("{JOBS_ENV} must be a positive whole number"))?,
        Err(_) => m,
    };
    let mut outcome = Outcome::new(
        "W4",
        Backend::Postgres.as_str(),
        json!({"nodes": NODES, "jobs": m, "seconds_before_kill": before, "seconds_after_kill": after}),
    );
    let progress = Progress::new(format!("W4 m={m}"));
    let stage = Stage::new(Backend::Postgres, &[]).await?;
    let base = to_ms(Utc::now());
    stage
        .seed(
            bench_job("failover", json!({"every": "1s"})),
            m,
            "failover",
            |_| {},
            |i| base + chrono::Duration::milliseconds((i as i64 * 1000) / m as i64),
        )
        .await?;
    let probes: Vec<Probe> = (1..=CONSUMERS)
        .map(|i| Probe::start(&stage.vhost.amqp_url(), GROUP, &format!("probe-{i}")))
        .collect();
    let mut nodes: Vec<Option<Chimed>> = Vec::new();
    for _ in 0..NODES {
        nodes.push(Some(stage.start_chimed().await));
    }
    let api = nodes[0].as_ref().expect("node 0").api.clone();
    let status = wait::until("the cluster to balance", Duration::from_secs(60), || {
        let api = api.clone();
        async move {
            let (_, status) = api.call(Method::GET, "/v1/cluster", None).await;
            balanced(&status, NODES).then_some(status)
        }
    })
    .await;
    let start = to_ms(Utc::now() + chrono::Duration::seconds(1));
    progress.say("balanced; firing steadily before the kill");
    // The workload's measured phases: steady firing before and after the kill.
    tokio::time::sleep(Duration::from_secs(before.into())).await;

    // Counted from the kill on.
    consumer_metrics::replayed_since_last();
    let victim = nodes[1].take().expect("node 1");
    let victim_id = victim.node_id().await;
    let shard_count = status["shard_count"].as_u64().unwrap_or(0) as u32;
    let victim_shards: HashSet<u32> = shards_of(&status, &victim_id);
    let killed_at = Utc::now();
    victim.kill().await;
    progress.say(&format!(
        "killed {victim_id} holding {} shards",
        victim_shards.len()
    ));
    tokio::time::sleep(Duration::from_secs(after.into())).await;
    // A whole number of seconds, so every job has exactly one point per second in it.
    let seconds = (Utc::now() - chrono::Duration::seconds(2) - start).num_seconds();
    let end = start + chrono::Duration::seconds(seconds);
    let expected = m * seconds as usize;
    let receipts = drain_all(&probes, (start, end), expected).await;
    let replayed = consumer_metrics::replayed_since_last();
    let records = stage.db.runs_between(start, end).await?;
    for probe in probes {
        probe.stop().await;
    }
    for node in nodes.into_iter().flatten() {
        node.stop().await;
    }

    account_fires(
        &mut outcome,
        expected,
        &records,
        &receipts,
        (start, end),
        Shortfall::Error,
    );
    let window: Vec<_> = receipts
        .iter()
        .copied()
        .filter(|r| r.fire_time >= start && r.fire_time < end)
        .collect();
    lateness(&mut outcome, &window);
    let cross_instance = duplicate_runs(&window);
    outcome.metric(
        "duplicate_publishes",
        replayed.map(|same_instance| same_instance as usize + cross_instance),
    );
    let orphaned: Vec<_> = window
        .iter()
        .filter(|r| victim_shards.contains(&shard_of(r.job_id, shard_count)))
        .collect();
    let publishes: Vec<f64> = orphaned
        .iter()
        .filter(|r| r.attempt == 1)
        .map(|r| ms_between(killed_at, r.published_at))
        .filter(|ms| *ms > -2000.0)
        .collect();
    let gap_s = longest_gap(&publishes).unwrap_or(f64::INFINITY) / 1000.0;
    let worst_late_s = orphaned
        .iter()
        .filter(|r| r.fire_time >= killed_at)
        .map(|r| r.publish_lateness_ms())
        .fold(0.0, f64::max)
        / 1000.0;
    outcome.metric("dead_node_shards", victim_shards.len());
    outcome.metric("dead_node_fires", orphaned.len());
    outcome.metric("gap_s", gap_s);
    outcome.metric("worst_takeover_lateness_s", worst_late_s);
    outcome.check(
        format!("gap <= {TARGET_GAP_S} s"),
        format!("{gap_s:.2} s"),
        gap_s <= TARGET_GAP_S,
    );
    stage.db.close().await;
    Ok(outcome)
}

fn shards_of(status: &Value, node: &str) -> HashSet<u32> {
    status["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["id"] == node)
        .flat_map(|n| n["shards"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s.as_u64().map(|s| s as u32))
        .collect()
}
