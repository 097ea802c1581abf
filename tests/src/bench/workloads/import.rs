//! W7, job import under load: while W2's stage fires `firing` jobs every second, import
//! `import` jobs in one `POST /v1/jobs/batch` and time it (target ≤ 5 s for 10 000), then
//! create jobs one by one from [`CLIENTS`] concurrent clients for `create_secs` seconds
//! and report the rate (target ≥ 200/s). The fires due meanwhile are accounted as W2's
//! are: none may be lost or duplicated, and their lateness shows what the import cost
//! the firing.

use std::time::{Duration, Instant};

use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::Api;
use crate::bench::{
    Backend,
    probe::Probe,
    progress::Progress,
    report::Outcome,
    stage::{GROUP, Stage},
};

use super::{Shortfall, account_fires, bench_job, lateness, to_ms};

/// Warm-up after start before the measured window (start-up catch-up fires excluded).
const WARM_UP: chrono::Duration = chrono::Duration::seconds(3);
/// Concurrent clients creating jobs one by one.
pub const CLIENTS: usize = 4;
/// The import of 10 000 jobs must take at most this long.
const TARGET_IMPORT_S: f64 = 5.0;
/// Single creates under load must go at least this fast.
const TARGET_CREATES_PER_S: f64 = 200.0;

/// W7's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Jobs firing every second meanwhile (W2's load).
    pub firing: usize,
    /// Jobs imported in the one batch.
    pub import: usize,
    /// Seconds of single creates.
    pub create_secs: u32,
}

/// Runs W7 on `backend`.
pub async fn run(backend: Backend, sizes: Sizes) -> anyhow::Result<Outcome> {
    let Sizes {
        firing,
        import,
        create_secs,
    } = sizes;
    let mut outcome = Outcome::new(
        "W7",
        backend.as_str(),
        json!({"firing_jobs": firing, "imported_jobs": import, "create_seconds": create_secs,
               "create_clients": CLIENTS}),
    );
    let progress = Progress::new(format!("W7 {} import={import}", backend.as_str()));
    let stage = Stage::new(backend, &[]).await?;
    let base = to_ms(Utc::now());
    stage
        .seed(
            bench_job("steady", json!({"every": "1s"})),
            firing,
            "steady",
            |_| {},
            |i| base + chrono::Duration::milliseconds((i as i64 * 1000) / firing as i64),
        )
        .await?;
    let probe = Probe::start(&stage.vhost.amqp_url(), GROUP, "probe");
    let chimed = stage.start_chimed().await;
    let start = to_ms(Utc::now() + WARM_UP);
    tokio::time::sleep((start - Utc::now()).to_std().unwrap_or_default()).await;

    // The import: one request, all or none.
    let jobs: Vec<Value> = (0..import)
        .map(|i| bench_job(&format!("imported-{i}"), json!({"every": "1h"})))
        .collect();
    let body = json!({ "jobs": jobs });
    progress.say(&format!("importing {import} jobs"));
    let began = Instant::now();
    let (status, answer) = chimed
        .api
        .call(Method::POST, "/v1/jobs/batch", Some(&body))
        .await;
    let import_s = began.elapsed().as_secs_f64();
    let created = answer["items"].as_array().map_or(0, Vec::len);
    if status != StatusCode::CREATED || created != import {
        let text = answer.to_string();
        anyhow::bail!(
            "the import answered {status} with {created} jobs: {}",
            &text[..text.len().min(500)]
        );
    }
    outcome.metric("import_s", import_s);
    outcome.metric("imported_jobs_per_s", import as f64 / import_s);
    outcome.check(
        format!("import of {import} jobs <= {TARGET_IMPORT_S} s"),
        format!("{import_s:.2} s"),
        import_s <= TARGET_IMPORT_S,
    );

    // Single creates from concurrent clients.
    progress.say(&format!(
        "single creates for {create_secs} s, {CLIENTS} clients"
    ));
    let until = Instant::now() + Duration::from_secs(create_secs.into());
    let began = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| tokio::spawn(create_until(chimed.api.clone(), client, until)))
        .collect();
    let mut creates = 0;
    for client in clients {
        creates += client.await??;
    }
    let create_s = began.elapsed().as_secs_f64();
    let rate = creates as f64 / create_s;
    outcome.metric("single_creates", creates);
    outcome.metric("single_creates_per_s", rate);
    outcome.check(
        format!("single creates under load >= {TARGET_CREATES_PER_S}/s"),
        format!("{rate:.0}/s"),
        rate >= TARGET_CREATES_PER_S,
    );

    // The fires due from the start up to the next whole second after the creates.
    let secs = (Utc::now() - start).num_milliseconds().div_euclid(1000) + 1;
    let end = start + chrono::Duration::seconds(secs);
    tokio::time::sleep((end - Utc::now()).to_std().unwrap_or_default()).await;
    let expected = firing * secs as usize;
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
    stage.db.close().await;
    Ok(outcome)
}

/// Creates jobs one by one through `api` until `until`; returns how many. Any answer but
/// 201 fails the workload.
async fn create_until(api: Api, client: usize, until: Instant) -> anyhow::Result<usize> {
    let mut created = 0;
    while Instant::now() < until {
        let job = bench_job(
            &format!("single-{client}-{created}"),
            json!({"every": "1h"}),
        );
        let (status, answer) = api.call(Method::POST, "/v1/jobs", Some(&job)).await;
        if status != StatusCode::CREATED {
            anyhow::bail!("a single create answered {status}: {answer}");
        }
        created += 1;
    }
    Ok(created)
}
